//! PE header checks at their boundaries, judged by a table written by hand
//! from the PE/COFF rules (docs/host-binaries.md): the smallest file that
//! can hold a DOS header, NT headers that end exactly at the end of the
//! file or one byte past it, each alignment rule alone, and the section
//! names errors carry. The input is test_assets/bin/hip_one.dll (hipcc's
//! PE build, test_assets/build_pe.sh) with single fields patched.

mod common;

use common::{assets, read};
use kpackfs_core::formats::pe::{PeError, PeFile};

fn dll() -> Vec<u8> {
    read(assets().join("bin/hip_one.dll"))
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

fn put_u32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes());
}

/// Offset of the optional header (NT signature 4 + file header 20).
fn opt(b: &[u8]) -> usize {
    u32_at(b, 0x3c) as usize + 24
}

/// The error `parse` gives, as "variant: message" for comparison.
fn error_of(b: &[u8]) -> String {
    match PeFile::parse(&b.to_vec()) {
        Ok(_) => "ok".into(),
        Err(PeError::NotPe) => "NotPe".into(),
        Err(PeError::Corrupt(m)) => format!("Corrupt: {m}"),
        Err(PeError::Io(e)) => format!("Io: {e}"),
        Err(e) => format!("other: {e}"),
    }
}

#[test]
fn the_asset_is_what_the_table_assumes() {
    let b = dll();
    let o = opt(&b);
    // hipcc's PE32+ layout: 0x78 NT offset, section/file alignment 0x1000/0x200.
    assert_eq!((u32_at(&b, 0x3c), u32_at(&b, o + 32), u32_at(&b, o + 36), u32_at(&b, o + 60)), (0x78, 0x1000, 0x200, 0x400));
    assert_eq!(error_of(&b), "ok");
}

#[test]
fn dos_header_and_nt_headers_at_the_end_of_the_file() {
    let mut mz = vec![0u8; 64];
    mz[..2].copy_from_slice(b"MZ");
    // 63 bytes hold no DOS header; 64 do, and then the NT headers
    // (e_lfanew 0; signature, file header and the optional header's fixed
    // 112 bytes: 136) run past the end.
    assert_eq!(error_of(&mz[..63]), "NotPe");
    assert_eq!(error_of(&mz[..10]), "NotPe");
    assert_eq!(error_of(&mz), "Corrupt: NT headers past end of file");
    // NT headers (136 bytes at 0x78) ending exactly at the end pass that
    // check and fail the next (SizeOfHeaders 0x400); one byte short fails it.
    let b = dll();
    let end = 0x78 + 136;
    assert!(error_of(&b[..end]).starts_with("Corrupt: SizeOfHeaders 0x400 past end of file"), "{}", error_of(&b[..end]));
    assert_eq!(error_of(&b[..end - 1]), "Corrupt: NT headers past end of file");
    // Headers (SizeOfHeaders 0x400) ending exactly at the end are read;
    // the first section's raw data is then what is missing.
    assert_eq!(error_of(&b[..0x400]), "Corrupt: section .text raw data past end of file");
    assert_eq!(error_of(&b[..0x3ff]), "Corrupt: SizeOfHeaders 0x400 past end of file");
}

#[test]
fn each_alignment_rule_alone() {
    // (section alignment, file alignment, accepted): powers of two, file
    // alignment at least 0x200, section alignment at least the file's.
    let table = [
        (0x1000, 0x200, true),
        (0x200, 0x200, true),
        (0x2000, 0x400, true),
        (0x1000, 0x300, false),
        (0x1800, 0x200, false),
        (0x1000, 0x100, false),
        (0x100, 0x100, false),
        (0x200, 0x400, false),
        (0x1000, 0, false),
    ];
    for (section, file, accepted) in table {
        let mut b = dll();
        let o = opt(&b);
        put_u32(&mut b, o + 32, section);
        put_u32(&mut b, o + 36, file);
        let e = error_of(&b);
        if accepted {
            assert_eq!(e, "ok", "section {section:#x} file {file:#x}");
        } else {
            assert_eq!(e, format!("Corrupt: alignments file {file:#x} / section {section:#x}"), "section {section:#x} file {file:#x}");
        }
    }
}

#[test]
fn section_errors_name_the_section() {
    // .reloc's raw data (0x6e00 + 0x200) cut short.
    let b = dll();
    assert_eq!(error_of(&b[..0x6f00]), "Corrupt: section .reloc raw data past end of file");
    // .hip_fat (a full 8-byte name, no NUL) moved into the headers.
    let mut b = dll();
    let st = opt(&b) + u16::from_le_bytes([b[0x78 + 20], b[0x78 + 21]]) as usize;
    let i = (0..6).find(|i| &b[st + 40 * i..st + 40 * i + 8] == b".hip_fat").expect(".hip_fat section");
    put_u32(&mut b, st + 40 * i + 20, 0x200);
    assert_eq!(error_of(&b), "Corrupt: section .hip_fat raw data inside the headers");
}

/// Offset of the section table: the optional header plus its declared size.
fn section_table(b: &[u8]) -> usize {
    opt(b) + u16::from_le_bytes([b[0x78 + 20], b[0x78 + 21]]) as usize
}

#[test]
fn the_section_table_must_lie_within_the_headers() {
    let b = dll();
    let end = section_table(&b) + 6 * 40;
    // SizeOfHeaders (optional header + 60) cut to the table's end: read;
    // one byte less: the table is outside the headers.
    let mut at = b.clone();
    put_u32(&mut at, opt(&b) + 60, end as u32);
    assert_eq!(error_of(&at), "ok");
    put_u32(&mut at, opt(&b) + 60, end as u32 - 1);
    assert_eq!(error_of(&at), "Corrupt: section table outside the headers");
}

#[test]
fn data_directories_stop_where_the_section_table_starts() {
    // An optional header declaring room for 10 data directories while
    // NumberOfRvaAndSizes says 16: the section table moves up to follow
    // the tenth, and only ten directories are read (the rest of the
    // claimed 16 would be section-header bytes).
    let b = dll();
    let o = opt(&b);
    assert_eq!(u32_at(&b, o + 108), 16, "NumberOfRvaAndSizes");
    let full = PeFile::parse(&b.clone()).unwrap().dirs;
    assert_eq!(full.len(), 16);
    let mut short = b.clone();
    let (from, to) = (section_table(&b), o + 112 + 10 * 8);
    short.copy_within(from..from + 6 * 40, to);
    short[0x78 + 20..0x78 + 22].copy_from_slice(&((112 + 10 * 8) as u16).to_le_bytes());
    let pe = PeFile::parse(&short).unwrap();
    assert_eq!(pe.dirs, full[..10]);
}

/// Section `i`'s header offset in hip_one.dll.
fn section_header(b: &[u8], i: usize) -> usize {
    section_table(b) + 40 * i
}

#[test]
fn rva_to_offset_by_hand() {
    // hip_one.dll's sections (VA, virtual size, raw pointer, raw size):
    // .text 0x1000 0x88 0x400 0x200, .rdata 0x2000 0xff 0x600 0x200,
    // .data 0x3000 0x8 (no raw data), .hipFatB 0x4000 0x18 0x800 0x200,
    // .hip_fat 0x5000 0x62a1 0xa00 0x6400, .reloc 0xc000 0x18 0x6e00 0x200.
    // An RVA maps into the first section whose virtual range holds it and
    // whose raw data covers it.
    let table: [(u64, Option<u64>); 16] = [
        (0x0fff, None),
        (0x1000, Some(0x400)),
        (0x1087, Some(0x487)),
        (0x1088, None), // past the virtual size, though raw data is there
        (0x2000, Some(0x600)),
        (0x20fe, Some(0x6fe)),
        (0x20ff, None),
        (0x3000, None), // .data: no raw data
        (0x3007, None),
        (0x4017, Some(0x817)),
        (0x5000, Some(0xa00)),
        (0xb2a0, Some(0x6ca0)),
        (0xb2a1, None),
        (0xc000, Some(0x6e00)),
        (0xc018, None),
        (0xffff_ffff, None),
    ];
    let pe = PeFile::parse(&dll()).unwrap();
    for (rva, off) in table {
        assert_eq!(pe.rva_to_off(rva), off, "rva {rva:#x}");
    }
}

#[test]
fn an_empty_section_still_occupies_its_address() {
    // .data given virtual size 0 at .text's address: it counts as one byte
    // there, so the two overlap.
    let mut b = dll();
    let d = section_header(&b, 2);
    assert_eq!(&b[d..d + 5], b".data");
    put_u32(&mut b, d + 8, 0);
    put_u32(&mut b, d + 12, 0x1000);
    assert_eq!(error_of(&b), "Corrupt: overlapping sections");
}

#[test]
fn raw_data_shorter_than_the_virtual_size() {
    // .text given virtual size 0x300 over its 0x200 bytes of raw data:
    // RVAs past the raw data map nowhere.
    let mut b = dll();
    let text = section_header(&b, 0);
    put_u32(&mut b, text + 8, 0x300);
    let pe = PeFile::parse(&b).unwrap();
    assert_eq!(pe.rva_to_off(0x11ff), Some(0x5ff));
    assert_eq!(pe.rva_to_off(0x1200), None);
}

/// Each wrapper's bundle pointer: its file offset and how many bytes from
/// there the image maps (to the end of .hip_fat's virtual size, which is
/// shorter than its raw data). Expected from the bundles' magic found in
/// the file and the section headers, by hand: .hip_fat at raw 0xa00,
/// virtual size 0x62a1 (hip_one) / 0x7219 (hip_two).
#[test]
fn wrapper_pointers_and_mapped_bytes() {
    use kpackfs_core::formats::host::Host;
    for (dll, vsize) in [("bin/hip_one.dll", 0x62a1u64), ("bin/hip_two.dll", 0x7219)] {
        let b = read(assets().join(dll));
        let magic = b"__CLANG_OFFLOAD_BUNDLE__";
        let mut want: Vec<(u64, u64)> =
            (0xa00..b.len() - magic.len()).filter(|&o| &b[o..o + magic.len()] == magic).map(|o| (o as u64, vsize - (o as u64 - 0xa00))).collect();
        let h = Host::open(&b).unwrap();
        let mut got: Vec<(u64, u64)> = h.raw_wrappers(&b).unwrap().iter().map(|w| (w.pointer_offset.unwrap(), w.mapped_len)).collect();
        want.sort();
        got.sort();
        assert!(!want.is_empty(), "{dll}: no bundle found");
        assert_eq!(got, want, "{dll}");
    }
}

/// The marker every plan here is given.
fn marker() -> Vec<u8> {
    use kpackfs_core::formats::marker::Marker;
    Marker { search_paths: vec!["../.kpack/t_@GFXARCH@.kpack".into()], kernel_name: "bin/hip_one.dll".into() }.encode()
}

/// The planner's answer for `b`: "ok" or its error, as text.
fn plan_of(b: &[u8]) -> String {
    let m = marker();
    let src = b.to_vec();
    match PeFile::parse(&src).and_then(|pe| kpackfs_core::formats::pe::plan(&src, &pe, &m)) {
        Ok(_) => "ok".into(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_relocated_pointer_left_into_hip_fat_is_refused() {
    // hip_one.dll's base relocations: page 0x2000 holds a DIR64 entry at
    // 0x28 and a padding entry (type 0), file offset 0x6e0a. Made a DIR64
    // entry for RVA 0x2030 (file 0x630, zeros), with a pointer written
    // there: into .hip_fat (image base 0x180000000 + 0x5010) the planner
    // must refuse; into .rdata it must not.
    let b = dll();
    assert_eq!(plan_of(&b), "ok");
    assert_eq!(&b[0x6e00..0x6e0c], &[0x00, 0x20, 0, 0, 12, 0, 0, 0, 0x28, 0xa0, 0, 0]);
    assert_eq!(&b[0x630..0x638], &[0u8; 8]);
    for (target, want) in [(0x1_8000_5010u64, "corrupt PE: pointer at RVA 0x2030 still targets .hip_fat"), (0x1_8000_2010, "ok")] {
        let mut p = b.clone();
        p[0x6e0a..0x6e0c].copy_from_slice(&0xa030u16.to_le_bytes());
        p[0x630..0x638].copy_from_slice(&target.to_le_bytes());
        assert_eq!(plan_of(&p), want, "pointer {target:#x}");
    }
}

#[test]
fn hip_fat_without_raw_data_has_no_range() {
    use kpackfs_core::formats::host::Host;
    let b = dll();
    assert_eq!(Host::open(&b).unwrap().fat_section(), Some((0xa00, 0x62a1)));
    let mut p = b.clone();
    let f = section_header(&p, 4);
    assert_eq!(&p[f..f + 8], b".hip_fat");
    put_u32(&mut p, f + 16, 0);
    assert_eq!(Host::open(&p).unwrap().fat_section(), None);
}

#[test]
fn the_wrapper_section_must_hold_whole_wrappers_in_raw_data() {
    // .hipFatB: virtual size 0x18 (one 24-byte wrapper), raw 0x200.
    // (virtual size, raw size, planner's answer)
    let table = [
        (0x18, 0x200, "ok"),
        (0x18, 0x18, "ok"),
        (0x19, 0x200, "corrupt PE: .hipFatB virtual size 0x19 / raw 0x200"),
        (0x30, 0x18, "corrupt PE: .hipFatB virtual size 0x30 / raw 0x18"),
    ];
    for (vsize, raw, want) in table {
        let mut p = dll();
        let w = section_header(&p, 3);
        assert_eq!(&p[w..w + 8], b".hipFatB");
        put_u32(&mut p, w + 8, vsize);
        put_u32(&mut p, w + 16, raw);
        assert_eq!(plan_of(&p), want, "vsize {vsize:#x} raw {raw:#x}");
    }
}

/// hip_one.dll with a third base-relocation block appended (file 0x6e18:
/// page 0x2000, DIR64 at 0x30) and the directory's size grown to cover
/// it, and `target` written at RVA 0x2030 (file 0x630).
fn third_reloc_block(target: u64) -> Vec<u8> {
    let mut p = dll();
    let dir = opt(&p) + 112 + 5 * 8;
    assert_eq!((u32_at(&p, dir), u32_at(&p, dir + 4)), (0xc000, 0x18));
    assert!(p[0x6e18..0x6e24].iter().all(|&x| x == 0));
    p[0x6e18..0x6e24].copy_from_slice(&[0x00, 0x20, 0, 0, 12, 0, 0, 0, 0x30, 0xa0, 0, 0]);
    put_u32(&mut p, dir + 4, 0x24);
    p[0x630..0x638].copy_from_slice(&target.to_le_bytes());
    p
}

#[test]
fn every_base_relocation_block_is_read() {
    assert_eq!(plan_of(&third_reloc_block(0x1_8000_5010)), "corrupt PE: pointer at RVA 0x2030 still targets .hip_fat");
    assert_eq!(plan_of(&third_reloc_block(0x1_8000_2010)), "ok");
}

#[test]
fn the_base_relocation_directory_at_its_limits() {
    let dir = opt(&dll()) + 112 + 5 * 8;
    // (RVA, size, planner's answer): no directory when either is 0; the
    // directory may end exactly at the end of the file (0x7000), where
    // the zeros after the two blocks are a malformed block; past it, not.
    let table = [
        (0, 0x18, "ok"),
        (0xc000, 0, "ok"),
        (0xc000, 0x200, "corrupt PE: malformed base relocation block"),
        (0xc000, 0x201, "corrupt PE: base relocations past end of file"),
    ];
    for (rva, size, want) in table {
        let mut p = dll();
        put_u32(&mut p, dir, rva);
        put_u32(&mut p, dir + 4, size);
        assert_eq!(plan_of(&p), want, "rva {rva:#x} size {size:#x}");
    }
}

#[test]
fn base_relocation_block_sizes() {
    // The third block of `third_reloc_block`, its size field (file 0x6e1c)
    // rewritten: 8 is a header without entries (nothing to check, so the
    // pointer into .hip_fat goes unseen); under 8, or running past the
    // directory's 0x24 bytes, is malformed.
    let table = [
        (12, "corrupt PE: pointer at RVA 0x2030 still targets .hip_fat"),
        (8, "ok"),
        (4, "corrupt PE: malformed base relocation block"),
        (13, "corrupt PE: malformed base relocation block"),
    ];
    for (size, want) in table {
        let mut p = third_reloc_block(0x1_8000_5010);
        put_u32(&mut p, 0x6e1c, size);
        assert_eq!(plan_of(&p), want, "block size {size}");
    }
}

#[test]
fn probes_need_hip_fat_and_no_marker() {
    use kpackfs_core::formats::host::{probe, probe_class, Probe};
    let b = dll();
    assert_eq!(probe_class(&b).unwrap(), Probe::Fat);
    assert!(probe(&b));
    // .hip_fat renamed: no device code section, a plain file.
    let mut p = b.clone();
    let f = section_header(&p, 4);
    p[f + 7] = b'X';
    assert_eq!(probe_class(&p).unwrap(), Probe::Plain);
    assert!(!probe(&p));
    // The reference tool's kpack'd output carries .kpackrf: not again.
    let done = read(common::vectors().join("generated-golden/pe/w.dll.kpacked"));
    assert_eq!(probe_class(&done).unwrap(), Probe::Plain);
    assert!(!probe(&done));
}

/// `inspect`'s account of a PE file, checked against the section headers
/// as read above, clang-offload-bundler's entry list for hip_one.dll
/// (test_assets/expected/hip_one.dll/index.tsv) and the marker the
/// reference tool was given for w.dll (test_assets/vectors/README.md).
#[test]
fn describe_by_hand() {
    use kpackfs_core::formats::host::Host;
    let b = dll();
    let mut out = String::new();
    Host::open(&b).unwrap().describe(&mut out, &b).unwrap();
    for line in [
        "PE32+ image base 0x180000000, 28672 bytes, file/section alignment 0x200/0x1000, 6 sections",
        "  .hip_fat rva 0x005000 vsize 0x0062a1 raw 0x000a00+0x006400 flags 0x40000040",
        "fat binary: would be transformed",
        ".hipFatB: 1 wrapper(s)",
        ".hip_fat: 25249 bytes at file offset 0xa00",
    ] {
        assert!(out.lines().any(|l| l == line), "missing {line:?} in:\n{out}");
    }
    for id in ["gfx1030", "gfx906", "gfx90a:xnack+", "gfx90a:xnack-"] {
        assert!(out.contains(&format!("(hipv4-amdgcn-amd-amdhsa--{id})")), "entry {id} missing in:\n{out}");
    }
    let done = read(common::vectors().join("generated-golden/pe/w.dll.kpacked"));
    let mut out = String::new();
    Host::open(&done).unwrap().describe(&mut out, &done).unwrap();
    assert!(out.lines().any(|l| l == ".kpackrf: kernel_name \"bin/w.dll\", search paths [\"../.kpack/t_@GFXARCH@.kpack\"]"), "{out}");
}

#[test]
fn trailing_data_and_the_certificate() {
    // hip_cert.dll: sections end at 0x8000, its Authenticode certificate
    // (security directory 0x8000 + 0x68) ends the file. Only a
    // certificate that starts at or after the sections' end and ends the
    // file is dropped; any other trailing data is refused.
    let cert = read(assets().join("bin/hip_cert.dll"));
    let sec = opt(&cert) + 112 + 4 * 8;
    assert_eq!((cert.len(), u32_at(&cert, sec), u32_at(&cert, sec + 4)), (0x8068, 0x8000, 0x68));
    let with_dir = |b: &[u8], off: u32, size: u32| {
        let mut p = b.to_vec();
        put_u32(&mut p, sec, off);
        put_u32(&mut p, sec + 4, size);
        p
    };
    let trailing = "unsupported PE: 104 bytes of trailing data after the last section";
    let table: [(u32, u32, &str); 5] = [
        (0x8000, 0x68, "ok"),
        (0x8000, 0x67, trailing), // does not end the file
        (0x7ff8, 0x70, trailing), // starts inside the last section
        (0x8068, 0, trailing),    // empty, at the end
        (0, 0, trailing),         // no certificate
    ];
    for (off, size, want) in table {
        assert_eq!(plan_of(&with_dir(&cert, off, size)), want, "security directory {off:#x} + {size:#x}");
    }
    // hip_one.dll's sections end at its end: nothing trails.
    assert_eq!(plan_of(&dll()), "ok");
}

#[test]
fn room_for_the_marker_section_header() {
    // hip_one.dll's section table ends at 0x270 (0x180 + 6 x 40); the
    // marker's header needs 40 more bytes within SizeOfHeaders.
    let b = dll();
    assert_eq!(section_table(&b) + 6 * 40, 0x270);
    for (size_of_headers, want) in [(0x298u32, "ok"), (0x297, "unsupported PE: no room in the headers for one more section header")] {
        let mut p = b.clone();
        put_u32(&mut p, opt(&b) + 60, size_of_headers);
        assert_eq!(plan_of(&p), want, "SizeOfHeaders {size_of_headers:#x}");
    }
}

#[test]
fn the_marker_starts_file_aligned_after_unaligned_raw_data() {
    // .reloc's raw data cut to 0x100 bytes (file ends at 0x6f00). The
    // transform drops .hip_fat's whole pages (0x5000..0xb000 of its
    // 0x62a1-byte range: 0x6000 bytes), so .reloc's data ends at 0xf00;
    // the marker section's raw data must start at the next file-alignment
    // boundary, 0x1000, the gap zero-filled, and run one aligned unit.
    use kpackfs_core::formats::bundle::ccob::Uncached;
    let mut p = dll();
    let r = section_header(&p, 5);
    assert_eq!(&p[r..r + 6], b".reloc");
    put_u32(&mut p, r + 16, 0x100);
    p.truncate(0x6f00);
    let m = marker();
    let pe = PeFile::parse(&p).unwrap();
    let plan = kpackfs_core::formats::pe::plan(&p, &pe, &m).unwrap();
    let out = plan.layout.materialize(&p, &Uncached).unwrap();
    assert_eq!(out.len(), 0x1000 + 0x200);
    assert_eq!(&out[0xe00..0xf00], &p[0x6e00..0x6f00], ".reloc moved up by the dropped pages");
    assert!(out[0xf00..0x1000].iter().all(|&b| b == 0), "the gap is zeros");
    assert_eq!(&out[0x1000..0x1000 + m.len()], &m[..]);
}
