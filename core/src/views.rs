//! What a mount serves: one view at the mount's root, or several
//! (`mount --views gfx90a:xnack-,gfx1100`), each in its own directory named
//! after its selection, sharing one engine (plans, code-object cache, disk
//! cache) — so a node serving several GPU kinds runs one daemon.
//!
//! Views' inode numbers carry their view in the high byte (see
//! [`View::sibling`]), so routing is a shift and every number the kernel
//! sees is unique; only the top directory (inode 1) is this module's own.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::source::FsStats;
use crate::view::{Attr, DirEntry, Error, NodeType, OpenFile, Origin, Result, StatsSnapshot, View, ViewConfig, ROOT_INO};

pub struct Views {
    /// Directory names and views; with `top`, the mount's root lists them.
    views: Vec<(OsString, Arc<View>)>,
    top: bool,
}

impl Views {
    /// One view at the mount's root.
    pub fn single(view: View) -> Views {
        Views { views: vec![(OsString::new(), Arc::new(view))], top: false }
    }

    /// `first` and views for the other configurations, each under a
    /// directory named after its selection (`gfx90a:xnack-/…`).
    pub fn several(first: View, others: Vec<ViewConfig>) -> Views {
        let mut views = Vec::with_capacity(others.len() + 1);
        // The first view is renumbered too: every view lives below the top.
        let first_cfg = first.config().clone();
        let mut all = vec![first.sibling(first_cfg, 0)];
        for (i, cfg) in others.into_iter().enumerate() {
            all.push(first.sibling(cfg, (i + 1) as u8));
        }
        for v in all {
            views.push((OsString::from(v.config().selection.to_string()), Arc::new(v)));
        }
        Views { views, top: true }
    }

    pub fn views(&self) -> impl Iterator<Item = &Arc<View>> {
        self.views.iter().map(|(_, v)| v)
    }

    fn first(&self) -> &View {
        &self.views[0].1
    }

    /// The view owning inode `ino` (`None`: the top directory).
    fn route(&self, ino: u64) -> Result<Option<&View>> {
        if !self.top {
            return Ok(Some(self.first()));
        }
        if ino == ROOT_INO {
            return Ok(None);
        }
        let idx = (ino >> 56) as usize;
        match idx.checked_sub(1).and_then(|i| self.views.get(i)) {
            Some((_, v)) => Ok(Some(v)),
            None => Err(Error::StaleInode(ino)),
        }
    }

    /// The top directory: the source root's attributes, as a directory of
    /// the views.
    fn top_attr(&self) -> Result<Attr> {
        let mut a = self.first().getattr(self.first().root_ino())?;
        a.ino = ROOT_INO;
        a.nlink = 2 + self.views.len() as u64;
        Ok(a)
    }

    pub fn lookup(&self, parent: u64, name: &OsStr) -> Result<Attr> {
        match self.route(parent)? {
            Some(v) => v.lookup(parent, name),
            None => match self.views.iter().find(|(n, _)| n == name) {
                Some((_, v)) => v.getattr(v.root_ino()),
                None => Err(Error::NotFound),
            },
        }
    }

    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        match self.route(ino)? {
            Some(v) => v.getattr(ino),
            None => self.top_attr(),
        }
    }

    pub fn readdir(&self, ino: u64) -> Result<Vec<DirEntry>> {
        match self.route(ino)? {
            Some(v) => v.readdir(ino),
            None => Ok(self.views.iter().map(|(n, v)| DirEntry { name: n.clone(), ino: v.root_ino(), kind: NodeType::Dir }).collect()),
        }
    }

    /// The parent directory's attributes (for `..` in listings).
    pub fn parent_attr(&self, ino: u64) -> Result<Attr> {
        let Some(v) = self.route(ino)? else { return self.top_attr() };
        if self.top && ino == v.root_ino() {
            return self.top_attr();
        }
        match v.path_of(ino)?.parent() {
            Some(p) => v.getattr_path(p),
            None => v.getattr(ino),
        }
    }

    pub fn open(&self, ino: u64) -> Result<OpenFile> {
        match self.route(ino)? {
            Some(v) => v.open(ino),
            None => Err(Error::IsDir),
        }
    }

    pub fn readlink(&self, ino: u64) -> Result<OsString> {
        match self.route(ino)? {
            Some(v) => v.readlink(ino),
            None => Err(Error::NotSymlink),
        }
    }

    pub fn forget(&self, ino: u64, n: u64) {
        if let Ok(Some(v)) = self.route(ino) {
            v.forget(ino, n);
        }
    }

    /// Source path of an inode of a view (the top directory: the root).
    pub fn path_of(&self, ino: u64) -> Result<PathBuf> {
        match self.route(ino)? {
            Some(v) => v.path_of(ino),
            None => Ok(PathBuf::new()),
        }
    }

    pub fn statfs(&self) -> Result<FsStats> {
        self.first().statfs()
    }

    /// Counters of the shared engine, with the inode tables of every view.
    pub fn stats(&self) -> StatsSnapshot {
        let mut s = self.first().stats();
        s.inodes = self.views().map(|v| v.stats().inodes).sum();
        s
    }

    /// The selections served, space-separated (a selection may hold commas).
    pub fn selections(&self) -> String {
        self.views().map(|v| v.config().selection.to_string()).collect::<Vec<_>>().join(" ")
    }

    pub fn source(&self) -> &Path {
        &self.first().config().source
    }

    pub fn xattr_names(&self, ino: u64) -> Result<Vec<&'static str>> {
        match self.route(ino)? {
            Some(v) => v.xattr_names(ino),
            None => self.first().xattr_names(self.first().root_ino()),
        }
    }

    /// Operator attributes; the top directory answers for the whole mount.
    pub fn xattr(&self, ino: u64, name: &str) -> Result<Option<Vec<u8>>> {
        match self.route(ino)? {
            Some(v) => v.xattr(ino, name),
            None => Ok(match name {
                "user.kpackfs.stats" => Some(self.stats().to_string().into_bytes()),
                "user.kpackfs.arch" => Some(self.selections().into_bytes()),
                "user.kpackfs.origin" => Some(Origin::Dir.to_string().into_bytes()),
                other => self.first().xattr(self.first().root_ino(), other)?,
            }),
        }
    }
}
