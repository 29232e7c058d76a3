//! Compressed offload bundles (`CCOB`, FORMATS.md §1.3): versions 1–3,
//! zstd and zlib. The reference parser accepts only zstd v2/v3 (B8); we
//! accept all of them, and we never decode past a CCOB's own extent (the
//! clang-offload-bundler bug of ROCm/llvm-project#448).
//!
//! Integrity: every version's header carries the first 8 bytes of the MD5
//! of the decoded bundle (LLVM's `CompressedOffloadBundle::compress` stores
//! `MD5(input).low()`, the digest's first 8 bytes read as a little-endian
//! u64). A zstd frame written by clang has no checksum of its own, so a
//! damaged payload can decode, without any error, to different code
//! objects; the hash is what catches that. Every function here that hands
//! out decoded bytes ([`decode`], [`decode_range`]) streams the whole
//! content through MD5 and fails with [`BundleError::HashMismatch`] rather
//! than return bytes of a CCOB whose hash does not match. Only
//! [`decode_prefix`] (planning: the inner bundle's entry table) and
//! [`decode_range_prechecked`] (for callers that checked this very CCOB of
//! this very source version before) skip the check.

use std::io::{self, BufRead, Read};

use md5::{Digest, Md5};

use std::sync::Arc;

use super::{parse_bundle, scan_fatbin, Bundle, BundleError, Chunk};
use crate::io::{read_exact_at, LeBytes, ReadAt};
use crate::layout::{Decoder, Encoded, LayoutError};

/// Decoded size cap: far above any real bundle, well below "allocate the
/// machine". Claims above it are rejected before any decoding.
pub const MAX_DECODED: u64 = 4 << 30;
/// A claim of more than this many decoded bytes per compressed byte is a
/// bomb, not a code object (real bundles compress 3–20×).
const MAX_RATIO: u64 = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CcobMethod {
    Zlib = 0,
    Zstd = 1,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CcobHeader {
    pub version: u16,
    pub method: CcobMethod,
    /// Header + payload length; absent in v1.
    pub total_size: Option<u64>,
    pub uncompressed_size: u64,
    /// First 8 bytes of the MD5 of the decoded bundle, as a little-endian
    /// u64 (checked by every decode that hands out bytes).
    pub hash: u64,
    pub header_len: u64,
}

fn err(at: u64, what: impl Into<String>) -> BundleError {
    BundleError::Ccob { at, what: what.into() }
}

/// Parses a CCOB header from its first bytes (at least 32 or up to the end
/// of the container).
pub fn parse_header(b: &[u8], at: u64) -> Result<CcobHeader, BundleError> {
    if b.get(..4) != Some(super::CCOB_MAGIC.as_slice()) {
        return Err(err(at, "bad magic"));
    }
    let version = b.u16_at(4).ok_or_else(|| err(at, "truncated header"))?;
    let method = match b.u16_at(6) {
        Some(0) => CcobMethod::Zlib,
        Some(1) => CcobMethod::Zstd,
        Some(m) => return Err(err(at, format!("unknown compression method {m}"))),
        None => return Err(err(at, "truncated header")),
    };
    let short = || err(at, "truncated header");
    let (total_size, uncompressed_size, hash, header_len) = match version {
        1 => (None, b.u32_at(8).ok_or_else(short)? as u64, b.u64_at(12).ok_or_else(short)?, 20),
        2 => (Some(b.u32_at(8).ok_or_else(short)? as u64), b.u32_at(12).ok_or_else(short)? as u64, b.u64_at(16).ok_or_else(short)?, 24),
        3 => (Some(b.u64_at(8).ok_or_else(short)?), b.u64_at(16).ok_or_else(short)?, b.u64_at(24).ok_or_else(short)?, 32),
        v => return Err(err(at, format!("unsupported version {v}"))),
    };
    if let Some(t) = total_size {
        if t <= header_len {
            return Err(err(at, format!("total size {t} smaller than its header")));
        }
    }
    if uncompressed_size > MAX_DECODED {
        return Err(err(at, format!("claims {uncompressed_size} decoded bytes")));
    }
    Ok(CcobHeader { version, method, total_size, uncompressed_size, hash, header_len })
}

impl CcobHeader {
    /// The header as stored: what [`parse_header`] reads back.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.header_len as usize);
        out.extend_from_slice(super::CCOB_MAGIC);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.method as u16).to_le_bytes());
        let total = self.total_size.unwrap_or(0);
        match self.version {
            1 => out.extend_from_slice(&(self.uncompressed_size as u32).to_le_bytes()),
            2 => {
                out.extend_from_slice(&(total as u32).to_le_bytes());
                out.extend_from_slice(&(self.uncompressed_size as u32).to_le_bytes());
            }
            _ => {
                out.extend_from_slice(&total.to_le_bytes());
                out.extend_from_slice(&self.uncompressed_size.to_le_bytes());
            }
        }
        out.extend_from_slice(&self.hash.to_le_bytes());
        out
    }
}

/// The layout's handle on the CCOB at `at` (`len` bytes): where it is, how
/// long it decodes to, and its header, which only the decoders here read.
pub fn encoded(at: u64, len: u64, h: &CcobHeader) -> Encoded {
    Encoded { at, len, decoded_len: h.uncompressed_size, header: h.to_bytes().into() }
}

/// The header of a blob made by [`encoded`].
pub fn encoded_header(blob: &Encoded) -> Result<CcobHeader, BundleError> {
    parse_header(&blob.header, blob.at)
}

fn layout_err(at: u64) -> impl Fn(BundleError) -> LayoutError {
    move |e| match e {
        BundleError::Io(e) => LayoutError::from(e),
        e => LayoutError::decode(at, e),
    }
}

/// Decodes on every request, each time checking the whole CCOB against its
/// header's hash (tests, one-shot tools).
pub struct Uncached;

impl Decoder for Uncached {
    fn object(&self, src: &dyn ReadAt, blob: &Encoded, offset: u64, len: u64) -> Result<Arc<Vec<u8>>, LayoutError> {
        let h = encoded_header(blob).map_err(layout_err(blob.at))?;
        Ok(Arc::new(decode_range(src, blob.at, blob.len, &h, offset, len).map_err(layout_err(blob.at))?))
    }
}

/// Decodes on every request, checking each CCOB's hash on the first
/// request for it and decoding later ones only up to their end (several
/// objects of one bundle, windows of a large object). The verdicts are
/// keyed by CCOB offset alone: use one `CheckedOnce` for one pass over one
/// version of one source file (a compressed archive being written).
#[derive(Default)]
pub struct CheckedOnce {
    checked: std::sync::Mutex<std::collections::HashSet<u64>>,
}

impl Decoder for CheckedOnce {
    fn object(&self, src: &dyn ReadAt, blob: &Encoded, offset: u64, len: u64) -> Result<Arc<Vec<u8>>, LayoutError> {
        let h = encoded_header(blob).map_err(layout_err(blob.at))?;
        let done = self.checked.lock().unwrap_or_else(|p| p.into_inner()).contains(&blob.at);
        if done {
            return Ok(Arc::new(decode_range_prechecked(src, blob.at, blob.len, &h, offset, len).map_err(layout_err(blob.at))?));
        }
        let v = decode_range(src, blob.at, blob.len, &h, offset, len).map_err(layout_err(blob.at))?;
        self.checked.lock().unwrap_or_else(|p| p.into_inner()).insert(blob.at);
        Ok(Arc::new(v))
    }
}

/// Parses the CCOB at `at` and returns its header and full length. For v1,
/// whose header has no length, the length is what the decoder consumes.
pub(crate) fn parse_at(src: &dyn ReadAt, at: u64, end: u64) -> Result<(CcobHeader, u64), BundleError> {
    let avail = end.saturating_sub(at);
    let mut head = [0u8; 32];
    let n = avail.min(32) as usize;
    read_exact_at(src, at, &mut head[..n])?;
    let header = parse_header(&head[..n], at)?;
    let len = match header.total_size {
        Some(t) => {
            if t > avail {
                return Err(err(at, format!("total size {t:#x} runs past the section end")));
            }
            t
        }
        None => {
            let mut sink = io::sink();
            let consumed = decode_into(src, at, avail, &header, &mut sink, header.uncompressed_size, None)?;
            header.header_len + consumed
        }
    };
    check_ratio(at, &header, len)?;
    Ok((header, len))
}

fn check_ratio(at: u64, h: &CcobHeader, len: u64) -> Result<(), BundleError> {
    let payload = len.saturating_sub(h.header_len).max(1);
    if h.uncompressed_size / payload > MAX_RATIO {
        return Err(err(at, format!("{} decoded bytes from {payload} compressed: refusing", h.uncompressed_size)));
    }
    Ok(())
}

/// `BufRead` over a range of a `ReadAt` that knows exactly how much its
/// consumer took (so v1 CCOB lengths can be measured).
struct RangeReader<'a> {
    src: &'a dyn ReadAt,
    pos: u64,
    end: u64,
    buf: Vec<u8>,
    start: usize,
    filled: usize,
    consumed: u64,
}

impl<'a> RangeReader<'a> {
    fn new(src: &'a dyn ReadAt, pos: u64, end: u64) -> Self {
        RangeReader { src, pos, end, buf: vec![0; 64 * 1024], start: 0, filled: 0, consumed: 0 }
    }
}

impl Read for RangeReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let avail = self.fill_buf()?;
        let n = avail.len().min(out.len());
        out[..n].copy_from_slice(&avail[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for RangeReader<'_> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.start == self.filled && self.pos < self.end {
            let n = (self.end - self.pos).min(self.buf.len() as u64) as usize;
            let got = self.src.read_at(self.pos, &mut self.buf[..n])?;
            if got == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "source shorter than expected"));
            }
            self.pos += got as u64;
            self.start = 0;
            self.filled = got;
        }
        Ok(&self.buf[self.start..self.filled])
    }
    fn consume(&mut self, amt: usize) {
        self.start += amt;
        self.consumed += amt as u64;
    }
}

/// The header's form of an MD5 digest: its first 8 bytes as a
/// little-endian u64 (LLVM's `MD5Result::low()`).
fn md5_low(digest: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(b)
}

/// Passes writes on to `inner` and through MD5.
struct Hashing<'a> {
    md5: &'a mut Md5,
    inner: &'a mut dyn io::Write,
}

impl io::Write for Hashing<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(data)?;
        self.md5.update(&data[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Streams the whole decoded content of the CCOB at `at` into `out` and
/// checks it against the header's hash.
fn decode_checked(src: &dyn ReadAt, at: u64, avail: u64, h: &CcobHeader, out: &mut dyn io::Write) -> Result<(), BundleError> {
    let mut md5 = Md5::new();
    decode_into(src, at, avail, h, out, h.uncompressed_size, Some(&mut md5))?;
    let computed = md5_low(&md5.finalize());
    if computed != h.hash {
        return Err(BundleError::HashMismatch { at, stored: h.hash, computed });
    }
    Ok(())
}

/// Streams the decoded bytes of the CCOB at `at` (at most `limit` of them)
/// into `out`, and through `md5` if given; returns the compressed bytes
/// consumed. When `limit` equals the claimed size, checks that exactly that
/// many bytes come out.
fn decode_into(src: &dyn ReadAt, at: u64, avail: u64, h: &CcobHeader, out: &mut dyn io::Write, limit: u64, md5: Option<&mut Md5>) -> Result<u64, BundleError> {
    match md5 {
        Some(md5) => decode_stream(src, at, avail, h, &mut Hashing { md5, inner: out }, limit),
        None => decode_stream(src, at, avail, h, out, limit),
    }
}

fn decode_stream(src: &dyn ReadAt, at: u64, avail: u64, h: &CcobHeader, out: &mut dyn io::Write, limit: u64) -> Result<u64, BundleError> {
    let payload_end = at + avail;
    let mut rr = RangeReader::new(src, at + h.header_len, payload_end);
    let want_all = limit >= h.uncompressed_size;
    let copied = match h.method {
        CcobMethod::Zstd => {
            let mut dec = zstd::stream::read::Decoder::with_buffer(&mut rr).map_err(|e| err(at, format!("zstd: {e}")))?.single_frame();
            let n = io::copy(&mut (&mut dec).take(limit.min(h.uncompressed_size) + u64::from(want_all)), out).map_err(|e| err(at, format!("zstd: {e}")))?;
            if want_all {
                // Drain to the end of the frame so that `consumed` is exact.
                let extra = io::copy(&mut dec, &mut io::sink()).map_err(|e| err(at, format!("zstd: {e}")))?;
                if extra != 0 {
                    return Err(err(at, "decoded data longer than claimed"));
                }
            }
            n
        }
        CcobMethod::Zlib => {
            let mut dec = flate2::bufread::ZlibDecoder::new(&mut rr);
            let n = io::copy(&mut (&mut dec).take(limit.min(h.uncompressed_size) + u64::from(want_all)), out).map_err(|e| err(at, format!("zlib: {e}")))?;
            if want_all {
                let extra = io::copy(&mut dec, &mut io::sink()).map_err(|e| err(at, format!("zlib: {e}")))?;
                if extra != 0 {
                    return Err(err(at, "decoded data longer than claimed"));
                }
            }
            n
        }
    };
    if want_all && copied != h.uncompressed_size {
        return Err(err(at, format!("decoded {copied} bytes, header says {}", h.uncompressed_size)));
    }
    Ok(rr.consumed)
}

/// Fully decodes the CCOB at `at` (`len` bytes including the header) and
/// checks the content against the header's hash.
pub fn decode(src: &dyn ReadAt, at: u64, len: u64, h: &CcobHeader) -> Result<Vec<u8>, BundleError> {
    check_ratio(at, h, len)?;
    // Grow with the data instead of trusting the claim up front.
    let mut out = Vec::with_capacity(h.uncompressed_size.min(64 << 20) as usize);
    decode_checked(src, at, len, h, &mut out)?;
    Ok(out)
}

/// Checks the CCOB at `at` against its header's hash, keeping nothing.
pub fn verify(src: &dyn ReadAt, at: u64, len: u64, h: &CcobHeader) -> Result<(), BundleError> {
    check_ratio(at, h, len)?;
    decode_checked(src, at, len, h, &mut io::sink())
}

/// Decodes `[offset, offset+n)` of the CCOB's content and checks the whole
/// content against the header's hash: everything is decoded and hashed,
/// but only the range is kept, so memory is the range plus the decoder's
/// window.
pub fn decode_range(src: &dyn ReadAt, at: u64, len: u64, h: &CcobHeader, offset: u64, n: u64) -> Result<Vec<u8>, BundleError> {
    check_ratio(at, h, len)?;
    range_end(at, h, offset, n)?;
    let mut out = RangeWriter { skip: offset, keep: n, buf: Vec::with_capacity(n as usize) };
    decode_checked(src, at, len, h, &mut out)?;
    if out.buf.len() as u64 != n {
        return Err(err(at, "decoded content shorter than its header says"));
    }
    Ok(out.buf)
}

/// [`decode_range`] without the hash check: decodes only up to the range's
/// end. Only for a caller that has checked this very CCOB, in this very
/// version of its source, with [`decode_range`] or [`verify`] before (the
/// view remembers such checks per source version): it spares decoding a
/// whole bundle for every window of a large object or every object of one
/// bundle.
pub fn decode_range_prechecked(src: &dyn ReadAt, at: u64, len: u64, h: &CcobHeader, offset: u64, n: u64) -> Result<Vec<u8>, BundleError> {
    check_ratio(at, h, len)?;
    let end = range_end(at, h, offset, n)?;
    let mut out = RangeWriter { skip: offset, keep: n, buf: Vec::with_capacity(n as usize) };
    decode_into(src, at, len, h, &mut out, end, None)?;
    if out.buf.len() as u64 != n {
        return Err(err(at, "decoded content shorter than its header says"));
    }
    Ok(out.buf)
}

fn range_end(at: u64, h: &CcobHeader, offset: u64, n: u64) -> Result<u64, BundleError> {
    offset.checked_add(n).filter(|e| *e <= h.uncompressed_size).ok_or_else(|| err(at, "range outside the decoded content"))
}

/// Discards the first `skip` bytes written, keeps the next `keep`, and
/// discards the rest.
struct RangeWriter {
    skip: u64,
    keep: u64,
    buf: Vec<u8>,
}

impl io::Write for RangeWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let drop = (self.skip.min(data.len() as u64)) as usize;
        self.skip -= drop as u64;
        let take = (self.keep.min((data.len() - drop) as u64)) as usize;
        self.keep -= take as u64;
        self.buf.extend_from_slice(&data[drop..drop + take]);
        Ok(data.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Decodes only the first `n` bytes (enough for the inner bundle header),
/// unchecked: planning reads the entry table from it; the bytes of code
/// objects are always read through a checked decode.
pub fn decode_prefix(src: &dyn ReadAt, at: u64, len: u64, h: &CcobHeader, n: u64) -> Result<Vec<u8>, BundleError> {
    let mut out = Vec::with_capacity(n.min(h.uncompressed_size) as usize);
    decode_into(src, at, len, h, &mut out, n.min(h.uncompressed_size), None)?;
    Ok(out)
}

/// A decoded prefix that reports the full decoded size, so a bundle header
/// inside it can be validated against the whole content.
struct Prefix<'a> {
    bytes: &'a [u8],
    size: u64,
}

impl ReadAt for Prefix<'_> {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.bytes.read_at(offset, buf)?;
        if n < buf.len() && offset + (n as u64) < self.size {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "beyond decoded prefix"));
        }
        Ok(n)
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.size)
    }
}

/// The bundle(s) inside a CCOB with their offsets in the decoded content.
/// Normally one bundle fills the content and only a prefix is decoded.
pub fn inner_bundles(src: &dyn ReadAt, at: u64, len: u64, h: &CcobHeader) -> Result<Vec<(u64, Bundle)>, BundleError> {
    const PREFIX: u64 = 64 * 1024;
    if h.uncompressed_size > PREFIX {
        let prefix = decode_prefix(src, at, len, h, PREFIX)?;
        let view = Prefix { bytes: &prefix, size: h.uncompressed_size };
        match parse_bundle(&view, 0, h.uncompressed_size) {
            Ok(b) if b.len == h.uncompressed_size => return Ok(vec![(0, b)]),
            Ok(_) | Err(BundleError::Io(_)) => {}
            Err(e) => return Err(e),
        }
    }
    // Not one bundle filling the content (clang never writes that): scan the
    // whole decoded content, within a bound — a hostile CCOB claiming
    // gigabytes must not cost them in memory at planning time.
    const FULL_SCAN_MAX: u64 = 64 << 20;
    if h.uncompressed_size > FULL_SCAN_MAX {
        return Err(err(at, format!("content of {} bytes is not a single bundle; too large to scan", h.uncompressed_size)));
    }
    let data = decode(src, at, len, h)?;
    let chunks = scan_fatbin(&data, 0, data.len() as u64)?;
    let mut out = Vec::new();
    for c in chunks {
        match c {
            Chunk::Plain { at, bundle } => out.push((at, bundle)),
            Chunk::Compressed { at: inner, .. } => return Err(err(at, format!("nested CCOB at {inner:#x}"))),
        }
    }
    Ok(out)
}

/// Wraps an uncompressed bundle in a CCOB envelope as LLVM writes it
/// (FORMATS.md §1.3). Used by the recompression tool and test data.
pub fn encode(bundle: &[u8], version: u16, method: CcobMethod, level: i32) -> io::Result<Vec<u8>> {
    let payload = match method {
        CcobMethod::Zstd => zstd::bulk::compress(bundle, level)?,
        CcobMethod::Zlib => {
            let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(level.clamp(0, 9) as u32));
            io::Write::write_all(&mut e, bundle)?;
            e.finish()?
        }
    };
    let header_len: u64 = match version {
        1 => 20,
        2 => 24,
        3 => 32,
        v => return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("CCOB version {v}"))),
    };
    let uncompressed_size = bundle.len() as u64;
    let total = payload.len() as u64 + header_len;
    // v1 and v2 store their sizes in 32 bits (v1 has no total size).
    let fits = |n: u64| u32::try_from(n).is_ok();
    if version < 3 && (!fits(uncompressed_size) || (version == 2 && !fits(total))) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "bundle too large for CCOB v1/v2"));
    }
    let header =
        CcobHeader { version, method, total_size: (version >= 2).then_some(total), uncompressed_size, hash: md5_low(&Md5::digest(bundle)), header_len };
    let mut out = header.to_bytes();
    out.reserve(payload.len());
    out.extend_from_slice(&payload);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `RangeReader` as a plain `Read` (the decoders use it as `BufRead`;
    /// `Read` must hand out the same bytes): a range of a source, in
    /// pieces, counted as consumed, ending at the range's end.
    #[test]
    fn range_reader_reads_its_range() {
        let src: Vec<u8> = (0..=255u8).collect();
        let mut r = RangeReader::new(&src, 10, 50);
        let mut out = Vec::new();
        let mut buf = [0u8; 7];
        // 40 bytes in pieces of 7 take 6 reads; a 7th returns 0.
        for _ in 0..7 {
            let n = r.read(&mut buf).unwrap();
            out.extend_from_slice(&buf[..n]);
        }
        assert_eq!(out, (10..50u8).collect::<Vec<u8>>());
        assert_eq!(r.consumed, 40);
    }

    /// `Prefix` (a decoded prefix standing for the whole content): a read
    /// that stops short inside the content but past the prefix is an error,
    /// never a short read that could pass for the content's end; a read that
    /// stops at the content's real end is an ordinary short read.
    #[test]
    fn prefix_reads_past_the_prefix_are_errors() {
        let bytes: Vec<u8> = (0..10).collect();
        let mut buf = [0u8; 10];
        let cut = Prefix { bytes: &bytes, size: 100 };
        assert_eq!(cut.read_at(5, &mut buf).map_err(|e| e.kind()), Err(io::ErrorKind::UnexpectedEof));
        assert_eq!(cut.read_at(0, &mut buf).unwrap(), 10);
        assert_eq!(cut.size().unwrap(), 100);
        let whole = Prefix { bytes: &bytes, size: 10 };
        assert_eq!(whole.read_at(5, &mut buf).unwrap(), 5);
        assert_eq!(buf[..5], [5, 6, 7, 8, 9]);
        assert_eq!(whole.read_at(10, &mut buf).unwrap(), 0);
        let eleven = Prefix { bytes: &bytes, size: 11 };
        assert!(eleven.read_at(5, &mut buf).is_err());
    }

    /// A CCOB whose content is not one bundle is scanned whole only below a
    /// bound: one claiming (and really decoding to) 80 MiB is refused
    /// without being decoded, so planning costs no such memory.
    #[test]
    fn oversized_multi_part_content_is_not_decoded_whole() {
        let id = b"hipv4-amdgcn-amd-amdhsa--gfx90a";
        let mut content = Vec::new();
        content.extend_from_slice(crate::formats::bundle::BUNDLE_MAGIC);
        content.extend_from_slice(&1u64.to_le_bytes());
        let code_at = (32 + 24 + id.len()) as u64;
        content.extend_from_slice(&code_at.to_le_bytes());
        content.extend_from_slice(&16u64.to_le_bytes());
        content.extend_from_slice(&(id.len() as u64).to_le_bytes());
        content.extend_from_slice(id);
        content.extend_from_slice(&[0x7f; 16]);
        // Incompressible bytes keep the ratio under the header check's
        // limit; zeros fill the claim.
        content.extend(super::super::mutant_tests::noise(1));
        content.resize(80 << 20, 0);
        let ccob = encode(&content, 3, CcobMethod::Zstd, 1).unwrap();
        let h = parse_header(&ccob, 0).unwrap();
        assert_eq!(h.uncompressed_size, 80 << 20);
        match inner_bundles(&ccob, 0, ccob.len() as u64, &h) {
            Err(BundleError::Ccob { what, .. }) => assert!(what.contains("too large to scan"), "{what}"),
            other => panic!("expected a refusal, got {:?}", other.map(|v| v.len())),
        }
    }
}
