//! Spawned copies as a [`CopySource`] (issue 28): the pipeline runs a Node or native release
//! through the same stages as a forked Python one, and does not know which it has.
//! `germline_sandbox::spawn` makes, checks and pools the copies; this is only the seam.

use std::fs::File;
use std::sync::Arc;
use std::time::Instant;

use germline_sandbox::spawn::{SpawnPool, Spawned};
use germline_sandbox::{Item, Result as SandboxResult, TreeEntry};
use serde_json::Value;

use crate::pipeline::{CopySource, SourcedCopy};
use crate::relay;

impl CopySource for SpawnPool {
    type Copy = Spawned;
    /// The pool's call rate counts the call (docs/sandbox.md, "The pool of spawned copies").
    fn call_begins(&mut self) {
        SpawnPool::call_begins(self)
    }
    fn set_pool_capabilities(&mut self, caps: &Value) {
        self.set_capabilities(caps)
    }
    fn copy_for(&mut self, caps: &Value) -> SandboxResult<Spawned> {
        let deadline = Instant::now() + self.spec().limits.deadline();
        self.group_taken();
        self.take(caps, deadline)
    }
    /// The take's laps (`SpawnPool::take_phases`).
    fn fork_phases(&self) -> &[(&'static str, u64)] {
        self.take_phases()
    }
    fn endpoints_to_prepare(&mut self) -> Vec<File> {
        SpawnPool::endpoints_to_prepare(self)
    }
    fn prepare_copy(
        &mut self,
        copy: &mut Spawned,
        files: &[(String, Vec<u8>, bool)],
    ) -> SandboxResult<()> {
        self.prepare_copy_view(copy, files, &[], false)
    }
    /// Items as files only: `/run/items/<name>` and directory entries at their own paths,
    /// mounted from the host (`germline_sandbox::spawn`, items.rs).
    fn prepare_copy_view(
        &mut self,
        copy: &mut Spawned,
        files: &[(String, Vec<u8>, bool)],
        tree: &[TreeEntry],
        // A spawned copy's directory items are read-only whatever the tool (SpawnPool).
        _writable: bool,
    ) -> SandboxResult<()> {
        let items: Vec<Item> = files.iter().map(Item::from).collect();
        SpawnPool::prepare_copy_view(self, copy, &items, tree)
    }
    fn retire(&mut self, copy: Spawned, result: SandboxResult<Value>) -> SandboxResult<Value> {
        SpawnPool::retire(self, copy, result)
    }
}

impl SourcedCopy for Spawned {
    fn netns(&self) -> std::io::Result<File> {
        File::open(format!("/proc/{}/ns/net", self.pid()))
    }
    fn deadline(&self) -> Instant {
        Spawned::deadline(self)
    }
    /// Written as the twin line before the call's `tools/call` where the copy's launch takes
    /// it (a Node release: the shim's preload, [`crate::twin_node`]); a native binary, or a
    /// Python release that asked for spawn, has no reader for it and reads the real clocks
    /// and entropy (docs/evidence.md).
    fn set_twin(&mut self, twin: Option<(u128, u64)>) {
        Spawned::set_twin(self, twin)
    }
    fn kill(&mut self) {
        Spawned::kill(self)
    }
    /// Nothing beyond the files `prepare_copy_view` mounted: the release's own entry has no
    /// bootstrap to hand descriptors to (docs/sandbox.md, "Spawned copies").
    fn deliver(&mut self, _files: &[(String, Vec<u8>, bool)]) -> SandboxResult<()> {
        Ok(())
    }
    /// The handshake was made before the copy joined the pool.
    fn initialize(&mut self) -> SandboxResult<()> {
        Ok(())
    }
    fn mcp_call_relayed(
        &mut self,
        tool: &str,
        arguments: Value,
        meta: Option<Value>,
        handler: &mut dyn FnMut(&Value) -> Option<Value>,
    ) -> SandboxResult<Value> {
        Spawned::mcp_call_relayed(self, tool, arguments, meta, handler)
    }
    fn set_cancel(&mut self, cancel: Option<Arc<relay::Cancel>>) {
        Spawned::set_cancel(self, cancel)
    }
}
