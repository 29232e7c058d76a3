//! `--auto-unmount`'s second line of defence: a tiny process that outlives
//! the daemon and detaches its mount if the daemon dies, even by SIGKILL.
//!
//! fusermount3 watches the daemon too, but it unmounts without
//! `MNT_DETACH` and gives up when the mount is momentarily busy while the
//! dying daemon's descriptors close: a few percent of SIGKILLs left a dead
//! mount (ENOTCONN for every user) behind. The watchdog waits for its
//! standard input — a pipe whose only writer is the daemon — to close, then
//! detaches the mount lazily, but only if it is still a kpackfs mount whose
//! connection is gone: a mount that ended normally, or a new live daemon at
//! the same place, is left alone.

use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kpackfs_cli::Failure;

/// Name of the hidden subcommand the watchdog runs as.
pub const SUBCOMMAND: &str = "__unmount-watchdog";

/// Starts the watchdog for `mnt`; the returned pipe end must stay open for
/// the daemon's whole life (its closing is the signal).
pub fn spawn(mnt: &Path) -> Result<std::io::PipeWriter, Failure> {
    let fail = |e: std::io::Error| Failure::runtime(format!("starting the unmount watchdog: {e}"));
    let exe = std::env::current_exe().map_err(fail)?;
    let (reader, writer) = std::io::pipe().map_err(fail)?;
    Command::new(exe)
        .arg(SUBCOMMAND)
        .arg(mnt)
        .stdin(Stdio::from(reader))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Pins no directory, and a Ctrl-C meant for a foreground daemon
        // does not kill its watchdog first.
        .current_dir("/")
        .process_group(0)
        .spawn()
        .map_err(fail)?;
    Ok(writer)
}

/// Whether `mnt` is a kpackfs mount (per mountinfo: no call into it).
fn is_kpackfs_mount(mnt: &Path) -> bool {
    crate::mounts::mounts_at(mnt).iter().any(|m| m.fstype == "fuse.kpackfs")
}

/// Asks the filesystem at `mnt` itself: `statfs` always reaches the FUSE
/// daemon (a `stat` may be answered from the kernel's attribute cache even
/// after the connection died).
fn statfs(mnt: &Path) -> std::io::Result<()> {
    let c = std::ffi::CString::new(mnt.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: `c` is a valid NUL-terminated path and `buf` a writable statfs.
    let mut buf: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut buf) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The watchdog itself: returns once the daemon is gone and its mount (if
/// dead) detached.
pub fn run(mnt: &Path) -> Result<(), Failure> {
    let mut sink = Vec::new();
    // Nothing is ever written: this returns when the daemon's end closes.
    let _ = std::io::stdin().read_to_end(&mut sink);
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end && is_kpackfs_mount(mnt) {
        match statfs(mnt) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTCONN) | Some(libc::ECONNABORTED)) => {
                return crate::mounts::detach_lazily(mnt).map_err(|e| Failure::runtime(format!("detaching {}: {e}", mnt.display())));
            }
            // Live: a new daemon serves it (or the old one is still
            // unmounting normally) — not ours to touch; or another error:
            // look again shortly.
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    Ok(())
}
