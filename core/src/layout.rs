//! A served file as an ordered list of extents: ranges of the source file,
//! small owned byte buffers (patched headers, wrappers, the marker, a TOC),
//! zeros, and ranges of decoded (decompressed) blobs.
//!
//! Planners build a `Layout` by editing it like a byte buffer (`write_at`,
//! `delete`, `push_*`) without ever copying source bytes, so a 1.3 GB
//! library becomes a handful of extents whose total length is known from
//! headers alone. `read_at` binary-searches the extents.

use std::fmt;
use std::io;
use std::sync::Arc;

use thiserror::Error;

use crate::io::{read_exact_at, ReadAt};

/// Why a layout could not be read or edited. `Clone`, so one failure can
/// be handed to every reader that waited for the same shared decode.
#[derive(Debug, Error, Clone)]
pub enum LayoutError {
    #[error("source read failed: {0}")]
    Io(Arc<io::Error>),
    /// The blob's decoder refused it (a corrupt or damaged encoding); the
    /// decoder's own typed error is the source.
    #[error("decoding the blob at {at:#x} failed: {source}")]
    Decode {
        at: u64,
        #[source]
        source: Arc<dyn std::error::Error + Send + Sync>,
    },
    /// A blob decoded to fewer bytes than its plan said.
    #[error("the blob at {at:#x} decoded shorter than planned")]
    ShortDecode { at: u64 },
    /// The layout has a blob but the reader was given no decoder.
    #[error("the blob at {at:#x} needs a decoder")]
    NoDecoder { at: u64 },
    #[error("edit outside the layout: {off:#x}+{len:#x} > {total:#x}")]
    OutOfRange { off: u64, len: u64, total: u64 },
}

impl From<io::Error> for LayoutError {
    fn from(e: io::Error) -> Self {
        LayoutError::Io(Arc::new(e))
    }
}

impl LayoutError {
    /// A decoder's failure, keeping its typed error.
    pub fn decode(at: u64, e: impl std::error::Error + Send + Sync + 'static) -> LayoutError {
        LayoutError::Decode { at, source: Arc::new(e) }
    }

    /// The decoder's error, if this is one of type `E`.
    pub fn decode_error<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            LayoutError::Decode { source, .. } => source.downcast_ref::<E>(),
            _ => None,
        }
    }
}

/// An encoded (compressed) blob of the source whose decoded bytes some
/// extents use. The layout knows only where it is and how long it decodes
/// to; `header` is the encoding's own header as stored, which only its
/// decoder (a [`Decoder`]) interprets.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Encoded {
    /// Offset of the blob in the source file.
    pub at: u64,
    /// Its length including the header.
    pub len: u64,
    /// Its length decoded.
    pub decoded_len: u64,
    pub header: Arc<[u8]>,
}

/// Supplies ranges of decoded blobs — in practice one code object each
/// (one extent of an archive layout). The layout is given one; it never
/// decodes itself. The view's caches decoded objects in a shared LRU, so a
/// sequentially read archive decodes each object once; the bundle format
/// offers plain decoders for tests and one-shot tools.
pub trait Decoder: Send + Sync {
    fn object(&self, src: &dyn ReadAt, blob: &Encoded, offset: u64, len: u64) -> Result<Arc<Vec<u8>>, LayoutError>;
}

/// For layouts read without decoding (headers being planned): a blob is
/// an error, never zeros.
pub struct NoDecoding;

impl Decoder for NoDecoding {
    fn object(&self, _: &dyn ReadAt, blob: &Encoded, _: u64, _: u64) -> Result<Arc<Vec<u8>>, LayoutError> {
        Err(LayoutError::NoDecoder { at: blob.at })
    }
}

#[derive(Clone)]
pub enum Piece {
    /// Source bytes starting at `offset`.
    Source {
        offset: u64,
    },
    /// Owned bytes starting at `offset` into `data`.
    Bytes {
        data: Arc<[u8]>,
        offset: usize,
    },
    Zeros,
    /// Bytes of `encoded`, decoded, starting at `offset`.
    Decoded {
        encoded: Arc<Encoded>,
        offset: u64,
    },
}

impl fmt::Debug for Piece {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Piece::Source { offset } => write!(f, "Source@{offset:#x}"),
            Piece::Bytes { data, offset } => write!(f, "Bytes[{}]@{offset}", data.len()),
            Piece::Zeros => write!(f, "Zeros"),
            Piece::Decoded { encoded: blob, offset } => write!(f, "Decoded({:#x})@{offset:#x}", blob.at),
        }
    }
}

impl Piece {
    fn advanced(&self, by: u64) -> Piece {
        match self {
            Piece::Source { offset } => Piece::Source { offset: offset + by },
            Piece::Bytes { data, offset } => Piece::Bytes { data: data.clone(), offset: offset + by as usize },
            Piece::Zeros => Piece::Zeros,
            Piece::Decoded { encoded: blob, offset } => Piece::Decoded { encoded: blob.clone(), offset: offset + by },
        }
    }
}

#[derive(Clone, Debug)]
pub struct Extent {
    pub start: u64,
    pub len: u64,
    pub piece: Piece,
}

#[derive(Clone, Debug, Default)]
pub struct Layout {
    extents: Vec<Extent>,
    len: u64,
}

/// Largest piece of a decoded code object one read decodes and holds.
const DECODE_WINDOW: u64 = 16 << 20;

/// Largest owned or zero piece a coalesced source read reads past (and then
/// overwrites): patched header fields and table entries, never whole
/// sections.
const MAX_PATCH_GAP: u64 = 4096;

impl Layout {
    pub fn new() -> Layout {
        Layout::default()
    }

    /// The whole source file, unchanged.
    pub fn passthrough(len: u64) -> Layout {
        let mut l = Layout::new();
        l.push_source(0, len);
        l
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn extents(&self) -> &[Extent] {
        &self.extents
    }

    /// Bytes of the layout that are owned (not source, blob or zeros):
    /// what a plan costs in memory.
    pub fn owned_bytes(&self) -> u64 {
        self.extents.iter().filter(|e| matches!(e.piece, Piece::Bytes { .. })).map(|e| e.len).sum()
    }

    fn push(&mut self, len: u64, piece: Piece) {
        if len == 0 {
            return;
        }
        self.extents.push(Extent { start: self.len, len, piece });
        self.len += len;
    }

    pub fn push_source(&mut self, offset: u64, len: u64) {
        self.push(len, Piece::Source { offset });
    }

    pub fn push_bytes(&mut self, bytes: impl Into<Arc<[u8]>>) {
        let data: Arc<[u8]> = bytes.into();
        let len = data.len() as u64;
        self.push(len, Piece::Bytes { data, offset: 0 });
    }

    pub fn push_zeros(&mut self, len: u64) {
        self.push(len, Piece::Zeros);
    }

    pub fn push_decoded(&mut self, blob: Arc<Encoded>, offset: u64, len: u64) {
        self.push(len, Piece::Decoded { encoded: blob, offset });
    }

    /// Index of the extent containing `pos` (`pos < len`).
    fn find(&self, pos: u64) -> usize {
        self.extents.partition_point(|e| e.start + e.len <= pos)
    }

    /// Makes `pos` an extent boundary; returns the index of the extent that
    /// starts at `pos` (or `extents.len()` at the end).
    fn split_at(&mut self, pos: u64) -> usize {
        let i = self.find(pos);
        if i == self.extents.len() || self.extents[i].start == pos {
            return i;
        }
        let e = &self.extents[i];
        let head = pos - e.start;
        let tail = Extent { start: pos, len: e.len - head, piece: e.piece.advanced(head) };
        self.extents[i].len = head;
        self.extents.insert(i + 1, tail);
        i + 1
    }

    fn check(&self, off: u64, len: u64) -> Result<(), LayoutError> {
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(LayoutError::OutOfRange { off, len, total: self.len }),
        }
    }

    /// Overwrites `[off, off+bytes.len())`, which must lie inside the layout.
    pub fn write_at(&mut self, off: u64, bytes: &[u8]) -> Result<(), LayoutError> {
        let len = bytes.len() as u64;
        self.check(off, len)?;
        if len == 0 {
            return Ok(());
        }
        let a = self.split_at(off);
        let b = self.split_at(off + len);
        let data: Arc<[u8]> = bytes.into();
        self.extents.splice(a..b, [Extent { start: off, len, piece: Piece::Bytes { data, offset: 0 } }]);
        Ok(())
    }

    /// Removes `[off, off+len)`; later bytes move down.
    pub fn delete(&mut self, off: u64, len: u64) -> Result<(), LayoutError> {
        self.check(off, len)?;
        if len == 0 {
            return Ok(());
        }
        let a = self.split_at(off);
        let b = self.split_at(off + len);
        self.extents.drain(a..b);
        for e in &mut self.extents[a..] {
            e.start -= len;
        }
        self.len -= len;
        Ok(())
    }

    /// Reads the current content of `[off, off+len)` into a new vector
    /// (planners use it on headers only).
    pub fn read_vec(&self, off: u64, len: usize, src: &dyn ReadAt) -> Result<Vec<u8>, LayoutError> {
        self.check(off, len as u64)?;
        let mut v = vec![0u8; len];
        self.read_at(off, &mut v, src, &NoDecoding)?;
        Ok(v)
    }

    /// Fills `buf` from `offset`; returns the bytes read (short only at the
    /// end of the layout). A source that is shorter than planned is an
    /// error, never silently wrong bytes.
    pub fn read_at(&self, offset: u64, buf: &mut [u8], src: &dyn ReadAt, blobs: &dyn Decoder) -> Result<usize, LayoutError> {
        if offset >= self.len || buf.is_empty() {
            return Ok(0);
        }
        let total = (buf.len() as u64).min(self.len - offset) as usize;
        let mut done = 0usize;
        let mut i = self.find(offset);
        while done < total {
            let Some(e) = self.extents.get(i) else { break };
            let pos = offset + done as u64;
            let within = pos - e.start;
            // A code object is the unit decoded and cached — up to
            // DECODE_WINDOW; a larger one (only hostile input comes near) is
            // decoded window by window, so no read holds more than a window
            // in memory. Other pieces are one window.
            let (win, win_end) = match e.piece {
                Piece::Decoded { .. } => {
                    let win = within / DECODE_WINDOW * DECODE_WINDOW;
                    (win, (win + DECODE_WINDOW).min(e.len))
                }
                _ => (0, e.len),
            };
            let n = ((win_end - within) as usize).min(total - done);
            if let Piece::Source { offset: so } = e.piece {
                // Patched tables (section headers, relocations) leave source
                // runs of a few bytes between owned ones; one read of the
                // whole span, then the patches over it, costs one syscall
                // instead of hundreds.
                let (last, span) = self.source_run(i, within, total - done);
                if last > i {
                    let out = &mut buf[done..done + span];
                    read_exact_at(src, so + within, out)?;
                    self.overlay(i + 1, last, pos, out);
                    done += span;
                    i = last;
                    let l = &self.extents[last];
                    if pos + span as u64 == l.start + l.len {
                        i += 1;
                    }
                    continue;
                }
            }
            let out = &mut buf[done..done + n];
            match &e.piece {
                Piece::Source { offset: so } => read_exact_at(src, so + within, out)?,
                Piece::Bytes { data, offset: bo } => {
                    let s = bo + within as usize;
                    out.copy_from_slice(&data[s..s + n]);
                }
                Piece::Zeros => out.fill(0),
                Piece::Decoded { encoded: blob, offset: bo } => {
                    let d = blobs.object(src, blob, *bo + win, win_end - win)?;
                    let s = (within - win) as usize;
                    let slice = d.get(s..s + n).ok_or(LayoutError::ShortDecode { at: blob.at })?;
                    out.copy_from_slice(slice);
                }
            }
            done += n;
            if within + n as u64 == e.len {
                i += 1;
            }
        }
        Ok(done)
    }

    /// The run that one source read can serve, starting `within` bytes into
    /// the source extent `i` and at most `room` bytes long: the following
    /// extents up to the last source extent that continues `i`'s source
    /// offsets in step (what `write_at` over source bytes leaves), with only
    /// small owned or zero pieces between them. Returns the index of that
    /// last extent (`i` when there is none) and the run's length in bytes.
    fn source_run(&self, i: usize, within: u64, room: usize) -> (usize, usize) {
        let Some(Extent { start, piece: Piece::Source { offset }, .. }) = self.extents.get(i) else { return (i, 0) };
        let delta = offset.wrapping_sub(*start);
        let begin = start + within;
        let (mut last, mut span) = (i, 0usize);
        for (j, e) in self.extents.iter().enumerate().skip(i + 1) {
            if e.start - begin >= room as u64 {
                break;
            }
            match e.piece {
                Piece::Source { offset } if offset.wrapping_sub(e.start) == delta => {
                    last = j;
                    span = ((e.start + e.len - begin) as usize).min(room);
                }
                Piece::Bytes { .. } | Piece::Zeros if e.len <= MAX_PATCH_GAP => {}
                _ => break,
            }
        }
        (last, span)
    }

    /// Writes the owned and zero pieces of extents `from..=to` over `out`,
    /// which holds the layout's bytes from `pos` as the source had them.
    fn overlay(&self, from: usize, to: usize, pos: u64, out: &mut [u8]) {
        for e in &self.extents[from..=to] {
            let a = (e.start - pos) as usize;
            let n = (e.len as usize).min(out.len().saturating_sub(a));
            match &e.piece {
                Piece::Bytes { data, offset } => out[a..a + n].copy_from_slice(&data[*offset..*offset + n]),
                Piece::Zeros => out[a..a + n].fill(0),
                _ => {}
            }
        }
    }

    /// The source pieces of layout bytes `[from, to)`, clipped to that
    /// range, as (layout start, source offset, length): what a sequential
    /// reader at `from` needs next, for read-ahead hints. Clipped, because
    /// one piece may be most of a file (a transformed library's host code
    /// is one run of the source) and an archive is a chain of scattered
    /// ranges; either way the hint should run a fixed distance ahead.
    pub fn source_ranges(&self, from: u64, to: u64) -> Vec<(u64, u64, u64)> {
        let mut out = Vec::new();
        for e in self.extents.iter().skip(self.find(from)) {
            if e.start >= to {
                break;
            }
            if let Piece::Source { offset } = e.piece {
                let a = e.start.max(from);
                let b = (e.start + e.len).min(to);
                if a < b {
                    out.push((a, offset + (a - e.start), b - a));
                }
            }
        }
        out
    }

    /// Reads the whole layout (tests and small files only).
    pub fn materialize(&self, src: &dyn ReadAt, blobs: &dyn Decoder) -> Result<Vec<u8>, LayoutError> {
        let mut v = vec![0u8; self.len as usize];
        let n = self.read_at(0, &mut v, src, blobs)?;
        v.truncate(n);
        Ok(v)
    }

    /// Merges neighbours that continue each other (adjacent source ranges,
    /// owned buffers, zeros) so serving walks as few extents as possible.
    pub fn compact(&mut self) {
        let mut out: Vec<Extent> = Vec::with_capacity(self.extents.len());
        let mut pending: Vec<u8> = Vec::new();
        let mut pending_start = 0u64;
        let flush = |out: &mut Vec<Extent>, pending: &mut Vec<u8>, start: u64| {
            if !pending.is_empty() {
                let data: Arc<[u8]> = std::mem::take(pending).into();
                out.push(Extent { start, len: data.len() as u64, piece: Piece::Bytes { data, offset: 0 } });
            }
        };
        for e in self.extents.drain(..) {
            if let Piece::Bytes { data, offset } = &e.piece {
                if pending.is_empty() {
                    pending_start = e.start;
                }
                pending.extend_from_slice(&data[*offset..*offset + e.len as usize]);
                continue;
            }
            flush(&mut out, &mut pending, pending_start);
            if let Some(last) = out.last_mut() {
                let merged = match (&last.piece, &e.piece) {
                    (Piece::Source { offset: a }, Piece::Source { offset: b }) => a + last.len == *b,
                    (Piece::Zeros, Piece::Zeros) => true,
                    (Piece::Decoded { encoded: x, offset: a }, Piece::Decoded { encoded: y, offset: b }) => Arc::ptr_eq(x, y) && a + last.len == *b,
                    _ => false,
                };
                if merged {
                    last.len += e.len;
                    continue;
                }
            }
            out.push(e);
        }
        flush(&mut out, &mut pending, pending_start);
        self.extents = out;
    }
}

#[cfg(test)]
#[path = "layout_tests.rs"]
mod tests;
