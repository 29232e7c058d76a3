//! The mount table as the daemon and its watchdog read it
//! (`/proc/self/mountinfo`), and lazy detaching: shared by `mount.rs` and
//! `watchdog.rs`, neither of which owns the other.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;

/// Unescapes a `/proc/self/mountinfo` path field (`\040` is a space).
pub fn unescape_mountinfo(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// One line of the mount table, the fields kpackfs asks about.
pub struct MountEntry {
    /// `major:minor` of the mounted filesystem.
    pub dev: String,
    /// `fuse.kpackfs`, `ext4`, …
    pub fstype: String,
}

/// The mounts exactly at `mnt`, bottom first, read from the mount table —
/// never by `stat`ing `mnt`, which may be this daemon's own (dead or
/// busy) mount and ask this very process.
pub fn mounts_at(mnt: &Path) -> Vec<MountEntry> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return Vec::new() };
    info.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            if f.get(4).map(|m| unescape_mountinfo(m)).as_deref() != Some(mnt.as_os_str().as_bytes()) {
                return None;
            }
            let fstype = f.iter().position(|x| *x == "-").and_then(|i| f.get(i + 1)).unwrap_or(&"");
            Some(MountEntry { dev: f.get(2)?.to_string(), fstype: fstype.to_string() })
        })
        .collect()
}

/// Whether something is already mounted exactly at `mnt`.
pub fn is_mountpoint(mnt: &Path) -> bool {
    !mounts_at(mnt).is_empty()
}

/// Detaches `mnt` from the namespace even though it is busy (`umount -l`).
pub fn detach_lazily(mnt: &Path) -> std::io::Result<()> {
    let c = std::ffi::CString::new(mnt.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EPERM) {
        return Err(err);
    }
    // Not root: the setuid helper can detach our own mount.
    let ok = ["fusermount3", "fusermount"].iter().any(|h| Command::new(h).arg("-u").arg("-z").arg(mnt).status().is_ok_and(|s| s.success()));
    if ok {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("fusermount -u -z {} failed", mnt.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mount table as util-linux's `findmnt` reads it (an independent
    /// parser): the topmost mount at `/`, its device and type; and nothing
    /// at a fresh directory.
    #[test]
    fn mounts_at_agrees_with_findmnt() {
        let out = Command::new("findmnt").args(["-n", "-o", "MAJ:MIN,FSTYPE", "/"]).output().expect("findmnt (util-linux)");
        let text = String::from_utf8_lossy(&out.stdout);
        let want: Vec<&str> = text.split_whitespace().collect();
        let top = mounts_at(Path::new("/")).pop().expect("something is mounted at /");
        assert_eq!([top.dev.as_str(), top.fstype.as_str()], want[..2]);
        let t = std::env::temp_dir().join(format!("kpackfs-mounts-{}", std::process::id()));
        std::fs::create_dir_all(&t).unwrap();
        assert!(mounts_at(&t).is_empty() && !is_mountpoint(&t));
        std::fs::remove_dir(&t).unwrap();
    }

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape_mountinfo(r"/mnt/a\040b\011c\134d"), b"/mnt/a b\tc\\d");
        assert_eq!(unescape_mountinfo(r"/x\04"), b"/x\\04");
    }
}
