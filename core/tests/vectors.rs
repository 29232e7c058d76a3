//! Compatibility with real data: golden fatbin dumps (plain and CCOB) against
//! clang-offload-bundler's extraction, and upstream `.kpack` archives read
//! with their exact TOC and re-written byte for byte.

mod common;

use common::{assets, read, vectors, without_checksum};
use kpackfs_core::formats::bundle::ccob::Uncached;
use kpackfs_core::formats::bundle::{self, ccob, Chunk, ObjectLocation};
use kpackfs_core::formats::kpack::{Archive, ArchiveSpec, BlobData, EntrySpec, Scheme};

fn expected(name: &str) -> Vec<u8> {
    read(assets().join("expected/golden").join(name))
}

/// (arch, chunk index, bytes) of every code object in a fatbin dump.
fn extract(file: &str) -> Vec<(String, usize, Vec<u8>)> {
    let data = read(vectors().join("generated-golden/fatbin").join(file));
    let objs = bundle::fatbin_objects(&data, 0, data.len() as u64).unwrap_or_else(|e| panic!("{file}: {e}"));
    objs.iter().map(|o| (o.arch.clone(), o.chunk_index, bundle::read_object(&data, &o.location).unwrap())).collect()
}

fn libk2_objects() -> Vec<(String, usize, Vec<u8>)> {
    vec![
        ("gfx1030".into(), 0, expected("libk2_b0_gfx1030.co")),
        ("gfx90a".into(), 0, expected("libk2_b0_gfx90a.co")),
        ("gfx1030".into(), 1, expected("libk2_b1_gfx1030.co")),
        ("gfx90a".into(), 1, expected("libk2_b1_gfx90a.co")),
    ]
}

#[test]
fn plain_fatbins_match_clang_offload_bundler() {
    let want = libk2_objects();
    assert_eq!(extract("libk2_fatbin_two_bundles.bin"), want);
    let sizes: Vec<usize> = want.iter().map(|o| o.2.len()).collect();
    assert_eq!(sizes, [3656, 4488, 3648, 4480]);
    // libk.so is k.hip alone: the same code objects as libk2's bundle 0.
    assert_eq!(extract("libk_fatbin_uncompressed.bin"), want[..2].to_vec());
}

#[test]
fn every_ccob_variant_decodes_to_the_same_objects() {
    let want = libk2_objects();
    // v1 and zlib are rejected by the reference tool (B8); we must accept them.
    for f in ["ccob_v1_zstd.bin", "ccob_v2_zlib.bin", "ccob_v2_zstd.bin", "ccob_v3_zstd.bin"] {
        assert_eq!(extract(f), want[..2].to_vec(), "{f}");
    }
    let multi = extract("multi_ccob_v3_padded.bin");
    let want_multi: Vec<_> = want.iter().map(|(a, i, b)| (a.clone(), *i, b.clone())).collect();
    assert_eq!(multi, want_multi);
}

#[test]
fn ccob_headers_match_the_spec_table() {
    // FORMATS.md §8.2: all wrap the 12680-byte bundle 0 of libk2.
    for (f, version, zstd, total) in [
        ("ccob_v3_zstd.bin", 3, true, Some(0x6ba)),
        ("ccob_v2_zstd.bin", 2, true, Some(0x6b2)),
        ("ccob_v2_zlib.bin", 2, false, Some(0x6a9)),
        ("ccob_v1_zstd.bin", 1, true, None),
    ] {
        let data = read(vectors().join("generated-golden/fatbin").join(f));
        let chunks = bundle::scan_fatbin(&data, 0, data.len() as u64).unwrap();
        assert_eq!(chunks.len(), 1, "{f}");
        let Chunk::Compressed { header, len, .. } = &chunks[0] else { panic!("{f}: not CCOB") };
        assert_eq!(header.version, version);
        assert_eq!(header.method == bundle::CcobMethod::Zstd, zstd);
        assert_eq!(header.total_size, total);
        assert_eq!(header.uncompressed_size, 12680);
        assert_eq!(header.hash.to_le_bytes(), [0xf0, 0xb0, 0x6d, 0x9a, 0x77, 0x77, 0x14, 0x9e]);
        // v1's length comes from the decoder; all files hold one CCOB plus
        // at most the section's trailing NUL.
        assert!(data.len() as u64 - len <= 1, "{f}: len {len} of {}", data.len());
        // Our encoder reproduces the header (and a decodable payload).
        let inner = ccob::decode(&data, 0, *len, header).unwrap();
        let method = if zstd { bundle::CcobMethod::Zstd } else { bundle::CcobMethod::Zlib };
        let again = ccob::encode(&inner, version, method, 3).unwrap();
        let head_len = header.header_len as usize;
        let skip_total = if version == 1 { 0..0 } else { 8..if version == 3 { 16 } else { 12 } };
        let strip = |b: &[u8]| -> Vec<u8> { b[..head_len].iter().enumerate().filter(|(i, _)| !skip_total.contains(i)).map(|(_, x)| *x).collect() };
        assert_eq!(strip(&again), strip(&data[..head_len]), "{f}: header fields");
        // The header a layout carries for its decoder is the stored one,
        // byte for byte (clang-offload-bundler wrote these).
        assert_eq!(header.to_bytes(), &data[..head_len], "{f}: header as the layout carries it");
        assert_eq!(ccob::encoded_header(&ccob::encoded(0, *len, header)).unwrap(), *header, "{f}");
    }
}

#[test]
fn ccob_objects_are_located_inside_the_decoded_blob() {
    let data = read(vectors().join("generated-golden/fatbin/multi_ccob_v3_padded.bin"));
    let objs = bundle::fatbin_objects(&data, 0, data.len() as u64).unwrap();
    assert_eq!(objs.len(), 4);
    for o in &objs {
        assert!(matches!(o.location, ObjectLocation::InCcob { .. }));
    }
}

#[test]
fn truncated_and_corrupt_ccobs_are_errors_not_panics() {
    let data = read(vectors().join("generated-golden/fatbin/ccob_v3_zstd.bin"));
    for cut in [3usize, 10, 31, 40, 200, data.len() - 2] {
        let d = data[..cut].to_vec();
        let r = bundle::fatbin_objects(&d, 0, d.len() as u64)
            .and_then(|objs| objs.iter().map(|o| bundle::read_object(&d, &o.location)).collect::<Result<Vec<_>, _>>());
        assert!(r.is_err(), "cut at {cut} accepted");
    }
    // A lying uncompressed size (bomb claim) is refused before decoding.
    let mut bomb = data.clone();
    bomb[16..24].copy_from_slice(&(3u64 << 30).to_le_bytes());
    assert!(bundle::scan_fatbin(&bomb, 0, bomb.len() as u64).is_err());
    // A flipped payload byte is an error: never other code objects.
    let mut flip = data.clone();
    flip[100] ^= 0xff;
    assert!(extract_bytes(&flip).is_err(), "a damaged payload was decoded");
}

/// Every device code object of the blobs at `starts` of a fatbin dump, as
/// (arch, chunk index, bytes), or the first error of listing or reading
/// them. Blobs are taken at known offsets, as the loader and the view take
/// them (from wrapper pointers), not found by scanning: a scan steps over
/// a blob whose magic is damaged and renumbers the rest.
fn extract_at(data: &[u8], starts: &[u64]) -> Result<Vec<(String, usize, Vec<u8>)>, bundle::BundleError> {
    let data = data.to_vec();
    let mut out = Vec::new();
    for (i, at) in starts.iter().enumerate() {
        let chunk = bundle::parse_chunk(&data, *at, data.len() as u64)?;
        for o in bundle::chunk_objects(&data, &chunk, i)? {
            out.push((o.arch.clone(), o.chunk_index, bundle::read_object(&data, &o.location)?));
        }
    }
    Ok(out)
}

fn extract_bytes(data: &[u8]) -> Result<Vec<(String, usize, Vec<u8>)>, bundle::BundleError> {
    extract_at(data, &[0])
}

/// Never a wrong byte from a damaged CCOB: each byte of each CCOB vector
/// (every version × method, one or two envelopes), replaced by two other
/// values (all bits flipped; one bit flipped), gives an error or exactly
/// the objects clang-offload-bundler extracted from the uncompressed
/// original (committed goldens). zstd frames carry no checksum, so without
/// the header's MD5 hash being checked hundreds of these decode silently to
/// other code. Besides the committed vectors, the v1 and v3 zlib
/// envelopes (and the rest of the grid) are wrapped here around the
/// uncompressed bundle; the oracle is the goldens either way.
#[test]
fn every_byte_flip_of_a_ccob_is_an_error_or_the_exact_objects() {
    let want = libk2_objects();
    let bundle0 = read(vectors().join("generated-golden/fatbin/libk_fatbin_uncompressed.bin"));
    let bundle0 = &bundle0[..12680];
    type Objects = Vec<(String, usize, Vec<u8>)>;
    let mut cases: Vec<(String, Vec<u8>, Vec<u64>, Objects)> = Vec::new();
    for f in ["ccob_v1_zstd.bin", "ccob_v2_zlib.bin", "ccob_v2_zstd.bin", "ccob_v3_zstd.bin"] {
        cases.push((f.into(), read(vectors().join("generated-golden/fatbin").join(f)), vec![0], want[..2].to_vec()));
    }
    // Two envelopes, the second at 0x1000 (README of the vectors).
    cases.push(("multi_ccob_v3_padded.bin".into(), read(vectors().join("generated-golden/fatbin/multi_ccob_v3_padded.bin")), vec![0, 0x1000], want.clone()));
    for version in [1u16, 2, 3] {
        for method in [bundle::CcobMethod::Zstd, bundle::CcobMethod::Zlib] {
            let ccob = ccob::encode(bundle0, version, method, 3).unwrap();
            cases.push((format!("encoded v{version} {method:?}"), ccob, vec![0], want[..2].to_vec()));
        }
    }
    for (name, data, starts, want) in &cases {
        assert_eq!(&extract_at(data, starts).unwrap_or_else(|e| panic!("{name}: {e}")), want, "{name}: intact");
        let (mut refused, mut same) = (0, 0);
        for i in 0..data.len() {
            for x in [0xffu8, 1 << (i % 8)] {
                let mut d = data.clone();
                d[i] ^= x;
                match extract_at(&d, starts) {
                    Err(_) => refused += 1,
                    Ok(got) => {
                        assert!(&got == want, "{name}: byte {i} ^ {x:#x} decodes to other code objects");
                        same += 1;
                    }
                }
            }
        }
        eprintln!("{name}: {refused} flips refused, {same} gave the exact objects");
    }
}

fn upstream(name: &str) -> Vec<u8> {
    read(vectors().join("upstream-kpack").join(name))
}

#[test]
fn upstream_noop_archive_has_the_documented_toc() {
    let data = upstream("test_noop.kpack");
    assert_eq!(data.len(), 903);
    let a = Archive::open(&data).unwrap();
    assert_eq!(a.toc_offset, 570);
    let t = &a.toc;
    assert_eq!(t.format_version, 1);
    assert_eq!(t.group_name, "test");
    assert_eq!(t.gfx_arch_family, "gfx900X");
    assert_eq!(t.gfx_arches, ["gfx900", "gfx906"]);
    assert_eq!(t.scheme, Scheme::None { blobs: vec![(64, 119), (183, 219), (402, 168)] });
    let keys: Vec<&str> = t.toc.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["lib/libtest.so#0", "bin/testapp#0"]);
    let e = t.entry("lib/libtest.so#0", "gfx906").unwrap();
    assert_eq!((e.kind.as_str(), e.ordinal, e.original_size), ("hsaco", 1, 219));
    let e = t.entry("bin/testapp#0", "gfx900").unwrap();
    assert_eq!((e.ordinal, e.original_size), (2, 168));
    let k1 = a.get_kernel(&data, "lib/libtest.so#0", "gfx900").unwrap();
    assert_eq!(k1.len(), 119);
    assert!(k1.starts_with(b"KERNEL1_GFX900_DATA") && k1[19..].iter().all(|b| *b == 0));
    let k3 = a.get_kernel(&data, "bin/testapp#0", "gfx900").unwrap();
    assert!(k3.starts_with(b"KERNEL3_APP_GFX900") && k3[18..].iter().all(|b| *b == 0xff));
    assert!(a.get_kernel(&data, "lib/libtest.so#999", "gfx900").is_err());
    assert!(a.get_kernel(&data, "bin/testapp#0", "gfx906").is_err());
}

#[test]
fn upstream_zstd_archive_has_the_documented_toc() {
    let data = upstream("test_zstd.kpack");
    assert_eq!(data.len(), 518);
    let a = Archive::open(&data).unwrap();
    assert_eq!(a.toc_offset, 198);
    assert_eq!(a.toc.scheme, Scheme::Zstd { offset: 64, size: 134 });
    assert_eq!(a.frames, vec![(72, 41), (117, 41), (162, 36)]);
    assert_eq!(a.toc.gfx_arches, ["gfx1100", "gfx1101"]);
    assert_eq!(a.toc.gfx_arch_family, "gfx110X");
    let k = a.get_kernel(&data, "lib/libhip.so#0", "gfx1100").unwrap();
    let mut want = b"HIP_KERNEL_GFX1100_".to_vec();
    want.extend(std::iter::repeat_n(b'A', 500));
    want.extend(std::iter::repeat_n(b'B', 500));
    assert_eq!(k, want);
    let k = a.get_kernel(&data, "lib/libhip.so#0", "gfx1101").unwrap();
    assert_eq!(k.len(), 619);
    let k = a.get_kernel(&data, "bin/hiptest#0", "gfx1100").unwrap();
    assert_eq!(k.len(), 1018);
    assert!(k.starts_with(b"TEST_APP_KERNEL___") && k[18..].iter().all(|b| *b == b'B'));
}

/// Rebuilds an archive from its parsed entries and blob contents.
fn spec_from(a: &Archive, data: &[u8], decompress: bool) -> ArchiveSpec {
    let t = &a.toc;
    let n = match &t.scheme {
        Scheme::None { blobs } => blobs.len(),
        Scheme::Zstd { .. } => a.frames.len(),
    };
    let mut spec = ArchiveSpec {
        group_name: t.group_name.clone(),
        gfx_arch_family: t.gfx_arch_family.clone(),
        gfx_arches: t.gfx_arches.clone(),
        toc: t
            .toc
            .iter()
            .map(|(k, archs)| (k.clone(), archs.iter().map(|(ar, e)| (ar.clone(), EntrySpec { ordinal: e.ordinal, metadata: e.metadata.clone() })).collect()))
            .collect(),
        blobs: Vec::new(),
    };
    for ord in 0..n as u64 {
        let raw = a.stored_blob(&data.to_vec(), ord).unwrap();
        let bytes = if decompress {
            let size = t.toc.iter().flat_map(|(_, v)| v).find(|(_, e)| e.ordinal == ord).unwrap().1.original_size;
            zstd::bulk::decompress(&raw, size as usize).unwrap()
        } else {
            raw
        };
        spec.blobs.push(BlobData::Owned(bytes.into()));
    }
    spec
}

#[test]
fn upstream_archives_rewrite_byte_for_byte() {
    let data = upstream("test_noop.kpack");
    let a = Archive::open(&data).unwrap();
    let spec = spec_from(&a, &data, false);
    let out = spec.layout_none().materialize(&data, &Uncached).unwrap();
    assert_eq!(out, data);

    let data = upstream("test_zstd.kpack");
    let a = Archive::open(&data).unwrap();
    let spec = spec_from(&a, &data, true);
    let frames: Vec<Vec<u8>> = (0..3).map(|o| a.stored_blob(&data, o).unwrap()).collect();
    assert_eq!(spec.bytes_zstd_frames(&frames), data);
    // Compressing afresh at the reference's level 3 gives the same frames,
    // plus the content checksum the reference leaves out; the rest of the
    // archive is the reference's with the region's size adjusted.
    let fresh = spec.bytes_zstd(&data, &Uncached, 3).unwrap();
    let fa = Archive::open(&fresh).unwrap();
    for (o, up) in frames.iter().enumerate() {
        assert_eq!(&without_checksum(&fa.stored_blob(&fresh, o as u64).unwrap()), up, "frame {o}");
    }
    assert_eq!(fresh.len(), data.len() + 4 * frames.len(), "only the checksums were added");
}

#[test]
fn splitter_archives_read_and_rewrite() {
    // Archives written by the reference splitter (with `metadata` entries).
    for f in ["test_lib_gfx1030.kpack", "test_lib_gfx90a.kpack", "test_lib_gfx90a_xnack+.kpack", "test_lib_gfx90a_xnack-.kpack"] {
        let data = read(vectors().join("generated-golden/kpack").join(f));
        let a = Archive::open(&data).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert_eq!(a.toc.group_name, "test_lib");
        let spec = spec_from(&a, &data, false);
        assert_eq!(spec.layout_none().materialize(&data, &Uncached).unwrap(), data, "{f}");
    }
    let data = read(vectors().join("generated-golden/kpack/test_lib_gfx1030.kpack"));
    let a = Archive::open(&data).unwrap();
    let keys: Vec<&str> = a.toc.toc.iter().map(|(k, _)| k.as_str()).collect();
    assert!(keys.contains(&"stage/lib/libk2.so#0") && keys.contains(&"stage/lib/libk2.so#1") && keys.contains(&"stage/bin/app_pie#0"));
    // libk2's gfx1030 objects are clang-offload-bundler's.
    assert_eq!(a.get_kernel(&data, "stage/lib/libk2.so#0", "gfx1030").unwrap(), expected("libk2_b0_gfx1030.co"));
    assert_eq!(a.get_kernel(&data, "stage/lib/libk2.so#1", "gfx1030").unwrap(), expected("libk2_b1_gfx1030.co"));
}

#[test]
fn hostile_archives_are_errors() {
    let data = upstream("test_noop.kpack");
    let mut bad = data.clone();
    bad[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(Archive::open(&bad).is_err());
    let mut bad = data.clone();
    bad[4] = 2;
    assert!(Archive::open(&bad).is_err());
    assert!(Archive::open(&data[..10].to_vec()).is_err());
    assert!(Archive::open(&data[..600].to_vec()).is_err());
    // Blob table pointing past EOF: open works, the kernel is not found.
    let mut bad = data.clone();
    let len = bad.len();
    bad.truncate(len); // TOC intact; cut blob region by moving the offset is covered by truncation above.
    let a = Archive::open(&bad).unwrap();
    let short = bad[..500].to_vec();
    assert!(a.get_kernel(&short, "bin/testapp#0", "gfx900").is_err());
    let z = upstream("test_zstd.kpack");
    let mut badz = z.clone();
    badz[64] = 0xff; // frame count
    assert!(Archive::open(&badz).is_err());
}
