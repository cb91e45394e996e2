//! Per-horizon state slots (paper Definition 3, Lemma 1).
//!
//! A slot `σ[κ]` holds state across calls for one (release, user, horizon). A copy of horizon
//! `κ` receives the whole slot at start and may write only to it; every entry is stored with
//! the label `L` the writer had when it wrote. `ℓ(σ)` joins the entries' labels.
//!
//! Slots are durable in SQLite (WAL, `synchronous=FULL`): every write is one transaction, so
//! after a crash or `kill -9` it is either wholly there or absent.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension};

use crate::label::Label;

/// Which slot: one per release (its digest), user and horizon.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlotKey {
    pub release: String,
    /// The user, in a shared deployment; empty otherwise.
    pub user: String,
    pub horizon: Label,
}

/// One stored value with its writer's label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotEntry {
    pub value: Vec<u8>,
    pub label: Label,
}

/// A snapshot of one slot, as delivered to a copy at start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Slot {
    pub entries: BTreeMap<String, SlotEntry>,
}

impl Slot {
    /// `ℓ(σ)`: the join of the entries' labels, `∅` if empty.
    pub fn label(&self) -> Label {
        let mut l = Label::public();
        for e in self.entries.values() {
            l.join(&e.label);
        }
        l
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    #[error("slot store {}: {source}", path.display())]
    Sqlite {
        path: PathBuf,
        source: rusqlite::Error,
    },
    /// Lemma 1 says this cannot happen for a copy the broker tracks correctly; the store
    /// refuses it anyway (fail closed).
    #[error("refused slot write: label {label} lies outside the slot's horizon {horizon}")]
    OutsideHorizon { label: Label, horizon: Label },
    #[error("slot store {}: stored label {stored:?} of key {key:?} is malformed", path.display())]
    Corrupt {
        path: PathBuf,
        key: String,
        stored: String,
    },
}

/// The durable store of every slot.
#[derive(Debug)]
pub struct SlotStore {
    conn: Connection,
    path: PathBuf,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS slot_entry (
    release TEXT NOT NULL,
    user    TEXT NOT NULL,
    horizon TEXT NOT NULL,
    key     TEXT NOT NULL,
    value   BLOB NOT NULL,
    label   TEXT NOT NULL,
    PRIMARY KEY (release, user, horizon, key)
) WITHOUT ROWID;
";

impl SlotStore {
    /// Opens (creating if needed) the store at `path`.
    pub fn open(path: &Path) -> Result<Self, SlotError> {
        let conn = Connection::open(path).map_err(|source| SlotError::Sqlite {
            path: path.into(),
            source,
        })?;
        Self::init(conn, path.to_path_buf())
    }

    /// A store that lives only as long as the process (tests, single-shot runs).
    pub fn in_memory() -> Result<Self, SlotError> {
        let conn = Connection::open_in_memory().map_err(|source| SlotError::Sqlite {
            path: ":memory:".into(),
            source,
        })?;
        Self::init(conn, ":memory:".into())
    }

    fn init(conn: Connection, path: PathBuf) -> Result<Self, SlotError> {
        let wrap = |source| SlotError::Sqlite {
            path: path.clone(),
            source,
        };
        conn.busy_timeout(Duration::from_secs(5)).map_err(wrap)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(wrap)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(wrap)?;
        conn.execute_batch(SCHEMA).map_err(wrap)?;
        Ok(Self { conn, path })
    }

    fn err(&self) -> impl Fn(rusqlite::Error) -> SlotError + '_ {
        move |source| SlotError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    /// The whole slot `σ[κ]`.
    pub fn snapshot(&self, slot: &SlotKey) -> Result<Slot, SlotError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT key, value, label FROM slot_entry WHERE release = ?1 AND user = ?2 AND horizon = ?3",
            )
            .map_err(self.err())?;
        let rows = stmt
            .query_map(
                params![slot.release, slot.user, slot.horizon.canonical()],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, Vec<u8>>(1)?,
                        r.get::<_, String>(2)?,
                    ))
                },
            )
            .map_err(self.err())?;
        let mut out = Slot::default();
        for row in rows {
            let (key, value, label) = row.map_err(self.err())?;
            let label = parse_label(&label).ok_or_else(|| SlotError::Corrupt {
                path: self.path.clone(),
                key: key.clone(),
                stored: label.clone(),
            })?;
            out.entries.insert(key, SlotEntry { value, label });
        }
        Ok(out)
    }

    /// `σ[κ][key] ← (value, label)`.
    pub fn write(
        &mut self,
        slot: &SlotKey,
        key: &str,
        value: &[u8],
        label: &Label,
    ) -> Result<(), SlotError> {
        self.write_all(slot, &[(key, value)], label)
    }

    /// Several writes with one label in one transaction: all land or none does.
    pub fn write_all(
        &mut self,
        slot: &SlotKey,
        kv: &[(&str, &[u8])],
        label: &Label,
    ) -> Result<(), SlotError> {
        if !label.flows_to(&slot.horizon) {
            return Err(SlotError::OutsideHorizon {
                label: label.clone(),
                horizon: slot.horizon.clone(),
            });
        }
        let path = self.path.clone();
        let wrap = |source| SlotError::Sqlite {
            path: path.clone(),
            source,
        };
        let tx = self.conn.transaction().map_err(wrap)?;
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO slot_entry (release, user, horizon, key, value, label)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )
                .map_err(wrap)?;
            let horizon = slot.horizon.canonical();
            let stored = format!("[{}]", label.canonical());
            for (k, v) in kv {
                stmt.execute(params![slot.release, slot.user, horizon, k, v, stored])
                    .map_err(wrap)?;
            }
        }
        tx.commit().map_err(wrap)
    }

    /// One entry, if present.
    pub fn get(&self, slot: &SlotKey, key: &str) -> Result<Option<SlotEntry>, SlotError> {
        let row = self
            .conn
            .query_row(
                "SELECT value, label FROM slot_entry WHERE release = ?1 AND user = ?2 AND horizon = ?3 AND key = ?4",
                params![slot.release, slot.user, slot.horizon.canonical(), key],
                |r| Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, String>(1)?)),
            )
            .optional()
            .map_err(self.err())?;
        match row {
            None => Ok(None),
            Some((value, label)) => {
                let l = parse_label(&label).ok_or_else(|| SlotError::Corrupt {
                    path: self.path.clone(),
                    key: key.into(),
                    stored: label,
                })?;
                Ok(Some(SlotEntry { value, label: l }))
            }
        }
    }

    /// Every slot key held for a release, for inspection.
    pub fn slots_of(&self, release: &str) -> Result<Vec<SlotKey>, SlotError> {
        let mut stmt = self
            .conn
            .prepare("SELECT DISTINCT user, horizon FROM slot_entry WHERE release = ?1 ORDER BY user, horizon")
            .map_err(self.err())?;
        let rows = stmt
            .query_map(params![release], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(self.err())?;
        let mut out = Vec::new();
        for row in rows {
            let (user, horizon) = row.map_err(self.err())?;
            out.push(SlotKey {
                release: release.into(),
                user,
                horizon: Label::from_canonical(&horizon),
            });
        }
        Ok(out)
    }
}

/// Stored labels are `[tag,tag]`; the brackets tell a public label from a truncated one.
fn parse_label(s: &str) -> Option<Label> {
    let inner = s.strip_prefix('[')?.strip_suffix(']')?;
    Some(Label::from_canonical(inner))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(h: &[&str]) -> SlotKey {
        SlotKey {
            release: "sha256:r".into(),
            user: String::new(),
            horizon: Label::of(h),
        }
    }

    #[test]
    fn write_snapshot_label() {
        let mut s = SlotStore::in_memory().expect("store");
        let k = key(&["hr", "finance"]);
        assert_eq!(s.snapshot(&k).expect("snap").label(), Label::public());
        s.write(&k, "a", b"1", &Label::of(["hr"])).expect("write");
        s.write(&k, "b", b"2", &Label::public()).expect("write");
        let snap = s.snapshot(&k).expect("snap");
        assert_eq!(snap.entries.len(), 2);
        assert_eq!(snap.label(), Label::of(["hr"]));
        // Another horizon is another slot.
        assert!(s.snapshot(&key(&["hr"])).expect("snap").entries.is_empty());
        assert_eq!(s.slots_of("sha256:r").expect("list"), vec![k]);
    }

    #[test]
    fn writes_outside_horizon_are_refused() {
        let mut s = SlotStore::in_memory().expect("store");
        let e = s
            .write(&key(&["finance"]), "a", b"1", &Label::of(["hr"]))
            .expect_err("refused");
        assert!(matches!(e, SlotError::OutsideHorizon { .. }));
        assert!(s
            .snapshot(&key(&["finance"]))
            .expect("snap")
            .entries
            .is_empty());
    }
}
