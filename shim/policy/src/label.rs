//! Labels and clearances (paper Definition 1).
//!
//! A label `ℓ(x)` of an item and a clearance `c(d)` of a destination host or consumer are both
//! finite sets of tags drawn from the tags the deployer's policy defines. `x` may flow to `d`
//! iff `ℓ(x) ⊆ c(d)`; join is set union. The empty set is "public".

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// One tag of the label lattice, such as `hr` or `finance`.
pub type Tag = Arc<str>;

/// A set of tags: the label of an item or slot entry, or the clearance of a destination or
/// consumer. Kept sorted, so equal sets compare, hash and print alike.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Label(BTreeSet<Tag>);

impl Label {
    /// The empty label: public data, or a clearance for public data only.
    pub fn public() -> Self {
        Self::default()
    }

    /// A label from tag names.
    pub fn of<I, S>(tags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self(tags.into_iter().map(|t| Tag::from(t.as_ref())).collect())
    }

    pub fn is_public(&self) -> bool {
        self.0.is_empty()
    }

    /// `self ⊆ other`: data labelled `self` may flow to a sink cleared `other`.
    pub fn flows_to(&self, clearance: &Label) -> bool {
        self.0.is_subset(&clearance.0)
    }

    /// Join (`⊔`, set union), in place.
    pub fn join(&mut self, other: &Label) {
        if other.0.is_empty() {
            return;
        }
        self.0.extend(other.0.iter().cloned());
    }

    /// Join, returning a new label.
    #[must_use]
    pub fn joined(&self, other: &Label) -> Label {
        let mut l = self.clone();
        l.join(other);
        l
    }

    /// Meet (set intersection): the horizon of a group is the meet of its members' clearances.
    #[must_use]
    pub fn meet(&self, other: &Label) -> Label {
        Label(self.0.intersection(&other.0).cloned().collect())
    }

    pub fn tags(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|t| &**t)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn contains(&self, tag: &str) -> bool {
        self.0.contains(tag)
    }

    /// A canonical text form, `tag1,tag2` (empty for public), used as a storage key.
    pub fn canonical(&self) -> String {
        let mut s = String::new();
        for (i, t) in self.0.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            s.push_str(t);
        }
        s
    }

    /// Parses the canonical form written by [`Label::canonical`].
    pub fn from_canonical(s: &str) -> Self {
        Self::of(s.split(',').filter(|t| !t.is_empty()))
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, t) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(t)?;
        }
        f.write_str("}")
    }
}

impl Serialize for Label {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|t| &**t))
    }
}

impl<'de> Deserialize<'de> for Label {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let tags = Vec::<String>::deserialize(d)?;
        Ok(Label::of(tags))
    }
}

impl FromIterator<Tag> for Label {
    fn from_iter<I: IntoIterator<Item = Tag>>(iter: I) -> Self {
        Label(iter.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flows_join_meet() {
        let hr = Label::of(["hr"]);
        let both = Label::of(["hr", "finance"]);
        assert!(hr.flows_to(&both));
        assert!(!both.flows_to(&hr));
        assert!(Label::public().flows_to(&hr));
        assert_eq!(hr.joined(&Label::of(["finance"])), both);
        assert_eq!(
            both.meet(&Label::of(["finance", "board"])),
            Label::of(["finance"])
        );
        assert_eq!(both.to_string(), "{finance, hr}");
        assert_eq!(Label::from_canonical(&both.canonical()), both);
        assert_eq!(Label::from_canonical(""), Label::public());
    }
}
