//! Windows paths → view nodes: case-insensitive lookups and symlinks.
//!
//! **Case.** The volume is case-insensitive and case-preserving, like NTFS:
//! each component is matched against the directory's listing, the exact
//! name first, else the (first, in sorted order) name equal after case
//! folding, and the view is then asked for the name *as the source spells
//! it*. So `\LIB\LIBFOO.DLL` and `\lib\libfoo.dll` are the same node, and a
//! view path (which decides, e.g., a transformed binary's `kernel_name` and
//! which database files are hidden) is never built from a mis-cased name,
//! even over a case-insensitive source. With `--case-sensitive`, names must
//! match exactly (still checked against the listing, so a case-insensitive
//! source cannot answer a mis-cased name). Listings are cached per directory (LRU), keyed by the
//! directory's attributes, so a changed directory is listed again.
//!
//! **Symlinks.** Dokan has no symlink callbacks, and Windows programs
//! cannot follow Unix link text, so a symlink of the view is presented as
//! what it resolves to *inside the view*: a link to a file is that file
//! (same bytes, attributes, file index), a link to a directory is that
//! directory. Link text is resolved like the kernel does (relative to the
//! link's directory, `..` physically, up to 40 links). A link that is
//! dangling, absolute (it points outside the view), climbs above the
//! root, or points to a directory that is already on the way to it (a loop
//! such as `lib/self -> ..`, which would make the tree infinite for every
//! Windows tool that walks it) is hidden: not listed, and "not found".

use std::collections::HashMap;
use std::ffi::OsStr;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lru::LruCache;

use kpackfs_core::source::Time;
use kpackfs_core::view::{Attr, NodeType, Origin, View, ROOT_INO};

use crate::names;
use crate::ntstatus::*;

/// Links followed for one name at most (Linux's limit).
pub const MAX_LINK_HOPS: u32 = 40;

/// Directories whose case-folded listings are kept.
const NAME_CACHE_DIRS: usize = 4096;

/// A node of the view reached without symlinks: its root-relative path
/// (as the source spells it) and attributes.
#[derive(Debug, Clone)]
pub struct Node {
    pub path: PathBuf,
    pub attr: Attr,
}

impl Node {
    pub fn is_dir(&self) -> bool {
        self.attr.kind == NodeType::Dir
    }
}

/// A resolved Windows path.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub node: Node,
    /// View paths of the directories on the way, root first, including the
    /// node itself: what a symlink below it must not point back to.
    pub chain: Vec<PathBuf>,
}

/// A directory's names, by folded case.
struct Names {
    key: (Time, Time, u64, u64),
    built: Instant,
    by_fold: HashMap<String, Vec<String>>,
}

/// A name missing from a cached listing older than this lists the
/// directory again (for sources whose directory times lag, such as FAT).
const RELIST_AFTER: Duration = Duration::from_secs(1);

/// Resolves Windows paths against a view.
pub struct Walker {
    view: Arc<View>,
    case_sensitive: bool,
    names: Mutex<LruCache<u64, Arc<Names>>>,
}

fn not_found() -> NtStatus {
    STATUS_OBJECT_NAME_NOT_FOUND
}

fn err(e: kpackfs_core::view::Error) -> NtStatus {
    from_view_error(&e)
}

impl Walker {
    pub fn new(view: Arc<View>, case_sensitive: bool) -> Walker {
        let cap = NonZeroUsize::new(NAME_CACHE_DIRS).unwrap_or(NonZeroUsize::MIN);
        Walker { view, case_sensitive, names: Mutex::new(LruCache::new(cap)) }
    }

    pub fn view(&self) -> &Arc<View> {
        &self.view
    }

    pub fn case_sensitive(&self) -> bool {
        self.case_sensitive
    }

    pub fn root(&self) -> Result<Node, NtStatus> {
        Ok(Node { path: PathBuf::new(), attr: self.view.getattr(ROOT_INO).map_err(err)? })
    }

    /// The node at a view path (no symlinks on the way, by construction).
    fn node_at(&self, path: &Path) -> Result<Node, NtStatus> {
        if path.as_os_str().is_empty() {
            return self.root();
        }
        Ok(Node { path: path.to_path_buf(), attr: self.view.getattr_path(path).map_err(err)? })
    }

    fn names_of(&self, dir: &Node, fresh: bool) -> Result<Arc<Names>, NtStatus> {
        let a = &dir.attr;
        let key = (a.mtime, a.ctime, a.size, a.nlink);
        // A `.kpack` directory's listing follows the binaries beside it,
        // not its own times: never cached.
        let cacheable = a.origin != Origin::KpackDir;
        if cacheable && !fresh {
            let mut cache = self.names.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(n) = cache.get(&a.ino) {
                if n.key == key {
                    return Ok(n.clone());
                }
            }
        }
        let mut by_fold: HashMap<String, Vec<String>> = HashMap::new();
        for e in self.view.readdir(a.ino).map_err(err)? {
            if let Some(name) = names::windows_visible(&e.name) {
                by_fold.entry(names::fold(name)).or_default().push(name.to_string());
            }
        }
        let n = Arc::new(Names { key, built: Instant::now(), by_fold });
        if cacheable {
            self.names.lock().unwrap_or_else(|p| p.into_inner()).put(a.ino, n.clone());
        }
        Ok(n)
    }

    /// The source's spelling of `name` in directory `dir`.
    /// Checked against the listing even when matching exactly: a
    /// case-insensitive source (NTFS) would otherwise answer a mis-cased
    /// name itself.
    pub fn canonical_name(&self, dir: &Node, name: &str) -> Result<String, NtStatus> {
        let mut names = self.names_of(dir, false)?;
        let folded = names::fold(name);
        if !names.by_fold.contains_key(&folded) && names.built.elapsed() > RELIST_AFTER {
            names = self.names_of(dir, true)?;
        }
        match names.by_fold.get(&folded) {
            Some(c) if c.iter().any(|n| n == name) => Ok(name.to_string()),
            Some(c) if !self.case_sensitive => c.first().cloned().ok_or_else(not_found),
            _ => Err(not_found()),
        }
    }

    /// Entry `name` of directory `dir`, symlinks resolved; `chain` as in
    /// [`Resolved::chain`] for `dir`.
    pub fn child(&self, dir: &Node, name: &str, chain: &[PathBuf]) -> Result<Node, NtStatus> {
        if !dir.is_dir() {
            return Err(STATUS_OBJECT_PATH_NOT_FOUND);
        }
        let canon = self.canonical_name(dir, name)?;
        let attr = self.view.lookup(dir.attr.ino, OsStr::new(&canon)).map_err(err)?;
        self.resolve_link(Node { path: dir.path.join(&canon), attr }, chain)
    }

    /// Follows `node` if it is a symlink, refusing loops (see the module
    /// docs).
    fn resolve_link(&self, node: Node, chain: &[PathBuf]) -> Result<Node, NtStatus> {
        if node.attr.kind != NodeType::Symlink {
            return Ok(node);
        }
        let mut hops = 0;
        let t = self.follow(&node, &mut hops)?;
        if t.is_dir() && chain.iter().any(|p| p.starts_with(&t.path)) {
            log::debug!("{}: hidden: directory link loops back to {}", node.path.display(), t.path.display());
            return Err(not_found());
        }
        Ok(t)
    }

    /// What symlink `link` resolves to inside the view.
    fn follow(&self, link: &Node, hops: &mut u32) -> Result<Node, NtStatus> {
        *hops += 1;
        if *hops > MAX_LINK_HOPS {
            return Err(not_found());
        }
        let text = self.view.readlink(link.attr.ino).map_err(err)?;
        let text = text.to_str().ok_or_else(not_found)?;
        let absolute = text.starts_with(['/', '\\']) || text.as_bytes().get(1) == Some(&b':');
        if text.is_empty() || absolute {
            return Err(not_found());
        }
        let mut cur = self.node_at(link.path.parent().unwrap_or(Path::new("")))?;
        for comp in text.split(['/', '\\']) {
            match comp {
                "" | "." => {}
                ".." => {
                    let up = cur.path.parent().ok_or_else(not_found)?.to_path_buf();
                    cur = self.node_at(&up)?;
                }
                name => {
                    if !cur.is_dir() {
                        return Err(not_found());
                    }
                    let canon = self.canonical_name(&cur, name)?;
                    let attr = self.view.lookup(cur.attr.ino, OsStr::new(&canon)).map_err(err)?;
                    let next = Node { path: cur.path.join(&canon), attr };
                    cur = if next.attr.kind == NodeType::Symlink { self.follow(&next, hops)? } else { next };
                }
            }
        }
        Ok(cur)
    }

    /// Resolves the components of a Windows path from the root. A missing
    /// last component is `STATUS_OBJECT_NAME_NOT_FOUND`, a missing (or
    /// non-directory) intermediate one `STATUS_OBJECT_PATH_NOT_FOUND`.
    pub fn resolve(&self, components: &[String]) -> Result<Resolved, NtStatus> {
        let mut node = self.root()?;
        let mut chain = vec![PathBuf::new()];
        for (i, c) in components.iter().enumerate() {
            let last = i + 1 == components.len();
            match self.child(&node, c, &chain) {
                Ok(n) => {
                    chain.push(n.path.clone());
                    node = n;
                }
                Err(s) if last => return Err(s),
                Err(s) => return Err(as_path_error(s)),
            }
        }
        Ok(Resolved { node, chain })
    }

    /// The entries of directory `dir` as Windows sees them: names Windows
    /// can show, symlinks resolved (hidden ones left out), in the view's
    /// order.
    pub fn list(&self, dir: &Resolved) -> Result<Vec<(String, Node)>, NtStatus> {
        let d = &dir.node;
        let mut out = Vec::new();
        for e in self.view.readdir(d.attr.ino).map_err(err)? {
            let Some(name) = names::windows_visible(&e.name) else {
                log::debug!("{}: not shown: the name is not valid on Windows", d.path.join(&e.name).display());
                continue;
            };
            // Vanished since the listing, or a hidden link: left out.
            let Ok(attr) = self.view.lookup(d.attr.ino, &e.name) else { continue };
            let Ok(node) = self.resolve_link(Node { path: d.path.join(name), attr }, &dir.chain) else { continue };
            out.push((name.to_string(), node));
        }
        Ok(out)
    }

    /// One entry of `dir` by (case-insensitive) name, for a
    /// `FindFirstFile` without wildcards: the source's spelling and node.
    pub fn find(&self, dir: &Resolved, name: &str) -> Result<(String, Node), NtStatus> {
        let canon = self.canonical_name(&dir.node, name)?;
        names::windows_visible(OsStr::new(&canon)).ok_or_else(not_found)?;
        let node = self.child(&dir.node, &canon, &dir.chain)?;
        Ok((canon, node))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kpackfs_core::formats::target::Selection;
    use kpackfs_core::view::{ArchiveNaming, ViewConfig};

    /// A throwaway source tree.
    struct Tree(PathBuf);

    impl Tree {
        fn new(tag: &str) -> Tree {
            let p = std::env::temp_dir().join(format!("kpackfs-windows-walk-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Tree(p)
        }
        fn file(&self, rel: &str, data: &[u8]) -> &Self {
            let p = self.0.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, data).unwrap();
            self
        }
        fn dir(&self, rel: &str) -> &Self {
            std::fs::create_dir_all(self.0.join(rel)).unwrap();
            self
        }
        fn walker(&self, case_sensitive: bool) -> Walker {
            let cfg = ViewConfig {
                source: self.0.clone(),
                selection: Selection::parse("gfx90a").unwrap(),
                cache_bytes: 1 << 20,
                naming: ArchiveNaming::Processor,
                compression: Default::default(),
                db_rules: Default::default(),
            };
            Walker::new(Arc::new(View::new(cfg).unwrap()), case_sensitive)
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn comps(p: &str) -> Vec<String> {
        crate::names::parse(p).unwrap().components
    }

    #[test]
    fn resolves_paths_and_reports_which_part_is_missing() {
        let t = Tree::new("paths");
        t.file("lib/libfoo.so.1", b"hello").file("share/doc/readme.txt", b"r").dir("empty");
        let w = t.walker(false);
        let r = w.resolve(&comps("\\lib\\libfoo.so.1")).unwrap();
        assert_eq!(r.node.path, Path::new("lib/libfoo.so.1"));
        assert_eq!((r.node.attr.kind, r.node.attr.size), (NodeType::File, 5));
        assert_eq!(r.chain, [PathBuf::new(), PathBuf::from("lib"), PathBuf::from("lib/libfoo.so.1")]);
        let root = w.resolve(&[]).unwrap();
        assert_eq!((root.node.attr.ino, root.node.is_dir()), (ROOT_INO, true));
        assert_eq!(w.resolve(&comps("\\lib\\nope")).unwrap_err(), STATUS_OBJECT_NAME_NOT_FOUND);
        assert_eq!(w.resolve(&comps("\\nope\\x")).unwrap_err(), STATUS_OBJECT_PATH_NOT_FOUND);
        assert_eq!(w.resolve(&comps("\\lib\\libfoo.so.1\\x")).unwrap_err(), STATUS_OBJECT_PATH_NOT_FOUND);
        assert_eq!(w.resolve(&comps("\\lib\\libfoo.so.1\\x\\y")).unwrap_err(), STATUS_OBJECT_PATH_NOT_FOUND);
        assert!(w.resolve(&comps("\\empty")).unwrap().node.is_dir());
    }

    #[test]
    fn case_insensitive_lookups_use_the_sources_spelling() {
        let t = Tree::new("case");
        t.file("Lib/LibFoo.dll", b"x");
        let w = t.walker(false);
        let a = w.resolve(&comps("\\LIB\\libfoo.DLL")).unwrap();
        let b = w.resolve(&comps("\\Lib\\LibFoo.dll")).unwrap();
        assert_eq!(a.node.path, Path::new("Lib/LibFoo.dll"));
        assert_eq!(a.node.attr.ino, b.node.attr.ino);
        let s = t.walker(true);
        assert!(s.resolve(&comps("\\Lib\\LibFoo.dll")).is_ok());
        assert!(s.resolve(&comps("\\LIB\\libfoo.dll")).is_err());
        assert!(s.case_sensitive() && !w.case_sensitive());
    }

    #[test]
    fn new_entries_are_found_after_the_directory_changes() {
        let t = Tree::new("fresh");
        t.file("d/a", b"1");
        let w = t.walker(false);
        assert!(w.resolve(&comps("\\d\\A")).is_ok());
        assert_eq!(w.resolve(&comps("\\d\\B")).unwrap_err(), STATUS_OBJECT_NAME_NOT_FOUND);
        // Directory times have a coarse granularity on some file systems:
        // make sure the change is visible in the directory's attributes.
        std::thread::sleep(std::time::Duration::from_millis(20));
        t.file("d/b", b"2");
        t.file("d/c", b"3");
        assert!(w.resolve(&comps("\\d\\B")).is_ok());
    }

    #[test]
    fn listings_leave_out_names_windows_cannot_show() {
        let t = Tree::new("list");
        t.file("a.txt", b"1").file("B.txt", b"22").dir("sub");
        #[cfg(unix)]
        t.file("x:y", b"3").file("q?", b"4");
        let w = t.walker(false);
        let root = w.resolve(&[]).unwrap();
        let l: Vec<(String, u64, bool)> = w.list(&root).unwrap().into_iter().map(|(n, node)| (n, node.attr.size, node.is_dir())).collect();
        let names: Vec<&str> = l.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(names, ["B.txt", "a.txt", "sub"]);
        assert_eq!(l[0].1, 2);
        assert!(l[2].2);
        let (name, node) = w.find(&root, "b.TXT").unwrap();
        assert_eq!((name.as_str(), node.attr.size), ("B.txt", 2));
        assert_eq!(w.find(&root, "zz").unwrap_err(), STATUS_OBJECT_NAME_NOT_FOUND);
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_resolve_inside_the_view_and_loops_are_hidden() {
        use std::os::unix::fs::symlink;
        let t = Tree::new("links");
        t.file("lib/libfoo.so.1.2", b"library").dir("share/x");
        symlink("libfoo.so.1.2", t.0.join("lib/libfoo.so.1")).unwrap();
        symlink("libfoo.so.1", t.0.join("lib/libfoo.so")).unwrap();
        symlink("lib", t.0.join("lib64")).unwrap();
        symlink("../lib/./libfoo.so", t.0.join("share/libfoo.so")).unwrap();
        symlink("..", t.0.join("lib/up")).unwrap();
        symlink(".", t.0.join("share/x/self")).unwrap();
        symlink("../../share", t.0.join("share/x/share")).unwrap();
        symlink("/etc/passwd", t.0.join("lib/abs")).unwrap();
        symlink("../../outside", t.0.join("lib/escape")).unwrap();
        symlink("missing", t.0.join("lib/dangling")).unwrap();
        symlink("loop2", t.0.join("lib/loop1")).unwrap();
        symlink("loop1", t.0.join("lib/loop2")).unwrap();
        symlink("libfoo.so.1.2/x", t.0.join("lib/through-a-file")).unwrap();
        let w = t.walker(false);

        let real = w.resolve(&comps("\\lib\\libfoo.so.1.2")).unwrap().node;
        for p in ["\\lib\\libfoo.so", "\\lib\\libfoo.so.1", "\\lib64\\libfoo.so", "\\share\\libfoo.so", "\\LIB64\\LIBFOO.SO"] {
            let n = w.resolve(&comps(p)).unwrap().node;
            assert_eq!((n.path.as_path(), n.attr.ino, n.attr.size), (real.path.as_path(), real.attr.ino, 7), "{p}");
        }
        // A directory link is the directory; its chain holds the target.
        let lib64 = w.resolve(&comps("\\lib64")).unwrap();
        assert_eq!((lib64.node.path.as_path(), lib64.node.is_dir()), (Path::new("lib"), true));
        assert_eq!(lib64.chain, [PathBuf::new(), PathBuf::from("lib")]);
        for p in
            ["\\lib\\up", "\\share\\x\\self", "\\share\\x\\share", "\\lib\\abs", "\\lib\\escape", "\\lib\\dangling", "\\lib\\loop1", "\\lib\\through-a-file"]
        {
            assert_eq!(w.resolve(&comps(p)).unwrap_err(), STATUS_OBJECT_NAME_NOT_FOUND, "{p}");
        }
        assert_eq!(w.resolve(&comps("\\lib\\up\\lib")).unwrap_err(), STATUS_OBJECT_PATH_NOT_FOUND);

        let lib = w.resolve(&comps("\\lib")).unwrap();
        let names: Vec<String> = w.list(&lib).unwrap().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["libfoo.so", "libfoo.so.1", "libfoo.so.1.2"]);
        let root = w.resolve(&[]).unwrap();
        let l = w.list(&root).unwrap();
        let lib64 = l.iter().find(|(n, _)| n == "lib64").unwrap();
        assert!(lib64.1.is_dir() && lib64.1.path == Path::new("lib"));
        let x = w.resolve(&comps("\\share\\x")).unwrap();
        assert!(w.list(&x).unwrap().is_empty());
    }

    #[cfg(unix)]
    #[test]
    fn mutually_recursive_directory_links_end() {
        use std::os::unix::fs::symlink;
        let t = Tree::new("mutual");
        t.dir("a").dir("b");
        symlink("../b", t.0.join("a/x")).unwrap();
        symlink("../a", t.0.join("b/y")).unwrap();
        let w = t.walker(false);
        assert_eq!(w.resolve(&comps("\\a\\x")).unwrap().node.path, Path::new("b"));
        assert_eq!(w.resolve(&comps("\\a\\x\\y")).unwrap_err(), STATUS_OBJECT_NAME_NOT_FOUND);
        let ax = w.resolve(&comps("\\a\\x")).unwrap();
        assert!(w.list(&ax).unwrap().is_empty(), "b/y leads back to a");
        // From b itself, y (→ a) is fine, and a/x (→ b) then loops.
        let by = w.resolve(&comps("\\b\\y")).unwrap();
        assert_eq!(by.node.path, Path::new("a"));
        assert!(w.list(&by).unwrap().is_empty());
    }

    /// The demo install's archive directory (processor naming): names
    /// without `:`, reachable case-insensitively.
    #[test]
    fn demo_install_archives_are_visible() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../test_assets/demo-install");
        let cfg = ViewConfig {
            source: src,
            selection: Selection::parse("gfx90a").unwrap(),
            cache_bytes: 1 << 20,
            naming: ArchiveNaming::Processor,
            compression: Default::default(),
            db_rules: Default::default(),
        };
        let w = Walker::new(Arc::new(View::new(cfg).unwrap()), false);
        let lib = w.resolve(&comps("\\lib")).unwrap();
        let kpack = w.resolve(&comps("\\LIB\\.KPACK")).unwrap();
        assert!(kpack.node.is_dir());
        let archives = w.list(&kpack).unwrap();
        assert!(!archives.is_empty());
        for (name, node) in &archives {
            assert!(name.ends_with("_gfx90a.kpack"), "{name}");
            assert_eq!(node.attr.kind, NodeType::File);
            let again = w.resolve(&comps(&format!("\\lib\\.kpack\\{}", name.to_uppercase()))).unwrap();
            assert_eq!(again.node.attr.ino, node.attr.ino);
        }
        assert!(w.list(&lib).unwrap().iter().any(|(n, _)| n == ".kpack"));
    }
}
