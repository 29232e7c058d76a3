//! Keeps the kernel's caches honest when the source changes under a live
//! mount. The view re-plans a changed file on its next lookup (plans are
//! keyed by source identity) and refuses to serve an open file whose source
//! changed; but with hour-long entry/attribute TTLs and cached pages the
//! kernel would not ask again. An inotify watch on every source directory
//! the kernel has seen turns each change into invalidations: the entry
//! (so the name is looked up afresh), the inode (attributes and cached
//! pages), the directory listing, and the `.kpack` archives planned from
//! the changed binary.
//!
//! inotify only reports local changes; sources on network filesystems
//! still converge when the TTL (`--ttl`) expires.

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::mem::MaybeUninit;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use fuser::{INodeNo, Notifier};
use rustix::fd::OwnedFd;
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};

use kpackfs_core::view::{View, KPACK_DIR};
use kpackfs_core::views::Views;

pub struct Watcher {
    fd: OwnedFd,
    root: PathBuf,
    /// Watch descriptor → directory (root-relative).
    dirs: Mutex<HashMap<i32, PathBuf>>,
    watched: Mutex<HashSet<PathBuf>>,
}

impl Watcher {
    pub fn new(root: &Path) -> std::io::Result<Arc<Watcher>> {
        let fd = inotify::init(CreateFlags::CLOEXEC)?;
        let w = Arc::new(Watcher { fd, root: root.to_path_buf(), dirs: Mutex::new(HashMap::new()), watched: Mutex::new(HashSet::new()) });
        w.watch_dir(Path::new(""));
        Ok(w)
    }

    /// Starts watching source directory `rel` (idempotent, best effort:
    /// running out of watches only costs freshness).
    pub fn watch_dir(&self, rel: &Path) {
        let mut watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        if !watched.insert(rel.to_path_buf()) {
            return;
        }
        let flags = WatchFlags::CREATE
            | WatchFlags::DELETE
            | WatchFlags::MOVED_FROM
            | WatchFlags::MOVED_TO
            | WatchFlags::MODIFY
            | WatchFlags::CLOSE_WRITE
            | WatchFlags::ATTRIB
            | WatchFlags::DELETE_SELF
            | WatchFlags::MOVE_SELF
            | WatchFlags::DONT_FOLLOW
            | WatchFlags::ONLYDIR
            | WatchFlags::EXCL_UNLINK;
        match inotify::add_watch(&self.fd, self.root.join(rel), flags) {
            Ok(wd) => {
                self.dirs.lock().unwrap_or_else(|p| p.into_inner()).insert(wd, rel.to_path_buf());
            }
            Err(e) => {
                // Not watched after all (a synthesized `.kpack` directory
                // absent from the source, no watches left): let a later
                // lookup try again.
                watched.remove(rel);
                log::debug!("cannot watch {}: {e}", rel.display());
            }
        }
    }

    /// Reads events forever, invalidating what they touch.
    pub fn run(self: Arc<Self>, views: Arc<Views>, notifier: Notifier) {
        let mut buf = vec![MaybeUninit::<u8>::uninit(); 64 * 1024];
        loop {
            let mut changed: Vec<(PathBuf, Option<OsString>)> = Vec::new();
            let mut overflow = false;
            let mut moved: Vec<i32> = Vec::new();
            {
                let mut reader = inotify::Reader::new(&self.fd, &mut buf);
                loop {
                    match reader.next() {
                        Ok(ev) => {
                            if ev.events().contains(ReadFlags::QUEUE_OVERFLOW) {
                                overflow = true;
                            }
                            if ev.events().contains(ReadFlags::IGNORED) {
                                let mut dirs = self.dirs.lock().unwrap_or_else(|p| p.into_inner());
                                if let Some(d) = dirs.remove(&ev.wd()) {
                                    self.watched.lock().unwrap_or_else(|p| p.into_inner()).remove(&d);
                                }
                                continue;
                            }
                            if ev.events().contains(ReadFlags::MOVE_SELF) {
                                // Its path is no longer this directory's:
                                // stop watching it under the old name (a
                                // lookup under the new one watches it again).
                                moved.push(ev.wd());
                            }
                            let dir = self.dirs.lock().unwrap_or_else(|p| p.into_inner()).get(&ev.wd()).cloned();
                            if let Some(dir) = dir {
                                let name = ev.file_name().map(|n| OsStr::from_bytes(n.to_bytes()).to_os_string()).filter(|n| !n.is_empty());
                                changed.push((dir, name));
                            }
                        }
                        Err(e) if e == rustix::io::Errno::INTR => continue,
                        Err(_) => break,
                    }
                    if reader.is_buffer_empty() {
                        break;
                    }
                }
            }
            for wd in moved {
                let dir = self.dirs.lock().unwrap_or_else(|p| p.into_inner()).remove(&wd);
                if let Some(d) = dir {
                    self.watched.lock().unwrap_or_else(|p| p.into_inner()).remove(&d);
                    changed.push((d, None));
                }
                let _ = inotify::remove_watch(&self.fd, wd);
            }
            if overflow {
                log::warn!("inotify queue overflowed: invalidating every watched directory");
                let all: Vec<PathBuf> = self.watched.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect();
                changed.extend(all.into_iter().map(|d| (d, None)));
            }
            changed.sort();
            changed.dedup();
            for (dir, name) in changed {
                // Inode numbers are unique across views: each view
                // invalidates its own.
                for view in views.views() {
                    invalidate(view, &notifier, &dir, name.as_deref());
                }
            }
        }
    }
}

/// Drops the view's and the kernel's idea of `dir/name` (or of the whole
/// directory). Names get new lookups; directories and inodes whose data may
/// have changed (see [`View::data_may_have_changed`]) lose their cached
/// data; other file versions only their attributes, so processes that map
/// an old version keep it.
fn invalidate(view: &View, n: &Notifier, dir: &Path, name: Option<&OsStr>) {
    view.source_changed(dir, name);
    let inval_inode = |ino: u64| {
        let data = view.data_may_have_changed(ino);
        let _ = n.inval_inode(INodeNo(ino), if data { 0 } else { -1 }, 0);
    };
    let Some(&dir_ino) = view.known_inos(dir).first() else { return };
    log::debug!("source changed: {}", dir.join(name.unwrap_or_default()).display());
    inval_inode(dir_ino);
    let names: Vec<(OsString, u64)> = match name {
        Some(nm) => {
            let inos = view.known_inos(&dir.join(nm));
            if inos.is_empty() {
                vec![(nm.to_os_string(), 0)]
            } else {
                inos.into_iter().map(|i| (nm.to_os_string(), i)).collect()
            }
        }
        None => view.known_children(dir),
    };
    for (nm, ino) in &names {
        let _ = n.inval_entry(INodeNo(dir_ino), nm);
        if *ino != 0 {
            inval_inode(*ino);
        }
    }
    // A file that becomes (or stops being) fat makes the synthesized
    // `.kpack` directory appear (or go).
    if name.is_some_and(|nm| nm != KPACK_DIR) {
        let _ = n.inval_entry(INodeNo(dir_ino), OsStr::new(KPACK_DIR));
    }
    // Archives planned from a changed binary live in dir/.kpack.
    let kdir = dir.join(KPACK_DIR);
    if let Some(&k_ino) = view.known_inos(&kdir).first() {
        inval_inode(k_ino);
        for (an, a_ino) in view.known_children(&kdir) {
            let from_changed = names.iter().any(|(nm, _)| {
                let prefix = [nm.as_bytes(), b"_"].concat();
                an.as_bytes().starts_with(&prefix)
            });
            if from_changed || name.is_none() {
                let _ = n.inval_entry(INodeNo(k_ino), &an);
                inval_inode(a_ino);
            }
        }
    }
}
