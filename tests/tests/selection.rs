//! The empty-selection warning on a compressed install (issue 21 item 5):
//! `kpackfs mount SRC MNT --arch gfx1100`, detached as a user runs it, over
//! a source whose only fat binary holds CCOB bundles, prints the warning on
//! the mount command's own stderr (not only in the daemon's log), and
//! `bake` prints it too.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

use kpackfs_tests::*;

/// Unmounts on drop, so a failed assertion leaves no mount behind.
struct Unmount<'a>(&'a Path);

impl Drop for Unmount<'_> {
    fn drop(&mut self) {
        if mounted(self.0) {
            let _ = Command::new("umount").arg("-l").arg(self.0).status();
        }
    }
}

const WARNING: &str = "--arch gfx1100: ";
/// The targets of libmulti.so (test_assets/README.md), as the warning lists them.
const CARRIED: &str = "carries no code for it (it carries: gfx1030, gfx906, gfx90a:xnack+, gfx90a:xnack-)";

#[test]
fn empty_selection_warning_reaches_the_terminal_on_ccob_sources() {
    require_root();
    let src = tempdir();
    fs::create_dir(src.path().join("lib")).unwrap();
    let st = Command::new(kpackfs())
        .arg("recompress")
        .arg(assets().join("bin/libmulti.so"))
        .arg(src.path().join("lib/libmulti.so"))
        .args(["--ccob-version", "3"])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());

    let work = tempdir();
    let mnt = work.path().join("m");
    fs::create_dir(&mnt).unwrap();
    let out = Command::new(kpackfs())
        .arg("mount")
        .arg(src.path())
        .arg(&mnt)
        .args(["--arch", "gfx1100", "--cache-dir", "none"])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let _unmount = Unmount(&mnt);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {err}", out.status);
    assert!(mounted(&mnt));
    let lines: Vec<&str> = err.lines().filter(|l| l.contains(WARNING)).collect();
    assert_eq!(lines.len(), 1, "mount's stderr: {err:?}");
    assert!(lines[0].contains(CARRIED), "{}", lines[0]);

    let dest = work.path().join("out");
    let o = Command::new(kpackfs()).arg("bake").arg(src.path()).arg(&dest).args(["--arch", "gfx1100", "-q", "--cache-dir", "none"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.contains(WARNING)).collect();
    assert_eq!(lines.len(), 1, "bake's stderr: {err:?}");
    assert!(lines[0].contains(CARRIED), "{}", lines[0]);
    assert!(!dest.exists(), "bake wrote for a target the install does not carry");
}
