//! Portable SPIR-V code objects (`amdgcnspirv`, issue 21 item 2), judged by
//! hand-written tables (docs/research/spirv.md §2, §5): the fat runtime
//! takes a wrapper's SPIR-V object only when no native object and no
//! generic one *of the runtime's own table* fits; a view serves it in
//! `<binary>_amdgcnspirv.kpack` (arch key `amdgcnspirv`) exactly where some
//! wrapper's choice for a selected device is SPIR-V, and never under a
//! device key.
//!
//! The binaries are the test assets with their bundles replaced by ones
//! written with the project's bundle writer (one CCOB-compressed). Native
//! payloads are real code objects of the assets, SPIR-V payloads a SPIR-V
//! header with a tag; each load is compared byte for byte with the payload
//! the table names — what was put in, not what kpackfs selects. Loads go
//! through the test HIP runtime (tests/hip-stub), which records a SPIR-V
//! blob as "would JIT" instead of compiling it.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use kpackfs_core::formats::bundle::{ccob, write_bundle, CcobMethod};
use kpackfs_tests::*;

/// Devices: the ISA the test runtime is told, and the generic ISA the HIP
/// runtime's own table adds (none for gfx1250 and gfx90a).
const DEVICES: [(&str, Option<&str>); 5] = [
    ("gfx1100", Some("gfx11-generic")),
    ("gfx1030", Some("gfx10-3-generic")),
    ("gfx1250", None),
    ("gfx90a:sramecc+:xnack-", None),
    ("gfx90a:sramecc+:xnack+", None),
];

const SPV: &str = "hip-spirv64-amd-amdhsa--amdgcnspirv";
const SPV_UNKNOWN: &str = "hipv4-spirv64-amd-amdhsa-unknown-amdgcnspirv";
const HOST: &str = "host-x86_64-unknown-linux-gnu";

/// A wrapper's bundle: CCOB-compressed or not, and its (entry ID, payload
/// label) pairs.
type Wrapper = (bool, &'static [(&'static str, &'static str)]);

/// The binaries: name, the asset whose bundles are replaced, one bundle
/// per wrapper of that asset.
const BINS: [(&str, &str, &[Wrapper]); 7] = [
    ("libmixed.so", "libmulti.so", &[(false, &[(HOST, ""), ("hipv4-amdgcn-amd-amdhsa--gfx1100", "N1"), (SPV, "S1")])]),
    ("libspv.so", "libmulti.so", &[(false, &[(HOST, ""), (SPV, "S2")])]),
    ("libunk.so", "libmulti.so", &[(false, &[(HOST, ""), (SPV_UNKNOWN, "S3")])]),
    ("libccob.so", "libmulti.so", &[(true, &[(HOST, ""), ("hipv4-amdgcn-amd-amdhsa--gfx1100", "N4"), (SPV, "S4")])]),
    ("lib1250.so", "libmulti.so", &[(false, &[(HOST, ""), ("hipv4-amdgcn-amd-amdhsa--gfx12-5-generic", "G5"), (SPV, "S5")])]),
    ("libxnack.so", "libmulti.so", &[(false, &[(HOST, ""), ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+", "X6"), (SPV, "S6")])]),
    ("libtwo.so", "libtwo.so", &[(false, &[(HOST, ""), ("hipv4-amdgcn-amd-amdhsa--gfx1100", "N7"), (SPV, "S7")]), (false, &[(HOST, ""), (SPV, "S8")])]),
];

/// By hand: the payload each wrapper loads on each device (columns as
/// [`DEVICES`]). SPIR-V (`S…`) only where neither a native object nor a
/// generic one the runtime knows fits: gfx1250 takes SPIR-V over
/// `gfx12-5-generic`, an xnack- device over an `xnack+` object.
const LOADS: [(&str, [&[&str]; 5]); 7] = [
    //              gfx1100        gfx1030        gfx1250        gfx90a xnack-  gfx90a xnack+
    ("libmixed.so", [&["N1"], &["S1"], &["S1"], &["S1"], &["S1"]]),
    ("libspv.so", [&["S2"], &["S2"], &["S2"], &["S2"], &["S2"]]),
    ("libunk.so", [&["S3"], &["S3"], &["S3"], &["S3"], &["S3"]]),
    ("libccob.so", [&["N4"], &["S4"], &["S4"], &["S4"], &["S4"]]),
    ("lib1250.so", [&["S5"], &["S5"], &["S5"], &["S5"], &["S5"]]),
    ("libxnack.so", [&["S6"], &["S6"], &["S6"], &["S6"], &["X6"]]),
    ("libtwo.so", [&["N7", "S8"], &["S7", "S8"], &["S7", "S8"], &["S7", "S8"], &["S7", "S8"]]),
];

/// By hand: the archive targets `--arch <device>` serves per binary.
const ARCHIVES: [(&str, [&[&str]; 5]); 7] = [
    ("libmixed.so", [&["gfx1100"], &["amdgcnspirv"], &["amdgcnspirv"], &["amdgcnspirv"], &["amdgcnspirv"]]),
    ("libspv.so", [&["amdgcnspirv"]; 5]),
    ("libunk.so", [&["amdgcnspirv"]; 5]),
    ("libccob.so", [&["gfx1100"], &["amdgcnspirv"], &["amdgcnspirv"], &["amdgcnspirv"], &["amdgcnspirv"]]),
    ("lib1250.so", [&["amdgcnspirv"], &["amdgcnspirv"], &["amdgcnspirv", "gfx12-5-generic"], &["amdgcnspirv"], &["amdgcnspirv"]]),
    ("libxnack.so", [&["amdgcnspirv"], &["amdgcnspirv"], &["amdgcnspirv"], &["amdgcnspirv"], &["gfx90a:xnack+"]]),
    ("libtwo.so", [&["amdgcnspirv", "gfx1100"], &["amdgcnspirv"], &["amdgcnspirv"], &["amdgcnspirv"], &["amdgcnspirv"]]),
];

/// A SPIR-V module header (magic 0x07230203, version 1.0, generator 0,
/// bound 16, schema 0) followed by a tag that tells the payloads apart.
fn spirv(tag: u8) -> Vec<u8> {
    let mut v = vec![0x03, 0x02, 0x23, 0x07, 0x00, 0x00, 0x01, 0x00, 0, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0];
    v.extend([tag; 12]);
    v
}

/// The bytes of a payload label.
fn payload(label: &str) -> Vec<u8> {
    let real = |bin: &str, arch: &str| expected_object(bin, 0, arch);
    match label {
        "" => Vec::new(),
        "N1" => real("libmulti.so", "gfx1030"),
        "N4" => real("libmulti.so", "gfx90a:xnack-"),
        "G5" => real("app_pie", "gfx1030"),
        "X6" => real("libmulti.so", "gfx90a:xnack+"),
        "N7" => real("libtwo.so", "gfx1030"),
        s => spirv(s.strip_prefix('S').and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("label {s}"))),
    }
}

fn layout(asset: &str, key: &str) -> usize {
    let t = fs::read_to_string(assets().join("expected").join(asset).join("layout.tsv")).unwrap();
    t.lines().find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix('\t'))).unwrap_or_else(|| panic!("{asset}: {key}")).trim().parse().unwrap()
}

/// The asset with each wrapper's bundle replaced (the fat section keeps
/// its size; each bundle stays where its wrapper points).
fn binary(asset: &str, wrappers: &[Wrapper]) -> Vec<u8> {
    let mut data = fs::read(assets().join("bin").join(asset)).unwrap();
    let (sec, size) = (layout(asset, "fatbin_sh_offset"), layout(asset, "fatbin_sh_size"));
    assert_eq!(layout(asset, "bundles"), wrappers.len(), "{asset}");
    for (i, (compressed, entries)) in wrappers.iter().enumerate() {
        let start = layout(asset, &format!("bundle_offset_{i}"));
        let end = if i + 1 < wrappers.len() { layout(asset, &format!("bundle_offset_{}", i + 1)) } else { size };
        let payloads: Vec<Vec<u8>> = entries.iter().map(|(_, l)| payload(l)).collect();
        let list: Vec<(&str, &[u8])> = entries.iter().zip(&payloads).map(|((id, _), p)| (*id, p.as_slice())).collect();
        let mut b = write_bundle(&list, 8);
        if *compressed {
            b = ccob::encode(&b, 3, CcobMethod::Zstd, 3).unwrap();
        }
        assert!(b.len() < end - start, "{asset} bundle {i}: {} bytes for a {}-byte slot", b.len(), end - start);
        data[sec + start..sec + end].fill(0);
        data[sec + start..sec + start + b.len()].copy_from_slice(&b);
    }
    data
}

/// The fat install: every binary in lib/.
fn fat_tree(root: &Path) {
    fs::create_dir_all(root.join("lib")).unwrap();
    for (name, asset, wrappers) in BINS {
        fs::write(root.join("lib").join(name), binary(asset, wrappers)).unwrap();
    }
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(root, fs::Permissions::from_mode(0o755)).unwrap();
}

fn archives_of(root: &Path, binary: &str) -> Vec<String> {
    let prefix = format!("{binary}_");
    let mut v: Vec<String> = fs::read_dir(root.join("lib/.kpack"))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| Some(n.strip_prefix(&prefix)?.strip_suffix(".kpack")?.to_string()))
        .collect();
    v.sort();
    v
}

fn check_archives(what: &str, root: &Path, d: usize) -> Vec<String> {
    ARCHIVES
        .iter()
        .filter(|(b, row)| archives_of(root, b) != row[d])
        .map(|(b, row)| format!("{what} --arch {}: {b} archives {:?}, want {:?}", DEVICES[d].0, archives_of(root, b), row[d]))
        .collect()
}

/// Loads every binary of `root`/lib on device `d` through the test runtime
/// and compares each wrapper's object with [`LOADS`]. `feb2026_gaps` lists
/// the (binary, wrapper) the Feb-2026 loader cannot reach (a SPIR-V entry
/// behind a device archive that lacks the wrapper).
fn check_loads(what: &str, root: &Path, magic: &str, d: usize, loader: &str, work: &Path) -> Vec<String> {
    let (device, generic) = DEVICES[d];
    let mut bad = Vec::new();
    for (binary, row) in LOADS {
        let out = work.join(format!("{what}-{d}-{loader}-{binary}"));
        let mut cmd = Command::new(Stub::get().driver());
        cmd.arg(root.join("lib").join(binary));
        let recs = stub_run(&mut cmd, device, generic, loader, &out);
        let label = format!("{what}: {binary} on {device} ({loader})");
        let want = row[d];
        if recs.len() != want.len() {
            bad.push(format!("{label}: {} registrations for {} wrappers", recs.len(), want.len()));
        }
        for (i, r) in recs.iter().enumerate() {
            let w = if magic == "HIPF" { i } else { r.co_index as usize };
            let Some(l) = want.get(w) else { continue };
            let gap = magic == "HIPK" && loader == "feb2026" && binary == "libtwo.so" && d == 0 && w == 1;
            if gap {
                // Documented: this loader's first archive listing gfx1100
                // decides, and it has no entry for the SPIR-V-only wrapper.
                if r.status != "KERNEL_NOT_FOUND" {
                    bad.push(format!("{label} wrapper {w}: {} (want KERNEL_NOT_FOUND)", r.status));
                }
                continue;
            }
            let spirv = l.starts_with('S');
            if r.magic != magic || r.status != "OK" {
                bad.push(format!("{label} wrapper {w}: {r:?}"));
            } else if r.bytes.as_deref() != Some(&payload(l)[..]) {
                bad.push(format!("{label} wrapper {w}: loaded {} from {}, not {l}", r.arch, r.source));
            } else if spirv != (r.arch == "amdgcnspirv") || spirv != (r.jit.as_deref() == Some(device)) {
                bad.push(format!("{label} wrapper {w}: arch {} jit {:?} for {l}", r.arch, r.jit));
            }
        }
        let _ = fs::remove_dir_all(&out);
    }
    bad
}

fn assert_none(bad: Vec<String>) {
    assert!(bad.is_empty(), "{} problems:\n{}", bad.len(), bad.join("\n"));
}

fn kp(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(kpackfs()).args(args).output().unwrap()
}

fn ok(o: Output, what: &str) -> String {
    assert!(o.status.success(), "{what}: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The test runtime's fat path, a reading of the rules independent of
/// kpackfs, agrees with the table.
#[test]
fn fat_originals_load_what_the_table_says() {
    let src = tempdir();
    fat_tree(src.path());
    let work = tempdir();
    let mut bad = Vec::new();
    for d in 0..DEVICES.len() {
        bad.extend(check_loads("fat", src.path(), "HIPF", d, "feb2026", work.path()));
    }
    assert_none(bad);
}

/// A bake per device: the archives the table says (SPIR-V only where some
/// wrapper needs it), and every load through both loader generations.
#[test]
fn each_device_gets_spirv_exactly_where_the_runtime_would_jit() {
    let src = tempdir();
    fat_tree(src.path());
    let work = tempdir();
    let mut bad = Vec::new();
    for (d, (device, _)) in DEVICES.iter().enumerate() {
        let baked = bake(src.path(), device, &[]);
        let out = baked.path().join("out");
        bad.extend(check_archives("bake", &out, d));
        for loader in ["feb2026", "newest"] {
            bad.extend(check_loads(&format!("bake {device}"), &out, "HIPK", d, loader, work.path()));
        }
    }
    assert_none(bad);
}

/// The SPIR-V archive's own shape (docs/research/spirv.md §5.3): group =
/// binary, family and single arch `amdgcnspirv`, one entry per wrapper
/// with a SPIR-V object — and no device archive holds SPIR-V bytes.
#[test]
fn the_spirv_archive_holds_each_wrappers_spirv_object() {
    use kpackfs_core::formats::kpack::{Archive, Scheme};
    let src = tempdir();
    fat_tree(src.path());
    let baked = bake(src.path(), "gfx1100", &[]);
    let kdir = baked.path().join("out/lib/.kpack");
    let data = fs::read(kdir.join("libtwo.so_amdgcnspirv.kpack")).unwrap();
    let a = Archive::open(&data).unwrap();
    assert_eq!((a.toc.group_name.as_str(), a.toc.gfx_arch_family.as_str()), ("libtwo.so", "amdgcnspirv"));
    assert_eq!(a.toc.gfx_arches, ["amdgcnspirv"]);
    let keys: Vec<&String> = a.toc.toc.iter().map(|(k, _)| k).collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    for (w, l) in ["S7", "S8"].iter().enumerate() {
        let key = keys.iter().find(|k| k.ends_with(&format!("#{w}"))).unwrap();
        assert!(a.get_kernel(&data, key, "amdgcnspirv").unwrap() == payload(l), "wrapper {w}");
    }
    let data = fs::read(kdir.join("libtwo.so_gfx1100.kpack")).unwrap();
    let a = Archive::open(&data).unwrap();
    assert_eq!(a.toc.toc.len(), 1, "the SPIR-V-only wrapper has no gfx1100 entry");
    let key = &a.toc.toc[0].0;
    assert!(key.ends_with("#0") && a.get_kernel(&data, key, "gfx1100").unwrap() == payload("N7"));
    // From a CCOB: compressed, like every archive of decoded objects; from
    // a plain bundle: scheme none (`--archive-compression auto`).
    let baked = bake(src.path(), "gfx1030", &[]);
    for (bin, zstd, l) in [("libccob.so", true, "S4"), ("libspv.so", false, "S2")] {
        let data = fs::read(baked.path().join(format!("out/lib/.kpack/{bin}_amdgcnspirv.kpack"))).unwrap();
        let a = Archive::open(&data).unwrap();
        assert_eq!(matches!(a.toc.scheme, Scheme::Zstd { .. }), zstd, "{bin}");
        let key = &a.toc.toc[0].0;
        assert!(a.get_kernel(&data, key, "amdgcnspirv").unwrap() == payload(l), "{bin}");
    }
}

/// `archs` gives SPIR-V its own row, with the objects and binaries counted.
#[test]
fn archs_counts_spirv_objects() {
    let src = tempdir();
    fat_tree(src.path());
    let out = ok(kp(&["archs".as_ref(), src.path().as_os_str()]), "archs");
    let row = |t: &str| -> Vec<u64> {
        let l = out.lines().find(|l| l.split_whitespace().next() == Some(t)).unwrap_or_else(|| panic!("no {t} row:\n{out}"));
        l.split_whitespace().skip(1).map(|v| v.parse().unwrap()).collect()
    };
    // target, binaries, code objects, bytes, db files, archives
    assert_eq!(row("amdgcnspirv"), [7, 8, 8 * 32, 0, 0]);
    assert_eq!(row("gfx1100"), [3, 3, (payload("N1").len() + payload("N4").len() + payload("N7").len()) as u64, 0, 0]);
    // `inspect` names each SPIR-V entry as found, with arch amdgcnspirv.
    let text = ok(kp(&["inspect".as_ref(), src.path().join("lib/libunk.so").as_os_str()]), "inspect");
    assert!(text.lines().any(|l| l.split_whitespace().next() == Some("amdgcnspirv") && l.contains(&format!("({SPV_UNKNOWN})"))), "{text}");
    // A baked tree's SPIR-V archives are counted as archives.
    let baked = bake(src.path(), "gfx1030", &[]);
    let out = ok(kp(&["archs".as_ref(), baked.path().join("out").as_os_str()]), "archs of a bake");
    let l = out.lines().find(|l| l.starts_with("amdgcnspirv ")).unwrap_or_else(|| panic!("{out}"));
    assert_eq!(l.split_whitespace().last(), Some("7"), "{l}");
}

/// `resolve` names SPIR-V as such and returns its bytes, from a fat
/// original (HIPF) and from a bake (HIPK); the mixed binary resolves with
/// the newest loader only (docs/research/spirv.md §5.4).
#[test]
fn resolve_reports_the_spirv_object() {
    let src = tempdir();
    fat_tree(src.path());
    let baked = bake(src.path(), "gfx1250", &[]);
    for (root, loader) in [(src.path().to_path_buf(), "newest"), (baked.path().join("out"), "both")] {
        let out = tempdir();
        let dir = out.path().join("o");
        let text = ok(
            kp(&[
                "resolve".as_ref(),
                root.join("lib/lib1250.so").as_os_str(),
                "--arch".as_ref(),
                "gfx1250".as_ref(),
                "--loader".as_ref(),
                loader.as_ref(),
                "--out".as_ref(),
                dir.as_os_str(),
            ]),
            "resolve",
        );
        assert!(text.contains("amdgcnspirv (JIT)"), "{text}");
        assert!(fs::read(dir.join("0.co")).unwrap() == payload("S5"), "{}", root.display());
    }
    let b1100 = bake(src.path(), "gfx1100", &[]);
    let bin = b1100.path().join("out/lib/libtwo.so");
    let out = tempdir();
    let dir = out.path().join("o");
    ok(
        kp(&[
            "resolve".as_ref(),
            bin.as_os_str(),
            "--arch".as_ref(),
            "gfx1100".as_ref(),
            "--loader".as_ref(),
            "newest".as_ref(),
            "--out".as_ref(),
            dir.as_os_str(),
        ]),
        "resolve newest",
    );
    assert!(fs::read(dir.join("0.co")).unwrap() == payload("N7") && fs::read(dir.join("1.co")).unwrap() == payload("S8"));
    let o = kp(&["resolve".as_ref(), bin.as_os_str(), "--arch".as_ref(), "gfx1100".as_ref(), "--loader".as_ref(), "feb2026".as_ref()]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stdout).contains("KERNEL_NOT_FOUND"), "{}", String::from_utf8_lossy(&o.stdout));
}

fn split_and_install(src: &Path, out: &Path, targets: &[&str], want_arts: &[&str], work: &Path) -> std::path::PathBuf {
    let mut args: Vec<&std::ffi::OsStr> = vec!["split".as_ref(), src.as_os_str(), out.as_os_str(), "--component".as_ref(), "c".as_ref(), "-q".as_ref()];
    args.extend(targets.iter().map(std::ffi::OsStr::new));
    ok(kp(&args), "split");
    let mut arts: Vec<String> = fs::read_dir(out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    arts.sort();
    assert_eq!(arts, want_arts, "{targets:?}");
    let found = Command::new("find").arg(out.join("c_amdgcnspirv")).args(["-type", "f", "-name", "*.kpack"]).output().unwrap();
    let found: Vec<String> =
        String::from_utf8_lossy(&found.stdout).lines().filter_map(|l| Some(Path::new(l).file_name()?.to_string_lossy().into_owned())).collect();
    assert_eq!(found, ["c_amdgcnspirv.kpack"], "the SPIR-V artifact holds the SPIR-V archive and nothing else");
    let v = ok(kp(&["verify".as_ref(), out.as_os_str(), "--against".as_ref(), src.as_os_str()]), "verify");
    assert!(v.contains("verify: OK"), "{v}");
    let root = work.join("root");
    fs::create_dir_all(&root).unwrap();
    for a in &arts {
        let st = Command::new("cp").arg("-a").arg(format!("{}/.", out.join(a).display())).arg(&root).status().unwrap();
        assert!(st.success());
    }
    root
}

/// `split` writes the component's SPIR-V archive into its own artifact
/// `c_amdgcnspirv`; `verify --against` passes; the installed overlay loads
/// the table's objects (newest loader: the Feb-2026 one stops at the
/// component's device archive, docs/research/spirv.md §5.4).
#[test]
fn split_puts_spirv_in_its_own_artifact() {
    let src = tempdir();
    fat_tree(src.path());
    let (out, work) = (tempdir(), tempdir());
    let root = split_and_install(src.path(), out.path(), &[], &["c_amdgcnspirv", "c_generic", "c_gfx1100", "c_gfx12-5-generic", "c_gfx90a"], work.path());
    let mut bad = Vec::new();
    for d in 0..DEVICES.len() {
        bad.extend(check_loads("split", &root, "HIPK", d, "newest", work.path()));
    }
    // With --targets, SPIR-V is kept where a selected device would take it.
    let (out, work) = (tempdir(), tempdir());
    let root = split_and_install(src.path(), out.path(), &["--targets", "gfx1100"], &["c_amdgcnspirv", "c_generic", "c_gfx1100"], work.path());
    bad.extend(check_loads("split --targets gfx1100", &root, "HIPK", 0, "newest", work.path()));
    assert_none(bad);
    // Where every selected device has native code, SPIR-V is left out and
    // the split says so.
    let only = tempdir();
    fs::create_dir(only.path().join("lib")).unwrap();
    fs::copy(src.path().join("lib/libmixed.so"), only.path().join("lib/libmixed.so")).unwrap();
    let out = tempdir();
    let o = kp(&[
        "split".as_ref(),
        only.path().as_os_str(),
        out.path().as_os_str(),
        "--component".as_ref(),
        "c".as_ref(),
        "--targets".as_ref(),
        "gfx1100".as_ref(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).lines().any(|l| l.starts_with("dropped targets not selected:") && l.ends_with("amdgcnspirv")), "{o:?}");
    assert!(!out.path().join("c_amdgcnspirv").exists());
}

/// `--views`: each view decides on its own (gfx1100 needs the SPIR-V
/// archive of libmixed.so, gfx1030 does) and equals its bake.
#[test]
fn views_decide_each_on_their_own() {
    require_root();
    let src = tempdir();
    fat_tree(src.path());
    let m = Mount::new(Some(src.path()), "", &["--views", "gfx1100,gfx1030"]);
    let mut bad = Vec::new();
    for (d, dev) in [(0, "gfx1100"), (1, "gfx1030")] {
        bad.extend(check_archives(&format!("view {dev}"), &m.path(dev), d));
        let baked = bake(src.path(), dev, &[]);
        assert_same_tree(&snapshot(&m.path(dev)), &snapshot(&baked.path().join("out")), &format!("view {dev} vs its bake"));
    }
    assert_none(bad);
}

/// The wheels split-wheel writes from a wheel of [`BINS`] plus the
/// unchanged libmulti.so (native gfx1030, gfx906, gfx90a xnack±), by hand:
/// the SPIR-V wheel is no target and has no extra of its own.
const SPV_WHEELS: [&str; 7] = [
    "spvlib-1.0-py3-none-linux_x86_64.whl",
    "spvlib_device_amdgcnspirv-1.0-py3-none-linux_x86_64.whl",
    "spvlib_device_gfx1030-1.0-py3-none-linux_x86_64.whl",
    "spvlib_device_gfx1100-1.0-py3-none-linux_x86_64.whl",
    "spvlib_device_gfx12_5-1.0-py3-none-linux_x86_64.whl",
    "spvlib_device_gfx906-1.0-py3-none-linux_x86_64.whl",
    "spvlib_device_gfx90a-1.0-py3-none-linux_x86_64.whl",
];

/// By hand (docs/packaging.md): the host METADATA lines split-wheel adds
/// in the family layout — every `device-<target>` extra and `device-all`
/// require `spvlib-device-amdgcnspirv`.
fn spv_extras() -> String {
    let q = |d: &str, e: &str| format!("Requires-Dist: spvlib-device-{d} == 1.0; extra == \"{e}\"\n");
    let mut s = String::from("Requires-Dist: rocm-bootstrap\n");
    for t in ["gfx1030", "gfx1100", "gfx906", "gfx90a"] {
        let e = format!("device-{t}");
        s += &format!("Provides-Extra: {e}\n{}{}", q(t, &e), q("amdgcnspirv", &e));
    }
    s += "Provides-Extra: device-all\n";
    for d in ["amdgcnspirv", "gfx1030", "gfx1100", "gfx12-5", "gfx906", "gfx90a"] {
        s += &q(d, "device-all");
    }
    s
}

/// split-wheel with SPIR-V (docs/packaging.md): `pip install
/// 'spvlib[device-gfx1030]'` — gfx1030 has native code in libmulti only —
/// installs the SPIR-V wheel, and the test runtime loads each SPIR-V-only
/// wrapper's blob ("would JIT") byte for byte as [`LOADS`] says; gfx1100
/// and gfx90a still load their native objects. Both layouts; the newest
/// loader (the Feb-2026 one stops at the component's device archive,
/// docs/research/spirv.md §5.4). gfx1250 has no target wheel, hence no
/// extra: the SPIR-V wheel installed by name serves it.
#[test]
fn split_wheel_brings_spirv_with_every_device_extra() {
    use kpackfs_tests::wheel::{bootstrap_stub, check_record, installed, listing, metadata, pip, text, write_wheel};
    let dir = tempdir();
    let fat = dir.path().join("fat");
    fat_tree(&fat);
    fs::copy(assets().join("bin/libmulti.so"), fat.join("lib/libmulti.so")).unwrap();
    let mut files: Vec<(String, std::path::PathBuf)> = vec![];
    for e in fs::read_dir(fat.join("lib")).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        files.push((format!("spvlib/lib/{name}"), fat.join("lib").join(&name)));
    }
    files.sort();
    let list: Vec<(&str, &Path, u32)> = files.iter().map(|(n, p)| (n.as_str(), p.as_path(), 0o755)).collect();
    let wheel = dir.path().join(SPV_WHEELS[0]);
    write_wheel(&wheel, "spvlib", "1.0", "py3-none-linux_x86_64", "", &list);
    let links = dir.path().join("links");
    fs::create_dir(&links).unwrap();
    bootstrap_stub(&links);

    let work = tempdir();
    let mut bad = Vec::new();
    for layout in ["family", "processor"] {
        let out = dir.path().join(layout);
        let o = kp(&["split-wheel".as_ref(), wheel.as_os_str(), out.as_os_str(), "-q".as_ref(), "--layout".as_ref(), layout.as_ref()]);
        assert!(o.status.success(), "{layout}: {}", text(&o));
        assert!(!text(&o).contains("not in the family table"), "{layout}: amdgcnspirv warned about: {}", text(&o));
        let want: Vec<&str> = SPV_WHEELS.iter().copied().filter(|w| layout == "family" || !w.contains("gfx12_5")).collect();
        let want: Vec<String> = if layout == "family" {
            want.iter().map(|s| s.to_string()).collect()
        } else {
            // One wheel per processor: the generic target's is its own.
            let mut v: Vec<String> = want.iter().map(|s| s.to_string()).collect();
            v.push("spvlib_device_gfx12_5_generic-1.0-py3-none-linux_x86_64.whl".into());
            v.sort();
            v
        };
        assert_eq!(listing(&out), want, "{layout}");
        for w in &want {
            check_record(&out.join(w));
        }
        let spv = out.join(SPV_WHEELS[1]);
        let m = metadata(&spv, "spvlib_device_amdgcnspirv-1.0.dist-info");
        assert!(m.contains("Name: spvlib-device-amdgcnspirv\n") && m.contains("Requires-Dist: spvlib"), "{m}");
        let host = metadata(&out.join(SPV_WHEELS[0]), "spvlib-1.0.dist-info");
        let want_host = format!("Metadata-Version: 2.1\nName: spvlib\nVersion: 1.0\n{}", spv_extras());
        if layout == "family" && host != want_host {
            bad.push(format!("family: host METADATA\n{host}want\n{want_host}"));
        }
        assert!(!host.contains("device-amdgcnspirv\n"), "{layout}: SPIR-V has no extra of its own: {host}");

        // requirement → distributions (by hand) → devices (DEVICES index).
        // The SPIR-V wheel alone serves gfx1250, which has no extra.
        let cases: [(&str, &[&str], &[usize]); 5] = [
            ("spvlib[device-gfx1030]", &["amdgcnspirv", "gfx1030"], &[1]),
            ("spvlib[device-gfx1100]", &["amdgcnspirv", "gfx1100"], &[0]),
            ("spvlib[device-gfx90a]", &["amdgcnspirv", "gfx90a"], &[3, 4]),
            ("spvlib-device-gfx1030", &["amdgcnspirv", "gfx1030"], &[1]),
            ("spvlib-device-amdgcnspirv", &["amdgcnspirv"], &[2]),
        ];
        for (i, (req, dists, devices)) in cases.iter().enumerate() {
            if layout == "processor" && *req == "spvlib-device-gfx1030" {
                continue; // processor wheels require nothing but the host
            }
            let site = dir.path().join(format!("site-{layout}-{i}"));
            pip(&site, &["--find-links".as_ref(), out.as_os_str(), "--find-links".as_ref(), links.as_os_str(), req.as_ref()]);
            let mut want: Vec<String> = vec!["spvlib-1.0".into()];
            if layout == "family" {
                want.push("rocm_bootstrap-0.0.0".into());
            }
            want.extend(dists.iter().map(|d| format!("spvlib_device_{d}-1.0")));
            want.sort();
            if installed(&site) != want {
                bad.push(format!("{layout}: pip install '{req}' installed {:?}, want {want:?}", installed(&site)));
            }
            for &d in *devices {
                bad.extend(check_loads(&format!("{layout} {req}"), &site.join("spvlib"), "HIPK", d, "newest", work.path()));
            }
        }
    }
    assert_none(bad);
}
