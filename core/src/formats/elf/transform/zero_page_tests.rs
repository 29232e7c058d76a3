//! Step F (docs/host-binaries.md §5.8) on states built by hand, in the
//! layouts no golden has: a `.hip_fatbin` inside a segment that has bytes
//! before and after it, one not wholly inside its segment's file image,
//! header tables and sections inside the pages that leave the file, and
//! sections without file bytes. Every expected header value is worked out
//! by hand from §5.8's rules (its table of pieces and the shift of offsets)
//! in the comments next to it.

use super::*;

/// `zero_page` never reads file bytes: an empty source will do.
static NO_SOURCE: Vec<u8> = Vec::new();

const FAT: usize = 2;

fn seg(p_type: u32, offset: u64, vaddr: u64, filesz: u64, memsz: u64) -> Phdr {
    Phdr { p_type, flags: PF_R, offset, vaddr, paddr: vaddr, filesz, memsz, align: PAGE }
}

fn load(offset: u64, vaddr: u64, filesz: u64, memsz: u64) -> Phdr {
    seg(PT_LOAD, offset, vaddr, filesz, memsz)
}

fn section(sh_type: u32, offset: u64, addr: u64, size: u64) -> Shdr {
    Shdr { name: 1, sh_type, offset, addr, size, ..Default::default() }
}

/// The layout every case starts from (file offsets = addresses up to
/// 0x6000):
///
/// * program headers at 0x40 (4), section headers at 0x6200 (6), file
///   0x6380 bytes;
/// * [0] PT_LOAD [0, 0x1000); [1] T = PT_LOAD file [0x1000, 0x6000),
///   memory [0x1000, 0x7000); [2] PT_LOAD file 0x6000+0x100 at 0x8000;
///   [3] PT_DYNAMIC at 0x5000 (inside T, after the section);
/// * sections: null, .text [0x1000, 0x1800), .hip_fatbin [0x1800, 0x4100),
///   .data [0x4100, 0x4200), .bss (NOBITS) at 0x6000, .shstrtab at 0x6100.
///
/// So a0 = 0x2000, a1 = 0x4000: the two pages [0x2000, 0x4000) leave the
/// file (aoff = 0x2000, asz = 0x2000).
struct Case {
    phoff: u64,
    shoff: u64,
    len: u64,
    phdrs: Vec<Phdr>,
    shdrs: Vec<Shdr>,
}

fn base() -> Case {
    Case {
        phoff: 0x40,
        shoff: 0x6200,
        len: 0x6380,
        phdrs: vec![load(0, 0, 0x1000, 0x1000), load(0x1000, 0x1000, 0x5000, 0x6000), load(0x6000, 0x8000, 0x100, 0x100), seg(2, 0x5000, 0x5000, 0x100, 0x100)],
        shdrs: vec![
            Shdr::default(),
            section(SHT_PROGBITS, 0x1000, 0x1000, 0x800),
            section(SHT_PROGBITS, 0x1800, 0x1800, 0x2900),
            section(SHT_PROGBITS, 0x4100, 0x4100, 0x100),
            section(SHT_NOBITS, 0x6000, 0x7000, 0x800),
            section(3, 0x6100, 0, 0x40),
        ],
    }
}

fn run(c: Case) -> Result<State<'static>, ElfError> {
    let eh = Ehdr {
        raw: [0; 64],
        e_type: ET_DYN,
        e_machine: EM_X86_64,
        phoff: c.phoff,
        shoff: c.shoff,
        phentsize: PHDR_SIZE as u16,
        phnum: c.phdrs.len() as u16,
        shentsize: SHDR_SIZE as u16,
        shnum: c.shdrs.len() as u16,
        shstrndx: 5,
    };
    let fatbin = c.shdrs[FAT];
    let mut st = State { src: &NO_SOURCE, buf: Layout::passthrough(c.len), eh, phdrs: c.phdrs, shdrs: c.shdrs, deviations: Vec::new() };
    zero_page(&mut st, &fatbin, FAT)?;
    Ok(st)
}

fn refused(r: Result<State<'static>, ElfError>, why: &str) -> bool {
    matches!(&r, Err(ElfError::Corrupt(w)) if w.contains(why))
}

fn offsets(st: &State<'_>) -> Vec<u64> {
    st.shdrs.iter().map(|s| s.offset).collect()
}

#[test]
fn zero_page_splits_a_segment_with_bytes_on_both_sides() {
    let st = run(base()).unwrap();
    assert_eq!(
        st.phdrs,
        [
            load(0, 0, 0x1000, 0x1000),
            // T's bytes before the section, its first partial page, the
            // zero-fill from a0 to the section's end, then T's rest: memory
            // [0x4100, 0x7000), file bytes from 0x4100 - asz up to T's end
            // (0x6000 - 0x4100 = 0x1f00).
            load(0x1000, 0x1000, 0x800, 0x800),
            load(0x1800, 0x1800, 0x800, 0x800),
            load(0x2000, 0x2000, 0, 0x2100),
            load(0x2100, 0x4100, 0x1f00, 0x2f00),
            // Behind the removed pages: asz lower.
            load(0x4000, 0x8000, 0x100, 0x100),
            seg(2, 0x3000, 0x5000, 0x100, 0x100),
        ]
    );
    assert_eq!((st.eh.phoff, st.eh.phnum, st.eh.shoff, st.buf.len()), (0x40, 7, 0x4200, 0x4380));
    // .hip_fatbin keeps its offset and becomes NOBITS; the rest move with
    // their bytes (.text stays, .data/.bss/.shstrtab lose asz).
    assert_eq!(offsets(&st), [0, 0x1000, 0x1800, 0x2100, 0x4000, 0x4100]);
    let types: Vec<u32> = st.shdrs.iter().map(|s| s.sh_type).collect();
    assert_eq!(types, [SHT_NULL, SHT_PROGBITS, SHT_NOBITS, SHT_PROGBITS, SHT_NOBITS, 3]);
}

/// The section ends T's file image; T's memory goes on (0x7000): §5.8's
/// "after" piece needs file bytes after the section, so there is none.
/// Then the section starts T: no "before" piece.
#[test]
fn zero_page_pieces_present_only_with_something_to_map() {
    let mut c = base();
    c.phdrs[1] = load(0x1000, 0x1000, 0x3100, 0x6000);
    let st = run(c).unwrap();
    assert_eq!(&st.phdrs[1..4], [load(0x1000, 0x1000, 0x800, 0x800), load(0x1800, 0x1800, 0x800, 0x800), load(0x2000, 0x2000, 0, 0x2100)]);
    assert_eq!(st.phdrs.len(), 6);

    let mut c = base();
    c.phdrs[0] = load(0, 0, 0x1800, 0x1800);
    c.phdrs[1] = load(0x1800, 0x1800, 0x4800, 0x5800);
    let st = run(c).unwrap();
    assert_eq!(&st.phdrs[1..4], [load(0x1800, 0x1800, 0x800, 0x800), load(0x2000, 0x2000, 0, 0x2100), load(0x2100, 0x4100, 0x1f00, 0x2f00)]);

    // T's memory ends with the section while its file image goes on
    // (p_filesz > p_memsz, against the gABI): T does not continue past
    // the section, so no "after" piece either.
    let mut c = base();
    c.phdrs[1] = load(0x1000, 0x1000, 0x3200, 0x3100);
    let st = run(c).unwrap();
    assert_eq!(st.phdrs.len(), 6);
    assert_eq!(st.phdrs[3], load(0x2000, 0x2000, 0, 0x2100));
}

/// §5.8 step 3: `.hip_fatbin` must lie wholly inside T's memory and file
/// image with T's offset/address relation; each check at its edge.
#[test]
fn zero_page_refuses_a_section_outside_its_segment() {
    const WHY: &str = "not wholly inside its segment's file image";
    let with_t = |t: Phdr| {
        let mut c = base();
        c.phdrs[1] = t;
        run(c)
    };
    // Memory ends one byte early (the file image still holds it all), and
    // exactly at the section's end.
    assert!(refused(with_t(load(0x1000, 0x1000, 0x3100, 0x30ff)), WHY));
    assert!(with_t(load(0x1000, 0x1000, 0x3100, 0x3100)).is_ok());
    // File image ends one byte early (memory holds it all), and exactly.
    assert!(refused(with_t(load(0x1000, 0x1000, 0x30ff, 0x6000)), WHY));
    assert!(with_t(load(0x1000, 0x1000, 0x3100, 0x6000)).is_ok());
    // The section's offset 0x10 past where T maps its address.
    let mut c = base();
    c.shdrs[FAT].offset = 0x1810;
    assert!(refused(run(c), WHY));
    // The first program header covering the address decides, and it must
    // be a PT_LOAD.
    let mut c = base();
    c.phdrs.insert(0, seg(2, 0x1000, 0x1000, 0x1000, 0x1000));
    assert!(refused(run(c), "first covering segment is not PT_LOAD"));
}

/// §5.8 step 4: offsets at or after the removed pages' end move down by
/// asz, one at their first byte stays, one strictly inside is refused.
#[test]
fn zero_page_shifts_or_refuses_what_lies_in_the_pages() {
    let mut c = base();
    c.shoff = 0x3000;
    assert!(refused(run(c), "section header table at 0x3000 lies in .hip_fatbin's pages"));
    let mut c = base();
    c.phoff = 0x2001;
    assert!(refused(run(c), "program header table at 0x2001 lies in .hip_fatbin's pages"));
    for (off, want) in [(0x2000, Some(0x2000)), (0x2001, None), (0x3fff, None), (0x4000, Some(0x2000))] {
        let mut c = base();
        c.phdrs[3].offset = off;
        let r = run(c);
        match want {
            Some(w) => assert_eq!(r.unwrap().phdrs[6].offset, w, "segment at {off:#x}"),
            None => assert!(refused(r, &format!("segment at {off:#x} lies in")), "segment at {off:#x}"),
        }
    }
    let mut c = base();
    c.shdrs[3].offset = 0x3000;
    assert!(refused(run(c), "section at 0x3000 lies in"));
}

/// Sections without file bytes (NOBITS, or empty) in the removed pages
/// have no bytes to lose: they are parked at aoff (0x2000) instead of
/// refused; after the pages they move down like the others.
#[test]
fn zero_page_parks_sections_without_file_bytes() {
    let mut c = base();
    c.shdrs[3] = section(SHT_PROGBITS, 0x2800, 0x2800, 0);
    c.shdrs[4] = section(SHT_NOBITS, 0x3000, 0x7000, 0x800);
    let st = run(c).unwrap();
    assert_eq!(offsets(&st), [0, 0x1000, 0x1800, 0x2000, 0x2000, 0x4100]);
    let mut c = base();
    c.shdrs[3] = section(SHT_PROGBITS, 0x5000, 0x5000, 0);
    let st = run(c).unwrap();
    assert_eq!(offsets(&st), [0, 0x1000, 0x1800, 0x3000, 0x4000, 0x4100]);
}

/// §5.8 steps 1-2: no whole page, or only the section's last page when it
/// ends on a page boundary: nothing changes. Two whole pages ending on a
/// boundary: the last one is kept.
#[test]
fn zero_page_keeps_sections_without_a_page_to_drop() {
    for (addr, size) in [(0x1800, 0x700), (0x1800, 0x1000), (0x1800, 0x1800)] {
        let mut c = base();
        c.shdrs[FAT] = section(SHT_PROGBITS, addr, addr, size);
        let before = (c.phdrs.clone(), c.shdrs.clone());
        let st = run(c).unwrap();
        assert_eq!((st.phdrs, st.shdrs, st.buf.len()), (before.0, before.1, 0x6380), "{addr:#x}+{size:#x}");
    }
    // [0x1800, 0x4000): a0 = 0x2000, a1 = 0x4000, one page removed.
    let mut c = base();
    c.shdrs[FAT] = section(SHT_PROGBITS, 0x1800, 0x1800, 0x2800);
    let st = run(c).unwrap();
    assert_eq!(&st.phdrs[3..5], [load(0x2000, 0x2000, 0, 0x2000), load(0x3000, 0x4000, 0x2000, 0x3000)]);
    assert_eq!(st.buf.len(), 0x5380);
}
