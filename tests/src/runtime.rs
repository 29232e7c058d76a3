//! The test HIP runtime (`tests/hip-stub`): building it, running its
//! dlopen driver, reading what it recorded, and the independent oracle it
//! is judged by — clang-offload-bundler's objects in test_assets/expected
//! and the hand-written table of which object each device loads.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::*;

/// The test HIP runtime (`tests/hip-stub`) and its dlopen driver, built
/// once per test process into a world-readable directory.
pub struct Stub {
    pub dir: PathBuf,
}

impl Stub {
    pub fn get() -> &'static Stub {
        static STUB: std::sync::OnceLock<Stub> = std::sync::OnceLock::new();
        STUB.get_or_init(|| {
            let src = repo().join("tests/hip-stub");
            // In the test cache dir's TempDir (world-readable, as the
            // other-user tests need): removed when the test process exits.
            let dir = test_cache_dir().join("hipstub");
            fs::create_dir_all(&dir).expect("stub dir");
            fs::set_permissions(test_cache_dir(), fs::Permissions::from_mode(0o755)).expect("chmod");
            fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod");
            let cc = |args: &[&std::ffi::OsStr]| {
                let st = Command::new("cc").args(args).status().expect("cc (apt-get install gcc)");
                assert!(st.success(), "building the test HIP runtime failed");
            };
            let lib = dir.join("libamdhip64.so.5");
            let map = format!("-Wl,--version-script={}", src.join("hipstub.map").display());
            // With zstd: the runtime reads `zstd-per-kernel` archives (what
            // the view serves for CCOB sources) as the upstream loader does.
            cc(&[
                "-O2".as_ref(),
                "-shared".as_ref(),
                "-fPIC".as_ref(),
                "-DHAVE_ZSTD".as_ref(),
                "-o".as_ref(),
                lib.as_os_str(),
                src.join("hipstub.c").as_os_str(),
                map.as_ref(),
                "-Wl,-soname,libamdhip64.so.5".as_ref(),
                "-lzstd".as_ref(),
            ]);
            let drv = dir.join("dlopen_driver");
            cc(&["-O2".as_ref(), "-o".as_ref(), drv.as_os_str(), src.join("dlopen_driver.c").as_os_str(), "-ldl".as_ref()]);
            Stub { dir }
        })
    }

    pub fn driver(&self) -> PathBuf {
        self.dir.join("dlopen_driver")
    }
}

/// One line of the stub's log.
#[derive(Debug, Clone)]
pub struct StubRecord {
    pub seq: usize,
    pub magic: String,
    pub binary: PathBuf,
    pub co_index: u32,
    pub source: String,
    pub key: String,
    pub arch: String,
    pub status: String,
    pub bytes: Option<Vec<u8>>,
    /// The device ISA the runtime would JIT-compile the code object for,
    /// when it is SPIR-V (the stub's `<seq>.jit`).
    pub jit: Option<String>,
}

/// Reads the records (and code objects) a stub run wrote to `out`.
pub fn stub_records(out: &Path) -> Vec<StubRecord> {
    let log = fs::read_to_string(out.join("log.tsv")).unwrap_or_default();
    let mut v: Vec<StubRecord> = log
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert!(f.len() >= 9, "bad stub log line {l:?}");
            let seq: usize = f[0].parse().expect("seq");
            StubRecord {
                seq,
                magic: f[1].into(),
                binary: f[2].into(),
                co_index: f[3].parse().unwrap_or(u32::MAX),
                source: f[4].into(),
                key: f[5].into(),
                arch: f[6].into(),
                status: f[8].into(),
                bytes: fs::read(out.join(format!("{seq}.co"))).ok(),
                jit: fs::read_to_string(out.join(format!("{seq}.jit"))).ok().map(|s| s.trim_end().to_string()),
            }
        })
        .collect();
    v.sort_by_key(|r| r.seq);
    v
}

/// Expected code object of `binary` (a `test_assets/bin` name), bundle
/// `index`, target `arch`, as clang-offload-bundler extracted it.
pub fn expected_object(binary: &str, index: usize, arch: &str) -> Vec<u8> {
    let p = assets().join("expected").join(binary).join(index.to_string()).join(format!("{}.co", arch.replace(':', "_")));
    fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Bundle each wrapper of `binary` points at (test_assets/expected/*/layout.tsv).
pub fn wrapper_bundles(binary: &str) -> Vec<usize> {
    let t = fs::read_to_string(assets().join("expected").join(binary).join("layout.tsv")).unwrap();
    let get = |k: &str| t.lines().find_map(|l| l.strip_prefix(k).and_then(|v| v.strip_prefix('\t'))).map(|v| v.trim().parse::<usize>().unwrap());
    let n = get("wrappers").unwrap();
    (0..n).map(|i| get(&format!("wrapper_bundle_{i}")).unwrap()).collect()
}

/// The device ISAs the oracle tests load for, each with the generic ISA the
/// HIP runtime appends to its list for that device (kpack-archives.md §8.2:
/// the native ISA, then its generic family with the same features).
pub const DEVICES: [(&str, Option<&str>); 7] = [
    ("gfx90a:xnack+", None),
    ("gfx90a:xnack-", None),
    ("gfx90a:sramecc+:xnack-", None),
    ("gfx90a:sramecc+:xnack+", None),
    ("gfx906", Some("gfx9-generic")),
    ("gfx1030", Some("gfx10-3-generic")),
    ("gfx1031", Some("gfx10-3-generic")),
];

const X_PLUS: &str = "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+";
const X_MINUS: &str = "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-";
const BARE_90A: &str = "hipv4-amdgcn-amd-amdhsa--gfx90a";
const G906: &str = "hipv4-amdgcn-amd-amdhsa--gfx906";
const G1030: &str = "hipv4-amdgcn-amd-amdhsa--gfx1030";
const GEN103: &str = "hipv4-amdgcn-amd-amdhsa--gfx10-3-generic";

/// Written by hand from the loader rules in docs/ (offload-bundles.md §2,
/// kpack-archives.md §8), NOT from kpackfs code: for each binary, the bundle
/// entry the runtime must load on each of [`DEVICES`] (same order), `None`
/// when nothing may load. Every bundle of a binary has the same targets, so
/// one entry ID stands for all its bundles. The rules used:
/// * a feature an object names must match the device's; one it omits is
///   "any" — so an xnack+ device never gets an `xnack-` object (app_pie on
///   gfx90a:xnack+: nothing), and bare `gfx90a` (libtwo) serves every gfx90a;
/// * exact features beat "any": the probe order drops features from the
///   right (`gfx90a:sramecc+:xnack-` probes `…:sramecc+:xnack-`,
///   `…:sramecc+`, `…:xnack-`, `gfx90a`), so that device gets `xnack-`;
/// * native beats generic: gfx1030 gets its own object even when a
///   `gfx10-3-generic` one is there; gfx1031 has only the generic one; gfx906
///   and gfx90a have no generic object in these binaries (gfx90a has no
///   family at all);
/// * equally good candidates (libhand's `hipv4-…--gfx1030` and
///   `hip-…--gfx1030`): the first in bundle order.
pub const LOADS: [(&str, [Option<&str>; 7]); 6] = [
    // device:     xnack+          xnack-          sramecc+:xnack- sramecc+:xnack+ gfx906      gfx1030      gfx1031
    ("libmulti.so", [Some(X_PLUS), Some(X_MINUS), Some(X_MINUS), Some(X_PLUS), Some(G906), Some(G1030), None]),
    ("libtwo.so", [Some(BARE_90A), Some(BARE_90A), Some(BARE_90A), Some(BARE_90A), None, Some(G1030), None]),
    ("app_pie", [None, Some(X_MINUS), Some(X_MINUS), None, None, Some(G1030), None]),
    ("librelr.so", [None, Some(X_MINUS), Some(X_MINUS), None, None, Some(G1030), None]),
    ("libpage.so", [None, Some(X_MINUS), Some(X_MINUS), None, None, Some(G1030), None]),
    ("libhand.so", [Some(X_PLUS), Some(X_MINUS), Some(X_MINUS), Some(X_PLUS), None, Some(G1030), Some(GEN103)]),
];

/// The archive targets a view for `--arch <device>` must serve for each
/// binary (same order as [`LOADS`] and [`DEVICES`]), by hand from
/// kpack-archives.md §8.3: a target with features selects the objects a
/// device with exactly those features accepts, plus its generic family.
pub const ARCHIVES: [(&str, [&[&str]; 7]); 6] = [
    ("libmulti.so", [&["gfx90a:xnack+"], &["gfx90a:xnack-"], &["gfx90a:xnack-"], &["gfx90a:xnack+"], &["gfx906"], &["gfx1030"], &[]]),
    ("libtwo.so", [&["gfx90a"], &["gfx90a"], &["gfx90a"], &["gfx90a"], &[], &["gfx1030"], &[]]),
    ("app_pie", [&[], &["gfx90a:xnack-"], &["gfx90a:xnack-"], &[], &[], &["gfx1030"], &[]]),
    ("librelr.so", [&[], &["gfx90a:xnack-"], &["gfx90a:xnack-"], &[], &[], &["gfx1030"], &[]]),
    ("libpage.so", [&[], &["gfx90a:xnack-"], &["gfx90a:xnack-"], &[], &[], &["gfx1030"], &[]]),
    (
        "libhand.so",
        [&["gfx90a:xnack+"], &["gfx90a:xnack-"], &["gfx90a:xnack-"], &["gfx90a:xnack+"], &[], &["gfx10-3-generic", "gfx1030"], &["gfx10-3-generic"]],
    ),
];

/// The hand-written [`LOADS`] entry for `binary` on `device`.
pub fn expected_entry(binary: &str, device: &str) -> Option<&'static str> {
    let d = DEVICES.iter().position(|(isa, _)| *isa == device).unwrap_or_else(|| panic!("device {device} not in the oracle table"));
    let row = LOADS.iter().find(|(b, _)| *b == binary).unwrap_or_else(|| panic!("binary {binary} not in the oracle table"));
    row.1[d]
}

/// The arch of the object the runtime loads for each device (the file name
/// under test_assets/expected), from the hand-written [`LOADS`] table.
/// Binaries outside the table (librdc, built like app_pie) use app_pie's row.
pub fn expected_arch(binary: &str, device: &str) -> &'static str {
    let row = if LOADS.iter().any(|(b, _)| *b == binary) { binary } else { "app_pie" };
    let id = expected_entry(row, device).unwrap_or_else(|| panic!("{binary} has no code object for {device}"));
    kpackfs_core::formats::target::arch_of_entry_id(id).expect("entry ID with a target")
}

/// The bytes of bundle `index` of `binary` (a test_assets/bin name), cut
/// out of the fat original with the offsets build.sh recorded (layout.tsv).
pub fn fat_bundle(binary: &str, index: usize) -> Vec<u8> {
    let t = fs::read_to_string(assets().join("expected").join(binary).join("layout.tsv")).expect("layout.tsv");
    let get = |k: &str| -> usize {
        t.lines()
            .find_map(|l| l.strip_prefix(k).and_then(|v| v.strip_prefix('\t')))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{binary}: no {k}"))
    };
    let data = fs::read(assets().join("bin").join(binary)).expect("fat binary");
    let at = get("fatbin_sh_offset") + get(&format!("bundle_offset_{index}"));
    data[at..at + get(&format!("bundle_size_{index}"))].to_vec()
}

/// clang-offload-bundler's extraction of entry `id` from `bundle`: the
/// independent oracle for a code object's bytes.
pub fn bundler_extract(bundle: &[u8], id: &str) -> Vec<u8> {
    let dir = tempdir();
    let (input, output) = (dir.path().join("in.bundle"), dir.path().join("out.co"));
    fs::write(&input, bundle).expect("write bundle");
    let bundler = "/usr/lib/llvm-15/bin/clang-offload-bundler";
    let o = Command::new(bundler)
        .args(["--unbundle", "--type=o", &format!("--targets={id}")])
        .arg(format!("--input={}", input.display()))
        .arg(format!("--output={}", output.display()))
        .output()
        .unwrap_or_else(|e| panic!("{bundler}: {e} (apt-get install clang-15)"));
    assert!(o.status.success(), "clang-offload-bundler {id}: {}", String::from_utf8_lossy(&o.stderr));
    fs::read(&output).expect("bundler output")
}

/// Runs `cmd` (a program, or the dlopen driver with a library) against the
/// test HIP runtime as `device` (with `generic` as the second ISA of its
/// list) and returns what it loaded.
pub fn stub_run(cmd: &mut Command, device: &str, generic: Option<&str>, loader: &str, out: &Path) -> Vec<StubRecord> {
    let stub = Stub::get();
    fs::create_dir_all(out).expect("stub out dir");
    fs::set_permissions(out, fs::Permissions::from_mode(0o777)).expect("chmod");
    cmd.env("LD_LIBRARY_PATH", &stub.dir).env("KPACK_STUB_ARCH", device).env("KPACK_STUB_LOADER", loader).env("KPACK_STUB_OUT", out);
    match generic {
        Some(g) => cmd.env("KPACK_STUB_ARCH2", g),
        None => cmd.env_remove("KPACK_STUB_ARCH2"),
    };
    let o = cmd.output().expect("run with the test runtime");
    assert!(o.status.success(), "{cmd:?} failed: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    stub_records(out)
}

/// Loads each of `libs` (test_assets/bin names, installed in `lib_dir`)
/// with the test HIP runtime for `device` and both loader generations:
/// every wrapper must get, from an archive under `lib_dir`'s install,
/// clang-offload-bundler's object of the fat original.
pub fn check_stub_loads(lib_dir: &Path, libs: &[&str], device: &str, work: &Path) {
    let stub = Stub::get();
    for (i, lib) in libs.iter().enumerate() {
        for loader in ["feb2026", "newest"] {
            let out = work.join(format!("{}-{loader}-{i}", device.replace(':', "_")));
            fs::create_dir_all(&out).unwrap();
            let path = lib_dir.join(lib);
            let o = Command::new(stub.driver())
                .arg(&path)
                .env("LD_LIBRARY_PATH", &stub.dir)
                .env("KPACK_STUB_ARCH", device)
                .env("KPACK_STUB_LOADER", loader)
                .env("KPACK_STUB_OUT", &out)
                .output()
                .unwrap();
            assert!(o.status.success(), "dlopen {}: {}{}", path.display(), String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
            let recs = stub_records(&out);
            let bundles = wrapper_bundles(lib);
            assert_eq!(recs.len(), bundles.len(), "{lib}: {recs:#?}");
            for r in recs {
                let w = r.co_index as usize;
                assert_eq!((r.magic.as_str(), r.status.as_str()), ("HIPK", "OK"), "{lib} wrapper {w} on {device} ({loader}): {r:?}");
                assert!(r.source.ends_with(".kpack"), "{lib}: archive {}", r.source);
                let want = expected_object(lib, bundles[w], expected_arch(lib, device));
                assert!(r.bytes.as_deref() == Some(&want[..]), "{lib} wrapper {w} on {device} ({loader}): not clang-offload-bundler's object");
            }
            let _ = fs::remove_dir_all(&out);
        }
    }
}
