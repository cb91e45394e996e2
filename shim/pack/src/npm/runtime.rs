//! The Node runtime of a release's rootfs: the host's `node` (one ELF file: its standard
//! library is built into it) and the shared libraries `ldd` names, at their own paths, with
//! the mount points of the germline's copies, the CA bundle and an `/etc/passwd` (Node's
//! `os.userInfo()` reads it). docs/release.md, "Packing from npm", says why the host's Node.

use std::path::Path;

use crate::rootfs::{copy_file, copy_with_libraries, is_elf, skeleton};
use crate::{Error, Result};

/// Where `node` is in the rootfs (the manifest's first `entry` word).
pub const NODE: &str = "/usr/bin/node";

/// The host's Node.js (Debian's `nodejs` package).
pub const DEFAULT_NODE: &str = "/usr/bin/node";

/// `node` and what it needs into `root` (which may already hold `/app`).
pub fn node_runtime(node: &Path, root: &Path) -> Result<()> {
    let real = std::fs::canonicalize(node).map_err(|e| Error::io(node.display(), e))?;
    if !is_elf(&real) {
        return Err(Error::Entry(format!(
            "--node {}: not an ELF executable (give the node binary itself, not a wrapper \
             script)",
            node.display()
        )));
    }
    skeleton(root)?;
    copy_file(&real, &root.join(NODE.trim_start_matches('/')))?;
    copy_with_libraries(root, &[real])?;
    let ld = Path::new("/lib64/ld-linux-x86-64.so.2");
    let ld_dest = root.join("usr/lib64/ld-linux-x86-64.so.2");
    if ld.exists() && !ld_dest.exists() {
        copy_file(ld, &ld_dest)?;
    }
    copy_file(
        Path::new("/etc/ssl/certs/ca-certificates.crt"),
        &root.join("etc/ssl/certs/ca-certificates.crt"),
    )?;
    let passwd = root.join("etc/passwd");
    std::fs::write(
        &passwd,
        "root:x:0:0:root:/:/bin/false\nnobody:x:65534:65534:nobody:/:/bin/false\n",
    )
    .map_err(|e| Error::io(passwd.display(), e))
}
