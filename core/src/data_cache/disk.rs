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

use super::{CacheError, Data, DataCache, EntryFile, Fill, Key};

const META_MAGIC: &[u8; 8] = b"KPFSMETA";
/// Bumped when the meta layout or the meaning of entries changes.
const META_VERSION: u32 = 1;
const META_LEN: usize = 28;
const TMP_PREFIX: &str = "tmp.";
/// A used entry's meta mtime is refreshed at most this often.
const TOUCH_EVERY: Duration = Duration::from_secs(60);
/// The tag that marks a directory as kpackfs's own (the Cache Directory
/// Tagging convention: backup tools skip such directories).
pub const TAG_NAME: &str = "CACHEDIR.TAG";
const TAG_SIGNATURE: &str = "Signature: 8a477f597d28d172789f06886806bc55";
const TAG_TEXT: &str = "Signature: 8a477f597d28d172789f06886806bc55\n# This file is a cache directory tag created by kpackfs.\n# For information about cache directory tags see https://bford.info/cachedir/\n";
/// The subdirectory kpackfs makes for itself in a `--cache-dir` it did not
/// create.
pub const OWN_SUBDIR: &str = "kpackfs";
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
}

pub struct DiskCache {
    dir: PathBuf,
    limit: u64,
    /// One computation per key in this process (other processes: the lock file).
    inflight: DashMap<Key, Arc<Mutex<()>>>,
    /// Entries whose checksum this process has verified: (inode, length).
    verified: DashMap<Key, (u64, u64)>,
    evicting: Mutex<()>,
    /// Writes are failing (warned once until one succeeds again) and are
    /// not tried again before this instant.
    failing: AtomicBool,
    retry_at: Mutex<Option<Instant>>,
    /// How long to wait for another process's lock ([`LOCK_WAIT`]).
    lock_wait: Duration,
    pub stats: DiskStats,
}

/// The default cache directory: `/var/cache/kpackfs` for root,
/// `$XDG_CACHE_HOME/kpackfs` (or `~/.cache/kpackfs`) for a user,
/// `%LOCALAPPDATA%\kpackfs` on Windows.
pub fn default_dir() -> Option<PathBuf> {
    #[cfg(unix)]
    {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            return Some(PathBuf::from("/var/cache/kpackfs"));
        }
        let xdg = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).filter(|p| p.is_absolute());
        xdg.or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache"))).map(|d| d.join("kpackfs"))
    }
    #[cfg(not(unix))]
    {
        std::env::var_os("LOCALAPPDATA").map(|d| PathBuf::from(d).join("kpackfs"))
    }
}

#[cfg(unix)]
fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Flags of every open in the cache directory: never follow a symlink, and
/// never block in `open` (a FIFO planted at an entry's name would otherwise
/// hold the opening worker until someone writes to it). Regular files
/// ignore `O_NONBLOCK`.
#[cfg(unix)]
const OPEN_FLAGS: i32 = libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK;

/// Opens `p` without following a symlink and only if it is a regular file
/// of ours. `Ok(None)`: absent, or refused (and removed).
fn open_private(p: &Path, write: bool) -> io::Result<Option<File>> {
    let mut o = OpenOptions::new();
    o.read(true).write(write);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut o, OPEN_FLAGS);
    share_all(&mut o);
    let f = match o.open(p) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        #[cfg(unix)]
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            log::warn!("{}: cache entry is a symlink; removed", p.display());
            let _ = fs::remove_file(p);
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let md = f.metadata()?;
    #[cfg(unix)]
    let foreign = std::os::unix::fs::MetadataExt::uid(&md) != euid();
    #[cfg(not(unix))]
    let foreign = false;
    if !md.is_file() || foreign {
        log::warn!("{}: cache entry is not a regular file of this user; removed", p.display());
        let _ = fs::remove_file(p);
        return Ok(None);
    }
    Ok(Some(f))
}

/// Whether `f` (opened with [`OPEN_FLAGS`]) is a regular file of ours.
fn is_private_file(f: &File) -> bool {
    let Ok(md) = f.metadata() else { return false };
    #[cfg(unix)]
    let ours = std::os::unix::fs::MetadataExt::uid(&md) == euid();
    #[cfg(not(unix))]
    let ours = true;
    md.is_file() && ours
}

/// On Windows, lets entries that readers hold open be renamed over and
/// deleted (eviction, rebuilding a damaged entry), as on POSIX systems:
/// without `FILE_SHARE_DELETE` both fail while any handle is open.
fn share_all(o: &mut OpenOptions) {
    #[cfg(windows)]
    std::os::windows::fs::OpenOptionsExt::share_mode(o, 0x1 | 0x2 | 0x4);
    #[cfg(not(windows))]
    let _ = o;
}

/// Creates `p` afresh (whatever had that name is removed first, so a
/// planted FIFO or symlink is never opened), mode 0600.
fn create_private(p: &Path) -> io::Result<File> {
    match fs::remove_file(p) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut o = OpenOptions::new();
    o.read(true).write(true).create_new(true);
    share_all(&mut o);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600).custom_flags(OPEN_FLAGS);
    }
    o.open(p)
}

/// The sink of an entry being written: remembers the first write error, so
/// that a full disk is told apart from a failed computation (which sees
/// only its own error).
struct EntryWriter {
    file: File,
    error: Option<io::Error>,
}

impl EntryWriter {
    fn note<T>(&mut self, r: io::Result<T>) -> io::Result<T> {
        if let Err(e) = &r {
            if self.error.is_none() {
                self.error = Some(io::Error::new(e.kind(), e.to_string()));
            }
        }
        r
    }
}

impl Write for EntryWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let r = self.file.write(buf);
        self.note(r)
    }

    fn flush(&mut self) -> io::Result<()> {
        let r = self.file.flush();
        self.note(r)
    }
}

impl io::Seek for EntryWriter {
    fn seek(&mut self, pos: io::SeekFrom) -> io::Result<u64> {
        let r = self.file.seek(pos);
        self.note(r)
    }
}

impl super::Sink for EntryWriter {
    fn as_file(&mut self) -> Option<&File> {
        Some(&self.file)
    }
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

fn encode_meta(len: u64, crc: u32) -> [u8; META_LEN] {
    let mut m = [0u8; META_LEN];
    m[..8].copy_from_slice(META_MAGIC);
    m[8..12].copy_from_slice(&META_VERSION.to_le_bytes());
    m[12..20].copy_from_slice(&len.to_le_bytes());
    m[20..24].copy_from_slice(&crc.to_le_bytes());
    // A checksum of the meta itself: a torn meta is a miss, not a lie.
    let c = crc32fast::hash(&m[..24]);
    m[24..28].copy_from_slice(&c.to_le_bytes());
    m
}

fn decode_meta(m: &[u8]) -> Option<(u64, u32)> {
    if m.len() != META_LEN || &m[..8] != META_MAGIC || m[8..12] != META_VERSION.to_le_bytes() {
        return None;
    }
    let u32_at = |i: usize| m.get(i..i + 4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes);
    let len = m.get(12..20).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes)?;
    if crc32fast::hash(&m[..24]) != u32_at(24)? {
        return None;
    }
    Some((len, u32_at(20)?))
}

fn inode(md: &fs::Metadata) -> u64 {
    #[cfg(unix)]
    {
        std::os::unix::fs::MetadataExt::ino(md)
    }
    #[cfg(not(unix))]
    {
        let _ = md;
        0
    }
}

/// Syncs a directory so the renames in it survive a power loss.
fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    #[cfg(not(unix))]
    let _ = dir;
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

/// The directory kpackfs keeps its entries in, given `--cache-dir dir`:
/// `dir` itself if kpackfs created it (it carries kpackfs's tag) or if it
/// does not exist yet (it is then created 0700 and tagged); otherwise
/// (`/tmp`, a directory shared with other programs) the subdirectory
/// `dir/kpackfs`, under the same rule. A symlink is refused at either
/// level before anything is resolved or created, and nothing in a
/// directory kpackfs did not create is ever changed: its mode, its files.
pub fn own_dir(dir: &Path) -> Result<PathBuf, DiskCacheError> {
    if let Some(d) = claim(dir)? {
        return Ok(d);
    }
    let sub = dir.join(OWN_SUBDIR);
    claim(&sub)?.ok_or_else(|| DiskCacheError::NotOurs(sub, format!("it exists without kpackfs's {TAG_NAME}")))
}

/// `Some(dir)` if `dir` is kpackfs's (created now, or tagged earlier);
/// `None` if it is a directory of someone or something else.
fn claim(dir: &Path) -> Result<Option<PathBuf>, DiskCacheError> {
    let err = |e| DiskCacheError::Io(dir.to_path_buf(), e);
    let not_private = |why: String| DiskCacheError::NotPrivate(dir.to_path_buf(), why);
    let md = match fs::symlink_metadata(dir) {
        Ok(md) => md,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                let mut b = fs::DirBuilder::new();
                b.recursive(true);
                #[cfg(unix)]
                std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
                b.create(parent).map_err(err)?;
            }
            let mut b = fs::DirBuilder::new();
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
            match b.create(dir) {
                Ok(()) => {
                    let mut t = create_private(&dir.join(TAG_NAME)).map_err(err)?;
                    t.write_all(TAG_TEXT.as_bytes()).and_then(|()| t.sync_all()).map_err(err)?;
                    sync_dir(dir);
                    log::info!("created cache directory {}", dir.display());
                    return Ok(Some(dir.to_path_buf()));
                }
                // Made by someone else meanwhile: judged as found.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => fs::symlink_metadata(dir).map_err(err)?,
                Err(e) => return Err(err(e)),
            }
        }
        Err(e) => return Err(err(e)),
    };
    if md.file_type().is_symlink() {
        return Err(not_private("it is a symlink (refused: the cache directory is named by its real path)".into()));
    }
    if !md.is_dir() {
        return Err(not_private("not a directory".into()));
    }
    if !is_tagged(dir) {
        return Ok(None);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        if md.uid() != euid() {
            return Err(not_private(format!("owned by uid {}, not {}", md.uid(), euid())));
        }
        // Ours (tagged): put its mode back if someone widened it.
        if md.mode() & 0o077 != 0 {
            log::warn!("cache directory {}: mode {:o} made 0700 again", dir.display(), md.mode() & 0o7777);
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(err)?;
        }
    }
    Ok(Some(dir.to_path_buf()))
}

/// Whether `dir` carries kpackfs's tag (a regular file of ours).
fn is_tagged(dir: &Path) -> bool {
    let Ok(Some(f)) = open_tag(&dir.join(TAG_NAME)) else { return false };
    let mut text = String::new();
    if io::Read::read_to_string(&mut io::Read::take(f, 4096), &mut text).is_err() {
        return false;
    }
    text.starts_with(TAG_SIGNATURE) && text.contains("kpackfs")
}

/// Opens a tag without following symlinks or blocking, never removing
/// anything (the directory may not be ours).
fn open_tag(p: &Path) -> io::Result<Option<File>> {
    let mut o = OpenOptions::new();
    o.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut o, OPEN_FLAGS);
    match o.open(p) {
        Ok(f) => Ok(is_private_file(&f).then_some(f)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

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
            evicting: Mutex::new(()),
            failing: AtomicBool::new(false),
            retry_at: Mutex::new(None),
            lock_wait: LOCK_WAIT,
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
    /// new attempt for [`WRITE_BACKOFF`].
    fn write_failed(&self, key: &Key, e: &io::Error) -> CacheError {
        *self.retry_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now() + WRITE_BACKOFF);
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

    /// Length of a present entry per its meta (no checksum read: cheap
    /// enough for `stat`). `None` if absent or visibly damaged.
    fn meta(&self, key: &Key) -> io::Result<Option<(File, u64, u32)>> {
        let Some(mut mf) = open_private(&self.path(key, "meta"), true)? else { return Ok(None) };
        let mut m = Vec::with_capacity(META_LEN);
        io::Read::read_to_end(&mut io::Read::take(&mut mf, META_LEN as u64 + 1), &mut m)?;
        Ok(decode_meta(&m).map(|(len, crc)| (mf, len, crc)))
    }

    fn remove_entry(&self, key: &Key, why: &str) {
        log::warn!("cache entry {} {why}; rebuilt", key.hex());
        self.stats.damaged.fetch_add(1, Ordering::Relaxed);
        self.verified.remove(key);
        let _ = fs::remove_file(self.path(key, "data"));
        let _ = fs::remove_file(self.path(key, "meta"));
    }

    /// The entry of `key`, verified (once per process) against its meta.
    fn lookup(&self, key: &Key) -> io::Result<Option<Data>> {
        let Some((mf, len, crc)) = self.meta(key)? else { return Ok(None) };
        let Some(f) = open_private(&self.path(key, "data"), false)? else { return Ok(None) };
        let md = f.metadata()?;
        if md.len() != len {
            // Windows deletes no file this process still holds open.
            drop((f, mf));
            self.remove_entry(key, &format!("has {} bytes, its meta says {len}", md.len()));
            return Ok(None);
        }
        let ino = inode(&md);
        if self.verified.get(key).map(|v| *v) != Some((ino, len)) {
            if crc_of(&f, len)? != crc {
                drop((f, mf));
                self.remove_entry(key, "fails its checksum");
                return Ok(None);
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
        let (_, len, _) = self.meta(key).ok()??;
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
        let tmp_meta = self.dir.join(format!("{TMP_PREFIX}{pid}.{hex}.meta"));
        // Which failures are the cache's own (a full disk…), as opposed to
        // the computation's (the source changed…).
        let r = (|| -> Result<(), Result<CacheError, io::Error>> {
            let f = create_private(&tmp_data).map_err(Err)?;
            let mut w = EntryWriter { file: f, error: None };
            if let Err(e) = fill(&mut w) {
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
            let write = || -> io::Result<()> {
                let len = f.metadata()?.len();
                let crc = crc_of(&f, len)?;
                f.sync_all()?;
                let mut m = create_private(&tmp_meta)?;
                m.write_all(&encode_meta(len, crc))?;
                m.sync_all()?;
                Ok(())
            };
            write().map_err(Err)?;
            // Windows renames no file this process still holds open.
            drop(f);
            self.replace(&tmp_data, &self.path(key, "data"), &hex).map_err(Err)?;
            self.replace(&tmp_meta, &self.path(key, "meta"), &hex).map_err(Err)?;
            sync_dir(&self.dir);
            Ok(())
        })();
        if r.is_err() {
            let _ = fs::remove_file(&tmp_data);
            let _ = fs::remove_file(&tmp_meta);
        }
        match r {
            Ok(()) => {}
            Err(Ok(e)) => return Err(e),
            Err(Err(e)) => return Err(self.write_failed(key, &e)),
        }
        self.failing.store(false, Ordering::Relaxed);
        let d = self.lookup(key)?.ok_or_else(|| CacheError::Io("entry vanished after it was written".into()))?;
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
mod tests {
    use super::*;

    fn fill_with(bytes: &'static [u8]) -> impl FnMut(&mut dyn super::super::Sink) -> Result<(), CacheError> {
        move |s| {
            s.write_all(bytes)?;
            Ok(())
        }
    }

    fn read_all(d: &Data) -> Vec<u8> {
        let mut v = vec![0u8; d.len() as usize];
        assert_eq!(d.read_at(0, &mut v).unwrap(), v.len());
        v
    }

    #[test]
    fn stores_reuses_and_survives_reopen() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("c");
        let c = DiskCache::open(&dir, 1 << 20).unwrap();
        let k = Key::of(&[b"a"]);
        assert!(c.get(&k).is_none());
        let d = c.get_or_insert(&k, &mut fill_with(b"abcdef")).unwrap();
        assert_eq!(read_all(&d), b"abcdef");
        assert_eq!(c.len_of(&k), Some(6));
        drop(c);
        let c = DiskCache::open(&dir, 1 << 20).unwrap();
        let d = c.get_or_insert(&k, &mut |_| panic!("recomputed")).unwrap();
        assert_eq!(read_all(&d), b"abcdef");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        }
    }

    #[test]
    fn damaged_entries_are_rebuilt_never_served() {
        let t = tempfile::tempdir().unwrap();
        let k = Key::of(&[b"k"]);
        // Same length, one byte flipped: only the checksum can tell.
        let c = DiskCache::open(t.path(), 1 << 20).unwrap();
        c.get_or_insert(&k, &mut fill_with(b"0123456789")).unwrap();
        let p = c.path(&k, "data");
        let mut b = fs::read(&p).unwrap();
        b[3] ^= 1;
        fs::write(&p, &b).unwrap();
        let c = DiskCache::open(t.path(), 1 << 20).unwrap();
        assert!(c.get(&k).is_none());
        let d = c.get_or_insert(&k, &mut fill_with(b"0123456789")).unwrap();
        assert_eq!(read_all(&d), b"0123456789");
        // Truncated.
        fs::write(&p, b"0123").unwrap();
        let c = DiskCache::open(t.path(), 1 << 20).unwrap();
        assert_eq!(c.len_of(&k), None);
        assert!(c.get(&k).is_none());
        assert_eq!(c.stats.damaged.load(Ordering::Relaxed), 1);
        // Garbage meta.
        c.get_or_insert(&k, &mut fill_with(b"0123456789")).unwrap();
        fs::write(c.path(&k, "meta"), b"nonsense").unwrap();
        let c = DiskCache::open(t.path(), 1 << 20).unwrap();
        assert!(c.get(&k).is_none());
    }

    #[test]
    fn failed_fill_leaves_nothing() {
        let t = tempfile::tempdir().unwrap();
        let c = DiskCache::open(t.path(), 1 << 20).unwrap();
        let k = Key::of(&[b"k"]);
        let r = c.get_or_insert(&k, &mut |s| {
            s.write_all(b"partial")?;
            Err(CacheError::Compute("source changed".into()))
        });
        assert!(matches!(r, Err(CacheError::Compute(_))));
        let names: Vec<_> = fs::read_dir(c.dir()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert!(names.iter().all(|n| n.to_string_lossy().ends_with(".lock") || n == TAG_NAME), "{names:?}");
    }

    #[test]
    fn orphaned_temporaries_are_removed() {
        let t = tempfile::tempdir().unwrap();
        let k = Key::of(&[b"k"]);
        let dir = DiskCache::open(t.path(), 1 << 20).unwrap().dir().to_path_buf();
        let orphan = dir.join(format!("{TMP_PREFIX}999999.{}.data", k.hex()));
        fs::write(&orphan, b"half").unwrap();
        let _c = DiskCache::open(t.path(), 1 << 20).unwrap();
        assert!(!orphan.exists());
    }

    #[test]
    fn evicts_least_recently_used_within_the_limit() {
        let t = tempfile::tempdir().unwrap();
        let c = DiskCache::open(t.path(), 25).unwrap();
        let keys: Vec<Key> = (0..4u8).map(|i| Key::of(&[&[i]])).collect();
        for (i, k) in keys.iter().enumerate() {
            c.get_or_insert(k, &mut fill_with(b"0123456789")).unwrap();
            // Distinct last-use times, oldest first.
            let t = SystemTime::now() - Duration::from_secs(100 - i as u64);
            OpenOptions::new().write(true).open(c.path(k, "meta")).unwrap().set_modified(t).unwrap();
        }
        assert!(c.used() <= 25);
        assert!(c.len_of(&keys[3]).is_some(), "newest kept");
        assert!(c.len_of(&keys[0]).is_none(), "oldest evicted");
        assert!(c.stats.evictions.load(Ordering::Relaxed) >= 2);
    }

    #[cfg(unix)]
    #[test]
    fn symlinked_entries_and_foreign_dirs_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let c = DiskCache::open(t.path(), 1 << 20).unwrap();
        let k = Key::of(&[b"k"]);
        c.get_or_insert(&k, &mut fill_with(b"real")).unwrap();
        let elsewhere = t.path().join("elsewhere");
        fs::write(&elsewhere, b"evil").unwrap();
        fs::remove_file(c.path(&k, "data")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, c.path(&k, "data")).unwrap();
        let c = DiskCache::open(t.path(), 1 << 20).unwrap();
        assert!(c.get(&k).is_none());
        assert!(fs::symlink_metadata(c.path(&k, "data")).is_err(), "symlink removed");
        // A symlinked cache directory is refused.
        let link = t.path().join("link");
        std::os::unix::fs::symlink(t.path(), &link).unwrap();
        assert!(matches!(DiskCache::open(&link, 1), Err(DiskCacheError::NotPrivate(..))));
    }

    #[cfg(unix)]
    #[test]
    fn a_directory_kpackfs_did_not_create_is_left_alone() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let shared = t.path().join("shared");
        fs::create_dir(&shared).unwrap();
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
        let hex = "0123456789abcdef0123456789abcdef";
        let foreign = [format!("{TMP_PREFIX}1.{hex}.data"), format!("{hex}.data"), format!("{hex}.meta"), format!("{hex}.lock")];
        for f in &foreign {
            fs::write(shared.join(f), b"theirs").unwrap();
        }
        // A limit of 1 byte: every insert evicts.
        let c = DiskCache::open(&shared, 1).unwrap();
        assert_eq!(c.dir(), shared.join(OWN_SUBDIR));
        for i in 0..3u8 {
            c.get_or_insert(&Key::of(&[&[i]]), &mut fill_with(b"value")).unwrap();
        }
        drop(c);
        let c = DiskCache::open(&shared, 1).unwrap();
        assert_eq!(c.dir(), shared.join(OWN_SUBDIR), "the tagged subdirectory is found again");
        assert_eq!(fs::metadata(&shared).unwrap().permissions().mode() & 0o7777, 0o1777);
        for f in &foreign {
            assert_eq!(fs::read(shared.join(f)).unwrap(), b"theirs", "{f}");
        }
        // A directory kpackfs created is used itself, and found again.
        let mine = t.path().join("mine");
        assert_eq!(DiskCache::open(&mine, 1).unwrap().dir(), mine);
        assert_eq!(DiskCache::open(&mine, 1).unwrap().dir(), mine);
        // An untagged `kpackfs` subdirectory is not taken over either.
        let other = t.path().join("other");
        fs::create_dir_all(other.join(OWN_SUBDIR)).unwrap();
        assert!(matches!(DiskCache::open(&other, 1), Err(DiskCacheError::NotOurs(..))));
    }

    /// Runs `f` on another thread; a hang fails the test (bounded wait).
    fn within<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(60)).expect("hung")
    }

    #[cfg(unix)]
    #[test]
    fn fifos_at_entry_paths_are_refused_without_blocking() {
        let t = tempfile::tempdir().unwrap();
        let k = Key::of(&[b"k"]);
        let dir = DiskCache::open(t.path(), 1 << 20).unwrap().dir().to_path_buf();
        for ext in ["data", "meta", "lock"] {
            let c = DiskCache::open(t.path(), 1 << 20).unwrap();
            c.get_or_insert(&k, &mut fill_with(b"real")).unwrap();
            let p = c.path(&k, ext);
            fs::remove_file(&p).unwrap();
            let cp = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
            // SAFETY: mkfifo with a valid NUL-terminated path.
            assert_eq!(unsafe { libc::mkfifo(cp.as_ptr(), 0o600) }, 0);
            let at = dir.clone();
            let r = within(move || {
                let c = DiskCache::open(&at, 1 << 20).unwrap();
                c.get_or_insert(&k, &mut fill_with(b"real")).map(|d| read_all(&d))
            });
            if ext == "lock" {
                // The entry itself is intact and found without its lock.
                assert_eq!(r.unwrap(), b"real");
                // A miss must take the lock: refused (and removed), so the
                // value is computed without the cache.
                fs::remove_file(c.path(&k, "meta")).unwrap();
                let r = within(move || c.get_or_insert(&k, &mut fill_with(b"real")).map(|d| d.len()));
                assert!(matches!(r, Err(CacheError::Unavailable(_))), "{r:?}");
                assert!(fs::symlink_metadata(&p).is_err(), "the FIFO is removed");
            } else {
                assert_eq!(r.unwrap(), b"real", "{ext}");
                assert!(fs::symlink_metadata(&p).unwrap().is_file(), "{ext}: the FIFO is replaced");
            }
        }
    }

    #[test]
    fn a_lock_held_too_long_is_given_up() {
        let t = tempfile::tempdir().unwrap();
        let mut c = DiskCache::open(t.path(), 1 << 20).unwrap();
        c.lock_wait = Duration::from_millis(50);
        let k = Key::of(&[b"k"]);
        // Another holder of the entry's lock (a separate open file
        // description, as another process's), never letting go.
        let held = c.lock_file(&k.hex()).unwrap();
        held.lock().unwrap();
        let c = Arc::new(c);
        let c2 = c.clone();
        let r = within(move || c2.get_or_insert(&k, &mut fill_with(b"value")).map(|d| d.len()));
        assert!(matches!(r, Err(CacheError::Unavailable(_))), "{r:?}");
        drop(held);
        assert_eq!(read_all(&c.get_or_insert(&k, &mut fill_with(b"value")).unwrap()), b"value");
    }

    #[test]
    fn two_caches_on_one_directory_compute_once() {
        let t = tempfile::tempdir().unwrap();
        let a = Arc::new(DiskCache::open(t.path(), 1 << 20).unwrap());
        let b = Arc::new(DiskCache::open(t.path(), 1 << 20).unwrap());
        let calls = Arc::new(AtomicU64::new(0));
        let k = Key::of(&[b"shared"]);
        let hs: Vec<_> = [a, b]
            .into_iter()
            .map(|c| {
                let calls = calls.clone();
                std::thread::spawn(move || {
                    c.get_or_insert(&k, &mut |s| {
                        calls.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(100));
                        s.write_all(b"value")?;
                        Ok(())
                    })
                    .unwrap()
                    .len()
                })
            })
            .collect();
        for h in hs {
            assert_eq!(h.join().unwrap(), 5);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
