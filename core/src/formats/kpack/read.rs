//! Reading `.kpack` archives the way the runtime does (FORMATS.md §5.5):
//! lenient about unknown keys, strict about bounds.

use crate::formats::msgpack::{self, Value};
use crate::io::{read_exact_at, read_vec_at, LeBytes, ReadAt};

use super::{KpackError, Scheme, Toc, TocEntry, HEADER_LEN, KPACK_MAGIC, KPACK_VERSION, SCHEME_ZSTD};

/// A TOC larger than this is not a TOC (real ones are kilobytes).
const MAX_TOC: u64 = 256 << 20;
/// Runtime limits for `zstd-per-kernel` (UPSTREAM-NEWEST.md §4).
const MAX_FRAMES: u32 = 1 << 20;
pub(super) const MAX_ZSTD_REGION: u64 = 4 << 30;

/// Frame positions of a `zstd-per-kernel` region: `(absolute offset, len)`.
pub type FrameTable = Vec<(u64, u64)>;

/// An opened archive: its TOC and, for zstd archives, the frame table.
#[derive(Debug, Clone)]
pub struct Archive {
    pub toc_offset: u64,
    pub size: u64,
    pub toc: Toc,
    pub frames: FrameTable,
}

fn field(name: &'static str, what: impl Into<String>) -> KpackError {
    KpackError::TocField(name, what.into())
}

fn as_u64(v: &Value) -> Option<u64> {
    v.as_u64()
}

impl Archive {
    /// Opens an archive: header, TOC, and (zstd) frame table.
    pub fn open(src: &dyn ReadAt) -> Result<Archive, KpackError> {
        let size = src.size()?;
        if size < 16 {
            return Err(KpackError::InvalidFormat);
        }
        let mut head = [0u8; 16];
        read_exact_at(src, 0, &mut head)?;
        if &head[..4] != KPACK_MAGIC {
            return Err(KpackError::InvalidFormat);
        }
        let version = head.u32_at(4).unwrap_or(0);
        if version != KPACK_VERSION {
            return Err(KpackError::UnsupportedVersion(version));
        }
        let toc_offset = head.u64_at(8).unwrap_or(u64::MAX);
        if toc_offset >= size || toc_offset < 16 || size - toc_offset > MAX_TOC {
            return Err(KpackError::BadTocOffset { offset: toc_offset, size });
        }
        let toc_bytes = read_vec_at(src, toc_offset, (size - toc_offset) as usize)?;
        let toc = parse_toc(&toc_bytes)?;
        let frames = match &toc.scheme {
            Scheme::Zstd { offset, size: zsize } => read_frames(src, *offset, *zsize, toc_offset)?,
            Scheme::None { blobs } => {
                for (i, (off, len)) in blobs.iter().enumerate() {
                    if off.checked_add(*len).is_none_or(|e| e > size) {
                        log::debug!("kpack blob {i} at {off:#x}+{len:#x} lies outside the file");
                    }
                }
                Vec::new()
            }
        };
        Ok(Archive { toc_offset, size, toc, frames })
    }

    /// Raw stored bytes of `ordinal` (a code object for `none`, a zstd frame
    /// for `zstd-per-kernel`).
    pub fn stored_blob(&self, src: &dyn ReadAt, ordinal: u64) -> Result<Vec<u8>, KpackError> {
        let (off, len) = match &self.toc.scheme {
            Scheme::None { blobs } => blobs.get(ordinal as usize).copied(),
            Scheme::Zstd { .. } => self.frames.get(ordinal as usize).copied(),
        }
        .ok_or(KpackError::BadBlob { ordinal, what: "ordinal out of range".into() })?;
        if off.checked_add(len).is_none_or(|e| e > self.size) {
            return Err(KpackError::BadBlob { ordinal, what: format!("{off:#x}+{len:#x} past end of file") });
        }
        Ok(read_vec_at(src, off, len as usize)?)
    }

    /// `kpack_get_kernel`: the code object stored under (`key`, `arch`).
    pub fn get_kernel(&self, src: &dyn ReadAt, key: &str, arch: &str) -> Result<Vec<u8>, KpackError> {
        let e = self.toc.entry(key, arch).ok_or_else(|| KpackError::KernelNotFound { key: key.to_string(), arch: arch.to_string() })?;
        let stored = self.stored_blob(src, e.ordinal).map_err(|err| match err {
            KpackError::BadBlob { .. } => KpackError::KernelNotFound { key: key.to_string(), arch: arch.to_string() },
            other => other,
        })?;
        match &self.toc.scheme {
            Scheme::None { .. } => Ok(stored),
            Scheme::Zstd { .. } => {
                // Streamed, so memory grows with what the frame really
                // decodes to, never with the TOC's claim.
                let mut out = Vec::new();
                let dec = zstd::stream::read::Decoder::new(stored.as_slice()).map_err(|err| KpackError::Decompress(err.to_string()))?;
                std::io::Read::read_to_end(&mut std::io::Read::take(dec, e.original_size.saturating_add(1)), &mut out)
                    .map_err(|err| KpackError::Decompress(err.to_string()))?;
                if out.len() as u64 != e.original_size {
                    return Err(KpackError::Decompress(format!("frame decoded to {} bytes, TOC says {}", out.len(), e.original_size)));
                }
                Ok(out)
            }
        }
    }
}

fn read_frames(src: &dyn ReadAt, offset: u64, zsize: u64, toc_offset: u64) -> Result<FrameTable, KpackError> {
    let end = offset.checked_add(zsize).filter(|e| *e <= toc_offset && zsize <= MAX_ZSTD_REGION && offset >= HEADER_LEN);
    let Some(end) = end else {
        return Err(field("zstd_offset", format!("region {offset:#x}+{zsize:#x} not before the TOC")));
    };
    if zsize < 4 {
        return Err(field("zstd_size", "region shorter than its count"));
    }
    let mut b = [0u8; 4];
    read_exact_at(src, offset, &mut b)?;
    let n = u32::from_le_bytes(b);
    if n > MAX_FRAMES || (n as u64) * 4 > zsize - 4 {
        return Err(field("zstd_size", format!("{n} frames do not fit")));
    }
    let mut frames = Vec::with_capacity(n as usize);
    let mut pos = offset + 4;
    for i in 0..n {
        if pos + 4 > end {
            return Err(field("zstd_size", format!("frame {i} header past the region")));
        }
        read_exact_at(src, pos, &mut b)?;
        let len = u32::from_le_bytes(b) as u64;
        if pos + 4 + len > end {
            return Err(field("zstd_size", format!("frame {i} runs past the region")));
        }
        frames.push((pos + 4, len));
        pos += 4 + len;
    }
    Ok(frames)
}

/// Decodes a TOC as the runtime does: non-string keys and non-map values are
/// skipped; an unknown scheme is treated as `none`.
pub(crate) fn parse_toc(bytes: &[u8]) -> Result<Toc, KpackError> {
    let v = msgpack::decode_first(bytes).map_err(|e| KpackError::Toc(e.to_string()))?;
    let map = v.as_map().ok_or_else(|| KpackError::Toc("top level is not a map".into()))?;
    let get = |k: &str| msgpack::map_get(map, k);
    let str_of = |k: &'static str| -> Result<String, KpackError> {
        match get(k) {
            None => Ok(String::new()),
            Some(v) => v.as_str().map(str::to_string).ok_or_else(|| field(k, "not a string")),
        }
    };
    let format_version = get("format_version").and_then(as_u64).unwrap_or(1);
    let group_name = str_of("group_name")?;
    let gfx_arch_family = str_of("gfx_arch_family")?;
    let gfx_arches = match get("gfx_arches") {
        Some(Value::Array(a)) => a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect(),
        None => Vec::new(),
        Some(_) => return Err(field("gfx_arches", "not an array")),
    };
    let mut toc = Vec::new();
    if let Some(t) = get("toc") {
        let t = t.as_map().ok_or_else(|| field("toc", "not a map"))?;
        let mut keys = std::collections::HashSet::new();
        for (k, archs) in t {
            let (Some(k), Some(archs)) = (k.as_str(), archs.as_map()) else { continue };
            // A key or arch listed twice has no single meaning (readers
            // differ on which copy wins): such a TOC is refused.
            if !keys.insert(k) {
                return Err(field("toc", format!("key {k:?} listed twice")));
            }
            let mut list = Vec::new();
            let mut arch_names = std::collections::HashSet::new();
            for (a, e) in archs {
                let (Some(a), Some(e)) = (a.as_str(), e.as_map()) else { continue };
                if !arch_names.insert(a) {
                    return Err(field("toc", format!("arch {a:?} listed twice under {k:?}")));
                }
                let Some(ordinal) = msgpack::map_get(e, "ordinal").and_then(as_u64) else { continue };
                list.push((
                    a.to_string(),
                    TocEntry {
                        kind: msgpack::map_get(e, "type").and_then(Value::as_str).unwrap_or("hsaco").to_string(),
                        ordinal,
                        original_size: msgpack::map_get(e, "original_size").and_then(as_u64).unwrap_or(0),
                        metadata: msgpack::map_get(e, "metadata").cloned(),
                    },
                ));
            }
            toc.push((k.to_string(), list));
        }
    }
    let scheme_name = get("compression_scheme").and_then(Value::as_str).unwrap_or("none");
    let scheme = if scheme_name == SCHEME_ZSTD {
        let offset = get("zstd_offset").and_then(as_u64).ok_or_else(|| field("zstd_offset", "missing"))?;
        let size = get("zstd_size").and_then(as_u64).ok_or_else(|| field("zstd_size", "missing"))?;
        Scheme::Zstd { offset, size }
    } else {
        let mut blobs = Vec::new();
        if let Some(Value::Array(a)) = get("blobs") {
            for b in a {
                let m = b.as_map().ok_or_else(|| field("blobs", "entry is not a map"))?;
                let off = msgpack::map_get(m, "offset").and_then(as_u64);
                let size = msgpack::map_get(m, "size").and_then(as_u64);
                match (off, size) {
                    (Some(o), Some(s)) => blobs.push((o, s)),
                    _ => return Err(field("blobs", "entry lacks offset/size")),
                }
            }
        }
        Scheme::None { blobs }
    };
    Ok(Toc { format_version, group_name, gfx_arch_family, gfx_arches, toc, scheme })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fuzzer find (kept in `core/fuzz/regressions/kpack/`): a TOC listing
    /// `gfx906` twice under one key, with different ordinals, was read as
    /// two entries while lookups answered with the first.
    #[test]
    fn duplicate_toc_entries_are_refused() {
        let data = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/regressions/kpack/dup-arch-in-toc")).unwrap();
        match Archive::open(&data) {
            Err(KpackError::TocField("toc", why)) => assert!(why.contains("listed twice"), "{why}"),
            other => panic!("expected a refused TOC, got {:?}", other.map(|a| a.toc.toc.len())),
        }
    }
}
