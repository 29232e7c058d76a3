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

/// Whether something is already mounted exactly at `mnt`.
pub fn is_mountpoint(mnt: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return false };
    info.lines().any(|l| l.split(' ').nth(4).map(unescape_mountinfo).as_deref() == Some(mnt.as_os_str().as_bytes()))
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
