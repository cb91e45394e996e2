//! Reading an image nobody has vouched for yet: the maxima every read of it is held to, and
//! the one way its files are opened.
//!
//! An image layout is untrusted until its signature verifies, and everything about it is
//! chosen by whoever wrote it: its files may be symlinks (to `/dev/zero`), FIFOs (which block
//! a reader forever), devices, sparse files far larger than their descriptors say, and its
//! layer may decompress to far more than it occupies. So (docs/release.md, "Untrusted images"):
//! - a file of the layout is opened only through [`open_in`]: each directory component with
//!   `O_NOFOLLOW|O_DIRECTORY`, the file itself with `O_NOFOLLOW|O_NONBLOCK|O_NOCTTY`, then
//!   `fstat` on the descriptor must say regular file;
//! - a blob is read only up to its descriptor's size (one byte more detects excess), and its
//!   size on disk must equal the descriptor's before a byte of it is read;
//! - a layer's tar stream is held to [`Limits`]: entries, path length, total path bytes,
//!   uncompressed bytes, and uncompressed bytes before the signed manifest has been seen.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use clap::Args;

use crate::error::{Error, Result};

/// The maxima an image is read under. Every one has a default (docs/release.md) and a flag
/// ([`LimitArgs`]) on each command that reads images.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Tar headers in one layer, extension headers (PAX, GNU long names) included.
    pub entries: u64,
    /// Bytes of one entry's path, and of one link target (GNU long names and PAX `path` /
    /// `linkpath` records included).
    pub path: u64,
    /// Bytes of all paths and link targets of one layer together (what is held in memory).
    pub path_total: u64,
    /// Uncompressed bytes of one layer's tar stream.
    pub bytes: u64,
    /// Uncompressed bytes of a layer read before its signed manifest (`.germline/manifest.json`
    /// and its signature) has been found and verified.
    pub unsigned_bytes: u64,
    /// Bytes of `index.json`, an image manifest or an image config.
    pub json: u64,
}

pub const DEFAULT_ENTRIES: u64 = 1 << 19;
pub const DEFAULT_PATH: u64 = 4096;
pub const DEFAULT_PATH_TOTAL: u64 = 64 << 20;
pub const DEFAULT_BYTES: u64 = 8 << 30;
pub const DEFAULT_UNSIGNED_BYTES: u64 = 16 << 20;
pub const DEFAULT_JSON: u64 = 4 << 20;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            entries: DEFAULT_ENTRIES,
            path: DEFAULT_PATH,
            path_total: DEFAULT_PATH_TOTAL,
            bytes: DEFAULT_BYTES,
            unsigned_bytes: DEFAULT_UNSIGNED_BYTES,
            json: DEFAULT_JSON,
        }
    }
}

impl Limits {
    /// The largest PAX extended header accepted: two paths (`path`, `linkpath`) and room for
    /// the usual records (times, ownership, extended attributes).
    pub fn pax(&self) -> u64 {
        self.path.saturating_mul(2).saturating_add(64 << 10)
    }
}

/// `--max-image-*`: the maxima an image is read under (sizes take a K, M, G or T suffix,
/// powers of 1024).
#[derive(Debug, Clone, Args)]
pub struct LimitArgs {
    /// Most tar headers in an image layer (PAX and GNU long-name headers count).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_ENTRIES)]
    pub max_image_entries: u64,
    /// Longest path or link target in an image layer, in bytes (GNU long names and PAX
    /// records included).
    #[arg(long, value_name = "BYTES", default_value = "4096", value_parser = parse_size)]
    pub max_image_path: u64,
    /// Most bytes of all paths and link targets of an image layer together.
    #[arg(long, value_name = "BYTES", default_value = "64M", value_parser = parse_size)]
    pub max_image_path_total: u64,
    /// Most uncompressed bytes of an image layer; decompression stops there.
    #[arg(long, value_name = "BYTES", default_value = "8G", value_parser = parse_size)]
    pub max_image_bytes: u64,
    /// Most uncompressed bytes of a layer read before its signed manifest is found and its
    /// signature verified (`germline release pack` writes the manifest first).
    #[arg(long, value_name = "BYTES", default_value = "16M", value_parser = parse_size)]
    pub max_image_unsigned_bytes: u64,
    /// Largest index.json, image manifest or image config, in bytes.
    #[arg(long, value_name = "BYTES", default_value = "4M", value_parser = parse_size)]
    pub max_image_json: u64,
}

impl Default for LimitArgs {
    fn default() -> Self {
        let l = Limits::default();
        LimitArgs {
            max_image_entries: l.entries,
            max_image_path: l.path,
            max_image_path_total: l.path_total,
            max_image_bytes: l.bytes,
            max_image_unsigned_bytes: l.unsigned_bytes,
            max_image_json: l.json,
        }
    }
}

impl LimitArgs {
    pub fn limits(&self) -> Limits {
        Limits {
            entries: self.max_image_entries,
            path: self.max_image_path,
            path_total: self.max_image_path_total,
            bytes: self.max_image_bytes,
            unsigned_bytes: self.max_image_unsigned_bytes,
            json: self.max_image_json,
        }
    }
}

/// `4096`, `64K`, `16M`, `8G`, `1T` (powers of 1024).
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let (num, shift) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 10),
        Some((i, 'm' | 'M')) => (&t[..i], 20),
        Some((i, 'g' | 'G')) => (&t[..i], 30),
        Some((i, 't' | 'T')) => (&t[..i], 40),
        _ => (t, 0),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("expected a byte count such as 4096, 64K, 16M or 8G, found {s:?}"))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// What an `open` of an untrusted file found instead of a regular file.
fn not_regular(ft: std::fs::FileType) -> &'static str {
    if ft.is_dir() {
        "a directory"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

fn refused(path: &Path, what: &str) -> Error {
    Error::Rootfs {
        path: path.to_path_buf(),
        message: format!("is {what}: refused (only regular files of an image are read)"),
    }
}

fn open_err(path: &Path, e: std::io::Error) -> Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        return refused(path, "a symbolic link");
    }
    if e.raw_os_error() == Some(libc::ENOTDIR) {
        return Error::Rootfs {
            path: path.to_path_buf(),
            message: "a component of the path is not a directory (or is a symbolic link): refused"
                .into(),
        };
    }
    Error::io(path, e)
}

/// Opens `base/components...` for reading, never following a symlink below `base` (`base`
/// itself is the operator's choice and is followed): directories with
/// `O_DIRECTORY|O_NOFOLLOW`, the file with `O_NOFOLLOW|O_NONBLOCK|O_NOCTTY`, so that a FIFO
/// cannot block the open and a terminal cannot become ours. The descriptor must then be a
/// regular file (`fstat`, not the path, so nothing can be swapped in between). Returns the file
/// and its size.
pub fn open_in(base: &Path, components: &[&str]) -> Result<(File, u64)> {
    let Some((last, dirs)) = components.split_last() else {
        return open_regular(base);
    };
    let mut path = base.to_path_buf();
    let mut dir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(base)
        .map_err(|e| Error::io(base, e))?;
    for c in dirs {
        path.push(c);
        dir = openat(&dir, c, libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .map_err(|e| open_err(&path, e))?;
    }
    path.push(last);
    let f = openat(
        &dir,
        last,
        libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
    )
    .map_err(|e| open_err(&path, e))?;
    regular(f, &path)
}

/// Opens one file the same way as the last component of [`open_in`].
pub fn open_regular(path: &Path) -> Result<(File, u64)> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| open_err(path, e))?;
    regular(f, path)
}

fn regular(f: File, path: &Path) -> Result<(File, u64)> {
    let md = f.metadata().map_err(|e| Error::io(path, e))?;
    if !md.file_type().is_file() {
        return Err(refused(path, not_regular(md.file_type())));
    }
    Ok((f, md.len()))
}

fn openat(dir: &File, name: &str, flags: libc::c_int) -> std::io::Result<File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    if name.is_empty() || name.contains('/') || name == ".." || name == "." {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    let c = std::ffi::CString::new(name)
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `dir` is an open descriptor for the duration of the call and `c` is a
    // NUL-terminated string that outlives it; openat does not retain either.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            flags | libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by openat and is owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Reads all of `f`, refusing it if it holds more than `max` bytes: at most `max + 1` bytes are
/// ever read. `what` and `flag` name the file and the limit in the error.
pub fn read_at_most(mut f: File, path: &Path, max: u64, flag: &str) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    (&mut f)
        .take(max.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| Error::io(path, e))?;
    if out.len() as u64 > max {
        return Err(too_large(path, max, flag));
    }
    Ok(out)
}

pub fn too_large(path: &Path, max: u64, flag: &str) -> Error {
    Error::Rootfs {
        path: PathBuf::from(path),
        message: format!("larger than the limit of {max} bytes ({flag})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("16m"), Ok(16 << 20));
        assert_eq!(parse_size("8G"), Ok(8 << 30));
        assert!(parse_size("8X").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn only_regular_files_open() -> Result<()> {
        let d = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
        let p = d.path();
        std::fs::create_dir(p.join("sub")).map_err(|e| Error::io(p, e))?;
        std::fs::write(p.join("sub/f"), b"ok").map_err(|e| Error::io(p, e))?;
        std::os::unix::fs::symlink("/dev/zero", p.join("zero")).map_err(|e| Error::io(p, e))?;
        std::os::unix::fs::symlink("sub", p.join("linkdir")).map_err(|e| Error::io(p, e))?;
        let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(
            p.join("fifo").as_os_str(),
        ))
        .map_err(|e| Error::Usage(e.to_string()))?;
        // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let (f, n) = open_in(p, &["sub", "f"])?;
        assert_eq!(n, 2);
        assert_eq!(read_at_most(f, p, 2, "--x")?, b"ok");
        let (f, _) = open_in(p, &["sub", "f"])?;
        assert!(read_at_most(f, p, 1, "--x").is_err(), "over the limit");
        for (c, want) in [
            (&["zero"][..], "symbolic link"),
            (&["fifo"][..], "FIFO"),
            (&["sub"][..], "directory"),
            (
                &["linkdir", "f"][..],
                "not a directory (or is a symbolic link)",
            ),
        ] {
            let e = open_in(p, c)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains(want), "{c:?}: {e}");
        }
        Ok(())
    }
}
