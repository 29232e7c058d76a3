//! What the view keeps in the data caches, and under which keys.
//!
//! - Compressed archives (`zstd-per-kernel`): computed at the archive's
//!   first `stat` (its size must be known then) into the disk cache, or the
//!   memory cache when the view has no cache directory.
//! - Local copies of other synthesized files (transformed binaries,
//!   scheme-`none` archives), written in the background, so later opens
//!   are served by the kernel from a local file (FUSE passthrough) at
//!   native page-cache speed. Which files get them is the
//!   [`CopyPolicy`]: archives whose code objects come from compressed
//!   bundles always (their bytes cost a decode); the rest, which are cheap
//!   extents of the source, once a daemon opens them a second time
//!   (`mount`) or at once (`--materialize`).
//!
//! Keys digest everything the bytes depend on — the source root and path,
//! the source file's identity (device, inode, size, mtime, ctime), what
//! pins its bytes, the selection, naming, compression, and a format
//! version — so a changed source or view never meets a stale entry, and a
//! remount, a second daemon or `bake` over the same source finds the
//! entries already made. The identity alone is not enough: (device, inode,
//! size, mtime, ctime) can repeat for other bytes — two reproducibly built
//! read-only images (squashfs, erofs) mounted in turn on one loop device
//! give the same identity to different files. So a key also holds either
//! the binary's content identity ([`Caches::content_id`]), where that is
//! cheap or must be paid anyway, or the source's instance
//! ([`CopyKey`]): this boot and the mount the file is on.

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dashmap::DashMap;
use md5::{Digest, Md5};

use crate::data_cache::{CacheError, Data, DataCache, DiskCache, Key, MemoryCache, RecordStore, Sink};
use crate::formats::bundle::ccob::CheckedOnce;
use crate::formats::host::HostPlan;
use crate::io::ReadAt;
use crate::source::{SourceId, Time};

use super::open::OpenFile;
use super::{Error, Result, ViewConfig};
use crate::plan::{ArchivePlan, FatBinary, ZSTD_LEVEL};

/// Bumped whenever what the view writes for the same inputs changes, so
/// entries of an older kpackfs are never served.
const FORMAT: &[u8] = b"kpackfs-cache-2";

/// Subdirectory of the cache directory holding probe records.
const PROBES_SUBDIR: &str = "probes";

fn id_bytes(id: &SourceId) -> Vec<u8> {
    let mut b = Vec::with_capacity(56);
    for v in [id.dev, id.ino, id.size, id.mtime.sec as u64, id.mtime.nsec as u64, id.ctime.sec as u64, id.ctime.nsec as u64] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b
}

/// The digest behind [`Caches::content_id`].
/// `None` if it would digest a range longer than `max_range`.
fn content_digest(f: &File, plan: &HostPlan, size: u64, max_range: u64) -> Result<Option<[u8; 16]>> {
    let mut h = Md5::new();
    let mut all_compressed = true;
    let mut head = [0u8; BUNDLE_HEAD];
    for w in &plan.wrappers {
        let Some(rel) = w.fatbin_offset else { continue };
        let at = plan.fat_offset.saturating_add(rel);
        let n = read_some(f, at, &mut head)?;
        all_compressed &= head[..n].starts_with(crate::formats::bundle::CCOB_MAGIC);
        h.update(w.index.to_le_bytes());
        h.update(at.to_le_bytes());
        h.update((n as u64).to_le_bytes());
        h.update(&head[..n]);
    }
    if !all_compressed {
        let (start, len) = (plan.fat_offset, plan.fat_size);
        if len > max_range {
            return Ok(None);
        }
        let mut buf = vec![0u8; 1 << 20];
        let end = start.saturating_add(len).min(size);
        let mut off = start;
        while off < end {
            let want = buf.len().min((end - off) as usize);
            let n = read_some(f, off, &mut buf[..want])?;
            if n == 0 {
                break; // shorter than its identity says: a changed source, caught at open
            }
            h.update(crc32fast::hash(&buf[..n]).to_le_bytes());
            off += n as u64;
        }
        h.update(off.to_le_bytes());
    }
    Ok(Some(h.finalize().into()))
}

/// Reads up to `buf.len()` bytes at `off`, fewer only at the end of `f`.
fn read_some(f: &File, off: u64, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(off + n as u64, &mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// Which synthesized files get local copies in the disk cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyPolicy {
    /// None (one-shot readers such as `bake`).
    Never,
    /// Those whose bytes cost a decode (archives of compressed bundles).
    Decoding,
    /// Those, and any other opened a second time by this daemon (`mount`):
    /// a file read again is likely to be read often, and warm reads of a
    /// file the daemon serves itself are capped by the kernel's FUSE page
    /// cache (small folios); one read once costs no copy.
    Reopened,
    /// All, at their first open (`--materialize`).
    All,
}

impl CopyPolicy {
    /// Whether a file that decodes (`decodes`) or not may ever be copied.
    fn may_copy(self, decodes: bool) -> bool {
        match self {
            CopyPolicy::Never => false,
            CopyPolicy::Decoding => decodes,
            CopyPolicy::Reopened | CopyPolicy::All => true,
        }
    }
}

/// The key of a local copy, and what must hold before one is queued.
pub struct CopyKey {
    key: Key,
    /// For a key pinned to the source's instance rather than its content:
    /// the source's ctime, which must lie [`SETTLE`] in the past before a
    /// copy is queued (see [`Caches::copy_key`]).
    settle: Option<Time>,
}

/// What [`Caches::attach_copy`] did for an open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyState {
    /// The open is served from a complete local copy.
    Used,
    /// A copy was queued for the background writer.
    Queued,
    /// Neither (none wanted yet, one already queued, or none possible).
    Neither,
}

/// How far in the past a source's last change must lie before a copy keyed
/// by its identity is queued (and so read): timestamps move in ticks (a
/// jiffy; a second or two on some file systems), and a change made within
/// the tick of the one before leaves the ctime as it was. A file that keeps
/// changing is never copied; one that settles is at its next open.
const SETTLE: Duration = Duration::from_secs(2);

/// Copies queued or being written at most: a burst of opens (every version
/// of a library being replaced over and over) must not pile up jobs, each
/// holding an open file; what is not queued now is at a later open.
const MAX_QUEUED: usize = 8;

/// The view's caches and its background copy writer.
pub(super) struct Caches {
    /// Decoded code objects (and compressed archives when there is no disk).
    pub memory: Arc<MemoryCache>,
    pub disk: Option<Arc<DiskCache>>,
    /// Probe results per source directory (see `View::fat_files`), in a
    /// subdirectory of the cache directory.
    pub probes: Option<Arc<RecordStore>>,
    policy: CopyPolicy,
    copies: Option<Copies>,
    /// [`SETTLE`] (shorter in tests).
    pub(super) settle: Duration,
    /// Content identities computed in this process, by source version
    /// ([`Caches::content_id`]).
    contents: DashMap<SourceId, [u8; 16]>,
}

/// Content identities kept per process before the table is cleared (each
/// is a few dozen bytes; the table only saves recomputing them).
const MAX_CONTENTS: usize = 1 << 14;
/// Bytes read from each bundle's start for its identity: a compressed
/// bundle's (CCOB) header, at most 32 bytes in every version, holds the
/// hash of its whole decoded content.
const BUNDLE_HEAD: usize = 32;

impl Caches {
    pub fn new(cache_bytes: u64) -> Caches {
        Caches {
            memory: Arc::new(MemoryCache::new(cache_bytes)),
            disk: None,
            probes: None,
            policy: CopyPolicy::Never,
            copies: None,
            settle: SETTLE,
            contents: DashMap::new(),
        }
    }

    pub fn with_disk(&mut self, disk: Arc<DiskCache>, policy: CopyPolicy) -> std::io::Result<()> {
        if policy != CopyPolicy::Never {
            self.copies = Some(Copies::start(disk.clone())?);
        }
        // Probe records live in a subdirectory with its own bound and
        // counters: they are tiny, and must not take the room or the
        // figures of the entries above.
        match RecordStore::open(disk.dir(), PROBES_SUBDIR, (disk.limit() / 64).max(1 << 20)) {
            Ok(p) => self.probes = Some(Arc::new(p)),
            Err(e) => log::warn!("probe results will not be kept on disk: {e}"),
        }
        self.disk = Some(disk);
        self.policy = policy;
        Ok(())
    }

    fn store(&self) -> &dyn DataCache {
        match &self.disk {
            Some(d) => d.as_ref(),
            None => self.memory.as_ref(),
        }
    }

    /// Key of the served file `rel` (what is served at that path of the
    /// view) made from source version `id`, whose bytes are pinned by
    /// `pin` (a content identity, [`Self::content_id`], or an instance,
    /// [`Self::copy_key`]).
    pub fn key(root: &Path, rel: &Path, id: &SourceId, pin: &[u8; 16], cfg: &ViewConfig, what: &str) -> Key {
        let sel = cfg.selection.to_string();
        let how = format!("{:?}/{:?}", cfg.naming, cfg.compression);
        Key::of(&[
            FORMAT,
            what.as_bytes(),
            root.as_os_str().as_encoded_bytes(),
            rel.as_os_str().as_encoded_bytes(),
            &id_bytes(id),
            pin,
            sel.as_bytes(),
            how.as_bytes(),
        ])
    }

    /// The key of the local copy of a transformed binary or archive of
    /// binary `fb`, version `id` open as `src` — `key` of what pins its
    /// bytes ([`Self::key`] of the served file); `decodes`: an archive
    /// whose code objects come from compressed bundles.
    ///
    /// Such an archive is pinned by its content identity if every bundle
    /// is compressed (a few small reads): its copy outlives reboots.
    /// Anything else has no cheap digest — host code, uncompressed
    /// bundles: the whole file or fat section would be read, at every open
    /// of a new process — so its copy is pinned to the source's instance:
    /// this boot and the unique id of the mount the file is on. Within one
    /// mounted file system the identity changes with the bytes (every
    /// write moves the ctime), once the copy is read a tick after the last
    /// change ([`settled`]); an image mounted in another's place is another
    /// mount. Such a copy is
    /// found again by a remount or another daemon in the same boot, not
    /// after a reboot. Without a boot id or mount id (Windows, Linux before
    /// 6.8) the instance is this process.
    pub fn copy_key(&self, fb: &FatBinary, id: &SourceId, decodes: bool, src: &File, key: impl Fn(&[u8; 16]) -> Key) -> Result<CopyKey> {
        if decodes {
            let reopen = || src.try_clone().map_err(Error::from);
            if let Some(c) = self.cheap_content_id(fb, &reopen)? {
                return Ok(CopyKey { key: key(&c), settle: None });
            }
        }
        let boot = self.disk.as_ref().and_then(|d| d.boot());
        let instance = match (boot, crate::source::mount_id(src)) {
            (Some(boot), Some(mnt)) => Md5::new().chain_update(b"instance").chain_update(boot).chain_update(mnt.to_le_bytes()).finalize().into(),
            _ => process_instance(),
        };
        Ok(CopyKey { key: key(&instance), settle: Some(id.ctime) })
    }

    /// The content identity of binary `fb`'s code objects (what its
    /// archives, and copies of them, are made from), computed once per
    /// process and source version from `src` (a handle on that version)
    /// before any cached value of it is used: a digest of the bytes the
    /// values are made from, cheap where the format allows.
    ///
    /// It covers the position of every wrapper's bundle and its first
    /// [`BUNDLE_HEAD`] bytes. When every bundle is compressed (CCOB), that
    /// header carries the hash of the bundle's decoded content (checked
    /// when it is decoded), so this identifies the code objects for a few
    /// small reads (about a millisecond for librocsparse's 111 bundles,
    /// warm). Uncompressed bundles carry no such hash: then the whole fat
    /// section is digested, as one CRC-32 per MiB (fast; enough to tell
    /// versions apart, which is all a key needs: whoever controls the
    /// source controls what is served anyway).
    pub fn content_id(&self, fb: &FatBinary, src: &dyn Fn() -> Result<File>) -> Result<[u8; 16]> {
        let c = self.content_id_within(fb, src, u64::MAX)?;
        c.ok_or_else(|| Error::Cache(CacheError::Unavailable("content identity not computed".into())))
    }

    /// [`Self::content_id`] if it costs no more than reading the bundle
    /// headers (every bundle compressed), else `None`: what a `stat` may
    /// spend to look for a cached archive.
    pub fn cheap_content_id(&self, fb: &FatBinary, src: &dyn Fn() -> Result<File>) -> Result<Option<[u8; 16]>> {
        self.content_id_within(fb, src, 0)
    }

    fn content_id_within(&self, fb: &FatBinary, src: &dyn Fn() -> Result<File>, max_range: u64) -> Result<Option<[u8; 16]>> {
        if let Some(c) = self.contents.get(&fb.id) {
            return Ok(Some(*c));
        }
        let f = src()?;
        let Some(c) = content_digest(&f, &fb.plan, fb.id.size, max_range)? else { return Ok(None) };
        if self.contents.len() > MAX_CONTENTS {
            self.contents.clear();
        }
        self.contents.insert(fb.id, c);
        Ok(Some(c))
    }

    /// The length of a compressed archive: known from its plan, else from
    /// the cache, else computed now and stored.
    pub fn compressed_len(&self, key: &Key, ap: &ArchivePlan, src: &dyn Fn() -> Result<File>) -> Result<u64> {
        if let Some(n) = ap.served_len() {
            return Ok(n);
        }
        let d = self.compressed(key, ap, src)?;
        Ok(ap.set_compressed_len(d.len()))
    }

    /// A compressed archive already in the disk cache, verified (once per
    /// process) against its checksum: what `open` serves.
    pub fn cached_archive(&self, key: &Key) -> Option<Data> {
        self.disk.as_ref()?.get(key)
    }

    /// The length of a compressed archive in the disk cache, from its meta
    /// alone: what `stat` announces. Neither the binary (its headers, its
    /// bundles) nor the entry's bytes are read, so the first `stat` after a
    /// reboot costs a few metadata reads. Announcing the length before the
    /// checksum is verified is safe because archives are deterministic: an
    /// entry found damaged at `open` is rebuilt to the same length.
    pub fn cached_archive_len(&self, key: &Key) -> Option<u64> {
        self.disk.as_ref()?.len_of(key)
    }

    /// The bytes of a compressed archive, from the cache or computed. When
    /// the disk cache cannot take it (a full disk, a lock held by a stopped
    /// process: it has said why), it is computed into the memory cache
    /// instead: the reader gets its bytes either way.
    pub fn compressed(&self, key: &Key, ap: &ArchivePlan, src: &dyn Fn() -> Result<File>) -> Result<Data> {
        let mut fill = |sink: &mut dyn Sink| {
            let file = src().map_err(CacheError::compute)?;
            log::debug!("{}: compressing {} code objects", ap.name, ap.spec.blobs.len());
            ap.spec.write_zstd(&file, &CheckedOnce::default(), ZSTD_LEVEL, sink).map_err(CacheError::compute)?;
            Ok(())
        };
        if self.disk.is_some() {
            // Computed into memory by an earlier fallback.
            if let Some(d) = self.memory.get(key) {
                return Ok(d);
            }
        }
        let d = match self.store().get_or_insert(key, &mut fill) {
            Err(why @ (CacheError::Unavailable(_) | CacheError::Io(_))) if self.disk.is_some() => {
                log::debug!("{}: computed in memory: {why}", ap.name);
                self.memory.get_or_insert(key, &mut fill)
            }
            r => r,
        };
        // The computation's own error (the source changed, a damaged
        // bundle) comes back as itself.
        d.map_err(|e| match e.compute_error::<Error>() {
            Some(Error::Changed(what)) => Error::Changed(what.clone()),
            Some(Error::Layout(l)) => Error::Layout(l.clone()),
            _ => Error::Cache(e),
        })
    }

    /// For a freshly opened synthesized file: attaches its complete local
    /// copy if the disk cache has one, or, if the policy wants one now, has
    /// one written in the background; later opens use it. `decodes`: the
    /// file's bytes cost a decode. `key` gets the source handle of `of`.
    pub fn attach_copy(&self, of: &mut OpenFile, key: &dyn Fn(&File) -> Result<CopyKey>, decodes: bool, reopen: &dyn Fn() -> Option<File>) -> CopyState {
        let (Some(disk), Some(copies)) = (&self.disk, &self.copies) else { return CopyState::Neither };
        if !self.policy.may_copy(decodes) {
            return CopyState::Neither;
        }
        let ck = match key(of.source_file()) {
            Ok(k) => k,
            Err(e) => {
                log::debug!("{}: no local copy: {e}", of.path.display());
                return CopyState::Neither;
            }
        };
        match disk.get(&ck.key) {
            Some(d) if d.len() == of.len() => {
                of.set_materialized(d);
                return CopyState::Used;
            }
            Some(_) => {
                log::warn!("{}: cached copy has the wrong length; not used", of.path.display());
                return CopyState::Neither;
            }
            None => {}
        }
        let now = match self.policy {
            CopyPolicy::Reopened => decodes || copies.opened_before(ck.key),
            _ => true,
        };
        if !now || ck.settle.is_some_and(|t| !settled(t, self.settle)) || !copies.claim(ck.key) {
            return CopyState::Neither;
        }
        match reopen() {
            Some(f) => {
                copies.submit(ck.key, of.reopened(f));
                CopyState::Queued
            }
            None => {
                copies.release(&ck.key);
                CopyState::Neither
            }
        }
    }
}

/// This process, as the instance of sources whose boot or mount is
/// unknown (see [`Caches::copy_key`]): its id and start time.
fn process_instance() -> [u8; 16] {
    static ID: OnceLock<[u8; 16]> = OnceLock::new();
    *ID.get_or_init(|| {
        let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        Md5::new().chain_update(b"process").chain_update(std::process::id().to_le_bytes()).chain_update(t.as_nanos().to_le_bytes()).finalize().into()
    })
}

/// Whether a source changed at `ctime` has settled: its ctime lies at
/// least `after` in the past by this clock ([`SETTLE`]; a ctime ahead of
/// the clock, a server's skewed one, is not settled).
pub(super) fn settled(ctime: Time, after: Duration) -> bool {
    let Some(at) = u64::try_from(ctime.sec).ok().map(|s| UNIX_EPOCH + Duration::new(s, ctime.nsec) + after) else { return true };
    at <= SystemTime::now()
}

/// Slots of the table of files opened once ([`Copies::opened_before`]).
const OPENED_SLOTS: usize = 4096;

/// Background writer of local copies: one thread, so copies never compete
/// with each other (or with readers) for more than one core and disk queue.
struct Copies {
    /// Keys queued or being written (a failed copy is released and retried
    /// on a later open).
    busy: Arc<Mutex<HashSet<Key>>>,
    /// Files opened without a copy ([`CopyPolicy::Reopened`]): a tag of
    /// each key, in a slot chosen by the key.
    opened: Mutex<Vec<u64>>,
    jobs: Mutex<Sender<(Key, OpenFile)>>,
}

impl Copies {
    fn start(disk: Arc<DiskCache>) -> std::io::Result<Copies> {
        let (tx, rx) = std::sync::mpsc::channel::<(Key, OpenFile)>();
        let busy: Arc<Mutex<HashSet<Key>>> = Arc::default();
        let wbusy = busy.clone();
        std::thread::Builder::new().name("kpackfs-copies".into()).spawn(move || {
            for (key, of) in rx {
                let path: PathBuf = of.path.clone();
                // A failure the view has already warned about (a damaged
                // bundle) is not warned about again.
                let mut reported = false;
                let r = disk.get_or_insert(&key, &mut |sink: &mut dyn Sink| {
                    of.write_to_sink(sink).map(|_| ()).map_err(|e| {
                        reported = e.already_reported();
                        CacheError::compute(e)
                    })
                });
                match r {
                    Ok(_) => log::debug!("{}: local copy ready", path.display()),
                    // The disk cache has said why (once).
                    Err(CacheError::Unavailable(e)) => log::debug!("{}: no local copy: {e}", path.display()),
                    Err(e) if reported => log::debug!("{}: local copy failed: {e}", path.display()),
                    Err(e) => log::warn!("{}: local copy failed: {e}", path.display()),
                }
                wbusy.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
            }
        })?;
        Ok(Copies { busy, opened: Mutex::new(vec![0; OPENED_SLOTS]), jobs: Mutex::new(tx) })
    }

    /// Whether `key` was opened before (and notes that it now was). The
    /// table is fixed (direct-mapped, one key per slot): its memory never
    /// grows with the versions seen (a library replaced thousands of times
    /// is thousands of keys), and a key pushed out by another costs its file
    /// one more open before it is copied.
    fn opened_before(&self, key: Key) -> bool {
        let b = key.bytes();
        let half = |r: std::ops::Range<usize>| b[r].iter().fold(0u64, |a, x| a << 8 | u64::from(*x));
        // Never zero, the value of an empty slot.
        let tag = half(0..8) | 1;
        let slot = (half(8..16) % OPENED_SLOTS as u64) as usize;
        let mut o = self.opened.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::replace(&mut o[slot], tag) == tag
    }

    /// Takes `key` for a job, unless it is queued already or the queue is
    /// full ([`MAX_QUEUED`]).
    fn claim(&self, key: Key) -> bool {
        let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        busy.len() < MAX_QUEUED && busy.insert(key)
    }

    fn release(&self, key: &Key) {
        self.busy.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }

    fn submit(&self, key: Key, of: OpenFile) {
        if self.jobs.lock().unwrap_or_else(|p| p.into_inner()).send((key, of)).is_err() {
            self.release(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::bundle::CcobMethod;

    const ASSETS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../test_assets/bin");

    /// The digest of `path` as the view takes it, for `scope`; `cheap`:
    /// only if it costs no more than the bundle headers.
    fn digest(path: &Path, cheap: bool) -> Option<[u8; 16]> {
        let f = File::open(path).unwrap();
        let size = f.metadata().unwrap().len();
        let id = SourceId { dev: 0, ino: 0, size, mtime: Time::default(), ctime: Time::default() };
        let fb = FatBinary::analyze(&f, id, "libx.so").unwrap();
        content_digest(&f, &fb.plan, size, if cheap { 0 } else { u64::MAX }).unwrap()
    }

    /// One byte of `path` flipped at `at` (same length: the same file
    /// identity on a read-only image), into `out`.
    fn flipped(path: &Path, at: u64, out: &Path) {
        let mut b = std::fs::read(path).unwrap();
        b[at as usize] ^= 0x01;
        std::fs::write(out, b).unwrap();
    }

    fn fat_range(path: &Path) -> (u64, u64) {
        let f = File::open(path).unwrap();
        let id = SourceId { dev: 0, ino: 0, size: f.metadata().unwrap().len(), mtime: Time::default(), ctime: Time::default() };
        let fb = FatBinary::analyze(&f, id, "libx.so").unwrap();
        (fb.plan.fat_offset, fb.plan.fat_size)
    }

    #[test]
    fn content_identity_tells_same_sized_versions_apart() {
        let t = tempfile::tempdir().unwrap();
        // Uncompressed bundles: a byte of a code object (past every bundle
        // header) changes the identity; the cheap form is refused.
        let plain = Path::new(ASSETS).join("libtwo.so");
        let (off, len) = fat_range(&plain);
        let other = t.path().join("plain");
        flipped(&plain, off + len - 64, &other);
        assert_eq!(digest(&plain, true), None);
        assert_ne!(digest(&plain, false), digest(&other, false));
        assert_eq!(digest(&plain, false), digest(&plain, false));
        // Host code is not part of it (copies of transformed binaries are
        // pinned otherwise: Caches::copy_key).
        let host = t.path().join("host");
        flipped(&plain, off - 1, &host);
        assert_eq!(digest(&plain, false), digest(&host, false));
        // Compressed bundles: the headers' content hashes suffice, cheaply;
        // the same library with one code-object byte changed differs.
        let a = t.path().join("a");
        let b = t.path().join("b");
        crate::tools::recompress::recompress(&plain, &a, 3, CcobMethod::Zstd, 3).unwrap();
        crate::tools::recompress::recompress(&other, &b, 3, CcobMethod::Zstd, 3).unwrap();
        let da = digest(&a, true);
        assert!(da.is_some());
        assert_eq!(da, digest(&a, false));
        assert_ne!(da, digest(&b, true));
    }
}
