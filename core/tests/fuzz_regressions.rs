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

fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions").join(target);
    let Ok(rd) = std::fs::read_dir(&dir) else { return Vec::new() };
    let mut v: Vec<_> = rd.map(|e| e.unwrap().path()).map(|p| (p.clone(), std::fs::read(&p).unwrap())).collect();
    v.sort();
    v
}

#[test]
fn elf_plan_regressions() {
    let all = inputs("elf_plan");
    assert!(!all.is_empty());
    for (path, v) in all {
        eprintln!("{}", path.display());
        let Ok(f) = ElfFile::parse(&v) else { continue };
        let _ = f.classify();
        let marker = Marker::for_group("fuzz.so", 0, "lib/fuzz.so").encode();
        if let Ok(p) = elf::plan(&v, &f, &marker) {
            common::check_layout(&p.layout, &v);
        }
    }
}

#[test]
fn pe_plan_regressions() {
    for (path, v) in inputs("pe_plan") {
        eprintln!("{}", path.display());
        let Ok(pe) = PeFile::parse(&v) else { continue };
        let _ = pe.classify();
        let marker = Marker::for_group("fuzz.dll", 0, "bin/fuzz.dll").encode();
        if let Ok(p) = coff::plan(&v, &pe, &marker) {
            common::check_layout(&p.layout, &v);
        }
    }
}

#[test]
fn kpack_regressions() {
    let all = inputs("kpack");
    assert!(!all.is_empty());
    for (path, v) in all {
        eprintln!("{}", path.display());
        let Ok(a) = Archive::open(&v) else { continue };
        for (key, archs) in &a.toc.toc {
            for (arch, e) in archs {
                if e.original_size <= 1 << 24 {
                    let _ = a.get_kernel(&v, key, arch);
                }
            }
        }
    }
}
