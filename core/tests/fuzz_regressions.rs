//! Crashers found by the fuzzers (`core/fuzz/regressions/TARGET/`), replayed
//! under `cargo test` — a debug build, so arithmetic overflow panics as it
//! does in the fuzz builds (`cargo fuzz run -a`). Each must be handled: a
//! clean refusal, or a plan that meets the serving invariants.

use std::path::PathBuf;

use kpackfs_core::formats::elf::{self, ElfFile};
use kpackfs_core::formats::kpack::{Archive, Scheme};
use kpackfs_core::formats::marker::Marker;
use kpackfs_core::formats::pe::{self, PeFile};

#[path = "../fuzz/fuzz_targets/common.rs"]
mod common;

/// Runs `check` on every kept input of fuzz target `target`.
fn replay(target: &str, check: impl Fn(&Vec<u8>)) -> usize {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions").join(target);
    let Ok(rd) = std::fs::read_dir(&dir) else { return 0 };
    let mut paths: Vec<PathBuf> = rd.map(|e| e.unwrap().path()).collect();
    paths.sort();
    for path in &paths {
        eprintln!("{}", path.display());
        check(&std::fs::read(path).unwrap());
    }
    paths.len()
}

#[test]
fn elf_plan_regressions() {
    let n = replay("elf_plan", |v| {
        let Ok(f) = ElfFile::parse(v) else { return };
        let _ = f.classify();
        let marker = Marker::for_group("fuzz.so", 0, "lib/fuzz.so").encode();
        if let Ok(p) = elf::plan(v, &f, &marker) {
            common::check_layout(&p.layout, v);
        }
    });
    assert!(n > 0);
}

/// Runs `check` on each file of `dir` (a test_assets path) whose name
/// passes `keep`: the fuzzers' seeds (core/fuzz/seed.sh), real inputs that
/// must stay accepted.
fn seeds(dir: &str, keep: impl Fn(&str) -> bool, check: impl Fn(&str, &Vec<u8>)) -> usize {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../test_assets").join(dir);
    let mut paths: Vec<PathBuf> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| keep(&p.file_name().unwrap().to_string_lossy())).collect();
    paths.sort();
    for path in &paths {
        check(&path.file_name().unwrap().to_string_lossy(), &std::fs::read(path).unwrap());
    }
    paths.len()
}

fn pe_check(v: &Vec<u8>) -> Option<usize> {
    let Ok(pe) = PeFile::parse(v) else { return None };
    let _ = pe.classify();
    let marker = Marker::for_group("fuzz.dll", 0, "bin/fuzz.dll").encode();
    let p = pe::plan(v, &pe, &marker).ok()?;
    common::check_layout(&p.layout, v);
    Some(p.layout.len() as usize)
}

#[test]
fn pe_plan_regressions() {
    // No crasher has been kept for pe_plan yet; its seeds are replayed
    // instead: the real hipcc-built PE files must plan, and their plans
    // meet the serving invariants (a planner that refused them, or broke a
    // layout, fails here).
    replay("pe_plan", |v| {
        let _ = pe_check(v);
    });
    let n = seeds(
        "bin",
        |n| n.ends_with(".dll") || n.ends_with(".exe"),
        |name, v| {
            assert!(pe_check(v).is_some(), "{name}: a fat PE seed does not plan");
        },
    );
    assert!(n >= 4, "{n} PE seeds");
    // The kpack'd PE vector is no longer fat: parsed, not planned.
    let k = seeds("vectors/generated-golden/pe", |n| n.ends_with(".kpacked"), |name, v| assert!(pe_check(v).is_none(), "{name}: planned twice"));
    assert_eq!(k, 1);
}

/// The fuzz target's invariant: a `none` blob comes back at its stated
/// size. Returns how many entries were extracted.
fn kpack_check(v: &[u8]) -> Result<usize, String> {
    // The reader works on a Vec (its ReadAt implementation).
    let v = v.to_vec();
    let a = Archive::open(&v).map_err(|e| e.to_string())?;
    let mut n = 0;
    for (key, archs) in &a.toc.toc {
        for (arch, e) in archs {
            if e.original_size <= 1 << 24 {
                if let Ok(k) = a.get_kernel(&v, key, arch) {
                    if let Scheme::None { blobs } = &a.toc.scheme {
                        assert_eq!(Some(k.len() as u64), blobs.get(e.ordinal as usize).map(|b| b.1), "{key} {arch}");
                    }
                    assert_eq!(k.len() as u64, e.original_size, "{key} {arch}: not its original size");
                    n += 1;
                }
            }
        }
    }
    Ok(n)
}

#[test]
fn kpack_regressions() {
    // The one kept crasher names one arch twice under a key: the listing
    // and the lookup disagreed, so such a TOC is refused.
    let n = replay("kpack", |v| {
        let r = kpack_check(v);
        assert!(r.as_ref().is_err_and(|e| e.contains("twice") || e.contains("duplicate")), "dup-arch-in-toc: {r:?}");
    });
    assert_eq!(n, 1);
    // Seeds: the upstream and reference archives open, and every entry
    // extracts at its size.
    let n = seeds(
        "vectors/upstream-kpack",
        |n| n.ends_with(".kpack"),
        |name, v| {
            let r = kpack_check(v);
            assert!(r.as_ref().is_ok_and(|n| *n > 0), "{name}: {r:?}");
        },
    );
    let m = seeds(
        "vectors/generated-golden/kpack",
        |n| n.ends_with(".kpack"),
        |name, v| {
            let r = kpack_check(v);
            assert!(r.as_ref().is_ok_and(|n| *n > 0), "{name}: {r:?}");
        },
    );
    assert_eq!((n, m), (2, 4));
}
