//! The Python runtime of a release's rootfs, from the host's Debian python3.11: the same
//! recipe as `make_runtime` in `bundles/build.sh` (interpreter, standard library without its
//! tests and GUI, `/etc/python3.11`, the CA bundle, zoneinfo, and every shared library `ldd`
//! names, at its own path), then deterministic bytecode and the extension modules' libraries.
//! Why Debian's Python and not a python.org build: it is what the host has installed and
//! keeps patched, and the rootfs digest then names exact Debian files.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::source::{run, SITE};
use crate::{Error, Result};

/// Debian's python3.11.
pub const DEFAULT_PYTHON: &str = "/usr/bin/python3.11";

/// Standard library directories a server does not need (as build.sh's `tar --exclude`).
const STDLIB_SKIP: [&str; 5] = ["test", "idlelib", "tkinter", "ensurepip", "lib2to3"];

/// `python3.11` for Debian's `/usr/bin/python3.11` (links followed).
pub fn python_version(python: &Path) -> Result<String> {
    let real = std::fs::canonicalize(python).map_err(|e| Error::io(python.display(), e))?;
    real.file_name()
        .and_then(|n| n.to_str())
        .filter(|n| n.starts_with("python3."))
        .ok_or_else(|| {
            Error::Entry(format!(
                "{}: expected a pythonX.Y interpreter",
                python.display()
            ))
        })
        .map(str::to_string)
}

/// The runtime into `root` (which already holds the site packages).
pub fn python_runtime(python: &Path, root: &Path) -> Result<()> {
    let version = python_version(python)?;
    let python = std::fs::canonicalize(python).map_err(|e| Error::io(python.display(), e))?;
    skeleton(root)?;
    copy_file(&python, &root.join("usr/bin").join(&version))?;
    symlink(&version, &root.join("usr/bin/python3"))?;
    let stdlib = Path::new("/usr/lib").join(&version);
    copy_tree(&stdlib, &root.join("usr/lib").join(&version), &|rel| {
        rel.components().count() == 1
            && STDLIB_SKIP
                .iter()
                .any(|s| rel.as_os_str() == std::ffi::OsStr::new(s))
    })?;
    let etc = Path::new("/etc").join(&version);
    if etc.is_dir() {
        copy_tree(&etc, &root.join("etc").join(&version), &|_| false)?;
    }
    copy_file(
        Path::new("/etc/ssl/certs/ca-certificates.crt"),
        &root.join("etc/ssl/certs/ca-certificates.crt"),
    )?;
    let zoneinfo = Path::new("/usr/share/zoneinfo");
    if zoneinfo.is_dir() {
        copy_tree(zoneinfo, &root.join("usr/share/zoneinfo"), &|_| false)?;
    }
    let mut elves = vec![python.clone()];
    let dynload = stdlib.join("lib-dynload");
    if let Ok(rd) = std::fs::read_dir(&dynload) {
        elves.extend(
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "so")),
        );
    }
    copy_with_libraries(root, &elves)?;
    let ld = Path::new("/lib64/ld-linux-x86-64.so.2");
    let ld_dest = root.join("usr/lib64/ld-linux-x86-64.so.2");
    if ld.exists() && !ld_dest.exists() {
        copy_file(ld, &ld_dest)?;
    }
    Ok(())
}

/// The directories every runtime's rootfs has: `/usr/{bin,lib,lib64}` with `/bin`, `/lib` and
/// `/lib64` linked to them, `/etc/ssl/certs`, and the germline's and its copies' mount points
/// `/dev`, `/proc`, `/run`, `/tmp` (empty, signed).
pub(crate) fn skeleton(root: &Path) -> Result<()> {
    for d in [
        "usr/bin",
        "usr/lib",
        "usr/lib64",
        "etc/ssl/certs",
        "dev",
        "proc",
        "run",
        "tmp",
    ] {
        mkdir(&root.join(d))?;
    }
    for (link, to) in [
        ("bin", "usr/bin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
    ] {
        symlink(to, &root.join(link))?;
    }
    Ok(())
}

/// Host files and directories (`--include`) at their own paths in `root`, each ELF file's
/// libraries with it. Only absolute paths: the rootfs has no other place to put them.
pub fn include(root: &Path, paths: &[PathBuf]) -> Result<()> {
    let mut elves = Vec::new();
    for p in paths {
        let rel = p.strip_prefix("/").map_err(|_| {
            Error::Entry(format!(
                "--include {}: expected an absolute path",
                p.display()
            ))
        })?;
        let dest = root.join(rel);
        let meta = std::fs::metadata(p).map_err(|e| Error::io(p.display(), e))?;
        if meta.is_dir() {
            copy_tree(p, &dest, &|_| false)?;
            find_files(&dest, &mut elves);
        } else {
            copy_file(p, &dest)?;
            elves.push(dest);
        }
    }
    elves.retain(|f| is_elf(f));
    copy_with_libraries(root, &elves)
}

pub(crate) fn is_elf(p: &Path) -> bool {
    let mut magic = [0u8; 4];
    std::fs::File::open(p)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
        .is_ok()
        && magic == *b"\x7fELF"
}

fn find_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let Ok(t) = e.file_type() else { continue };
        if t.is_dir() {
            find_files(&e.path(), out);
        } else if t.is_file() {
            out.push(e.path());
        }
    }
}

/// Bytecode for the installed packages and the standard library, as `bundles/build.sh` makes
/// it: the rootfs is read-only at run time, so without it every fresh process compiles every
/// module again. checked-hash `.pyc` files are reproducible (no mtimes; file names as the
/// rootfs sees them) and Python checks each against its signed source, so what runs is what a
/// reviewer reads. The standard library's own `.pyc` (Debian's) are replaced: they are
/// timestamp-checked against the source's modification time, which the copy here, a packed
/// layer (mtime 0) and an unpacked bundle all change, so Python found every one stale and
/// compiled the standard library again in every process (0.35 s of each mcp-server-git start).
pub fn compile(python: &Path, root: &Path) -> Result<()> {
    let stdlib = root.join("usr/lib").join(python_version(python)?);
    // One run over both trees, each file named as the rootfs sees it (`root` stripped, `/`
    // put in front). Forced: a `.pyc` that matches its source's mtime here (a copy that kept
    // it) is still replaced, since the layer will not keep the mtime.
    let mut cmd = Command::new(python);
    cmd.args(["-m", "compileall", "-q", "-f", "-j", "0"])
        .args(["--invalidation-mode", "checked-hash"])
        .arg("-s")
        .arg(root)
        .args(["-p", "/"])
        .arg(root.join(SITE))
        .arg(&stdlib);
    run(&mut cmd, "python -m compileall").map(drop)
}

/// The shared libraries of the installed packages' extension modules.
pub fn extension_libraries(root: &Path) -> Result<()> {
    let mut sos = Vec::new();
    find_so(&root.join(SITE), &mut sos);
    copy_with_libraries(root, &sos)
}

fn find_so(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let Ok(t) = e.file_type() else { continue };
        let p = e.path();
        if t.is_dir() {
            find_so(&p, out);
        } else if t.is_file() && p.to_string_lossy().contains(".so") {
            out.push(p);
        }
    }
}

/// The libraries `ldd` lists for `files`, each copied to its own path under `root` (under
/// `usr/` when the path is `/lib...`, as the rootfs's `/lib` is a link to `usr/lib`).
pub(crate) fn copy_with_libraries(root: &Path, files: &[PathBuf]) -> Result<()> {
    let mut libs = BTreeSet::new();
    for chunk in files.chunks(64) {
        let out = Command::new("ldd")
            .args(chunk)
            .output()
            .map_err(|e| Error::io("ldd", e))?;
        // ldd fails for a file that is not dynamic; its other lines still count.
        libs.extend(ldd_paths(&String::from_utf8_lossy(&out.stdout)));
    }
    for lib in libs {
        let rel = lib.strip_prefix("/").unwrap_or(&lib);
        let rel = rel.strip_prefix("usr").unwrap_or(rel);
        let dest = root.join("usr").join(rel);
        if dest.exists() {
            continue;
        }
        let real = std::fs::canonicalize(&lib).map_err(|e| Error::io(lib.display(), e))?;
        copy_file(&real, &dest)?;
    }
    Ok(())
}

/// The absolute library paths in `ldd` output (`name => /path (addr)` and `/path (addr)`).
pub fn ldd_paths(text: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let path = match line.split_once("=>") {
            Some((_, rhs)) => rhs.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/') && !p.ends_with(':')) {
            out.push(PathBuf::from(p));
        }
    }
    out
}

pub(crate) fn mkdir(p: &Path) -> Result<()> {
    std::fs::create_dir_all(p).map_err(|e| Error::io(p.display(), e))
}

pub(crate) fn symlink(to: &str, at: &Path) -> Result<()> {
    std::os::unix::fs::symlink(to, at).map_err(|e| Error::io(at.display(), e))
}

/// A regular file's contents and mode (following links: the rootfs holds the file itself).
pub(crate) fn copy_file(from: &Path, to: &Path) -> Result<()> {
    if let Some(parent) = to.parent() {
        mkdir(parent)?;
    }
    std::fs::copy(from, to)
        .map(drop)
        .map_err(|e| Error::io(format!("copy {} to {}", from.display(), to.display()), e))
}

/// A tree as `tar` copies it: directories, files with their modes, symbolic links as links;
/// `skip` gets each path relative to `from`.
fn copy_tree(from: &Path, to: &Path, skip: &dyn Fn(&Path) -> bool) -> Result<()> {
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        let src = from.join(&rel);
        let dst = to.join(&rel);
        mkdir(&dst)?;
        let rd = std::fs::read_dir(&src).map_err(|e| Error::io(src.display(), e))?;
        for e in rd {
            let e = e.map_err(|e| Error::io(src.display(), e))?;
            let r = rel.join(e.file_name());
            if skip(&r) {
                continue;
            }
            let t = e
                .file_type()
                .map_err(|err| Error::io(e.path().display(), err))?;
            if t.is_dir() {
                todo.push(r);
            } else if t.is_symlink() {
                let target = std::fs::read_link(e.path())
                    .map_err(|err| Error::io(e.path().display(), err))?;
                std::os::unix::fs::symlink(&target, to.join(&r))
                    .map_err(|err| Error::io(to.join(&r).display(), err))?;
            } else if t.is_file() {
                copy_file(&e.path(), &to.join(&r))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_lines() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x00007f)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n\tlibgone.so => not found\n/x/y.so:\n";
        assert_eq!(
            ldd_paths(text),
            vec![
                PathBuf::from("/lib/x86_64-linux-gnu/libz.so.1"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2")
            ]
        );
    }

    /// The flags word of a `.pyc` header (PEP 552): 3 is checked-hash.
    fn pyc_flags(pyc: &Path) -> u32 {
        let b = std::fs::read(pyc).unwrap_or_else(|e| panic!("{}: {e}", pyc.display()));
        u32::from_le_bytes([b[4], b[5], b[6], b[7]])
    }

    /// Both the packages and the standard library get checked-hash bytecode, replacing a
    /// timestamp `.pyc` whose source's mtime no longer matches (as Debian's do once copied),
    /// and the file names in it are the rootfs's own.
    #[test]
    fn compile_writes_checked_hash_bytecode_for_the_packages_and_the_standard_library() {
        let python = Path::new(DEFAULT_PYTHON);
        assert!(
            python.exists(),
            "{DEFAULT_PYTHON} is required (scripts/setup.sh)"
        );
        let version = python_version(python).expect("version");
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let stdlib = root.join("usr/lib").join(&version);
        let site = root.join(crate::source::SITE);
        for d in [&stdlib, &site] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        std::fs::write(stdlib.join("stdmod.py"), "X = 1\n").expect("write");
        std::fs::write(site.join("sitemod.py"), "Y = 2\n").expect("write");
        // A timestamp .pyc that matches its source here (as Debian's do where a copy kept the
        // mtimes): it must be replaced all the same, since a packed layer will not keep them.
        let cache = stdlib.join("__pycache__");
        let tag = version.replace("python", "").replace('.', "");
        let made = Command::new(python)
            .args([
                "-c",
                "import py_compile,sys; py_compile.compile(sys.argv[1], doraise=True)",
            ])
            .arg(stdlib.join("stdmod.py"))
            .status()
            .expect("py_compile");
        assert!(made.success());
        assert_eq!(
            pyc_flags(&cache.join(format!("stdmod.cpython-{tag}.pyc"))),
            0,
            "a timestamp .pyc to start from"
        );
        compile(python, root).expect("compile");
        for (pyc, src) in [
            (
                cache.join(format!("stdmod.cpython-{tag}.pyc")),
                format!("/usr/lib/{version}/stdmod.py"),
            ),
            (
                site.join(format!("__pycache__/sitemod.cpython-{tag}.pyc")),
                "/usr/lib/python3/dist-packages/sitemod.py".to_string(),
            ),
        ] {
            assert_eq!(pyc_flags(&pyc), 3, "{}: not checked-hash", pyc.display());
            let bytes = std::fs::read(&pyc).expect("read");
            assert!(
                bytes.windows(src.len()).any(|w| w == src.as_bytes()),
                "{}: its code does not name {src}",
                pyc.display()
            );
        }
    }
}
