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
    fs::write(&cfg, r#"{"groups": {"gfx90X": ["gfx90a"], "gfx103X": ["gfx1030"]}}"#).unwrap();
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

/// A split that fails leaves its output as it found it: out of space part
/// way (a small tmpfs), into the mount point itself and into a directory
/// to create; and a selection matching nothing creates no directory.
#[test]
fn failed_split_leaves_nothing_behind() {
    require_root();
    let input = artifact();
    let work = tempdir();
    let small = Tmpfs::new(&work.path().join("small"), "128k");
    for out in [small.0.clone(), small.0.join("new/out")] {
        let o = split(input.path(), &out, "blas", &[]);
        assert_eq!(o.status.code(), Some(1), "{}: {}", out.display(), text(&o));
        assert!(text(&o).contains("No space left on device"), "{}", text(&o));
        assert_eq!(fs::read_dir(&small.0).unwrap().count(), 0, "{}: partial output left", out.display());
    }
    let out = work.path().join("never");
    let o = split(input.path(), &out, "blas", &["--targets", "gfx1100"]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!out.exists(), "a failed split created its output directory");
    // An output that is a file is an unusable path (exit 2), said so.
    let file = work.path().join("afile");
    fs::write(&file, b"keep").unwrap();
    let o = split(input.path(), &file, "blas", &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("is a file, not a directory"), "{}", text(&o));
    assert_eq!(fs::read(&file).unwrap(), b"keep");
}

/// Two shards of the artifact: gfx90a in `shard-a`, gfx1030 in `shard-b`.
fn two_shards(input: &Path) -> TempDir {
    let shards = tempdir();
    ok(split(input, &shards.path().join("shard-a"), "blas", &["--targets", "gfx90a"]), "split a");
    ok(split(input, &shards.path().join("shard-b"), "blas", &["--targets", "gfx1030"]), "split b");
    shards
}

fn recombine(shards: &Path, out: &Path, config: &str, extra: &[&str]) -> Output {
    let cfg = shards.parent().unwrap().join(format!("{}.json", shards.file_name().unwrap().to_string_lossy()));
    fs::write(&cfg, config).unwrap();
    let mut a: Vec<&std::ffi::OsStr> = vec!["recombine".as_ref(), shards.as_os_str(), out.as_os_str(), "--config".as_ref(), cfg.as_os_str()];
    a.extend(extra.iter().map(|s| std::ffi::OsStr::new(*s)));
    let o = kp(&a);
    let _ = fs::remove_file(&cfg);
    o
}

/// The configuration is checked against what the shards carry before
/// anything is written: a target no shard carries (a typo) and a target
/// no group names (silently dropped before) are errors naming what the
/// shards carry; `--allow-drop` and upstream's
/// `error_on_missing_architecture: false` allow each; `generic` is not a
/// group name.
#[test]
fn recombine_checks_the_configuration_against_the_shards() {
    let input = artifact();
    let shards = two_shards(input.path());
    let work = tempdir();
    let out = work.path().join("out");
    let refused = |config: &str, extra: &[&str], needles: &[&str]| {
        let o = recombine(shards.path(), &out, config, extra);
        assert_eq!(o.status.code(), Some(2), "{config}: {}", text(&o));
        for n in needles {
            assert!(text(&o).contains(n), "{config}: {n:?} not in {}", text(&o));
        }
        assert!(!out.exists(), "{config}: output written");
    };
    refused(r#"{"groups": {"g": ["gfx90", "gfx1030"]}}"#, &[], &["gfx90 ", "gfx1030, gfx90a", "did you mean gfx90a?"]);
    refused(r#"{"groups": {"g": ["gfx90a"]}}"#, &[], &["leaves out gfx1030", "--allow-drop"]);
    refused(r#"{"groups": {"generic": ["gfx90a", "gfx1030"]}}"#, &["--allow-drop"], &["reserved"]);
    // Inside the shards (here: inside an artifact it would copy from).
    let inside = shards.path().join("shard-a/blas_gfx90a/out");
    let o = recombine(shards.path(), &inside, r#"{"groups": {"g": ["gfx90a", "gfx1030"]}}"#, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("inside the shards"), "{}", text(&o));
    assert!(!inside.exists());

    let o = ok(recombine(shards.path(), &out, r#"{"groups": {"g": ["gfx90a"]}}"#, &["--allow-drop"]), "recombine --allow-drop");
    assert!(text(&o).contains("left out") && text(&o).contains("blas_gfx1030"), "{}", text(&o));
    assert!(out.join("blas_g/math-libs/A/stage/lib/rocblas/library/TensileLibrary_gfx90a.dat").is_file());
    assert!(!out.join("blas_g/math-libs/A/stage/lib/rocblas/library/TensileLibrary_gfx1030.dat").exists());

    let upstream = r#"{"architecture_groups": {"gfx90X": {"architectures": ["gfx90a", "gfx908"]}, "gfx103X": {"architectures": ["gfx1030"]}},
                       "validation": {"error_on_missing_architecture": false}}"#;
    let o = ok(recombine(shards.path(), &work.path().join("up"), upstream, &[]), "recombine, upstream config");
    assert!(text(&o).contains("carried by no shard") && text(&o).contains("gfx908"), "{}", text(&o));
}

/// Shards come from other machines: a symlink to a directory outside in
/// one shard and a file below it in another must not write outside the
/// output — within one package group, and between the generic artifact
/// and a group (installed over the same root).
#[test]
fn recombine_never_writes_through_a_symlink() {
    let input = artifact();
    let outside = tempdir();
    let both = r#"{"groups": {"all": ["gfx90a", "gfx1030"]}}"#;
    let stage = "math-libs/A/stage";
    // Within one group: the symlink in shard a's gfx90a artifact, the file
    // in shard b's gfx1030 artifact.
    let shards = two_shards(input.path());
    std::os::unix::fs::symlink(outside.path(), shards.path().join(format!("shard-a/blas_gfx90a/{stage}/d"))).unwrap();
    write(&shards.path().join(format!("shard-b/blas_gfx1030/{stage}/d/evil")), b"evil");
    let work = tempdir();
    let out = work.path().join("out");
    let o = recombine(shards.path(), &out, both, &[]);
    assert!(!outside.path().join("evil").exists(), "recombine wrote outside its output: {}", text(&o));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("refusing to write through it"), "{}", text(&o));
    assert!(!out.exists(), "output left behind");

    // Between generic (the same symlink in every shard's generic, as the
    // generic artifacts must agree) and a group.
    let shards = two_shards(input.path());
    for s in ["shard-a", "shard-b"] {
        std::os::unix::fs::symlink(outside.path(), shards.path().join(format!("{s}/blas_generic/{stage}/d"))).unwrap();
    }
    write(&shards.path().join(format!("shard-b/blas_gfx1030/{stage}/d/evil")), b"evil");
    let o = recombine(shards.path(), &out, both, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(!outside.path().join("evil").exists());
    assert!(!out.exists(), "output left behind");
}

/// An input already holding a file where split writes an archive or the
/// pack manifest (split before, or stale archives) is refused: the stale
/// file would ship in generic beside the new one in a target artifact.
#[test]
fn split_refuses_an_input_holding_its_archives() {
    for stale in [".kpack/blas.kpm", ".kpack/blas_gfx90a:xnack-.kpack"] {
        let input = artifact();
        write(&input.path().join("math-libs/A/stage").join(stale), b"stale");
        let work = tempdir();
        let out = work.path().join("out");
        let o = split(input.path(), &out, "blas", &[]);
        assert_eq!(o.status.code(), Some(2), "{stale}: {}", text(&o));
        assert!(text(&o).contains(&format!("math-libs/A/stage/{stale}, a path split writes")), "{}", text(&o));
        assert!(!out.exists());
    }
}

/// Every frame of the `zstd-per-kernel` archives `split` writes carries a
/// content checksum (the flag checked by hand against the frame format,
/// RFC 8878 3.1.1.1.1), and the readers check it: with the last byte of
/// one frame changed (its checksum), the test runtime (libzstd), as either
/// loader generation, refuses that wrapper's code object instead of loading other bytes — every
/// other one still loads exactly clang-offload-bundler's — and `verify`
/// fails naming the archive.
#[test]
fn zstd_frames_carry_checksums_the_runtime_checks() {
    let input = artifact();
    let out = tempdir();
    ok(split(input.path(), out.path(), "blas", &["--targets", "gfx90a,gfx1030", "--archive-compression", "zstd"]), "split");
    let mut archives = 0;
    for art in ["blas_gfx90a", "blas_gfx1030"] {
        for f in fs::read_dir(out.path().join(art).join("math-libs/A/stage/.kpack")).unwrap() {
            let p = f.unwrap().path();
            let data = fs::read(&p).unwrap();
            let a = kpackfs_core::formats::kpack::Archive::open(&data).unwrap();
            assert!(!a.frames.is_empty(), "{}: no zstd frames", p.display());
            for (i, (off, len)) in a.frames.iter().enumerate() {
                let frame = &data[*off as usize..(off + len) as usize];
                assert_eq!(frame[..4], [0x28, 0xb5, 0x2f, 0xfd], "{} frame {i}: not a zstd frame", p.display());
                assert!(frame[4] & 0x04 != 0, "{} frame {i}: no content checksum", p.display());
            }
            archives += 1;
        }
    }
    assert!(archives >= 2, "{archives} archives");
    // Damage frame 0's checksum in the gfx1030 archive, then install.
    let kpack = out.path().join("blas_gfx1030/math-libs/A/stage/.kpack/blas_gfx1030.kpack");
    let mut data = fs::read(&kpack).unwrap();
    let (off, len) = kpackfs_core::formats::kpack::Archive::open(&data).unwrap().frames[0];
    data[(off + len - 1) as usize] ^= 0x01;
    fs::write(&kpack, &data).unwrap();
    let v = kp(&["verify".as_ref(), out.path().as_os_str()]);
    assert_eq!(v.status.code(), Some(1), "{}", text(&v));
    assert!(text(&v).contains("archive: math-libs/A/stage/.kpack/blas_gfx1030.kpack") || text(&v).contains("blas_gfx1030.kpack: "), "{}", text(&v));
    assert!(text(&v).to_lowercase().contains("checksum"), "verify does not name the checksum: {}", text(&v));
    let work = tempdir();
    let root = work.path().join("root");
    install(&[out.path().join("blas_generic"), out.path().join("blas_gfx1030")], &root);
    let stub = Stub::get();
    for loader in ["feb2026", "newest"] {
        let (mut refused, mut exact) = (0, 0);
        for (i, lib) in LIBS.iter().enumerate() {
            let rec_dir = work.path().join(format!("rec-{loader}-{i}"));
            fs::create_dir_all(&rec_dir).unwrap();
            let o = Command::new(stub.driver())
                .arg(root.join("lib").join(lib))
                .env("LD_LIBRARY_PATH", &stub.dir)
                .env("KPACK_STUB_ARCH", "gfx1030")
                .env("KPACK_STUB_LOADER", loader)
                .env("KPACK_STUB_OUT", &rec_dir)
                .output()
                .unwrap();
            assert!(o.status.code().is_some(), "{lib}: the runtime crashed: {}", text(&o));
            let bundles = wrapper_bundles(lib);
            for r in stub_records(&rec_dir) {
                if r.status == "OK" {
                    let want = expected_object(lib, bundles[r.co_index as usize], "gfx1030");
                    assert!(r.bytes.as_deref() == Some(&want[..]), "{lib} wrapper {}: not clang-offload-bundler's object", r.co_index);
                    exact += 1;
                } else {
                    refused += 1;
                }
            }
        }
        assert_eq!(refused, 1, "{loader}: the damaged frame's object must be refused, once");
        assert!(exact >= 4, "{loader}: {exact} objects loaded exactly");
    }
}

/// `verify` without the pack manifest cannot know what the archives should
/// hold: with the `.kpm` deleted and one code-object byte changed in a
/// `none` archive it used to print "OK … exact". It fails, saying why.
#[test]
fn verify_without_the_pack_manifest_fails() {
    let input = artifact();
    let out = tempdir();
    ok(split(input.path(), out.path(), "blas", &["--archive-compression", "none"]), "split");
    let kpm = out.path().join("blas_generic/math-libs/A/stage/.kpack/blas.kpm");
    fs::remove_file(&kpm).unwrap();
    let p = out.path().join("blas_gfx1030/math-libs/A/stage/.kpack/blas_gfx1030.kpack");
    let mut b = fs::read(&p).unwrap();
    b[200] ^= 0x40;
    fs::write(&p, b).unwrap();
    let v = kp(&["verify".as_ref(), out.path().as_os_str()]);
    assert_eq!(v.status.code(), Some(1), "{}", text(&v));
    assert!(text(&v).contains("no pack manifest (.kpack/*.kpm) found") && !text(&v).contains("verify: OK"), "{}", text(&v));
}

/// A mistyped path must not pass: `verify` of a directory holding no
/// artifact, pack manifest or archive (an empty one, /etc) fails and says
/// what it looked for.
#[test]
fn verify_of_nothing_fails() {
    let empty = tempdir();
    let plain = tempdir();
    write(&plain.path().join("etc/hosts"), b"127.0.0.1 localhost\n");
    fs::copy(assets().join("bin/libhost.so"), plain.path().join("libhost.so")).unwrap();
    for d in [empty.path(), plain.path()] {
        let v = kp(&["verify".as_ref(), d.as_os_str()]);
        assert_eq!(v.status.code(), Some(1), "{}", text(&v));
        assert!(
            text(&v).contains("nothing to verify: no artifact (artifact_manifest.txt), no pack manifest (.kpack/*.kpm) and no .kpack archive found"),
            "{}",
            text(&v)
        );
    }
}
