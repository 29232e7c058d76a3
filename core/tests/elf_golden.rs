//! The ELF planner against the reference tool's output: every `.kpacked`
//! golden reproduced byte for byte from its input and marker values
//! (test_assets/vectors/README.md), the non-PIE one with the B1 fix, the
//! executables with their program header table where old kernels look.

mod common;

use common::{read, vectors};
use kpackfs_core::formats::bundle::ccob::Uncached;
use kpackfs_core::formats::elf::{self, Deviation, ElfFile};
use kpackfs_core::formats::marker::Marker;

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

/// One program header: (type, offset, vaddr, paddr, filesz, memsz).
type Ph = (u32, u64, u64, u64, u64, u64);

/// `e_phoff` and the program headers as `object` (not the planner's own
/// parser) reads them.
fn program_headers(b: &[u8]) -> (u64, Vec<Ph>) {
    use object::elf::FileHeader64;
    use object::read::elf::{FileHeader, ProgramHeader};
    use object::LittleEndian as LE;
    let h = FileHeader64::<LE>::parse(b).unwrap();
    let ph = h.program_headers(LE, b).unwrap();
    let v = ph.iter().map(|p| (p.p_type(LE).0, p.p_offset(LE), p.p_vaddr(LE), p.p_paddr(LE), p.p_filesz(LE), p.p_memsz(LE))).collect();
    (h.e_phoff.get(LE), v)
}

/// An executable against the reference's output, which maps its relocated
/// program header table where only kernels from 5.18 on find it. Ours must
/// satisfy the rule of older kernels (`AT_PHDR` = first PT_LOAD's
/// `p_vaddr - p_offset` + `e_phoff`, from Linux 4.18's binfmt_elf.c), differ
/// from the reference only in `e_phoff` and the table's two headers, and
/// otherwise be the reference's bytes followed by zeros and the table.
/// Returns the other differing offsets (callers expect none or B1's).
fn exec_against_reference(out: &[u8], want: &[u8]) -> Vec<usize> {
    const PT_LOAD: u32 = 1;
    const PT_PHDR: u32 = 6;
    let (phoff, ours) = program_headers(out);
    let (ref_phoff, theirs) = program_headers(want);
    assert_ne!(phoff, ref_phoff, "the table was expected to move");
    let first = ours.iter().find(|p| p.0 == PT_LOAD).unwrap();
    let old_kernel_at_phdr = first.2 - first.1 + phoff;
    let table = ours.iter().find(|p| p.0 == PT_PHDR).unwrap();
    assert_eq!((table.1, table.2, table.3), (phoff, old_kernel_at_phdr, old_kernel_at_phdr), "PT_PHDR");
    let seg = ours.iter().find(|p| p.0 == PT_LOAD && p.1 == phoff).expect("a PT_LOAD maps the table");
    assert_eq!((seg.2, seg.3, seg.4), (old_kernel_at_phdr, old_kernel_at_phdr, table.4));
    // Above every other segment: nothing else is mapped over it.
    for p in ours.iter().filter(|p| p.0 == PT_LOAD && p.1 != phoff) {
        assert!(p.2 + p.5 <= old_kernel_at_phdr, "{p:x?} overlaps the table at {old_kernel_at_phdr:#x}");
    }
    assert_eq!(ours.len(), theirs.len());
    for (a, b) in ours.iter().zip(&theirs) {
        if b.1 == ref_phoff && (b.0 == PT_PHDR || b.0 == PT_LOAD) {
            assert_eq!((a.0, a.4, a.5), (b.0, b.4, b.5), "only the table's place changes");
        } else {
            assert_eq!(a, b);
        }
    }
    // The reference's bytes (except e_phoff), zeros, the table.
    assert!(out.len() as u64 >= phoff + table.4);
    assert!(out[want.len()..phoff as usize].iter().all(|&b| b == 0));
    assert_eq!(out.len() as u64, phoff + table.4);
    (0..want.len()).filter(|&i| out[i] != want[i] && !(0x20..0x28).contains(&i)).collect()
}

fn check_exec(rel_in: &str, rel_out: &str, search: &str, kernel_name: &str) {
    let g = vectors().join("generated-golden");
    let (out, plan) = transform(&read(g.join(rel_in)), search, kernel_name);
    assert_eq!(plan.deviations, [Deviation::OldKernelPhdrs], "{rel_in}");
    assert_eq!(exec_against_reference(&out, &read(g.join(rel_out))), Vec::<usize>::new(), "{rel_in}");
}

#[test]
fn app_pie() {
    check_exec("elf/app_pie", "elf/app_pie.kpacked", "../.kpack/test_@GFXARCH@.kpack", "lib/app_pie");
}

#[test]
fn splitter_outputs() {
    check("elf/libk2.so", "kpack/split_libk2.so", "../.kpack/test_lib_@GFXARCH@.kpack", "stage/lib/libk2.so");
    check_exec("elf/app_pie", "kpack/split_app_pie", "../.kpack/test_lib_@GFXARCH@.kpack", "stage/bin/app_pie");
}

#[test]
fn app_nopie_with_b1_fix() {
    let g = vectors().join("generated-golden");
    let input = read(g.join("elf/app_nopie"));
    let want = read(g.join("elf/app_nopie.kpacked"));
    let (out, plan) = transform(&input, "../.kpack/test_@GFXARCH@.kpack", "lib/app_nopie");
    assert_eq!(plan.deviations, [Deviation::NonPiePointer, Deviation::OldKernelPhdrs]);
    // Apart from the table's place: each wrapper's pointer is the marker's
    // address instead of 0.
    let diff = exec_against_reference(&out, &want);
    assert!(!diff.is_empty() && diff.len() <= 8, "{diff:x?}");
    let w = diff[0] - diff[0] % 8;
    assert_eq!(&want[w..w + 8], &[0u8; 8]);
    assert_eq!(u64::from_le_bytes(out[w..w + 8].try_into().unwrap()), plan.marker_vaddr);
    assert_eq!(&out[w - 8..w - 4], b"HIPK");
    // Without a relocation the wrapper's target is its in-place pointer:
    // 0x403000, the start of `.hip_fatbin` (readelf -x .hipFatBinSegment;
    // readelf -S: .hip_fatbin at 0x403000, 0x2189 bytes).
    assert_eq!(plan.wrappers.len(), 1);
    assert_eq!(plan.wrappers[0].target, Some(0x403000));
    assert_eq!((plan.fatbin.addr, plan.fatbin.size), (0x403000, 0x2189));
    assert_eq!(plan.wrappers[0].fatbin_offset(&plan.fatbin), Some(0));
}

/// A wrapper's bundle is inside `.hip_fatbin` or nowhere: targets from the
/// section's first byte to its last give their offset, any other none.
#[test]
fn wrapper_targets_inside_the_fat_section_only() {
    let fatbin = elf::Shdr { addr: 0x403000, size: 0x2189, ..Default::default() };
    let at = |t: Option<u64>| elf::WrapperInfo { index: 0, target: t, already_kpacked: false }.fatbin_offset(&fatbin);
    let cases = [
        (None, None),
        (Some(0), None),
        (Some(0x402fff), None),
        (Some(0x403000), Some(0)),
        (Some(0x405188), Some(0x2188)),
        (Some(0x405189), None),
        (Some(u64::MAX), None),
    ];
    for (target, want) in cases {
        assert_eq!(at(target), want, "{target:x?}");
    }
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

/// The check `inspect` (and `verify`) run: the reference's executables
/// break the old kernels' rule, ours and the linker's originals keep it,
/// shared libraries are not judged.
#[test]
fn old_kernel_rule_is_reported() {
    let g = vectors().join("generated-golden");
    let mismatch = |b: &[u8]| ElfFile::parse(&b.to_vec()).unwrap().old_kernel_phdr_mismatch();
    assert_eq!(mismatch(&read(g.join("elf/app_pie.kpacked"))), Some((0x8000, 0xd000)));
    assert_eq!(mismatch(&read(g.join("elf/app_nopie.kpacked"))), Some((0x408000, 0x40a000)));
    for f in ["elf/app_pie", "elf/app_nopie", "elf/libk.so.kpacked", "elf/libk2.so.kpacked"] {
        assert_eq!(mismatch(&read(g.join(f))), None, "{f}");
    }
    for (f, name) in [("elf/app_pie", "lib/app_pie"), ("elf/app_nopie", "lib/app_nopie")] {
        let (out, _) = transform(&read(g.join(f)), "../.kpack/test_@GFXARCH@.kpack", name);
        assert_eq!(mismatch(&out), None, "{f} transformed");
    }
}

/// The probe's shortcut for GPU code objects (device code, never a host
/// binary): clang-offload-bundler's objects of test_assets/expected are
/// recognised from their first bytes; host libraries, fat or not, are not,
/// and the fat one still probes as fat.
#[test]
fn probes_stop_at_device_code() {
    use kpackfs_core::formats::host::{probe_class, Probe};
    let a = common::assets();
    for co in ["gfx1030.co", "gfx906.co", "gfx90a_xnack+.co", "gfx90a_xnack-.co"] {
        let b = read(a.join("expected/libmulti.so/0").join(co));
        assert!(elf::is_device_code(&b[..elf::IDENT_LEN]), "{co}");
        assert_eq!(probe_class(&b).unwrap(), Probe::Plain, "{co}");
    }
    for (lib, want) in [("bin/libhost.so", Probe::Plain), ("bin/libmulti.so", Probe::Fat)] {
        let b = read(a.join(lib));
        assert!(!elf::is_device_code(&b[..elf::IDENT_LEN]), "{lib}");
        assert_eq!(probe_class(&b).unwrap(), want, "{lib}");
    }
    assert!(!elf::is_device_code(b"\x7fELF"), "too short to tell");
}

/// The planner's checks of the two HIP sections, each at its edge, on
/// libk.so with one section header field changed. Offsets from
/// `readelf -hS libk.so`: section headers at 30760, 64 bytes each;
/// `.hip_fatbin` is [16] at file offset 0x3000, `.hipFatBinSegment` [26];
/// a header's type is at +4 and its size at +32.
#[test]
fn hip_section_headers_at_their_limits() {
    let g = vectors().join("generated-golden");
    let good = read(g.join("elf/libk.so"));
    let m = Marker { search_paths: vec!["../.kpack/test_@GFXARCH@.kpack".into()], kernel_name: "lib/libk.so".into() };
    let with = |section: usize, field: usize, value: &[u8]| {
        let mut d = good.clone();
        let at = 30760 + section * 64 + field;
        d[at..at + value.len()].copy_from_slice(value);
        let file = ElfFile::parse(&d).unwrap();
        elf::plan(&d, &file, &m.encode()).map(|p| p.wrappers.len())
    };
    let refused = |r: Result<usize, elf::ElfError>, why: &str| matches!(&r, Err(elf::ElfError::Corrupt(w)) if w.contains(why));
    let size = |n: u64| n.to_le_bytes();
    assert_eq!(with(26, 32, &size(24)).unwrap(), 1);
    // Wrappers are 24 bytes each, at most 2^20 of them.
    assert!(refused(with(26, 32, &size(23)), "not a whole number of wrappers"));
    assert!(refused(with(26, 32, &size(24 * ((1 << 20) + 1))), "not a whole number of wrappers"));
    let at_max = with(26, 32, &size(24 << 20));
    assert!(at_max.is_err() && !refused(at_max, "not a whole number of wrappers"), "2^20 wrappers pass the size check");
    // .hip_fatbin must have its bytes in the file: not NOBITS, not past EOF.
    assert!(refused(with(16, 4, &8u32.to_le_bytes()), "no bytes in the file"));
    let to_eof = good.len() as u64 - 0x3000;
    assert!(!refused(with(16, 32, &size(to_eof)), "no bytes in the file"));
    assert!(refused(with(16, 32, &size(to_eof + 1)), "no bytes in the file"));
}

/// Where the marker is mapped (FORMATS.md §3, steps A-B), in the two cases
/// the goldens do not reach: a file ending on a page boundary maps the
/// marker where step A appended it (no second copy), and with a
/// `.hip_fatbin` of less than a page (nothing zero-paged, so the section
/// header table is not written again) the marker's section header still
/// says where it is mapped.
#[test]
fn marker_mapping_edges() {
    let g = vectors().join("generated-golden");
    let libk = read(g.join("elf/libk.so"));
    let m = Marker { search_paths: vec!["../.kpack/test_@GFXARCH@.kpack".into()], kernel_name: "lib/libk.so".into() }.encode();
    let marker_of = |out: &[u8]| {
        let f = ElfFile::parse(&out.to_vec()).unwrap();
        assert_eq!(f.shdrs[0], elf::Shdr::default(), "section 0 stays the null section");
        f.shdrs[f.find_section(elf::MARKER_SECTION).unwrap()]
    };
    // libk.so padded to 10 pages (the marker's address is 0x9000, another
    // page): the marker stays at 40960, which becomes 28672 once
    // .hip_fatbin's three whole pages (0x3000-0x6000 of 0x3000+0x3189) are
    // taken out of the file.
    let mut padded = libk.clone();
    padded.resize(10 * 4096, 0);
    let (out, plan) = transform(&padded, "../.kpack/test_@GFXARCH@.kpack", "lib/libk.so");
    let s = marker_of(&out);
    assert_eq!((s.offset, s.addr, s.size), (28672, plan.marker_vaddr, m.len() as u64));
    assert_eq!(&out[28672..28672 + m.len()], &m[..]);
    assert_eq!(out.windows(m.len()).filter(|w| *w == &m[..]).count(), 1, "one copy of the marker");
    // .hip_fatbin cut to 0x100 bytes (section [16], size at +32; see
    // hip_section_headers_at_their_limits).
    let mut small = libk.clone();
    let at = 30760 + 16 * 64 + 32;
    small[at..at + 8].copy_from_slice(&0x100u64.to_le_bytes());
    let (out, plan) = transform(&small, "../.kpack/test_@GFXARCH@.kpack", "lib/libk.so");
    let s = marker_of(&out);
    assert_ne!(s.flags & 2, 0, "SHF_ALLOC");
    assert_eq!((s.addr, s.size), (plan.marker_vaddr, m.len() as u64));
    assert_eq!(&out[s.offset as usize..(s.offset as usize + m.len())], &m[..]);
}

/// Step E, widened (FORMATS.md §3): once the wrappers point at the marker,
/// no relocation may still point into `.hip_fatbin` (0x3000, 0x3189 bytes
/// in libk.so): a RELATIVE addend, or a symbol's value plus addend
/// (R_X86_64_64), at the section's first and last byte is refused, one
/// byte outside is not. From `readelf -rS libk.so`: `.rela.dyn` at 0x628,
/// 24-byte entries, the addend at +16; entry 3 is RELATIVE (__dso_handle),
/// entry 5 R_X86_64_64 of a symbol valued 0x1170.
#[test]
fn relocations_into_the_fat_section_are_refused() {
    let g = vectors().join("generated-golden");
    let good = read(g.join("elf/libk.so"));
    let m = Marker { search_paths: vec!["../.kpack/test_@GFXARCH@.kpack".into()], kernel_name: "lib/libk.so".into() }.encode();
    let refused = |entry: usize, addend: u64| {
        let mut d = good.clone();
        let at = 0x628 + entry * 24 + 16;
        d[at..at + 8].copy_from_slice(&addend.to_le_bytes());
        let file = ElfFile::parse(&d).unwrap();
        match elf::plan(&d, &file, &m) {
            Ok(_) => false,
            Err(elf::ElfError::Corrupt(w)) if w.contains("still points into .hip_fatbin") => true,
            Err(e) => panic!("entry {entry} addend {addend:#x}: {e}"),
        }
    };
    for (target, inside) in [(0x2fffu64, false), (0x3000, true), (0x6188, true), (0x6189, false)] {
        assert_eq!(refused(3, target), inside, "RELATIVE {target:#x}");
        assert_eq!(refused(5, target - 0x1170), inside, "R_X86_64_64 to {target:#x}");
    }
}

/// The memory image a loader makes of `b` (its PT_LOAD segments; the first
/// that covers an address decides), `None` where nothing is mapped.
fn image_byte(f: &ElfFile, b: &[u8], a: u64) -> Option<u8> {
    let p = f.phdrs.iter().find(|p| p.p_type == 1 && a >= p.vaddr && a < p.vaddr + p.memsz)?;
    let rel = a - p.vaddr;
    Some(if rel < p.filesz { b[(p.offset + rel) as usize] } else { 0 })
}

/// Step F (FORMATS.md §3.7) keeps the memory image: `.hip_fatbin` from its
/// first whole page to its end reads as zeros (the whole pages leave the
/// file, the tail is zero-fill too), every other mapped byte of the input is
/// where it was, with the value it had — apart from what steps A-D change
/// (the headers, the wrapper and its relocation). libk.so as built
/// (`.hip_fatbin` at 0x3000, page-aligned) and with the section moved to
/// 0x3010 (its section header only), which leaves a partial page before
/// the zero-paged ones.
#[test]
fn zero_paging_keeps_the_memory_image() {
    let g = vectors().join("generated-golden");
    let libk = read(g.join("elf/libk.so"));
    let mut moved = libk.clone();
    let at = 30760 + 16 * 64;
    for (field, v) in [(16, 0x3010u64), (24, 0x3010), (32, 0x3179)] {
        moved[at + field..at + field + 8].copy_from_slice(&v.to_le_bytes());
    }
    for (input, zeroed) in [(&libk, 0x3000..0x6189u64), (&moved, 0x4000..0x6189)] {
        let (out, _) = transform(input, "../.kpack/test_@GFXARCH@.kpack", "lib/libk.so");
        let (fi, fo) = (ElfFile::parse(input).unwrap(), ElfFile::parse(&out).unwrap());
        // Changed on purpose: the file and program headers, the wrapper
        // (.hipFatBinSegment, 0x8040) and its RELA entry (.rela.dyn [4]).
        let changed = |a: u64| a < 0x40 + 56 * 12 || (0x8040..0x8058).contains(&a) || (0x628 + 4 * 24..0x628 + 5 * 24).contains(&a);
        for p in fi.phdrs.iter().filter(|p| p.p_type == 1) {
            for a in p.vaddr..p.vaddr + p.memsz {
                let want = if zeroed.contains(&a) { Some(0) } else { image_byte(&fi, input, a) };
                if !changed(a) {
                    assert_eq!(image_byte(&fo, &out, a), want, "{a:#x}, zero-paged {zeroed:x?}");
                }
            }
        }
    }
}
