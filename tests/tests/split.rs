//! The packager's commands on real fat binaries (test_assets, built by
//! hipcc): `split` → `verify` → `recombine`, with the independent oracle —
//! the test HIP runtime (tests/hip-stub, its own kpack loader) dlopens each
//! split library from the installed overlay of the artifacts and must load
//! exactly the code object clang-offload-bundler extracted from the fat
//! original (test_assets/expected).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kpackfs_tests::*;

const LIBS: [&str; 4] = ["libtwo.so", "libmulti.so", "libpage.so", "librelr.so"];

fn kp(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(kpackfs()).args(args).output().expect("kpackfs")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn split(input: &Path, out: &Path, component: &str, extra: &[&str]) -> Output {
    let mut a: Vec<&std::ffi::OsStr> = vec!["split".as_ref(), input.as_os_str(), out.as_os_str(), "--component".as_ref(), component.as_ref(), "-q".as_ref()];
    a.extend(extra.iter().map(|s| std::ffi::OsStr::new(*s)));
    kp(&a)
}

fn ok(o: Output, what: &str) -> Output {
    assert!(o.status.success(), "{what} failed ({}): {}", o.status, text(&o));
    o
}

fn write(p: &Path, data: &[u8]) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, data).unwrap();
}

/// A build artifact with two prefixes, as a build system stages them: HIP
/// libraries and an executable, a host-only library, rocBLAS database
/// files (per target and generic) and documentation.
fn artifact() -> TempDir {
    let d = tempdir();
    let a = d.path().join("math-libs/A/stage");
    let b = d.path().join("math-libs/B/stage");
    for lib in LIBS {
        write(&a.join("lib").join(lib), &fs::read(assets().join("bin").join(lib)).unwrap());
    }
    write(&b.join("bin/app_pie"), &fs::read(assets().join("bin/app_pie")).unwrap());
    fs::set_permissions(b.join("bin/app_pie"), fs::Permissions::from_mode(0o755)).unwrap();
    write(&b.join("lib/libhost.so"), &fs::read(assets().join("bin/libhost.so")).unwrap());
    for t in ["gfx90a", "gfx1030", "gfx906"] {
        write(&a.join(format!("lib/rocblas/library/TensileLibrary_{t}.dat")), format!("table for {t}").as_bytes());
    }
    write(&a.join("lib/rocblas/library/TensileLibrary_fallback.dat"), b"generic table");
    write(&b.join("share/doc/README"), b"docs");
    std::os::unix::fs::symlink("libtwo.so", a.join("lib/libtwo.so.1")).unwrap();
    write(&d.path().join("artifact_manifest.txt"), b"math-libs/A/stage\nmath-libs/B/stage\n");
    d
}

/// Installs artifacts the way packaging does: every prefix's contents
/// laid over one root (made if missing).
fn install(artifacts: &[PathBuf], root: &Path) {
    fs::create_dir_all(root).unwrap();
    for art in artifacts {
        let prefixes = fs::read_to_string(art.join("artifact_manifest.txt")).unwrap();
        for p in prefixes.lines().filter(|l| !l.is_empty()) {
            let from = if p == "." { art.clone() } else { art.join(p) };
            let st = Command::new("cp").arg("-a").arg(format!("{}/.", from.display())).arg(root).status().unwrap();
            assert!(st.success());
        }
    }
    let _ = fs::remove_file(root.join("artifact_manifest.txt"));
}

/// Installs `artifacts` over a fresh root and checks the test runtime
/// loads every library from it exactly for `device`.
fn installed_loads(artifacts: &[PathBuf], device: &str) {
    let work = tempdir();
    let root = work.path().join("root");
    install(artifacts, &root);
    check_stub_loads(&root.join("lib"), &LIBS, device, work.path());
}

#[test]
fn split_verifies_and_loads_exactly() {
    let input = artifact();
    let out = tempdir();
    let o = ok(split(input.path(), out.path(), "blas", &["--targets", "gfx90a,gfx1030"]), "split");
    assert!(text(&o).contains("dropped targets not selected: gfx906"), "{}", text(&o));
    let mut names: Vec<String> = fs::read_dir(out.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["blas_generic", "blas_gfx1030", "blas_gfx90a"], "no gfx906 artifact (stray target dropped, its database file too)");
    let g = out.path().join("blas_generic");
    // Host code only in generic; database files only in their target's artifact.
    for lib in LIBS {
        assert!(g.join("math-libs/A/stage/lib").join(lib).is_file());
        assert!(!out.path().join("blas_gfx90a/math-libs/A/stage/lib").join(lib).exists());
    }
    assert!(g.join("math-libs/B/stage/lib/libhost.so").is_file() && g.join("math-libs/B/stage/bin/app_pie").is_file());
    assert!(g.join("math-libs/A/stage/lib/rocblas/library/TensileLibrary_fallback.dat").is_file());
    assert!(!g.join("math-libs/A/stage/lib/rocblas/library/TensileLibrary_gfx90a.dat").exists());
    assert_eq!(fs::read(out.path().join("blas_gfx90a/math-libs/A/stage/lib/rocblas/library/TensileLibrary_gfx90a.dat")).unwrap(), b"table for gfx90a");
    assert!(g.join("math-libs/A/stage/.kpack/blas.kpm").is_file());
    let mut archives: Vec<String> =
        fs::read_dir(out.path().join("blas_gfx90a/math-libs/A/stage/.kpack")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    archives.sort();
    assert_eq!(archives, ["blas_gfx90a.kpack", "blas_gfx90a:xnack+.kpack", "blas_gfx90a:xnack-.kpack"]);
    assert_eq!(fs::read_to_string(g.join("artifact_manifest.txt")).unwrap(), "math-libs/A/stage\nmath-libs/B/stage\n");
    assert_eq!(fs::read_to_string(out.path().join("blas_gfx1030/artifact_manifest.txt")).unwrap(), "math-libs/A/stage\n");
    // The executable in the other prefix points at the shared archives.
    let info = text(&ok(kp(&["inspect".as_ref(), g.join("math-libs/B/stage/bin/app_pie").as_os_str()]), "inspect"));
    assert!(info.contains(r#"kernel_name "math-libs/B/stage/bin/app_pie", search paths ["../.kpack/blas_@GFXARCH@.kpack"]"#), "{info}");

    let v = ok(kp(&["verify".as_ref(), out.path().as_os_str(), "--against".as_ref(), input.path().as_os_str()]), "verify");
    assert!(text(&v).contains("verify: OK"), "{}", text(&v));

    let work = tempdir();
    for (device, art) in [("gfx90a:xnack-", "blas_gfx90a"), ("gfx1030", "blas_gfx1030")] {
        let root = work.path().join(art);
        install(&[g.clone(), out.path().join(art)], &root);
        check_stub_loads(&root.join("lib"), &LIBS, device, work.path());
        // And kpackfs's own loader model agrees for the executable.
        let r = kp(&["resolve".as_ref(), root.join("bin/app_pie").as_os_str(), "--arch".as_ref(), device.as_ref()]);
        assert!(r.status.success(), "{}", text(&r));
    }
}

#[test]
fn split_is_deterministic() {
    let input = artifact();
    let (a, b) = (tempdir(), tempdir());
    for d in [&a, &b] {
        ok(split(input.path(), d.path(), "blas", &[]), "split");
    }
    assert_same_tree(&snapshot(a.path()), &snapshot(b.path()), "two splits of one input");
    for rel in ["blas_gfx90a/math-libs/A/stage/.kpack/blas_gfx90a.kpack", "blas_generic/math-libs/A/stage/lib/libtwo.so", "blas_generic/math-libs/A/stage"] {
        let t = |d: &TempDir| fs::metadata(d.path().join(rel)).unwrap().modified().unwrap();
        assert_eq!(t(&a), t(&b), "{rel}: times come from the input");
    }
    // Both compression schemes verify, and so do archives named by
    // processor (Windows' default: no ':' in any name).
    let c = tempdir();
    ok(split(input.path(), c.path(), "blas", &["--archive-compression", "none"]), "split none");
    ok(kp(&["verify".as_ref(), c.path().as_os_str(), "--against".as_ref(), input.path().as_os_str()]), "verify none");
    let d = tempdir();
    ok(split(input.path(), d.path(), "blas", &["--archive-names", "processor"]), "split processor names");
    let names: Vec<String> =
        fs::read_dir(d.path().join("blas_gfx90a/math-libs/A/stage/.kpack")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["blas_gfx90a.kpack"]);
    assert!(snapshot(d.path()).keys().all(|p| !p.to_string_lossy().contains(':')));
    ok(kp(&["verify".as_ref(), d.path().as_os_str(), "--against".as_ref(), input.path().as_os_str()]), "verify processor names");
    installed_loads(&[d.path().join("blas_generic"), d.path().join("blas_gfx90a")], "gfx90a:xnack-");
}

#[test]
fn nothing_target_specific_gives_only_generic() {
    let input = tempdir();
    write(&input.path().join("share/doc/README"), b"docs");
    write(&input.path().join("lib/libhost.so"), &fs::read(assets().join("bin/libhost.so")).unwrap());
    let out = tempdir();
    let o = ok(split(input.path(), out.path(), "docs", &[]), "split");
    assert!(text(&o).contains("nothing target-specific"), "{}", text(&o));
    let names: Vec<_> = fs::read_dir(out.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["docs_generic"]);
    // A selection that matches none of the code objects is a usage error.
    let fat = artifact();
    let o = split(fat.path(), tempdir().path(), "blas", &["--targets", "gfx1100"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("carries no code for it"), "{}", text(&o));
    // Hostile manifests and names are usage errors.
    let bad = artifact();
    fs::write(bad.path().join("artifact_manifest.txt"), "../../etc\n").unwrap();
    assert_eq!(split(bad.path(), tempdir().path(), "blas", &[]).status.code(), Some(2));
    assert_eq!(split(fat.path(), tempdir().path(), "../x", &[]).status.code(), Some(2));
    let linked = artifact();
    std::os::unix::fs::symlink("/usr/share/doc", linked.path().join("docs")).unwrap();
    fs::write(linked.path().join("artifact_manifest.txt"), "math-libs/A/stage\ndocs\n").unwrap();
    let o = split(linked.path(), tempdir().path(), "blas", &[]);
    assert_eq!(o.status.code(), Some(2), "a prefix through a symlink: {}", text(&o));
    let inside = fat.path().join("math-libs/out");
    assert_eq!(split(fat.path(), &inside, "blas", &[]).status.code(), Some(2));
    assert!(!inside.exists(), "nothing written inside the input");
    // Per-architecture directories emptied by the split do not linger in
    // generic (the demo install's AOTriton kernels).
    let demo = tempdir();
    ok(split(&assets().join("demo-install"), demo.path(), "demo", &[]), "split demo");
    assert!(!demo.path().join("demo_generic/lib/aotriton").exists());
    assert!(demo.path().join("demo_gfx90a/lib/aotriton/kernels/gfx90a/flash.hsaco").is_file());
}

#[test]
fn recombine_shards_and_refuse_mismatches() {
    let input = artifact();
    let shards = tempdir();
    ok(split(input.path(), &shards.path().join("shard-a"), "blas", &["--targets", "gfx90a"]), "split a");
    ok(split(input.path(), &shards.path().join("shard-b"), "blas", &["--targets", "gfx1030"]), "split b");
    let cfgdir = tempdir();
    let cfg = cfgdir.path().join("groups.json");
    fs::write(&cfg, r#"{"groups": {"gfx90X": ["gfx90a", "gfx908"], "gfx103X": ["gfx1030"]}}"#).unwrap();
    let out = tempdir();
    ok(kp(&["recombine".as_ref(), shards.path().as_os_str(), out.path().as_os_str(), "--config".as_ref(), cfg.as_os_str()]), "recombine");
    let mut names: Vec<String> = fs::read_dir(out.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["blas_generic", "blas_gfx103X", "blas_gfx90X"]);
    let v = ok(kp(&["verify".as_ref(), out.path().as_os_str(), "--against".as_ref(), input.path().as_os_str(), "--json".as_ref()]), "verify");
    let j = String::from_utf8_lossy(&v.stdout);
    assert!(j.contains(r#""ok":true"#) && j.contains(r#""gfx1030""#) && j.contains(r#""gfx90a:xnack-""#), "{j}");
    installed_loads(&[out.path().join("blas_generic"), out.path().join("blas_gfx103X")], "gfx1030");

    // A shard whose host binaries differ is refused, naming the file.
    let lib = shards.path().join("shard-b/blas_generic/math-libs/A/stage/lib/libpage.so");
    let mut bytes = fs::read(&lib).unwrap();
    bytes[100] ^= 1;
    fs::write(&lib, bytes).unwrap();
    let o = kp(&["recombine".as_ref(), shards.path().as_os_str(), tempdir().path().join("x").as_os_str(), "--config".as_ref(), cfg.as_os_str()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("libpage.so") && text(&o).contains("differ"), "{}", text(&o));
}

#[test]
fn verify_reports_tampering_and_contamination() {
    let input = artifact();
    let fresh = || {
        let out = tempdir();
        ok(split(input.path(), out.path(), "blas", &["--archive-compression", "none"]), "split");
        out
    };
    let verify = |d: &Path| kp(&["verify".as_ref(), d.as_os_str(), "--against".as_ref(), input.path().as_os_str()]);
    let kpack = "blas_gfx1030/math-libs/A/stage/.kpack/blas_gfx1030.kpack";

    // One flipped byte inside a code object.
    let out = fresh();
    let p = out.path().join(kpack);
    let mut b = fs::read(&p).unwrap();
    b[200] ^= 0x40;
    fs::write(&p, b).unwrap();
    let o = verify(out.path());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("differs from the pack manifest") && text(&o).contains("differs from the fat original"), "{}", text(&o));

    // A missing archive.
    let out = fresh();
    fs::remove_file(out.path().join(kpack)).unwrap();
    let o = verify(out.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("is missing"), "{}", text(&o));

    // A database file in the wrong artifact, a fat binary left in generic.
    let out = fresh();
    fs::rename(
        out.path().join("blas_gfx90a/math-libs/A/stage/lib/rocblas/library/TensileLibrary_gfx90a.dat"),
        out.path().join("blas_gfx1030/math-libs/A/stage/lib/rocblas/library/TensileLibrary_gfx90a.dat"),
    )
    .unwrap();
    fs::copy(assets().join("bin/libtwo.so"), out.path().join("blas_generic/math-libs/B/stage/lib/libfat.so")).unwrap();
    let o = verify(out.path());
    assert_eq!(o.status.code(), Some(1));
    let t = text(&o);
    assert!(t.contains("contamination: lib/rocblas/library/TensileLibrary_gfx90a.dat"), "{t}");
    assert!(t.contains("converted: lib/libfat.so"), "{t}");
}

/// Compressed bundles (ROCm 6.2+ CCOB, v3 zstd and v2 zlib, made with
/// `kpackfs recompress`): each bundle is decoded once for every target's
/// archive, and the result loads exactly as from plain bundles.
#[test]
fn compressed_bundles_split_exactly() {
    let input = tempdir();
    let lib = input.path().join("lib");
    fs::create_dir_all(&lib).unwrap();
    for (i, name) in LIBS.iter().enumerate() {
        let (v, m) = if i % 2 == 0 { ("3", "zstd") } else { ("2", "zlib") };
        let src = assets().join("bin").join(name);
        ok(
            kp(&["recompress".as_ref(), src.as_os_str(), lib.join(name).as_os_str(), "--ccob-version".as_ref(), v.as_ref(), "--method".as_ref(), m.as_ref()]),
            "recompress",
        );
        let info = text(&ok(kp(&["inspect".as_ref(), lib.join(name).as_os_str()]), "inspect"));
        assert!(info.contains(&format!("CCOB v{v}")), "{info}");
    }
    for compression in ["auto", "none"] {
        let out = tempdir();
        ok(split(input.path(), out.path(), "ccob", &["--archive-compression", compression]), "split");
        ok(kp(&["verify".as_ref(), out.path().as_os_str(), "--against".as_ref(), input.path().as_os_str()]), "verify");
        installed_loads(&[out.path().join("ccob_generic"), out.path().join("ccob_gfx1030")], "gfx1030");
    }
}
