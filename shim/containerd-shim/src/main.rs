//! `containerd-shim-germline-v1`: containerd's shim v2 for runtime type
//! `io.containerd.germline.v1`, so that `ctr run --runtime io.containerd.germline.v1 IMAGE`
//! (and CRI with a `germline` runtime handler) runs a signed release under germline execution
//! with the MCP endpoint on the container's stdio.
//!
//! The task API is served with the `containerd-shim` crate; each task call drives
//! `germline-runtime` (runc's command line, `shim/germline/src/bin/germline-runtime/`) the way
//! containerd's runc shim drives runc, so release verification, what of `config.json` is
//! ignored, the container's process and its cleanup are that binary's, not a copy of them.
//! One shim serves one container (one task, no exec). See docs/engines.md.

mod runtime;
mod task;

use containerd_shim as shim;

fn main() {
    shim::run::<task::Service>("io.containerd.germline.v1", None)
}
