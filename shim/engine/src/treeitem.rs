//! Directory items (issue 27): a path argument that names a directory becomes a tree of file
//! items, each labelled by the rules exactly as a file argument is (fileitem.rs), so that a
//! copy can be given the files of that directory it may see, and nothing else.
//!
//! The directory itself is resolved once, as a file argument is (`openat2` with
//! `RESOLVE_NO_MAGICLINKS`, every symlink on the way followed by the kernel), and must have a
//! trusted name (the kernel's path for it reaches it again without following symlinks). Below
//! it the walk never follows anything: each entry is opened from its directory's descriptor
//! with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS` and `O_NOFOLLOW`, so
//! a `..` or a symlink cannot lead the walk out of the tree or to a file twice.
//! * a regular file is a file item: identified by the kernel's path for its own descriptor
//!   (a file with several hard links has no trusted name and gets the default label joined
//!   with every rule matching its names: `fileitem::Identity::label`), its contents read from
//!   that descriptor, bounded;
//! * a directory is walked;
//! * a symlink, FIFO, socket or device is left out (never opened for I/O): a copy's view of
//!   the tree does not have it. A symlink's target is not followed, not even inside the tree,
//!   so no label can be taken from a name that is not the file's.
//!
//! docs/policy.md ("Directory items") gives the user-facing rules.

use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use germline_policy::Policy;
use nix::errno::Errno;
use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fstat, SFlag};

use crate::callmeta::{ArgItem, ItemKind};
use crate::fileitem::{self, FileItemError, Identity, Resolved, Spelling};
use germline_policy::Label;
use germline_sandbox::TreeEntry;

/// Most files a directory item may hold.
pub const MAX_TREE_FILES: usize = 4096;
/// Deepest a directory item's walk goes.
pub const MAX_TREE_DEPTH: usize = 64;

/// One regular file of a directory item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeFile {
    /// Its path below the directory (plain components, no `.` or `..`).
    pub rel: PathBuf,
    /// Its identity (the trusted name, or why there is none).
    pub identity: Identity,
    /// The rules' label (`None`: no rule covers it).
    pub label: Option<Label>,
    /// Its permission bits (the copy gets them without the write bits).
    pub mode: u32,
    /// Its modification time `(seconds, nanoseconds)` (git's index compares it).
    pub mtime: (i64, i64),
    pub contents: Vec<u8>,
}

/// A directory item: the directory's trusted path and its regular files.
#[derive(Debug)]
pub struct TreeItem {
    pub spelling: Spelling,
    /// The directory's trusted path on the host (where a copy finds it).
    pub host_path: PathBuf,
    pub files: Vec<TreeFile>,
    /// How many entries were left out (symlinks, FIFOs, sockets, devices).
    pub left_out: usize,
}

/// The directory item `spelling` names, or `Ok(None)` if it names no directory here. An error
/// for a directory that cannot be walked safely, whose name cannot be trusted, or that holds
/// more than [`MAX_TREE_FILES`] files or `max_bytes` bytes.
pub fn open_tree(
    policy: &Policy,
    spelling: Spelling,
    max_bytes: u64,
) -> Result<Option<TreeItem>, FileItemError> {
    let Some(root) = fileitem::resolve(spelling.path())? else {
        return Ok(None);
    };
    if root.kind() != SFlag::S_IFDIR {
        return Ok(None);
    }
    let host_path = match fileitem::identify(&root) {
        Identity::Path(p) => p,
        Identity::Unsure { why, .. } => {
            return Err(FileItemError::Unreadable(format!(
                "a directory item needs a name that stands for it, and {}",
                why.why()
            )))
        }
    };
    let (files, left_out) = walk_tree(policy, &root, &host_path, max_bytes, None)?;
    Ok(Some(TreeItem {
        spelling,
        host_path,
        files,
        left_out,
    }))
}

/// The regular files below the directory `root` whose trusted name is `host_path`, sorted,
/// and how many entries were left out. Each file is named by the walk's own path for it, each
/// directory's name checked once after its files are read (see `Walk::dir`); if a check fails
/// (a directory renamed or moved during the walk), the walk is made again naming every file
/// by the kernel's path for it, as a file argument is (`Walk::each_file`).
fn walk_tree(
    policy: &Policy,
    root: &Resolved,
    host_path: &Path,
    max_bytes: u64,
    #[allow(unused_variables)] before_check: Option<&dyn Fn(&Path)>,
) -> Result<(Vec<TreeFile>, usize), FileItemError> {
    let mut walk = Walk::new(policy, host_path, max_bytes, false);
    #[cfg(test)]
    {
        walk.before_check = before_check;
    }
    let walk = match walk.dir(root, false, Path::new(""), 0)? {
        Checked::Yes => walk,
        Checked::Moved => {
            let mut again = Walk::new(policy, host_path, max_bytes, true);
            again.dir(root, false, Path::new(""), 0)?;
            again
        }
    };
    let Walk {
        mut files,
        left_out,
        ..
    } = walk;
    files.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok((files, left_out))
}

struct Walk<'a> {
    policy: &'a Policy,
    root: &'a Path,
    files: Vec<TreeFile>,
    left_out: usize,
    bytes: u64,
    max_bytes: u64,
    /// Identify each file by the kernel's path for it (`fileitem::identify`), not by the
    /// walk's path: the second walk, after a directory moved during the first.
    each_file: bool,
    /// Tests: run before each directory's check (`rel`), to move it meanwhile.
    #[cfg(test)]
    before_check: Option<&'a dyn Fn(&Path)>,
}

/// Whether a directory's walk may stand: its files' names were checked (`Yes`), or a
/// directory on their way no longer has the name the walk reached it by (`Moved`).
enum Checked {
    Yes,
    Moved,
}

impl<'a> Walk<'a> {
    fn new(policy: &'a Policy, root: &'a Path, max_bytes: u64, each_file: bool) -> Walk<'a> {
        Walk {
            policy,
            root,
            files: Vec::new(),
            left_out: 0,
            bytes: 0,
            max_bytes,
            each_file,
            #[cfg(test)]
            before_check: None,
        }
    }

    /// Walks `dir` (`rel` below the root). Every file in it is named by the walk's path,
    /// `root/rel/name`, reached from the root's trusted name through directories opened one
    /// component at a time from their parents' descriptors with no symlink followed; then,
    /// once its files are read, the directory's own name is checked as a file argument's is
    /// (`fileitem::identify`: the kernel's path for it is `root/rel` and reaches it again),
    /// which checks every directory above it too. So each file's name is the one the kernel
    /// gives it unless the directory was renamed during the walk, which the check finds
    /// (`Checked::Moved`), or the file itself was renamed between its open and its read, the
    /// window a file argument has between its identification and its read. One check per
    /// directory holding files instead of three path walks per file (branch git41).
    /// `listable`: `dir.fd` is open for reading (else the listing opens it from itself).
    fn dir(
        &mut self,
        dir: &Resolved,
        listable: bool,
        rel: &Path,
        depth: usize,
    ) -> Result<Checked, FileItemError> {
        if depth > MAX_TREE_DEPTH {
            return Err(FileItemError::Unreadable(format!(
                "it is more than {MAX_TREE_DEPTH} directories deep"
            )));
        }
        let unreadable = |what: &str, e: &dyn std::fmt::Display| {
            FileItemError::Unreadable(format!("{what} {}: {e}", self.root.join(rel).display()))
        };
        // The directory's own inode, listed through its descriptor or one opened from it
        // (never by path again).
        let listed = if listable {
            germline_sys::sys::list_dir(dir.fd.as_raw_fd())
        } else {
            germline_sys::sys::open_beneath_as(
                dir.fd.as_raw_fd(),
                c".",
                libc::O_RDONLY | libc::O_DIRECTORY,
            )
            .and_then(|fd| germline_sys::sys::list_dir(fd.as_raw_fd()))
        }
        .map_err(|e| unreadable("cannot list", &e))?;
        let mut entries: Vec<(std::ffi::OsString, u8)> = listed
            .into_iter()
            .map(|(n, t)| (std::ffi::OsStr::from_bytes(n.as_bytes()).to_os_string(), t))
            .collect();
        entries.sort();
        let mut named_by_walk = false;
        for (name, d_type) in entries {
            let Some((entry, readable)) = self.open_entry(dir, &name, d_type, rel)? else {
                continue;
            };
            let rel = rel.join(&name);
            match entry.kind() {
                SFlag::S_IFDIR => {
                    if let Checked::Moved = self.dir(&entry, readable, &rel, depth + 1)? {
                        return Ok(Checked::Moved);
                    }
                }
                SFlag::S_IFREG if readable => named_by_walk |= self.file_opened(entry, rel)?,
                SFlag::S_IFREG => named_by_walk |= self.file(dir, &name, &entry, rel)?,
                _ => self.left_out += 1,
            }
        }
        #[cfg(test)]
        if let Some(hook) = self.before_check {
            hook(rel);
        }
        let walked = if rel.as_os_str().is_empty() {
            self.root.to_path_buf()
        } else {
            self.root.join(rel)
        };
        if named_by_walk && fileitem::identify(dir) != Identity::Path(walked) {
            return Ok(Checked::Moved);
        }
        Ok(Checked::Yes)
    }

    /// Opens the entry `name` of `dir` (`rel` below the root; `d_type` as listed) one
    /// component from the directory's descriptor, no symlink followed; `Ok(None)`: gone since
    /// it was listed. The flag says whether it was opened for reading.
    ///
    /// An entry listed as a regular file or a directory is opened for reading at once, and
    /// its `fstat` says what it is: one open where an `O_PATH` open, its `fstat` and a second
    /// open by the same name were made (a pooled `git_status`'s walk of 30 files in 16
    /// directories, stop 43). The name can be swapped between the listing and the open as it
    /// could between those two opens, so nothing is opened that was not before; what is not a
    /// regular file or a directory once open is left out unread. An entry of any other type
    /// or one that cannot be opened so (a symlink or a file now, not readable), and every
    /// entry of the second walk, is opened `O_PATH`, as a file argument is.
    fn open_entry(
        &self,
        dir: &Resolved,
        name: &std::ffi::OsStr,
        d_type: u8,
        rel: &Path,
    ) -> Result<Option<(Resolved, bool)>, FileItemError> {
        let unreadable = |what: &str, e: &dyn std::fmt::Display| {
            FileItemError::Unreadable(format!("{what} {}: {e}", self.root.join(rel).display()))
        };
        let open = |flags: OFlag| open_beneath(dir, name, flags);
        let for_reading = match d_type {
            _ if self.each_file => None,
            libc::DT_DIR => Some(OFlag::O_RDONLY | OFlag::O_DIRECTORY),
            libc::DT_REG => Some(READ_FILE),
            _ => None,
        };
        let opened = match for_reading.map(open) {
            Some(Ok(fd)) => Some(fd),
            Some(Err(Errno::ENOENT)) => return Ok(None),
            Some(Err(_)) | None => None,
        };
        let (fd, readable) = match opened {
            Some(fd) => (fd, true),
            None => match open(OFlag::O_PATH) {
                Ok(fd) => (fd, false),
                // Gone since it was listed: as if it had not been there.
                Err(Errno::ENOENT) => return Ok(None),
                Err(e) => return Err(unreadable("cannot open an entry of", &e)),
            },
        };
        let stat = fstat(&fd).map_err(|e| unreadable("fstat in", &e))?;
        Ok(Some((Resolved { fd, stat }, readable)))
    }

    /// The room left for a file of `size` bytes (its read's bound), or why it does not fit.
    fn room_for(&self, size: u64) -> Result<u64, FileItemError> {
        if self.files.len() >= MAX_TREE_FILES {
            return Err(FileItemError::Unreadable(format!(
                "it holds more than {MAX_TREE_FILES} files"
            )));
        }
        if self.bytes.saturating_add(size) > self.max_bytes {
            return Err(FileItemError::TooLarge(self.bytes.saturating_add(size)));
        }
        Ok(self.max_bytes - self.bytes)
    }

    /// Whether the walk's path `spelled` stands for a file of `stat`: it is the file's one
    /// name and a rule glob can match it; otherwise (hard links, a deleted file, a non-UTF-8
    /// name) the kernel's path decides, as for a file argument (`Identity::label`).
    fn by_walk(&self, stat: &nix::sys::stat::FileStat, spelled: &Path) -> bool {
        !self.each_file && stat.st_nlink == 1 && spelled.to_str().is_some()
    }

    /// Labels and keeps the regular file read as `contents`, at `rel` and named `identity`.
    fn keep(
        &mut self,
        rel: PathBuf,
        spelled: PathBuf,
        identity: Identity,
        stat: &nix::sys::stat::FileStat,
        contents: Vec<u8>,
    ) {
        let label = identity.label(self.policy, &Spelling::Path(spelled));
        self.bytes += contents.len() as u64;
        self.files.push(TreeFile {
            rel,
            identity,
            label,
            mode: stat.st_mode & 0o7777,
            mtime: (stat.st_mtime, stat.st_mtime_nsec),
            contents,
        });
    }

    /// Labels and reads the regular file `r`, already open for reading from its directory's
    /// descriptor; whether it was named by the walk's path (which the directory's check then
    /// confirms).
    fn file_opened(&mut self, r: Resolved, rel: PathBuf) -> Result<bool, FileItemError> {
        let max = self.room_for(r.stat.st_size as u64)?;
        let spelled = self.root.join(&rel);
        let stat = r.stat;
        let by_walk = self.by_walk(&stat, &spelled);
        let identity = if by_walk {
            Identity::Path(spelled.clone())
        } else {
            // Labelled as a file argument would be: by the kernel's name for the file.
            fileitem::identify(&r)
        };
        // Read from the descriptor the walk opened (the inode it labelled).
        let contents = fileitem::read_all(r.fd, stat.st_size as u64, max)?;
        self.keep(rel, spelled, identity, &stat, contents);
        Ok(by_walk)
    }

    /// Labels and reads the regular file `r` (resolved `O_PATH`), `name` in the directory
    /// `dir`; whether it was named by the walk's path (which the directory's check then
    /// confirms).
    fn file(
        &mut self,
        dir: &Resolved,
        name: &std::ffi::OsStr,
        r: &Resolved,
        rel: PathBuf,
    ) -> Result<bool, FileItemError> {
        let max = self.room_for(r.stat.st_size as u64)?;
        let spelled = self.root.join(&rel);
        let by_walk = self.by_walk(&r.stat, &spelled);
        // Opened for reading from its directory's descriptor (one component, no symlink),
        // and read only if that is the inode the walk resolved.
        let opened = if by_walk {
            match open_beneath(dir, name, READ_FILE) {
                Ok(fd) => fileitem::read_opened(fd, r, max)?,
                // Renamed or replaced since it was resolved: as below.
                Err(Errno::ENOENT | Errno::ELOOP) => None,
                Err(e) => return Err(fileitem::open_error(e)),
            }
        } else {
            None
        };
        let (identity, contents, by_walk) = match opened {
            Some(contents) => (Identity::Path(spelled.clone()), contents, true),
            // Labelled as a file argument would be: by the kernel's name for the file (a
            // hard-linked file has none it can trust), read from its own descriptor.
            None => (
                fileitem::identify(r),
                fileitem::read_bounded(r, max)?,
                false,
            ),
        };
        self.keep(rel, spelled, identity, &r.stat, contents);
        Ok(by_walk)
    }
}

/// How a regular file of the tree is opened for reading (never blocking on what is swapped
/// in for it, never becoming a controlling terminal).
const READ_FILE: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_NOCTTY)
    .union(OFlag::O_NONBLOCK);

/// Opens `name`, one component of the directory `dir`, with `flags`: beneath it, no symlink
/// followed (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, `O_NOFOLLOW`),
/// close-on-exec.
fn open_beneath(
    dir: &Resolved,
    name: &std::ffi::OsStr,
    flags: OFlag,
) -> nix::Result<std::os::fd::OwnedFd> {
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW)
        .resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS,
        );
    openat2(dir.fd.as_fd(), name, how)
}

/// What of the call's directory items one copy gets (`in_view` says which items its view
/// holds): every directory the agent named, and only the files in the view. The others are
/// not handed to the sandbox at all, so they are absent from the copy (docs/policy.md,
/// "Directory items"). A directory named twice is given once.
pub fn view_entries(items: &[ArgItem], in_view: &dyn Fn(&ArgItem) -> bool) -> Vec<TreeEntry> {
    let mut out: Vec<TreeEntry> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for i in items {
        let entry = match &i.kind {
            ItemKind::Dir { host_path, .. } => TreeEntry::Dir {
                path: host_path.display().to_string(),
            },
            ItemKind::TreeFile {
                host_path,
                mode,
                mtime,
            } if in_view(i) => TreeEntry::File {
                path: host_path.display().to_string(),
                contents: i.contents.clone(),
                mode: *mode,
                mtime: *mtime,
            },
            _ => continue,
        };
        if seen.insert(entry.path().to_string()) {
            out.push(entry);
        }
    }
    out
}

/// The path a relative spelling names below the deployer's working directory, if `s` may be
/// one: not empty, not absolute, no URI scheme, no NUL or line break, and what it names
/// exists (else it stays an inline value, as any other string).
pub fn relative(workdir: &Path, s: &str) -> Option<PathBuf> {
    if s.is_empty()
        || s.starts_with('/')
        || s.len() > 4096
        || s.bytes().any(|b| matches!(b, 0 | b'\n' | b'\r'))
    {
        return None;
    }
    let p = workdir.join(s);
    std::fs::symlink_metadata(&p).ok().map(|_| p)
}

/// Where a copy finds a directory item: the path as the agent spelled it if that is a plain
/// absolute path (no `.`, `..`, empty component or trailing `/`: a copy's mount plan takes
/// only those), else the resolved path. A plain spelling through a symlink is kept, as a file
/// item keeps its spelled name: the resolved name need not be public.
pub fn copy_root(t: &TreeItem) -> PathBuf {
    let plain = |p: &Path| {
        p.to_str().is_some_and(|s| {
            s.strip_prefix('/')
                .is_some_and(|rest| rest.split('/').all(|c| !matches!(c, "" | "." | "..")))
        })
    };
    match &t.spelling {
        Spelling::Path(p) if plain(p) => p.clone(),
        _ => t.host_path.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    const MAX: u64 = 1 << 20;

    fn world() -> tempfile::TempDir {
        crate::testkit::tree(
            [
                "repo/README",
                "repo/src/main.rs",
                "repo/hr/salary.csv",
                "hr/secret.txt",
            ]
            .map(|f| (f, format!("CONTENTS {f}"))),
        )
    }

    fn policy(dir: &Path) -> Policy {
        crate::testkit::policy(
            dir,
            r#"
[[item]]
path = "{d}/repo/**"
label = []

[[item]]
path = "{d}/repo/hr/**"
label = ["hr"]
"#,
        )
    }

    fn tree(p: &Policy, s: &Path) -> TreeItem {
        open_tree(p, Spelling::Path(s.to_path_buf()), MAX)
            .expect("walk")
            .expect("a directory")
    }

    fn labels(t: &TreeItem) -> Vec<(String, Option<Label>)> {
        t.files
            .iter()
            .map(|f| (f.rel.display().to_string(), f.label.clone()))
            .collect()
    }

    #[test]
    fn each_file_is_labelled_by_its_own_rules() {
        let d = world();
        let p = policy(d.path());
        let t = tree(&p, &d.path().join("repo"));
        assert_eq!(t.host_path, d.path().join("repo"));
        assert_eq!(
            labels(&t),
            vec![
                ("README".into(), Some(Label::public())),
                ("hr/salary.csv".into(), Some(Label::of(["hr"]))),
                ("src/main.rs".into(), Some(Label::public())),
            ]
        );
        assert_eq!(t.files[0].contents, b"CONTENTS repo/README");
    }

    #[test]
    fn spellings_of_the_directory_reach_the_same_tree() {
        let d = world();
        let p = policy(d.path());
        symlink(d.path().join("repo"), d.path().join("alias")).expect("ln");
        for s in [
            d.path().join("repo/../repo"),
            d.path().join("repo/./src/.."),
            d.path().join("alias"),
        ] {
            let t = tree(&p, &s);
            assert_eq!(t.host_path, d.path().join("repo"), "{}", s.display());
            assert_eq!(t.files.len(), 3, "{}", s.display());
        }
        // A file is no directory item; a missing path neither.
        for s in [d.path().join("repo/README"), d.path().join("nope")] {
            assert!(open_tree(&p, Spelling::Path(s), MAX).expect("ok").is_none());
        }
    }

    #[test]
    fn links_out_of_the_tree_are_never_followed_and_hard_links_are_unsure() {
        let d = world();
        let p = policy(d.path());
        let repo = d.path().join("repo");
        // Symlinks to an hr file outside, to a directory outside, and to a file inside.
        symlink(d.path().join("hr/secret.txt"), repo.join("out.txt")).expect("ln");
        symlink("../../hr", repo.join("src/hrdir")).expect("ln");
        symlink("README", repo.join("readme-link")).expect("ln");
        // A hard link to the hr file, inside the public tree.
        std::fs::hard_link(d.path().join("hr/secret.txt"), repo.join("innocent.txt")).expect("ln");
        let t = tree(&p, &repo);
        assert_eq!(t.left_out, 3, "the three symlinks are left out");
        let names: Vec<String> = labels(&t).into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            ["README", "hr/salary.csv", "innocent.txt", "src/main.rs"]
        );
        // The hard link has no name it can be trusted by: the default label (hr and finance).
        let hl = t
            .files
            .iter()
            .find(|f| f.rel == Path::new("innocent.txt"))
            .expect("there");
        assert!(
            matches!(
                hl.identity,
                Identity::Unsure {
                    why: fileitem::Unsure::Links(2),
                    ..
                }
            ),
            "{hl:?}"
        );
        assert_eq!(hl.label, Some(Label::of(["hr", "finance"])));
        assert!(t
            .files
            .iter()
            .all(|f| f.contents != b"CONTENTS hr/secret.txt"
                || f.label
                    .as_ref()
                    .is_some_and(|l| l.tags().any(|t| t == "hr"))));
    }

    /// The walk opens an entry listed as a file or a directory for reading at once; the
    /// second walk resolves every entry `O_PATH` first. Over a tree with a FIFO, a socket,
    /// symlinks, a hard link, an executable, an empty file and nested directories both find
    /// the same files, labels, contents, modes and times, and leave out the same entries; the
    /// FIFO is never opened for reading (the walk does not block on it).
    #[test]
    fn opening_listed_entries_at_once_finds_what_resolving_each_first_finds() {
        let d = world();
        let p = policy(d.path());
        let repo = d.path().join("repo");
        std::fs::create_dir_all(repo.join("a/b/c")).expect("mkdir");
        std::fs::write(repo.join("a/b/c/deep.txt"), "deep").expect("write");
        std::fs::write(repo.join("a/empty"), "").expect("write");
        std::fs::write(repo.join("run.sh"), "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(
            repo.join("run.sh"),
            std::os::unix::fs::PermissionsExt::from_mode(0o750),
        )
        .expect("chmod");
        nix::unistd::mkfifo(&repo.join("a/pipe"), nix::sys::stat::Mode::S_IRWXU).expect("fifo");
        let _sock = std::os::unix::net::UnixListener::bind(repo.join("a/sock")).expect("sock");
        symlink("../README", repo.join("a/readme-link")).expect("ln");
        symlink(d.path().join("hr"), repo.join("a/hr-link")).expect("ln");
        std::fs::hard_link(d.path().join("hr/secret.txt"), repo.join("a/b/linked.txt"))
            .expect("ln");
        let root = fileitem::resolve(&repo).expect("resolve").expect("there");
        let walk = |each_file: bool| {
            let mut w = Walk::new(&p, &repo, MAX, each_file);
            assert!(matches!(
                w.dir(&root, false, Path::new(""), 0).expect("walk"),
                Checked::Yes
            ));
            let mut files: Vec<_> = w
                .files
                .iter()
                .map(|f| {
                    (
                        f.rel.clone(),
                        f.label.clone(),
                        f.contents.clone(),
                        f.mode,
                        f.mtime,
                    )
                })
                .collect();
            files.sort_by(|a, b| a.0.cmp(&b.0));
            (files, w.left_out)
        };
        let (at_once, left) = walk(false);
        assert_eq!((at_once.clone(), left), walk(true));
        assert_eq!(left, 4, "the FIFO, the socket and the two symlinks");
        let rels: Vec<&Path> = at_once.iter().map(|f| f.0.as_path()).collect();
        assert_eq!(
            rels,
            [
                "README",
                "a/b/c/deep.txt",
                "a/b/linked.txt",
                "a/empty",
                "hr/salary.csv",
                "run.sh",
                "src/main.rs"
            ]
            .map(Path::new)
        );
        let run = at_once
            .iter()
            .find(|f| f.0 == Path::new("run.sh"))
            .expect("run.sh");
        assert_eq!((run.2.as_slice(), run.3), (&b"#!/bin/sh\n"[..], 0o750));
    }

    /// Files are named by the walk's path and each directory checked once: an unmoved tree
    /// passes every check (no second walk), with the labels the kernel's names give.
    #[test]
    fn an_unmoved_tree_is_named_by_the_walk_and_passes_its_checks() {
        let d = world();
        let p = policy(d.path());
        let repo = d.path().join("repo");
        let root = fileitem::resolve(&repo).expect("resolve").expect("there");
        let mut w = Walk::new(&p, &repo, MAX, false);
        assert!(matches!(
            w.dir(&root, false, Path::new(""), 0).expect("walk"),
            Checked::Yes
        ));
        let mut named: Vec<(PathBuf, Identity)> = w
            .files
            .iter()
            .map(|f| (f.rel.clone(), f.identity.clone()))
            .collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            named,
            ["README", "hr/salary.csv", "src/main.rs"]
                .map(|f| (PathBuf::from(f), Identity::Path(repo.join(f))))
                .to_vec()
        );
    }

    /// A directory renamed during the walk (here into `hr/`, after its file was read and
    /// before its check) is caught by its check, and the tree is walked again naming each
    /// file by the kernel's path for it: the file moved into `hr/` is labelled hr, never by
    /// the name it had when it was opened.
    #[test]
    fn a_directory_moved_during_the_walk_is_walked_again_by_the_kernels_names() {
        let d = world();
        let p = policy(d.path());
        let repo = d.path().join("repo");
        let root = fileitem::resolve(&repo).expect("resolve").expect("there");
        let moved = std::cell::Cell::new(false);
        let hook = |rel: &Path| {
            if rel == Path::new("src") && !moved.replace(true) {
                std::fs::rename(repo.join("src"), repo.join("hr/src")).expect("mv");
            }
        };
        let (files, _) = walk_tree(&p, &root, &repo, MAX, Some(&hook)).expect("walk");
        assert!(moved.get());
        let labels: Vec<(String, Option<Label>)> = files
            .iter()
            .map(|f| (f.rel.display().to_string(), f.label.clone()))
            .collect();
        assert_eq!(
            labels,
            vec![
                ("README".into(), Some(Label::public())),
                ("hr/salary.csv".into(), Some(Label::of(["hr"]))),
                ("hr/src/main.rs".into(), Some(Label::of(["hr"]))),
            ]
        );
    }

    #[test]
    fn limits_and_relative_spellings() {
        let d = world();
        let p = policy(d.path());
        assert!(matches!(
            open_tree(&p, Spelling::Path(d.path().join("repo")), 10),
            Err(FileItemError::TooLarge(_))
        ));
        let w = d.path().join("repo");
        assert_eq!(relative(&w, "README"), Some(w.join("README")));
        assert_eq!(relative(&w, "."), Some(w.join(".")));
        for s in ["", "/etc/passwd", "nope", "README\n", "a\0b"] {
            assert_eq!(relative(&w, s), None, "{s:?}");
        }
    }
}
