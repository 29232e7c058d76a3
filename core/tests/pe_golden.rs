//! The PE planner against the reference tool's output
//! (test_assets/vectors/generated-golden/pe/w.dll.kpacked, marker `../.kpack/t_@GFXARCH@.kpack`,
//! kernel_name `bin/w.dll`), and hostile PE inputs passed through.

mod common;

use common::{read, vectors};
use kpackfs_core::formats::bundle::ccob::Uncached;
use kpackfs_core::formats::host::{self, NotTransformed};
use kpackfs_core::formats::marker::Marker;
use kpackfs_core::formats::pe::{self, PeFile};

fn marker() -> Vec<u8> {
    Marker { search_paths: vec!["../.kpack/t_@GFXARCH@.kpack".into()], kernel_name: "bin/w.dll".into() }.encode()
}

#[test]
fn w_dll_byte_identical() {
    let g = vectors().join("generated-golden/pe");
    let input = read(g.join("w.dll"));
    let want = read(g.join("w.dll.kpacked"));
    let pe = PeFile::parse(&input).unwrap();
    let plan = pe::plan(&input, &pe, &marker()).unwrap();
    let out = plan.layout.materialize(&input, &Uncached).unwrap();
    if out != want {
        let first = out.iter().zip(&want).position(|(a, b)| a != b);
        panic!("w.dll: output differs (len {} vs {}, first difference at {first:x?})", out.len(), want.len());
    }
    assert!(plan.deviations.is_empty(), "{:?}", plan.deviations);
    assert_eq!(out.len(), 4096);
    // FORMATS.md §4 example: one wrapper, pointer 0x180009000 in the output.
    assert_eq!(plan.wrappers.len(), 1);
    assert_eq!(plan.wrappers[0].fatbin_offset, Some(0));
    let again = PeFile::parse(&out).unwrap();
    assert!(matches!(again.classify(), Err(pe::PeError::AlreadyKpacked)));
}

#[test]
fn hostile_pe_inputs_pass_through() {
    let input = read(vectors().join("generated-golden/pe/w.dll"));
    let pe = PeFile::parse(&input).unwrap();
    let lfanew = u32::from_le_bytes(input[0x3c..0x40].try_into().unwrap()) as usize;
    let sect_off = pe.sect_off;
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    for cut in [2usize, 63, lfanew + 10, sect_off + 20, 1000, input.len() - 100] {
        cases.push(("truncated", input[..cut].to_vec()));
    }
    // Section table claiming more sections than the headers hold.
    let mut b = input.clone();
    b[lfanew + 6..lfanew + 8].copy_from_slice(&200u16.to_le_bytes());
    cases.push(("section table past the headers", b));
    // First section's raw data past EOF.
    let mut b = input.clone();
    b[sect_off + 20..sect_off + 24].copy_from_slice(&0x7fff_0000u32.to_le_bytes());
    cases.push(("raw data past EOF", b));
    // Two sections overlapping in the file.
    let mut b = input.clone();
    let second_ptr = u32::from_le_bytes(b[sect_off + 40 + 20..sect_off + 40 + 24].try_into().unwrap());
    b[sect_off + 20..sect_off + 24].copy_from_slice(&second_ptr.to_le_bytes());
    cases.push(("overlapping sections", b));
    // The wrapper points outside `.hip_fat`, and at garbage.
    let (_, seg) = pe.section(pe::WRAPPER_SECTION).unwrap();
    let w_off = pe.rva_to_off(seg.virtual_address as u64).unwrap() as usize;
    let mut b = input.clone();
    b[w_off..w_off + 4].copy_from_slice(b"XXXX");
    cases.push(("bad wrapper magic", b));
    for (what, data) in cases {
        match host::plan(&data, &marker()) {
            Ok(p) => panic!("{what}: transformed ({} bytes)", p.layout.len()),
            Err(NotTransformed::Plain) | Err(NotTransformed::Refused(_)) => {}
        }
        let _ = host::probe(&data);
        let mut s = String::new();
        let _ = host::describe(&mut s, &data);
    }
    // A wrapper pointing outside .hip_fat: the planner attributes no bundle
    // to it, and the view serves the binary unchanged.
    let mut b = input.clone();
    b[w_off + 8..w_off + 16].copy_from_slice(&pe.image_base.to_le_bytes());
    let p = host::plan(&b, &marker()).map_err(|e| e.to_string()).unwrap();
    assert_eq!(p.wrappers[0].fatbin_offset, None);
    let id = kpackfs_core::source::SourceId { dev: 0, ino: 0, size: 0, mtime: Default::default(), ctime: Default::default() };
    assert!(matches!(kpackfs_core::view::FatBinary::analyze(&b, id, "bin/w.dll"), Err(NotTransformed::Refused(_))));
}

#[test]
fn authenticode_overlay_is_dropped_and_other_overlays_refused() {
    let input = read(vectors().join("generated-golden/pe/w.dll"));
    let pe = PeFile::parse(&input).unwrap();
    // Append a fake certificate and point the security directory at it.
    let mut signed = input.clone();
    let cert_off = signed.len() as u32;
    signed.extend_from_slice(&[0xAB; 64]);
    let dir = pe.opt_off + 112 + 8 * 4;
    signed[dir..dir + 4].copy_from_slice(&cert_off.to_le_bytes());
    signed[dir + 4..dir + 8].copy_from_slice(&64u32.to_le_bytes());
    let p = host::plan(&signed, &marker()).map_err(|e| e.to_string()).unwrap();
    assert!(p.deviations.iter().any(|d| d.contains("Authenticode")), "{:?}", p.deviations);
    let out = p.layout.materialize(&signed, &Uncached).unwrap();
    let want = read(vectors().join("generated-golden/pe/w.dll.kpacked"));
    // Same as the unsigned transform except the zeroed security directory.
    assert_eq!(out.len(), want.len());
    let diff: Vec<usize> = (0..out.len()).filter(|&i| out[i] != want[i]).collect();
    assert!(diff.is_empty(), "{diff:?}");
    // An unexplained overlay is left alone.
    let mut overlay = input.clone();
    overlay.extend_from_slice(b"installer payload");
    assert!(matches!(host::plan(&overlay, &marker()), Err(NotTransformed::Refused(_))));
}

/// Not a fat binary the runtime loads, by the headers' own fields (not by
/// any error message): a 32-bit PE image (optional-header magic 0x10b, the
/// PE format's table) and an ELF relocatable object (e_type 1, ET_REL) are
/// plain files — served unchanged without a warning — even though both
/// still carry a fat section.
#[test]
fn non_loadable_variants_are_plain_files_not_refusals() {
    let g = vectors().join("generated-golden/pe");
    let mut pe32 = read(g.join("w.dll"));
    let lfanew = u32::from_le_bytes(pe32[0x3c..0x40].try_into().unwrap()) as usize;
    // PE signature (4) + COFF header (20), then the optional header's magic.
    assert_eq!(&pe32[lfanew + 24..lfanew + 26], &[0x0b, 0x02], "w.dll is PE32+");
    pe32[lfanew + 24] = 0x0b;
    pe32[lfanew + 25] = 0x01;
    let r = host::plan(&pe32, &marker());
    assert!(matches!(r, Err(NotTransformed::Plain)), "{:?}", r.err());
    assert!(matches!(host::Host::open(&pe32), Err(host::HostError::NotHost)));

    let mut rel = read(vectors().join("generated-golden/elf/libk.so"));
    assert_eq!(&rel[16..18], &[3, 0], "libk.so is ET_DYN");
    rel[16] = 1;
    let r = host::plan(&rel, &marker());
    assert!(matches!(r, Err(NotTransformed::Plain)), "{:?}", r.err());
}
