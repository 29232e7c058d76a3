//! Clang offload bundles (`__CLANG_OFFLOAD_BUNDLE__`), their compressed
//! envelope (CCOB v1–v3, zstd or zlib), and the `.hip_fatbin` section that
//! concatenates them (FORMATS.md §1).
//!
//! Everything here reads through [`ReadAt`] so that a 1.3 GB section is
//! walked by touching only headers: an uncompressed bundle's descriptor
//! table gives its extent, a CCOB header gives its length, and code
//! objects are described as ranges, not copied.

pub mod ccob;
mod describe;
#[cfg(test)]
mod mutant_tests;

use std::io;

use thiserror::Error;

use crate::formats::target::{arch_of_entry_id, is_host_entry, is_spirv_entry, SPIRV_ARCH};
use crate::io::{read_exact_at, read_vec_at, LeBytes, ReadAt};
pub use ccob::{CcobHeader, CcobMethod};
pub use describe::describe_fatbin;

pub const BUNDLE_MAGIC: &[u8; 24] = b"__CLANG_OFFLOAD_BUNDLE__";
pub const CCOB_MAGIC: &[u8; 4] = b"CCOB";

/// Upper bound on entries per bundle; real bundles have one per target
/// (a dozen). Stops a hostile count from driving allocation.
const MAX_ENTRIES: u64 = 4096;
/// Upper bound on one entry ID's length.
const MAX_ID_LEN: u64 = 4096;

#[derive(Debug, Error)]
pub enum BundleError {
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    #[error("no offload bundle magic at offset {0:#x}")]
    BadMagic(u64),
    #[error("bundle at {at:#x}: {what}")]
    Corrupt { at: u64, what: String },
    #[error("CCOB at {at:#x}: {what}")]
    Ccob { at: u64, what: String },
    /// The decoded content does not match the hash in the CCOB's header:
    /// the compressed bundle is damaged (its bytes are never handed out).
    #[error("CCOB at {at:#x} is damaged: its decoded content has hash {computed:016x}, its header says {stored:016x}")]
    HashMismatch { at: u64, stored: u64, computed: u64 },
    #[error("unrecognized fatbin format: no bundle found")]
    NoBundles,
}

impl BundleError {
    fn corrupt(at: u64, what: impl Into<String>) -> Self {
        BundleError::Corrupt { at, what: what.into() }
    }
}

/// One descriptor of an uncompressed bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleEntry {
    /// Full entry ID, e.g. `hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-`.
    pub id: String,
    /// Payload offset relative to the start of the bundle.
    pub offset: u64,
    pub size: u64,
}

impl BundleEntry {
    /// Arch string used downstream (text after the last `--`), or `None`
    /// for host entries and IDs without `--`, which carry no device code.
    /// A portable SPIR-V entry, in either spelling, is [`SPIRV_ARCH`]; an
    /// `amdgcnspirv` entry the runtime would not take as SPIR-V (such as
    /// `hip-amdgcn-amd-amdhsa--amdgcnspirv`) is `None`, ignored as the
    /// runtime ignores it.
    pub fn arch(&self) -> Option<&str> {
        if is_host_entry(&self.id) {
            return None;
        }
        if is_spirv_entry(&self.id) {
            return Some(SPIRV_ARCH);
        }
        arch_of_entry_id(&self.id).filter(|a| *a != SPIRV_ARCH)
    }
}

/// A parsed uncompressed bundle header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bundle {
    pub entries: Vec<BundleEntry>,
    /// Length of magic + count + descriptors.
    pub header_len: u64,
    /// End of the bundle relative to its start: `max(offset+size)` and at
    /// least the header (there is no end marker).
    pub len: u64,
}

/// Parses the bundle header at `at`; `avail` is how many bytes from `at`
/// belong to the container (section or decoded blob), used to reject
/// entries that point outside it.
pub fn parse_bundle(src: &dyn ReadAt, at: u64, avail: u64) -> Result<Bundle, BundleError> {
    if avail < 32 {
        return Err(BundleError::corrupt(at, "truncated header"));
    }
    let mut head = [0u8; 32];
    read_exact_at(src, at, &mut head)?;
    if &head[..24] != BUNDLE_MAGIC {
        return Err(BundleError::BadMagic(at));
    }
    let n = head.u64_at(24).unwrap_or(0);
    if n > MAX_ENTRIES || n.saturating_mul(24) > avail - 32 {
        return Err(BundleError::corrupt(at, format!("entry count {n} does not fit")));
    }
    // Descriptors are small; read a window and grow it only if an ID is long.
    let mut window_len = (avail - 32).min(4096);
    let mut table = read_vec_at(src, at + 32, window_len as usize)?;
    let mut pos = 0usize;
    let mut entries = Vec::with_capacity(n as usize);
    for i in 0..n {
        loop {
            let need = table.u64_at(pos + 16).map(|idlen| idlen.min(MAX_ID_LEN + 1) as usize + 24).unwrap_or(24);
            if pos + need <= table.len() || window_len >= avail - 32 {
                break;
            }
            window_len = (window_len * 2).max((pos + need) as u64).min(avail - 32);
            table = read_vec_at(src, at + 32, window_len as usize)?;
        }
        let (Some(offset), Some(size), Some(id_len)) = (table.u64_at(pos), table.u64_at(pos + 8), table.u64_at(pos + 16)) else {
            return Err(BundleError::corrupt(at, format!("descriptor {i} truncated")));
        };
        if id_len > MAX_ID_LEN {
            return Err(BundleError::corrupt(at, format!("descriptor {i}: id length {id_len}")));
        }
        let id_bytes = table.get(pos + 24..pos + 24 + id_len as usize).ok_or_else(|| BundleError::corrupt(at, format!("descriptor {i}: id truncated")))?;
        let id = String::from_utf8(id_bytes.to_vec()).map_err(|_| BundleError::corrupt(at, format!("descriptor {i}: id not UTF-8")))?;
        match offset.checked_add(size) {
            Some(end) if end <= avail && offset != 0 => {}
            _ => return Err(BundleError::corrupt(at, format!("entry {id:?}: payload {offset:#x}+{size:#x} outside the bundle"))),
        }
        entries.push(BundleEntry { id, offset, size });
        pos += 24 + id_len as usize;
    }
    let header_len = 32 + pos as u64;
    let len = entries.iter().map(|e| e.offset + e.size).max().unwrap_or(0).max(header_len);
    Ok(Bundle { entries, header_len, len })
}

/// One blob of a fat section, in section order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chunk {
    /// An uncompressed bundle at `at`.
    Plain { at: u64, bundle: Bundle },
    /// A compressed bundle at `at`, `len` bytes including its header.
    Compressed { at: u64, len: u64, header: CcobHeader },
}

impl Chunk {
    pub fn at(&self) -> u64 {
        match self {
            Chunk::Plain { at, .. } | Chunk::Compressed { at, .. } => *at,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn len(&self) -> u64 {
        match self {
            Chunk::Plain { bundle, .. } => bundle.len,
            Chunk::Compressed { len, .. } => *len,
        }
    }
}

/// Reads the blob starting exactly at `at` (a bundle or a CCOB), within a
/// container ending at `end`.
pub fn parse_chunk(src: &dyn ReadAt, at: u64, end: u64) -> Result<Chunk, BundleError> {
    let avail = end.saturating_sub(at);
    let mut magic = [0u8; 24];
    let n = avail.min(24) as usize;
    read_exact_at(src, at, &mut magic[..n])?;
    if n >= 4 && &magic[..4] == CCOB_MAGIC {
        let (header, len) = ccob::parse_at(src, at, end)?;
        return Ok(Chunk::Compressed { at, len, header });
    }
    if n == 24 && &magic == BUNDLE_MAGIC {
        let bundle = parse_bundle(src, at, avail)?;
        return Ok(Chunk::Plain { at, bundle });
    }
    Err(BundleError::BadMagic(at))
}

/// Walks a fat section `[start, end)` of `src` and returns its blobs in
/// order. Unlike the reference's byte-by-byte magic search (which can
/// truncate a code object on a false `CCOB` hit), each blob's extent comes
/// from its own header; only the padding between blobs is scanned.
pub fn scan_fatbin(src: &dyn ReadAt, start: u64, end: u64) -> Result<Vec<Chunk>, BundleError> {
    let mut out = Vec::new();
    let mut pos = start;
    while let Some(next) = next_magic(src, pos, end)? {
        let chunk = parse_chunk(src, next, end)?;
        pos = next + chunk.len().max(1);
        out.push(chunk);
    }
    if out.is_empty() {
        return Err(BundleError::NoBundles);
    }
    Ok(out)
}

/// Finds the next bundle or CCOB magic at or after `pos` (normally right
/// after a run of zero padding). Reads small windows first: the padding
/// between blobs is under a page on real data.
fn next_magic(src: &dyn ReadAt, mut pos: u64, end: u64) -> Result<Option<u64>, BundleError> {
    let mut window = 4096usize;
    let mut buf = Vec::new();
    while pos < end {
        let n = (end - pos).min(window as u64) as usize;
        buf.resize(n, 0);
        read_exact_at(src, pos, &mut buf)?;
        let last = pos + n as u64 >= end;
        // Positions whose 24-byte lookahead is cut by the window are decided
        // by the next window, unless there is none.
        let decided = if last { n } else { n.saturating_sub(BUNDLE_MAGIC.len() - 1).max(1) };
        for i in 0..decided {
            if buf[i] != 0 {
                let rest = &buf[i..];
                if rest.starts_with(CCOB_MAGIC) || rest.starts_with(BUNDLE_MAGIC) {
                    return Ok(Some(pos + i as u64));
                }
            }
        }
        if last {
            break;
        }
        pos += decided as u64;
        window = (window * 2).min(1 << 20);
    }
    Ok(None)
}

/// Where a code object's bytes live.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ObjectLocation {
    /// A plain range of the scanned source.
    Range { offset: u64, len: u64 },
    /// A range of the decompressed content of the CCOB at `ccob_at`.
    InCcob { ccob_at: u64, ccob_len: u64, header: CcobHeader, offset: u64, len: u64 },
}

impl ObjectLocation {
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn len(&self) -> u64 {
        match self {
            ObjectLocation::Range { len, .. } | ObjectLocation::InCcob { len, .. } => *len,
        }
    }
}

/// One device code object of a fat section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeObject {
    /// Index of the blob in section order (= wrapper index on real data).
    pub chunk_index: usize,
    pub entry_id: String,
    pub arch: String,
    pub location: ObjectLocation,
}

impl CodeObject {
    /// A portable SPIR-V object, which the runtime JIT-compiles for a
    /// device with no native or generic object.
    pub fn is_spirv(&self) -> bool {
        self.arch == SPIRV_ARCH
    }
}

/// Lists the device code objects of one blob. For a CCOB this decodes only
/// as much as its inner bundle header needs (unless the decoded content
/// holds several bundles, which requires a full decode).
pub fn chunk_objects(src: &dyn ReadAt, chunk: &Chunk, chunk_index: usize) -> Result<Vec<CodeObject>, BundleError> {
    // (bundle offset, bundle) pairs and where a payload at `offset` lives.
    type Locate = Box<dyn Fn(u64, u64) -> ObjectLocation>;
    let (bundles, locate): (Vec<(u64, Bundle)>, Locate) = match chunk {
        Chunk::Plain { at, bundle } => (vec![(*at, bundle.clone())], Box::new(|offset, len| ObjectLocation::Range { offset, len })),
        Chunk::Compressed { at, len, header } => {
            let (ccob_at, ccob_len, header) = (*at, *len, header.clone());
            (
                ccob::inner_bundles(src, ccob_at, ccob_len, &header)?,
                Box::new(move |offset, len| ObjectLocation::InCcob { ccob_at, ccob_len, header: header.clone(), offset, len }),
            )
        }
    };
    let mut out = Vec::new();
    for (bundle_at, bundle) in bundles {
        for e in &bundle.entries {
            if let Some(arch) = e.arch() {
                out.push(CodeObject { chunk_index, entry_id: e.id.clone(), arch: arch.to_string(), location: locate(bundle_at + e.offset, e.size) });
            }
        }
    }
    Ok(out)
}

/// All device code objects of a fat section, in section order.
pub fn fatbin_objects(src: &dyn ReadAt, start: u64, end: u64) -> Result<Vec<CodeObject>, BundleError> {
    let mut out = Vec::new();
    for (i, chunk) in scan_fatbin(src, start, end)?.iter().enumerate() {
        out.extend(chunk_objects(src, chunk, i)?);
    }
    Ok(out)
}

/// Reads a code object's bytes (decompressing its CCOB if needed).
pub fn read_object(src: &dyn ReadAt, loc: &ObjectLocation) -> Result<Vec<u8>, BundleError> {
    match loc {
        ObjectLocation::Range { offset, len } => {
            let size = src.size()?;
            if offset.checked_add(*len).is_none_or(|e| e > size) {
                return Err(BundleError::corrupt(*offset, "code object past end of data"));
            }
            Ok(read_vec_at(src, *offset, *len as usize)?)
        }
        ObjectLocation::InCcob { ccob_at, ccob_len, header, offset, len } => {
            let data = ccob::decode(src, *ccob_at, *ccob_len, header)?;
            let end = offset.checked_add(*len).filter(|e| *e <= data.len() as u64);
            match end {
                Some(e) => Ok(data[*offset as usize..e as usize].to_vec()),
                None => Err(BundleError::Ccob { at: *ccob_at, what: "code object outside decoded data".into() }),
            }
        }
    }
}

/// Serializes an uncompressed bundle (used to build test data and CCOB
/// inputs). Payloads are aligned to `align` like hipcc's `-bundle-align`.
pub fn write_bundle(entries: &[(&str, &[u8])], align: u64) -> Vec<u8> {
    let align = align.max(1);
    let header_len: u64 = 32 + entries.iter().map(|(id, _)| 24 + id.len() as u64).sum::<u64>();
    let mut offsets = Vec::with_capacity(entries.len());
    let mut pos = header_len;
    for (_, data) in entries {
        pos = pos.div_ceil(align) * align;
        offsets.push(pos);
        pos += data.len() as u64;
    }
    let mut out = Vec::with_capacity(pos as usize);
    out.extend_from_slice(BUNDLE_MAGIC);
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for ((id, data), off) in entries.iter().zip(&offsets) {
        out.extend_from_slice(&off.to_le_bytes());
        out.extend_from_slice(&(data.len() as u64).to_le_bytes());
        out.extend_from_slice(&(id.len() as u64).to_le_bytes());
        out.extend_from_slice(id.as_bytes());
    }
    for ((_, data), off) in entries.iter().zip(&offsets) {
        out.resize(*off as usize, 0);
        out.extend_from_slice(data);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_synthetic_bundle() {
        let a = vec![1u8; 100];
        let b = vec![2u8; 50];
        let blob = write_bundle(&[("host-x86_64-unknown-linux", &[]), ("hipv4-amdgcn-amd-amdhsa--gfx90a", &a), ("hipv4-amdgcn-amd-amdhsa--gfx1030", &b)], 4096);
        let b0 = parse_bundle(&blob, 0, blob.len() as u64).unwrap();
        assert_eq!(b0.entries.len(), 3);
        assert_eq!(b0.len, blob.len() as u64);
        let objs = fatbin_objects(&blob, 0, blob.len() as u64).unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[0].arch, "gfx90a");
        assert_eq!(read_object(&blob, &objs[1].location).unwrap(), b);
    }

    #[test]
    fn rejects_hostile_headers() {
        let mut blob = write_bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx90a", &[7u8; 10])], 64);
        // Entry count of 2^32.
        let mut bad = blob.clone();
        bad[24..32].copy_from_slice(&(1u64 << 32).to_le_bytes());
        assert!(parse_bundle(&bad, 0, bad.len() as u64).is_err());
        // Payload past the end.
        blob[40..48].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(parse_bundle(&blob, 0, blob.len() as u64).is_err());
        // Truncated.
        assert!(parse_bundle(&blob[..30].to_vec(), 0, 30).is_err());
        assert!(scan_fatbin(&vec![0u8; 100], 0, 100).is_err());
    }

    /// Both SPIR-V spellings come out as `amdgcnspirv` with their own bytes;
    /// the AMDGCN-triple spelling is dropped (the runtime ignores it).
    #[test]
    fn spirv_entries_listed() {
        let (a, b, c, d) = (vec![1u8; 16], vec![2u8; 20], vec![3u8; 24], vec![4u8; 8]);
        let blob = write_bundle(
            &[
                ("host-x86_64-unknown-linux-gnu", &[]),
                ("hipv4-amdgcn-amd-amdhsa--gfx1100", &a),
                ("hip-spirv64-amd-amdhsa--amdgcnspirv", &b),
                ("hip-spirv64-amd-amdhsa-unknown-amdgcnspirv", &c),
                ("hip-amdgcn-amd-amdhsa--amdgcnspirv", &d),
            ],
            8,
        );
        let objs = fatbin_objects(&blob, 0, blob.len() as u64).unwrap();
        let got: Vec<(&str, bool, Vec<u8>)> = objs.iter().map(|o| (o.arch.as_str(), o.is_spirv(), read_object(&blob, &o.location).unwrap())).collect();
        assert_eq!(got, vec![("gfx1100", false, a), ("amdgcnspirv", true, b), ("amdgcnspirv", true, c)]);
    }
}
