//! What identifies a file item: the file a path argument reaches, never the path's spelling.
//!
//! A string argument that is an absolute path (or a `file://` / `sqlite:///` URI) is resolved
//! exactly once, by the kernel, with no race between labelling and reading:
//! 1. `openat2(O_PATH | O_CLOEXEC, RESOLVE_NO_MAGICLINKS)`: every `.`, `..`, repeated slash
//!    and symlink (of the file or of any directory on the way) is followed as the kernel
//!    follows it; a `/proc/<pid>/fd/N`-style magic link or a symlink loop is refused (ELOOP).
//!    An `O_PATH` descriptor performs no I/O, so a FIFO never blocks and a device is never
//!    opened (opening some devices has effects of its own).
//! 2. `fstat` on that descriptor: only a regular file is a file item; a directory is a
//!    directory item (treeitem.rs, which labels each file in it with steps 3 and 4); anything
//!    else stays an inline value.
//! 3. The label comes from the path the kernel reports for the descriptor
//!    (`readlink /proc/thread-self/fd/N`), and only if that path can be trusted to name the
//!    file: absolute, not marked ` (deleted)`, the file's only link (`st_nlink == 1`), valid
//!    UTF-8, and reaching the same inode again with `RESOLVE_NO_SYMLINKS`. Otherwise the file
//!    takes the policy's default label, joined with every rule matching any name seen for it
//!    (see [`Unsure`]): failing closed.
//! 4. The contents are read from that same descriptor (reopened for reading through
//!    `/proc/thread-self/fd/N`, which names the descriptor's inode, not a path), bounded by
//!    the item limit. No second open by path.
//!
//! docs/policy.md ("What identifies a file") gives the user-facing rules.

use std::ffi::OsString;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use germline_policy::policy::Source;
use germline_policy::{Label, Policy};
use nix::errno::Errno;
use nix::fcntl::{openat2, readlink, OFlag, OpenHow, ResolveFlag, AT_FDCWD};
use nix::sys::stat::{fstat, FileStat, Mode, SFlag};

/// How a string argument names a local file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spelling {
    /// An absolute path, as the agent spelled it.
    Path(PathBuf),
    /// A `file://` or `sqlite:///` URI (no host) and the path it names, percent-decoded.
    Uri { uri: url::Url, path: PathBuf },
}

impl Spelling {
    /// The spelling of `s` as a file name, or `None` if `s` cannot name a local file.
    pub fn of(s: &str) -> Option<Spelling> {
        if s.starts_with('/') {
            return Some(Spelling::Path(PathBuf::from(s)));
        }
        let uri = url::Url::parse(s).ok()?;
        if !matches!(uri.scheme(), "file" | "sqlite") || !uri.host_str().is_none_or(str::is_empty) {
            return None;
        }
        // Decode the path as a file URL's (`%2F`, `%20`, ...): the kernel sees those bytes.
        let as_file = url::Url::parse(&format!("file://{}", uri.path())).ok()?;
        let path = as_file.to_file_path().ok()?;
        path.is_absolute().then_some(Spelling::Uri { uri, path })
    }

    /// The path the spelling asks the kernel to resolve.
    pub fn path(&self) -> &Path {
        match self {
            Spelling::Path(p) | Spelling::Uri { path: p, .. } => p,
        }
    }
}

/// Why no name can be trusted to stand for a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsure {
    /// The file has no name left (`st_nlink == 0`, or the kernel marks it ` (deleted)`).
    Deleted,
    /// The file has this many hard links: its other names cannot be enumerated, and a rule
    /// for one of them may label it higher than the name it was reached by.
    Links(u64),
    /// The kernel reports no absolute path (a file outside this process's root, or no
    /// path at all).
    NotAbsolute,
    /// The reported path does not reach the same file again without following symlinks
    /// (renamed or replaced meanwhile, or a detached mount).
    Unreachable,
    /// The reported path is not UTF-8, so no rule glob can be matched against it.
    NotUtf8,
    /// (`germline plan` only) the path does not exist here and is spelled with `.`, `..`,
    /// an empty component or a trailing slash, or its nearest existing directory cannot be
    /// identified.
    Absent,
}

impl Unsure {
    /// What a user reads about it.
    pub fn why(&self) -> String {
        match self {
            Unsure::Deleted => "it has been deleted".into(),
            Unsure::Links(n) => format!("it has {n} hard links, so it has other names"),
            Unsure::NotAbsolute => "the kernel reports no absolute path for it".into(),
            Unsure::Unreachable => {
                "the path the kernel reports for it does not reach it again".into()
            }
            Unsure::NotUtf8 => "its path is not UTF-8".into(),
            Unsure::Absent => "it does not exist here and its spelling is not canonical \
                               (no `.`, `..`, `//` or trailing `/`), or no directory above it \
                               can be identified"
                .into(),
        }
    }
}

/// What identifies a resolved file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// The one name of the file, as the kernel reports it and re-checked to reach it.
    Path(PathBuf),
    /// No trusted name: the default label, joined with the rules of every name seen.
    Unsure {
        reported: Option<PathBuf>,
        why: Unsure,
    },
}

impl Identity {
    /// The path to record for the item (the trusted name, else the reported one, else the
    /// spelled one).
    pub fn host_path(&self, spelled: &Path) -> PathBuf {
        match self {
            Identity::Path(p)
            | Identity::Unsure {
                reported: Some(p), ..
            } => p.clone(),
            Identity::Unsure { reported: None, .. } => spelled.to_path_buf(),
        }
    }

    /// The label the policy's rules give the file, or `None` if no rule covers it (then the
    /// policy's `unlabelled_path` decides). A trusted path is matched against the `[[item]]`
    /// path rules, and, for a URI, the URI with its path replaced by the trusted path against
    /// the URI rules; the label is the join of both. An unsure file gets the default label
    /// joined with every rule matching the spelling or the reported path: never lower than
    /// the default, whatever name it was reached by.
    pub fn label(&self, policy: &Policy, spelling: &Spelling) -> Option<Label> {
        let rules = |path: &str, out: &mut Option<Label>| {
            let mut add = |l: Option<Label>| {
                if let Some(l) = l {
                    out.get_or_insert_with(Label::public).join(&l);
                }
            };
            add(policy.rule_label(Source::Path, path));
            if let Spelling::Uri { uri, .. } = spelling {
                let mut u = uri.clone();
                u.set_path(path);
                add(policy.rule_label(Source::Uri, u.as_str()));
            }
        };
        match self {
            Identity::Path(p) => {
                let mut out = None;
                // A trusted path is UTF-8 (checked when it was trusted).
                rules(p.to_str()?, &mut out);
                out
            }
            Identity::Unsure { reported, .. } => {
                let mut out = Some(policy.default_item_label().clone());
                if let Some(s) = reported.as_deref().and_then(Path::to_str) {
                    rules(s, &mut out);
                }
                if let Some(s) = spelling.path().to_str() {
                    rules(s, &mut out);
                }
                if let Spelling::Uri { uri, .. } = spelling {
                    if let Some(l) = policy.rule_label(Source::Uri, uri.as_str()) {
                        if let Some(o) = out.as_mut() {
                            o.join(&l);
                        }
                    }
                }
                out
            }
        }
    }
}

/// A file item: a regular file resolved once, its identity and its contents.
#[derive(Debug)]
pub struct FileItem {
    pub spelling: Spelling,
    pub identity: Identity,
    /// The rules' label (`None`: no rule covers the file).
    pub label: Option<Label>,
    /// The bytes read from the resolved descriptor.
    pub contents: Vec<u8>,
}

/// Why a string naming a file cannot become an item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileItemError {
    /// The path cannot be resolved or read safely; the text says why.
    Unreadable(String),
    /// The file is larger than the item limit (its size, as found).
    TooLarge(u64),
}

impl FileItemError {
    /// What a user reads about it.
    pub fn why(&self) -> String {
        match self {
            FileItemError::Unreadable(why) => why.clone(),
            FileItemError::TooLarge(n) => format!("it is {n} bytes, over the item limit"),
        }
    }
}

const ELOOP_WHY: &str = "too many levels of symbolic links: a symlink loop, or a /proc magic \
                         link such as /proc/self/fd/N (refused: name the file itself)";

const EACCES_WHY: &str = "permission denied: a directory on the way cannot be searched by \
                          the user this session reads files for";

/// A resolved file: its `O_PATH` descriptor and what `fstat` says of it.
pub(crate) struct Resolved {
    pub(crate) fd: OwnedFd,
    pub(crate) stat: FileStat,
}

impl Resolved {
    pub(crate) fn kind(&self) -> SFlag {
        SFlag::from_bits_truncate(self.stat.st_mode) & SFlag::S_IFMT
    }
}

/// Opens `path` once as an `O_PATH` descriptor. `Ok(None)`: the path names nothing here
/// (absent, not a directory on the way, too long, or containing NUL); an error if a directory
/// on the way cannot be searched (EACCES).
pub(crate) fn resolve(path: &Path) -> Result<Option<Resolved>, FileItemError> {
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let fd = match openat2(AT_FDCWD, path, how) {
        Ok(fd) => fd,
        Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ENAMETOOLONG | Errno::EINVAL) => {
            return Ok(None)
        }
        // It exists, but its reader may not reach it: refused, not passed on as text (a
        // `germline daemon` session resolves items with its user's permissions).
        Err(Errno::EACCES) => return Err(FileItemError::Unreadable(EACCES_WHY.into())),
        Err(Errno::ELOOP) => return Err(FileItemError::Unreadable(ELOOP_WHY.into())),
        Err(Errno::ENOSYS) => {
            return Err(FileItemError::Unreadable(
                "openat2(2) is not available: germline needs Linux 5.6 or later".into(),
            ))
        }
        Err(e) => return Err(FileItemError::Unreadable(format!("cannot resolve it: {e}"))),
    };
    let stat = fstat(&fd).map_err(|e| FileItemError::Unreadable(format!("fstat: {e}")))?;
    Ok(Some(Resolved { fd, stat }))
}

/// The `/proc` name of one of this thread's descriptors (the fd table is the process's).
pub(crate) fn proc_fd(fd: &OwnedFd) -> String {
    format!("/proc/thread-self/fd/{}", fd.as_raw_fd())
}

/// The identity of a resolved file (see the module comment, step 3).
pub(crate) fn identify(r: &Resolved) -> Identity {
    let unsure = |reported: Option<PathBuf>, why| Identity::Unsure { reported, why };
    let reported: OsString = match readlink(proc_fd(&r.fd).as_str()) {
        Ok(p) => p,
        Err(_) => return unsure(None, Unsure::NotAbsolute),
    };
    let p = PathBuf::from(reported);
    if !p.as_os_str().as_bytes().starts_with(b"/") {
        return unsure(None, Unsure::NotAbsolute);
    }
    if r.stat.st_nlink == 0 || p.as_os_str().as_bytes().ends_with(b" (deleted)") {
        return unsure(Some(p), Unsure::Deleted);
    }
    if r.kind() != SFlag::S_IFDIR && r.stat.st_nlink > 1 {
        return unsure(Some(p), Unsure::Links(r.stat.st_nlink));
    }
    if p.to_str().is_none() {
        return unsure(Some(p), Unsure::NotUtf8);
    }
    // The reported name must reach this very inode again, with no symlink on the way.
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let same = openat2(AT_FDCWD, p.as_path(), how)
        .and_then(|fd| fstat(&fd))
        .map(|s| s.st_dev == r.stat.st_dev && s.st_ino == r.stat.st_ino)
        .unwrap_or(false);
    if same {
        Identity::Path(p)
    } else {
        unsure(Some(p), Unsure::Unreachable)
    }
}

/// Reads the resolved file's contents through its own descriptor, at most `max` bytes.
pub(crate) fn read_bounded(r: &Resolved, max: u64) -> Result<Vec<u8>, FileItemError> {
    if r.stat.st_size as u64 > max {
        return Err(FileItemError::TooLarge(r.stat.st_size as u64));
    }
    // Reopening the magic link of our own O_PATH descriptor opens its inode, whatever has
    // happened to the path since; O_NONBLOCK and O_NOCTTY are belt and braces (it is a
    // regular file).
    let fd = nix::fcntl::open(
        proc_fd(&r.fd).as_str(),
        OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOCTTY | OFlag::O_NONBLOCK,
        Mode::empty(),
    )
    .map_err(open_error)?;
    read_opened(fd, r, max)?
        .ok_or_else(|| FileItemError::Unreadable("it was replaced while being opened".into()))
}

/// Why a regular file could not be opened for reading.
pub(crate) fn open_error(e: Errno) -> FileItemError {
    match e {
        Errno::EACCES => FileItemError::Unreadable(
            "permission denied: the user this session reads files for may not read it".into(),
        ),
        e => FileItemError::Unreadable(format!("cannot open it for reading: {e}")),
    }
}

/// Reads `fd`, opened for reading, at most `max` bytes, if it is the inode `r` resolved
/// (`Ok(None)`: another file, opened since).
pub(crate) fn read_opened(
    fd: OwnedFd,
    r: &Resolved,
    max: u64,
) -> Result<Option<Vec<u8>>, FileItemError> {
    let st = fstat(&fd).map_err(|e| FileItemError::Unreadable(format!("fstat: {e}")))?;
    if st.st_dev != r.stat.st_dev || st.st_ino != r.stat.st_ino {
        return Ok(None);
    }
    read_all(fd, st.st_size as u64, max).map(Some)
}

/// Reads `fd`, open for reading and `size` bytes long when it was last looked at, to its end
/// but at most `max` bytes (an error past that).
pub(crate) fn read_all(fd: OwnedFd, size: u64, max: u64) -> Result<Vec<u8>, FileItemError> {
    let mut out = Vec::with_capacity(size.min(max) as usize);
    File::from(fd)
        .take(max + 1)
        .read_to_end(&mut out)
        .map_err(|e| FileItemError::Unreadable(e.to_string()))?;
    if out.len() as u64 > max {
        return Err(FileItemError::TooLarge(out.len() as u64));
    }
    Ok(out)
}

/// The file item `s` names, or `Ok(None)` if `s` names no regular file here (it is then an
/// inline value): not an absolute path or a local file URI, absent, or a directory, FIFO,
/// device or socket (never opened for I/O). An error for a path that cannot be resolved
/// safely (a symlink loop, a magic link) or read, or a file over `max` bytes.
pub fn open_item(policy: &Policy, s: &str, max: u64) -> Result<Option<FileItem>, FileItemError> {
    let Some(spelling) = Spelling::of(s) else {
        return Ok(None);
    };
    let Some(r) = resolve(spelling.path())? else {
        return Ok(None);
    };
    if r.kind() != SFlag::S_IFREG {
        return Ok(None);
    }
    let identity = identify(&r);
    let label = identity.label(policy, &spelling);
    let contents = read_bounded(&r, max)?;
    Ok(Some(FileItem {
        spelling,
        identity,
        label,
        contents,
    }))
}

/// What `germline plan` labels an item with a `path` or `uri`: the label, and a note for the
/// user when it is not simply the rules' label of an existing file's trusted path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    pub label: Label,
    pub note: Option<String>,
}

/// The label `germline plan` gives an item spelled `s` (a `path` or `uri` of a call spec),
/// resolved as `germline run` resolves it, without reading the file. `None` if `s` is not an
/// absolute path or a local file URI (the policy's URI rules then apply as written). A file
/// no rule covers gets the default label (as `germline plan` always did). A path that does
/// not exist here is labelled by the path it would have: its nearest existing directory's
/// trusted path, plus the rest as spelled, which must then be canonical.
pub fn plan_label(policy: &Policy, s: &str) -> Option<Planned> {
    let spelling = Spelling::of(s)?;
    let default = || policy.default_item_label().clone();
    let (identity, note) = match resolve(spelling.path()) {
        Err(e) => {
            return Some(Planned {
                label: default(),
                note: Some(format!("{s}: {}; given the default label", e.why())),
            })
        }
        Ok(None) => (
            absent_identity(spelling.path()),
            Some(format!(
                "{s} does not exist here: labelled by the path it would have"
            )),
        ),
        Ok(Some(r)) if r.kind() != SFlag::S_IFREG => {
            return Some(Planned {
                label: default(),
                note: Some(format!(
                    "{s} is not a regular file (a call would pass it as an inline value): \
                     given the default label"
                )),
            })
        }
        Ok(Some(r)) => (identify(&r), None),
    };
    let note = match &identity {
        Identity::Unsure { why, .. } => Some(format!(
            "{s}: {}: given the default label (joined with any rule matching its names)",
            why.why()
        )),
        Identity::Path(p) if p.as_path() != spelling.path() => Some(format!(
            "{s} resolves to {}{}",
            p.display(),
            note.map(|n| format!("; {n}")).unwrap_or_default()
        )),
        Identity::Path(_) => None,
    };
    Some(Planned {
        label: identity.label(policy, &spelling).unwrap_or_else(default),
        note,
    })
}

/// The identity a path that does not exist here would have once created as spelled.
fn absent_identity(path: &Path) -> Identity {
    let unsure = Identity::Unsure {
        reported: None,
        why: Unsure::Absent,
    };
    let Some(s) = path.to_str() else {
        return unsure;
    };
    let canonical = s
        .strip_prefix('/')
        .is_some_and(|rest| rest.split('/').all(|c| !matches!(c, "" | "." | "..")));
    if !canonical {
        return unsure;
    }
    let mut rest: Vec<&str> = Vec::new();
    let mut dir = path;
    while let Some(parent) = dir.parent() {
        if let Some(name) = dir.file_name().and_then(|n| n.to_str()) {
            rest.push(name);
        }
        dir = parent;
        match resolve(dir) {
            Ok(None) => continue,
            Ok(Some(r)) if r.kind() == SFlag::S_IFDIR => {
                return match identify(&r) {
                    Identity::Path(d) => {
                        Identity::Path(rest.iter().rev().fold(d, |acc, c| acc.join(c)))
                    }
                    other => other,
                }
            }
            _ => return unsure,
        }
    }
    unsure
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    const MAX: u64 = 1 << 20;

    /// A tempdir with `hr/` and `public/` (and `fin/`), each file holding its own name.
    fn world() -> tempfile::TempDir {
        crate::testkit::tree(
            [
                "hr/salary.csv",
                "hr/deep/payslip.txt",
                "public/menu.txt",
                "fin/ledger.db",
            ]
            .map(|f| (f, format!("CONTENTS {f}"))),
        )
    }

    fn policy(dir: &Path, extra: &str) -> Policy {
        let rules = format!(
            r#"
[[item]]
path = "{{d}}/public/**"
label = []
{extra}"#
        );
        crate::testkit::policy(dir, &rules)
    }

    fn item(p: &Policy, s: &str) -> FileItem {
        open_item(p, s, MAX)
            .unwrap_or_else(|e| panic!("{s}: {e:?}"))
            .unwrap_or_else(|| panic!("{s}: not an item"))
    }

    fn hr() -> Option<Label> {
        Some(Label::of(["hr"]))
    }

    #[test]
    fn every_spelling_of_an_hr_file_gets_hr() {
        let d = world();
        let p = policy(d.path(), "");
        let root = d.path().display().to_string();
        symlink(
            d.path().join("hr/salary.csv"),
            d.path().join("public/link.csv"),
        )
        .expect("ln");
        symlink(d.path().join("hr"), d.path().join("public/hrdir")).expect("ln");
        symlink("../hr/salary.csv", d.path().join("public/rel.csv")).expect("ln");
        // A chain: public/a -> public/b -> public/link.csv -> hr/salary.csv.
        symlink("b", d.path().join("public/a")).expect("ln");
        symlink("link.csv", d.path().join("public/b")).expect("ln");
        for s in [
            format!("{root}/hr/salary.csv"),
            format!("{root}/public/../hr/salary.csv"),
            format!("{root}/public/./../hr/./salary.csv"),
            format!("{root}//public//..//hr//salary.csv"),
            format!("{root}/hr/deep/../salary.csv"),
            format!("{root}/public/link.csv"),
            format!("{root}/public/rel.csv"),
            format!("{root}/public/hrdir/salary.csv"),
            format!("{root}/public/hrdir/deep/../salary.csv"),
            format!("{root}/public/a"),
            format!("file://{root}/public/../hr/salary.csv"),
            format!("file://{root}/public/hrdir/salary.csv"),
            format!("file://{root}/public/%2E%2E/hr/salary.csv"),
        ] {
            let it = item(&p, &s);
            assert_eq!(it.label, hr(), "{s}");
            assert_eq!(it.contents, b"CONTENTS hr/salary.csv", "{s}");
            assert_eq!(
                it.identity,
                Identity::Path(d.path().join("hr/salary.csv")),
                "{s}"
            );
        }
        // And a public file stays public, whichever way it is spelled.
        for s in [
            format!("{root}/public/menu.txt"),
            format!("{root}/hr/../public/menu.txt"),
        ] {
            assert_eq!(item(&p, &s).label, Some(Label::public()), "{s}");
        }
    }

    #[test]
    fn uris_are_labelled_by_their_resolved_path_under_path_and_uri_rules() {
        let d = world();
        let p = policy(d.path(), "");
        let root = d.path().display().to_string();
        symlink(d.path().join("fin/ledger.db"), d.path().join("public/l.db")).expect("ln");
        // The URI rule sees the resolved path; the public path rule of the spelling does not
        // lower it.
        for s in [
            format!("sqlite://{root}/fin/ledger.db"),
            format!("sqlite://{root}/public/l.db"),
            format!("sqlite://{root}/public/../fin/ledger.db"),
        ] {
            assert_eq!(item(&p, &s).label, Some(Label::of(["finance"])), "{s}");
        }
        // A file:// URI of an hr file takes the hr path rule (no URI rule covers it).
        assert_eq!(
            item(&p, &format!("file://{root}/hr/salary.csv")).label,
            hr()
        );
        // Both rule kinds match: the join.
        let p2 = policy(
            d.path(),
            &format!("[[item]]\npath = \"{root}/fin/**\"\nlabel = [\"hr\"]\n",),
        );
        assert_eq!(
            item(&p2, &format!("sqlite://{root}/public/l.db")).label,
            Some(Label::of(["finance", "hr"]))
        );
        // A host, or another scheme: not a local file.
        for s in [
            format!("file://example.com{root}/hr/salary.csv"),
            format!("https://example.com{root}/hr/salary.csv"),
            "hr/salary.csv".to_string(),
        ] {
            assert!(open_item(&p, &s, MAX).expect("no error").is_none(), "{s}");
        }
    }

    #[test]
    fn a_symlink_loop_or_a_magic_link_is_a_clear_error() {
        let d = world();
        let p = policy(d.path(), "");
        symlink("loop2", d.path().join("public/loop1")).expect("ln");
        symlink("loop1", d.path().join("public/loop2")).expect("ln");
        let s = d.path().join("public/loop1").display().to_string();
        let e = open_item(&p, &s, MAX).expect_err("loop");
        assert_eq!(e, FileItemError::Unreadable(ELOOP_WHY.into()));
        // A magic link to an open hr file: refused, not resolved through /proc.
        let f = File::open(d.path().join("hr/salary.csv")).expect("open");
        for s in [
            format!("/proc/self/fd/{}", f.as_raw_fd()),
            format!("/proc/{}/fd/{}", std::process::id(), f.as_raw_fd()),
            format!("/dev/fd/{}", f.as_raw_fd()),
        ] {
            let e = open_item(&p, &s, MAX).expect_err("magic link");
            assert_eq!(e, FileItemError::Unreadable(ELOOP_WHY.into()), "{s}");
        }
        // A symlink in the tree pointing at a magic link: refused as well.
        symlink(
            format!("/proc/self/fd/{}", f.as_raw_fd()),
            d.path().join("public/magic"),
        )
        .expect("ln");
        let s = d.path().join("public/magic").display().to_string();
        assert!(open_item(&p, &s, MAX).is_err(), "{s}");
    }

    #[test]
    fn a_hard_linked_file_gets_the_default_label() {
        let d = world();
        let p = policy(d.path(), "");
        std::fs::hard_link(
            d.path().join("hr/salary.csv"),
            d.path().join("public/h.csv"),
        )
        .expect("link");
        let everything = Some(Label::of(["hr", "finance"]));
        for f in ["public/h.csv", "hr/salary.csv"] {
            let it = item(&p, &d.path().join(f).display().to_string());
            assert_eq!(it.label, everything, "{f}");
            assert!(
                matches!(
                    it.identity,
                    Identity::Unsure {
                        why: Unsure::Links(2),
                        ..
                    }
                ),
                "{f}: {:?}",
                it.identity
            );
        }
        // A deployer default below the hr rule: the name's rule still raises it.
        let low = policy(d.path(), "[defaults]\nitem_label = [\"finance\"]\n");
        let it = item(&low, &d.path().join("hr/salary.csv").display().to_string());
        assert_eq!(it.label, Some(Label::of(["hr", "finance"])));
    }

    #[test]
    fn fifos_devices_and_directories_are_not_items_and_never_block() {
        let d = world();
        let p = policy(d.path(), "");
        let fifo = d.path().join("hr/pipe");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).expect("mkfifo");
        symlink(&fifo, d.path().join("public/pipe")).expect("ln");
        // No writer: a blocking open would hang this test.
        for s in [
            fifo.display().to_string(),
            d.path().join("public/pipe").display().to_string(),
            "/dev/null".into(),
            "/dev/zero".into(),
            "/dev/tty".into(),
            d.path().join("hr").display().to_string(),
            d.path().join("absent.txt").display().to_string(),
            d.path().join("hr/salary.csv/x").display().to_string(),
            format!("{}/hr/sal\0ary.csv", d.path().display()),
        ] {
            assert!(
                open_item(&p, &s, MAX).expect("not an error").is_none(),
                "{s:?}"
            );
        }
    }

    #[test]
    fn a_deleted_file_and_a_size_over_the_limit() {
        let d = world();
        let p = policy(d.path(), "");
        let path = d.path().join("public/gone.txt");
        std::fs::write(&path, "x").expect("write");
        let r = resolve(&path).expect("ok").expect("exists");
        std::fs::remove_file(&path).expect("rm");
        let id = identify(&r);
        assert!(
            matches!(
                id,
                Identity::Unsure {
                    why: Unsure::Deleted,
                    ..
                }
            ),
            "{id:?}"
        );
        let spelling = Spelling::Path(path.clone());
        assert_eq!(id.label(&p, &spelling), Some(Label::of(["hr", "finance"])));
        // The contents come from the descriptor: still readable after the unlink.
        assert_eq!(read_bounded(&r, MAX).expect("read"), b"x");
        let big = d.path().join("public/big");
        std::fs::write(&big, vec![b'a'; 100]).expect("write");
        assert_eq!(
            open_item(&p, &big.display().to_string(), 99).expect_err("big"),
            FileItemError::TooLarge(100)
        );
        assert_eq!(item(&p, &big.display().to_string()).contents.len(), 100);
    }

    #[test]
    fn a_replaced_path_does_not_change_what_was_resolved() {
        let d = world();
        let p = policy(d.path(), "");
        let path = d.path().join("public/menu.txt");
        let r = resolve(&path).expect("ok").expect("exists");
        // Swap the name for a symlink to hr after resolving: the descriptor's file is read.
        std::fs::rename(&path, d.path().join("public/old.txt")).expect("mv");
        symlink(d.path().join("hr/salary.csv"), &path).expect("ln");
        assert_eq!(
            read_bounded(&r, MAX).expect("read"),
            b"CONTENTS public/menu.txt"
        );
        // Its reported name is now public/old.txt, which reaches it: labelled by that.
        let id = identify(&r);
        assert_eq!(id, Identity::Path(d.path().join("public/old.txt")));
        assert_eq!(id.label(&p, &Spelling::Path(path)), Some(Label::public()));
    }

    #[test]
    fn an_unlabelled_file_names_the_path_its_rules_were_looked_up_by() {
        let d = world();
        // The policy names the world through a symlinked directory: its rules never match a
        // resolved path, so the call is refused, and the error says what was looked up.
        let alias = tempfile::tempdir().expect("tempdir");
        symlink(d.path(), alias.path().join("w")).expect("ln");
        let p = policy(&alias.path().join("w"), "");
        let s = alias.path().join("w/hr/salary.csv").display().to_string();
        let t = germline_release::manifest::Tool {
            destinations: germline_release::manifest::Destinations {
                hosts: Some(vec![]),
                host_of_argument: None,
            },
            consumers: None,
            flows: Vec::new(),
            read_only: false,
        };
        let args = serde_json::json!({ "doc": s });
        let e = crate::callmeta::build(&p, "t", &t, &args, None, &[]).expect_err("refused");
        let want = format!(
            "{s} (resolved: {})",
            d.path().join("hr/salary.csv").display()
        );
        assert!(e.to_string().contains(&want), "{e}");
    }

    #[test]
    fn plan_labels_paths_as_run_does() {
        let d = world();
        let p = policy(d.path(), "");
        let root = d.path().display().to_string();
        symlink(d.path().join("hr"), d.path().join("public/hrdir")).expect("ln");
        let planned = |s: &str| plan_label(&p, s).expect("a path");
        // Existing: the resolved file's label, with a note saying where it resolves.
        let x = planned(&format!("{root}/public/../hr/salary.csv"));
        assert_eq!(x.label, Label::of(["hr"]));
        assert!(
            x.note.as_deref().is_some_and(|n| n.contains("resolves to")),
            "{x:?}"
        );
        // Absent, below a symlinked directory: the path it would have.
        let x = planned(&format!("{root}/public/hrdir/new.csv"));
        assert_eq!(x.label, Label::of(["hr"]), "{x:?}");
        // Absent and spelled with `..`: cannot be known, the default label.
        let x = planned(&format!("{root}/public/nope/../../hr/x.csv"));
        assert_eq!(x.label, Label::of(["hr", "finance"]), "{x:?}");
        // Absent and canonical: its rule.
        assert_eq!(
            planned(&format!("{root}/public/new.txt")).label,
            Label::public()
        );
        // A directory: the default label.
        assert_eq!(
            planned(&format!("{root}/public")).label,
            Label::of(["hr", "finance"])
        );
        assert!(plan_label(&p, "https://example.com/x").is_none());
    }
}

/// A2 for files, at the unit level: however a path into `hr/` is spelled (`.`, `..`, `//`,
/// symlinks to directories and to files, chains of them, absolute or relative, all made by
/// the test), the item's label is the hr label and its contents are the hr file's.
#[cfg(test)]
mod prop {
    use super::*;
    use proptest::prelude::*;
    use std::os::unix::fs::symlink;

    /// The real directories of the world, relative to its root.
    const DIRS: [&str; 6] = ["", "hr", "hr/deep", "public", "public/sub", "fin"];
    /// The hr files a spelling may reach.
    const HR_FILES: [&str; 2] = ["hr/salary.csv", "hr/deep/payslip.txt"];

    /// One step of a spelling, interpreted against the directory it has reached.
    #[derive(Debug, Clone)]
    enum Step {
        /// `.`
        Dot,
        /// an empty component (`//`)
        Empty,
        /// into a real subdirectory (the n-th one, if any)
        Down(u8),
        /// `..` (out of the world's root and back in by its name, at the root)
        Up,
        /// through a symlink the test makes here to a real directory
        DirLink { to: u8, absolute: bool },
    }

    /// How the spelling ends at the hr file.
    #[derive(Debug, Clone)]
    enum Last {
        /// `../..` up to the world's root, then down by name
        Route,
        /// a chain of symlinks to the file, made here
        FileLinks { chain: u8, absolute: bool },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            Just(Step::Dot),
            Just(Step::Empty),
            any::<u8>().prop_map(Step::Down),
            Just(Step::Up),
            (any::<u8>(), any::<bool>()).prop_map(|(to, absolute)| Step::DirLink { to, absolute }),
        ]
    }

    fn last() -> impl Strategy<Value = Last> {
        prop_oneof![
            Just(Last::Route),
            (1u8..4, any::<bool>())
                .prop_map(|(chain, absolute)| Last::FileLinks { chain, absolute }),
        ]
    }

    /// The text of a relative route from real directory `from` to world path `to`.
    fn relative(from: &str, to: &str) -> String {
        let ups = from.split('/').filter(|c| !c.is_empty()).count();
        "../".repeat(ups) + to
    }

    fn join(dir: &str, name: &str) -> String {
        if dir.is_empty() {
            name.to_string()
        } else {
            format!("{dir}/{name}")
        }
    }

    /// Builds the spelling in `root`, making the symlinks it goes through. Returns it and
    /// the hr file (relative to the root) it must reach.
    fn spell(root: &Path, steps: &[Step], last: &Last, file: u8) -> (String, &'static str) {
        let world = root
            .file_name()
            .and_then(|n| n.to_str())
            .expect("utf-8 root");
        let target = HR_FILES[file as usize % HR_FILES.len()];
        let mut out = root.display().to_string();
        let mut cur = String::new(); // the real directory reached, relative to the root
        let mut links = 0usize;
        let mut link = |dir: &str, to: String| {
            links += 1;
            let name = format!("l{links}");
            symlink(to, root.join(dir).join(&name)).expect("symlink");
            name
        };
        for s in steps {
            match s {
                Step::Dot => out.push_str("/."),
                Step::Empty => out.push('/'),
                Step::Down(n) => {
                    let kids: Vec<&str> = DIRS
                        .iter()
                        .copied()
                        .filter(|d| {
                            !d.is_empty() && d.rsplit_once('/').map_or("", |(p, _)| p) == cur
                        })
                        .collect();
                    if let Some(k) = kids.get(*n as usize % kids.len().max(1)) {
                        out.push('/');
                        out.push_str(k.rsplit('/').next().unwrap_or(k));
                        cur = k.to_string();
                    }
                }
                Step::Up => match cur.rsplit_once('/') {
                    Some((p, _)) => {
                        out.push_str("/..");
                        cur = p.to_string();
                    }
                    None if !cur.is_empty() => {
                        out.push_str("/..");
                        cur.clear();
                    }
                    None => out.push_str(&format!("/../{world}")),
                },
                Step::DirLink { to, absolute } => {
                    let dest = DIRS[*to as usize % DIRS.len()];
                    let text = if *absolute {
                        root.join(dest).display().to_string()
                    } else if dest.is_empty() {
                        relative(&cur, ".")
                    } else {
                        relative(&cur, dest)
                    };
                    let name = link(&cur, text);
                    out.push('/');
                    out.push_str(&name);
                    cur = dest.to_string();
                }
            }
        }
        match last {
            Last::Route => {
                let ups = cur.split('/').filter(|c| !c.is_empty()).count();
                out.push_str(&"/..".repeat(ups));
                out.push('/');
                out.push_str(target);
            }
            Last::FileLinks { chain, absolute } => {
                // The chain's far end points at the file; each earlier link at the next.
                let mut to = if *absolute {
                    root.join(target).display().to_string()
                } else {
                    relative(&cur, target)
                };
                let mut name = String::new();
                for _ in 0..*chain {
                    name = link(&cur, to);
                    to = if *absolute {
                        root.join(join(&cur, &name)).display().to_string()
                    } else {
                        name.clone()
                    };
                }
                out.push('/');
                out.push_str(&name);
            }
        }
        (out, target)
    }

    fn policy(dir: &Path) -> Policy {
        let text = format!(
            "[labels]\nhr = \"hr\"\nfinance = \"finance\"\n\n[[item]]\npath = \"{d}/hr/**\"\n\
             label = [\"hr\"]\n\n[[item]]\npath = \"{d}/public/**\"\nlabel = []\n\n\
             [[item]]\npath = \"{d}/fin/**\"\nlabel = [\"finance\"]\n",
            d = dir.display()
        );
        Policy::parse(Path::new("p.toml"), &text).expect("policy")
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn every_spelling_into_hr_is_labelled_hr(
            steps in proptest::collection::vec(step(), 0..10),
            last in last(),
            file in any::<u8>(),
            uri in any::<bool>(),
        ) {
            let d = tempfile::tempdir().expect("tempdir");
            for dir in DIRS.iter().filter(|d| !d.is_empty()) {
                std::fs::create_dir_all(d.path().join(dir)).expect("mkdir");
            }
            for f in HR_FILES.iter().chain(["public/menu.txt", "fin/ledger.db"].iter()) {
                std::fs::write(d.path().join(f), format!("CONTENTS {f}")).expect("write");
            }
            let (spelled, target) = spell(d.path(), &steps, &last, file);
            let p = policy(d.path());
            let open = |s: &str| open_item(&p, s, 1 << 20)
                .map_err(|e| TestCaseError::fail(format!("{s}: {e:?}")));
            // The path as spelled: the model says it reaches the hr file, realpath(3) agrees,
            // and the item is labelled hr with the hr file's contents.
            prop_assert_eq!(
                std::fs::canonicalize(&spelled).ok(),
                Some(d.path().join(target)),
                "{}",
                spelled
            );
            let it = open(&spelled)?
                .ok_or_else(|| TestCaseError::fail(format!("{spelled}: not an item")))?;
            prop_assert_eq!(&it.label, &Some(Label::of(["hr"])), "{}", spelled);
            prop_assert_eq!(it.contents, format!("CONTENTS {target}").into_bytes(), "{}", spelled);
            prop_assert_eq!(it.identity, Identity::Path(d.path().join(target)), "{}", spelled);
            // The same as a file:// URI. A URL's `..` is removed by the URL parser before the
            // kernel sees the path (lexically, not through the symlinks), so the URI may reach
            // another file or none: whatever it reaches, it is labelled by what that file is.
            if uri {
                let s = format!("file://{spelled}");
                let reached = Spelling::of(&s)
                    .and_then(|sp| std::fs::canonicalize(sp.path()).ok())
                    .filter(|r| r.is_file());
                match (open(&s)?, reached) {
                    (None, None) => {}
                    (Some(it), Some(r)) => {
                        let rel = r.strip_prefix(d.path()).map_err(|_| {
                            TestCaseError::fail(format!("{s} left the world: {}", r.display()))
                        })?;
                        let want = match rel.components().next().and_then(|c| c.as_os_str().to_str()) {
                            Some("hr") => Label::of(["hr"]),
                            Some("fin") => Label::of(["finance"]),
                            _ => Label::public(),
                        };
                        prop_assert_eq!(it.label, Some(want), "{}", s);
                        prop_assert_eq!(it.contents, std::fs::read(&r).map_err(|e| TestCaseError::fail(e.to_string()))?, "{}", s);
                    }
                    (got, want) => {
                        return Err(TestCaseError::fail(format!(
                            "{s}: item {:?}, realpath reaches {want:?}",
                            got.map(|i| i.identity)
                        )))
                    }
                }
            }
        }
    }
}
