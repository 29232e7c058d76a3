//! How a wrapper's pointer is relocated decides its target and what step D
//! writes (docs/host-binaries.md §5.5-5.6, deviation B4), and step E reads
//! in-place relocated words through a window. The assets' relocations are
//! quoted from `readelf -rW`, their wrappers from `xxd`.

use super::*;
use crate::formats::bundle::ccob::Uncached;

fn asset(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/../test_assets/bin/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn transformed(data: &[u8], name: &str) -> (ElfPlan, Vec<u8>) {
    let src = data.to_vec();
    let marker = crate::formats::marker::Marker::for_group(name, 0, &format!("lib/{name}")).encode();
    let plan = plan(&src, &ElfFile::parse(&src).unwrap(), &marker).unwrap();
    let out = plan.layout.materialize(&src, &Uncached).unwrap();
    (plan, out)
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

/// librdc.so (`-fgpu-rdc`): both wrappers (slots 0x9050, 0x9068) are
/// relocated by `R_X86_64_64 __hip_fatbin + 0`, the symbol valued 0x3000,
/// so both target 0x3000. In `.rela.dyn` (at 0x7a0, before the removed
/// pages [0x3000, 0x7000)) they are entries 13 and 14, after 5 RELATIVE,
/// 2 R_X86_64_64 and 6 GLOB_DAT: both become RELATIVE with the marker's
/// address, and the in-file pointers (wrappers at file 0x8048, 0x8060,
/// now 0x4000 lower) 0 as in the reference.
#[test]
fn a_wrapper_relocated_through_a_symbol_targets_its_value() {
    let (plan, out) = transformed(&asset("librdc.so"), "librdc.so");
    let targets: Vec<_> = plan.wrappers.iter().map(|w| w.target).collect();
    assert_eq!(targets, [Some(0x3000), Some(0x3000)]);
    assert!(plan.deviations.is_empty(), "{:?}", plan.deviations);
    for (entry, slot) in [(13usize, 0x9050u64), (14, 0x9068)] {
        let at = 0x7a0 + entry * 24;
        assert_eq!((u64_at(&out, at), u64_at(&out, at + 8), u64_at(&out, at + 16)), (slot, 8, plan.marker_vaddr), "entry {entry}");
    }
    for at in [0x4048, 0x4060] {
        assert_eq!(&out[at..at + 4], b"HIPK");
        assert_eq!(u64_at(&out, at + 8), 0, "wrapper at {at:#x}");
    }
}

/// librelr.so: the wrappers' slots (0xc050, 0xc068) are relocated by
/// `.relr.dyn` only (its third word, 0x2500000001, covers 0xc040, 0xc050,
/// 0xc068), so the loader adds the base to the in-place value: B4 keeps
/// the marker's address there. `.hip_fatbin` [0x3000, 0xa1d9) loses
/// 0x7000 bytes at 0x3000, so the wrappers (file 0xb048, 0xb060) end up at
/// 0x4048 and 0x4060. Their targets are the in-place values 0x3000 and
/// 0x7000 (`xxd -s 0xb048`).
#[test]
fn a_wrapper_relocated_in_place_keeps_the_marker_address() {
    let data = asset("librelr.so");
    assert_eq!(u64_at(&data, 0x910), 0x2500000001);
    let (plan, out) = transformed(&data, "librelr.so");
    assert_eq!(plan.deviations, [Deviation::ImplicitAddend]);
    let targets: Vec<_> = plan.wrappers.iter().map(|w| w.target).collect();
    assert_eq!(targets, [Some(0x3000), Some(0x7000)]);
    for at in [0x4048, 0x4060] {
        assert_eq!(&out[at..at + 4], b"HIPK");
        assert_eq!(u64_at(&out, at + 8), plan.marker_vaddr, "wrapper at {at:#x}");
    }
    // The same word covering 0xc040 only: nothing relocates the wrappers,
    // so the pointer is cleared as the reference does for any wrapper
    // of a shared library.
    let mut unrelocated = data.clone();
    unrelocated[0x910..0x918].copy_from_slice(&0x100000001u64.to_le_bytes());
    let (plan, out) = transformed(&unrelocated, "librelr.so");
    assert!(plan.deviations.is_empty(), "{:?}", plan.deviations);
    let targets: Vec<_> = plan.wrappers.iter().map(|w| w.target).collect();
    assert_eq!(targets, [Some(0x3000), Some(0x7000)]);
    for at in [0x4048, 0x4060] {
        assert_eq!(&out[at..at + 4], b"HIPK");
        assert_eq!(u64_at(&out, at + 8), 0, "wrapper at {at:#x}");
    }
}

/// Step E reads in-place relocated words through a 64 KiB window from the
/// first one. A word at the window's last 8 bytes, and one starting
/// exactly where the window ends, must both be read (the second with a
/// new window), and so must a first word at file offset 0. File of
/// 0x30000 bytes mapped at address = offset; `.hip_fatbin`
/// [0x20000, 0x21000); words at 0x1000 (pointing at 0x10, harmless),
/// 0x10ff8 and 0x11000.
#[test]
fn step_e_reads_words_across_its_window() {
    let fatbin = Shdr { addr: 0x20000, size: 0x1000, ..Default::default() };
    let check_words = |words: &[u64], victim: u64, value: u64| {
        let mut data = vec![0u8; 0x30000];
        data[0x1000..0x1008].copy_from_slice(&0x10u64.to_le_bytes());
        data[victim as usize..victim as usize + 8].copy_from_slice(&value.to_le_bytes());
        let phdrs = vec![Phdr { p_type: PT_LOAD, flags: PF_R, offset: 0, vaddr: 0, paddr: 0, filesz: 0x30000, memsz: 0x30000, align: PAGE }];
        let eh =
            Ehdr { raw: [0; 64], e_type: ET_DYN, e_machine: EM_X86_64, phoff: 0x40, shoff: 0, phentsize: 56, phnum: 1, shentsize: 64, shnum: 0, shstrndx: 0 };
        let elf = ElfFile { len: 0x30000, eh: eh.clone(), phdrs: phdrs.clone(), shdrs: vec![], shstrtab: vec![] };
        let st = State { src: &data, buf: Layout::passthrough(0x30000), eh, phdrs, shdrs: vec![], deviations: vec![] };
        let implicit = words.iter().copied().collect();
        match check_no_fatbin_pointers(&st, &elf, &[], &implicit, &Default::default(), &fatbin) {
            Ok(()) => None,
            Err(ElfError::Corrupt(why)) => Some(why),
            Err(e) => panic!("{e}"),
        }
    };
    let check = |victim, value| check_words(&[0x1000, 0x10ff8, 0x11000], victim, value);
    assert_eq!(check(0x11000, 0x1fff), None);
    assert_eq!(check(0x11000, 0x20000).as_deref(), Some("pointer at 0x11000 still points into .hip_fatbin"));
    assert_eq!(check(0x10ff8, 0x20fff).as_deref(), Some("pointer at 0x10ff8 still points into .hip_fatbin"));
    assert_eq!(check_words(&[0], 0, 0x20000).as_deref(), Some("pointer at 0x0 still points into .hip_fatbin"));
}

/// An `R_X86_64_64` against symbol 0 resolves to its addend (psABI: S + A,
/// S = 0). librdc.so's `.rela.dyn` entry 5 (file 0x7a0 + 5 * 24, an
/// R_X86_64_64 against a device stub) edited to symbol 0: with an addend
/// inside `.hip_fatbin` [0x3000, 0x7868) the pointer would read zeroed
/// pages after the transform, so the plan is refused; with one outside it
/// (0x1180, the stub's own value) the plan goes ahead.
#[test]
fn an_absolute_relocation_into_the_fat_section_is_refused() {
    let data = asset("librdc.so");
    let at = 0x7a0 + 5 * 24;
    assert_eq!((u64_at(&data, at), u64_at(&data, at + 8)), (0x8d88, 0x11_0000_0001));
    let with = |addend: u64| {
        let mut d = data.clone();
        d[at + 8..at + 16].copy_from_slice(&1u64.to_le_bytes());
        d[at + 16..at + 24].copy_from_slice(&addend.to_le_bytes());
        let marker = crate::formats::marker::Marker::for_group("librdc.so", 0, "lib/librdc.so").encode();
        plan(&d, &ElfFile::parse(&d).unwrap(), &marker).map(|_| ())
    };
    for inside in [0x3000u64, 0x3010, 0x7867] {
        let e = with(inside).expect_err("a pointer into .hip_fatbin was let through");
        assert!(e.to_string().contains("still points into .hip_fatbin"), "{e}");
    }
    for outside in [0x1180u64, 0x2fff, 0x7868] {
        with(outside).unwrap();
    }
}
