//! What a mount serves: one view at the mount's root, or several
//! (`mount --views gfx90a:xnack-,gfx1100`), each in its own directory named
//! after its selection, sharing one engine (plans, code-object cache, disk
//! cache) — so a node serving several GPU kinds runs one daemon.
//!
//! Namespace' inode numbers carry their view in the high byte (see
//! [`View::sibling`]), so routing is a shift and every number the kernel
//! sees is unique; only the top directory (inode 1) is this module's own.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::source::FsStats;
use crate::view::{
    Attr, DirEntry, Error, Invalidation, NodeType, OpenFile, Origin, Result, StatsSnapshot, View, ViewConfig, ROOT_INO, XATTR_ARCH, XATTR_ORIGIN, XATTR_STATS,
};

/// Joins the targets of one view in `--views` and `-o view=`
/// (`gfx90a:sramecc+:xnack-/gfx1030`). `/` occurs in no target ID, so it is
/// never ambiguous; `+` joins too, where it cannot be a feature sign.
pub const VIEW_JOINER: char = '/';

/// The selections of `--views` arguments (and `-o view=` values): views are
/// separated by `,`, the targets of one view joined by [`VIEW_JOINER`] or
/// `+`; each selection is returned as `Selection::parse` reads it (targets
/// separated by `,`), in order, empty items dropped.
///
/// `+` is also the sign of a feature (`sramecc+`), and `--arch auto` names
/// GPUs with signs (`gfx90a:sramecc+:xnack-`). A `+` is a joiner only when
/// a target starts right after it (`gfx…`, or the runtime's
/// `amdgcn-amd-amdhsa--` form); otherwise it is a sign. A sign is always
/// followed by `:`, `,`, `/`, `+` or the end, and a target never starts
/// with those, so every well-formed list reads one way:
/// `gfx90a:xnack++gfx1030` is `gfx90a:xnack+` and `gfx1030`.
pub fn view_selections<S: AsRef<str>>(items: &[S]) -> Vec<String> {
    let mut out = Vec::new();
    for view in items.iter().flat_map(|i| i.as_ref().split(',')) {
        let mut targets = Vec::new();
        let mut start = 0;
        for (i, c) in view.char_indices() {
            let rest = &view[i + c.len_utf8()..];
            let joins = c == VIEW_JOINER || (c == '+' && (rest.starts_with("gfx") || rest.starts_with("amdgcn-")));
            if joins {
                targets.push(view[start..i].trim());
                start = i + c.len_utf8();
            }
        }
        targets.push(view[start..].trim());
        let targets: Vec<&str> = targets.into_iter().filter(|t| !t.is_empty()).collect();
        if !targets.is_empty() {
            out.push(targets.join(","));
        }
    }
    out
}

pub struct Namespace {
    /// Directory names and views; with `top`, the mount's root lists them.
    views: Vec<(OsString, Arc<View>)>,
    top: bool,
}

impl Namespace {
    /// One view at the mount's root.
    pub fn single(view: View) -> Namespace {
        Namespace { views: vec![(OsString::new(), Arc::new(view))], top: false }
    }

    /// `first` and views for the other configurations, each under a
    /// directory named after its selection (`gfx90a:xnack-/…`).
    pub fn several(first: View, others: Vec<ViewConfig>) -> Namespace {
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
        Namespace { views, top: true }
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

    /// What the kernel must forget after a change of `dir/name` in the
    /// source (see [`View::invalidate`]): every view's, as inode numbers
    /// are unique across views.
    pub fn invalidate(&self, dir: &Path, name: Option<&OsStr>) -> Vec<Invalidation> {
        self.views().flat_map(|v| v.invalidate(dir, name)).collect()
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
                XATTR_STATS => Some(self.stats().to_string().into_bytes()),
                XATTR_ARCH => Some(self.selections().into_bytes()),
                XATTR_ORIGIN => Some(Origin::Dir.to_string().into_bytes()),
                other => self.first().xattr(self.first().root_ino(), other)?,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::view_selections;
    use crate::formats::target::{Selection, TargetId};
    use crate::machine::{machine_targets, RuntimeEnv};

    fn sels(args: &[&str]) -> Vec<String> {
        view_selections(args)
    }

    #[test]
    fn plus_is_a_joiner_only_before_a_target() {
        assert_eq!(sels(&["gfx90a:sramecc+:xnack-"]), ["gfx90a:sramecc+:xnack-"]);
        assert_eq!(sels(&["gfx90a:xnack-,gfx1030,gfx90a+gfx1030"]), ["gfx90a:xnack-", "gfx1030", "gfx90a,gfx1030"]);
        assert_eq!(sels(&["gfx90a:sramecc+:xnack++gfx1030"]), ["gfx90a:sramecc+:xnack+,gfx1030"]);
        assert_eq!(sels(&["gfx90a:xnack+/gfx1030", "gfx942:sramecc+"]), ["gfx90a:xnack+,gfx1030", "gfx942:sramecc+"]);
        assert_eq!(sels(&["amdgcn-amd-amdhsa--gfx90a:xnack++amdgcn-amd-amdhsa--gfx942"]), ["amdgcn-amd-amdhsa--gfx90a:xnack+,amdgcn-amd-amdhsa--gfx942"]);
        assert_eq!(sels(&[" gfx1100 / gfx1030 ,, ", ""]), ["gfx1100,gfx1030"]);
        // A sign with no joiner after it stays one (malformed) target, so
        // the usual target error names it.
        assert_eq!(sels(&["gfx90a:xnack+gfx1030"]), ["gfx90a:xnack,gfx1030"]);
        assert!(Selection::parse(&sels(&["gfx90a:xnack+gfx1030"])[0]).is_err());
    }

    /// Every name `--arch auto` gives on the KFD fixtures works as a view on
    /// its own and joined to the others by `/` or by `+`.
    #[test]
    fn names_auto_produces_are_views() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/kfd");
        let mut names: Vec<TargetId> = Vec::new();
        for f in ["mi210", "mi300x", "rx7900xtx", "strix-halo", "mixed"] {
            for t in machine_targets(&fixtures.join(f), &RuntimeEnv::default()).unwrap() {
                if !names.contains(&t) {
                    names.push(t);
                }
            }
        }
        for x in ["gfx90a:sramecc+:xnack+", "gfx942:sramecc-:xnack+"] {
            names.push(TargetId::parse(x).unwrap());
        }
        assert!(names.iter().any(|t| t.to_string() == "gfx90a:sramecc+:xnack-"), "{names:?}");
        let text: Vec<String> = names.iter().map(ToString::to_string).collect();
        let got = view_selections(&[text.join(",")]);
        let parsed: Vec<TargetId> = got.iter().map(|s| TargetId::parse(s).unwrap()).collect();
        assert_eq!(parsed, names);
        for joiner in ["/", "+"] {
            let got = view_selections(&[text.join(joiner)]);
            assert_eq!(got.len(), 1, "{joiner}: {got:?}");
            assert_eq!(Selection::parse(&got[0]).unwrap().targets, names, "{joiner}");
        }
    }
}
