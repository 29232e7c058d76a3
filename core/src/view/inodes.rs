//! The inode table (kept apart from the view's logic, as mountpoint-s3
//! keeps its superblock): numbers handed to the kernel, stable for the life
//! of the view, and the indexes the source watcher needs.

use std::ffi::OsString;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};

use dashmap::DashMap;

use crate::source::SourceId;

use super::ROOT_INO;

/// What an inode stands for: a path and, for everything but directories,
/// one version of its source. A file replaced or rewritten in the source
/// gets a new inode (as on a local filesystem), so the kernel never mixes
/// cached pages of two versions; directories keep theirs.
pub(super) type InoKey = (PathBuf, Option<SourceId>);

#[derive(Debug)]
struct Entry {
    key: InoKey,
    /// References the kernel holds (FUSE lookup count): `lookup` adds one,
    /// `forget` removes what the kernel says it dropped.
    lookups: u64,
}

/// The inode table.
///
/// Numbers are a hash of the key, so a listing can show a name's number
/// without entering it in the table, and a name looked up again after the
/// kernel forgot it gets the number it had — stable for as long as its
/// source version exists, not only while the table remembers it. Only keys
/// the kernel holds are entered (`register`), and `forget` removes them
/// when the kernel lets go, so the table's size follows what is live, not
/// every (path, version) pair ever seen.
#[derive(Debug)]
pub(super) struct Inodes {
    by_ino: DashMap<u64, Entry>,
    /// Every registered inode of a path (all versions), and the registered
    /// names below each directory: the watcher asks for these on every
    /// source event, which must not cost a scan of the whole table.
    by_path: DashMap<PathBuf, Vec<u64>>,
    by_parent: DashMap<PathBuf, Vec<(OsString, u64)>>,
    /// High bits shared by every number of this table (several views in
    /// one mount each have their own), and the mask for the hash below them.
    prefix: u64,
    mask: u64,
    /// The root's number: [`ROOT_INO`], with the prefix.
    root: u64,
}

impl Inodes {
    /// A table whose numbers are `prefix | hash` (`prefix` 0: the hash
    /// fills 63 bits; else it must be a multiple of 2^56).
    pub(super) fn new(prefix: u64) -> Inodes {
        let mask = if prefix == 0 { (1 << 63) - 1 } else { (1 << 56) - 1 };
        let root = prefix | ROOT_INO;
        let i = Inodes { by_ino: DashMap::new(), by_path: DashMap::new(), by_parent: DashMap::new(), prefix, mask, root };
        // The root is held for ever.
        i.by_ino.insert(root, Entry { key: (PathBuf::new(), None), lookups: u64::MAX / 2 });
        i.by_path.insert(PathBuf::new(), vec![root]);
        i
    }

    pub(super) fn root(&self) -> u64 {
        self.root
    }

    fn candidate(&self, key: &InoKey, attempt: u32) -> u64 {
        if key.0.as_os_str().is_empty() && key.1.is_none() {
            return self.root;
        }
        let mut h = DefaultHasher::new();
        key.hash(&mut h);
        attempt.hash(&mut h);
        let n = self.prefix | (h.finish() & self.mask);
        // 0 is no inode and ROOT_INO the root's; numbers of another table
        // never arise (different prefix).
        if n & self.mask <= ROOT_INO {
            self.prefix | (n & self.mask) | 2
        } else {
            n
        }
    }

    /// The number of `p` at version `id`, without entering it.
    pub(super) fn ino_of(&self, p: &Path, id: Option<SourceId>) -> u64 {
        let key = (p.to_path_buf(), id);
        for attempt in 0.. {
            let n = self.candidate(&key, attempt);
            match self.by_ino.get(&n) {
                Some(e) if e.key != key => continue, // a collision: next
                _ => return n,
            }
        }
        unreachable!("an unbounded loop returns")
    }

    /// Enters `p` at version `id` (or counts one more reference to it) and
    /// returns its number: what `lookup` hands the kernel.
    pub(super) fn register(&self, p: &Path, id: Option<SourceId>) -> u64 {
        let key = (p.to_path_buf(), id);
        for attempt in 0.. {
            let n = self.candidate(&key, attempt);
            match self.by_ino.entry(n) {
                dashmap::Entry::Occupied(mut o) if o.get().key == key => {
                    o.get_mut().lookups += 1;
                    return n;
                }
                dashmap::Entry::Occupied(_) => continue,
                dashmap::Entry::Vacant(v) => {
                    v.insert(Entry { key, lookups: 1 });
                    self.by_path.entry(p.to_path_buf()).or_default().push(n);
                    if let (Some(parent), Some(name)) = (p.parent(), p.file_name()) {
                        self.by_parent.entry(parent.to_path_buf()).or_default().push((name.to_os_string(), n));
                    }
                    return n;
                }
            }
        }
        unreachable!("an unbounded loop returns")
    }

    /// The kernel dropped `n` references to `ino`; at none left, the inode
    /// leaves the table.
    pub(super) fn forget(&self, ino: u64, n: u64) {
        if ino == self.root {
            return;
        }
        let gone = match self.by_ino.entry(ino) {
            dashmap::Entry::Occupied(mut o) => {
                let e = o.get_mut();
                e.lookups = e.lookups.saturating_sub(n);
                (e.lookups == 0).then(|| o.remove().key)
            }
            dashmap::Entry::Vacant(_) => None,
        };
        let Some((p, _)) = gone else { return };
        self.by_path.remove_if_mut(&p, |_, v| {
            v.retain(|i| *i != ino);
            v.is_empty()
        });
        if let Some(parent) = p.parent() {
            self.by_parent.remove_if_mut(parent, |_, v| {
                v.retain(|(_, i)| *i != ino);
                v.is_empty()
            });
        }
    }

    /// Inodes in the table (the root included).
    pub(super) fn len(&self) -> usize {
        self.by_ino.len()
    }

    pub(super) fn key_of(&self, ino: u64) -> Option<InoKey> {
        self.by_ino.get(&ino).map(|e| e.key.clone())
    }

    /// Every registered inode of `p` (all versions).
    pub(super) fn known(&self, p: &Path) -> Vec<u64> {
        self.by_path.get(p).map(|v| v.clone()).unwrap_or_default()
    }

    pub(super) fn children(&self, dir: &Path) -> Vec<(OsString, u64)> {
        self.by_parent.get(dir).map(|v| v.clone()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_stable_and_the_table_follows_lookups() {
        let t = Inodes::new(0);
        let p = Path::new("lib/libx.so");
        let n = t.ino_of(p, None);
        assert_eq!(t.len(), 1, "numbering enters nothing");
        assert_eq!(t.register(p, None), n);
        assert_eq!(t.register(p, None), n);
        assert_eq!(t.known(p), vec![n]);
        assert_eq!(t.children(Path::new("lib")), vec![(OsString::from("libx.so"), n)]);
        t.forget(n, 1);
        assert_eq!(t.key_of(n).map(|k| k.0), Some(p.to_path_buf()), "one reference left");
        t.forget(n, 1);
        assert!(t.key_of(n).is_none());
        assert_eq!(t.len(), 1);
        assert!(t.known(p).is_empty() && t.children(Path::new("lib")).is_empty());
        // Forgotten and looked up again: the same number.
        assert_eq!(t.register(p, None), n);
        t.forget(ROOT_INO, 1 << 40);
        assert!(t.key_of(ROOT_INO).is_some(), "the root is never forgotten");
    }

    #[test]
    fn prefixes_keep_tables_apart() {
        let a = Inodes::new(1 << 56);
        let b = Inodes::new(2 << 56);
        let p = Path::new("x");
        let (na, nb) = (a.register(p, None), b.register(p, None));
        assert_eq!(na >> 56, 1);
        assert_eq!(nb >> 56, 2);
        assert_eq!(a.root(), (1 << 56) | ROOT_INO);
        assert_eq!(a.key_of(a.root()).map(|k| k.0), Some(PathBuf::new()));
        assert!(a.key_of(ROOT_INO).is_none());
    }
}
