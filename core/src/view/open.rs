//! Open files of the view: what one `open` serves, read positionally by
//! any number of threads.

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::copy;
use crate::data_cache::{CacheError, Data, Key, MemoryCache, Sink};
use crate::formats::bundle::ccob::{self, CcobHeader};
use crate::formats::bundle::BundleError;
use crate::io::ReadAt;
use crate::layout::{Decoder, Encoded, Layout, LayoutError};
use crate::source::{self, SourceId, SourceStat};

use super::{Attr, Error, Origin, Result, Stats};
use crate::plan::{ArchivePlan, FatBinary};

/// Decodes of compressed bundles running at once: each holds an object
/// buffer and a zstd window outside the cache budget, so their number is
/// bounded instead of growing with the worker threads.
const DECODE_SLOTS: usize = 2;

/// How far ahead (in served bytes) a sequential reader's source is
/// prefetched (an archive's code objects are ~1-2 MB each).
const PREFETCH_WINDOW: u64 = 4 << 20;

/// A first read at offset 0 at least this long starts a sequential reader
/// (see `OpenFile::read_layout`).
const SEQUENTIAL_START: usize = 128 << 10;

/// Source gap up to which two upcoming extents share one readahead hint.
const PREFETCH_JOIN: u64 = 64 << 10;

/// A counting semaphore for [`DECODE_SLOTS`].
#[derive(Default)]
pub(super) struct Slots {
    used: std::sync::Mutex<usize>,
    freed: std::sync::Condvar,
}

impl Slots {
    pub(super) fn run<T>(&self, f: impl FnOnce() -> T) -> T {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        while *used >= DECODE_SLOTS {
            used = self.freed.wait(used).unwrap_or_else(|p| p.into_inner());
        }
        *used += 1;
        drop(used);
        /// Frees the slot however `f` ends (a panic must not leak it, or
        /// every later decode would wait for ever).
        struct Release<'a>(&'a Slots);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                *self.0.used.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
                self.0.freed.notify_one();
            }
        }
        let _release = Release(self);
        f()
    }
}

/// What an open file serves.
#[derive(Clone)]
pub(super) enum Content {
    Pass(Layout),
    Binary(Arc<FatBinary>),
    /// An archive in scheme `none`, served from its layout.
    Archive(Arc<ArchivePlan>),
    /// An archive in scheme `zstd-per-kernel`: its bytes, from the cache.
    Compressed(Data),
}

/// Key of one decoded code object: source version, CCOB offset, range.
fn object_key(id: &SourceId, at: u64, offset: u64, len: u64) -> Key {
    let mut b = Vec::with_capacity(96);
    for v in [id.dev, id.ino, id.size, id.mtime.sec as u64, id.mtime.nsec as u64, id.ctime.sec as u64, id.ctime.nsec as u64, at, offset, len] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    Key::of(&[b"object", &b])
}

/// The memory-cache tag of values made from source version `id` (never
/// 0, which is untagged): dropping a replaced version's plan drops them.
pub(super) fn version_tag(id: &SourceId) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    std::hash::Hash::hash(id, &mut h);
    std::hash::Hasher::finish(&h).max(1)
}

/// Key of the hash check of one CCOB of one source version; its cached
/// value is the hash the content was found to have (8 bytes, as in the
/// header), so a damaged CCOB's verdict is remembered as well as a sound
/// one's.
fn check_key(id: &SourceId, at: u64) -> Key {
    let mut b = Vec::with_capacity(64);
    for v in [id.dev, id.ino, id.size, id.mtime.sec as u64, id.mtime.nsec as u64, id.ctime.sec as u64, id.ctime.nsec as u64, at] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    Key::of(&[b"ccob-check", &b])
}

/// Decoded blobs of one source identity, through the shared memory cache.
///
/// Never a wrong byte: the first object read from a CCOB comes from a
/// decode of the whole CCOB checked against its header's hash, and the
/// verdict is remembered (tagged with the source version, so it leaves
/// with it). Later objects and windows of a checked CCOB decode only up to
/// their end; a damaged one fails every read with a typed error (EIO at
/// the mount) after one warning.
struct DecodedObjects<'a> {
    cache: &'a MemoryCache,
    slots: &'a Slots,
    id: SourceId,
    /// The served file (for the warning).
    path: &'a std::path::Path,
}

impl DecodedObjects<'_> {
    /// The remembered verdict on `blob`: `Some(Ok)` checked and sound,
    /// `Some(Err)` damaged, `None` not checked (or forgotten).
    fn verdict(&self, blob: &Encoded, h: &CcobHeader) -> Option<std::result::Result<(), LayoutError>> {
        let v = self.cache.peek(&check_key(&self.id, blob.at))?;
        let computed = u64::from_le_bytes(v.get(..8)?.try_into().ok()?);
        Some(if computed == h.hash { Ok(()) } else { Err(LayoutError::decode(blob.at, BundleError::HashMismatch { at: blob.at, stored: h.hash, computed })) })
    }

    fn remember(&self, blob: &Encoded, computed: u64) {
        let _ = self.cache.get_or_load_tagged(&check_key(&self.id, blob.at), version_tag(&self.id), || Ok(Arc::new(computed.to_le_bytes().to_vec())));
    }
}

impl Decoder for DecodedObjects<'_> {
    fn object(&self, src: &dyn ReadAt, blob: &Encoded, offset: u64, len: u64) -> std::result::Result<Arc<Vec<u8>>, LayoutError> {
        let h = ccob::encoded_header(blob).map_err(|e| LayoutError::decode(blob.at, e))?;
        let checked = match self.verdict(blob, &h) {
            Some(Err(e)) => return Err(e),
            Some(Ok(())) => true,
            None => false,
        };
        // Every reader gets the typed error, also those that waited for
        // another's decode (the cache hands the one result to all).
        let r = self.cache.get_or_load_tagged(&object_key(&self.id, blob.at, offset, len), version_tag(&self.id), || {
            let r = self.slots.run(|| {
                if checked {
                    ccob::decode_range_prechecked(src, blob.at, blob.len, &h, offset, len)
                } else {
                    ccob::decode_range(src, blob.at, blob.len, &h, offset, len)
                }
            });
            match r {
                Ok(v) => {
                    if !checked {
                        self.remember(blob, h.hash);
                    }
                    Ok(Arc::new(v))
                }
                Err(BundleError::Io(e)) => Err(CacheError::compute(LayoutError::from(e))),
                Err(e) => {
                    if let BundleError::HashMismatch { computed, .. } = e {
                        log::warn!("{}: {e} (reads of its code objects fail with EIO)", self.path.display());
                        self.remember(blob, computed);
                    }
                    Err(CacheError::compute(LayoutError::decode(blob.at, e)))
                }
            }
        });
        r.map_err(|e| match e.compute_error::<LayoutError>() {
            Some(typed) => typed.clone(),
            None => LayoutError::Decode { at: blob.at, source: Arc::new(e) },
        })
    }
}

/// Everything an open file shares with the view.
#[derive(Clone)]
pub(super) struct Shared {
    pub slots: Arc<Slots>,
    pub memory: Arc<MemoryCache>,
    pub stats: Arc<Stats>,
}

/// An open file of the view. Reads are positional and may run concurrently.
pub struct OpenFile {
    shared: Shared,
    /// A complete local copy of this content (disk cache), if one exists.
    materialized: Option<Data>,
    content: Content,
    file: File,
    id: SourceId,
    /// Mode, owner and link count of the source when opened (see
    /// [`OpenFile::unchanged`]).
    meta: SourceMeta,
    attr: Attr,
    /// Where the previous read ended (sequential-access detection).
    last_end: AtomicU64,
    /// Layout position up to which source extents were prefetched.
    prefetched: AtomicU64,
    pub(super) path: PathBuf,
}

/// What a source file's inode says beyond its content identity: a change
/// of these alone (chmod, chown, a new hard link) changes the `ctime` but
/// not the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SourceMeta {
    perm: u32,
    uid: u32,
    gid: u32,
    nlink: u64,
}

impl SourceMeta {
    fn of(st: &SourceStat) -> SourceMeta {
        SourceMeta { perm: st.perm, uid: st.uid, gid: st.gid, nlink: st.nlink }
    }
}

impl OpenFile {
    pub(super) fn new(shared: Shared, content: Content, file: File, st: &SourceStat, attr: Attr, path: PathBuf) -> OpenFile {
        OpenFile {
            shared,
            materialized: None,
            content,
            file,
            id: st.id(),
            meta: SourceMeta::of(st),
            attr,
            last_end: AtomicU64::new(u64::MAX),
            prefetched: AtomicU64::new(0),
            path,
        }
    }

    /// The same content over another handle of the same source version
    /// (for a background copy that must not share file positions).
    pub(super) fn reopened(&self, file: File) -> OpenFile {
        OpenFile {
            shared: self.shared.clone(),
            materialized: None,
            content: self.content.clone(),
            file,
            id: self.id,
            meta: self.meta,
            attr: self.attr.clone(),
            last_end: AtomicU64::new(u64::MAX),
            prefetched: AtomicU64::new(0),
            path: self.path.clone(),
        }
    }

    pub(super) fn content(&self) -> &Content {
        &self.content
    }

    pub(super) fn set_materialized(&mut self, d: Data) {
        self.materialized = Some(d);
    }

    /// The layout served, for content made of extents (`None`: a
    /// compressed archive, served from its cache entry).
    pub fn layout(&self) -> Option<&Layout> {
        match &self.content {
            Content::Pass(l) => Some(l),
            Content::Binary(fb) => Some(&fb.plan.layout),
            Content::Archive(ap) => Some(&ap.layout),
            Content::Compressed(_) => None,
        }
    }

    /// Bytes served.
    pub fn len(&self) -> u64 {
        match (&self.content, self.layout()) {
            (Content::Compressed(d), _) => d.len(),
            (_, Some(l)) => l.len(),
            (_, None) => 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The file's attributes as of its opening (what `fstat` on the open
    /// file reports, even after the source moved on).
    pub fn attr(&self) -> &Attr {
        &self.attr
    }

    pub fn origin(&self) -> Origin {
        match self.content {
            Content::Pass(_) => Origin::Unchanged,
            Content::Binary(_) => Origin::Transformed,
            Content::Archive(_) | Content::Compressed(_) => Origin::Archive,
        }
    }

    /// The cache entry holding every byte served, if there is one: a
    /// compressed archive's, or a local copy.
    fn whole(&self) -> Option<&Data> {
        match &self.content {
            Content::Compressed(d) => Some(d),
            _ => self.materialized.as_ref(),
        }
    }

    /// A local file holding exactly the bytes served, for kernel
    /// passthrough: the source itself when served unchanged, else a
    /// complete disk-cache entry if there is one.
    pub fn passthrough_file(&self) -> Option<&File> {
        match &self.content {
            Content::Pass(_) => Some(&self.file),
            _ => self.whole().and_then(Data::file),
        }
    }

    /// The source file the layout's source extents refer to.
    pub fn source_file(&self) -> &File {
        &self.file
    }

    /// Whether the source still holds the bytes this file was opened with.
    /// A ctime change alone is accepted when it comes with a metadata
    /// change that explains it — unlinked or renamed over (the usual
    /// upgrade: link count), chmod, chown — since readers that still have
    /// the old version open or mapped must keep getting it. A ctime change
    /// with nothing else visibly different is a rewrite that restored the
    /// size and mtime (`cp -p`, `rsync --inplace -t`): refused.
    fn unchanged(&self, now: &SourceStat) -> bool {
        let id = now.id();
        id == self.id || (id.same_content(&self.id) && SourceMeta::of(now) != self.meta)
    }

    /// Fills `buf` from `offset`; returns the count (short only at EOF).
    /// Fails with [`Error::Changed`] rather than serve bytes of a source
    /// that changed under the plan. A compressed archive, or a file opened
    /// with a local copy, is read from its cache entry, which holds this
    /// version's bytes whatever the source does next: one read of one
    /// file, no decode. (Such reads reach the daemon where the kernel does
    /// not serve the copy itself: no passthrough — Windows, `--no-passthrough`
    /// — or an inode still held open in page-cache mode from before its
    /// copy was ready.)
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let n = match (self.whole(), self.layout()) {
            (Some(d), _) => d.read_at(offset, buf)?,
            (None, Some(l)) => self.read_layout(l, offset, buf)?,
            (None, None) => 0,
        };
        self.shared.stats.reads.fetch_add(1, Ordering::Relaxed);
        self.shared.stats.bytes_served.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    fn read_layout(&self, layout: &Layout, offset: u64, buf: &mut [u8]) -> Result<usize> {
        // A copy (`cp`, `cat`, a packager) starts with a whole readahead
        // window at offset 0 — the kernel asks for 512 KiB there, for 16 KiB
        // when a probe reads a header — so the disk is set going on its
        // first PREFETCH_WINDOW before the first reply, not after it.
        if offset == 0 && buf.len() >= SEQUENTIAL_START && self.last_end.load(Ordering::Relaxed) == u64::MAX {
            self.prefetch(layout, 0, PREFETCH_WINDOW);
        }
        let r = layout.read_at(offset, buf, &self.file, &self.blob_store());
        let still = source::fstat_file(&self.file).is_ok_and(|s| self.unchanged(&s));
        if !still {
            return Err(Error::Changed(self.path.display().to_string()));
        }
        let n = r?;
        // A sequential reader is kept PREFETCH_WINDOW ahead of itself in
        // the source: an archive walks scattered source ranges, which the
        // source's own readahead cannot guess, and a transformed library
        // is read by several workers at once, whose interleaved `pread`s
        // the source's readahead follows poorly.
        let end = offset + n as u64;
        if self.last_end.swap(end, Ordering::Relaxed) == offset && n > 0 {
            self.prefetch(layout, end, end + PREFETCH_WINDOW);
        }
        Ok(n)
    }

    /// Hints the source behind served bytes `[from, to)` that no earlier
    /// hint covered, neighbouring pieces (a patched table is hundreds of
    /// them) as one hint per stretch of the source.
    fn prefetch(&self, layout: &Layout, from: u64, to: u64) {
        let from = self.prefetched.fetch_max(to, Ordering::Relaxed).max(from);
        if from >= to {
            return;
        }
        let mut spans: Vec<(u64, u64)> = Vec::new();
        for (_, at, len) in layout.source_ranges(from, to) {
            match spans.last_mut() {
                Some((a, b)) if at >= *a && at <= b.saturating_add(PREFETCH_JOIN) => *b = (*b).max(at + len),
                _ => spans.push((at, at + len)),
            }
        }
        for (a, b) in spans {
            self.file.prefetch(a, b - a);
        }
    }

    /// Decoded-blob access for external copy loops.
    pub fn blob_store(&self) -> impl Decoder + '_ {
        DecodedObjects { cache: &self.shared.memory, slots: &self.shared.slots, id: self.id, path: &self.path }
    }

    /// Writes the served bytes to `dst` (offset 0; truncated to the length):
    /// a cache entry by in-kernel copy, a layout extent by extent. Fails
    /// rather than write bytes of a source that changed meanwhile.
    pub fn write_to(&self, dst: &File) -> Result<u64> {
        if let Some(d) = self.whole() {
            match d {
                Data::File(e) => copy::copy_range(&e.file, 0, dst, 0, e.len)?,
                Data::Memory(v) => copy::write_all_at(dst, v, 0)?,
            }
            dst.set_len(d.len())?;
            return Ok(d.len());
        }
        let Some(layout) = self.layout() else { return Ok(0) };
        let n = copy::write_layout(layout, &self.file, &mut |pos, buf| self.read_at(pos, buf), dst)?;
        // The source must still be the one we planned from.
        let mut probe = [0u8; 1];
        if n > 0 {
            self.read_at(0, &mut probe)?;
        }
        Ok(n)
    }

    /// Writes the served bytes to a cache sink. A layout goes through the
    /// sink in 1 MiB pieces rather than by in-kernel copy: the sink writes
    /// them as aligned chunks, which the page cache keeps in large folios
    /// (an in-kernel copy moves 64 KiB at a time), and these copies exist
    /// to be read warm. A whole local copy (a cache entry) is copied in the
    /// kernel when the sink is a file.
    pub(super) fn write_to_sink(&self, sink: &mut dyn Sink) -> Result<u64> {
        let Some(layout) = self.layout().filter(|_| self.whole().is_none()) else {
            if let Some(f) = sink.as_file() {
                return self.write_to(f);
            }
            return self.copy_through(sink, &mut |pos, buf| self.read_at(pos, buf));
        };
        self.copy_through(sink, &mut |pos, buf| self.read_layout(layout, pos, buf))
    }

    fn copy_through(&self, sink: &mut dyn Sink, read: &mut dyn FnMut(u64, &mut [u8]) -> Result<usize>) -> Result<u64> {
        let mut buf = vec![0u8; 1 << 20];
        let mut pos = 0;
        while pos < self.len() {
            let n = read(pos, &mut buf)?;
            if n == 0 {
                return Err(Error::Changed(self.path.display().to_string()));
            }
            sink.write_all(&buf[..n])?;
            pos += n as u64;
        }
        Ok(pos)
    }
}
