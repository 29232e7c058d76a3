//! `kpackfs split-wheel` on a fat wheel built from test_assets binaries
//! and a hand-made gfx1100 library: the host and device wheels install
//! with pip (`hiplib[device-<gfx>]`, resolved from the split's output),
//! and the test HIP runtime (tests/hip-stub) loads, from the installed
//! tree, exactly clang-offload-bundler's objects committed in
//! test_assets/expected — the object per device from a table written by
//! hand below — for every device wheel; a host wheel installed alone fails
//! to load in the test runtime rather than loading wrong code.
//! Needs: python3 with pip (apt-get install python3-pip).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kpackfs_tests::wheel::*;
use kpackfs_tests::*;

const WHEEL: &str = "hiplib-1.2-py3-none-linux_x86_64.whl";

fn kp(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(kpackfs()).args(args).output().expect("kpackfs")
}

/// libmulti.so (one wrapper) with its bundle replaced by one holding
/// `entries` (target, libmulti object file name): the test runtime, like
/// kpack, matches by TOC key, not by the object's e_flags, so relabelled
/// objects stand in for targets no toolchain here builds.
fn hand_library(entries: &[(&str, &str)]) -> Vec<u8> {
    let t = fs::read_to_string(assets().join("expected/libmulti.so/layout.tsv")).unwrap();
    let get = |k: &str| -> usize { t.lines().find_map(|l| l.strip_prefix(k).and_then(|v| v.strip_prefix('\t'))).unwrap().trim().parse().unwrap() };
    assert_eq!(get("bundle_offset_0"), 0);
    let (at, size) = (get("fatbin_sh_offset"), get("fatbin_sh_size"));
    let objs: Vec<(String, Vec<u8>)> =
        entries.iter().map(|(target, arch)| (format!("hipv4-amdgcn-amd-amdhsa--{target}"), expected_object("libmulti.so", 0, arch))).collect();
    let mut list: Vec<(&str, &[u8])> = vec![("host-x86_64-unknown-linux", &[])];
    list.extend(objs.iter().map(|(id, o)| (id.as_str(), o.as_slice())));
    let b = kpackfs_core::formats::bundle::write_bundle(&list, 8);
    let mut data = fs::read(assets().join("bin/libmulti.so")).unwrap();
    assert!(b.len() < size, "hand-made bundle ({}) larger than the section ({size})", b.len());
    data[at..at + size].fill(0);
    data[at..at + b.len()].copy_from_slice(&b);
    data
}

/// A gfx1100 library for the family wheels without a gfx1100 toolchain:
/// its one device entry holds libmulti's gfx1030 object.
fn gfx1100_library() -> Vec<u8> {
    hand_library(&[("gfx1100", "gfx1030")])
}

/// A fat wheel: a package with four HIP libraries (libtwo, libmulti,
/// librelr and the gfx1100 one), rocBLAS tables for three targets, an AOTriton image
/// directory for the gfx11 family, dist-info with a RECORD. `extra` adds
/// one more entry name.
fn fat_wheel(dir: &Path, extra: Option<&str>) -> PathBuf {
    let p = dir.join(WHEEL);
    let data = dir.join("fat-wheel-data");
    fs::create_dir_all(&data).unwrap();
    let file = |name: &str, bytes: &[u8]| {
        let f = data.join(name);
        fs::write(&f, bytes).unwrap();
        f
    };
    let bins = assets().join("bin");
    let empty = file("empty", b"");
    let hand = file("libgfx11.so", &gfx1100_library());
    let tensile: Vec<(String, PathBuf)> = ["gfx90a", "gfx1030", "gfx1100"]
        .iter()
        .map(|g| (format!("hiplib/lib/rocblas/library/TensileLibrary_{g}.dat"), file(g, format!("t{}", &g[3..]).as_bytes())))
        .collect();
    let image = file("attn.aks2", b"gfx11 family image");
    let x = file("extra", b"x");
    let libs: Vec<(String, PathBuf)> = ["libtwo.so", "libmulti.so", "librelr.so"].iter().map(|l| (format!("hiplib/lib/{l}"), bins.join(l))).collect();
    let mut files: Vec<(&str, &Path, u32)> = vec![("hiplib/__init__.py", &empty, 0o644)];
    files.extend(libs.iter().map(|(n, f)| (n.as_str(), f.as_path(), 0o755)));
    files.push(("hiplib/lib/libgfx11.so", &hand, 0o755));
    files.extend(tensile.iter().map(|(n, f)| (n.as_str(), f.as_path(), 0o644)));
    files.push(("hiplib/lib/aotriton.images/amd-gfx11xx/flash/attn.aks2", &image, 0o644));
    if let Some(e) = extra {
        files.push((e, &x, 0o644));
    }
    write_wheel(&p, "hiplib", "1.2", "py3-none-linux_x86_64", "A test package.", &files);
    p
}

const LIBS: [&str; 4] = ["libmulti.so", "libtwo.so", "librelr.so", "libgfx11.so"];

/// Written by hand from the loader rules in docs/ (offload-bundles.md §2,
/// kpack-archives.md §8), not from kpackfs code: for each device, the
/// object each of [`LIBS`] must load, as (test_assets/expected binary,
/// object file name), or `None` when nothing may load. libmulti carries
/// gfx90a:xnack± (an xnack+ device never takes xnack-), gfx906 and
/// gfx1030; libtwo bare gfx90a (every gfx90a mode) and gfx1030; librelr
/// gfx90a:xnack- and gfx1030 (nothing for an xnack+ device, though the
/// gfx90a wheel holds an xnack+ archive for libmulti); libgfx11 only
/// gfx1100, holding libmulti's gfx1030 object.
/// (test_assets/expected binary, object file name).
type Object = (&'static str, &'static str);

const WHEEL_LOADS: [(&str, [Option<Object>; 4]); 7] = [
    ("gfx90a:xnack+", [Some(("libmulti.so", "gfx90a:xnack+")), Some(("libtwo.so", "gfx90a")), None, None]),
    ("gfx90a:xnack-", [Some(("libmulti.so", "gfx90a:xnack-")), Some(("libtwo.so", "gfx90a")), Some(("librelr.so", "gfx90a:xnack-")), None]),
    // Exact features beat "any"; the probe order drops features from the
    // right, so a sramecc+ device takes the object of its xnack setting.
    ("gfx90a:sramecc+:xnack-", [Some(("libmulti.so", "gfx90a:xnack-")), Some(("libtwo.so", "gfx90a")), Some(("librelr.so", "gfx90a:xnack-")), None]),
    ("gfx90a:sramecc+:xnack+", [Some(("libmulti.so", "gfx90a:xnack+")), Some(("libtwo.so", "gfx90a")), None, None]),
    ("gfx906", [Some(("libmulti.so", "gfx906")), None, None, None]),
    ("gfx1030", [Some(("libmulti.so", "gfx1030")), Some(("libtwo.so", "gfx1030")), Some(("librelr.so", "gfx1030")), None]),
    ("gfx1100", [None, None, None, Some(("libmulti.so", "gfx1030"))]),
];

/// The bundle each wrapper of `lib` points at (libgfx11 is libmulti's layout).
fn bundles_of(lib: &str) -> Vec<usize> {
    wrapper_bundles(if lib == "libgfx11.so" { "libmulti.so" } else { lib })
}

/// Loads every library of `site` on `device` with the test runtime (both
/// loader generations); returns what went wrong. With `alone` (no device
/// wheel installed) every wrapper must fail with ARCHIVE_NOT_FOUND.
fn check_loads(site: &Path, device: &str, alone: bool, work: &Path) -> Vec<String> {
    let row = WHEEL_LOADS.iter().find(|(d, _)| *d == device).unwrap_or_else(|| panic!("{device} not in WHEEL_LOADS")).1;
    let mut bad = Vec::new();
    for (lib, want) in LIBS.iter().zip(row) {
        for loader in ["feb2026", "newest"] {
            let out = work.join(format!("{}-{lib}-{loader}", device.replace(':', "_")));
            let mut cmd = Command::new(Stub::get().driver());
            cmd.arg(site.join("hiplib/lib").join(lib));
            let recs = stub_run(&mut cmd, device, None, loader, &out);
            let bundles = bundles_of(lib);
            let label = format!("{}: {lib} on {device} ({loader})", site.display());
            if recs.len() != bundles.len() {
                bad.push(format!("{label}: {} registrations for {} wrappers", recs.len(), bundles.len()));
            }
            for r in &recs {
                let w = r.co_index as usize;
                match (want, alone) {
                    (_, true) if r.status != "ARCHIVE_NOT_FOUND" => {
                        bad.push(format!("{label} wrapper {w}: {} without device wheels, want ARCHIVE_NOT_FOUND", r.status))
                    }
                    (_, true) => {}
                    (Some((bin, arch)), false) => {
                        let ok = r.magic == "HIPK"
                            && r.status == "OK"
                            && r.source.ends_with(".kpack")
                            && bundles.get(w).is_some_and(|&b| r.bytes.as_deref() == Some(&expected_object(bin, b, arch)[..]));
                        if !ok {
                            bad.push(format!(
                                "{label} wrapper {w}: want clang-offload-bundler's {bin} {arch} object, got {} {} from {}",
                                r.status, r.arch, r.source
                            ));
                        }
                    }
                    (None, false) if r.status == "OK" => bad.push(format!("{label} wrapper {w}: loaded {} from {}, but nothing may load", r.arch, r.source)),
                    (None, false) => {}
                }
            }
            let _ = fs::remove_dir_all(&out);
        }
    }
    bad
}

/// The family layout (default): one wheel per target plus the gfx11
/// family wheel; `pip install 'hiplib[device-<gfx>]'` brings that target's
/// wheel and its family's, nothing else; the test runtime loads exactly the
/// bundler's objects for each device wheel; the host alone loads nothing.
#[test]
fn wheel_splits_installs_and_loads_exactly() {
    let dir = tempdir();
    let fat = fat_wheel(dir.path(), None);
    let out = dir.path().join("out");
    let o = kp(&["split-wheel".as_ref(), fat.as_os_str(), out.as_os_str(), "-q".as_ref()]);
    assert!(o.status.success(), "{}", text(&o));
    let names = listing(&out);
    let dev = |g: &str| format!("hiplib_device_{g}-1.2-py3-none-linux_x86_64.whl");
    let want: Vec<String> = [WHEEL.to_string(), dev("gfx1030"), dev("gfx11"), dev("gfx1100"), dev("gfx906"), dev("gfx90a")].into();
    assert_eq!(names, want);
    for n in &names {
        check_record(&out.join(n));
    }
    let host = out.join(WHEEL);
    let q = |g: &str, e: &str| format!("Requires-Dist: hiplib-device-{g} == 1.2; extra == \"{e}\"\n");
    let mut extras = String::from("Requires-Dist: rocm-bootstrap\n");
    for t in ["gfx1030", "gfx1100", "gfx906", "gfx90a"] {
        extras += &format!("Provides-Extra: device-{t}\n{}", q(t, &format!("device-{t}")));
        if t == "gfx1100" {
            extras += &q("gfx11", "device-gfx1100");
        }
    }
    extras += "Provides-Extra: device-all\n";
    for g in ["gfx1030", "gfx11", "gfx1100", "gfx906", "gfx90a"] {
        extras += &q(g, "device-all");
    }
    assert_eq!(metadata(&host, "hiplib-1.2.dist-info"), format!("Metadata-Version: 2.1\nName: hiplib\nVersion: 1.2\n{extras}\nA test package.\n"));
    let m1100 = metadata(&out.join(dev("gfx1100")), "hiplib_device_gfx1100-1.2.dist-info");
    assert!(m1100.ends_with("Requires-Dist: hiplib == 1.2\nRequires-Dist: hiplib-device-gfx11 == 1.2\n"), "{m1100}");

    let links = dir.path().join("links");
    fs::create_dir(&links).unwrap();
    bootstrap_stub(&links);
    let work = tempdir();
    let mut bad = Vec::new();
    // requirement → the distributions it must install (by hand), the
    // devices to load on. A device wheel named directly brings its host
    // and its family wheel through its own Requires-Dist.
    let cases: [(&str, &str, &[&str], &[&str]); 5] = [
        ("gfx90a", "hiplib[device-gfx90a]", &["hiplib_device_gfx90a"], &["gfx90a:xnack+", "gfx90a:xnack-", "gfx90a:sramecc+:xnack-", "gfx90a:sramecc+:xnack+"]),
        ("gfx906", "hiplib[device-gfx906]", &["hiplib_device_gfx906"], &["gfx906"]),
        ("gfx1030", "hiplib[device-gfx1030]", &["hiplib_device_gfx1030"], &["gfx1030"]),
        ("gfx1100", "hiplib[device-gfx1100]", &["hiplib_device_gfx11", "hiplib_device_gfx1100"], &["gfx1100"]),
        ("gfx1100", "hiplib-device-gfx1100", &["hiplib_device_gfx11", "hiplib_device_gfx1100"], &["gfx1100"]),
    ];
    for (i, (extra, req, dists, devices)) in cases.into_iter().enumerate() {
        let site = dir.path().join(format!("site-{i}"));
        pip(&site, &["--find-links".as_ref(), out.as_os_str(), "--find-links".as_ref(), links.as_os_str(), req.as_ref()]);
        let mut want: Vec<String> = vec!["hiplib-1.2".into(), "rocm_bootstrap-0.0.0".into()];
        want.extend(dists.iter().map(|d| format!("{d}-1.2")));
        want.sort();
        assert_eq!(installed(&site), want, "pip install '{req}'");
        for d in devices {
            bad.extend(check_loads(&site, d, false, work.path()));
        }
        let tensile = |t: &str| site.join(format!("hiplib/lib/rocblas/library/TensileLibrary_{t}.dat"));
        for t in ["gfx90a", "gfx1030", "gfx1100"] {
            assert_eq!(tensile(t).is_file(), t == extra, "{req}: TensileLibrary_{t}.dat");
        }
        assert_eq!(site.join("hiplib/lib/aotriton.images/amd-gfx11xx/flash/attn.aks2").is_file(), extra == "gfx1100", "{req}: the gfx11 family image");
        if extra == "gfx90a" {
            // xnack variants ship in the bare-processor wheel, names kept.
            for a in ["gfx90a", "gfx90a:xnack+", "gfx90a:xnack-"] {
                assert!(site.join(format!("hiplib/.kpack/hiplib_{a}.kpack")).is_file(), "{req}: hiplib_{a}.kpack");
            }
        }
    }

    // The host wheel alone: every wrapper on every device fails in the
    // test runtime with ARCHIVE_NOT_FOUND — never wrong code.
    let alone = dir.path().join("alone");
    pip_install(&alone, &[&host]);
    for (device, _) in WHEEL_LOADS {
        bad.extend(check_loads(&alone, device, true, work.path()));
    }
    assert!(bad.is_empty(), "{} wrong loads:\n{}", bad.len(), bad.join("\n"));
    // doctor names the extra that brings the missing device wheel (from
    // the installed METADATA), and passes the libraries with gfx90a code
    // once it is installed.
    let d = kp(&["doctor".as_ref(), alone.as_os_str(), "--arch".as_ref(), "gfx90a:xnack-".as_ref()]);
    assert_eq!(d.status.code(), Some(1), "{}", text(&d));
    let line = "hiplib/lib/libmulti.so: PROBLEM for gfx90a:xnack-: no archive found for wrapper 0 (looked for hiplib/.kpack/hiplib_{gfx90a:xnack-|gfx90a}.kpack); pip install 'hiplib[device-gfx90a]' brings it (hiplib-device-gfx90a == 1.2)\n";
    assert!(text(&d).contains(line), "{line}not in:\n{}", text(&d));
    let d = kp(&["doctor".as_ref(), dir.path().join("site-0").as_os_str(), "--arch".as_ref(), "gfx90a:xnack-".as_ref()]);
    for lib in ["libmulti.so: OK for gfx90a:xnack-", "libtwo.so: OK for gfx90a:xnack-"] {
        assert!(text(&d).contains(lib), "{lib} not in:\n{}", text(&d));
    }

    // Deterministic: the same wheel gives the same bytes.
    let again = dir.path().join("again");
    let o = kp(&["split-wheel".as_ref(), fat.as_os_str(), again.as_os_str(), "-q".as_ref()]);
    assert!(o.status.success(), "{}", text(&o));
    for n in &names {
        assert!(fs::read(out.join(n)).unwrap() == fs::read(again.join(n)).unwrap(), "{n} differs between two runs");
    }
}

/// `--layout processor`: one wheel per processor with `py3-none` tags and
/// no dependencies between device wheels (kpackfs's earlier layout); the
/// gfx11 family image goes to its one known member, gfx1100. Installed
/// with pip, the gfx90a pair loads the bundler's objects.
#[test]
fn processor_layout_is_kept_as_an_option() {
    let dir = tempdir();
    let fat = fat_wheel(dir.path(), None);
    let out = dir.path().join("out");
    let o = kp(&["split-wheel".as_ref(), fat.as_os_str(), out.as_os_str(), "-q".as_ref(), "--layout".as_ref(), "processor".as_ref()]);
    assert!(o.status.success(), "{}", text(&o));
    let dev = |g: &str| format!("hiplib_device_{g}-1.2-py3-none-linux_x86_64.whl");
    let want: Vec<String> = [WHEEL.to_string(), dev("gfx1030"), dev("gfx1100"), dev("gfx906"), dev("gfx90a")].into();
    assert_eq!(listing(&out), want);
    let meta = metadata(&out.join(WHEEL), "hiplib-1.2.dist-info");
    assert!(
        meta.contains("Provides-Extra: device-gfx90a\nRequires-Dist: hiplib-device-gfx90a==1.2; extra == \"device-gfx90a\"\n")
            && !meta.contains("rocm-bootstrap"),
        "{meta}"
    );
    let m1100 = metadata(&out.join(dev("gfx1100")), "hiplib_device_gfx1100-1.2.dist-info");
    assert!(m1100.starts_with("Metadata-Version: 2.1\n") && m1100.ends_with("Requires-Dist: hiplib==1.2\n"), "{m1100}");
    let site = dir.path().join("site");
    pip_install(&site, &[&out.join(WHEEL), &out.join(dev("gfx90a")), &out.join(dev("gfx1100"))]);
    assert!(site.join("hiplib/lib/aotriton.images/amd-gfx11xx/flash/attn.aks2").is_file());
    let work = tempdir();
    let mut bad = Vec::new();
    for d in ["gfx90a:xnack+", "gfx90a:xnack-", "gfx1100"] {
        bad.extend(check_loads(&site, d, false, work.path()));
    }
    assert!(bad.is_empty(), "{} wrong loads:\n{}", bad.len(), bad.join("\n"));
}

/// A wheel with one library for gfx1250 and gfx1250-strict (one owner:
/// one gfx1250 wheel holding both archives) and one for gfx940 (not in
/// the family table: its own wheel, no family, a warning), split with
/// `--device-package-prefix` and `--device-requires-dist`; a bad prefix is
/// a usage error.
#[test]
fn owners_unlisted_targets_and_prefix() {
    let dir = tempdir();
    let (l1250, l940) = (dir.path().join("lib1250.so"), dir.path().join("lib940.so"));
    fs::write(&l1250, hand_library(&[("gfx1250", "gfx1030"), ("gfx1250-strict", "gfx906")])).unwrap();
    fs::write(&l940, hand_library(&[("gfx940", "gfx90a:xnack-")])).unwrap();
    // The running Python's tag (the device wheels must carry the host's,
    // and pip must accept them).
    let cp = python("import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}', end='')", &[]);
    let cp = String::from_utf8_lossy(&cp.stdout).into_owned();
    let tail = format!("-1.0-{cp}-{cp}-linux_x86_64.whl");
    let host_file = format!("tiny{tail}");
    let wheel = dir.path().join(&host_file);
    let script = r#"
import base64, hashlib, sys, zipfile
rec = []
with zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_DEFLATED) as z:
    def add(n, d, mode=0o644):
        zi = zipfile.ZipInfo(n, (2024, 1, 1, 0, 0, 0)); zi.external_attr = (0o100000 | mode) << 16
        z.writestr(zi, d)
        rec.append(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}")
    add("tiny/lib/lib1250.so", open(sys.argv[2], "rb").read(), 0o755)
    add("tiny/lib/lib940.so", open(sys.argv[3], "rb").read(), 0o755)
    add("tiny-1.0.dist-info/METADATA", b"Metadata-Version: 2.1\nName: tiny\nVersion: 1.0\n")
    add("tiny-1.0.dist-info/WHEEL", f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {sys.argv[4]}-{sys.argv[4]}-linux_x86_64\n".encode())
    rec.append("tiny-1.0.dist-info/RECORD,,")
    z.writestr("tiny-1.0.dist-info/RECORD", "\n".join(rec) + "\n")
"#;
    python(script, &[&wheel, &l1250, &l940, Path::new(&cp)]);
    let bad = kp(&["split-wheel".as_ref(), wheel.as_os_str(), dir.path().join("x").as_os_str(), "--device-package-prefix".as_ref(), "-x".as_ref()]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    let out = dir.path().join("out");
    let o = kp(&[
        "split-wheel".as_ref(),
        wheel.as_os_str(),
        out.as_os_str(),
        "-q".as_ref(),
        "--device-package-prefix".as_ref(),
        "amd-tiny-device".as_ref(),
        "--device-requires-dist".as_ref(),
        "rocm-sdk-device-@GFXARCH@ == 7.1".as_ref(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("not in the family table (rocm-bootstrap 0.3.0), packaged as target wheels with no family: gfx940\n"), "{}", text(&o));
    let (w1250, w940) = (format!("amd_tiny_device_gfx1250{tail}"), format!("amd_tiny_device_gfx940{tail}"));
    assert_eq!(listing(&out), [w1250.clone(), w940.clone(), host_file.clone()]);
    for n in listing(&out) {
        check_record(&out.join(n));
    }
    let m = metadata(&out.join(&w940), "amd_tiny_device_gfx940-1.0.dist-info");
    assert!(m.ends_with("\nRequires-Dist: tiny == 1.0\nRequires-Dist: rocm-sdk-device-gfx940 == 7.1\n"), "{m}");
    let host = metadata(&out.join(&host_file), "tiny-1.0.dist-info");
    for l in ["Provides-Extra: device-gfx1250\nRequires-Dist: amd-tiny-device-gfx1250 == 1.0; extra == \"device-gfx1250\"\n", "Provides-Extra: device-gfx940\n"]
    {
        assert!(host.contains(l), "{l} not in {host}");
    }
    assert!(!host.contains("device-gfx1250-strict"), "{host}");
    let site = dir.path().join("site");
    pip_install(&site, &[&out.join(&host_file), &out.join(&w1250), &out.join(&w940)]);
    for a in ["gfx1250", "gfx1250-strict", "gfx940"] {
        assert!(site.join(format!("tiny/.kpack/tiny_{a}.kpack")).is_file(), "tiny_{a}.kpack");
    }
    // By hand: each device gets the object its own entry holds.
    let work = tempdir();
    for (lib, device, arch) in [("lib1250.so", "gfx1250", "gfx1030"), ("lib940.so", "gfx940", "gfx90a:xnack-")] {
        for loader in ["feb2026", "newest"] {
            let mut cmd = Command::new(Stub::get().driver());
            cmd.arg(site.join("tiny/lib").join(lib));
            let recs = stub_run(&mut cmd, device, None, loader, &work.path().join(format!("{device}-{loader}")));
            assert_eq!(recs.len(), 1, "{lib} on {device}: {recs:?}");
            let want = expected_object("libmulti.so", 0, arch);
            assert!(recs[0].status == "OK" && recs[0].bytes.as_deref() == Some(&want[..]), "{lib} on {device} ({loader}): {:?}", recs[0]);
        }
    }
}

#[test]
fn hostile_wheels_are_refused() {
    let dir = tempdir();
    for (i, bad) in ["../evil.py", "hiplib/../../evil.py", "/abs.py"].iter().enumerate() {
        let d = dir.path().join(i.to_string());
        fs::create_dir_all(&d).unwrap();
        let w = fat_wheel(&d, Some(bad));
        let out = d.join("out");
        let o = kp(&["split-wheel".as_ref(), w.as_os_str(), out.as_os_str(), "-q".as_ref()]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", text(&o));
        assert!(!dir.path().join("evil.py").exists() && !d.join("evil.py").exists());
        assert!(!out.exists(), "{bad}: a refused split-wheel left its output directory");
    }
    let not_zip = dir.path().join("x-1-py3-none-any.whl");
    fs::write(&not_zip, b"not a zip").unwrap();
    let o = kp(&["split-wheel".as_ref(), not_zip.as_os_str(), dir.path().join("o").as_os_str()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

/// Rewrites `src` into `dst` through a Python snippet that sees `z` (the
/// input ZipFile), `out` (the output ZipFile) and `record` (its RECORD's
/// name), and copies every entry it did not handle.
fn rewrite_wheel(src: &Path, dst: &Path, snippet: &str) {
    let script = format!(
        r#"
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
record = [n for n in z.namelist() if n.endswith(".dist-info/RECORD")][0]
done = set()
with zipfile.ZipFile(sys.argv[2], "w", zipfile.ZIP_DEFLATED) as out:
{}
    for i in z.infolist():
        if i.filename not in done:
            out.writestr(i, z.read(i.filename))
"#,
        snippet.lines().map(|l| format!("    {l}\n")).collect::<String>()
    );
    python(&script, &[src, dst]);
}

/// Splits `wheel` into `dir/out`, expecting exit 2 with every needle in
/// the message and no output left.
fn refused(wheel: &Path, dir: &Path, needles: &[&str]) {
    let out = dir.join("out");
    let o = kp(&["split-wheel".as_ref(), wheel.as_os_str(), out.as_os_str(), "-q".as_ref()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    for n in needles {
        assert!(text(&o).contains(n), "{n:?} not in: {}", text(&o));
    }
    assert!(!out.exists(), "a refused split-wheel left {}", out.display());
}

/// A wheel that already holds an archive or the pack manifest where
/// split-wheel writes them would ship the stale file in the host wheel
/// and a new one in a device wheel: refused, naming the entry.
#[test]
fn a_wheel_holding_generated_paths_is_refused() {
    let dir = tempdir();
    for (i, entry) in ["hiplib/.kpack/hiplib_gfx90a:xnack-.kpack", "hiplib/.kpack/hiplib.kpm"].iter().enumerate() {
        let d = dir.path().join(i.to_string());
        fs::create_dir_all(&d).unwrap();
        let w = fat_wheel(&d, Some(entry));
        refused(&w, &d, &[entry, "split already or carries stale archives"]);
    }
}

/// Entries must match the wheel's RECORD: a changed byte, an unlisted
/// entry and a missing RECORD are refused, naming the entry.
#[test]
fn a_wheel_not_matching_its_record_is_refused() {
    let dir = tempdir();
    let fat = fat_wheel(dir.path(), None);
    let cases = [
        ("tampered", "d = bytearray(z.read('hiplib/lib/libtwo.so')); d[4096] ^= 1\nout.writestr(z.getinfo('hiplib/lib/libtwo.so'), bytes(d)); done.add('hiplib/lib/libtwo.so')", "hiplib/lib/libtwo.so: does not match its RECORD hash"),
        ("unlisted", "out.writestr('hiplib/extra.py', b'x')", "hiplib/extra.py: in the wheel but not in its RECORD"),
        ("no-record", "done.add(record)", "RECORD"),
    ];
    for (name, snippet, needle) in cases {
        let d = dir.path().join(name);
        fs::create_dir_all(&d).unwrap();
        let w = d.join(WHEEL);
        rewrite_wheel(&fat, &w, snippet);
        refused(&w, &d, &[needle]);
    }
}

/// A zip bomb (64 MiB of zeros deflated to 64 KiB) is refused before it is
/// unpacked; `--max-unpack-ratio` lets a genuine wheel through.
#[test]
fn a_zip_bomb_is_refused() {
    let dir = tempdir();
    let fat = fat_wheel(dir.path(), None);
    let w = dir.path().join("bomb").join(WHEEL);
    fs::create_dir_all(w.parent().unwrap()).unwrap();
    let snippet = r#"import base64, hashlib
data = bytes(64 << 20)
out.writestr("hiplib/zeros.bin", data)
h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
rec = z.read(record).decode().replace(record + ",,", f"hiplib/zeros.bin,sha256={h},{len(data)}\n{record},,")
out.writestr(z.getinfo(record), rec); done.add(record)"#;
    rewrite_wheel(&fat, &w, snippet);
    refused(&w, w.parent().unwrap(), &["hiplib/zeros.bin", "zip bomb", "--max-unpack-ratio"]);
    let out = dir.path().join("bomb/allowed");
    let o = kp(&["split-wheel".as_ref(), w.as_os_str(), out.as_os_str(), "-q".as_ref(), "--max-unpack-ratio".as_ref(), "5000".as_ref()]);
    assert!(o.status.success(), "{}", text(&o));
}

/// Errors name the wheel's entries, not the staging directory they were
/// unpacked to (gone when the user reads the message).
#[test]
fn errors_name_the_wheel_not_the_staging_directory() {
    let dir = tempdir();
    let fat = fat_wheel(dir.path(), None);
    let out = dir.path().join("out");
    let o = kp(&["split-wheel".as_ref(), fat.as_os_str(), out.as_os_str(), "-q".as_ref(), "--targets".as_ref(), "gfx1201".as_ref()]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!text(&o).contains(".kpackfs-"), "{}", text(&o));
    assert!(text(&o).contains(&format!("{}:hiplib", fat.display())), "{}", text(&o));
    assert!(!out.exists());
}
