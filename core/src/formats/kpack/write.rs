//! Writing `.kpack` archives byte-compatible with the reference writer
//! (FORMATS.md §5.2–5.4): key order, smallest MessagePack forms, no blob
//! alignment.

use std::io::{Seek, SeekFrom, Write};
use std::sync::Arc;

use crate::formats::msgpack::{self, Value};
use crate::io::ReadAt;
use crate::layout::{Decoder, Encoded, Layout, LayoutError};

use super::{KpackError, Scheme, Toc, TocEntry, HEADER_LEN, KPACK_MAGIC, KPACK_VERSION, SCHEME_NONE, SCHEME_ZSTD};

/// Where a code object to archive comes from.
#[derive(Debug, Clone)]
pub enum BlobData {
    /// A range of the source file (uncompressed bundle payload).
    Source { offset: u64, len: u64 },
    /// A range of a decoded CCOB.
    Decoded { blob: Arc<Encoded>, offset: u64, len: u64 },
    /// Bytes in memory.
    Owned(Arc<[u8]>),
}

impl BlobData {
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn len(&self) -> u64 {
        match self {
            BlobData::Source { len, .. } | BlobData::Decoded { len, .. } => *len,
            BlobData::Owned(b) => b.len() as u64,
        }
    }

    fn push_to(&self, l: &mut Layout) {
        match self {
            BlobData::Source { offset, len } => l.push_source(*offset, *len),
            BlobData::Decoded { blob, offset, len } => l.push_decoded(blob.clone(), *offset, *len),
            BlobData::Owned(b) => l.push_bytes(b.clone()),
        }
    }

    /// The bytes, for writers that must transform them (compression).
    pub fn read(&self, src: &dyn ReadAt, blobs: &dyn Decoder) -> Result<Vec<u8>, LayoutError> {
        let mut l = Layout::new();
        self.push_to(&mut l);
        l.materialize(src, blobs)
    }
}

/// One TOC entry as the caller specifies it; the ordinal indexes `blobs`.
#[derive(Debug, Clone)]
pub struct EntrySpec {
    pub ordinal: u64,
    pub metadata: Option<Value>,
}

/// Everything an archive holds, before choosing a compression scheme.
#[derive(Debug, Clone, Default)]
pub struct ArchiveSpec {
    pub group_name: String,
    pub gfx_arch_family: String,
    pub gfx_arches: Vec<String>,
    /// Binary key → arch key → entry, in writing order.
    pub toc: Vec<(String, Vec<(String, EntrySpec)>)>,
    pub blobs: Vec<BlobData>,
}

impl ArchiveSpec {
    /// Adds an entry, reusing an existing blob ordinal when given.
    pub fn add(&mut self, key: &str, arch: &str, ordinal: u64) {
        let pos = match self.toc.iter().position(|(k, _)| k == key) {
            Some(p) => p,
            None => {
                self.toc.push((key.to_string(), Vec::new()));
                self.toc.len() - 1
            }
        };
        self.toc[pos].1.push((arch.to_string(), EntrySpec { ordinal, metadata: None }));
    }

    fn entries(&self) -> Vec<(String, Vec<(String, TocEntry)>)> {
        self.toc
            .iter()
            .map(|(k, archs)| {
                let list = archs
                    .iter()
                    .map(|(a, e)| {
                        let original_size = self.blobs.get(e.ordinal as usize).map(BlobData::len).unwrap_or(0);
                        (a.clone(), TocEntry { kind: "hsaco".into(), ordinal: e.ordinal, original_size, metadata: e.metadata.clone() })
                    })
                    .collect();
                (k.clone(), list)
            })
            .collect()
    }

    fn toc_with(&self, scheme: Scheme) -> Toc {
        Toc {
            format_version: 1,
            group_name: self.group_name.clone(),
            gfx_arch_family: self.gfx_arch_family.clone(),
            gfx_arches: self.gfx_arches.clone(),
            toc: self.entries(),
            scheme,
        }
    }

    /// Scheme `none` in parts, for writers that place the code objects
    /// themselves (the packager's split, whose objects come from many
    /// files): the header, each ordinal's (offset, size), and the TOC,
    /// which starts where the last object ends.
    pub fn none_parts(&self) -> ([u8; HEADER_LEN as usize], Vec<(u64, u64)>, Vec<u8>) {
        let mut blobs = Vec::with_capacity(self.blobs.len());
        let mut pos = HEADER_LEN;
        for b in &self.blobs {
            blobs.push((pos, b.len()));
            pos += b.len();
        }
        let toc = encode_toc(&self.toc_with(Scheme::None { blobs: blobs.clone() }));
        (header(pos), blobs, toc)
    }

    /// Scheme `zstd-per-kernel` in parts, once the frames are known by
    /// their lengths (ordinal order): the header and the TOC. The region
    /// in between is `num_kernels` then each frame with its length.
    pub fn zstd_parts(&self, frame_lens: &[u64]) -> ([u8; HEADER_LEN as usize], Vec<u8>) {
        let region: u64 = 4 + frame_lens.iter().map(|n| 4 + n).sum::<u64>();
        let toc = encode_toc(&self.toc_with(Scheme::Zstd { offset: HEADER_LEN, size: region }));
        (header(HEADER_LEN + region), toc)
    }

    /// Scheme `none` as a lazy layout: header, code-object extents back to
    /// back, TOC.
    pub fn layout_none(&self) -> Layout {
        let (head, _, toc) = self.none_parts();
        let mut l = Layout::new();
        l.push_bytes(head.to_vec());
        for b in &self.blobs {
            b.push_to(&mut l);
        }
        l.push_bytes(toc);
        l
    }

    /// Scheme `zstd-per-kernel` from already-compressed frames (one per
    /// blob, in ordinal order).
    pub fn bytes_zstd_frames(&self, frames: &[Vec<u8>]) -> Vec<u8> {
        let lens: Vec<u64> = frames.iter().map(|f| f.len() as u64).collect();
        let (head, toc) = self.zstd_parts(&lens);
        let mut out = Vec::with_capacity(head.len() + lens.iter().map(|n| 4 + n).sum::<u64>() as usize + 4 + toc.len());
        out.extend_from_slice(&head);
        out.extend_from_slice(&(frames.len() as u32).to_le_bytes());
        for f in frames {
            out.extend_from_slice(&(f.len() as u32).to_le_bytes());
            out.extend_from_slice(f);
        }
        out.extend_from_slice(&toc);
        out
    }

    /// Scheme `zstd-per-kernel` in memory (see [`ArchiveSpec::write_zstd`]).
    pub fn bytes_zstd(&self, src: &dyn ReadAt, store: &dyn Decoder, level: i32) -> Result<Vec<u8>, KpackError> {
        let mut out = std::io::Cursor::new(Vec::new());
        self.write_zstd(src, store, level, &mut out)?;
        Ok(out.into_inner())
    }

    /// Scheme `zstd-per-kernel`, streamed to `out`: each code object one
    /// zstd frame with the content size in its header and a content
    /// checksum (see [`compress_frame`]). Objects are read and compressed a few at a
    /// time on all cores (frames are independent) and written in ordinal
    /// order, so memory holds one batch, never the archive. Returns the
    /// archive's length.
    pub fn write_zstd<W: Write + Seek + ?Sized>(&self, src: &dyn ReadAt, store: &dyn Decoder, level: i32, out: &mut W) -> Result<u64, KpackError> {
        let io = |e: std::io::Error| KpackError::Io(e);
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 8);
        let count = u32::try_from(self.blobs.len()).map_err(|_| KpackError::Decompress("too many code objects".into()))?;
        out.seek(SeekFrom::Start(0)).map_err(io)?;
        out.write_all(&header(0)).map_err(io)?;
        out.write_all(&count.to_le_bytes()).map_err(io)?;
        let mut region: u64 = 4;
        for batch in self.blobs.chunks(threads) {
            let frames: Vec<Result<Vec<u8>, KpackError>> = std::thread::scope(|s| {
                let hs: Vec<_> = batch.iter().map(|b| s.spawn(move || compress_one(b, src, store, level))).collect();
                hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(KpackError::Decompress("compression thread panicked".into())))).collect()
            });
            for f in frames {
                let f = f?;
                let n = u32::try_from(f.len()).map_err(|_| KpackError::Decompress("zstd frame over 4 GiB".into()))?;
                out.write_all(&n.to_le_bytes()).map_err(io)?;
                out.write_all(&f).map_err(io)?;
                region += 4 + f.len() as u64;
            }
        }
        check_region(region)?;
        let toc = encode_toc(&self.toc_with(Scheme::Zstd { offset: HEADER_LEN, size: region }));
        out.write_all(&toc).map_err(io)?;
        out.seek(SeekFrom::Start(0)).map_err(io)?;
        out.write_all(&header(HEADER_LEN + region)).map_err(io)?;
        out.seek(SeekFrom::End(0)).map_err(io)?;
        out.flush().map_err(io)?;
        Ok(HEADER_LEN + region + toc.len() as u64)
    }
}

/// The runtime's limit on a blob region (the reader's too): at most 4 GiB.
/// A larger archive would be written and then refused by every reader.
pub(super) fn check_region(region: u64) -> Result<(), KpackError> {
    if region > super::read::MAX_ZSTD_REGION {
        return Err(KpackError::Decompress("zstd region over 4 GiB".into()));
    }
    Ok(())
}

/// One code object as one zstd frame (see [`compress_frame`]).
fn compress_one(b: &BlobData, src: &dyn ReadAt, store: &dyn Decoder, level: i32) -> Result<Vec<u8>, KpackError> {
    let data = b.read(src, store).map_err(|e| KpackError::Io(std::io::Error::other(e.to_string())))?;
    compress_frame(&data, level)
}

/// One code object as one zstd frame: the content size in the frame
/// header, as the reference writes it, plus the frame's content checksum
/// (4 bytes of XXH64), which the reference leaves out. Without it a
/// damaged frame can decode, at the right size, to other code; with it
/// every zstd decoder (libzstd's `ZSTD_decompress` in the runtimes, the
/// `zstd` crate here) refuses such a frame. Readers that ignore the flag do
/// not exist: it is part of the frame format (RFC 8878, 3.1.1.1.1).
pub fn compress_frame(data: &[u8], level: i32) -> Result<Vec<u8>, KpackError> {
    let cfg = |e: std::io::Error| KpackError::Decompress(e.to_string());
    let mut c = zstd::bulk::Compressor::new(level).map_err(cfg)?;
    c.include_contentsize(true).map_err(cfg)?;
    c.include_checksum(true).map_err(cfg)?;
    c.compress(data).map_err(cfg)
}

fn header(toc_offset: u64) -> [u8; HEADER_LEN as usize] {
    let mut h = [0u8; HEADER_LEN as usize];
    h[..4].copy_from_slice(KPACK_MAGIC);
    h[4..8].copy_from_slice(&KPACK_VERSION.to_le_bytes());
    h[8..16].copy_from_slice(&toc_offset.to_le_bytes());
    h
}

/// Encodes a TOC with the reference writer's key order and forms.
pub fn encode_toc(t: &Toc) -> Vec<u8> {
    let mut o = Vec::with_capacity(256 + 64 * t.toc.len());
    let zstd = matches!(t.scheme, Scheme::Zstd { .. });
    msgpack::write_map_len(&mut o, if zstd { 8 } else { 7 });
    msgpack::write_str(&mut o, "format_version");
    msgpack::write_uint(&mut o, t.format_version);
    msgpack::write_str(&mut o, "group_name");
    msgpack::write_str(&mut o, &t.group_name);
    msgpack::write_str(&mut o, "gfx_arch_family");
    msgpack::write_str(&mut o, &t.gfx_arch_family);
    msgpack::write_str(&mut o, "gfx_arches");
    msgpack::write_array_len(&mut o, t.gfx_arches.len() as u32);
    for a in &t.gfx_arches {
        msgpack::write_str(&mut o, a);
    }
    msgpack::write_str(&mut o, "toc");
    msgpack::write_map_len(&mut o, t.toc.len() as u32);
    for (key, archs) in &t.toc {
        msgpack::write_str(&mut o, key);
        msgpack::write_map_len(&mut o, archs.len() as u32);
        for (arch, e) in archs {
            msgpack::write_str(&mut o, arch);
            msgpack::write_map_len(&mut o, if e.metadata.is_some() { 4 } else { 3 });
            msgpack::write_str(&mut o, "type");
            msgpack::write_str(&mut o, &e.kind);
            msgpack::write_str(&mut o, "ordinal");
            msgpack::write_uint(&mut o, e.ordinal);
            msgpack::write_str(&mut o, "original_size");
            msgpack::write_uint(&mut o, e.original_size);
            if let Some(m) = &e.metadata {
                msgpack::write_str(&mut o, "metadata");
                msgpack::write_value(&mut o, m);
            }
        }
    }
    msgpack::write_str(&mut o, "compression_scheme");
    match &t.scheme {
        Scheme::None { blobs } => {
            msgpack::write_str(&mut o, SCHEME_NONE);
            msgpack::write_str(&mut o, "blobs");
            msgpack::write_array_len(&mut o, blobs.len() as u32);
            for (off, size) in blobs {
                msgpack::write_map_len(&mut o, 2);
                msgpack::write_str(&mut o, "offset");
                msgpack::write_uint(&mut o, *off);
                msgpack::write_str(&mut o, "size");
                msgpack::write_uint(&mut o, *size);
            }
        }
        Scheme::Zstd { offset, size } => {
            msgpack::write_str(&mut o, SCHEME_ZSTD);
            msgpack::write_str(&mut o, "zstd_offset");
            msgpack::write_uint(&mut o, *offset);
            msgpack::write_str(&mut o, "zstd_size");
            msgpack::write_uint(&mut o, *size);
        }
    }
    o
}
