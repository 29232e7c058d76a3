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

mod cached;
mod fat;
mod inodes;
mod open;

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use dashmap::DashMap;
use thiserror::Error;

pub use fat::{ArchiveCompression, ArchiveNaming, ArchivePlan, FatBinary};
pub use cached::CopyPolicy;
pub use open::OpenFile;

use crate::data_cache::{Data, DiskCache};
use crate::db;
use crate::host::{self, NotTransformed};
use crate::layout::{Layout, LayoutError};
use crate::source::{self, FsStats, SourceId, SourceKind, SourceStat, SourceTree, Time};
use crate::target::{Selection, TargetId};

use cached::Caches;
use inodes::Inodes;
use open::{Content, Shared, Slots};

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
    /// A cached value (a compressed archive) could not be made or read.
    #[error("{0}")]
    Cache(String),
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
            Error::Changed(_) | Error::Layout(_) | Error::Cache(_) => libc::EIO,
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
    pub compression: ArchiveCompression,
    /// Which files are database files of one architecture (built-in rules,
    /// after any the operator added).
    pub db_rules: Arc<db::Rules>,
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
    /// Disk cache counters, when the view has a cache directory.
    pub disk: Option<DiskSnapshot>,
}

/// Counters of the disk cache.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiskSnapshot {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub damaged: u64,
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
        writeln!(f, "cache_limit {}", self.cache_limit)?;
        if let Some(d) = &self.disk {
            writeln!(f, "disk_hits {}", d.hits)?;
            writeln!(f, "disk_misses {}", d.misses)?;
            writeln!(f, "disk_evictions {}", d.evictions)?;
            writeln!(f, "disk_damaged {}", d.damaged)?;
        }
        Ok(())
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
    /// A compressed archive found in the disk cache (no plan needed).
    CachedArchive(SourceStat, Arc<FatBinary>, Data),
}

/// A cached directory listing.
#[derive(Debug)]
struct Listing {
    id: SourceId,
    entries: Vec<DirEntry>,
    fat_files: Vec<OsString>,
}

/// The source version an inode stands for (`None`: directories).
fn node_id(n: &Node) -> Option<SourceId> {
    match n {
        Node::Dir(_) | Node::KpackDir { .. } => None,
        Node::Symlink(st) | Node::Pass(st) | Node::Transformed(st, _) | Node::Archive(st, _, _) | Node::CachedArchive(st, _, _) => Some(st.id()),
    }
}

/// Plans (and probe results) kept before the cache is simply reset: each
/// is cheap to rebuild, and this bounds memory over a changing tree.
const MAX_PLANS: usize = 1 << 16;

const XATTR_ORIGIN: &str = "user.kpackfs.origin";
const XATTR_STATS: &str = "user.kpackfs.stats";
const XATTR_ARCH: &str = "user.kpackfs.arch";
const XATTR_SOURCE: &str = "user.kpackfs.source";
const XATTR_TARGETS: &str = "user.kpackfs.targets";

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
    caches: Caches,
    slots: Arc<Slots>,
    stats: Arc<Stats>,
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
            caches: Caches::new(cfg.cache_bytes),
            slots: Arc::new(Slots::default()),
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
        let c = &self.caches.memory.stats;
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
            cache_limit: self.caches.memory.limit(),
            disk: self.caches.disk.as_ref().map(|d| DiskSnapshot {
                hits: d.stats.hits.load(Ordering::Relaxed),
                misses: d.stats.misses.load(Ordering::Relaxed),
                evictions: d.stats.evictions.load(Ordering::Relaxed),
                damaged: d.stats.damaged.load(Ordering::Relaxed),
            }),
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
        self.cfg.db_rules.classify(rel).is_some_and(|a| !a.selected_by(&self.cfg.selection))
    }

    /// Whether a directory is hidden: a per-architecture database directory
    /// (`library/gfx942/`, `aotriton/kernels/gfx90a/`) of an unselected target.
    fn hidden_dir(&self, rel: &Path) -> bool {
        self.cfg.db_rules.classify_dir(rel).is_some_and(|a| !a.selected_by(&self.cfg.selection))
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
        let a = fb.archives(&file, &self.cfg.selection, self.cfg.naming, self.cfg.compression)?;
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
            let (fst, fb) = match self.file_node(&bin, st) {
                Ok(Node::Transformed(fst, fb)) => (fst, fb),
                Ok(_) | Err(Error::NotFound) => return Ok(None),
                Err(Error::Changed(_)) => continue,
                Err(e) => return Err(e),
            };
            let key = Caches::key(self.tree.root(), &bin_dir.join(KPACK_DIR).join(name), &fst.id(), &self.cfg, "archive");
            // A compressed archive already in the disk cache is answered
            // from the cache alone, before the binary's bundle headers (one
            // decode per compressed bundle) are ever read.
            if fb.archives_if_ready().is_none() && self.cfg.compression != ArchiveCompression::None {
                if let Some(d) = self.caches.cached_archive(&key) {
                    return Ok(Some(Node::CachedArchive(fst, fb, d)));
                }
            }
            let ap = match self.archives(&bin, &fb) {
                Ok(archives) => match archives.by_name.get(name) {
                    Some(ap) => ap.clone(),
                    None => return Ok(None),
                },
                Err(Error::Changed(_)) => continue,
                Err(e) => return Err(e),
            };
            if ap.compressed {
                // Its size is the compressed form's: computed now (or found
                // in the cache), once per plan.
                match self.caches.compressed_len(&key, &ap, &|| self.source_of(&bin, &fst)) {
                    Ok(_) => {}
                    Err(Error::Changed(_)) => continue,
                    Err(e) => return Err(e),
                }
            }
            return Ok(Some(Node::Archive(fst, fb, ap)));
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
            Node::CachedArchive(st, _, d) => {
                let mut a = from(st, NodeType::File, Origin::Archive, d.len());
                a.nlink = 1;
                a
            }
            Node::Archive(st, _, ap) => {
                // Compressed archives' lengths are known before a node is made.
                let mut a = from(st, NodeType::File, Origin::Archive, ap.served_len().unwrap_or(0));
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
            Node::CachedArchive(st, fb, d) => {
                let dir = rel.parent().and_then(Path::parent).unwrap_or(Path::new(""));
                (dir.join(&fb.group), Content::Compressed(d), st.id())
            }
        };
        let (file, fst) = self.tree.open_file(&bin_rel)?;
        if fst.id() != want {
            // Changed between planning and opening.
            return Err(Error::Changed(bin_rel.display().to_string()));
        }
        let shared = Shared { slots: self.slots.clone(), blobs: self.caches.memory.clone(), stats: self.stats.clone() };
        let content = match content {
            Content::Archive(ap) if ap.compressed => {
                let key = Caches::key(self.tree.root(), rel, &fst.id(), &self.cfg, "archive");
                let data = self.caches.compressed(&key, &ap, &|| self.source_of(&bin_rel, &fst))?;
                if data.len() != attr.size {
                    log::warn!("{}: compressed archive has {} bytes, {} were announced", rel.display(), data.len(), attr.size);
                    return Err(Error::Changed(rel.display().to_string()));
                }
                Content::Compressed(data)
            }
            c => c,
        };
        let mut of = OpenFile::new(shared, content, file, &fst, attr, rel.to_path_buf());
        let decodes = match of.content() {
            Content::Binary(_) => Some(false),
            Content::Archive(ap) => Some(ap.decodes()),
            Content::Pass(_) | Content::Compressed(_) => None,
        };
        if let Some(decodes) = decodes {
            let key = Caches::key(self.tree.root(), rel, &fst.id(), &self.cfg, "copy");
            // The copy is written from a second handle, in the background.
            self.caches.attach_copy(&mut of, key, decodes, &|| self.source_of(&bin_rel, &fst).ok());
        }
        Ok(of)
    }

    /// A new handle on source file `rel`, if it is still version `st`.
    fn source_of(&self, rel: &Path, st: &SourceStat) -> Result<std::fs::File> {
        let (f, fst) = self.tree.open_file(rel)?;
        if fst.id() != st.id() {
            return Err(Error::Changed(rel.display().to_string()));
        }
        Ok(f)
    }

    /// Keeps compressed archives and local copies of synthesized files in
    /// the disk cache `disk` (see [`cached`]): reused across remounts and
    /// daemons, and served by the kernel (FUSE passthrough) from a local
    /// file at native page-cache speed — the kernel's FUSE page cache uses
    /// small folios, which caps warm reads of files the daemon serves
    /// itself. `policy` says which files get copies.
    pub fn with_disk_cache(mut self, disk: Arc<DiskCache>, policy: CopyPolicy) -> Result<View> {
        self.caches.with_disk(disk, policy)?;
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

