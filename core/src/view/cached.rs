//! What the view keeps in the data caches, and under which keys.
//!
//! - Compressed archives (`zstd-per-kernel`): computed at the archive's
//!   first `stat` (its size must be known then) into the disk cache, or the
//!   memory cache when the view has no cache directory.
//! - Local copies of other synthesized files (transformed binaries,
//!   scheme-`none` archives), written in the background after their first
//!   open, so later opens are served by the kernel from a local file (FUSE
//!   passthrough) at native page-cache speed. Archives whose code objects
//!   come from compressed bundles are always copied (their bytes cost a
//!   decode); the rest, which are cheap extents of the source, only with
//!   `--materialize`.
//!
//! Keys digest everything the bytes depend on — the source root and path,
//! the source file's identity (device, inode, size, mtime, ctime), the
//! selection, naming, compression, and a format version — so a changed
//! source or view never meets a stale entry, and a remount, a second
//! daemon or `bake` over the same source finds the entries already made.

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use crate::data_cache::{CacheError, Data, DataCache, DiskCache, Key, MemoryCache, Sink};
use crate::layout::CheckedOnce;
use crate::source::SourceId;

use super::fat::{ArchivePlan, ZSTD_LEVEL};
use super::open::OpenFile;
use super::{Error, Result, ViewConfig};

/// Bumped whenever what the view writes for the same inputs changes, so
/// entries of an older kpackfs are never served.
const FORMAT: &[u8] = b"kpackfs-cache-1";

fn id_bytes(id: &SourceId) -> Vec<u8> {
    let mut b = Vec::with_capacity(56);
    for v in [id.dev, id.ino, id.size, id.mtime.sec as u64, id.mtime.nsec as u64, id.ctime.sec as u64, id.ctime.nsec as u64] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b
}

/// Which synthesized files get local copies in the disk cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyPolicy {
    /// None (one-shot readers such as `bake`).
    Never,
    /// Those whose bytes cost a decode (archives of compressed bundles).
    Decoding,
    /// All (`--materialize`): warm reads at native page-cache speed.
    All,
}

/// The view's caches and its background copy writer.
pub(super) struct Caches {
    /// Decoded code objects (and compressed archives when there is no disk).
    pub memory: Arc<MemoryCache>,
    pub disk: Option<Arc<DiskCache>>,
    policy: CopyPolicy,
    copies: Option<Copies>,
}

impl Caches {
    pub fn new(cache_bytes: u64) -> Caches {
        Caches { memory: Arc::new(MemoryCache::new(cache_bytes)), disk: None, policy: CopyPolicy::Never, copies: None }
    }

    pub fn with_disk(&mut self, disk: Arc<DiskCache>, policy: CopyPolicy) -> std::io::Result<()> {
        if policy != CopyPolicy::Never {
            self.copies = Some(Copies::start(disk.clone())?);
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
    /// view) made from source version `id`.
    pub fn key(root: &Path, rel: &Path, id: &SourceId, cfg: &ViewConfig, what: &str) -> Key {
        let sel = cfg.selection.to_string();
        let how = format!("{:?}/{:?}", cfg.naming, cfg.compression);
        Key::of(&[
            FORMAT,
            what.as_bytes(),
            root.as_os_str().as_encoded_bytes(),
            rel.as_os_str().as_encoded_bytes(),
            &id_bytes(id),
            sel.as_bytes(),
            how.as_bytes(),
        ])
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

    /// The bytes of a compressed archive, from the cache or computed.
    pub fn compressed(&self, key: &Key, ap: &ArchivePlan, src: &dyn Fn() -> Result<File>) -> Result<Data> {
        let d = self
            .store()
            .get_or_insert(key, &mut |sink: &mut dyn Sink| {
                let file = src().map_err(|e| CacheError::Compute(e.to_string()))?;
                log::debug!("{}: compressing {} code objects", ap.name, ap.spec.blobs.len());
                ap.spec.write_zstd(&file, &CheckedOnce::default(), ZSTD_LEVEL, sink).map_err(|e| CacheError::Compute(e.to_string()))?;
                Ok(())
            })
            .map_err(|e| Error::Cache(e.to_string()))?;
        Ok(d)
    }

    /// For a freshly opened synthesized file: attaches its complete local
    /// copy if the disk cache has one, or has one written in the background.
    pub fn attach_copy(&self, of: &mut OpenFile, key: Key, decodes: bool, reopen: &dyn Fn() -> Option<File>) {
        let (Some(disk), Some(copies)) = (&self.disk, &self.copies) else { return };
        if !(self.policy == CopyPolicy::All || decodes) {
            return;
        }
        match disk.get(&key) {
            Some(d) if d.len() == of.len() => of.set_materialized(d),
            Some(_) => log::warn!("{}: cached copy has the wrong length; not used", of.path.display()),
            None => {
                if copies.claim(key) {
                    match reopen() {
                        Some(f) => copies.submit(key, of.reopened(f)),
                        None => copies.release(&key),
                    }
                }
            }
        }
    }
}

/// Background writer of local copies: one thread, so copies never compete
/// with each other (or with readers) for more than one core and disk queue.
struct Copies {
    /// Keys queued or being written (a failed copy is released and retried
    /// on a later open).
    busy: Arc<Mutex<HashSet<Key>>>,
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
                        CacheError::Compute(e.to_string())
                    })
                });
                match r {
                    Ok(_) => log::debug!("{}: local copy ready", path.display()),
                    Err(e) if reported => log::debug!("{}: local copy failed: {e}", path.display()),
                    Err(e) => log::warn!("{}: local copy failed: {e}", path.display()),
                }
                wbusy.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
            }
        })?;
        Ok(Copies { busy, jobs: Mutex::new(tx) })
    }

    fn claim(&self, key: Key) -> bool {
        self.busy.lock().unwrap_or_else(|p| p.into_inner()).insert(key)
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
