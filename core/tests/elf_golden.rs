//! The ELF planner against the reference tool's output: every `.kpacked`
//! golden reproduced byte for byte from its input and marker values
//! (test_assets/vectors/README.md), the non-PIE one with the B1 fix.

mod common;

use common::{read, vectors};
use kpackfs_core::elf::{self, Deviation, ElfFile};
use kpackfs_core::layout::Uncached;
use kpackfs_core::marker::Marker;

fn transform(input: &[u8], search: &str, kernel_name: &str) -> (Vec<u8>, elf::ElfPlan) {
    let src = input.to_vec();
    let m = Marker { search_paths: vec![search.into()], kernel_name: kernel_name.into() };
    let file = ElfFile::parse(&src).unwrap();
    let plan = elf::plan(&src, &file, &m.encode()).unwrap();
    let out = plan.layout.materialize(&src, &Uncached).unwrap();
    assert_eq!(out.len() as u64, plan.layout.len());
    (out, plan)
}

fn check(rel_in: &str, rel_out: &str, search: &str, kernel_name: &str) -> elf::ElfPlan {
    let g = vectors().join("generated-golden");
    let input = read(g.join(rel_in));
    let want = read(g.join(rel_out));
    let (out, plan) = transform(&input, search, kernel_name);
    if out != want {
        let first = out.iter().zip(&want).position(|(a, b)| a != b);
        panic!("{rel_in}: output differs (len {} vs {}, first difference at {first:x?})", out.len(), want.len());
    }
    assert!(plan.deviations.is_empty(), "{rel_in}: {:?}", plan.deviations);
    // The plan is a handful of extents, not a copy.
    assert!(plan.layout.extents().len() < 40, "{rel_in}: {} extents", plan.layout.extents().len());
    plan
}

#[test]
fn libk() {
    let plan = check("elf/libk.so", "elf/libk.so.kpacked", "../.kpack/test_@GFXARCH@.kpack", "lib/libk.so");
    assert_eq!(plan.marker_vaddr, 0x9000);
    assert_eq!(plan.wrappers.len(), 1);
    assert_eq!(plan.wrappers[0].fatbin_offset(&plan.fatbin), Some(0));
}

#[test]
fn libk2_two_wrappers() {
    let plan = check("elf/libk2.so", "elf/libk2.so.kpacked", "../.kpack/test_@GFXARCH@.kpack", "lib/libk2.so");
    assert_eq!(plan.wrappers.len(), 2);
    // FORMATS.md §8.2: both RELA addends pointed into the fat section, one
    // per bundle.
    let offs: Vec<_> = plan.wrappers.iter().map(|w| w.fatbin_offset(&plan.fatbin)).collect();
    assert_eq!(offs[0], Some(0));
    assert!(offs[1].unwrap() > 0);
}

#[test]
fn libk2_page_aligned_fatbin() {
    check("elf/libk2_pa.so", "elf/libk2_pa.so.kpacked", "../.kpack/t_@GFXARCH@.kpack", "lib/libk2_pa.so");
}

#[test]
fn app_pie() {
    check("elf/app_pie", "elf/app_pie.kpacked", "../.kpack/test_@GFXARCH@.kpack", "lib/app_pie");
}

#[test]
fn splitter_outputs() {
    check("elf/libk2.so", "kpack/split_libk2.so", "../.kpack/test_lib_@GFXARCH@.kpack", "stage/lib/libk2.so");
    check("elf/app_pie", "kpack/split_app_pie", "../.kpack/test_lib_@GFXARCH@.kpack", "stage/bin/app_pie");
}

#[test]
fn app_nopie_with_b1_fix() {
    let g = vectors().join("generated-golden");
    let input = read(g.join("elf/app_nopie"));
    let want = read(g.join("elf/app_nopie.kpacked"));
    let (out, plan) = transform(&input, "../.kpack/test_@GFXARCH@.kpack", "lib/app_nopie");
    assert_eq!(plan.deviations, [Deviation::NonPiePointer]);
    assert_eq!(out.len(), want.len());
    // The only difference from the reference: each wrapper's pointer is the
    // marker's address instead of 0.
    let diff: Vec<usize> = (0..out.len()).filter(|&i| out[i] != want[i]).collect();
    assert!(!diff.is_empty() && diff.len() <= 8, "{diff:x?}");
    let w = diff[0] - diff[0] % 8;
    assert_eq!(&want[w..w + 8], &[0u8; 8]);
    assert_eq!(u64::from_le_bytes(out[w..w + 8].try_into().unwrap()), plan.marker_vaddr);
    assert_eq!(&out[w - 8..w - 4], b"HIPK");
}

#[test]
fn not_fat_and_already_kpacked_pass_through() {
    let g = vectors().join("generated-golden");
    let out = read(g.join("elf/libk.so.kpacked"));
    let f = ElfFile::parse(&out).unwrap();
    assert!(matches!(f.classify(), Err(elf::ElfError::AlreadyKpacked)));
    let dll = read(g.join("pe/w.dll"));
    assert!(matches!(ElfFile::parse(&dll), Err(elf::ElfError::NotElf)));
}
