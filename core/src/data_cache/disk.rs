//! The disk implementation of the data cache: one directory, reused across
//! remounts, reboots, several daemons and `bake`.
//!
//! Each entry is two files named after its key: `KEY.data` holds exactly
//! the value's bytes (so the kernel can serve it by FUSE passthrough), and
//! `KEY.meta` its length and CRC-32. Properties and how they are kept:
//!
//! - **Crash-safe.** Both files are written under temporary names, synced,
//!   then renamed into place, data first: a crash leaves either no entry, a
//!   data file without its meta (a miss), or a complete entry. A data file
//!   whose length or checksum disagrees with its meta (a torn write the
//!   filesystem did not order, bit rot, someone's edit) is removed and
//!   rebuilt, never served. The checksum is verified once per process and
//!   entry, before its first use.
//! - **Shared.** A computation holds an exclusive lock on `KEY.lock`, so two
//!   daemons sharing the directory compute an entry once; the second finds
//!   it when it gets the lock. Eviction skips entries whose lock is held.
//! - **Bounded.** After each insert, entries are evicted least recently used
//!   first (the meta file's mtime is touched on use) until the total is
//!   back under the limit. Open handles keep evicted entries readable.
//! - **Private.** The directory is created 0700 and must be owned by the
//!   daemon's user; entries that are symlinks, not regular files (a FIFO
//!   would block the opener) or belong to someone else are refused (and
//!   removed), never followed.
//! - **Its own.** kpackfs only ever writes, changes the mode of or deletes
//!   in a directory it created and tagged (`CACHEDIR.TAG`); given another
//!   directory (`/tmp`, a shared cache), it uses its own subdirectory there
//!   ([`own_dir`]).
//! - **Never in the way.** A lock held too long (a `bake` stopped with
//!   Ctrl-Z) or a failed write (a full disk) makes the caller compute
//!   without the disk cache ([`CacheError::Unavailable`]), never wait
//!   forever or fail the read.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use dashmap::DashMap;
use thiserror::Error;

#[cfg(unix)]
use super::dir::OPEN_FLAGS;
use super::dir::{create_private, is_private_file, open_private, own_dir, share_all, sync_dir};
use super::entry::EntryWriter;
use super::meta::{self, Meta, Seal};
use super::{CacheError, Data, DataCache, EntryFile, Fill, Key};

const TMP_PREFIX: &str = "tmp.";
/// A used entry's meta mtime is refreshed at most this often.
const TOUCH_EVERY: Duration = Duration::from_secs(60);
/// How long a computation waits for another process's lock on an entry
/// before it computes without the disk cache: a peer compressing a large
/// archive finishes well within it; a stopped or hung one must not stall
/// every daemon sharing the directory.
const LOCK_WAIT: Duration = Duration::from_secs(10);
/// After a failed write (full disk, quota, read-only), entries are not
/// written again for this long: each attempt would compute an archive only
/// to fail at the end.
const WRITE_BACKOFF: Duration = Duration::from_secs(30);

#[derive(Debug, Error)]
pub enum DiskCacheError {
    #[error("cache directory {0}: {1}")]
    Io(PathBuf, io::Error),
    #[error("cache directory {0} is not private: {1}")]
    NotPrivate(PathBuf, String),
    #[error("cache directory {0} is not kpackfs's: {1}")]
    NotOurs(PathBuf, String),
}

/// Counters of the disk cache.
#[derive(Debug, Default)]
pub struct DiskStats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub evictions: AtomicU64,
    /// Entries found damaged (length or checksum) and removed.
    pub damaged: AtomicU64,
    /// Entries read whole for their checksum before use (not sealed in
    /// this boot, or changed since: see `meta.rs`).
    pub checked: AtomicU64,
}

pub struct DiskCache {
    dir: PathBuf,
    limit: u64,
    /// One computation per key in this process (other processes: the lock file).
    inflight: DashMap<Key, Arc<Mutex<()>>>,
    /// Entries whose checksum this process has verified: (identity, length).
    verified: DashMap<Key, (u64, u64)>,
    /// This boot's id: entries sealed in it are trusted unread (`meta.rs`).
    boot: Option<[u8; 16]>,
    evicting: Mutex<()>,
    /// Writes are failing (warned once until one succeeds again) and are
    /// not tried again before this instant.
    failing: AtomicBool,
    retry_at: Mutex<Option<Instant>>,
    /// How long to wait for another process's lock ([`LOCK_WAIT`]).
    lock_wait: Duration,
    /// How long writes pause after a failure ([`WRITE_BACKOFF`]).
    backoff: Duration,
    pub stats: DiskStats,
}

/// Whether the file system holding `f` has no space left for this user.
fn no_space_left(f: &File) -> bool {
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
        // SAFETY: fstatvfs fills `st` for a valid descriptor; read only on success.
        if unsafe { libc::fstatvfs(f.as_raw_fd(), st.as_mut_ptr()) } == 0 {
            // SAFETY: initialised by the successful call above.
            return unsafe { st.assume_init() }.f_bavail == 0;
        }
        false
    }
    #[cfg(not(unix))]
    {
        let _ = f;
        false
    }
}

/// CRC-32 of the first `len` bytes of `f`, read in 1 MiB pieces: after a
/// reboot the entry is on disk only, and large sequential reads let the
/// kernel's readahead fetch it at disk speed (a mapping faulted in page by
/// page, or advised, measured 2-6x slower here on a cold 28 MB entry); with
/// the page cache warm both cost about a memory copy.
fn crc_of(f: &File, len: u64) -> io::Result<u32> {
    let mut h = crc32fast::Hasher::new();
    let mut buf = vec![0u8; (1 << 20).min(len as usize)];
    let mut off = 0u64;
    while off < len {
        let want = buf.len().min((len - off) as usize);
        let n = read_at(f, &mut buf[..want], off)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "cache entry shorter than its meta"));
        }
        h.update(&buf[..n]);
        off += n as u64;
    }
    Ok(h.finalize())
}

#[cfg(unix)]
fn read_at(f: &File, buf: &mut [u8], off: u64) -> io::Result<usize> {
    std::os::unix::fs::FileExt::read_at(f, buf, off)
}

#[cfg(windows)]
fn read_at(f: &File, buf: &mut [u8], off: u64) -> io::Result<usize> {
    std::os::windows::fs::FileExt::seek_read(f, buf, off)
}

/// What tells a data file from one renamed over it, for the once-per-
/// process check: the inode on Unix; on Windows, which has no inode number
/// in std, the creation and last-write times (a replacement is a new file,
/// created later).
fn identity(md: &fs::Metadata) -> u64 {
    #[cfg(unix)]
    {
        std::os::unix::fs::MetadataExt::ino(md)
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::MetadataExt;
        md.creation_time() ^ md.last_write_time().rotate_left(32)
    }
    #[cfg(not(any(unix, windows)))]
    {
        let _ = md;
        0
    }
}

/// Test hook (debug builds only): `KPACKFS_TEST_SLOW_CACHE_WRITE=ms`
/// holds every entry between its write and its rename, so tests can kill
/// a daemon while it writes.
#[cfg(debug_assertions)]
fn slow_write_hook() {
    if let Some(ms) = std::env::var("KPACKFS_TEST_SLOW_CACHE_WRITE").ok().and_then(|v| v.parse().ok()) {
        std::thread::sleep(Duration::from_millis(ms));
    }
}

#[cfg(not(debug_assertions))]
fn slow_write_hook() {}

impl DiskCache {
    /// Opens kpackfs's own cache directory for `dir` ([`own_dir`]: `dir`
    /// or a subdirectory it creates there), holding at most `limit` bytes
    /// of entries.
    pub fn open(dir: &Path, limit: u64) -> Result<DiskCache, DiskCacheError> {
        let dir = own_dir(dir)?;
        let dir = dir.as_path();
        let c = DiskCache {
            dir: dir.to_path_buf(),
            limit,
            inflight: DashMap::new(),
            verified: DashMap::new(),
            boot: meta::boot_id(),
            evicting: Mutex::new(()),
            failing: AtomicBool::new(false),
            retry_at: Mutex::new(None),
            lock_wait: LOCK_WAIT,
            backoff: WRITE_BACKOFF,
            stats: DiskStats::default(),
        };
        c.remove_orphans();
        Ok(c)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// This boot's id (Linux), read when the cache was opened.
    pub fn boot(&self) -> Option<[u8; 16]> {
        self.boot
    }

    fn path(&self, key: &Key, ext: &str) -> PathBuf {
        self.dir.join(format!("{}.{ext}", key.hex()))
    }

    fn lock_file(&self, hex: &str) -> io::Result<File> {
        let mut o = OpenOptions::new();
        o.read(true).write(true).create(true).truncate(false);
        share_all(&mut o);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            o.mode(0o600).custom_flags(OPEN_FLAGS);
        }
        let p = self.dir.join(format!("{hex}.lock"));
        let f = o.open(&p)?;
        if !is_private_file(&f) {
            log::warn!("{}: cache lock is not a regular file of this user; removed", p.display());
            let _ = fs::remove_file(&p);
            return Err(io::Error::other("cache lock is not a regular file of this user"));
        }
        Ok(f)
    }

    /// Takes `lock`, waiting at most [`LOCK_WAIT`]; `false` if it is still
    /// held then (by a process stopped, hung, or very slow). Polled,
    /// because a blocking `flock` cannot be given up.
    fn lock_bounded(&self, lock: &File) -> io::Result<bool> {
        let start = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            match lock.try_lock() {
                Ok(()) => return Ok(true),
                Err(fs::TryLockError::WouldBlock) => {}
                Err(fs::TryLockError::Error(e)) => return Err(e),
            }
            if start.elapsed() >= self.lock_wait {
                return Ok(false);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// Notes a failed write: one warning until writes work again, and no
    /// new attempt for [`Self::backoff`].
    fn write_failed(&self, key: &Key, e: &io::Error) -> CacheError {
        *self.retry_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now() + self.backoff);
        if !self.failing.swap(true, Ordering::Relaxed) {
            log::warn!("cache directory {}: cannot write entries ({e}); computing without it until writes work again", self.dir.display());
        } else {
            log::debug!("cache entry {}: not written: {e}", key.hex());
        }
        CacheError::Unavailable(format!("cache directory {}: {e}", self.dir.display()))
    }

    fn writes_paused(&self) -> bool {
        let mut r = self.retry_at.lock().unwrap_or_else(|p| p.into_inner());
        match *r {
            Some(t) if Instant::now() < t => true,
            Some(_) => {
                *r = None;
                false
            }
            None => false,
        }
    }

    /// Removes temporary files of computations that are no longer running
    /// (their key's lock is free): a daemon killed while writing.
    fn remove_orphans(&self) {
        let Ok(rd) = fs::read_dir(&self.dir) else { return };
        for e in rd.flatten() {
            let name = e.file_name();
            let Some(hex) = name.to_str().and_then(|n| n.strip_prefix(TMP_PREFIX)).and_then(|r| r.split('.').nth(1)) else {
                continue;
            };
            let Ok(lock) = self.lock_file(hex) else { continue };
            if lock.try_lock().is_ok() {
                match fs::remove_file(e.path()) {
                    Ok(()) => log::info!("removed partial cache entry {}", e.path().display()),
                    Err(err) => log::warn!("partial cache entry {} not removed: {err}", e.path().display()),
                }
            }
        }
    }

    /// A present entry's meta (no checksum read: cheap enough for `stat`).
    /// `None` if absent or visibly damaged.
    fn meta(&self, key: &Key) -> io::Result<Option<(File, Meta)>> {
        let Some(mut mf) = open_private(&self.path(key, "meta"), true)? else { return Ok(None) };
        let mut m = Vec::with_capacity(meta::LEN);
        io::Read::read_to_end(&mut io::Read::take(&mut mf, meta::LEN as u64 + 1), &mut m)?;
        Ok(Meta::decode(&m).map(|m| (mf, m)))
    }

    /// Writes `m` as `key`'s meta: under a temporary name, synced, renamed
    /// into place.
    fn write_meta(&self, key: &Key, m: &Meta) -> io::Result<()> {
        let hex = key.hex();
        // Unique per call: two threads may seal one entry at once.
        static N: AtomicU64 = AtomicU64::new(0);
        let tmp = self.dir.join(format!("{TMP_PREFIX}{}.{hex}.meta{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
        let r = (|| {
            let mut f = create_private(&tmp)?;
            f.write_all(&m.encode())?;
            f.sync_all()?;
            drop(f);
            self.replace(&tmp, &self.path(key, "meta"), &hex)
        })();
        if r.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        r
    }

    fn remove_entry(&self, key: &Key, why: &str) {
        log::warn!("cache entry {} {why}; rebuilt", key.hex());
        self.stats.damaged.fetch_add(1, Ordering::Relaxed);
        self.verified.remove(key);
        let _ = fs::remove_file(self.path(key, "data"));
        let _ = fs::remove_file(self.path(key, "meta"));
    }

    /// The entry of `key`, verified against its meta: once per process by
    /// its checksum, or not at all if its seal holds (`meta.rs`).
    fn lookup(&self, key: &Key) -> io::Result<Option<Data>> {
        let Some((mf, m)) = self.meta(key)? else { return Ok(None) };
        let len = m.len;
        let Some(f) = open_private(&self.path(key, "data"), false)? else { return Ok(None) };
        let md = f.metadata()?;
        if md.len() != len {
            // Windows deletes no file this process still holds open.
            drop((f, mf));
            self.remove_entry(key, &format!("has {} bytes, its meta says {len}", md.len()));
            return Ok(None);
        }
        let ino = identity(&md);
        if self.verified.get(key).map(|v| *v) != Some((ino, len)) {
            if !m.seals(&md, self.boot) {
                self.stats.checked.fetch_add(1, Ordering::Relaxed);
                if crc_of(&f, len)? != m.crc {
                    drop((f, mf));
                    self.remove_entry(key, "fails its checksum");
                    return Ok(None);
                }
                // Checked in this boot: sealed, so the next process need not.
                if let Some(seal) = Seal::of(&md, self.boot) {
                    if let Err(e) = self.write_meta(key, &Meta { seal: Some(seal), ..m }) {
                        log::debug!("cache entry {}: not sealed: {e}", key.hex());
                    }
                }
            }
            self.verified.insert(*key, (ino, len));
        }
        // Least-recently-used bookkeeping, cheaply.
        let now = SystemTime::now();
        let stale = mf.metadata().and_then(|m| m.modified()).map(|t| now.duration_since(t).unwrap_or_default() > TOUCH_EVERY);
        if stale.unwrap_or(true) {
            let _ = mf.set_modified(now);
        }
        Ok(Some(Data::File(Arc::new(EntryFile { file: f, len }))))
    }

    /// The length of `key`'s entry if present (per its meta and the data
    /// file's size; the checksum is verified when the entry is opened).
    pub fn len_of(&self, key: &Key) -> Option<u64> {
        let len = self.meta(key).ok()??.1.len;
        let md = fs::symlink_metadata(self.path(key, "data")).ok()?;
        (md.is_file() && md.len() == len).then_some(len)
    }

    /// Computes `key`'s entry into the directory. Errors of `fill` are
    /// returned as they are; a lock held too long or a failed write is
    /// [`CacheError::Unavailable`]: the caller computes without the disk.
    fn compute(&self, key: &Key, fill: &mut Fill<'_>) -> Result<Data, CacheError> {
        let hex = key.hex();
        if self.writes_paused() {
            return Err(CacheError::Unavailable(format!("cache directory {}: writes paused after a failure", self.dir.display())));
        }
        let lock = self.lock_file(&hex).map_err(|e| self.write_failed(key, &e))?;
        if !self.lock_bounded(&lock)? {
            log::warn!(
                "cache entry {hex} has been locked by another process for {:.1} s (stopped or hung?); computing without the cache",
                self.lock_wait.as_secs_f32()
            );
            return Err(CacheError::Unavailable(format!("cache entry {hex} is locked by another process")));
        }
        // Another daemon may have made it while we waited.
        if let Some(d) = self.lookup(key)? {
            self.stats.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(d);
        }
        self.stats.misses.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let tmp_data = self.dir.join(format!("{TMP_PREFIX}{pid}.{hex}.data"));
        // Which failures are the cache's own (a full disk…), as opposed to
        // the computation's (the source changed…).
        let r = (|| -> Result<(), Result<CacheError, io::Error>> {
            let f = create_private(&tmp_data).map_err(Err)?;
            let mut w = EntryWriter::new(f);
            if let Err(e) = fill(&mut w).and_then(|()| w.drain().map_err(CacheError::from)) {
                // Writers that copy in the kernel (`as_file`) bypass the
                // sink: a file system with no space left tells those.
                return Err(match w.error.take() {
                    Some(we) => Err(we),
                    None if no_space_left(&w.file) => Err(io::Error::new(io::ErrorKind::StorageFull, e.to_string())),
                    None => Ok(e),
                });
            }
            let f = w.file;
            slow_write_hook();
            let sum = || -> io::Result<(u64, u32)> {
                let len = f.metadata()?.len();
                let crc = crc_of(&f, len)?;
                f.sync_all()?;
                Ok((len, crc))
            };
            let (len, crc) = sum().map_err(Err)?;
            // Windows renames no file this process still holds open.
            drop(f);
            let data = self.path(key, "data");
            self.replace(&tmp_data, &data, &hex).map_err(Err)?;
            // Sealed in place (a rename changes the file's ctime); until its
            // meta is renamed in too, the entry is a miss.
            let seal = fs::symlink_metadata(&data).ok().and_then(|md| Seal::of(&md, self.boot));
            if let Err(e) = self.write_meta(key, &Meta { len, crc, seal }) {
                let _ = fs::remove_file(&data);
                return Err(Err(e));
            }
            sync_dir(&self.dir);
            Ok(())
        })();
        if r.is_err() {
            let _ = fs::remove_file(&tmp_data);
        }
        match r {
            Ok(()) => {}
            Err(Ok(e)) => return Err(e),
            Err(Err(e)) => return Err(self.write_failed(key, &e)),
        }
        self.failing.store(false, Ordering::Relaxed);
        let d = self.lookup(key)?.ok_or_else(|| CacheError::Unavailable("entry vanished after it was written".into()))?;
        drop(lock);
        self.evict();
        Ok(d)
    }

    /// Renames `from` over `to`. Where that is refused because `to` is still
    /// held open or pending deletion (Windows), `to` is first moved aside
    /// under a temporary name, removed once its readers let go (here, or
    /// by [`Self::remove_orphans`] at a later open).
    fn replace(&self, from: &Path, to: &Path, hex: &str) -> io::Result<()> {
        match fs::rename(from, to) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                static N: AtomicU64 = AtomicU64::new(0);
                let aside = self.dir.join(format!("{TMP_PREFIX}{}.{hex}.old{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
                fs::rename(to, &aside)?;
                let _ = fs::remove_file(&aside);
                fs::rename(from, to)
            }
            Err(e) => Err(e),
        }
    }

    /// Bytes of complete entries, and the entries by age of last use.
    fn scan(&self) -> (u64, Vec<(SystemTime, String, u64)>) {
        let mut total = 0;
        let mut v = Vec::new();
        let Ok(rd) = fs::read_dir(&self.dir) else { return (0, v) };
        for e in rd.flatten() {
            let name = e.file_name();
            let Some(hex) = name.to_str().and_then(|n| n.strip_suffix(".data")).filter(|h| !h.starts_with(TMP_PREFIX)) else {
                continue;
            };
            let Ok(md) = e.metadata() else { continue };
            total += md.len();
            let used = fs::metadata(self.dir.join(format!("{hex}.meta"))).and_then(|m| m.modified()).unwrap_or(SystemTime::UNIX_EPOCH);
            v.push((used, hex.to_string(), md.len()));
        }
        v.sort();
        (total, v)
    }

    /// Total bytes of entries now in the directory.
    pub fn used(&self) -> u64 {
        self.scan().0
    }

    /// Evicts least recently used entries until under the limit.
    fn evict(&self) {
        let _one = self.evicting.lock().unwrap_or_else(|p| p.into_inner());
        let (mut total, entries) = self.scan();
        for (_, hex, len) in entries {
            if total <= self.limit {
                break;
            }
            let Ok(lock) = self.lock_file(&hex) else { continue };
            if lock.try_lock().is_err() {
                continue; // being computed or verified by someone
            }
            for ext in ["meta", "data", "lock"] {
                let _ = fs::remove_file(self.dir.join(format!("{hex}.{ext}")));
            }
            total = total.saturating_sub(len);
            self.stats.evictions.fetch_add(1, Ordering::Relaxed);
            log::debug!("cache entry {hex} evicted ({len} bytes)");
        }
    }
}

impl DataCache for DiskCache {
    fn get(&self, key: &Key) -> Option<Data> {
        match self.lookup(key) {
            Ok(Some(d)) => {
                self.stats.hits.fetch_add(1, Ordering::Relaxed);
                Some(d)
            }
            Ok(None) => None,
            Err(e) => {
                log::warn!("cache entry {}: {e}", key.hex());
                None
            }
        }
    }

    fn get_or_insert(&self, key: &Key, fill: &mut Fill<'_>) -> Result<Data, CacheError> {
        let gate = self.inflight.entry(*key).or_default().clone();
        let r = {
            let _one = gate.lock().unwrap_or_else(|p| p.into_inner());
            match self.get(key) {
                Some(d) => Ok(d),
                None => self.compute(key, fill),
            }
        };
        self.inflight.remove_if(key, |_, g| Arc::ptr_eq(g, &gate) && Arc::strong_count(g) <= 2);
        r
    }
}

#[cfg(test)]
#[path = "disk_tests.rs"]
mod tests;
