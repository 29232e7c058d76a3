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

/// Runs kpackfs on the fake sysfs root `tests/fixtures/kfd/<fixture>`.
fn on_machine(fixture: &str, args: &[&str]) -> std::process::Output {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/kfd").join(fixture);
    kpackfs()
        .args(args)
        .env("KPACKFS_SYSFS_ROOT", root)
        .env_remove("HSA_XNACK")
        .env_remove("HSA_ENABLE_SRAMECC")
        .env_remove("HSA_OVERRIDE_GFX_VERSION")
        .output()
        .expect("run kpackfs")
}

#[test]
fn archs_machine_lists_each_gpu_and_what_auto_is() {
    let lines = |fixture| {
        let out = on_machine(fixture, &["archs", "--machine"]);
        assert!(out.status.success(), "{fixture}: {:?} {}", out.status, String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(
        lines("mi210"),
        "node 2: gfx90a:sramecc+:xnack- (gfx_target_version 90010, device 0x740f)\n\
         node 3: gfx90a:sramecc+:xnack- (gfx_target_version 90010, device 0x740f)\n\
         xnack: off (a process with HSA_XNACK=1 gets xnack+)\n\
         auto: gfx90a:sramecc+:xnack-\n"
    );
    let mi300x = lines("mi300x");
    assert_eq!(mi300x.lines().count(), 10, "{mi300x}");
    assert!(mi300x.starts_with("node 2: gfx942:sramecc+:xnack- (gfx_target_version 90402, device 0x74a1)\n"), "{mi300x}");
    assert!(mi300x.ends_with("\nauto: gfx942:sramecc+:xnack-\n"), "{mi300x}");
    assert_eq!(lines("rx7900xtx"), "node 1: gfx1100 (gfx_target_version 110000, device 0x744c)\nauto: gfx1100\n");
    assert_eq!(lines("strix-halo"), "node 1: gfx1151 (gfx_target_version 110501, device 0x1586)\nauto: gfx1151\n");
    assert_eq!(
        lines("mixed"),
        "node 1: gfx1100 (gfx_target_version 110000, device 0x744c)\n\
         node 2: gfx1036 (gfx_target_version 100306, device 0x164e)\n\
         auto: gfx1100,gfx1036\n"
    );
    // The runtime's HSA_XNACK, read from kpackfs's own environment.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/kfd/mi210");
    let out = kpackfs().args(["archs", "--machine"]).env("KPACKFS_SYSFS_ROOT", root).env("HSA_XNACK", "1").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).ends_with("xnack: on (HSA_XNACK=1)\nauto: gfx90a:sramecc+:xnack+\n"));
}

#[test]
fn auto_without_a_gpu_exits_2_with_one_line() {
    let demo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../test_assets/demo-install");
    let demo = demo.to_str().unwrap();
    let tmp = std::env::temp_dir();
    let dest = tmp.join(format!("kpackfs-cli-nogpu-{}", std::process::id()));
    let dest = dest.to_str().unwrap();
    let t = tmp.to_str().unwrap();
    for (fixture, args, start) in [
        ("cpu-only", vec!["archs", "--machine"], "kpackfs: archs --machine: no AMD GPU found: "),
        ("cpu-only", vec!["bake", demo, dest, "--arch", "auto"], "kpackfs: --arch auto: no AMD GPU found: "),
        ("cpu-only", vec!["bake", demo, dest, "--arch", "gfx1030,auto"], "kpackfs: --arch auto: no AMD GPU found: "),
        ("no-such-fixture", vec!["bake", demo, dest, "--arch", "auto"], "kpackfs: --arch auto: no AMD GPU found: no KFD topology at "),
        // The fstab form goes the same way.
        ("cpu-only", vec!["mount", demo, t, "-o", "arch=auto"], "kpackfs: --arch auto: no AMD GPU found: "),
    ] {
        let out = on_machine(fixture, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with(start), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(!std::path::Path::new(dest).exists(), "{args:?} created {dest}");
    }
    let err = String::from_utf8(on_machine("cpu-only", &["archs", "--machine"]).stderr).unwrap();
    assert!(err.ends_with("cpu-only/class/kfd/kfd/topology/nodes lists 1 CPU node and no GPU\n"), "{err}");
}

/// Every file of a tree with its bytes (symlinks as their targets).
fn tree(root: &std::path::Path) -> std::collections::BTreeMap<std::path::PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let md = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            if md.is_dir() {
                dirs.push(p);
            } else if md.is_symlink() {
                out.insert(rel, std::fs::read_link(&p).unwrap().into_os_string().into_encoded_bytes());
            } else {
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

#[test]
fn bake_arch_auto_selects_the_machines_targets() {
    let demo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../test_assets/demo-install");
    let base = std::env::temp_dir().join(format!("kpackfs-cli-auto-{}", std::process::id()));
    let bake = |fixture: &str, arch: &str, name: &str| {
        let dest = base.join(name);
        let out = on_machine(fixture, &["bake", demo.to_str().unwrap(), dest.to_str().unwrap(), "--arch", arch, "-q", "--cache-dir", "none"]);
        assert!(out.status.success(), "{arch}: {}", String::from_utf8_lossy(&out.stderr));
        tree(&dest)
    };
    let auto = bake("mi210", "auto", "auto");
    assert!(auto.keys().any(|p| p.to_string_lossy().ends_with("demo_app_gfx90a:xnack-.kpack")), "{:?}", auto.keys());
    assert!(!auto.keys().any(|p| p.to_string_lossy().contains("xnack+") || p.to_string_lossy().contains("gfx1030")), "{:?}", auto.keys());
    assert!(auto == bake("cpu-only", "gfx90a:sramecc+:xnack-", "named"), "auto on the MI210 fixture differs from naming its target");
    // `auto` mixes with named targets; with HSA_XNACK=1 the xnack+ code objects come instead.
    assert!(bake("mi210", "auto,gfx1030", "mixed") == bake("cpu-only", "gfx90a:sramecc+:xnack-,gfx1030", "mixed-named"));
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/kfd/mi210");
    let dest = base.join("xnack");
    let out = kpackfs()
        .args(["bake", demo.to_str().unwrap(), dest.to_str().unwrap(), "--arch", "auto", "-q", "--cache-dir", "none"])
        .env("KPACKFS_SYSFS_ROOT", root)
        .env("HSA_XNACK", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(tree(&dest).keys().any(|p| p.to_string_lossy().ends_with("libdemo.so.1.0_gfx90a:xnack+.kpack")));
    std::fs::remove_dir_all(&base).unwrap();
}
