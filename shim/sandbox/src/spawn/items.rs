//! Items for spawned copies (issue 28): files only, made from the host. A spawned copy runs
//! the release's own entry with no bootstrap, so the Python bootstrap's memfds and
//! `GERMLINE_ITEM_FDS` are not offered: each item is a read-only file `/run/items/<name>`
//! written through the copy's `/run/items` descriptor (mounted before the copy joined the pool,
//! [`crate::itemview::mount_base`]), and each entry of a directory item in the copy's view is
//! at its own path through a bind of one of the pool's item store slots, attached in this
//! copy's mount namespace only, exactly as for forked copies ([`crate::itemview`]).

use super::{SpawnPool, Spawned};
use crate::copy::Item;
use crate::error::Result;
use crate::itemview::{self, Target};
use crate::tree::TreeEntry;

impl SpawnPool {
    /// Puts the call's items (`items`, outside the view as empty files) and the directory
    /// entries `tree` of the copy's view into the copy, before it is sent the call.
    pub fn prepare_copy_view(
        &self,
        copy: &mut Spawned,
        items: &[Item],
        tree: &[TreeEntry],
    ) -> Result<()> {
        let mut held = Vec::new();
        let r = itemview::mount_view(
            &Target {
                spec: &self.spec,
                rootfs: &self.rootfs,
                store: &self.items,
                pid: copy.pid,
                items_dir: copy.items_dir.as_ref(),
                // Writes of spawned copies are not read back or committed (issue 27's layer is
                // the forked copies'): their directory items stay read-only.
                writable: false,
            },
            items,
            tree,
            &mut held,
        );
        // Freed only once the copy is dead (Spawned::kill).
        copy.leases.extend(held.into_iter().map(|(lease, _)| lease));
        r
    }
}
