//! What a change in the source makes stale in an adapter's kernel caches.
//! The view re-plans a changed file on its next lookup and refuses to serve
//! an open file whose source changed; but a kernel holding entries and
//! attributes for an hour, and cached pages, would not ask again. An
//! adapter that learns of a change (fs-linux's inotify watcher) asks
//! [`View::invalidate`] and forwards each [`Invalidation`] to its kernel.

use std::ffi::{OsStr, OsString};
use std::path::Path;

use crate::formats::kpack::{ArchiveName, KPACK_DIR};

use super::View;

/// One thing the kernel must forget, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalidation {
    /// Name `name` in directory `parent`: looked up afresh.
    Entry { parent: u64, name: OsString },
    /// Inode `ino`'s attributes and, with `data`, its cached data (pages
    /// of a file, the listing of a directory).
    Inode { ino: u64, data: bool },
}

impl View {
    /// Drops the view's idea of `dir/name` (or, with `None`, of the whole
    /// directory) and returns what the kernel must drop: the names (new
    /// lookups), the directory's and the names' inodes, the synthesized
    /// `.kpack` entry (a file that becomes or stops being fat makes it
    /// appear or go), and the archives planned from a changed binary.
    /// Directories and inodes whose data may have changed (see
    /// [`View::data_may_have_changed`]) lose their cached data; other file
    /// versions only their attributes, so processes that map an old
    /// version keep it. Nothing for a directory the kernel was never given.
    pub fn invalidate(&self, dir: &Path, name: Option<&OsStr>) -> Vec<Invalidation> {
        self.source_changed(dir, name);
        let mut out = Vec::new();
        let inode = |ino: u64| Invalidation::Inode { ino, data: self.data_may_have_changed(ino) };
        let Some(&dir_ino) = self.known_inos(dir).first() else { return out };
        log::debug!("source changed: {}", dir.join(name.unwrap_or_default()).display());
        out.push(inode(dir_ino));
        let names: Vec<(OsString, u64)> = match name {
            Some(nm) => {
                let inos = self.known_inos(&dir.join(nm));
                if inos.is_empty() {
                    vec![(nm.to_os_string(), 0)]
                } else {
                    inos.into_iter().map(|i| (nm.to_os_string(), i)).collect()
                }
            }
            None => self.known_children(dir),
        };
        for (nm, ino) in &names {
            out.push(Invalidation::Entry { parent: dir_ino, name: nm.clone() });
            if *ino != 0 {
                out.push(inode(*ino));
            }
        }
        if name.is_some_and(|nm| nm != KPACK_DIR) {
            out.push(Invalidation::Entry { parent: dir_ino, name: KPACK_DIR.into() });
        }
        // Archives planned from a changed binary live in dir/.kpack.
        let kdir = dir.join(KPACK_DIR);
        if let Some(&k_ino) = self.known_inos(&kdir).first() {
            out.push(inode(k_ino));
            for (an, a_ino) in self.known_children(&kdir) {
                let from_changed = names.iter().any(|(nm, _)| ArchiveName::may_belong_to(an.as_encoded_bytes(), nm.as_encoded_bytes()));
                if from_changed || name.is_none() {
                    out.push(Invalidation::Entry { parent: k_ino, name: an });
                    out.push(inode(a_ino));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::formats::target::Selection;
    use crate::view::{ArchiveNaming, ViewConfig, ROOT_INO};

    fn assets() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../test_assets/bin")
    }

    /// A change of one fat binary names, in order, exactly what the kernel
    /// holds of it (hand-written list): its directory, its name and inode,
    /// the `.kpack` name and directory, and its archives — not the other
    /// binary's archive. Directories and the unchanged binary lose their
    /// data; the archive (one binary version's bytes) only its attributes.
    #[test]
    fn a_changed_binary_invalidates_its_names_inodes_and_archives() {
        let d = tempfile::tempdir().unwrap();
        for b in ["libmulti.so", "libtwo.so"] {
            std::fs::copy(assets().join(b), d.path().join(b)).unwrap();
        }
        let v = View::new(ViewConfig {
            source: d.path().to_path_buf(),
            selection: Selection::parse("gfx1030").unwrap(),
            cache_bytes: 1 << 20,
            naming: ArchiveNaming::TargetId,
            compression: Default::default(),
            db_rules: Default::default(),
        })
        .unwrap();
        let root = v.root_ino();
        assert_eq!(root, ROOT_INO);
        let multi = v.lookup(root, OsStr::new("libmulti.so")).unwrap().ino;
        let kdir = v.lookup(root, OsStr::new(KPACK_DIR)).unwrap().ino;
        let arc = v.lookup(kdir, OsStr::new("libmulti.so_gfx1030.kpack")).unwrap().ino;
        v.lookup(kdir, OsStr::new("libtwo.so_gfx1030.kpack")).unwrap();
        let entry = |parent, name: &str| Invalidation::Entry { parent, name: name.into() };
        let inode = |ino| Invalidation::Inode { ino, data: true };
        assert_eq!(
            v.invalidate(Path::new(""), Some(OsStr::new("libmulti.so"))),
            [
                inode(root),
                entry(root, "libmulti.so"),
                inode(multi),
                entry(root, KPACK_DIR),
                inode(kdir),
                entry(kdir, "libmulti.so_gfx1030.kpack"),
                Invalidation::Inode { ino: arc, data: false }
            ]
        );
        // A name the kernel never saw: its entry (a negative one may be
        // cached) and the `.kpack` entry.
        assert_eq!(v.invalidate(Path::new(""), Some(OsStr::new("libnew.so"))), [inode(root), entry(root, "libnew.so"), entry(root, KPACK_DIR), inode(kdir)]);
        // A directory the kernel was never given: nothing.
        assert_eq!(v.invalidate(Path::new("nowhere"), None), []);
    }
}
