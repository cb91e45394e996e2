//! `/proc/PID/mountinfo`, parsed once: [`crate::procfs::mountinfo`] (the checks on a germline
//! and its copies) and the OCI runtime's mount-point and overlay readings use this parser.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The fields of one mountinfo line, as the kernel wrote them (octal escapes left in; see
/// [`unescape`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Line<'a> {
    pub id: &'a str,
    /// `major:minor`.
    pub dev: &'a str,
    pub mount_point: &'a str,
    pub fstype: &'a str,
    pub source: &'a str,
    pub super_options: &'a str,
}

/// Parses one line; `None` for a line without the ` - ` separator or with too few fields.
pub fn parse(line: &str) -> Option<Line<'_>> {
    let f: Vec<&str> = line.split(' ').collect();
    if f.len() < 10 {
        return None;
    }
    let sep = f.iter().position(|x| *x == "-")?;
    Some(Line {
        id: f[0],
        dev: f[2],
        mount_point: f[4],
        fstype: f.get(sep + 1).copied().unwrap_or_default(),
        source: f.get(sep + 2).copied().unwrap_or_default(),
        super_options: f.get(sep + 3).copied().unwrap_or_default(),
    })
}

/// Decodes the kernel's octal escapes (`\040` for a space, `\134` for a backslash).
pub fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// The lines of our own mount namespace whose mount point is `p`, in the kernel's order (the
/// last is the mount on top). Empty if /proc/self/mountinfo cannot be read.
fn own_mounts_at<'a>(p: &Path, text: &'a str) -> Vec<Line<'a>> {
    let want = p.as_os_str().as_bytes();
    text.lines()
        .filter_map(parse)
        .filter(|l| unescape(l.mount_point) == want)
        .collect()
}

/// Whether `p` is a mount point in our mount namespace (a bind of the same filesystem
/// included).
pub fn is_mount_point(p: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    !own_mounts_at(p, &text).is_empty()
}

/// If `p` is an overlay mount, its lower directories (top first), resolved.
pub fn overlay_lowerdirs(p: &Path) -> Option<Vec<PathBuf>> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    lowerdirs_in(p, &text)
}

fn lowerdirs_in(p: &Path, text: &str) -> Option<Vec<PathBuf>> {
    let top = *own_mounts_at(p, text).last()?;
    if top.fstype != "overlay" {
        return None;
    }
    let lower = top
        .super_options
        .split(',')
        .find_map(|o| o.strip_prefix("lowerdir="))?;
    Some(
        lower
            .split(':')
            .map(|d| {
                let p = PathBuf::from(OsStr::from_bytes(&unescape(d)));
                std::fs::canonicalize(&p).unwrap_or(p)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn octal_escapes_are_decoded() {
        assert_eq!(unescape("/a\\040b"), b"/a b".to_vec());
        assert_eq!(unescape("/plain"), b"/plain".to_vec());
    }

    /// A recorded podman overlay (optional fields before the separator vary in number) under a
    /// bind of the same path: the overlay on top is the one read, with its escaped lower dir.
    #[test]
    fn the_top_mount_at_a_path_gives_the_lower_dirs() {
        let text = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
501 22 0:52 / /var/lib/c/m\\040x rw,relatime shared:300 master:1 - overlay overlay rw,lowerdir=/l/a\\040b:/l/c,upperdir=/u,workdir=/w
502 501 0:52 / /var/lib/c/m\\040x rw,relatime - overlay overlay rw,lowerdir=/l/top,upperdir=/u,workdir=/w
";
        let at = Path::new("/var/lib/c/m x");
        assert_eq!(own_mounts_at(at, text).len(), 2);
        assert_eq!(lowerdirs_in(at, text), Some(vec![PathBuf::from("/l/top")]));
        let two = text.lines().take(2).collect::<Vec<_>>().join("\n");
        assert_eq!(
            lowerdirs_in(at, &two),
            Some(vec![PathBuf::from("/l/a b"), PathBuf::from("/l/c")])
        );
        assert_eq!(
            lowerdirs_in(Path::new("/"), text),
            None,
            "ext4 is no overlay"
        );
        assert!(own_mounts_at(Path::new("/var/lib/c"), text).is_empty());
    }
}
