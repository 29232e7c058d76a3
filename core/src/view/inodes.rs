//! The inode table (kept apart from the view's logic, as mountpoint-s3
//! keeps its superblock): numbers handed to the kernel, stable for the life
//! of the view, and the indexes the source watcher needs.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;

use crate::source::SourceId;

use super::ROOT_INO;

/// Inode numbers, stable for the life of the view: one per path and
/// version of its source. A file replaced or rewritten in the source gets a
/// new inode (as on a local filesystem), so the kernel never mixes cached
/// pages of two versions; directories keep theirs.
pub(super) type InoKey = (PathBuf, Option<SourceId>);

#[derive(Debug, Default)]
pub(super) struct Inodes {
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
    pub(super) fn new() -> Inodes {
        let i = Inodes { next: AtomicU64::new(ROOT_INO + 1), ..Inodes::default() };
        i.by_key.insert((PathBuf::new(), None), ROOT_INO);
        i.by_ino.insert(ROOT_INO, (PathBuf::new(), None));
        i.by_path.insert(PathBuf::new(), vec![ROOT_INO]);
        i
    }

    pub(super) fn ino_of(&self, p: &Path, id: Option<SourceId>) -> u64 {
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

    pub(super) fn key_of(&self, ino: u64) -> Option<InoKey> {
        self.by_ino.get(&ino).map(|k| k.clone())
    }

    /// Every inode handed out for `p` (all versions).
    pub(super) fn known(&self, p: &Path) -> Vec<u64> {
        self.by_path.get(p).map(|v| v.clone()).unwrap_or_default()
    }

    pub(super) fn children(&self, dir: &Path) -> Vec<(OsString, u64)> {
        self.by_parent.get(dir).map(|v| v.clone()).unwrap_or_default()
    }
}

