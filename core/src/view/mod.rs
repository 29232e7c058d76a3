//! The view: the source tree as seen for the selected targets.
//!
//! It is the only part of the engine that knows the tree. Adapters (FUSE,
//! Dokan) and `bake` call it with inode numbers and names; it answers with
//! attributes, listings and open files, never with FUSE or Windows types.
//!
//! Nothing is read until asked for: a lookup stats one source entry and,
//! for a regular file, reads its headers; a fat binary's plan (headers,
//! relocation tables, wrappers, bundle headers) is built on first use and
//! cached by source identity, so a changed file is re-planned and a plan is
//! never applied to bytes it was not made from.

mod fat;

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use dashmap::DashMap;
use thiserror::Error;

pub use fat::{ArchiveNaming, ArchivePlan, FatBinary};

use crate::cache::ByteLru;
use crate::db;
use crate::host::{self, NotTransformed};
use crate::io::ReadAt;
use crate::layout::{BlobRef, BlobStore, Layout, LayoutError};
use crate::source::{self, FsStats, SourceId, SourceKind, SourceStat, SourceTree, Time};
use crate::target::{Selection, TargetId};

/// Inode number of the root directory.
pub const ROOT_INO: u64 = 1;
/// Name of the archive directory next to fat binaries.
pub const KPACK_DIR: &str = ".kpack";

/// `ESTALE`: the C runtime on Windows has no such errno (adapters there map
/// [`Error`] variants to NTSTATUS directly); Linux's value stands in.
#[cfg(unix)]
const ESTALE: i32 = libc::ESTALE;
#[cfg(not(unix))]
const ESTALE: i32 = 116;

/// Errors at the view boundary; adapters map them with [`Error::errno`].
#[derive(Debug, Error)]
pub enum Error {
    #[error("no such file or directory")]
    NotFound,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("not a symbolic link")]
    NotSymlink,
    #[error("invalid name")]
    InvalidName,
    #[error("name too long")]
    NameTooLong,
    #[error("unknown inode {0}")]
    StaleInode(u64),
    #[error("source file changed while being served: {0}")]
    Changed(String),
    #[error("source I/O error: {0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Layout(#[from] LayoutError),
}

impl Error {
    /// The errno to report for this error.
    pub fn errno(&self) -> i32 {
        match self {
            Error::NotFound => libc::ENOENT,
            Error::NotDir => libc::ENOTDIR,
            Error::IsDir => libc::EISDIR,
            Error::NotSymlink | Error::InvalidName => libc::EINVAL,
            Error::NameTooLong => libc::ENAMETOOLONG,
            Error::StaleInode(_) => ESTALE,
            Error::Changed(_) | Error::Layout(_) => libc::EIO,
            Error::Io(e) => match e.kind() {
                io::ErrorKind::NotFound => libc::ENOENT,
                // Our own refusals of a path or file kind (no OS code): to
                // the reader the name does not exist. An OS EINVAL stays one.
                io::ErrorKind::InvalidInput if e.raw_os_error().is_none() => libc::ENOENT,
                io::ErrorKind::PermissionDenied => libc::EACCES,
                _ => match e.raw_os_error() {
                    Some(libc::ELOOP) | Some(libc::EXDEV) => libc::ENOENT,
                    Some(libc::ENOTDIR) => libc::ENOTDIR,
                    _ => libc::EIO,
                },
            },
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// What a view serves, and from where.
#[derive(Debug, Clone)]
pub struct ViewConfig {
    pub source: PathBuf,
    pub selection: Selection,
    /// Bytes of decoded (decompressed) bundles kept in memory.
    pub cache_bytes: u64,
    pub naming: ArchiveNaming,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeType {
    Dir,
    File,
    Symlink,
}

/// Where a node's content comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Dir,
    /// A `.kpack` directory made (or extended) by the view.
    KpackDir,
    Symlink,
    Passthrough,
    Transformed,
    Archive,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Origin::Dir => "directory",
            Origin::KpackDir => "kpack-directory",
            Origin::Symlink => "symlink",
            Origin::Passthrough => "passthrough",
            Origin::Transformed => "transformed",
            Origin::Archive => "archive",
        })
    }
}

/// Attributes of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub kind: NodeType,
    pub origin: Origin,
    /// Bytes served (what `read` returns in total).
    pub size: u64,
    pub perm: u32,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
    pub atime: Time,
    pub mtime: Time,
    pub ctime: Time,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: OsString,
    pub ino: u64,
    pub kind: NodeType,
}

/// Operator counters (also exposed as an xattr on the mount root).
#[derive(Debug, Default)]
pub struct Stats {
    pub lookups: AtomicU64,
    pub opens: AtomicU64,
    pub reads: AtomicU64,
    pub bytes_served: AtomicU64,
    pub plans_built: AtomicU64,
    pub plans_refused: AtomicU64,
}

/// A point-in-time copy of the counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub lookups: u64,
    pub opens: u64,
    pub reads: u64,
    pub bytes_served: u64,
    pub plans_built: u64,
    pub plans_refused: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub cache_evictions: u64,
    pub cache_bytes: u64,
    pub cache_limit: u64,
}

impl fmt::Display for StatsSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "lookups {}", self.lookups)?;
        writeln!(f, "opens {}", self.opens)?;
        writeln!(f, "reads {}", self.reads)?;
        writeln!(f, "bytes_served {}", self.bytes_served)?;
        writeln!(f, "plans_built {}", self.plans_built)?;
        writeln!(f, "plans_refused {}", self.plans_refused)?;
        writeln!(f, "cache_hits {}", self.cache_hits)?;
        writeln!(f, "cache_misses {}", self.cache_misses)?;
        writeln!(f, "cache_evictions {}", self.cache_evictions)?;
        writeln!(f, "cache_bytes {}", self.cache_bytes)?;
        writeln!(f, "cache_limit {}", self.cache_limit)
    }
}

/// How a source file is served.
#[derive(Debug, Clone)]
enum Analysis {
    Plain,
    Fat(Arc<FatBinary>),
}

#[derive(Debug, Clone)]
enum Node {
    Dir(SourceStat),
    /// `parent` is the binaries' directory; `merged` the source's own
    /// `.kpack` directory if it has one.
    KpackDir { parent: SourceStat, merged: Option<SourceStat> },
    Symlink(SourceStat),
    Pass(SourceStat),
    Transformed(SourceStat, Arc<FatBinary>),
    Archive(SourceStat, Arc<FatBinary>, Arc<ArchivePlan>),
}

/// A cached directory listing.
#[derive(Debug)]
struct Listing {
    id: SourceId,
    entries: Vec<DirEntry>,
    fat_files: Vec<OsString>,
}

/// Inode numbers, stable for the life of the view: one per path and
/// version of its source. A file replaced or rewritten in the source gets a
/// new inode (as on a local filesystem), so the kernel never mixes cached
/// pages of two versions; directories keep theirs.
type InoKey = (PathBuf, Option<SourceId>);

#[derive(Debug, Default)]
struct Inodes {
    by_key: DashMap<InoKey, u64>,
    by_ino: DashMap<u64, InoKey>,
    /// Every inode of a path (all versions), and the names below each
    /// directory that have inodes: the watcher asks for these on every
    /// source event, which must not cost a scan of the whole table.
    by_path: DashMap<PathBuf, Vec<u64>>,
    by_parent: DashMap<PathBuf, Vec<(OsString, u64)>>,
    next: AtomicU64,
}

impl Inodes {
    fn new() -> Inodes {
        let i = Inodes { next: AtomicU64::new(ROOT_INO + 1), ..Inodes::default() };
        i.by_key.insert((PathBuf::new(), None), ROOT_INO);
        i.by_ino.insert(ROOT_INO, (PathBuf::new(), None));
        i.by_path.insert(PathBuf::new(), vec![ROOT_INO]);
        i
    }

    fn ino_of(&self, p: &Path, id: Option<SourceId>) -> u64 {
        let key = (p.to_path_buf(), id);
        if let Some(i) = self.by_key.get(&key) {
            return *i;
        }
        let mut created = false;
        let ino = *self.by_key.entry(key.clone()).or_insert_with(|| {
            created = true;
            self.next.fetch_add(1, Ordering::Relaxed)
        });
        if created {
            // Only the creator indexes it, so each inode is listed once.
            self.by_ino.insert(ino, key);
            self.by_path.entry(p.to_path_buf()).or_default().push(ino);
            if let (Some(parent), Some(name)) = (p.parent(), p.file_name()) {
                self.by_parent.entry(parent.to_path_buf()).or_default().push((name.to_os_string(), ino));
            }
        }
        ino
    }

    fn key_of(&self, ino: u64) -> Option<InoKey> {
        self.by_ino.get(&ino).map(|k| k.clone())
    }

    /// Every inode handed out for `p` (all versions).
    fn known(&self, p: &Path) -> Vec<u64> {
        self.by_path.get(p).map(|v| v.clone()).unwrap_or_default()
    }

    fn children(&self, dir: &Path) -> Vec<(OsString, u64)> {
        self.by_parent.get(dir).map(|v| v.clone()).unwrap_or_default()
    }
}

/// The source version an inode stands for (`None`: directories).
fn node_id(n: &Node) -> Option<SourceId> {
    match n {
        Node::Dir(_) | Node::KpackDir { .. } => None,
        Node::Symlink(st) | Node::Pass(st) | Node::Transformed(st, _) | Node::Archive(st, _, _) => Some(st.id()),
    }
}

/// Plans (and probe results) kept before the cache is simply reset: each
/// is cheap to rebuild, and this bounds memory over a changing tree.
const MAX_PLANS: usize = 1 << 16;

/// How far ahead (in served bytes) a sequential reader's next source
/// extents are prefetched (an archive's code objects are ~1-2 MB each).
const PREFETCH_WINDOW: u64 = 4 << 20;

/// Decodes of compressed bundles running at once: each holds an object
/// buffer and a zstd window outside the cache budget, so their number is
/// bounded instead of growing with the worker threads.
const DECODE_SLOTS: usize = 2;

const XATTR_ORIGIN: &str = "user.kpackfs.origin";
const XATTR_STATS: &str = "user.kpackfs.stats";
const XATTR_ARCH: &str = "user.kpackfs.arch";
const XATTR_SOURCE: &str = "user.kpackfs.source";
const XATTR_TARGETS: &str = "user.kpackfs.targets";

/// Name prefix of a local copy being written: `.tmp-PID-KEY`.
const TMP_PREFIX: &str = ".tmp-";

/// Whether process `pid` exists (where that cannot be told, assume it does,
/// so nothing another daemon is writing is ever deleted).
fn process_alive(pid: u32) -> bool {
    #[cfg(target_os = "linux")]
    {
        Path::new("/proc").join(pid.to_string()).exists()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        true
    }
}

/// Background writer of local copies (see [`View::with_materialize_dir`]).
struct Materializer {
    dir: PathBuf,
    /// Keys being written (a failed copy is released and retried later).
    busy: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    jobs: std::sync::Mutex<std::sync::mpsc::Sender<(String, OpenFile)>>,
}

impl Materializer {
    fn new(dir: &Path) -> Result<Materializer> {
        std::fs::create_dir_all(dir)?;
        // Copies carry whatever the source's permissions protected: keep
        // them to the daemon's user.
        #[cfg(unix)]
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        Self::remove_orphans(dir);
        let (tx, rx) = std::sync::mpsc::channel::<(String, OpenFile)>();
        let busy: Arc<std::sync::Mutex<std::collections::HashSet<String>>> = Arc::default();
        let (wdir, wbusy) = (dir.to_path_buf(), busy.clone());
        // One writer: copies never compete with each other for the disk.
        std::thread::Builder::new().name("kpackfs-materialize".into()).spawn(move || {
            for (key, of) in rx {
                let tmp = wdir.join(format!("{TMP_PREFIX}{}-{key}", std::process::id()));
                let r = File::create(&tmp)
                    .map_err(Error::from)
                    .and_then(|f| crate::bake::write_file(&of, &f).map(|_| f))
                    .and_then(|f| f.sync_all().map_err(Error::from))
                    .and_then(|()| std::fs::rename(&tmp, wdir.join(&key)).map_err(Error::from));
                match r {
                    Ok(()) => {
                        log::debug!("{}: local copy ready", of.path.display());
                        Self::remove_superseded(&wdir, &key);
                    }
                    Err(e) => {
                        log::warn!("{}: local copy failed: {e}", of.path.display());
                        let _ = std::fs::remove_file(&tmp);
                    }
                }
                wbusy.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
            }
        })?;
        Ok(Materializer { dir: dir.to_path_buf(), busy, jobs: std::sync::Mutex::new(tx) })
    }

    /// File name of the copy of `rel` (under source root `root`) as planned
    /// from source version `st`: `SLOT-VERSION-name`. The slot hashes what
    /// names the served file (root, path, selection, naming), the version
    /// what identifies its source bytes; a new version of a slot replaces the
    /// old copy (see [`Self::remove_superseded`]), so the directory holds at
    /// most one copy per served file instead of growing with every change.
    fn key(root: &Path, rel: &Path, st: &SourceStat, cfg: &ViewConfig) -> String {
        fn fnv(parts: &[&[u8]]) -> u64 {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for p in parts {
                // Length-prefixed, so ("ab","c") and ("a","bc") differ.
                for &x in (p.len() as u64).to_le_bytes().iter().chain(p.iter()) {
                    h = (h ^ x as u64).wrapping_mul(0x100_0000_01b3);
                }
            }
            h
        }
        let (sel, naming) = (cfg.selection.to_string(), format!("{:?}", cfg.naming));
        let slot = fnv(&[root.as_os_str().as_encoded_bytes(), rel.as_os_str().as_encoded_bytes(), sel.as_bytes(), naming.as_bytes()]);
        let mut version = Vec::with_capacity(56);
        for v in [st.dev, st.ino, st.size, st.mtime.sec as u64, st.mtime.nsec as u64, st.ctime.sec as u64, st.ctime.nsec as u64] {
            version.extend_from_slice(&v.to_le_bytes());
        }
        let ver = fnv(&[&version]);
        let name: String = rel.file_name().map(|n| n.to_string_lossy().chars().filter(|c| c.is_ascii_alphanumeric() || ".-_".contains(*c)).take(64).collect()).unwrap_or_default();
        format!("{slot:016x}-{ver:016x}-{name}")
    }

    /// Deletes the copies of other versions of `key`'s slot. A copy still
    /// open elsewhere stays readable through its handle (unlinked, not
    /// truncated); where the platform refuses to delete an open file the
    /// copy is left for a later pass.
    fn remove_superseded(dir: &Path, key: &str) {
        let Some(slot) = key.get(..17) else { return };
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            if name != key && name.starts_with(slot) {
                match std::fs::remove_file(e.path()) {
                    Ok(()) => log::debug!("removed superseded local copy {name}"),
                    Err(err) => log::debug!("superseded local copy {name} not removed: {err}"),
                }
            }
        }
    }

    /// Deletes partial copies left by daemons that died while writing them
    /// (their process no longer exists); a live daemon sharing the directory
    /// keeps its own.
    fn remove_orphans(dir: &Path) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(TMP_PREFIX)).and_then(|r| r.split('-').next()).and_then(|p| p.parse::<u32>().ok()) else {
                continue;
            };
            if !process_alive(pid) {
                match std::fs::remove_file(e.path()) {
                    Ok(()) => log::info!("removed partial local copy {}", e.path().display()),
                    Err(err) => log::warn!("partial local copy {} not removed: {err}", e.path().display()),
                }
            }
        }
    }

    fn existing(&self, key: &str, len: u64) -> Option<File> {
        let f = File::open(self.dir.join(key)).ok()?;
        (f.metadata().ok()?.len() == len).then_some(f)
    }

    /// Claims `key` for writing; false if a copy is already being written.
    fn claim(&self, key: &str) -> bool {
        self.busy.lock().unwrap_or_else(|p| p.into_inner()).insert(key.to_string())
    }

    fn release(&self, key: &str) {
        self.busy.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }

    fn submit(&self, key: String, of: OpenFile) {
        let sent = self.jobs.lock().unwrap_or_else(|p| p.into_inner()).send((key.clone(), of));
        if sent.is_err() {
            self.release(&key);
        }
    }
}

/// A counting semaphore for [`DECODE_SLOTS`].
#[derive(Default)]
struct Slots {
    used: std::sync::Mutex<usize>,
    freed: std::sync::Condvar,
}

impl Slots {
    fn run<T>(&self, f: impl FnOnce() -> T) -> T {
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

/// Decoded code objects by (source version, CCOB offset, range).
type BlobCache = ByteLru<(SourceId, u64, u64, u64), String>;

/// The view over one source tree for one selection.
pub struct View {
    cfg: ViewConfig,
    tree: SourceTree,
    inodes: Inodes,
    analyses: DashMap<(SourceId, PathBuf), Arc<OnceLock<Analysis>>>,
    /// Last identity seen per path, to drop plans of replaced files.
    current: DashMap<PathBuf, SourceId>,
    probes: DashMap<SourceId, bool>,
    listings: DashMap<PathBuf, Arc<Listing>>,
    blobs: Arc<BlobCache>,
    slots: Arc<Slots>,
    stats: Arc<Stats>,
    materializer: Option<Arc<Materializer>>,
}

fn rel_str(p: &Path) -> String {
    let s = p.to_string_lossy();
    if std::path::MAIN_SEPARATOR == '/' {
        s.into_owned()
    } else {
        s.replace(std::path::MAIN_SEPARATOR, "/")
    }
}

/// Test hook (debug builds only): `KPACKFS_TEST_SLOW_PLAN=substring:ms`
/// makes planning of matching paths slow, so tests can check that one slow
/// plan never stalls other readers.
#[cfg(debug_assertions)]
fn slow_plan_hook(rel: &str) {
    static HOOK: OnceLock<Option<(String, u64)>> = OnceLock::new();
    let hook = HOOK.get_or_init(|| {
        let v = std::env::var("KPACKFS_TEST_SLOW_PLAN").ok()?;
        let (pat, ms) = v.rsplit_once(':')?;
        Some((pat.to_string(), ms.parse().ok()?))
    });
    if let Some((pat, ms)) = hook {
        if rel.contains(pat.as_str()) {
            std::thread::sleep(std::time::Duration::from_millis(*ms));
        }
    }
}

#[cfg(not(debug_assertions))]
fn slow_plan_hook(_rel: &str) {}

/// Target encoded in an existing archive's name (`<group>_<target>.kpack`,
/// with `_` standing in for `:` in portable names).
pub fn archive_name_target(name: &str) -> Option<TargetId> {
    let stem = name.strip_suffix(".kpack")?;
    let mut idx: Vec<usize> = stem.match_indices('_').map(|(i, _)| i).collect();
    idx.reverse();
    idx.into_iter().find_map(|i| TargetId::parse(&stem[i + 1..].replace('_', ":")).ok())
}

impl View {
    pub fn new(cfg: ViewConfig) -> Result<View> {
        let tree = SourceTree::open(&cfg.source)?;
        if tree.stat(Path::new(""))?.kind != SourceKind::Dir {
            return Err(Error::NotDir);
        }
        Ok(View {
            blobs: Arc::new(ByteLru::new(cfg.cache_bytes)),
            slots: Arc::new(Slots::default()),
            materializer: None,
            cfg,
            tree,
            inodes: Inodes::new(),
            analyses: DashMap::new(),
            current: DashMap::new(),
            probes: DashMap::new(),
            listings: DashMap::new(),
            stats: Arc::new(Stats::default()),
        })
    }

    pub fn config(&self) -> &ViewConfig {
        &self.cfg
    }

    pub fn stats(&self) -> StatsSnapshot {
        let s = &self.stats;
        let c = &self.blobs.stats;
        StatsSnapshot {
            lookups: s.lookups.load(Ordering::Relaxed),
            opens: s.opens.load(Ordering::Relaxed),
            reads: s.reads.load(Ordering::Relaxed),
            bytes_served: s.bytes_served.load(Ordering::Relaxed),
            plans_built: s.plans_built.load(Ordering::Relaxed),
            plans_refused: s.plans_refused.load(Ordering::Relaxed),
            cache_hits: c.hits.load(Ordering::Relaxed),
            cache_misses: c.misses.load(Ordering::Relaxed),
            cache_evictions: c.evictions.load(Ordering::Relaxed),
            cache_bytes: c.bytes.load(Ordering::Relaxed),
            cache_limit: self.blobs.limit(),
        }
    }

    fn path(&self, ino: u64) -> Result<PathBuf> {
        self.inodes.key_of(ino).map(|k| k.0).ok_or(Error::StaleInode(ino))
    }

    /// Resolves an inode, failing with `ESTALE` if its source version is
    /// gone (the kernel then looks the name up again).
    fn resolve_ino(&self, ino: u64) -> Result<(PathBuf, Node)> {
        let (p, id) = self.inodes.key_of(ino).ok_or(Error::StaleInode(ino))?;
        let node = self.resolve(&p)?;
        if node_id(&node) != id {
            return Err(Error::StaleInode(ino));
        }
        Ok((p, node))
    }

    /// Whether a regular file at `rel` is hidden by the selection.
    fn hidden(&self, rel: &Path) -> bool {
        let name = rel.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
        let in_kpack_dir = rel.parent().and_then(Path::file_name) == Some(OsStr::new(KPACK_DIR));
        if in_kpack_dir {
            if let Some(t) = archive_name_target(&name) {
                return !self.cfg.selection.selects(&t);
            }
        }
        db::classify(&rel_str(rel)).is_some_and(|a| !a.selected_by(&self.cfg.selection))
    }

    /// Whether a directory is hidden: a per-architecture database directory
    /// (`library/gfx942/`, `aotriton/kernels/gfx90a/`) of an unselected target.
    fn hidden_dir(&self, rel: &Path) -> bool {
        db::classify(&format!("{}/_", rel_str(rel))).is_some_and(|a| !a.selected_by(&self.cfg.selection))
    }

    /// Cheap, cached: does this file (by identity) look like a fat binary?
    /// Only definite answers are cached: a file that could not be opened or
    /// read now (out of descriptors, an I/O error) is asked again next
    /// time, so its `.kpack` directory never goes missing for good while
    /// the binary itself is served transformed.
    fn probe(&self, rel: &Path, st: &SourceStat) -> bool {
        if let Some(p) = self.probes.get(&st.id()) {
            return *p;
        }
        // A plan made for this very version already knows.
        if let Some(cell) = self.analyses.get(&(st.id(), rel.to_path_buf())).map(|c| c.clone()) {
            if let Some(a) = cell.get() {
                return matches!(a, Analysis::Fat(_));
            }
        }
        let fat = match self.tree.open_file(rel) {
            Ok((f, fst)) if fst.id() == st.id() => host::probe_checked(&f),
            Ok(_) => return false, // changed meanwhile: its own event follows
            Err(e) => Err(e),
        };
        match fat {
            Ok(fat) => {
                self.probes.insert(st.id(), fat);
                fat
            }
            Err(e) => {
                log::debug!("{}: probe failed ({e}); will retry", rel.display());
                false
            }
        }
    }

    /// Plans (once per identity and path) how a regular file is served.
    fn analyze(&self, rel: &Path, st: &SourceStat) -> Result<(SourceStat, Analysis)> {
        let key = (st.id(), rel.to_path_buf());
        if let Some(cell) = self.analyses.get(&key).map(|c| c.clone()) {
            if let Some(a) = cell.get() {
                return Ok((st.clone(), a.clone()));
            }
        }
        let (file, fst) = self.tree.open_file(rel)?;
        let key = (fst.id(), rel.to_path_buf());
        if let Some(old) = self.current.insert(rel.to_path_buf(), fst.id()) {
            if old != fst.id() {
                self.analyses.remove(&(old, rel.to_path_buf()));
                // The parent's listing holds the old version's inode and
                // fatness, and an in-place rewrite leaves the directory's
                // own identity unchanged.
                self.listings.remove(rel.parent().unwrap_or(Path::new("")));
            }
        }
        if self.analyses.len() > MAX_PLANS {
            self.analyses.clear();
            self.probes.clear();
        }
        let cell = self.analyses.entry(key).or_insert_with(|| Arc::new(OnceLock::new())).clone();
        let a = cell
            .get_or_init(|| {
                let rs = rel_str(rel);
                if rel.to_str().is_none() {
                    if host::probe(&file) {
                        log::warn!("{}: served unchanged: file name is not UTF-8", rel.display());
                    }
                    return Analysis::Plain;
                }
                slow_plan_hook(&rs);
                match FatBinary::analyze(&file, fst.id(), &rs) {
                    Ok(fb) => {
                        self.stats.plans_built.fetch_add(1, Ordering::Relaxed);
                        log::debug!("{rs}: planned, {} wrappers", fb.plan.wrappers.len());
                        Analysis::Fat(Arc::new(fb))
                    }
                    Err(NotTransformed::Plain) => Analysis::Plain,
                    Err(NotTransformed::Refused(why)) => {
                        self.stats.plans_refused.fetch_add(1, Ordering::Relaxed);
                        log::warn!("{rs}: served unchanged: {why}");
                        Analysis::Plain
                    }
                }
            })
            .clone();
        Ok((fst, a))
    }

    /// The archives of a planned binary (second planning stage, once).
    fn archives(&self, rel: &Path, fb: &FatBinary) -> Result<Arc<fat::Archives>> {
        if let Some(a) = fb.archives_if_ready() {
            return Ok(a.clone());
        }
        let (file, fst) = self.tree.open_file(rel)?;
        if fst.id() != fb.id {
            return Err(Error::Changed(rel.display().to_string()));
        }
        let a = fb.archives(&file, &self.cfg.selection, self.cfg.naming)?;
        if !a.problems.is_empty() {
            log::warn!("{}: some wrappers have no code objects: {}", rel.display(), a.problems.join("; "));
        }
        Ok(a)
    }

    fn file_node(&self, rel: &Path, st: SourceStat) -> Result<Node> {
        if self.hidden(rel) {
            return Err(Error::NotFound);
        }
        let (fst, a) = self.analyze(rel, &st)?;
        Ok(match a {
            Analysis::Plain => Node::Pass(fst),
            Analysis::Fat(fb) => Node::Transformed(fst, fb),
        })
    }

    /// The synthesized archive `name` in `bin_dir/.kpack`, if any.
    fn synth_archive(&self, bin_dir: &Path, name: &str) -> Result<Option<Node>> {
        let Some((group, _)) = name.strip_suffix(".kpack").and_then(|s| s.rsplit_once('_')) else { return Ok(None) };
        let bin = bin_dir.join(group);
        // A binary replaced between its stat and its planning is looked at
        // again (as `open` does), rather than failing the lookup.
        for _ in 0..3 {
            let st = match self.tree.stat(&bin) {
                Ok(st) if st.kind == SourceKind::File => st,
                _ => return Ok(None),
            };
            match self.file_node(&bin, st) {
                Ok(Node::Transformed(fst, fb)) => match self.archives(&bin, &fb) {
                    Ok(archives) => return Ok(archives.by_name.get(name).cloned().map(|a| Node::Archive(fst, fb, a))),
                    Err(Error::Changed(_)) => continue,
                    Err(e) => return Err(e),
                },
                Ok(_) | Err(Error::NotFound) => return Ok(None),
                Err(Error::Changed(_)) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(Error::Changed(bin.display().to_string()))
    }

    /// The (cached) listing of source directory `rel`.
    fn listing(&self, rel: &Path) -> Result<Arc<Listing>> {
        let st = self.tree.stat(rel)?;
        if st.kind != SourceKind::Dir {
            return Err(Error::NotDir);
        }
        if let Some(l) = self.listings.get(rel) {
            if l.id == st.id() {
                return Ok(l.clone());
            }
        }
        let mut raw = self.tree.read_dir(rel)?;
        raw.sort_by(|a, b| a.0.cmp(&b.0));
        let mut entries = Vec::with_capacity(raw.len() + 1);
        let mut fat_files = Vec::new();
        for (name, kind) in raw {
            let child = rel.join(&name);
            let child_st = match kind {
                Some(SourceKind::Special) => continue,
                _ => match self.tree.stat(&child) {
                    Ok(s) => s,
                    Err(_) => continue,
                },
            };
            let t = match child_st.kind {
                SourceKind::Dir if self.hidden_dir(&child) => continue,
                SourceKind::Dir => NodeType::Dir,
                SourceKind::Symlink => NodeType::Symlink,
                SourceKind::File => {
                    if self.hidden(&child) {
                        continue;
                    }
                    if self.probe(&child, &child_st) {
                        fat_files.push(name.clone());
                    }
                    NodeType::File
                }
                SourceKind::Special => continue,
            };
            let id = (t != NodeType::Dir).then(|| child_st.id());
            entries.push(DirEntry { ino: self.inodes.ino_of(&child, id), name, kind: t });
        }
        if !fat_files.is_empty() && !entries.iter().any(|e| e.name == KPACK_DIR) {
            let k = rel.join(KPACK_DIR);
            entries.push(DirEntry { ino: self.inodes.ino_of(&k, None), name: KPACK_DIR.into(), kind: NodeType::Dir });
            entries.sort_by(|a, b| a.name.cmp(&b.name));
        }
        let l = Arc::new(Listing { id: st.id(), entries, fat_files });
        self.listings.insert(rel.to_path_buf(), l.clone());
        Ok(l)
    }

    fn has_fat(&self, dir: &Path) -> bool {
        self.listing(dir).map(|l| !l.fat_files.is_empty()).unwrap_or(false)
    }

    fn resolve(&self, vpath: &Path) -> Result<Node> {
        let Some(name) = vpath.file_name() else {
            return Ok(Node::Dir(self.tree.stat(vpath)?));
        };
        let parent = vpath.parent().unwrap_or(Path::new(""));
        let name_s = name.to_string_lossy();
        if parent.file_name() == Some(OsStr::new(KPACK_DIR)) && name_s.ends_with(".kpack") {
            let bin_dir = parent.parent().unwrap_or(Path::new(""));
            if let Some(n) = self.synth_archive(bin_dir, &name_s)? {
                return Ok(n);
            }
        }
        match self.tree.stat(vpath) {
            Ok(st) => match st.kind {
                SourceKind::Dir if name == KPACK_DIR && self.has_fat(parent) => {
                    Ok(Node::KpackDir { parent: self.tree.stat(parent)?, merged: Some(st) })
                }
                SourceKind::Dir if self.hidden_dir(vpath) => Err(Error::NotFound),
                SourceKind::Dir => Ok(Node::Dir(st)),
                SourceKind::Symlink => Ok(Node::Symlink(st)),
                SourceKind::File => self.file_node(vpath, st),
                SourceKind::Special => Err(Error::NotFound),
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound && name == KPACK_DIR && self.has_fat(parent) => {
                Ok(Node::KpackDir { parent: self.tree.stat(parent)?, merged: None })
            }
            Err(e) => Err(e.into()),
        }
    }

    fn attr(&self, ino: u64, node: &Node) -> Attr {
        let from = |st: &SourceStat, kind, origin, size| Attr {
            ino,
            kind,
            origin,
            size,
            perm: st.perm,
            nlink: st.nlink.max(1),
            uid: st.uid,
            gid: st.gid,
            atime: st.atime,
            mtime: st.mtime,
            ctime: st.ctime,
        };
        match node {
            Node::Dir(st) => from(st, NodeType::Dir, Origin::Dir, st.size),
            Node::KpackDir { parent, merged } => {
                let mut a = from(merged.as_ref().unwrap_or(parent), NodeType::Dir, Origin::KpackDir, 4096);
                a.nlink = 2;
                a
            }
            Node::Symlink(st) => from(st, NodeType::Symlink, Origin::Symlink, st.size),
            Node::Pass(st) => from(st, NodeType::File, Origin::Passthrough, st.size),
            Node::Transformed(st, fb) => {
                let mut a = from(st, NodeType::File, Origin::Transformed, fb.plan.layout.len());
                a.nlink = 1;
                a
            }
            Node::Archive(st, _, ap) => {
                let mut a = from(st, NodeType::File, Origin::Archive, ap.layout.len());
                a.nlink = 1;
                a
            }
        }
    }

    /// Looks `name` up in directory `parent`.
    pub fn lookup(&self, parent: u64, name: &OsStr) -> Result<Attr> {
        self.stats.lookups.fetch_add(1, Ordering::Relaxed);
        if name.len() > 255 {
            return Err(Error::NameTooLong);
        }
        source::check_name(name).map_err(|_| Error::InvalidName)?;
        let dir = self.path(parent)?;
        let child = dir.join(name);
        let node = self.resolve(&child)?;
        Ok(self.attr(self.inodes.ino_of(&child, node_id(&node)), &node))
    }

    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        let (_, node) = self.resolve_ino(ino)?;
        Ok(self.attr(ino, &node))
    }

    /// Attributes of the node at root-relative path `rel`.
    pub fn getattr_path(&self, rel: &Path) -> Result<Attr> {
        source::check_relative(rel).map_err(|_| Error::InvalidName)?;
        let node = self.resolve(rel)?;
        Ok(self.attr(self.inodes.ino_of(rel, node_id(&node)), &node))
    }

    /// Root-relative path of an inode.
    pub fn path_of(&self, ino: u64) -> Result<PathBuf> {
        self.path(ino)
    }

    /// The inodes handed out for `rel`, one per source version seen
    /// (never assigns).
    pub fn known_inos(&self, rel: &Path) -> Vec<u64> {
        self.inodes.known(rel)
    }

    /// Names and inodes handed out so far directly below `dir` (for cache
    /// invalidation when the source changes).
    pub fn known_children(&self, dir: &Path) -> Vec<(OsString, u64)> {
        self.inodes.children(dir)
    }

    /// Whether the kernel's cached data of inode `ino` may no longer match
    /// the source after a change event. A file inode stands for one source
    /// version, whose bytes a changed file does not alter (it gets a new
    /// inode): its cached pages stay valid, and dropping them would fault
    /// processes that still map that version. Only an inode whose version
    /// still matches the source after the event — rewritten in place
    /// within one timestamp tick — and directories, whose listings change,
    /// need their data dropped.
    pub fn data_may_have_changed(&self, ino: u64) -> bool {
        match self.inodes.key_of(ino) {
            None => false,
            Some((_, None)) => true,
            Some((p, Some(id))) => self.tree.stat(&p).is_ok_and(|st| st.id() == id),
        }
    }

    /// Forgets what was learnt about `dir/name` (or, with `None`, about
    /// everything directly in `dir`): the directory listing, plans and
    /// probe results. Called when the source reports a change, so the next
    /// request re-reads the source even where the change left the file's
    /// identity (size, times) as it was.
    pub fn source_changed(&self, dir: &Path, name: Option<&OsStr>) {
        self.listings.remove(dir);
        match name {
            Some(n) => {
                let p = dir.join(n);
                if let Some((_, id)) = self.current.remove(&p) {
                    self.analyses.remove(&(id, p));
                    self.probes.remove(&id);
                }
            }
            None => {
                let in_dir = |p: &Path| p.parent() == Some(dir);
                let mut ids = Vec::new();
                self.current.retain(|p, id| {
                    let keep = !in_dir(p);
                    if !keep {
                        ids.push(*id);
                    }
                    keep
                });
                self.analyses.retain(|(_, p), _| !in_dir(p));
                for id in ids {
                    self.probes.remove(&id);
                }
            }
        }
    }

    pub fn readlink(&self, ino: u64) -> Result<OsString> {
        let (p, node) = self.resolve_ino(ino)?;
        match node {
            Node::Symlink(_) => Ok(self.tree.read_link(&p)?),
            _ => Err(Error::NotSymlink),
        }
    }

    /// The entries of a directory (without `.` and `..`), sorted by name;
    /// the order (and so any offset into it) is stable while the source
    /// directory is unchanged.
    pub fn readdir(&self, ino: u64) -> Result<Vec<DirEntry>> {
        let (p, node) = self.resolve_ino(ino)?;
        match node {
            Node::Dir(_) => Ok(self.listing(&p)?.entries.clone()),
            Node::KpackDir { merged, .. } => {
                let bin_dir = p.parent().unwrap_or(Path::new(""));
                let mut by_name: BTreeMap<OsString, DirEntry> = BTreeMap::new();
                if merged.is_some() {
                    for e in self.listing(&p)?.entries.iter() {
                        by_name.insert(e.name.clone(), e.clone());
                    }
                }
                for bin in self.listing(bin_dir)?.fat_files.clone() {
                    let rel = bin_dir.join(&bin);
                    let Ok(st) = self.tree.stat(&rel) else { continue };
                    if let Ok(Node::Transformed(_, fb)) = self.file_node(&rel, st) {
                        let Ok(archives) = self.archives(&rel, &fb) else { continue };
                        for name in archives.by_name.keys() {
                            let ino = self.inodes.ino_of(&p.join(name), Some(fb.id));
                            by_name.insert(name.into(), DirEntry { name: name.into(), ino, kind: NodeType::File });
                        }
                    }
                }
                Ok(by_name.into_values().collect())
            }
            _ => Err(Error::NotDir),
        }
    }

    /// Opens a file for reading. The inode's source version must still be
    /// the current one (`ESTALE` otherwise, and the kernel looks again).
    pub fn open(&self, ino: u64) -> Result<OpenFile> {
        let (p, node) = self.resolve_ino(ino)?;
        self.open_node(&p, node, ino).map_err(|e| match e {
            Error::Changed(_) => Error::StaleInode(ino),
            e => e,
        })
    }

    /// Opens the current version of the file at `rel`.
    pub fn open_path(&self, rel: &Path) -> Result<OpenFile> {
        for _ in 0..3 {
            let node = self.resolve(rel)?;
            let ino = self.inodes.ino_of(rel, node_id(&node));
            match self.open_node(rel, node, ino) {
                Err(Error::Changed(_)) => continue,
                r => return r,
            }
        }
        Err(Error::Changed(rel.display().to_string()))
    }

    fn open_node(&self, rel: &Path, node: Node, ino: u64) -> Result<OpenFile> {
        self.stats.opens.fetch_add(1, Ordering::Relaxed);
        let attr = self.attr(ino, &node);
        let (bin_rel, content, want): (PathBuf, Content, SourceId) = match node {
            Node::Dir(_) | Node::KpackDir { .. } => return Err(Error::IsDir),
            Node::Symlink(_) => return Err(Error::NotFound),
            Node::Pass(st) => (rel.to_path_buf(), Content::Pass(Layout::passthrough(st.size)), st.id()),
            Node::Transformed(st, fb) => (rel.to_path_buf(), Content::Binary(fb), st.id()),
            Node::Archive(st, fb, ap) => {
                let dir = rel.parent().and_then(Path::parent).unwrap_or(Path::new(""));
                (dir.join(&fb.group), Content::Archive(ap), st.id())
            }
        };
        let (file, fst) = self.tree.open_file(&bin_rel)?;
        if fst.id() != want {
            // Changed between planning and opening.
            return Err(Error::Changed(bin_rel.display().to_string()));
        }
        let make = |content: Content, file: File| OpenFile {
            content,
            file,
            id: fst.id(),
            meta: (fst.perm, fst.uid, fst.gid, fst.nlink),
            attr: attr.clone(),
            last_end: AtomicU64::new(u64::MAX),
            prefetched: AtomicU64::new(0),
            blobs: self.blobs.clone(),
            slots: self.slots.clone(),
            stats: self.stats.clone(),
            path: rel.to_path_buf(),
            materialized: None,
        };
        let mut of = make(content, file);
        if let (Some(m), false) = (&self.materializer, matches!(of.content, Content::Pass(_))) {
            let key = Materializer::key(self.tree.root(), rel, &fst, &self.cfg);
            match m.existing(&key, of.len()) {
                Some(copy) => of.materialized = Some(copy),
                None if m.claim(&key) => {
                    // The copy is written from a second handle, in the background.
                    match self.tree.open_file(&bin_rel) {
                        Ok((f2, st2)) if st2.id() == fst.id() => m.submit(key, make(of.content.clone(), f2)),
                        _ => m.release(&key),
                    }
                }
                None => {}
            }
        }
        Ok(of)
    }

    /// Keeps local copies of served synthesized files (transformed
    /// binaries, archives) in `dir`, so later opens are served by the kernel
    /// (FUSE passthrough) from a local file at native page-cache speed —
    /// the kernel's FUSE page cache uses small folios, which caps warm reads
    /// of files the daemon serves itself. Copies are written in the
    /// background on first open and keyed by source version, path and
    /// selection, so a changed source never reuses a stale copy; the copy of
    /// the new version replaces the old one.
    pub fn with_materialize_dir(mut self, dir: &Path) -> Result<View> {
        self.materializer = Some(Arc::new(Materializer::new(dir)?));
        Ok(self)
    }

    pub fn statfs(&self) -> Result<FsStats> {
        Ok(self.tree.statfs()?)
    }

    /// Names of the operator attributes of node `ino`: `user.kpackfs.origin`
    /// everywhere; on the root also the counters, selection and source; on
    /// transformed binaries the targets their source carries. Cheap (no
    /// planning): `ls -l`, `cp -a` and `rsync -X` list attributes of every
    /// file they touch.
    pub fn xattr_names(&self, ino: u64) -> Result<Vec<&'static str>> {
        Ok(Self::xattr_names_of(ino, &self.getattr(ino)?))
    }

    fn xattr_names_of(ino: u64, attr: &Attr) -> Vec<&'static str> {
        let mut v = vec![XATTR_ORIGIN];
        if ino == ROOT_INO {
            v.extend([XATTR_STATS, XATTR_ARCH, XATTR_SOURCE]);
        }
        if attr.origin == Origin::Transformed {
            v.push(XATTR_TARGETS);
        }
        v
    }

    /// The value of attribute `name` of node `ino`, or `None` if it has no
    /// such attribute. Only the asked-for value is computed: `targets`
    /// plans the binary's archives (a scan of its bundle headers), which
    /// nothing else about a listing needs.
    pub fn xattr(&self, ino: u64, name: &str) -> Result<Option<Vec<u8>>> {
        let attr = self.getattr(ino)?;
        if !Self::xattr_names_of(ino, &attr).contains(&name) {
            return Ok(None);
        }
        Ok(Some(match name {
            XATTR_ORIGIN => attr.origin.to_string().into_bytes(),
            XATTR_STATS => self.stats().to_string().into_bytes(),
            XATTR_ARCH => self.cfg.selection.to_string().into_bytes(),
            XATTR_SOURCE => self.cfg.source.to_string_lossy().into_owned().into_bytes(),
            XATTR_TARGETS => match self.resolve_ino(ino)? {
                (p, Node::Transformed(_, fb)) => {
                    let t: Vec<String> = self.archives(&p, &fb)?.targets.iter().map(ToString::to_string).collect();
                    t.join(",").into_bytes()
                }
                // Changed since getattr: no longer a transformed binary.
                _ => return Ok(None),
            },
            _ => return Ok(None),
        }))
    }
}

#[derive(Clone)]
enum Content {
    Pass(Layout),
    Binary(Arc<FatBinary>),
    Archive(Arc<ArchivePlan>),
}

/// Decoded blobs of one source identity, through the shared LRU.
struct Blobs<'a> {
    cache: &'a BlobCache,
    slots: &'a Slots,
    id: SourceId,
}

impl BlobStore for Blobs<'_> {
    fn object(&self, src: &dyn ReadAt, blob: &BlobRef, offset: u64, len: u64) -> std::result::Result<Arc<Vec<u8>>, LayoutError> {
        self.cache
            .get_or_load(&(self.id, blob.at, offset, len), || {
                self.slots.run(|| crate::bundle::ccob::decode_range(src, blob.at, blob.len, &blob.header, offset, len))
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .map_err(LayoutError::Shared)
    }
}

/// An open file of the view. Reads are positional and may run concurrently.
pub struct OpenFile {
    slots: Arc<Slots>,
    /// A complete local copy of this content, if one exists.
    materialized: Option<File>,
    content: Content,
    file: File,
    id: SourceId,
    /// Mode, owner and link count of the source when opened (see
    /// [`OpenFile::unchanged`]).
    meta: (u32, u32, u32, u64),
    attr: Attr,
    /// Where the previous read ended (sequential-access detection).
    last_end: AtomicU64,
    /// Layout position up to which source extents were prefetched.
    prefetched: AtomicU64,
    blobs: Arc<BlobCache>,
    stats: Arc<Stats>,
    path: PathBuf,
}

impl OpenFile {
    /// The layout being served.
    pub fn layout(&self) -> &Layout {
        match &self.content {
            Content::Pass(l) => l,
            Content::Binary(fb) => &fb.plan.layout,
            Content::Archive(ap) => &ap.layout,
        }
    }

    pub fn len(&self) -> u64 {
        self.layout().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The file's attributes as of its opening (what `fstat` on the open
    /// file reports, even after the source moved on).
    pub fn attr(&self) -> &Attr {
        &self.attr
    }

    /// Identity of the source file being served.
    pub fn source_id(&self) -> SourceId {
        self.id
    }

    pub fn origin(&self) -> Origin {
        match self.content {
            Content::Pass(_) => Origin::Passthrough,
            Content::Binary(_) => Origin::Transformed,
            Content::Archive(_) => Origin::Archive,
        }
    }

    /// The source file itself when the content is served unchanged (for
    /// kernel passthrough).
    pub fn passthrough_file(&self) -> Option<&File> {
        match self.content {
            Content::Pass(_) => Some(&self.file),
            _ => self.materialized.as_ref(),
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
        id == self.id || (id.same_content(&self.id) && (now.perm, now.uid, now.gid, now.nlink) != self.meta)
    }

    /// Fills `buf` from `offset`; returns the count (short only at EOF).
    /// Fails with [`Error::Changed`] rather than serve bytes of a source
    /// that changed under the plan.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let r = self.layout().read_at(offset, buf, &self.file, &self.blob_store());
        let still = source::fstat_file(&self.file).is_ok_and(|s| self.unchanged(&s));
        if !still {
            return Err(Error::Changed(self.path.display().to_string()));
        }
        let n = r?;
        // A sequential reader of an archive walks scattered source ranges:
        // start the disk on the next ones before it asks.
        let end = offset + n as u64;
        // Each upcoming extent is prefetched whole, once.
        if self.last_end.swap(end, Ordering::Relaxed) == offset && n > 0 {
            let done = self.prefetched.load(Ordering::Relaxed);
            for (start, at, len) in self.layout().source_extents_after(end, PREFETCH_WINDOW) {
                if start >= done {
                    self.file.prefetch(at, len);
                    self.prefetched.fetch_max(start + len, Ordering::Relaxed);
                }
            }
        }
        self.stats.reads.fetch_add(1, Ordering::Relaxed);
        self.stats.bytes_served.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    /// Decoded-blob access for external copy loops.
    pub fn blob_store(&self) -> impl BlobStore + '_ {
        Blobs { cache: &self.blobs, slots: &self.slots, id: self.id }
    }
}
