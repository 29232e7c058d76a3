//! Tests written against the survivors of `cargo mutants` on `read.rs`,
//! `write.rs` and `mod.rs` (tests/MUTANTS.md). Archives here are written
//! byte by byte from the format description (docs/kpack-archives.md: a
//! 64-byte header `KPAK`, u32 version 1, u64 TOC offset; the blob region;
//! a MessagePack TOC to EOF), with a MessagePack writer of a few lines
//! below (fixmap/fixstr/fixarray/fixint/uint16 only), so neither the
//! crate's TOC encoder nor its reader is the oracle of the other.

use std::sync::Arc;

use super::*;
use crate::formats::bundle::ccob::Uncached;

/// MessagePack, written by hand for small values.
#[derive(Default)]
struct Mp(Vec<u8>);

impl Mp {
    fn map(mut self, n: u8) -> Self {
        assert!(n < 16);
        self.0.push(0x80 | n);
        self
    }
    fn arr(mut self, n: u8) -> Self {
        assert!(n < 16);
        self.0.push(0x90 | n);
        self
    }
    fn s(mut self, s: &str) -> Self {
        assert!(s.len() < 32);
        self.0.push(0xa0 | s.len() as u8);
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    fn u(mut self, v: u64) -> Self {
        if v < 128 {
            self.0.push(v as u8);
        } else if v < 1 << 16 {
            self.0.push(0xcd);
            self.0.extend_from_slice(&(v as u16).to_be_bytes());
        } else if v < 1 << 32 {
            self.0.push(0xce);
            self.0.extend_from_slice(&(v as u32).to_be_bytes());
        } else {
            self.0.push(0xcf);
            self.0.extend_from_slice(&v.to_be_bytes());
        }
        self
    }
}

fn header(toc_offset: u64) -> Vec<u8> {
    let mut h = b"KPAK".to_vec();
    h.extend_from_slice(&1u32.to_le_bytes());
    h.extend_from_slice(&toc_offset.to_le_bytes());
    h.resize(64, 0);
    h
}

/// TOC of a zstd archive with one key, one arch per frame (ordinal i,
/// original size `sizes[i]`), region at `offset`, `size` bytes.
fn zstd_toc(sizes: &[u64], offset: u64, size: u64) -> Vec<u8> {
    let archs = ["gfx900", "gfx906", "gfx908"];
    let mut m = Mp::default().map(8).s("format_version").u(1).s("group_name").s("g").s("gfx_arch_family").s("gfx9").s("gfx_arches").arr(sizes.len() as u8);
    for a in &archs[..sizes.len()] {
        m = m.s(a);
    }
    m = m.s("toc").map(1).s("lib/a.so#0").map(sizes.len() as u8);
    for (i, (a, n)) in archs.iter().zip(sizes).enumerate() {
        m = m.s(a).map(3).s("type").s("hsaco").s("ordinal").u(i as u64).s("original_size").u(*n);
    }
    m.s("compression_scheme").s("zstd-per-kernel").s("zstd_offset").u(offset).s("zstd_size").u(size).0
}

/// A zstd archive of `objects`, one frame each, laid out by hand.
fn zstd_archive(objects: &[&[u8]]) -> (Vec<u8>, Vec<(u64, u64)>) {
    let frames: Vec<Vec<u8>> = objects.iter().map(|o| zstd::bulk::compress(o, 3).unwrap()).collect();
    let mut region = (frames.len() as u32).to_le_bytes().to_vec();
    let mut at = Vec::new();
    for f in &frames {
        region.extend_from_slice(&(f.len() as u32).to_le_bytes());
        at.push((64 + region.len() as u64, f.len() as u64));
        region.extend_from_slice(f);
    }
    let sizes: Vec<u64> = objects.iter().map(|o| o.len() as u64).collect();
    let mut a = header(64 + region.len() as u64);
    a.extend_from_slice(&region);
    a.extend_from_slice(&zstd_toc(&sizes, 64, region.len() as u64));
    (a, at)
}

fn objects() -> [Vec<u8>; 3] {
    [b"first object".repeat(20), b"2nd".repeat(7), (0..200u8).collect()]
}

#[test]
fn zstd_archive_by_hand_opens_and_reads() {
    let objs = objects();
    let refs: Vec<&[u8]> = objs.iter().map(|o| o.as_slice()).collect();
    let (data, at) = zstd_archive(&refs);
    let a = Archive::open(&data).unwrap();
    assert_eq!(a.frames, at);
    assert_eq!(a.size, data.len() as u64);
    for (arch, want) in ["gfx900", "gfx906", "gfx908"].iter().zip(&objs) {
        assert_eq!(&a.get_kernel(&data, "lib/a.so#0", arch).unwrap(), want, "{arch}");
    }
    assert_eq!(a.toc.scheme_name(), "zstd-per-kernel");
    assert!(a.toc.has_arch("gfx906") && !a.toc.has_arch("gfx90a"));
}

/// A frame that decodes to one byte more or less than the TOC's
/// `original_size` is an error, not a shorter or longer object.
#[test]
fn original_size_must_match_the_frame() {
    let obj = b"kernel bytes".repeat(10);
    let frame = zstd::bulk::compress(&obj, 3).unwrap();
    let mut region = 1u32.to_le_bytes().to_vec();
    region.extend_from_slice(&(frame.len() as u32).to_le_bytes());
    region.extend_from_slice(&frame);
    for (claim, ok) in [(120u64, true), (119, false), (121, false)] {
        let mut data = header(64 + region.len() as u64);
        data.extend_from_slice(&region);
        data.extend_from_slice(&zstd_toc(&[claim], 64, region.len() as u64));
        let a = Archive::open(&data).unwrap();
        let r = a.get_kernel(&data, "lib/a.so#0", "gfx900");
        assert_eq!(r.is_ok(), ok, "claim {claim}: {:?}", r.as_ref().map(Vec::len));
        if ok {
            assert_eq!(r.unwrap(), obj);
        }
    }
}

/// The limits of the header (docs: TOC offset inside the file, after the
/// first 16 bytes) and of the zstd region (from offset 64, ending at or
/// before the TOC; its count and frame lengths inside it), each at the
/// boundary and one past it.
#[test]
fn frame_region_bounds() {
    let objs = objects();
    let refs: Vec<&[u8]> = objs.iter().map(|o| o.as_slice()).collect();
    let (good, _) = zstd_archive(&refs);
    let toc_at = u64::from_le_bytes(good[8..16].try_into().unwrap());
    let region = toc_at - 64;
    let with = |offset: u64, size: u64| {
        let mut d = good[..toc_at as usize].to_vec();
        d.extend_from_slice(&zstd_toc(&[240, 21, 200], offset, size));
        d
    };
    assert!(Archive::open(&with(64, region)).is_ok());
    // Region running into the TOC by one byte; starting inside the header.
    assert!(Archive::open(&with(64, region + 1)).is_err());
    assert!(Archive::open(&with(63, region)).is_err());
    // A region one byte short: the last frame runs past it.
    assert!(Archive::open(&with(64, region - 1)).is_err());
    // Region of only a count of zero frames; shorter than a count.
    let mut empty = header(68);
    empty.extend_from_slice(&0u32.to_le_bytes());
    empty.extend_from_slice(&zstd_toc(&[], 64, 4));
    assert_eq!(Archive::open(&empty).unwrap().frames, vec![]);
    let mut short = header(67);
    short.extend_from_slice(&[0, 0, 0]);
    short.extend_from_slice(&zstd_toc(&[], 64, 3));
    assert!(Archive::open(&short).is_err());
    // One empty frame needs 8 bytes (count + length); two do not fit in 8.
    for (count, ok) in [(1u32, true), (2, false)] {
        let mut d = header(72);
        d.extend_from_slice(&count.to_le_bytes());
        d.extend_from_slice(&0u32.to_le_bytes());
        d.extend_from_slice(&zstd_toc(&[], 64, 8));
        assert_eq!(Archive::open(&d).is_ok(), ok, "{count} frames in 8 bytes");
        if ok {
            assert_eq!(Archive::open(&d).unwrap().frames, vec![(72, 0)]);
        }
    }
    // A count that fits but frames whose headers run out: 3 frames claimed,
    // 12 bytes of lengths, the first frame 4 bytes long eats the rest.
    let mut d = header(80);
    d.extend_from_slice(&3u32.to_le_bytes());
    d.extend_from_slice(&4u32.to_le_bytes());
    d.extend_from_slice(&[1, 2, 3, 4]);
    d.extend_from_slice(&0u32.to_le_bytes());
    d.extend_from_slice(&zstd_toc(&[], 64, 16));
    // Refused at the third frame's length, which lies past the region
    // (not read from the TOC bytes after it).
    let r = Archive::open(&d);
    assert!(matches!(&r, Err(KpackError::TocField("zstd_size", why)) if why == "frame 2 header past the region"), "{r:?}");
}

#[test]
fn toc_offset_limits() {
    let toc = Mp::default().map(0).0;
    // The smallest archive: 16 header bytes then the TOC.
    let mut d = b"KPAK".to_vec();
    d.extend_from_slice(&1u32.to_le_bytes());
    d.extend_from_slice(&16u64.to_le_bytes());
    d.extend_from_slice(&toc);
    let a = Archive::open(&d).unwrap();
    assert_eq!((a.toc_offset, a.size), (16, 17));
    assert_eq!(a.toc.format_version, 1, "an absent format_version reads as 1");
    // TOC offset 15 (inside the header) and 17 (at EOF) are refused.
    for off in [15u64, 17] {
        let mut bad = d.clone();
        bad[8..16].copy_from_slice(&off.to_le_bytes());
        assert!(matches!(Archive::open(&bad), Err(KpackError::BadTocOffset { .. })), "offset {off}");
    }
    // Fewer than 16 bytes is not an archive.
    assert!(matches!(Archive::open(&d[..15].to_vec()), Err(KpackError::InvalidFormat)));
    let mut bad = d.clone();
    bad[4] = 2;
    assert!(matches!(Archive::open(&bad), Err(KpackError::UnsupportedVersion(2))));
}

/// `none` archives: a blob ending exactly at EOF is served; one byte past
/// it, or an ordinal past the table, is "not found".
#[test]
fn none_blob_bounds() {
    // gfx906 → ordinal 0 (5 bytes), gfx900 → ordinal 7 (no such blob).
    let blob_table = |o: u64, s: u64| {
        let mut m = Mp::default().map(3).s("gfx_arches").arr(1).s("gfx906").s("toc").map(1).s("k#0").map(2);
        m = m.s("gfx906").map(2).s("ordinal").u(0).s("original_size").u(5);
        m = m.s("gfx900").map(1).s("ordinal").u(7);
        m.s("blobs").arr(1).map(2).s("offset").u(o).s("size").u(s).0
    };
    // 16 header bytes, the blob at 16..21, the TOC from 21 to EOF.
    let archive = |size: u64| {
        let mut d = b"KPAK".to_vec();
        d.extend_from_slice(&1u32.to_le_bytes());
        d.extend_from_slice(&21u64.to_le_bytes());
        d.extend_from_slice(b"HSACO");
        d.extend_from_slice(&blob_table(16, size));
        d
    };
    let d = archive(5);
    let a = Archive::open(&d).unwrap();
    assert_eq!(a.get_kernel(&d, "k#0", "gfx906").unwrap(), b"HSACO");
    assert_eq!(a.stored_blob(&d, 0).unwrap(), b"HSACO");
    // Read through a source (and a size) cut right after the blob: a blob
    // ending exactly at EOF is served, one byte longer is "not found".
    let cut = d[..21].to_vec();
    let a_cut = Archive { size: 21, ..a.clone() };
    assert_eq!(a_cut.stored_blob(&cut, 0).unwrap(), b"HSACO");
    let d6 = archive(6);
    let a6 = Archive { size: 21, ..Archive::open(&d6).unwrap() };
    assert!(matches!(a6.stored_blob(&cut, 0), Err(KpackError::BadBlob { ordinal: 0, .. })));
    assert!(matches!(a6.get_kernel(&cut, "k#0", "gfx906"), Err(KpackError::KernelNotFound { .. })));
    // An ordinal with no blob.
    assert!(matches!(a.get_kernel(&d, "k#0", "gfx900"), Err(KpackError::KernelNotFound { .. })));
    assert!(matches!(a.stored_blob(&d, 1), Err(KpackError::BadBlob { ordinal: 1, .. })));
    let e = a.toc.entry("k#0", "gfx906").unwrap();
    assert_eq!((e.kind.as_str(), e.ordinal, e.original_size), ("hsaco", 0, 5), "absent type reads as hsaco");
    assert_eq!(a.toc.entry("k#0", "gfx900").unwrap().original_size, 0);
    assert!(a.toc.entry("k#1", "gfx906").is_none());
    assert_eq!(a.toc.scheme_name(), "none");
}

/// The reader is lenient where the runtime is (unknown scheme → `none`,
/// non-string arches and non-map entries skipped) and strict elsewhere.
#[test]
fn toc_leniency_and_strictness() {
    let parse = |b: Vec<u8>| read::parse_toc(&b);
    let t = parse(
        Mp::default()
            .map(3)
            .s("gfx_arches")
            .arr(2)
            .u(5)
            .s("gfx90a")
            .s("compression_scheme")
            .s("lz4")
            .s("toc")
            .map(2)
            .s("a")
            .u(1)
            .s("b")
            .map(1)
            .s("gfx90a")
            .map(1)
            .s("type")
            .s("x")
            .0,
    )
    .unwrap();
    assert_eq!(t.gfx_arches, ["gfx90a"]);
    assert_eq!(t.scheme, Scheme::None { blobs: vec![] });
    // "b"'s only entry has no ordinal: skipped, the key stays.
    assert_eq!(t.toc, vec![("b".to_string(), vec![])]);
    for bad in [
        Mp::default().map(1).s("gfx_arches").s("gfx90a").0,
        Mp::default().map(1).s("group_name").u(3).0,
        Mp::default().map(1).s("gfx_arch_family").u(3).0,
        Mp::default().map(1).s("toc").u(3).0,
        Mp::default().map(1).s("blobs").arr(1).map(1).s("offset").u(64).0,
        Mp::default().map(1).s("blobs").arr(1).u(64).0,
        Mp::default().map(2).s("compression_scheme").s("zstd-per-kernel").s("zstd_size").u(4).0,
        Mp::default().map(2).s("compression_scheme").s("zstd-per-kernel").s("zstd_offset").u(64).0,
        Mp::default().map(1).s("toc").map(2).s("k").map(0).s("k").map(0).0,
        Mp::default().map(1).s("toc").map(1).s("k").map(2).s("a").map(1).s("ordinal").u(0).s("a").map(1).s("ordinal").u(1).0,
        Mp::default().arr(0).0,
    ] {
        assert!(parse(bad.clone()).is_err(), "{bad:02x?}");
    }
}

/// The writer's bytes, written out by hand: header, blobs back to back
/// from 64, TOC in the reference's key order and smallest forms.
#[test]
fn none_archive_bytes_by_hand() {
    let spec = ArchiveSpec {
        group_name: "grp".into(),
        gfx_arch_family: "gfx9".into(),
        gfx_arches: vec!["gfx906".into()],
        toc: vec![
            ("lib/x.so#0".into(), vec![("gfx906".into(), EntrySpec { ordinal: 1, metadata: Some(crate::formats::msgpack::Value::from("m")) })]),
            ("bin/y#0".into(), vec![("gfx906".into(), EntrySpec { ordinal: 0, metadata: None })]),
        ],
        blobs: vec![BlobData::Owned(Arc::from(&b"abc"[..])), BlobData::Owned(Arc::from(&b"defgh"[..]))],
    };
    let toc = Mp::default()
        .map(7)
        .s("format_version")
        .u(1)
        .s("group_name")
        .s("grp")
        .s("gfx_arch_family")
        .s("gfx9")
        .s("gfx_arches")
        .arr(1)
        .s("gfx906")
        .s("toc")
        .map(2)
        .s("lib/x.so#0")
        .map(1)
        .s("gfx906")
        .map(4)
        .s("type")
        .s("hsaco")
        .s("ordinal")
        .u(1)
        .s("original_size")
        .u(5)
        .s("metadata")
        .s("m")
        .s("bin/y#0")
        .map(1)
        .s("gfx906")
        .map(3)
        .s("type")
        .s("hsaco")
        .s("ordinal")
        .u(0)
        .s("original_size")
        .u(3)
        .s("compression_scheme")
        .s("none")
        .s("blobs")
        .arr(2)
        .map(2)
        .s("offset")
        .u(64)
        .s("size")
        .u(3)
        .map(2)
        .s("offset")
        .u(67)
        .s("size")
        .u(5)
        .0;
    let mut want = header(72);
    want.extend_from_slice(b"abcdefgh");
    want.extend_from_slice(&toc);
    let (head, blobs, t) = spec.none_parts();
    assert_eq!(head.to_vec(), header(72));
    assert_eq!(blobs, vec![(64, 3), (67, 5)]);
    assert_eq!(t, toc);
    assert_eq!(spec.layout_none().materialize(&Vec::<u8>::new(), &Uncached).unwrap(), want);
    assert_eq!(BlobData::Owned(Arc::from(&b"defgh"[..])).len(), 5);
    assert!(BlobData::Owned(Arc::from(&b""[..])).is_empty() && !BlobData::Source { offset: 9, len: 1 }.is_empty());

    // zstd-per-kernel from given frames: count, then each length and frame.
    let frames = vec![b"F1".to_vec(), b"FRAME2".to_vec()];
    let region = 4 + (4 + 2) + (4 + 6);
    // Same TOC as above apart from the scheme.
    let mut ztoc = Vec::new();
    let mut m = Mp::default().map(8).s("format_version").u(1).s("group_name").s("grp").s("gfx_arch_family").s("gfx9").s("gfx_arches").arr(1).s("gfx906");
    m = m.s("toc").map(2).s("lib/x.so#0").map(1).s("gfx906").map(4).s("type").s("hsaco").s("ordinal").u(1).s("original_size").u(5).s("metadata").s("m");
    m = m.s("bin/y#0").map(1).s("gfx906").map(3).s("type").s("hsaco").s("ordinal").u(0).s("original_size").u(3);
    ztoc.extend_from_slice(&m.s("compression_scheme").s("zstd-per-kernel").s("zstd_offset").u(64).s("zstd_size").u(region).0);
    let mut zwant = header(64 + region);
    zwant.extend_from_slice(&2u32.to_le_bytes());
    zwant.extend_from_slice(&2u32.to_le_bytes());
    zwant.extend_from_slice(b"F1");
    zwant.extend_from_slice(&6u32.to_le_bytes());
    zwant.extend_from_slice(b"FRAME2");
    zwant.extend_from_slice(&ztoc);
    assert_eq!(spec.bytes_zstd_frames(&frames), zwant);
    let (zh, zt) = spec.zstd_parts(&[2, 6]);
    assert_eq!((zh.to_vec(), zt), (header(64 + region), ztoc));

    // Streamed zstd: the returned length is the archive's, every frame
    // holds its content size and a checksum and decodes to the object.
    let z = spec.bytes_zstd(&Vec::<u8>::new(), &Uncached, 3).unwrap();
    let mut cur = std::io::Cursor::new(Vec::new());
    assert_eq!(spec.write_zstd(&Vec::<u8>::new(), &Uncached, 3, &mut cur).unwrap(), z.len() as u64);
    let a = Archive::open(&z).unwrap();
    assert_eq!(a.toc_offset, 64 + a.frames.iter().map(|(_, n)| 4 + n).sum::<u64>() + 4);
    for (i, want) in [&b"abc"[..], b"defgh"].iter().enumerate() {
        let f = a.stored_blob(&z, i as u64).unwrap();
        // Frame header descriptor: checksum flag (bit 2) and a content size.
        assert_eq!(&f[..4], [0x28, 0xb5, 0x2f, 0xfd]);
        assert!(f[4] & 0x04 != 0, "frame {i} has no checksum");
        assert_eq!(zstd::zstd_safe::get_frame_content_size(&f).ok().flatten(), Some(want.len() as u64));
        assert_eq!(&zstd::stream::decode_all(&f[..]).unwrap(), want);
    }
}

/// A file of `size` bytes that are zero except for the `pieces` written
/// at their offsets: archives at the size limits (a 256 MiB TOC, a 4 GiB
/// region, a million frames) without writing them out.
struct Sparse {
    size: u64,
    pieces: Vec<(u64, Vec<u8>)>,
}

impl crate::io::ReadAt for Sparse {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.size.saturating_sub(offset).min(buf.len() as u64) as usize;
        let buf = &mut buf[..n];
        buf.fill(0);
        let end = offset + n as u64;
        for (at, bytes) in &self.pieces {
            let (from, to) = ((*at).max(offset), (at + bytes.len() as u64).min(end));
            if from < to {
                buf[(from - offset) as usize..(to - offset) as usize].copy_from_slice(&bytes[(from - at) as usize..(to - at) as usize]);
            }
        }
        Ok(n)
    }

    fn size(&self) -> std::io::Result<u64> {
        Ok(self.size)
    }
}

/// A header of exactly 16 bytes (magic, version, TOC offset) is read
/// whole: its version and TOC offset are judged, not its length.
#[test]
fn a_16_byte_header_is_judged_by_its_fields() {
    let mut d = b"KPAK".to_vec();
    d.extend_from_slice(&2u32.to_le_bytes());
    d.extend_from_slice(&16u64.to_le_bytes());
    assert!(matches!(Archive::open(&d), Err(KpackError::UnsupportedVersion(2))));
    d[4] = 1;
    assert!(matches!(Archive::open(&d), Err(KpackError::BadTocOffset { offset: 16, size: 16 })));
}

/// The TOC may be up to 256 MiB (docs/kpack-archives.md, "toc_offset not
/// inside the file": refused if the TOC exceeds 256 MiB), wherever it
/// starts: exactly 256 MiB is read (a map, then padding to EOF), one byte
/// more is refused, and a small TOC at the end of a 300 MiB file is fine.
#[test]
fn toc_up_to_256_mib() {
    const MIB: u64 = 1 << 20;
    let head = |toc_at: u64| header(toc_at)[..16].to_vec();
    let toc = Mp::default().map(1).s("group_name").s("g").0;
    let file = |size: u64, toc_at: u64| Sparse { size, pieces: vec![(0, head(toc_at)), (toc_at, toc.clone())] };
    let a = Archive::open(&file(16 + 256 * MIB, 16)).unwrap();
    assert_eq!((a.toc_offset, a.toc.group_name.as_str()), (16, "g"));
    assert!(matches!(Archive::open(&file(16 + 256 * MIB + 1, 16)), Err(KpackError::BadTocOffset { offset: 16, .. })));
    let a = Archive::open(&file(300 * MIB, 300 * MIB - toc.len() as u64)).unwrap();
    assert_eq!(a.toc.group_name, "g");
}

/// The runtime's limits on a `zstd-per-kernel` region (docs/kpack-archives.md:
/// at most 4 GiB, at most 2^20 frames), each at the limit and one past it;
/// and a count that cannot fit is refused as such, before any frame is read.
#[test]
fn frame_count_and_region_limits() {
    let archive = |count: u32, zsize: u64| {
        let toc_at = 64 + zsize;
        let toc = zstd_toc(&[], 64, zsize);
        Sparse { size: toc_at + toc.len() as u64, pieces: vec![(0, header(toc_at)), (64, count.to_le_bytes().to_vec()), (toc_at, toc)] }
    };
    // 2^20 empty frames (count, then 2^20 zero lengths) and one more.
    let max = 1u32 << 20;
    assert_eq!(Archive::open(&archive(max, 4 + 4 * max as u64)).unwrap().frames.len(), max as usize);
    let too_many = Archive::open(&archive(max + 1, 4 + 4 * (max as u64 + 1)));
    assert!(matches!(&too_many, Err(KpackError::TocField("zstd_size", why)) if why.contains("do not fit")), "{too_many:?}");
    // A 4 GiB region holding no frames, and one byte more.
    assert_eq!(Archive::open(&archive(0, 4 << 30)).unwrap().frames, vec![]);
    assert!(matches!(Archive::open(&archive(0, (4 << 30) + 1)), Err(KpackError::TocField("zstd_offset", _))));
    // Two frames' lengths cannot fit in an 8-byte region: refused by the
    // count check (not by reading past the region).
    for (count, zsize) in [(2u32, 8u64), (3, 12), (1, 4)] {
        let r = Archive::open(&archive(count, zsize));
        assert!(matches!(&r, Err(KpackError::TocField("zstd_size", why)) if why.contains(&format!("{count} frames do not fit"))), "{count} in {zsize}: {r:?}");
    }
}

/// The writer refuses a blob region over 4 GiB, the runtime's limit
/// (docs/kpack-archives.md, writing step 3), and no less: a region of
/// exactly 4 GiB is one the reader opens (`frame_count_and_region_limits`).
/// Checked on the limit alone: 4 GiB of frames is no unit test.
#[test]
fn writer_region_limit_is_the_readers() {
    assert!(write::check_region(4 << 30).is_ok());
    assert!(write::check_region((4 << 30) - 1).is_ok());
    assert!(matches!(write::check_region((4 << 30) + 1), Err(KpackError::Decompress(why)) if why.contains("over 4 GiB")));
}
