//! Database files in real mounts: a fixture install with every layout the
//! rule table knows (Debian's versioned Tensile directory with `-xnack±`
//! kernels, hipBLASLt per-arch directories, rocKE engines, CK static
//! libraries, rocJITsu translations, AOTriton images and kernels, MIOpen)
//! is mounted for several selections, and each view must show exactly the
//! names the table below says — written by hand, not derived from the rules.
//! Operator rules (`--db-rules`, `-o db_rules=`, `--db-rule`) and
//! `kpackfs archs` are checked on the same tree.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use kpackfs_tests::*;

const T: &str = "lib/x86_64-linux-gnu/rocblas/2.47.0/library";
const HEX: &str = "3f0c9d1e5a7b2c4d6e8f00112233445566778899aabbccddeeff001122334455";
const HEX2: &str = "00000000000000000000000000000000000000000000000000000000000000ff";

/// The selections mounted, by letter.
const VIEWS: [(char, &str); 5] = [('A', "gfx90a:xnack-"), ('B', "gfx90a"), ('C', "gfx1100"), ('D', "gfx1250"), ('E', "gfx1250-strict")];

/// Fixture file, the views that show it (`*`: every view, generic), and
/// the target `kpackfs archs` counts it under ("" for generic).
/// `$T` is Debian's rocBLAS library directory, `$H` a 64-hex hash.
const FILES: &[(&str, &str, &str)] = &[
    // Debian rocBLAS: a version directory between rocblas/ and library/.
    ("$T/TensileLibrary.dat", "*", ""),
    ("$T/TensileLibrary_fallback.dat", "*", ""),
    ("$T/TensileLibrary_gfx90a.co", "AB", "gfx90a"),
    ("$T/TensileLibrary_gfx90a.dat", "AB", "gfx90a"),
    ("$T/Kernels.so-000-gfx90a.hsaco", "AB", "gfx90a"),
    ("$T/Kernels.so-000-gfx90a-xnack-.hsaco", "AB", "gfx90a:xnack-"),
    ("$T/Kernels.so-000-gfx90a-xnack+.hsaco", "B", "gfx90a:xnack+"),
    ("$T/Kernels.so-000-gfx1030.hsaco", "", "gfx1030"),
    ("$T/TensileLibrary_gfx1100.co", "C", "gfx1100"),
    ("$T/Kernels.so-000-gfx1100.hsaco", "C", "gfx1100"),
    ("$T/Kernels.so-000-gfx1250.hsaco", "D", "gfx1250"),
    ("$T/TensileLibrary_gfx1250-strict.dat", "E", "gfx1250-strict"),
    // A subdirectory of library/ that is no architecture's: the name decides.
    ("$T/extra/TensileLibrary_gfx1100.co", "C", "gfx1100"),
    ("$T/extra/TensileManifest.txt", "*", ""),
    // hipBLASLt: per-architecture directories, plus flat names.
    ("lib/hipblaslt/library/hipblasltExtOpLibrary.dat", "*", ""),
    ("lib/hipblaslt/library/TensileLiteLibrary_lazy_gfx1100_Mapping.dat", "C", "gfx1100"),
    ("lib/hipblaslt/library/gfx90a/TensileManifest.txt", "AB", "gfx90a"),
    ("lib/hipblaslt/library/gfx90a/TensileLibrary_fallback.dat", "AB", "gfx90a"),
    ("lib/hipblaslt/library/gfx90a-xnack+/k.co", "B", "gfx90a:xnack+"),
    ("lib/hipblaslt/library/gfx942/TensileManifest.txt", "", "gfx942"),
    ("lib/hipblaslt/library/gfx1100/sub/k.co", "C", "gfx1100"),
    ("lib/hipblaslt/library/gfx1250/k.co", "D", "gfx1250"),
    ("lib/hipblaslt/library/gfx1250-strict/k.co", "E", "gfx1250-strict"),
    ("lib/hipsparselt/0.2/library/Kernels.so-000-gfx1100.hsaco", "C", "gfx1100"),
    ("lib/hipsparselt/0.2/library/TensileLibrary.dat", "*", ""),
    // rocKE (hipKernelProvider): engines/arch_content/<engine>/<arch>/.
    ("lib/rocke/engines/arch_content/gemm/manifest.json", "*", ""),
    ("lib/rocke/engines/arch_content/gemm/gfx90a/k.co", "AB", "gfx90a"),
    ("lib/rocke/engines/arch_content/gemm/gfx1100/k.co", "C", "gfx1100"),
    ("lib/rocke/engines/arch_content/conv/manifest.json", "*", ""),
    ("lib/rocke/engines/arch_content/conv/gfx1250/k.co", "D", "gfx1250"),
    ("lib/rocke/engines/test_arch_content/gemm/manifest.json", "*", ""),
    ("lib/rocke/engines/test_arch_content/gemm/gfx942/t.co", "", "gfx942"),
    ("lib/rocke/engines/test_arch_content/gemm/gfx1100/t.co", "C", "gfx1100"),
    // composable_kernel static libraries.
    ("lib/libdevice_conv_operations.a", "*", ""),
    ("lib/libdevice_conv_operations_gfx90a_xnack_.a", "AB", "gfx90a:xnack-"),
    ("lib/libdevice_conv_operations_gfx90a_xnackp.a", "B", "gfx90a:xnack+"),
    ("lib/libdevice_conv_operations_gfx1100.a", "C", "gfx1100"),
    ("lib/libdevice_conv_operations_gfx1250.a", "D", "gfx1250"),
    ("lib/libdevice_conv_operations_gfx1250_strict.a", "E", "gfx1250-strict"),
    ("lib/device_conv_operations_gfx942.lib", "", "gfx942"),
    // rocJITsu hot-swap translations.
    ("share/rocjitsu/translations/README", "*", ""),
    ("share/rocjitsu/translations/gfx1250-b0-a0/v1/index.json", "*", ""),
    ("share/rocjitsu/translations/gfx1250-b0-a0/v1/$H.man", "D", "gfx1250"),
    ("share/rocjitsu/translations/gfx1250-b0-a0/v1/$H.obj", "D", "gfx1250"),
    ("share/rocjitsu/translations/gfx1100-a0/v1/index.json", "*", ""),
    // A domain outside upstream's explicit map is generic, even if it looks
    // like an architecture.
    ("share/rocjitsu/translations/gfx1100-a0/v1/$H.obj", "*", ""),
    // AOTriton: images (families and single targets) and the older kernels/.
    ("lib/aotriton.images/version.txt", "*", ""),
    ("lib/aotriton.images/amd-gfx11xx/flash/a.aks2", "C", "gfx11*"),
    ("lib/aotriton.images/amd-gfx120x/flash/a.aks2", "", "gfx120*"),
    ("lib/aotriton.images/amd-gfx942/flash/a.aks2", "", "gfx942*"),
    ("lib/aotriton.images/amd-gfx90a/flash/a.aks2", "AB", "gfx90a*"),
    // AOTriton loads the gfx1250 image on gfx1250-strict devices too.
    ("lib/aotriton.images/amd-gfx1250/flash/a.aks2", "DE", "gfx1250*"),
    ("lib/aotriton/kernels/README", "*", ""),
    ("lib/aotriton/kernels/gfx90a/flash.hsaco", "AB", "gfx90a"),
    ("lib/aotriton/kernels/gfx1100/flash.hsaco", "C", "gfx1100"),
    // MIOpen databases (CU counts run into the name) and CK libraries.
    ("share/miopen/db/readme.txt", "*", ""),
    ("share/miopen/db/gfx90a68.kdb", "AB", "gfx90a"),
    ("share/miopen/db/gfx90a68.HIP.fdb.txt", "AB", "gfx90a"),
    ("share/miopen/db/gfx1100_48.kdb", "C", "gfx1100"),
    ("share/miopen/db/gfx1250256.HIP.fdb.txt", "D", "gfx1250"),
    ("share/miopen/db/gfx1250-strict256.HIP.fdb.txt", "E", "gfx1250-strict"),
    ("share/miopen/db/gfx942.tn.model", "", "gfx942"),
    // An unknown processor (gfx1036) run into its CU count: generic.
    ("share/miopen/db/gfx103612.db.txt", "*", ""),
    ("lib/libMIOpenCKGroupedConv_gfx90a.so", "AB", "gfx90a"),
    ("lib/libMIOpenCKGroupedConv_gfx1250-strict.so", "E", "gfx1250-strict"),
    // Not database files at all.
    ("bin/tool", "*", ""),
    ("share/doc/gfx90a-notes.txt", "*", ""),
    // Generic under the built-in rules; the site rules below claim them.
    ("share/site/README", "*", ""),
    ("share/site/kernels-gfx90a.bin", "*", ""),
    ("share/site/kernels-gfx1100.bin", "*", ""),
];

/// Site rules and how they change the table: kernels-<arch>.bin become
/// database files, and one CK library is declared generic.
const SITE_RULES: &str = "# site rules\n**/site/kernels-{arch}.bin\n\n**/libdevice_conv_operations_gfx1250.a -> generic   # shared by every target\n";
const SITE_VIEWS: &[(&str, &str)] =
    &[("share/site/kernels-gfx90a.bin", "AB"), ("share/site/kernels-gfx1100.bin", "C"), ("lib/libdevice_conv_operations_gfx1250.a", "*")];

fn expand(rel: &str) -> PathBuf {
    PathBuf::from(rel.replace("$T", T).replace("$H.obj", &format!("{HEX2}.obj")).replace("$H", HEX))
}

fn fixture() -> TempDir {
    let dir = tempdir();
    for (rel, _, _) in FILES {
        let p = dir.path().join(expand(rel));
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, rel.as_bytes()).unwrap();
    }
    dir
}

/// Every file and directory the view for `letter` must show.
fn expected(letter: char, site: bool) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    for (rel, views, _) in FILES {
        let views = if site { SITE_VIEWS.iter().find(|(r, _)| r == rel).map_or(*views, |(_, v)| *v) } else { views };
        if views == "*" || views.contains(letter) {
            let p = expand(rel);
            out.extend(p.ancestors().filter(|a| !a.as_os_str().is_empty()).map(Path::to_path_buf));
        }
    }
    out.insert(PathBuf::new());
    out
}

fn names(root: &Path) -> BTreeSet<PathBuf> {
    snapshot(root).into_keys().collect()
}

fn assert_view(got: &BTreeSet<PathBuf>, want: &BTreeSet<PathBuf>, what: &str) {
    let extra: Vec<_> = got.difference(want).collect();
    let missing: Vec<_> = want.difference(got).collect();
    assert!(extra.is_empty() && missing.is_empty(), "{what}:\n  shown but should be hidden: {extra:?}\n  missing: {missing:?}");
}

#[test]
fn mounted_views_show_exactly_their_database_files() {
    require_root();
    let src = fixture();
    for (letter, arch) in VIEWS {
        let want = expected(letter, false);
        let m = Mount::new(Some(src.path()), arch, &[]);
        assert_view(&names(&m.mnt), &want, &format!("mount --arch {arch}"));
    }
    // Per-arch directories are hidden as a whole, not merely emptied.
    let m = Mount::new(Some(src.path()), "gfx90a:xnack-", &[]);
    for d in [
        "lib/hipblaslt/library/gfx90a-xnack+",
        "lib/hipblaslt/library/gfx942",
        "lib/aotriton.images/amd-gfx11xx",
        "lib/rocke/engines/arch_content/gemm/gfx1100",
    ] {
        let e = fs::symlink_metadata(m.path(d)).expect_err(d);
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{d}");
    }
    assert!(m.path("lib/hipblaslt/library/gfx90a/TensileManifest.txt").is_file());
}

#[test]
fn operator_rules_from_a_file_an_option_and_fstab() {
    require_root();
    let src = fixture();
    let conf = tempdir();
    let rules = conf.path().join("site.rules");
    fs::write(&rules, SITE_RULES).unwrap();
    let r = rules.to_str().unwrap();

    let m = Mount::new(Some(src.path()), "gfx1100", &["--db-rules", r]);
    assert_view(&names(&m.mnt), &expected('C', true), "--db-rules for gfx1100");
    drop(m);
    // The same rules given one by one on the command line, and baked.
    let rule_args = ["--db-rule", "**/site/kernels-{arch}.bin", "--db-rule", "**/libdevice_conv_operations_gfx1250.a -> generic"];
    let m = Mount::new(Some(src.path()), "gfx90a", &rule_args);
    assert_view(&names(&m.mnt), &expected('B', true), "--db-rule for gfx90a");
    let baked = bake(src.path(), "gfx90a", &rule_args);
    assert_view(&names(&baked.path().join("out")), &expected('B', true), "bake --db-rule for gfx90a");
    drop(m);

    // fstab / mount(8) form: -o db_rules=FILE.
    let dir = tempdir();
    let mnt = dir.path().join("m");
    fs::create_dir(&mnt).unwrap();
    let out = Command::new("mount")
        .args(["-t", "fuse", "-o"])
        .arg(format!("arch=gfx1250,db_rules={r},ro"))
        .arg(format!("{}#{}", kpackfs().display(), src.path().display()))
        .arg(&mnt)
        .output()
        .unwrap();
    assert!(out.status.success(), "mount -o db_rules= failed: {}", String::from_utf8_lossy(&out.stderr));
    let got = names(&mnt);
    let un = Command::new("umount").arg(&mnt).status().unwrap().success();
    assert_view(&got, &expected('D', true), "-o db_rules= for gfx1250");
    assert!(un && !mounted(&mnt));
}

#[test]
fn bad_rules_are_usage_errors_naming_the_line() {
    let src = fixture();
    let conf = tempdir();
    let rules = conf.path().join("bad.rules");
    fs::write(&rules, "# fine\n**/ok/{arch}/**\n**/lib/{arh}.bin\n").unwrap();
    let mnt = conf.path().join("m");
    fs::create_dir(&mnt).unwrap();
    let runs: [Vec<std::ffi::OsString>; 3] = [
        vec!["mount".into(), "-f".into(), src.path().into(), mnt.clone().into(), "-a".into(), "gfx90a".into(), "--db-rules".into(), rules.clone().into()],
        vec!["bake".into(), src.path().into(), conf.path().join("out").into(), "-a".into(), "gfx90a".into(), "--db-rule".into(), "**/lib/*.bin".into()],
        vec!["archs".into(), src.path().into(), "--db-rules".into(), conf.path().join("missing.rules").into()],
    ];
    let wants = [format!("{}:3: unknown {{arh}}", rules.display()), "--db-rule: nothing names the architecture".to_string(), "missing.rules".to_string()];
    for (args, want) in runs.iter().zip(wants) {
        let out = Command::new(kpackfs()).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(&want) && err.lines().count() == 1, "{args:?}: {err}");
    }
    assert!(!mounted(&mnt) && !conf.path().join("out").exists());
}

/// `kpackfs archs` counts database files per target with the same table,
/// operator rules included.
#[test]
fn archs_counts_database_files_per_target() {
    let src = fixture();
    let counts = |extra: &[&str]| -> BTreeMap<String, u64> {
        let out = Command::new(kpackfs()).arg("archs").arg(src.path()).args(extra).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8(out.stdout).unwrap();
        // target, binaries, code objects, bytes, db files, archives
        text.lines()
            .skip(1)
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 6).then(|| (f[0].to_string(), f[4].parse().unwrap()))
            })
            .collect()
    };
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for (_, _, key) in FILES.iter().filter(|(_, _, k)| !k.is_empty()) {
        *want.entry(key.to_string()).or_default() += 1;
    }
    assert_eq!(counts(&[]), want);
    // Site rules: two more database files, one CK library fewer.
    *want.entry("gfx90a".into()).or_default() += 1;
    *want.entry("gfx1100".into()).or_default() += 1;
    *want.entry("gfx1250".into()).or_default() -= 1;
    assert_eq!(counts(&["--db-rule", "**/site/kernels-{arch}.bin", "--db-rule", "**/libdevice_conv_operations_gfx1250.a -> generic"]), want);
}

/// `kpackfs split` routes each database file to the artifact(s) of its
/// target, by a table written by hand: `*` is the generic artifact, and
/// a file may go to several (an AOTriton image shared by two identities).
const SPLIT_FILES: &[(&str, &str)] = &[
    ("lib/rocblas/library/TensileLibrary.dat", "*"),
    ("lib/rocblas/library/TensileLibrary_gfx1250-strict.dat", "gfx1250-strict"),
    ("lib/rocblas/library/Kernels.so-000-gfx1250.hsaco", "gfx1250"),
    ("lib/hipsparselt/library/TensileLibrary_gfx942.dat", "gfx942"),
    ("lib/rocblas/library/extra/TensileLibrary_gfx942.co", "gfx942"),
    ("lib/rocblas/library/Kernels.so-000-gfx90a-xnack+.hsaco", "gfx90a"),
    ("lib/hipblaslt/library/gfx950/TensileManifest.txt", "gfx950"),
    ("share/miopen/db/gfx942.kdb", "gfx942"),
    ("share/miopen/db/gfx1250-strict256.HIP.fdb.txt", "gfx1250-strict"),
    ("share/miopen/db/gfx103612.db.txt", "*"),
    ("share/miopen/db/gfx1103_14.kdb", "gfx1103"),
    ("lib/libMIOpenCKGroupedConv_gfx942.so.1.0", "gfx942"),
    ("lib/libdevice_conv_operations_gfx950_xnackp.a", "gfx950"),
    ("lib/libdevice_conv_operations.a", "*"),
    ("lib/hipdnn_plugins/engines/arch_content/rocke/gfx950/gfx942/k.co", "gfx950"),
    ("lib/aotriton.images/amd-gfx1250/flash/k.aks2", "gfx1250 gfx1250-strict"),
    ("share/rocjitsu/translations/gfx1250-b0-a0/v1/$H.obj", "gfx1250"),
    ("share/rocjitsu/translations/gfx950-a0/v1/$H.obj", "*"),
    ("lib/aotriton.images/amd-gfx942/flash/k.aks2", "gfx942"),
    ("lib/aotriton.images/amd-gfx1250-strict/flash/k.aks2", "gfx1250-strict"),
];

fn split_db(src: &Path, out: &Path, extra: &[&str]) {
    let o = Command::new(kpackfs()).arg("split").arg(src).arg(out).args(["--component", "db", "-q"]).args(extra).output().unwrap();
    assert!(o.status.success(), "split {extra:?}: {}", String::from_utf8_lossy(&o.stderr));
}

/// The artifacts (`*` for generic) that hold `rel`, sorted.
fn holders(out: &Path, rel: &str) -> String {
    let mut arts: Vec<String> = fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|a| Path::new(out).join(a).join(rel).is_file())
        .map(|a| if a == "db_generic" { "*".to_string() } else { a.trim_start_matches("db_").to_string() })
        .collect();
    arts.sort();
    arts.join(" ")
}

#[test]
fn split_routes_database_files_to_their_artifacts() {
    let src = tempdir();
    for (rel, _) in SPLIT_FILES {
        let p = src.path().join(expand(rel));
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, rel.as_bytes()).unwrap();
    }
    let out = tempdir();
    split_db(src.path(), out.path(), &[]);
    for (rel, want) in SPLIT_FILES {
        assert_eq!(holders(out.path(), expand(rel).to_str().unwrap()), *want, "{rel}");
    }
    // Selecting only the strict identity keeps the gfx1250 AOTriton image
    // it loads, in its own artifact.
    let out = tempdir();
    split_db(src.path(), out.path(), &["--targets", "gfx1250-strict"]);
    for rel in [
        "lib/aotriton.images/amd-gfx1250/flash/k.aks2",
        "lib/aotriton.images/amd-gfx1250-strict/flash/k.aks2",
        "lib/rocblas/library/TensileLibrary_gfx1250-strict.dat",
    ] {
        assert_eq!(holders(out.path(), rel), "gfx1250-strict", "{rel}");
    }
    assert_eq!(holders(out.path(), "lib/rocblas/library/Kernels.so-000-gfx1250.hsaco"), "");
}

/// A feature-qualified `--targets` keeps every variant of the processor,
/// as upstream's splitter does since rocm-systems #7645: one processor's
/// artifact serves each xnack mode of it, so an xnack+ process on a device
/// packaged with `--targets gfx90a:xnack-` still finds its Tensile kernels
/// and code objects. File names are kept.
#[test]
fn split_feature_targets_keep_every_variant_of_the_processor() {
    let src = tempdir();
    let lib = src.path().join("lib");
    let tensile = lib.join("rocblas/library");
    fs::create_dir_all(&tensile).unwrap();
    fs::copy(assets().join("bin/libmulti.so"), lib.join("libmulti.so")).unwrap();
    let names = ["TensileLibrary_lazy_gfx90a-xnack+.co", "TensileLibrary_lazy_gfx90a-xnack-.co", "TensileLibrary_lazy_gfx90a.co"];
    for n in names {
        fs::write(tensile.join(n), n).unwrap();
    }
    let out = tempdir();
    let o =
        Command::new(kpackfs()).arg("split").arg(src.path()).arg(out.path()).args(["--component", "db", "-q", "--targets", "gfx90a:xnack-"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("--targets gfx90a:xnack-: split keeps every variant of gfx90a"), "{err}");
    for n in names {
        assert_eq!(holders(out.path(), &format!("lib/rocblas/library/{n}")), "gfx90a", "{n}");
    }
    let mut archives: Vec<String> =
        fs::read_dir(out.path().join("db_gfx90a/.kpack")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    archives.sort();
    assert_eq!(archives, ["db_gfx90a:xnack+.kpack", "db_gfx90a:xnack-.kpack"]);
    let mut arts: Vec<String> = fs::read_dir(out.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    arts.sort();
    assert_eq!(arts, ["db_generic", "db_gfx90a"], "gfx1030 and gfx906 are still dropped");
}
