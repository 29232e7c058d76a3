//! The PE transform's edits at the edges no golden reaches: debug-directory
//! file pointers behind the dropped pages (test_assets/bin/hip_dbg.dll, its
//! entries as `llvm-readobj-15 --coff-debug-directory` lists them), wrapper
//! targets and relocated pointers at `.hip_fat`'s ends, HIGHLOW base
//! relocations, relocation slots at the end of the layout and step 6's page
//! arithmetic for `.hip_fat` sizes and addresses the assets do not have.
//! Inputs are assets with single header fields patched; every expected
//! value is worked out by hand from the section headers (as
//! test_assets/README.md tabulates them) and the rules of FORMATS.md §4.

mod common;

use common::{assets, read};
use kpackfs_core::formats::bundle::ccob::Uncached;
use kpackfs_core::formats::host::HostPlan;
use kpackfs_core::formats::pe::{self, PeFile};

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

fn put_u32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_le_bytes());
}

/// Optional header of every PE asset (e_lfanew 0x78, + signature and file
/// header) and its section table (+ SizeOfOptionalHeader 0xf0).
const OPT: usize = 0x90;
const SECTIONS: usize = 0x180;

/// Header offset of section `i`.
fn section(i: usize) -> usize {
    SECTIONS + 40 * i
}

/// Offset of data directory `i` in the optional header.
fn dir(i: usize) -> usize {
    OPT + 112 + 8 * i
}

fn asset(name: &str) -> Vec<u8> {
    let b = read(assets().join("bin").join(name));
    assert_eq!((u32_at(&b, 0x3c), u16::from_le_bytes([b[0x78 + 20], b[0x78 + 21]])), (0x78, 0xf0), "{name}: header layout");
    b
}

fn marker() -> Vec<u8> {
    use kpackfs_core::formats::marker::Marker;
    Marker { search_paths: vec!["../.kpack/t_@GFXARCH@.kpack".into()], kernel_name: "bin/t.dll".into() }.encode()
}

fn plan_with(b: &[u8], marker: &[u8]) -> Result<HostPlan, String> {
    let src = b.to_vec();
    PeFile::parse(&src).and_then(|p| pe::plan(&src, &p, marker)).map_err(|e| e.to_string())
}

/// The planner's answer: "ok" or its error.
fn answer(b: &[u8]) -> String {
    plan_with(b, &marker()).map(|_| "ok".to_string()).unwrap_or_else(|e| e)
}

/// The transformed file's bytes.
fn transformed(b: &[u8]) -> Vec<u8> {
    transformed_with(b, &marker())
}

fn transformed_with(b: &[u8], marker: &[u8]) -> Vec<u8> {
    let plan = plan_with(b, marker).unwrap();
    plan.layout.materialize(&b.to_vec(), &Uncached).unwrap()
}

// ---- debug directory (hip_dbg.dll) --------------------------------------

/// hip_dbg.dll's debug directory, `llvm-readobj-15 --coff-debug-directory`:
/// (Type, SizeOfData, AddressOfRawData, PointerToRawData).
const DEBUG_ENTRIES: [(u32, u32, u32, u32); 2] = [(2, 0x24, 0xe060, 0x8060), (16, 0, 0, 0)];
/// `.dbgtail` (section 6): rva 0xe000, raw 0x8000 + 0x200, the file's end.
const DBGTAIL: usize = 0x8000;
/// The transform drops `.hip_fat`'s pages 0x5000..0xc000 (virtual size
/// 0x7219): 0x7000 bytes from file offset 0xa00, so everything from 0x7a00
/// on moves up by 0x7000.
const DROPPED: u32 = 0x7000;

#[test]
fn the_debug_asset_is_what_the_table_assumes() {
    let b = asset("hip_dbg.dll");
    assert_eq!(b.len(), 0x8200);
    assert_eq!(&b[section(6)..section(6) + 8], b".dbgtail");
    assert_eq!(
        [u32_at(&b, section(6) + 8), u32_at(&b, section(6) + 12), u32_at(&b, section(6) + 16), u32_at(&b, section(6) + 20)],
        [0x84, 0xe000, 0x200, 0x8000]
    );
    assert_eq!(&b[section(4)..section(4) + 8], b".hip_fat");
    assert_eq!(
        [u32_at(&b, section(4) + 8), u32_at(&b, section(4) + 12), u32_at(&b, section(4) + 16), u32_at(&b, section(4) + 20)],
        [0x7219, 0x5000, 0x7400, 0xa00]
    );
    assert_eq!((u32_at(&b, dir(6)), u32_at(&b, dir(6) + 4)), (0xe028, 0x38));
    for (k, &(ty, size, rva, ptr)) in DEBUG_ENTRIES.iter().enumerate() {
        let e = DBGTAIL + 0x28 + 28 * k;
        assert_eq!([u32_at(&b, e + 12), u32_at(&b, e + 16), u32_at(&b, e + 20), u32_at(&b, e + 24)], [ty, size, rva, ptr], "entry {k}");
    }
    assert_eq!(&b[0x8060..0x8064], b"RSDS");
}

/// After the transform each debug entry's PointerToRawData finds the bytes
/// it found before (the input's bytes at the input's pointer are the
/// oracle); AddressOfRawData, an RVA, is unchanged; and in `.dbgtail` (now
/// at 0x1000) nothing else changed.
#[test]
fn debug_entries_follow_their_data() {
    let b = asset("hip_dbg.dll");
    let out = transformed(&b);
    let tail = DBGTAIL - DROPPED as usize;
    assert_eq!(u32_at(&out, section(6) + 20), tail as u32, ".dbgtail moved up");
    assert_eq!((u32_at(&out, dir(6)), u32_at(&out, dir(6) + 4)), (0xe028, 0x38), "the directory is an RVA");
    let want_ptr = [0x8060 - DROPPED, 0];
    for (k, &(ty, size, rva, ptr)) in DEBUG_ENTRIES.iter().enumerate() {
        let e = tail + 0x28 + 28 * k;
        assert_eq!([u32_at(&out, e + 12), u32_at(&out, e + 16), u32_at(&out, e + 20), u32_at(&out, e + 24)], [ty, size, rva, want_ptr[k]], "entry {k}");
        let (p_in, p_out, n) = (ptr as usize, want_ptr[k] as usize, size as usize);
        assert!(out[p_out..p_out + n] == b[p_in..p_in + n], "entry {k}: data");
    }
    let field = tail + 0x28 + 24;
    let mut want = b[DBGTAIL..DBGTAIL + 0x200].to_vec();
    put_u32(&mut want, field - tail, 0x8060 - DROPPED);
    assert!(out[tail..tail + 0x200] == want[..], ".dbgtail: only the CodeView pointer changes");
}

/// hip_dbg.dll with `.dbgtail`'s virtual size grown to its raw size (0x200)
/// and the two debug entries (in `order`) copied to file offset `at`; the
/// directory points there with `size` bytes.
fn debug_dir_moved(at: usize, size: u32, order: [usize; 2]) -> Vec<u8> {
    let mut b = asset("hip_dbg.dll");
    put_u32(&mut b, section(6) + 8, 0x200);
    let entries: Vec<Vec<u8>> = (0..2).map(|k| b[DBGTAIL + 0x28 + 28 * k..DBGTAIL + 0x28 + 28 * (k + 1)].to_vec()).collect();
    for (slot, &k) in order.iter().enumerate() {
        let o = at + 28 * slot;
        let n = 28.min(b.len() - o);
        b[o..o + n].copy_from_slice(&entries[k][..n]);
    }
    put_u32(&mut b, dir(6), (at - DBGTAIL + 0xe000) as u32);
    put_u32(&mut b, dir(6) + 4, size);
    b
}

/// Entries are read up to the end of the layout. With a marker, the marker
/// section follows every section's raw data, so the end is only reached
/// with an empty marker; the layout then ends where hip_dbg.dll does.
#[test]
fn debug_entries_at_the_end_of_the_file() {
    // The CodeView entry last, its pointer field (0x81fc..0x8200) ending
    // exactly at the end of the file: still read and moved.
    let b = debug_dir_moved(0x81c8, 0x38, [1, 0]);
    let out = transformed_with(&b, &[]);
    assert_eq!(out.len(), 0x8200 - DROPPED as usize);
    assert_eq!(u32_at(&out, 0x81fc - DROPPED as usize), 0x8060 - DROPPED);
    // The CodeView entry first; the second entry's pointer field would be
    // 0x81fe..0x8202, two bytes past the end: the walk stops there.
    let b = debug_dir_moved(0x81ca, 0x38, [0, 1]);
    let out = transformed_with(&b, &[]);
    assert_eq!(u32_at(&out, 0x81e2 - DROPPED as usize), 0x8060 - DROPPED);
    assert!(out[0x81e6 - DROPPED as usize..0x8200 - DROPPED as usize] == b[0x81e6..0x8200], "the cut entry");
}

/// RVA 0 means "no debug directory" whatever the size says, even when a
/// section starts at RVA 0: hip_one.dll with `.text` moved to RVA 0 and
/// the debug directory's RVA zeroed. Read as a directory, `.text`'s bytes
/// at 0x418 (0x48282444) would be a pointer behind the dropped pages.
#[test]
fn a_debug_directory_at_rva_zero_is_absent() {
    let mut b = asset("hip_one.dll");
    assert_eq!(&b[section(0)..section(0) + 5], b".text");
    put_u32(&mut b, section(0) + 12, 0);
    assert_eq!((u32_at(&b, dir(6)), u32_at(&b, dir(6) + 4)), (0x2000, 0x1c));
    put_u32(&mut b, dir(6), 0);
    assert_eq!(u32_at(&b, 0x418), 0x4828_2444);
    let out = transformed(&b);
    assert!(out[0x400..0x600] == b[0x400..0x600], ".text untouched");
}

// ---- wrappers ------------------------------------------------------------

/// hip_one.dll with wrapper 0's pointer (slot at file 0x808) set to `va`.
fn pointing_at(va: u64) -> Vec<u8> {
    let mut b = asset("hip_one.dll");
    assert_eq!(u64::from_le_bytes(b[0x808..0x810].try_into().unwrap()), 0x1_8000_5000);
    put_u64(&mut b, 0x808, va);
    b
}

#[test]
fn wrapper_targets_at_the_edges_of_hip_fat() {
    // .hip_fat: rva 0x5000, virtual size 0x62a1 (image base 0x180000000).
    let table: [(u64, Option<u64>); 5] =
        [(0x1_8000_4fff, None), (0x1_8000_5000, Some(0)), (0x1_8000_b2a0, Some(0x62a0)), (0x1_8000_b2a1, None), (0x1_8000_c000, None)];
    for (va, want) in table {
        let plan = plan_with(&pointing_at(va), &marker()).unwrap();
        assert_eq!(plan.wrappers.iter().map(|w| w.fatbin_offset).collect::<Vec<_>>(), [want], "pointer {va:#x}");
    }
}

/// A pointer at `.text`'s virtual end made that end 0x2000, where `.rdata`
/// starts: the bytes mapped there are `.rdata`'s (0xff, its virtual size,
/// from file offset 0x600), not the 0 left of `.text`.
#[test]
fn a_pointer_at_a_section_end_maps_the_next_section() {
    use kpackfs_core::formats::host::Host;
    let mut b = pointing_at(0x1_8000_2000);
    put_u32(&mut b, section(0) + 8, 0x1000);
    let ws = Host::open(&b).unwrap().raw_wrappers(&b).unwrap();
    assert_eq!(ws.iter().map(|w| (w.pointer_offset, w.mapped_len)).collect::<Vec<_>>(), [(Some(0x600), 0xff)]);
}

/// hip_two.dll's two wrappers after the transform, by hand: magic HIPK,
/// version 1 kept, the pointer at the marker section (rva 0xe000: after
/// `.reloc`, 0xd000 + 0x18, page-aligned), the wrapper's index in the low
/// half of `reserved1`.
#[test]
fn both_wrappers_of_hip_two_rewritten() {
    let b = asset("hip_two.dll");
    let out = transformed(&b);
    for i in 0..2u32 {
        let w = 0x800 + 24 * i as usize;
        let mut want = b"HIPK".to_vec();
        want.extend_from_slice(&1u32.to_le_bytes());
        want.extend_from_slice(&0x1_8000_e000u64.to_le_bytes());
        want.extend_from_slice(&(i as u64).to_le_bytes());
        assert_eq!(out[w..w + 24], want[..], "wrapper {i}");
    }
}

/// A `.kpackrf` section without raw data has no marker to read: `describe`
/// (on the reference tool's kpack'd w.dll, its SizeOfRawData zeroed) says
/// nothing about it.
#[test]
fn describe_skips_a_marker_section_without_raw_data() {
    use kpackfs_core::formats::host::Host;
    let mut b = read(common::vectors().join("generated-golden/pe/w.dll.kpacked"));
    let o = u32_at(&b, 0x3c) as usize;
    let n = u16::from_le_bytes([b[o + 6], b[o + 7]]) as usize;
    let st = o + 24 + u16::from_le_bytes([b[o + 20], b[o + 21]]) as usize;
    let k = (0..n).find(|&i| &b[st + 40 * i..st + 40 * i + 8] == b".kpackrf").expect(".kpackrf");
    let mut out = String::new();
    Host::open(&b).unwrap().describe(&mut out, &b).unwrap();
    assert!(out.lines().any(|l| l.starts_with(".kpackrf: kernel_name")), "{out}");
    put_u32(&mut b, st + 40 * k + 16, 0);
    let mut out = String::new();
    Host::open(&b).unwrap().describe(&mut out, &b).unwrap();
    assert!(!out.contains(".kpackrf:"), "{out}");
}

// ---- base relocations ----------------------------------------------------

/// hip_one.dll's base relocations (file 0x6e00): page 0x2000, DIR64 at
/// 0x28 and a padding entry at 0x6e0a. The padding entry made `entry`
/// (type << 12 | 0x030, for RVA 0x2030, file 0x630, zeros).
fn reloc_at_2030(entry: u16) -> Vec<u8> {
    let mut b = asset("hip_one.dll");
    assert_eq!(&b[0x6e00..0x6e0c], &[0x00, 0x20, 0, 0, 12, 0, 0, 0, 0x28, 0xa0, 0, 0]);
    assert_eq!(&b[0x630..0x638], &[0u8; 8]);
    b[0x6e0a..0x6e0c].copy_from_slice(&entry.to_le_bytes());
    b
}

#[test]
fn a_relocated_pointer_at_the_end_of_hip_fat_is_outside() {
    for (va, want) in [(0x1_8000_b2a0u64, "corrupt PE: pointer at RVA 0x2030 still targets .hip_fat"), (0x1_8000_b2a1, "ok")] {
        let mut b = reloc_at_2030(0xa030);
        put_u64(&mut b, 0x630, va);
        assert_eq!(answer(&b), want, "pointer {va:#x}");
    }
}

/// HIGHLOW (type 3) relocates a 32-bit address: with the image base moved
/// to 0x10000000 (optional header + 24), a 4-byte pointer at 0x2030 into
/// `.hip_fat` is refused, one into `.rdata` is not.
#[test]
fn highlow_relocations_are_checked() {
    for (va, want) in [(0x1000_5010u32, "corrupt PE: pointer at RVA 0x2030 still targets .hip_fat"), (0x1000_2010, "ok")] {
        let mut b = reloc_at_2030(0x3030);
        put_u64(&mut b, OPT + 24, 0x1000_0000);
        put_u32(&mut b, 0x630, va);
        put_u32(&mut b, 0x634, 0xffff_ffff); // not part of a 4-byte slot
        assert_eq!(answer(&b), want, "pointer {va:#x}");
    }
}

/// A base relocation whose slot runs past the end of the layout is
/// skipped; one that ends exactly there is checked. With a marker the
/// marker section follows every section's raw data, so this only happens
/// with an empty marker: hip_one.dll then ends at 0x7000 with `.reloc`
/// (virtual size grown to 0x200), and a third block (page 0xc000, at file
/// 0x6e18) holds one DIR64 entry at `page_off`.
#[test]
fn a_relocation_slot_past_the_end_is_skipped() {
    let slot = |page_off: u16| {
        let mut b = asset("hip_one.dll");
        put_u32(&mut b, section(5) + 8, 0x200);
        assert_eq!((u32_at(&b, dir(5)), u32_at(&b, dir(5) + 4)), (0xc000, 0x18));
        assert!(b[0x6e18..0x6e24].iter().all(|&x| x == 0));
        b[0x6e18..0x6e24].copy_from_slice(&[0x00, 0xc0, 0, 0, 12, 0, 0, 0, 0, 0, 0, 0]);
        b[0x6e20..0x6e22].copy_from_slice(&(0xa000 | page_off).to_le_bytes());
        put_u32(&mut b, dir(5) + 4, 0x24);
        b[0x6ff8..0x7000].copy_from_slice(&0x1_8000_5010u64.to_le_bytes());
        b
    };
    let no_marker = |b: &[u8]| plan_with(b, &[]).map(|p| p.layout.len()).map_err(|e| e.to_string());
    // Slot 0x6ff8..0x7000, a pointer into .hip_fat: read and refused.
    assert_eq!(no_marker(&slot(0x1f8)), Err("corrupt PE: pointer at RVA 0xc1f8 still targets .hip_fat".into()));
    // Slot 0x6ffc..0x7004: past the end, skipped.
    assert_eq!(no_marker(&slot(0x1fc)), Ok(0x7000 - 0x6000));
}

// ---- step 6: dropping .hip_fat's pages -----------------------------------

/// hip_one.dll with `.hip_fat`'s header fields (virtual size, rva, raw
/// size) replaced where given.
fn hip_fat(vsize: Option<u32>, rva: Option<u32>, raw: Option<u32>) -> Vec<u8> {
    let mut b = asset("hip_one.dll");
    let f = section(4);
    assert_eq!(&b[f..f + 8], b".hip_fat");
    assert_eq!([u32_at(&b, f + 8), u32_at(&b, f + 12), u32_at(&b, f + 16), u32_at(&b, f + 20)], [0x62a1, 0x5000, 0x6400, 0xa00]);
    for (o, v) in [(8, vsize), (12, rva), (16, raw)] {
        if let Some(v) = v {
            put_u32(&mut b, f + o, v);
        }
    }
    b
}

/// hip_one.dll's bytes 0x400..0x7000 (every section's raw data) in the
/// output at the same offsets, bar the rewritten wrapper (0x800..0x818).
fn same_but_the_wrapper(out: &[u8], b: &[u8]) -> bool {
    out.len() > 0x7000 && out[0x400..0x800] == b[0x400..0x800] && out[0x818..0x7000] == b[0x818..0x7000]
}

#[test]
fn hip_fat_without_raw_data_keeps_its_bytes() {
    // Nothing to drop: the file keeps all 0x7000 bytes, .reloc stays.
    let b = hip_fat(None, None, Some(0));
    let out = transformed(&b);
    assert_eq!(u32_at(&out, section(5) + 20), 0x6e00);
    assert!(same_but_the_wrapper(&out, &b), "bytes moved");
}

#[test]
fn hip_fat_raw_data_must_cover_its_pages() {
    // Pages 0x5000..0xb000: 0x6000 bytes, from the section's start.
    let short = "unsupported PE: .hip_fat has fewer raw bytes than its removable pages";
    for (raw, want) in [(0x6400, "ok"), (0x6000, "ok"), (0x5e00, short)] {
        assert_eq!(answer(&hip_fat(None, None, Some(raw))), want, "raw size {raw:#x}");
    }
}

#[test]
fn hip_fat_without_a_whole_page_is_kept() {
    // Virtual size 0x800 at 0x5000: no page lies wholly inside; the raw
    // size (0x6400) and everything behind stay.
    let b = hip_fat(Some(0x800), None, None);
    let out = transformed(&b);
    assert_eq!((u32_at(&out, section(4) + 16), u32_at(&out, section(5) + 20)), (0x6400, 0x6e00));
    assert!(same_but_the_wrapper(&out, &b), "bytes moved");
}

/// `.hip_fat` at rva 0x4200 (SectionAlignment 0x200 allows it), virtual
/// size 0x62a1, raw 0xa00 + 0x6400. Its whole pages are 0x5000..0xa000
/// (0x5000 bytes) after 0xe00 bytes of head; 0x4a1 bytes of tail follow.
/// So the bytes 0x1800..0x6800 go, `.hip_fat` keeps 0xe00 + 0x4a1 = 0x12a1
/// bytes (raw size 0x1400), `.reloc` moves from 0x6e00 to 0x1e00 and the
/// marker from 0x7000 to 0x2000; the wrapper (0x180005000) is at offset
/// 0xe00 of `.hip_fat`.
#[test]
fn hip_fat_not_page_aligned() {
    let mut b = hip_fat(None, Some(0x4200), None);
    put_u32(&mut b, OPT + 32, 0x200);
    let plan = plan_with(&b, &marker()).unwrap();
    assert_eq!(plan.wrappers.iter().map(|w| w.fatbin_offset).collect::<Vec<_>>(), [Some(0xe00)]);
    let out = plan.layout.materialize(&b, &Uncached).unwrap();
    assert_eq!(
        [u32_at(&out, section(4) + 8), u32_at(&out, section(4) + 12), u32_at(&out, section(4) + 16), u32_at(&out, section(4) + 20)],
        [0x62a1, 0x4200, 0x1400, 0xa00]
    );
    assert_eq!(u32_at(&out, section(5) + 20), 0x1e00);
    assert_eq!(&out[section(6)..section(6) + 8], b".kpackrf");
    assert_eq!(u32_at(&out, section(6) + 20), 0x2000);
    assert!(out[0x400..0x800] == b[0x400..0x800] && out[0x818..0x1800] == b[0x818..0x1800], "up to the first whole page");
    assert!(out[0x1800..0x2000] == b[0x6800..0x7000], "the tail and .reloc");
    let m = marker();
    assert!(out[0x2000..0x2000 + m.len()] == m[..], "the marker");
}
