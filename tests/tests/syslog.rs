//! A detached daemon without `--log-file` (its stderr is /dev/null once it
//! is ready) logs to syslog — the journal on systemd machines. A datagram
//! socket of the test's own stands in for /dev/log (`KPACKFS_SYSLOG_SOCKET`);
//! the test reads the records back as syslog would receive them (RFC 3164:
//! `<PRI>TIMESTAMP kpackfs[PID]: MESSAGE`, facility daemon).

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kpackfs_tests::*;

/// Unmounts (lazily) whatever a test left mounted at the path.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        if mounted(&self.0) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

/// Mounts the demo install detached (no `-f`, no `--log-file`) for a target
/// it does not carry, with `socket` as the syslog socket; its stderr.
fn mount_detached(mnt: &Path, socket: &Path) -> String {
    let o = Command::new(kpackfs())
        .arg("mount")
        .arg(assets().join("demo-install"))
        .arg(mnt)
        .args(["--arch", "gfx1100", "--cache-dir", "none"])
        .env("KPACKFS_SYSLOG_SOCKET", socket)
        .env("RUST_LOG", "info")
        .output()
        .expect("run kpackfs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(mounted(mnt));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Receives records until one contains `needle`; returns it. The read
/// timeout only turns a missing record into a failure instead of a hang.
fn record_with(sock: &UnixDatagram, needle: &str) -> String {
    let mut buf = vec![0u8; 65536];
    let mut seen = Vec::new();
    loop {
        match sock.recv(&mut buf) {
            Ok(n) => {
                let r = String::from_utf8_lossy(&buf[..n]).into_owned();
                if r.contains(needle) {
                    return r;
                }
                seen.push(r);
            }
            Err(e) => panic!("no syslog record with {needle:?} ({e}); received: {seen:#?}"),
        }
    }
}

#[test]
fn a_detached_daemon_logs_to_syslog() {
    require_root();
    let dir = tempdir();
    let socket = dir.path().join("log.sock");
    let sock = UnixDatagram::bind(&socket).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let _guard = Unmount(mnt.clone());
    mount_detached(&mnt, &socket);

    // The warning of a target the install does not carry, priority
    // daemon.warning (3 × 8 + 4).
    let demo = assets().join("demo-install");
    let w = record_with(&sock, "carries no code");
    let pid = w.split("kpackfs[").nth(1).and_then(|r| r.split(']').next()).unwrap_or_default().to_string();
    assert!(pid.parse::<u32>().is_ok(), "{w}");
    assert!(
        w.starts_with("<28>")
            && w.ends_with(&format!(
                "kpackfs[{pid}]: --arch gfx1100: {} carries no code for it (it carries: gfx1030, gfx906, gfx90a, gfx90a:xnack+, gfx90a:xnack-)",
                demo.display()
            )),
        "{w}"
    );

    // After it detached (stderr on /dev/null): the unmount's record,
    // daemon.info (3 × 8 + 6), from the same process.
    let st = Command::new("umount").arg(&mnt).status().unwrap();
    assert!(st.success());
    let u = record_with(&sock, "unmounted; counters:");
    assert!(u.starts_with("<30>") && u.contains(&format!(" kpackfs[{pid}]: unmounted; counters:\nlookups ")), "{u}");
}

/// Without a syslog to talk to, the person who ran `mount` is told where
/// the warnings would go instead.
#[test]
fn no_syslog_is_said_on_the_terminal() {
    require_root();
    let dir = tempdir();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let _guard = Unmount(mnt.clone());
    let missing = dir.path().join("nosuch.sock");
    let err = mount_detached(&mnt, &missing);
    assert!(err.contains(&format!("kpackfs: no syslog ({}: ", missing.display())) && err.contains("give --log-file FILE to keep them"), "{err}");
    let st = Command::new("umount").arg(&mnt).status().unwrap();
    assert!(st.success());
}
