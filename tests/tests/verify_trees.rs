//! `kpackfs verify` on trees without a pack manifest — a baked view and a
//! live kpackfs mount — checks what they hold (archives decode, markers
//! lead to archives, every wrapper resolves; with `--against` each code
//! object against the fat original) and says what it could not check; it
//! used to fail them all for want of a `.kpm`. The expected counts are
//! written by hand from test_assets/build.sh (demo_app and libdemo.so.1.0:
//! one wrapper each with gfx90a:xnack- code; libdemo2.so: two wrappers of
//! bare gfx90a, which a gfx90a:xnack- device also loads): 3 archives for
//! gfx90a:xnack-, 1 + 1 + 2 × 2 = 6 resolutions.

use std::fs;
use std::path::Path;
use std::process::Command;

use kpackfs_tests::*;

fn verify(args: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
    let o = Command::new(kpackfs()).arg("verify").args(args).output().expect("run kpackfs");
    (o.status.code(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

const CHECKED: &str = "checked: every archive opens and every code object in it decodes
checked: 3 host binaries: none left fat; every wrapper resolves through both loader generations for each target the archives claim";
const NO_KPM: &str = "not checked: archive sizes and digests: no pack manifest (.kpack/*.kpm) here";

fn assert_ok_view(root: &Path) {
    let (code, out) = verify(&[root.as_os_str()]);
    assert_eq!(code, Some(0), "{out}");
    let want = format!(
        "{CHECKED}\n{NO_KPM}\nnot checked: code objects against the fat original (no --against SOURCE)\nverify: OK — 0 artifact(s), 3 host binaries, 3 archive(s), targets [gfx90a, gfx90a:xnack-], 6 wrapper resolutions\n"
    );
    assert_eq!(out, want);
    let (code, out) = verify(&[root.as_os_str(), "--json".as_ref()]);
    assert_eq!(code, Some(0), "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
    assert_eq!(v["exact"], false);
    assert_eq!(
        v["not_checked"],
        serde_json::json!(["archive sizes and digests: no pack manifest (.kpack/*.kpm) here", "code objects against the fat original (no --against SOURCE)"])
    );
    let demo = assets().join("demo-install");
    let (code, out) = verify(&[root.as_os_str(), "--against".as_ref(), demo.as_os_str()]);
    assert_eq!(code, Some(0), "{out}");
    let want = format!(
        "{CHECKED}, to the fat original's code object\n{NO_KPM}\nverify: OK — 0 artifact(s), 3 host binaries, 3 archive(s), targets [gfx90a, gfx90a:xnack-], 6 wrapper resolutions exact\n"
    );
    assert_eq!(out, want);
}

#[test]
fn a_baked_view_is_verified_with_what_it_has() {
    let baked = bake(&assets().join("demo-install"), "gfx90a:xnack-", &["--archive-compression", "none"]);
    let root = baked.path().join("out");
    assert_ok_view(&root);

    // A changed byte of a code object in a `none` archive: only the fat
    // original can tell (the not-checked line said so).
    let archive = root.join("lib/.kpack/libdemo.so.1.0_gfx90a:xnack-.kpack");
    let mut b = fs::read(&archive).unwrap();
    b[300] ^= 0x40;
    fs::write(&archive, &b).unwrap();
    let demo = assets().join("demo-install");
    let (code, out) = verify(&[root.as_os_str(), "--against".as_ref(), demo.as_os_str()]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("resolve: lib/libdemo.so.1.0: wrapper 0 for gfx90a:xnack-: code object differs from the fat original's"), "{out}");

    // An archive gone: its binary's markers lead nowhere, named as such.
    fs::remove_file(&archive).unwrap();
    let (code, out) = verify(&[root.as_os_str()]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("markers: lib/libdemo.so.1.0: kpack'd, but its markers lead to no archive for gfx90a, gfx90a:xnack- (looked for lib/.kpack/libdemo.so.1.0_@GFXARCH@.kpack)"),
        "{out}"
    );

    // Every archive gone: every binary named, never "nothing to verify".
    for d in ["lib/.kpack", "bin/.kpack"] {
        fs::remove_dir_all(root.join(d)).unwrap();
    }
    let (code, out) = verify(&[root.as_os_str()]);
    assert_eq!(code, Some(1), "{out}");
    for bin in ["bin/demo_app", "lib/libdemo.so.1.0", "lib/libdemo2.so"] {
        assert!(out.contains(&format!("markers: {bin}: kpack'd, but its markers lead to no archive for any target")), "{bin}: {out}");
    }
    assert!(!out.contains("nothing to verify") && !out.contains("verify: OK"), "{out}");
}

#[test]
fn a_kpackfs_mount_is_verified_with_what_it_has() {
    require_root();
    let m = Mount::new(None, "gfx90a:xnack-", &["--archive-compression", "none"]);
    assert_ok_view(&m.mnt);
}
