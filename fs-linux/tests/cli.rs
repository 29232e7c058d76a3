//! The CLI's contract for scripts: exit status 2 and one clear line for
//! bad arguments or an unusable source/mountpoint.

use std::process::Command;

fn kpackfs() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kpackfs"))
}

fn fails_with_2(args: &[&str], needle: &str) {
    let out = kpackfs().args(args).output().expect("run kpackfs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: status {:?}, stderr {err}", out.status);
    assert!(err.contains(needle), "{args:?}: stderr {err:?} lacks {needle:?}");
}

#[test]
fn bad_arguments_exit_2() {
    let tmp = std::env::temp_dir();
    let t = tmp.to_str().unwrap();
    fails_with_2(&["bake", "/nonexistent-kpackfs-src", "/tmp/x", "--arch", "gfx90a"], "nonexistent");
    fails_with_2(&["bake", "/etc/hostname", "/tmp/x", "--arch", "gfx90a"], "not a directory");
    fails_with_2(&["bake", t, "/tmp/x"], "--arch is required");
    fails_with_2(&["bake", t, "/tmp/x", "--arch", "sm_80"], "processor");
    fails_with_2(&["bake", t, "/tmp/x", "--arch", "gfx90a:xnack"], "feature");
    fails_with_2(&["mount", "/nonexistent-kpackfs-src", t, "--arch", "gfx90a"], "nonexistent");
    fails_with_2(&["mount", t, "/nonexistent-kpackfs-mnt", "--arch", "gfx90a"], "mountpoint");
    fails_with_2(&["mount", t, "/etc/hostname", "--arch", "gfx90a"], "not a directory");
    fails_with_2(&["mount", t, t, "-o", "arch=gfx90a,frobnicate"], "unknown mount option");
    fails_with_2(&["inspect", "/nonexistent-kpackfs-file"], "nonexistent");
    fails_with_2(&["archs", "/nonexistent-kpackfs-src"], "nonexistent");
    fails_with_2(&["resolve", "/nonexistent-kpackfs-file", "--arch", "gfx90a"], "nonexistent");
    fails_with_2(&["resolve", "/etc/hostname", "--arch", "gfx"], "processor");
    fails_with_2(&["--no-such-flag"], "unexpected argument");
}

#[test]
fn bake_refuses_non_empty_destination() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../test_assets/demo-install");
    let dest = std::env::temp_dir().join(format!("kpackfs-cli-dest-{}", std::process::id()));
    std::fs::create_dir_all(&dest).unwrap();
    std::fs::write(dest.join("x"), b"x").unwrap();
    fails_with_2(&["bake", src.to_str().unwrap(), dest.to_str().unwrap(), "--arch", "gfx90a"], "not an empty directory");
    std::fs::remove_dir_all(&dest).unwrap();
}
