//! Several views from one daemon (`mount --views`): each subtree is
//! exactly the single-selection view (byte-equal to its bake), the views
//! share one engine (each binary is planned once, not once per view), and
//! bad combinations are usage errors.

use std::fs;
use std::process::Command;

use kpackfs_tests::*;

/// The demo install plus a CCOB-compressed library (its archives come
/// through the shared caches).
fn source() -> TempDir {
    let dir = tempdir();
    let cp = Command::new("cp").arg("-a").arg(assets().join("demo-install/.")).arg(dir.path()).status().unwrap();
    assert!(cp.success());
    let st = Command::new(kpackfs())
        .arg("recompress")
        .arg(assets().join("bin/libmulti.so"))
        .arg(dir.path().join("lib/libmulti_ccob.so"))
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    dir
}

#[test]
fn each_view_is_exactly_its_single_view_and_the_engine_is_shared() {
    require_root();
    let src = source();
    // `+` joins the targets of one view.
    let m = Mount::new(Some(src.path()), "", &["--views", "gfx90a:xnack-,gfx1030,gfx90a+gfx1030"]);
    let mut top: Vec<String> = fs::read_dir(&m.mnt).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    top.sort();
    assert_eq!(top, ["gfx1030", "gfx90a,gfx1030", "gfx90a:xnack-"]);
    for sel in ["gfx90a:xnack-", "gfx1030", "gfx90a,gfx1030"] {
        let baked = bake(src.path(), sel, &[]);
        assert_same_tree(&snapshot(&m.path(sel)), &snapshot(&baked.path().join("out")), &format!("view {sel} vs its bake"));
    }
    // Every view read whole; each fat binary planned once for all of them.
    let s = stats(&m.mnt);
    let single = Mount::new(Some(src.path()), "gfx1030", &[]);
    let _ = snapshot(&single.mnt);
    assert_eq!(counter(&s, "plans_built "), counter(&stats(&single.mnt), "plans_built "), "plans are not shared:\n{s}");
    // Inode numbers never meet across views, and the top says what it serves.
    let ino = |p: &str| std::os::unix::fs::MetadataExt::ino(&fs::metadata(m.path(p)).unwrap());
    assert_ne!(ino("gfx1030/lib/libdemo.so.1.0"), ino("gfx90a:xnack-/lib/libdemo.so.1.0"));
    let arch =
        Command::new("python3").arg("-c").arg("import os,sys; print(os.getxattr(sys.argv[1], 'user.kpackfs.arch').decode())").arg(&m.mnt).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&arch.stdout).trim(), "gfx90a:xnack- gfx1030 gfx90a,gfx1030");
    // The fstab form: one `view=` per view.
    let m2 = Mount::new(Some(src.path()), "", &["-o", "view=gfx1030,view=gfx90a:xnack-"]);
    let baked = bake(src.path(), "gfx1030", &[]);
    assert_same_tree(&snapshot(&m2.path("gfx1030")), &snapshot(&baked.path().join("out")), "-o view= form");
}

#[test]
fn bad_view_lists_are_usage_errors() {
    require_root();
    let work = tempdir();
    let mnt = work.path().join("m");
    fs::create_dir(&mnt).unwrap();
    let demo = assets().join("demo-install");
    for args in [vec!["--views", "gfx1030", "--arch", "gfx1030"], vec!["--views", "gfx1030,gfx1030"], vec!["--views", "sm_80"]] {
        let o = Command::new(kpackfs()).arg("mount").arg(&demo).arg(&mnt).args(&args).args(["--cache-dir", "none"]).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(String::from_utf8_lossy(&o.stderr).lines().count(), 1, "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        assert!(!mounted(&mnt));
    }
}

/// `--views` and `-o view=` take the names `--arch auto` gives
/// (`gfx90a:sramecc+:xnack-`, issue 18 item 11): a `+` that ends a feature
/// is its sign, a `+` before a target joins, and `/` always joins.
#[test]
fn views_take_target_ids_with_feature_signs() {
    require_root();
    let demo = assets().join("demo-install");
    let m = Mount::new(Some(&demo), "", &["--views", "gfx90a:sramecc+:xnack-,gfx1030/gfx90a:xnack+", "-o", "view=gfx90a:sramecc-:xnack++gfx1030"]);
    let mut top: Vec<String> = fs::read_dir(&m.mnt).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    top.sort();
    assert_eq!(top, ["gfx1030,gfx90a:xnack+", "gfx90a:sramecc+:xnack-", "gfx90a:sramecc-:xnack+,gfx1030"]);
    for sel in ["gfx90a:sramecc+:xnack-", "gfx90a:sramecc-:xnack+,gfx1030"] {
        let baked = bake(&demo, sel, &[]);
        assert_same_tree(&snapshot(&m.path(sel)), &snapshot(&baked.path().join("out")), &format!("view {sel} vs its bake"));
    }
}
