//! Crashers found by the fuzzers (`core/fuzz/regressions/TARGET/`), replayed
//! under `cargo test` — a debug build, so arithmetic overflow panics as it
//! does in the fuzz builds (`cargo fuzz run -a`). Each must be handled: a
//! clean refusal, or a plan that meets the serving invariants.

use std::path::PathBuf;

use kpackfs_core::coff::{self, PeFile};
use kpackfs_core::elf::{self, ElfFile};
use kpackfs_core::kpack::Archive;
use kpackfs_core::marker::Marker;

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

#[test]
fn pe_plan_regressions() {
    replay("pe_plan", |v| {
        let Ok(pe) = PeFile::parse(v) else { return };
        let _ = pe.classify();
        let marker = Marker::for_group("fuzz.dll", 0, "bin/fuzz.dll").encode();
        if let Ok(p) = coff::plan(v, &pe, &marker) {
            common::check_layout(&p.layout, v);
        }
    });
}

#[test]
fn kpack_regressions() {
    let n = replay("kpack", |v| {
        let Ok(a) = Archive::open(v) else { return };
        for (key, archs) in &a.toc.toc {
            for (arch, e) in archs {
                if e.original_size <= 1 << 24 {
                    let _ = a.get_kernel(v, key, arch);
                }
            }
        }
    });
    assert!(n > 0);
}
