//! A copy's items as files in its own mount namespace, for both kinds of copies: forked from a
//! germline ([`crate::Germline`]) and spawned ([`crate::spawn::SpawnPool`], issue 28). Each item
//! is a read-only file `/run/items/<name>` (an item outside the copy's view as an empty file,
//! A5); an item that names a path, and every entry of a directory item in the view, also
//! appears at its own path through a bind of one of the shim's item store slots (mounts.rs,
//! [`ItemStore`]), attached in that copy's mount namespace only. All of it is made from the
//! host: the copy is handed nothing but mounts, so a server that only opens files (a Node or a
//! native server, which has no bootstrap to receive memfds) reads its items like any file.

use std::path::Path;
use std::sync::Arc;

use crate::copy::Item;
use crate::error::{Error, Result};
use crate::mounts::{self, CopyMounts, ItemFile, ItemStore, ItemsDir, SlotLease};
use crate::spec::LaunchSpec;
use crate::tree::TreeEntry;

/// The copy the items go to, and what of its source the mounts need.
pub(crate) struct Target<'a> {
    pub spec: &'a LaunchSpec,
    /// The canonical rootfs on the host (where an item's own path is planned).
    pub rootfs: &'a Path,
    pub store: &'a Arc<ItemStore>,
    /// Host pid of the copy's first process (its mount and PID namespaces are the copy's).
    pub pid: i32,
    /// The copy's `/run/items`, if its base mounts were made before the call
    /// ([`mount_base`]); else every mount is made now.
    pub items_dir: Option<&'a ItemsDir>,
    /// Directory items bound read-write (issue 27: the copy's own layer, read back after the
    /// call); only forked copies of a [`LaunchSpec::writable_trees`] release get it.
    pub writable: bool,
}

/// The copy's procfs, scratch and an empty `/run/items` ([`CopyMounts::base_only`]), made
/// before its call (no data exists yet); [`mount_view`] then only writes the items through the
/// returned directory descriptor, without entering the copy's namespaces.
pub(crate) fn mount_base(spec: &LaunchSpec, pid: i32) -> Result<ItemsDir> {
    let scratch = spec.scratch.then_some(16u64 << 20);
    CopyMounts::base_only(pid, scratch, spec.limits.memory_bytes.max(1 << 20))?
        .with_state(spec.state_bytes)?
        .apply()?;
    ItemsDir::open(pid)
}

/// Puts `items` and the directory entries `tree` (only what the copy may see: what is not
/// passed is absent from the copy) into the copy `t`. The item store slots its mounts use are
/// pushed to `held`, whatever the outcome, each with its mount point if it was bound
/// read-write for a directory item: the caller keeps them until the copy is dead, so that no
/// slot is emptied or reused while a copy that has it mounted still runs.
pub(crate) fn mount_view(
    t: &Target<'_>,
    items: &[Item],
    tree: &[TreeEntry],
    held: &mut Vec<(SlotLease, Option<String>)>,
) -> Result<()> {
    let mut files = Vec::new();
    for item in items {
        let name = &item.name;
        if name.is_empty() || name.contains('/') || name.starts_with('.') || name.contains('\0') {
            return Err(Error::Spec(format!("bad item name {name:?}")));
        }
        files.push(ItemFile {
            path: std::ffi::CString::new(format!("/run/items/{name}"))
                .map_err(|_| Error::Spec("item name".into()))?,
            contents: item.visible().to_vec(),
        });
    }
    let with_paths: Vec<(usize, &str, &str)> = items
        .iter()
        .enumerate()
        .filter_map(|(i, it)| it.path.as_deref().map(|p| (i, it.name.as_str(), p)))
        .chain(
            tree.iter()
                .enumerate()
                .map(|(j, e)| (items.len() + j, "directory item", e.path())),
        )
        .collect();
    let mut binds = Vec::new();
    if !with_paths.is_empty() {
        let protected: Vec<String> = t
            .spec
            .readable_paths
            .iter()
            .cloned()
            .chain(t.spec.extra_mounts.iter().map(|m| m.target.clone()))
            .collect();
        for (at, files) in mounts::plan_item_paths(t.rootfs, &protected, &with_paths)? {
            // A mount point of directory entries only: the store may have written exactly
            // this tree ahead, between calls (`ItemStore::write_ahead`).
            let key: Option<mounts::TreeKey> = (t.store.ahead_on() && !files.is_empty())
                .then(|| {
                    files
                        .iter()
                        .map(|(rel, i)| {
                            i.checked_sub(items.len())
                                .and_then(|j| tree.get(j))
                                .map(|e| (rel.clone(), e.clone()))
                        })
                        .collect::<Option<Vec<_>>>()
                })
                .flatten()
                .map(|entries| (at.clone(), t.writable, entries));
            if let Some(lease) = key.as_ref().and_then(|k| t.store.take_ready(k)) {
                let fd = lease.fd();
                held.push((lease, t.writable.then(|| at.clone())));
                binds.push((fd, at, t.writable));
            } else {
                let lease = t.store.lease()?;
                let fd = lease.fd();
                // Held before anything is written into it: the slot stays the copy's until the
                // copy is dead, even if a later step fails.
                held.push((lease, None));
                let Some((lease, tree_at)) = held.last_mut() else {
                    return Err(Error::Spec("item store lease".into()));
                };
                let mut has_tree = false;
                let mut made = crate::tree::Made::default();
                for (rel, i) in files {
                    match (
                        items.get(i),
                        i.checked_sub(items.len()).and_then(|j| tree.get(j)),
                    ) {
                        (Some(item), _) => lease.write(&rel, item.visible())?,
                        (None, Some(entry)) => {
                            has_tree = true;
                            crate::tree::write(lease.fd(), &rel, entry, t.writable, &mut made)?
                        }
                        (None, None) => return Err(Error::Spec("item mount plan".into())),
                    }
                }
                // Read-write only for directory items (issue 27): file items in the same slot
                // stay read-only by their mode and owner (the host's root, unmapped).
                let rw = has_tree && t.writable;
                if rw {
                    *tree_at = Some(at.clone());
                }
                binds.push((fd, at, rw));
            }
            if let Some(k) = key {
                t.store.remember(k);
            }
        }
    }
    if let Some(dir) = t.items_dir {
        // Base mounts made before the call: write the items, bind what has its own path.
        for (item, f) in items.iter().zip(&files) {
            dir.write(&item.name, &f.contents)?;
        }
        if binds.is_empty() {
            return Ok(());
        }
        return CopyMounts::binds_only(t.pid)?.with_binds(binds)?.apply();
    }
    let scratch = t.spec.scratch.then_some(16u64 << 20);
    CopyMounts::new(t.pid, scratch, files)?
        .with_state(t.spec.state_bytes)?
        .with_binds(binds)?
        .apply()
}
