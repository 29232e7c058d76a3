//! Keeps the kernel's caches honest when the source changes under a live
//! mount. An inotify watch on every source directory the kernel has seen
//! turns each change into the invalidations the view names
//! ([`Namespace::invalidate`]: the entry, the inode, the directory listing, the
//! `.kpack` archives planned from a changed binary), which this module only
//! forwards to the kernel.
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

use kpackfs_core::namespace::Namespace;
use kpackfs_core::view::Invalidation;

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
    pub fn run(self: Arc<Self>, views: Arc<Namespace>, notifier: Notifier) {
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
                for inv in views.invalidate(&dir, name.as_deref()) {
                    let _ = match inv {
                        Invalidation::Entry { parent, name } => notifier.inval_entry(INodeNo(parent), &name),
                        Invalidation::Inode { ino, data } => notifier.inval_inode(INodeNo(ino), if data { 0 } else { -1 }, 0),
                    };
                }
            }
        }
    }
}
