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
#[cfg(test)]
mod copy_tests;
mod inodes;
mod invalidate;
mod listing;
mod lookup;
mod open;
mod parallel;
mod plan_cache;
mod probes;
#[cfg(test)]
mod select_tests;
mod types;
mod xattr;

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dashmap::DashMap;
use thiserror::Error;

pub use crate::plan::{ArchiveCompression, ArchiveNaming, ArchivePlan, FatBinary, Objects, ZSTD_LEVEL};
pub use cached::CopyPolicy;
pub use invalidate::Invalidation;
pub use open::OpenFile;
pub use types::{Attr, DirEntry, DiskSnapshot, Error, NodeType, Origin, Result, Stats, StatsSnapshot, ViewConfig};
pub use xattr::{XATTR_ARCH, XATTR_ORIGIN, XATTR_PREFIX, XATTR_SOURCE, XATTR_STATS, XATTR_TARGETS};

use crate::data_cache::DiskCache;
use crate::formats::kpack::ArchiveName;
use crate::layout::Layout;
use crate::source::{self, FsStats, SourceId, SourceKind, SourceStat, SourceTree};

use cached::{Caches, CopyState};
use inodes::Inodes;
use listing::Listing;
use lookup::Analysis;
use open::{Content, Shared, Slots};
use plan_cache::PlanCache;

/// Inode number of the root directory.
pub const ROOT_INO: u64 = 1;
pub use crate::formats::kpack::KPACK_DIR;

#[derive(Debug, Clone)]
enum Node {
    Dir(SourceStat),
    /// `parent` is the binaries' directory; `merged` the source's own
    /// `.kpack` directory if it has one.
    KpackDir {
        parent: SourceStat,
        merged: Option<SourceStat>,
    },
    Symlink(SourceStat),
    /// A source file served unchanged.
    Unchanged(SourceStat),
    Transformed(SourceStat, Arc<FatBinary>),
    Archive(SourceStat, Arc<FatBinary>, Arc<ArchivePlan>),
    /// A compressed archive known from the disk cache alone (its archives
    /// not planned).
    CachedArchive {
        /// The binary's stat.
        binary: SourceStat,
        /// The binary's file name (the archive group).
        group: String,
        /// The binary's content identity (`Caches::content_id`).
        content: [u8; 16],
        /// The archive's length.
        len: u64,
    },
}

/// The source version an inode stands for (`None`: directories).
fn node_id(n: &Node) -> Option<SourceId> {
    match n {
        Node::Dir(_) | Node::KpackDir { .. } => None,
        Node::Symlink(st) | Node::Unchanged(st) | Node::Transformed(st, _) | Node::Archive(st, _, _) | Node::CachedArchive { binary: st, .. } => Some(st.id()),
    }
}

/// The view over one source tree for one selection.
///
/// Several views of one source (`mount --views`) share what does not
/// depend on the selection — the source, plans, probes, caches, counters —
/// and each keeps its own inode table and listings.
pub struct View {
    cfg: ViewConfig,
    tree: Arc<SourceTree>,
    inodes: Inodes,
    /// Plans, current versions and probe answers, shared by sibling views.
    plans: Arc<PlanCache<Analysis, crate::formats::host::Probe>>,
    listings: DashMap<PathBuf, Arc<Listing>>,
    /// Counts source-change events; a listing built while one arrived is
    /// not kept (see [`View::listing`]).
    listing_epoch: AtomicU64,
    caches: Arc<Caches>,
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

impl View {
    pub fn new(cfg: ViewConfig) -> Result<View> {
        let tree = SourceTree::open(&cfg.source)?;
        if tree.stat(Path::new(""))?.kind != SourceKind::Dir {
            return Err(Error::NotDir);
        }
        Ok(View {
            caches: Arc::new(Caches::new(cfg.cache_bytes)),
            slots: Arc::new(Slots::default()),
            cfg,
            tree: Arc::new(tree),
            inodes: Inodes::new(0),
            plans: Arc::new(PlanCache::new(lookup::MAX_PLANS)),
            listings: DashMap::new(),
            listing_epoch: AtomicU64::new(0),
            stats: Arc::new(Stats::default()),
        })
    }

    /// Another view of the same source for `cfg`'s selection (its source,
    /// cache sizes and cache directory are this view's), sharing this
    /// view's plans and caches. `index` (below 127) sets the high byte of
    /// its inode numbers, so several views' numbers never meet.
    pub fn sibling(&self, cfg: ViewConfig, index: u8) -> View {
        let prefix = (u64::from(index.min(126)) + 1) << 56;
        View {
            cfg: ViewConfig { source: self.cfg.source.clone(), cache_bytes: self.cfg.cache_bytes, ..cfg },
            tree: self.tree.clone(),
            inodes: Inodes::new(prefix),
            plans: self.plans.clone(),
            listings: DashMap::new(),
            listing_epoch: AtomicU64::new(0),
            caches: self.caches.clone(),
            slots: self.slots.clone(),
            stats: self.stats.clone(),
        }
    }

    /// This view's root inode ([`ROOT_INO`] unless it is a sibling).
    pub fn root_ino(&self) -> u64 {
        self.inodes.root()
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
            probes_run: s.probes_run.load(Ordering::Relaxed),
            copies_used: s.copies_used.load(Ordering::Relaxed),
            copies_queued: s.copies_queued.load(Ordering::Relaxed),
            cache_hits: c.hits.load(Ordering::Relaxed),
            cache_misses: c.misses.load(Ordering::Relaxed),
            cache_evictions: c.evictions.load(Ordering::Relaxed),
            cache_bytes: c.bytes.load(Ordering::Relaxed),
            cache_limit: self.caches.memory.limit(),
            inodes: self.inodes.len() as u64,
            plans: self.plans.plans_len() as u64,
            probes: self.plans.probes_len() as u64,
            retired_tags: self.caches.memory.retired_len() as u64,
            disk: self.caches.disk.as_ref().map(|d| DiskSnapshot {
                hits: d.stats.hits.load(Ordering::Relaxed),
                misses: d.stats.misses.load(Ordering::Relaxed),
                evictions: d.stats.evictions.load(Ordering::Relaxed),
                damaged: d.stats.damaged.load(Ordering::Relaxed),
                checked: d.stats.checked.load(Ordering::Relaxed),
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

    fn resolve(&self, vpath: &Path) -> Result<Node> {
        let Some(name) = vpath.file_name() else {
            return Ok(Node::Dir(self.tree.stat(vpath)?));
        };
        let parent = vpath.parent().unwrap_or(Path::new(""));
        let name_s = name.to_string_lossy();
        if parent.file_name() == Some(OsStr::new(KPACK_DIR)) && name_s.ends_with(".kpack") {
            let bin_dir = parent.parent().unwrap_or(Path::new(""));
            if let Some(n) = self.synth_archive(bin_dir, &name_s, true)? {
                return Ok(n);
            }
        }
        match self.tree.stat(vpath) {
            Ok(st) => match st.kind {
                SourceKind::Dir if name == KPACK_DIR && self.has_fat(parent) => Ok(Node::KpackDir { parent: self.tree.stat(parent)?, merged: Some(st) }),
                SourceKind::Dir if self.hidden_dir(vpath) => Err(Error::NotFound),
                SourceKind::Dir => Ok(Node::Dir(st)),
                SourceKind::Symlink => Ok(Node::Symlink(st)),
                SourceKind::File => self.file_node(vpath, st),
                SourceKind::Special => Err(Error::NotFound),
            },
            Err(e) if e.not_found() && name == KPACK_DIR && self.has_fat(parent) => Ok(Node::KpackDir { parent: self.tree.stat(parent)?, merged: None }),
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
            Node::Unchanged(st) => from(st, NodeType::File, Origin::Unchanged, st.size),
            Node::Transformed(st, fb) => {
                let mut a = from(st, NodeType::File, Origin::Transformed, fb.plan.layout.len());
                a.nlink = 1;
                a
            }
            Node::CachedArchive { binary: st, len, .. } => {
                let mut a = from(st, NodeType::File, Origin::Archive, *len);
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
        Ok(self.attr(self.inodes.register(&child, node_id(&node)), &node))
    }

    /// The kernel dropped `n` references to `ino` (FUSE `forget`): once it
    /// holds none, the inode leaves the table. Every successful
    /// [`View::lookup`] counts one reference.
    pub fn forget(&self, ino: u64, n: u64) {
        self.inodes.forget(ino, n);
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
        self.listing_epoch.fetch_add(1, Ordering::SeqCst);
        self.listings.remove(dir);
        match name {
            Some(n) => {
                if let Some(id) = self.plans.forget(&dir.join(n)) {
                    // Its decoded objects go too; if this version is still
                    // the file's, its next plan revives the tag.
                    self.caches.memory.retire(open::version_tag(&id));
                }
            }
            None => {
                for id in self.plans.forget_dir(dir) {
                    self.caches.memory.retire(open::version_tag(&id));
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

    fn open_node(&self, rel: &Path, mut node: Node, ino: u64) -> Result<OpenFile> {
        self.stats.opens.fetch_add(1, Ordering::Relaxed);
        let attr = self.attr(ino, &node);
        let mut cached = None;
        if let Node::CachedArchive { binary: st, content, len, .. } = &node {
            let key = Caches::key(self.tree.root(), rel, &st.id(), content, &self.cfg, "archive");
            match self.caches.cached_archive(&key) {
                Some(d) if d.len() == *len => cached = Some(d),
                _ => {
                    // Evicted or found damaged since the lookup: plan the
                    // archive from the binary and rebuild it (same length).
                    let dir = rel.parent().and_then(Path::parent).unwrap_or(Path::new(""));
                    let name = rel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                    node = self.synth_archive(dir, &name, false)?.ok_or_else(|| Error::Changed(rel.display().to_string()))?;
                }
            }
        }
        // The binary's plan, for the content identity in cache keys.
        let mut plan_of = None;
        let (bin_rel, content, want): (PathBuf, Content, SourceId) = match node {
            Node::Dir(_) | Node::KpackDir { .. } => return Err(Error::IsDir),
            Node::Symlink(_) => return Err(Error::NotFound),
            Node::Unchanged(st) => (rel.to_path_buf(), Content::Pass(Layout::passthrough(st.size)), st.id()),
            Node::Transformed(st, fb) => {
                plan_of = Some(fb.clone());
                (rel.to_path_buf(), Content::Binary(fb), st.id())
            }
            Node::Archive(st, fb, ap) => {
                let dir = rel.parent().and_then(Path::parent).unwrap_or(Path::new(""));
                let bin = dir.join(&fb.group);
                plan_of = Some(fb);
                (bin, Content::Archive(ap), st.id())
            }
            Node::CachedArchive { binary: st, group, .. } => {
                let dir = rel.parent().and_then(Path::parent).unwrap_or(Path::new(""));
                let d = cached.ok_or_else(|| Error::Changed(rel.display().to_string()))?;
                (dir.join(group), Content::Compressed(d), st.id())
            }
        };
        let (file, fst) = self.tree.open_file(&bin_rel)?;
        if fst.id() != want {
            // Changed between planning and opening.
            return Err(Error::Changed(bin_rel.display().to_string()));
        }
        let shared = Shared { slots: self.slots.clone(), memory: self.caches.memory.clone(), stats: self.stats.clone() };
        let content = match content {
            Content::Archive(ap) if ap.compressed => {
                let fb = plan_of.as_ref().ok_or_else(|| Error::Changed(rel.display().to_string()))?;
                let c = self.caches.content_id(fb, &|| self.source_of(&bin_rel, &fst))?;
                let key = Caches::key(self.tree.root(), rel, &fst.id(), &c, &self.cfg, "archive");
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
        if let (Some(decodes), Some(fb)) = (decodes, &plan_of) {
            let id = fst.id();
            let key = |src: &std::fs::File| self.caches.copy_key(fb, &id, decodes, src, |pin| Caches::key(self.tree.root(), rel, &id, pin, &self.cfg, "copy"));
            // The copy is written from a second handle, in the background.
            match self.caches.attach_copy(&mut of, &key, decodes, &|| self.source_of(&bin_rel, &fst).ok()) {
                CopyState::Used => self.stats.copies_used.fetch_add(1, Ordering::Relaxed),
                CopyState::Queued => self.stats.copies_queued.fetch_add(1, Ordering::Relaxed),
                CopyState::Neither => 0,
            };
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
        let caches = Arc::get_mut(&mut self.caches)
            .ok_or_else(|| Error::Cache(crate::data_cache::CacheError::Unavailable("a cache directory must be set before views share the caches".into())))?;
        caches.with_disk(disk, policy)?;
        Ok(self)
    }

    pub fn statfs(&self) -> Result<FsStats> {
        Ok(self.tree.statfs()?)
    }
}
