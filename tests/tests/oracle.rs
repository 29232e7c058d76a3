//! Which code object each device gets, judged only by oracles independent of
//! kpackfs: the hand-written table in `tests/src/lib.rs` (`LOADS`,
//! `ARCHIVES`, from the loader rules in docs/) says which bundle entry must
//! load on each device; clang-offload-bundler extracts that entry from the
//! fat original; the test HIP runtime (tests/hip-stub, its own C kpack
//! loader) loads through a real mount, a bake and an installed split for
//! every device — gfx90a with xnack+ and xnack-, sramecc-qualified gfx90a,
//! gfx906, gfx1030 and gfx1031 (generic only) — with both loader
//! generations, and the loaded bytes must be the bundler's.
//!
//! Besides the hipcc-built assets, `libhand.so` is libmulti.so with its
//! bundle replaced by one written with the project's bundle writer: entries
//! in an order clang never writes (xnack- before xnack+), a
//! `gfx10-3-generic` object next to a native gfx1030 one, and two equally
//! good gfx1030 entries (`hipv4-` then `hip-`). The real objects inside it
//! are the test assets' code objects.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use kpackfs_tests::*;

const LIBS: [&str; 5] = ["libmulti.so", "libtwo.so", "librelr.so", "libpage.so", "libhand.so"];

/// The hand-made bundle of libhand.so.
fn hand_bundle() -> Vec<u8> {
    let co = |bin: &str, arch: &str| expected_object(bin, 0, arch);
    let (xm, xp, generic, native, dup) = (
        co("libmulti.so", "gfx90a:xnack-"),
        co("libmulti.so", "gfx90a:xnack+"),
        co("libmulti.so", "gfx1030"),
        co("libtwo.so", "gfx1030"),
        co("app_pie", "gfx1030"),
    );
    assert!(native != dup && generic != native, "the gfx1030 payloads must differ to tell them apart");
    kpackfs_core::formats::bundle::write_bundle(
        &[
            ("host-x86_64-unknown-linux", &[]),
            ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-", &xm),
            ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+", &xp),
            ("hipv4-amdgcn-amd-amdhsa--gfx10-3-generic", &generic),
            ("hipv4-amdgcn-amd-amdhsa--gfx1030", &native),
            ("hip-amdgcn-amd-amdhsa--gfx1030", &dup),
        ],
        8,
    )
}

/// libmulti.so (one wrapper, pointing at the start of `.hip_fatbin`) with
/// the hand-made bundle in place of its own; the section keeps its size.
fn hand_binary() -> Vec<u8> {
    let t = fs::read_to_string(assets().join("expected/libmulti.so/layout.tsv")).unwrap();
    let get = |k: &str| -> usize { t.lines().find_map(|l| l.strip_prefix(k).and_then(|v| v.strip_prefix('\t'))).unwrap().trim().parse().unwrap() };
    assert_eq!(get("bundle_offset_0"), 0);
    let (at, size) = (get("fatbin_sh_offset"), get("fatbin_sh_size"));
    let mut data = fs::read(assets().join("bin/libmulti.so")).unwrap();
    let b = hand_bundle();
    assert!(b.len() < size, "hand-made bundle ({}) larger than the section ({size})", b.len());
    data[at..at + size].fill(0);
    data[at..at + b.len()].copy_from_slice(&b);
    data
}

/// The bundle each wrapper of `binary` points at, from the fat original.
fn wrapper_bundle_bytes(binary: &str) -> Vec<Vec<u8>> {
    if binary == "libhand.so" {
        return vec![hand_bundle()];
    }
    wrapper_bundles(binary).into_iter().map(|b| fat_bundle(binary, b)).collect()
}

/// Extracted objects by (binary, wrapper, entry ID).
type Memo = HashMap<(String, usize, String), Vec<u8>>;

/// clang-offload-bundler's object for (binary, wrapper, entry), memoised.
fn oracle(binary: &str, wrapper: usize, id: &str) -> Vec<u8> {
    static MEMO: Mutex<Option<Memo>> = Mutex::new(None);
    let key = (binary.to_string(), wrapper, id.to_string());
    if let Some(v) = MEMO.lock().unwrap().get_or_insert_with(HashMap::new).get(&key) {
        return v.clone();
    }
    let v = bundler_extract(&wrapper_bundle_bytes(binary)[wrapper], id);
    MEMO.lock().unwrap().get_or_insert_with(HashMap::new).insert(key, v.clone());
    v
}

/// A source tree with the libraries in lib/ and app_pie in bin/.
fn fat_tree(root: &Path) {
    fs::create_dir_all(root.join("lib")).unwrap();
    fs::create_dir_all(root.join("bin")).unwrap();
    for lib in LIBS {
        let data = if lib == "libhand.so" { hand_binary() } else { fs::read(assets().join("bin").join(lib)).unwrap() };
        fs::write(root.join("lib").join(lib), data).unwrap();
    }
    fs::copy(assets().join("bin/app_pie"), root.join("bin/app_pie")).unwrap();
    fs::set_permissions(root.join("bin/app_pie"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(root, fs::Permissions::from_mode(0o755)).unwrap();
}

fn rel_path(binary: &str) -> PathBuf {
    if binary == "app_pie" {
        PathBuf::from("bin/app_pie")
    } else {
        Path::new("lib").join(binary)
    }
}

/// Loads every binary under `root` on every device with both loader
/// generations (`magic` HIPK) or the fat runtime (`magic` HIPF) and
/// compares each load with the table and the bundler. Returns the failures.
fn check_tree(what: &str, root: &Path, magic: &str, devices: &[(&str, Option<&str>)], work: &Path) -> Vec<String> {
    let loaders: &[&str] = if magic == "HIPF" { &["feb2026"] } else { &["feb2026", "newest"] };
    let mut bad = Vec::new();
    let mut n = 0;
    for &(device, generic) in devices {
        for binary in LIBS.iter().copied().chain(["app_pie"]) {
            for loader in loaders {
                n += 1;
                let out = work.join(format!("{what}-{n}"));
                let file = root.join(rel_path(binary));
                let mut cmd = if binary == "app_pie" {
                    Command::new(&file)
                } else {
                    let mut c = Command::new(Stub::get().driver());
                    c.arg(&file);
                    c
                };
                let recs = stub_run(&mut cmd, device, generic, loader, &out);
                let bundles = wrapper_bundle_bytes(binary);
                let label = format!("{what}: {binary} on {device} ({loader})");
                if recs.len() != bundles.len() {
                    bad.push(format!("{label}: {} registrations for {} wrappers", recs.len(), bundles.len()));
                }
                for (i, r) in recs.iter().enumerate() {
                    // HIPF wrappers carry no index (co_index is 0): they
                    // register in wrapper order.
                    let w = if magic == "HIPF" { i } else { r.co_index as usize };
                    if r.magic != magic || w >= bundles.len() {
                        bad.push(format!("{label}: {r:?}"));
                        continue;
                    }
                    match expected_entry(binary, device) {
                        Some(id) if r.status != "OK" => bad.push(format!("{label} wrapper {w}: {} instead of {id}", r.status)),
                        Some(id) if r.bytes.as_deref() != Some(&oracle(binary, w, id)[..]) => {
                            bad.push(format!("{label} wrapper {w}: not clang-offload-bundler's {id} (loaded {} from {})", r.arch, r.source))
                        }
                        None if r.status == "OK" => bad.push(format!("{label} wrapper {w}: loaded {} from {}, but nothing may load", r.arch, r.source)),
                        _ => {}
                    }
                }
                let _ = fs::remove_dir_all(&out);
            }
        }
    }
    bad
}

fn assert_none(bad: Vec<String>) {
    assert!(bad.is_empty(), "{} wrong loads:\n{}", bad.len(), bad.join("\n"));
}

/// The test runtime's own fat path agrees with the hand table (it is a
/// second, independent reading of the same rules).
#[test]
fn fat_originals_load_what_the_table_says() {
    let src = tempdir();
    fat_tree(src.path());
    let work = tempdir();
    assert_none(check_tree("fat", src.path(), "HIPF", &DEVICES, work.path()));
}

/// Archive names under a view's `.kpack` directories for one binary.
fn archives_of(root: &Path, binary: &str) -> Vec<String> {
    let dir = root.join(rel_path(binary)).parent().unwrap().join(".kpack");
    let prefix = format!("{binary}_");
    let mut v: Vec<String> = fs::read_dir(&dir)
        .map(|rd| rd.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect::<Vec<String>>())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|n: String| Some(n.strip_prefix(&prefix)?.strip_suffix(".kpack")?.to_string()))
        .collect();
    v.sort();
    v
}

fn check_archives(what: &str, root: &Path, device_index: usize) -> Vec<String> {
    let device = DEVICES[device_index].0;
    let mut bad = Vec::new();
    for (binary, row) in ARCHIVES {
        let mut want: Vec<String> = row[device_index].iter().map(|s| s.to_string()).collect();
        want.sort();
        let got = archives_of(root, binary);
        if got != want {
            bad.push(format!("{what} --arch {device}: {binary} archives {got:?}, want {want:?}"));
        }
    }
    bad
}

/// One mount per device (`--arch <device ISA>`, what `--arch auto` picks on
/// that machine): the archives it lists and every load through it.
#[test]
fn every_device_loads_exactly_through_a_mount() {
    require_root();
    let src = tempdir();
    fat_tree(src.path());
    let work = tempdir();
    let mut bad = Vec::new();
    for (i, dev) in DEVICES.iter().enumerate() {
        let m = Mount::new(Some(src.path()), dev.0, &[]);
        bad.extend(check_archives("mount", &m.mnt, i));
        bad.extend(check_tree(&format!("mount {}", dev.0), &m.mnt, "HIPK", &[*dev], work.path()));
    }
    assert_none(bad);
}

#[test]
fn every_device_loads_exactly_from_a_bake() {
    let src = tempdir();
    fat_tree(src.path());
    let work = tempdir();
    let mut bad = Vec::new();
    for (i, dev) in DEVICES.iter().enumerate() {
        let baked = bake(src.path(), dev.0, &[]);
        let out = baked.path().join("out");
        bad.extend(check_archives("bake", &out, i));
        bad.extend(check_tree(&format!("bake {}", dev.0), &out, "HIPK", &[*dev], work.path()));
    }
    assert_none(bad);
}

/// `split` for every target, all artifacts installed over one root (a
/// machine with all these GPUs): every device loads exactly.
#[test]
fn every_device_loads_exactly_from_an_installed_split() {
    let input = tempdir();
    fat_tree(input.path());
    let out = tempdir();
    let o = Command::new(kpackfs())
        .arg("split")
        .arg(input.path())
        .arg(out.path())
        .args(["--component", "all", "-q", "--targets", "gfx90a,gfx906,gfx1030,gfx1031"])
        .output()
        .unwrap();
    assert!(o.status.success(), "split: {}", String::from_utf8_lossy(&o.stderr));
    let work = tempdir();
    let root = work.path().join("root");
    fs::create_dir_all(&root).unwrap();
    for art in fs::read_dir(out.path()).unwrap() {
        let art = art.unwrap().path();
        let st = Command::new("cp").arg("-a").arg(format!("{}/.", art.display())).arg(&root).status().unwrap();
        assert!(st.success());
    }
    assert_none(check_tree("split", &root, "HIPK", &DEVICES, work.path()));
}
