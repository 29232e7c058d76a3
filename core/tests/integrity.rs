//! Never a wrong byte from a damaged compressed bundle, through the view:
//! a CCOB whose payload was changed so that it still decodes (zstd frames
//! carry no checksum) is caught by its header's hash, and every read of
//! its code objects fails (EIO at the mount) — for `none` archives (served
//! from extents) and `zstd-per-kernel` ones (written whole) alike — while
//! the other bundles of the same library are served exactly as
//! clang-offload-bundler extracted them (committed goldens).

mod common;

use std::fs;
use std::path::Path;

use common::{assets, read};
use kpackfs_core::formats::bundle::{self, ccob, BundleError, CcobMethod, Chunk};
use kpackfs_core::formats::elf::ElfFile;
use kpackfs_core::formats::kpack::Archive;
use kpackfs_core::formats::target::Selection;
use kpackfs_core::view::{self, ArchiveCompression, ArchiveNaming, View, ViewConfig};

fn view(src: &Path, compression: ArchiveCompression) -> View {
    View::new(ViewConfig {
        source: src.to_path_buf(),
        selection: Selection::parse("gfx90a,gfx1030").unwrap(),
        cache_bytes: 8 << 20,
        naming: ArchiveNaming::TargetId,
        compression,
        db_rules: Default::default(),
    })
    .unwrap()
}

fn read_all(v: &View, rel: &str) -> Result<Vec<u8>, view::Error> {
    let f = v.open_path(Path::new(rel))?;
    let mut b = vec![0u8; f.len() as usize];
    let n = f.read_at(0, &mut b)?;
    assert_eq!(n, b.len(), "{rel}: short read");
    Ok(b)
}

/// clang-offload-bundler's object of libtwo.so for wrapper `w` (wrapper i
/// points at bundle i: test_assets/expected/libtwo.so/layout.tsv).
fn golden(w: usize, arch: &str) -> Vec<u8> {
    read(assets().join("expected/libtwo.so").join(w.to_string()).join(format!("{arch}.co")))
}

/// libtwo.so with each bundle replaced in place by a CCOB v3 zstd of
/// itself plus a 96 KiB host entry of zeros (which compresses to almost
/// nothing and carries no device code): decoded content over 64 KiB, so
/// the view plans from a decoded prefix (the entry table) and reads the
/// objects through its checked decodes, as for real libraries. Returns
/// (intact, damaged, offset of the damaged CCOB): the damaged copy has one
/// payload byte of bundle 0 changed such that the CCOB still decodes —
/// the same entry table, other object bytes.
fn padded_ccob_libtwo() -> (Vec<u8>, Vec<u8>, u64) {
    let fat = read(assets().join("bin/libtwo.so"));
    let elf = ElfFile::parse(&fat).unwrap();
    let sec = elf.fatbin().unwrap();
    let mut good = fat.clone();
    let mut first = None;
    for c in bundle::scan_fatbin(&fat, sec.offset, sec.offset + sec.size).unwrap() {
        let Chunk::Plain { at, bundle: b } = c else { panic!("libtwo.so has plain bundles") };
        let payloads: Vec<(String, Vec<u8>)> =
            b.entries.iter().map(|e| (e.id.clone(), fat[(at + e.offset) as usize..(at + e.offset + e.size) as usize].to_vec())).collect();
        let mut entries: Vec<(&str, &[u8])> = payloads.iter().map(|(id, p)| (id.as_str(), p.as_slice())).collect();
        let pad = vec![0u8; 96 << 10];
        entries.push(("host-x86_64-unknown-linux-gnu-padding", &pad));
        let content = bundle::write_bundle(&entries, 4096);
        let mut packed = ccob::encode(&content, 3, CcobMethod::Zstd, 3).unwrap();
        assert!(packed.len() as u64 <= b.len, "the CCOB fits the bundle's place");
        packed.resize(b.len as usize, 0);
        good[at as usize..(at + b.len) as usize].copy_from_slice(&packed);
        first.get_or_insert(at);
    }
    let at = first.unwrap();
    let chunk = bundle::parse_chunk(&good, at, sec.offset + sec.size).unwrap();
    let Chunk::Compressed { len, header, .. } = &chunk else { panic!("not a CCOB") };
    assert!(header.uncompressed_size > 64 << 10);
    let intact = ccob::decode(&good, at, *len, header).unwrap();
    let table = bundle::parse_bundle(&intact, 0, intact.len() as u64).unwrap().header_len as usize;
    for i in (at + header.header_len + 16)..(at + len) {
        let mut bad = good.clone();
        bad[i as usize] ^= 0x01;
        match ccob::decode_range_prechecked(&bad, at, *len, header, 0, header.uncompressed_size) {
            Ok(d) if d != intact && d[..table] == intact[..table] => {
                assert!(matches!(ccob::decode(&bad, at, *len, header), Err(BundleError::HashMismatch { .. })));
                return (good, bad, at);
            }
            _ => continue,
        }
    }
    panic!("no payload flip decodes silently");
}

#[test]
fn a_damaged_ccob_is_eio_through_the_view_never_other_bytes() {
    let t = tempfile::tempdir().unwrap();
    let (good, bad, at) = padded_ccob_libtwo();
    for (what, bytes) in [("intact", &good), ("damaged", &bad)] {
        let src = t.path().join(what);
        fs::create_dir_all(src.join("lib")).unwrap();
        fs::write(src.join("lib/libtwo.so"), bytes).unwrap();
        for compression in [ArchiveCompression::None, ArchiveCompression::Auto] {
            let v = view(&src, compression);
            for arch in ["gfx90a", "gfx1030"] {
                let rel = format!("lib/.kpack/libtwo.so_{arch}.kpack");
                let r = read_all(&v, &rel);
                if what == "intact" {
                    let a = r.unwrap_or_else(|e| panic!("{rel}: {e}"));
                    let archive = Archive::open(&a).unwrap();
                    for w in 0..2 {
                        let key = format!("lib/libtwo.so#{w}");
                        assert!(archive.get_kernel(&a, &key, arch).unwrap() == golden(w, arch), "{rel} {key}: not clang-offload-bundler's object");
                    }
                    continue;
                }
                let e = r.map(|b| b.len()).expect_err("a damaged bundle's object was served");
                // Damaged data (each adapter answers it with its I/O error).
                assert!(matches!(e, view::Error::Layout(_) | view::Error::Cache(_)), "{rel}: {e:?}");
                if compression == ArchiveCompression::None {
                    // The typed error, naming the CCOB, reaches the edge.
                    assert!(
                        matches!(&e, view::Error::Layout(l) if matches!(l.decode_error(), Some(BundleError::HashMismatch { at: a, .. }) if *a == at)),
                        "{rel}: {e:?}"
                    );
                    // The sound bundle's object still reads exactly, and
                    // the damaged one fails however often it is asked for.
                    let f = v.open_path(Path::new(&rel)).unwrap();
                    let n = f.len() as usize;
                    let mut whole = vec![0u8; n];
                    for _ in 0..2 {
                        assert!(f.read_at(0, &mut whole).is_err());
                    }
                    let plain = read_all(&view(&t.path().join("intact"), ArchiveCompression::None), &rel).unwrap();
                    let pa = Archive::open(&plain).unwrap();
                    let kpackfs_core::formats::kpack::Scheme::None { blobs } = &pa.toc.scheme else { panic!() };
                    let e1 = pa.toc.entry("lib/libtwo.so#1", arch).unwrap();
                    let (off, len) = blobs[e1.ordinal as usize];
                    let mut obj = vec![0u8; len as usize];
                    assert_eq!(f.read_at(off, &mut obj).unwrap(), len as usize);
                    assert!(obj == golden(1, arch), "{rel}: the sound bundle's object differs");
                    let e0 = pa.toc.entry("lib/libtwo.so#0", arch).unwrap();
                    let (off, len) = blobs[e0.ordinal as usize];
                    let mut obj = vec![0u8; len as usize];
                    assert!(f.read_at(off, &mut obj).is_err(), "{rel}: the damaged bundle's object was served");
                }
            }
        }
    }
}
