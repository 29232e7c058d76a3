//! Directory listings: what a directory of the view holds (source entries
//! minus hidden database files, plus `.kpack` beside fat binaries), cached
//! per directory version, and the synthesized `.kpack` directories.

use super::parallel;
use super::*;

/// A cached directory listing.
#[derive(Debug)]
pub(super) struct Listing {
    pub(super) id: SourceId,
    pub(super) entries: Vec<DirEntry>,
    pub(super) fat_files: Vec<OsString>,
}

impl View {
    /// Whether a regular file at `rel` is hidden by the selection.
    pub(super) fn hidden(&self, rel: &Path) -> bool {
        let name = rel.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
        let in_kpack_dir = rel.parent().and_then(Path::file_name) == Some(OsStr::new(KPACK_DIR));
        if in_kpack_dir {
            if let Some(t) = ArchiveName::parse(&name).and_then(|a| a.target()) {
                return !self.cfg.selection.selects(&t);
            }
        }
        self.cfg.db_rules.classify(rel).is_some_and(|a| !a.selected_by(&self.cfg.selection))
    }

    /// Whether a directory is hidden: a per-architecture database directory
    /// (`library/gfx942/`, `aotriton/kernels/gfx90a/`) of an unselected target.
    pub(super) fn hidden_dir(&self, rel: &Path) -> bool {
        self.cfg.db_rules.classify_dir(rel).is_some_and(|a| !a.selected_by(&self.cfg.selection))
    }

    /// The (cached) listing of source directory `rel`.
    pub(super) fn listing(&self, rel: &Path) -> Result<Arc<Listing>> {
        let st = self.tree.stat(rel)?;
        if st.kind != SourceKind::Dir {
            return Err(Error::NotDir);
        }
        if let Some(l) = self.listings.get(rel) {
            if l.id == st.id() {
                return Ok(l.clone());
            }
        }
        // A change event that arrives while this listing is built may
        // concern what it already read (a file rewritten in place leaves the
        // directory's identity as it was): then it is used, not kept.
        let epoch = self.listing_epoch.load(Ordering::SeqCst);
        let mut raw = self.tree.read_dir(rel)?;
        raw.sort_by(|a, b| a.0.cmp(&b.0));
        // Names and types come from the directory itself; what is hidden
        // is decided by name. Entries other than directories are stat'ed
        // (their inode numbers name their version), all through one handle
        // on the directory.
        raw.retain(|(name, kind)| match kind {
            Some(SourceKind::Special) => false,
            Some(SourceKind::Dir) => !self.hidden_dir(&rel.join(name)),
            Some(SourceKind::File) => !self.hidden(&rel.join(name)),
            _ => true,
        });
        let want: Vec<&OsStr> = raw.iter().filter(|(_, k)| *k != Some(SourceKind::Dir)).map(|(n, _)| n.as_os_str()).collect();
        let mut stats = self.stat_entries(rel, &want)?.into_iter();
        let mut entries = Vec::with_capacity(raw.len() + 1);
        let mut files = Vec::new();
        for (name, kind) in raw {
            let child = rel.join(&name);
            let child_st = match kind {
                Some(SourceKind::Dir) => None,
                _ => match stats.next() {
                    Some(Ok(s)) => Some(s),
                    _ => continue,
                },
            };
            let t = match (kind, &child_st) {
                (Some(SourceKind::Dir), _) => NodeType::Dir,
                (_, Some(s)) => match s.kind {
                    // (Types the directory did not tell, checked as above.)
                    SourceKind::Dir if kind.is_none() && self.hidden_dir(&child) => continue,
                    SourceKind::Dir => NodeType::Dir,
                    SourceKind::Symlink => NodeType::Symlink,
                    SourceKind::File if kind.is_none() && self.hidden(&child) => continue,
                    SourceKind::File => NodeType::File,
                    SourceKind::Special => continue,
                },
                _ => continue,
            };
            let id = child_st.as_ref().filter(|_| t != NodeType::Dir).map(SourceStat::id);
            entries.push(DirEntry { ino: self.inodes.ino_of(&child, id), name: name.clone(), kind: t });
            if let (NodeType::File, Some(s)) = (t, child_st) {
                files.push((name, s));
            }
        }
        let fat_files = self.fat_files(rel, &st, &files);
        if !fat_files.is_empty() && !entries.iter().any(|e| e.name == KPACK_DIR) {
            let k = rel.join(KPACK_DIR);
            entries.push(DirEntry { ino: self.inodes.ino_of(&k, None), name: KPACK_DIR.into(), kind: NodeType::Dir });
            entries.sort_by(|a, b| a.name.cmp(&b.name));
        }
        let l = Arc::new(Listing { id: st.id(), entries, fat_files });
        self.listings.insert(rel.to_path_buf(), l.clone());
        // `source_changed` counts, then removes: whichever way it
        // interleaves with the insert above, a listing that may predate the
        // change does not stay.
        if self.listing_epoch.load(Ordering::SeqCst) != epoch {
            self.listings.remove_if(rel, |_, kept| Arc::ptr_eq(kept, &l));
        }
        Ok(l)
    }

    /// `lstat` of the entries `names` of directory `rel`, in order; a large
    /// directory's in chunks on several threads (cold, each is an inode
    /// read from disk).
    fn stat_entries(&self, rel: &Path, names: &[&OsStr]) -> Result<Vec<source::Result<SourceStat>>> {
        const CHUNK: usize = 512;
        let chunks = parallel::chunked(names.len(), CHUNK, |r| self.tree.stat_many(rel, &names[r]));
        let mut out = Vec::with_capacity(names.len());
        for (r, c) in chunks {
            match c {
                Some(stats) => out.extend(stats?),
                // A thread that panicked: its entries are left out of this
                // listing (as if each had vanished), not the directory.
                None => out.extend(r.map(|_| Err(std::io::Error::other("listing thread failed").into()))),
            }
        }
        Ok(out)
    }

    pub(super) fn has_fat(&self, dir: &Path) -> bool {
        self.listing(dir).map(|l| !l.fat_files.is_empty()).unwrap_or(false)
    }

    /// The entries of a directory (without `.` and `..`), sorted by name.
    /// Their inode numbers are the ones [`View::lookup`] returns; like the
    /// kernel, a caller looks a name up before using its number. The
    /// order (and so any offset into it) is stable while the source
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
}
