//! Reading a split's input: the artifact's prefixes and every entry beneath
//! them, each classified the way the split routes it (database file of one
//! architecture, fat binary with its code objects, anything else).
//!
//! The walk is sequential and sorted (the output must not depend on the
//! order a file system lists names in); classifying reads headers and
//! bundle tables, so it runs on all cores.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::formats::host::NotTransformed;
use crate::formats::marker::Marker;
use crate::plan::db::{DbArch, Rules};
use crate::plan::{FatBinary, Objects};
use crate::source::{SourceKind, SourceStat, SourceTree};

use super::manifest::{read_artifact_manifest, ARTIFACT_MANIFEST};
use super::SplitError;

/// The input: a directory with `artifact_manifest.txt` naming its prefixes,
/// or a directory that is itself the one prefix.
#[derive(Debug)]
pub struct Input {
    pub root: PathBuf,
    /// `/`-separated, relative to `root`; `""` for a single-prefix input.
    pub prefixes: Vec<String>,
    /// Whether `root` had an `artifact_manifest.txt`.
    pub manifest: bool,
}

impl Input {
    pub fn open(root: &Path) -> Result<Input, SplitError> {
        let md = std::fs::metadata(root).map_err(|e| SplitError::Usage(format!("{}: {e}", root.display())))?;
        if !md.is_dir() {
            return Err(SplitError::Usage(format!("{}: not a directory", root.display())));
        }
        let root = root.to_path_buf();
        match read_artifact_manifest(&root)? {
            Some(prefixes) => {
                for p in &prefixes {
                    // Every component a real directory: a prefix may not
                    // lead out of the artifact through a symlink.
                    let mut at = root.clone();
                    for c in p.split('/').filter(|c| !c.is_empty()) {
                        at.push(c);
                        if !std::fs::symlink_metadata(&at).is_ok_and(|m| m.is_dir()) {
                            return Err(SplitError::Usage(format!(
                                "{}: prefix {p:?} of {ARTIFACT_MANIFEST} is not a directory inside the artifact",
                                root.display()
                            )));
                        }
                    }
                }
                Ok(Input { root, prefixes, manifest: true })
            }
            None => Ok(Input { root, prefixes: vec![String::new()], manifest: false }),
        }
    }

    /// The TOC key prefix of a binary: `<prefix>/<path>` as the reference
    /// splitter writes it, or the path alone for a single-prefix input.
    pub fn kernel_name(&self, prefix: usize, rel: &str) -> String {
        match self.prefixes[prefix].as_str() {
            "" => rel.to_string(),
            p => format!("{p}/{rel}"),
        }
    }
}

/// How the split routes one regular file.
#[derive(Debug)]
pub enum FileClass {
    /// Into the generic artifact, unchanged.
    Plain,
    /// A database file: into the artifact of its architecture.
    Db(DbArch),
    /// A fat binary: transformed into the generic artifact, its code
    /// objects into the archives.
    Fat(Arc<FatBinary>, Arc<Objects>),
    /// A fat binary that cannot be transformed safely: copied unchanged
    /// into the generic artifact (and reported).
    Refused(Arc<dyn std::error::Error + Send + Sync>),
}

#[derive(Debug)]
pub enum EntryKind {
    Dir,
    Symlink(OsString),
    File(FileClass),
}

/// One entry of the input, relative to its prefix.
#[derive(Debug)]
pub struct Entry {
    pub prefix: usize,
    pub rel: PathBuf,
    pub stat: SourceStat,
    pub kind: EntryKind,
}

impl Entry {
    /// `/`-separated path relative to the prefix.
    pub fn rel_str(&self) -> String {
        super::slash(&self.rel)
    }
}

/// Walks every prefix (sorted, depth first) and classifies its files on
/// `jobs` threads. Entries come back in walk order: a directory before
/// its children.
pub fn scan(input: &Input, component: &str, rules: &Rules, jobs: usize) -> Result<Vec<Entry>, SplitError> {
    let mut trees = Vec::new();
    for p in &input.prefixes {
        let dir = input.root.join(p);
        trees.push(SourceTree::open(&dir).map_err(|e| SplitError::io(&dir, e))?);
    }
    let mut entries: Vec<Entry> = Vec::new();
    for (pi, tree) in trees.iter().enumerate() {
        let mut stack = vec![PathBuf::new()];
        while let Some(dir) = stack.pop() {
            let mut names: Vec<OsString> = tree.read_dir(&dir).map_err(|e| SplitError::io(&tree.root().join(&dir), e))?.into_iter().map(|(n, _)| n).collect();
            names.sort();
            let mut subdirs = Vec::new();
            for name in names {
                let rel = dir.join(&name);
                // The manifest of the input is not content; each output
                // artifact gets its own.
                if input.manifest && input.prefixes[pi].is_empty() && dir.as_os_str().is_empty() && name == ARTIFACT_MANIFEST {
                    continue;
                }
                let stat = tree.stat(&rel).map_err(|e| SplitError::io(&tree.root().join(&rel), e))?;
                let kind = match stat.kind {
                    SourceKind::Dir => {
                        subdirs.push(rel.clone());
                        EntryKind::Dir
                    }
                    SourceKind::Symlink => EntryKind::Symlink(tree.read_link(&rel).map_err(|e| SplitError::io(&tree.root().join(&rel), e))?),
                    SourceKind::File => EntryKind::File(FileClass::Plain),
                    SourceKind::Special => {
                        log::warn!("{}: not a regular file, directory or symlink; left out", tree.root().join(&rel).display());
                        continue;
                    }
                };
                entries.push(Entry { prefix: pi, rel, stat, kind });
            }
            // Depth first, in name order.
            stack.extend(subdirs.into_iter().rev());
        }
    }
    // Classify files in parallel.
    let files: Vec<usize> = entries.iter().enumerate().filter(|(_, e)| matches!(e.kind, EntryKind::File(_))).map(|(i, _)| i).collect();
    let next = AtomicUsize::new(0);
    let results: Vec<Vec<(usize, Result<FileClass, SplitError>)>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..jobs.max(1))
            .map(|_| {
                s.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&i) = files.get(k) else { break };
                        let e = &entries[i];
                        out.push((i, classify(&trees[e.prefix], input, e, component, rules)));
                    }
                    out
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or_default()).collect()
    });
    let mut done = 0;
    for (i, r) in results.into_iter().flatten() {
        entries[i].kind = EntryKind::File(r?);
        done += 1;
    }
    if done != files.len() {
        return Err(SplitError::Internal("a classifying thread failed".into()));
    }
    Ok(entries)
}

fn classify(tree: &SourceTree, input: &Input, e: &Entry, component: &str, rules: &Rules) -> Result<FileClass, SplitError> {
    // Database rules come first: some database files (MIOpen's per-arch
    // CK libraries) are fat binaries that must stay whole.
    if let Some(a) = rules.classify(&e.rel) {
        return Ok(FileClass::Db(a));
    }
    let Some(rel) = e.rel.to_str().map(|_| e.rel_str()) else { return Ok(FileClass::Plain) };
    let path = tree.root().join(&e.rel);
    let (file, st) = tree.open_file(&e.rel).map_err(|err| SplitError::io(&path, err))?;
    if st.id() != e.stat.id() {
        return Err(SplitError::Changed(path));
    }
    let depth = e.rel.components().count().saturating_sub(1);
    let marker = Marker::for_group(component, depth, &input.kernel_name(e.prefix, &rel));
    match FatBinary::analyze_marked(&file, st.id(), component, marker) {
        Ok(fb) => {
            let objects = fb.objects(&file).map_err(|err| SplitError::io(&path, err))?;
            // Never package a binary whose archives would lack the code
            // objects of a damaged compressed bundle.
            if !objects.damaged.is_empty() {
                return Err(SplitError::Bundle(path, objects.damaged.join("; ")));
            }
            if !objects.problems.is_empty() {
                log::warn!("{}: some wrappers have no code objects: {}", path.display(), objects.problems.join("; "));
            }
            Ok(FileClass::Fat(Arc::new(fb), objects))
        }
        Err(NotTransformed::Plain) => Ok(FileClass::Plain),
        Err(NotTransformed::Refused(why)) => {
            log::warn!("{}: copied unchanged: {why}", path.display());
            Ok(FileClass::Refused(why))
        }
    }
}
