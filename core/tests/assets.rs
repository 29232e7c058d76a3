//! The engine against the committed test assets: every code object our
//! parser finds equals what clang-offload-bundler extracted (the oracle in
//! test_assets/expected), every planned file reads the same through random
//! `read_at` ranges as materialized, and the deliberate deviations from the
//! reference (B1, B4) are applied where they must be.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use common::{assets, read};
use kpackfs_core::formats::bundle;
use kpackfs_core::formats::bundle::ccob::Uncached;
use kpackfs_core::formats::elf::{self, Deviation, ElfFile};
use kpackfs_core::formats::marker::Marker;
use kpackfs_core::formats::target::Selection;
use kpackfs_core::view::{ArchiveNaming, NodeType, View, ViewConfig, ROOT_INO};
use proptest::prelude::*;

const FAT: &[&str] = &[
    "libmulti.so",
    "libtwo.so",
    "app_pie",
    "app_nopie",
    "librdc.so",
    "librelr.so",
    "libpage.so",
    "hip_one.dll",
    "hip_two.dll",
    "hip_app.exe",
    "hip_cert.dll",
    "hip_dbg.dll",
];

/// index.tsv rows: (bundle index, arch, file).
fn expected_index(bin: &str) -> Vec<(usize, String, PathBuf)> {
    let dir = assets().join("expected").join(bin);
    let text = fs::read_to_string(dir.join("index.tsv")).unwrap();
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[0].parse().unwrap(), f[2].to_string(), dir.join(f[5]))
        })
        .collect()
}

#[test]
fn every_assets_code_objects_equal_clang_offload_bundlers() {
    for bin in FAT {
        let data = read(assets().join("bin").join(bin));
        let (off, size) = match ElfFile::parse(&data) {
            Ok(f) => f.fatbin().map(|s| (s.offset, s.size)).unwrap(),
            Err(_) => kpackfs_core::formats::host::fat_section(&data).unwrap(),
        };
        let objs = bundle::fatbin_objects(&data, off, off + size).unwrap();
        let want = expected_index(bin);
        assert_eq!(objs.len(), want.len(), "{bin}");
        let mut got: Vec<(usize, String, Vec<u8>)> =
            objs.iter().map(|o| (o.chunk_index, o.arch.clone(), bundle::read_object(&data, &o.location).unwrap())).collect();
        let mut exp: Vec<(usize, String, Vec<u8>)> = want.iter().map(|(i, a, p)| (*i, a.clone(), read(p))).collect();
        got.sort();
        exp.sort();
        assert!(got == exp, "{bin}: code objects differ from clang-offload-bundler's");
    }
    // The host-only library has no fat section at all.
    let host = read(assets().join("bin/libhost.so"));
    assert!(ElfFile::parse(&host).unwrap().fatbin().is_none());
}

#[test]
fn planner_applies_the_documented_deviations() {
    let plan = |bin: &str| {
        let data = read(assets().join("bin").join(bin));
        let f = ElfFile::parse(&data).unwrap();
        elf::plan(&data, &f, &Marker::for_group(bin, 0, bin).encode()).unwrap()
    };
    assert_eq!(plan("app_nopie").deviations, [Deviation::NonPiePointer, Deviation::OldKernelPhdrs]);
    assert_eq!(plan("app_pie").deviations, [Deviation::OldKernelPhdrs]);
    assert_eq!(plan("librelr.so").deviations, [Deviation::ImplicitAddend]);
    for bin in ["libmulti.so", "libtwo.so", "librdc.so", "libpage.so"] {
        assert!(plan(bin).deviations.is_empty(), "{bin}");
    }
    // RDC: two wrappers, one device-linked bundle; both point at it.
    let p = plan("librdc.so");
    assert_eq!(p.wrappers.len(), 2);
    assert!(p.wrappers.iter().all(|w| w.fatbin_offset(&p.fatbin) == Some(0)));
    // RELR: the in-place pointer is the marker's address (the loader adds
    // the base), where the reference would leave 0.
    let data = read(assets().join("bin/librelr.so"));
    let p = plan("librelr.so");
    let out = p.layout.materialize(&data, &Uncached).unwrap();
    let f = ElfFile::parse(&out).unwrap();
    let seg = f.shdrs[f.find_section(elf::WRAPPER_SECTION).unwrap()];
    for i in 0..2u64 {
        let off = (seg.offset + 24 * i + 8) as usize;
        assert_eq!(u64::from_le_bytes(out[off..off + 8].try_into().unwrap()), p.marker_vaddr);
    }
}

/// Every file of every view of the assets, read whole.
fn views() -> Vec<(String, View)> {
    let mut out = Vec::new();
    let bins = assets().join("bin");
    for src in [assets().join("demo-install"), bins] {
        for (arch, naming) in [("gfx90a", ArchiveNaming::TargetId), ("gfx90a:xnack-,gfx1030", ArchiveNaming::TargetId), ("gfx90a", ArchiveNaming::Processor)] {
            let cfg = ViewConfig {
                source: src.clone(),
                selection: Selection::parse(arch).unwrap(),
                cache_bytes: 1 << 20,
                naming,
                compression: Default::default(),
                db_rules: Default::default(),
            };
            out.push((format!("{} {arch} {naming:?}", src.display()), View::new(cfg).unwrap()));
        }
    }
    out
}

fn files(v: &View) -> Vec<(u64, PathBuf)> {
    let mut out = Vec::new();
    let mut stack = vec![(ROOT_INO, PathBuf::new())];
    while let Some((ino, rel)) = stack.pop() {
        for e in v.readdir(ino).unwrap() {
            let p = rel.join(&e.name);
            // A listing shows numbers; `lookup` makes one usable (as the
            // kernel does before any getattr or open).
            let ino = v.lookup(ino, &e.name).unwrap().ino;
            assert_eq!(ino, e.ino, "{}: listing and lookup disagree", p.display());
            match e.kind {
                NodeType::Dir => stack.push((ino, p)),
                NodeType::File => out.push((ino, p)),
                NodeType::Symlink => {}
            }
        }
    }
    out
}

#[test]
fn read_at_matches_materialized_bytes_for_every_planned_file() {
    let mut cases: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let all = views();
    for (name, v) in &all {
        for (ino, p) in files(v) {
            let f = v.open(ino).unwrap();
            let whole = f.layout().expect("extents").materialize(f.source_file(), &f.blob_store()).unwrap();
            assert_eq!(whole.len() as u64, v.getattr(ino).unwrap().size, "{name}: {}: stat size", p.display());
            cases.insert(format!("{name} {}", p.display()), whole);
        }
    }
    assert!(cases.len() > 40, "{}", cases.len());
    let all = std::sync::Arc::new(all);
    let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config { cases: 256, ..Default::default() });
    runner
        .run(&(0usize..1000, any::<u64>(), 0usize..70_000), |(which, off, len)| {
            let (name, v) = &all[which % all.len()];
            let fl = files(v);
            let (ino, p) = &fl[which % fl.len()];
            let want = &cases[&format!("{name} {}", p.display())];
            let off = off % (want.len() as u64 + 100);
            let f = v.open(*ino).unwrap();
            let mut buf = vec![0xA5u8; len];
            let n = f.read_at(off, &mut buf).unwrap();
            let s = (off as usize).min(want.len());
            let e = (off as usize).saturating_add(len).min(want.len());
            prop_assert_eq!(&buf[..n], &want[s..e]);
            Ok(())
        })
        .unwrap();
}

#[test]
fn baked_archives_are_served_lazily() {
    // A synthesized archive of an uncompressed binary is header + source
    // ranges + TOC: it owns only a few hundred bytes.
    let cfg = ViewConfig {
        source: assets().join("bin"),
        selection: Selection::parse("gfx1030").unwrap(),
        cache_bytes: 0,
        naming: ArchiveNaming::TargetId,
        compression: Default::default(),
        db_rules: Default::default(),
    };
    let v = View::new(cfg).unwrap();
    let f = v.open_path(Path::new(".kpack/libtwo.so_gfx1030.kpack")).unwrap();
    let owned = f.layout().expect("extents").owned_bytes();
    assert!(owned < 1024 && f.len() > 7000, "owned {owned} of {}", f.len());
}
