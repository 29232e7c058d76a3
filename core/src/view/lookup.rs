//! Planning: how each source file is served. A cheap probe tells fat
//! binaries from the rest for listings; a binary's plan is built once per
//! source identity (stage 1: headers and wrappers; stage 2 on first need:
//! bundle headers and archives); archives are synthesized on lookup.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::formats::host::{self, NotTransformed, Probe};
use crate::source::{SourceKind, SourceStat};

use crate::formats::kpack::ArchiveName;

use super::cached::Caches;
use super::{rel_str, Error, Node, Result, View, KPACK_DIR};
use crate::plan::{ArchiveCompression, FatBinary};

/// How a source file is served.
#[derive(Debug, Clone)]
pub(super) enum Analysis {
    Plain,
    Fat(Arc<FatBinary>),
}

/// Plans (and probe results) kept before the cache is simply reset: each
/// is cheap to rebuild, and this bounds memory over a changing tree.
pub(super) const MAX_PLANS: usize = 1 << 16;

/// Test hook (debug builds only): `KPACKFS_TEST_SLOW_PLAN=substring:GATE`
/// holds planning of matching paths until the test opens the FIFO `GATE`
/// for writing and closes it again (reading it blocks until then), so
/// tests can check that one slow plan never stalls other readers — knowing
/// when the plan has started and ending it themselves, with no timing.
#[cfg(debug_assertions)]
fn slow_plan_hook(rel: &str) {
    use std::sync::OnceLock;
    static HOOK: OnceLock<Option<(String, String)>> = OnceLock::new();
    let hook = HOOK.get_or_init(|| {
        let v = std::env::var("KPACKFS_TEST_SLOW_PLAN").ok()?;
        let (pat, gate) = v.split_once(':')?;
        Some((pat.to_string(), gate.to_string()))
    });
    if let Some((pat, gate)) = hook {
        if rel.contains(pat.as_str()) {
            let _ = std::fs::read(gate);
        }
    }
}

#[cfg(not(debug_assertions))]
fn slow_plan_hook(_rel: &str) {}

impl View {
    /// Plans (once per identity and path) how a regular file is served.
    pub(super) fn analyze(&self, rel: &Path, st: &SourceStat) -> Result<(SourceStat, Analysis)> {
        if let Some(a) = self.plans.planned(st.id(), rel) {
            return Ok((st.clone(), a));
        }
        // A listing's probe of this very version found nothing to plan (the
        // planner would say the same, silently): no need to open it again.
        if self.plans.probe(st.id(), rel) == Some(Probe::Plain) {
            return Ok((st.clone(), Analysis::Plain));
        }
        let (file, fst) = self.tree.open_file(rel)?;
        let seen = self.plans.observe(rel, fst.id());
        if let Some(old) = seen.replaced {
            self.caches.memory.retire(super::open::version_tag(&old));
            // The parent's listing holds the old version's inode and
            // fatness, and an in-place rewrite leaves the directory's own
            // identity unchanged.
            self.listings.remove(rel.parent().unwrap_or(Path::new("")));
        }
        // Requests for two versions racing here may each retire the
        // other's: whichever is current now keeps its decoded objects
        // (every retire above is followed by this look).
        if let (true, Some(now)) = (seen.moved, seen.current) {
            self.caches.memory.revive(super::open::version_tag(&now));
        }
        let cell = self.plans.cell(rel, fst.id());
        let a = cell
            .get_or_init(|| {
                let rs = rel_str(rel);
                if rel.to_str().is_none() {
                    if host::probe(&file) {
                        log::warn!("{}: served unchanged: file name is not UTF-8", rel.display());
                    }
                    return Analysis::Plain;
                }
                slow_plan_hook(&rs);
                match FatBinary::analyze(&file, fst.id(), &rs) {
                    Ok(fb) => {
                        self.stats.plans_built.fetch_add(1, Ordering::Relaxed);
                        log::debug!("{rs}: planned, {} wrappers", fb.plan.wrappers.len());
                        Analysis::Fat(Arc::new(fb))
                    }
                    Err(NotTransformed::Plain) => Analysis::Plain,
                    Err(NotTransformed::Refused(why)) => {
                        self.stats.plans_refused.fetch_add(1, Ordering::Relaxed);
                        log::warn!("{rs}: served unchanged: {why}");
                        Analysis::Plain
                    }
                }
            })
            .clone();
        Ok((fst, a))
    }

    /// The damaged compressed bundles of the binary at `rel` (see
    /// [`fat::Objects::damaged`]); empty for anything not transformed.
    /// One-shot tools ask, so as not to write a tree lacking their code.
    pub fn damaged_bundles(&self, rel: &Path) -> Result<Vec<String>> {
        let Node::Transformed(_, fb) = self.resolve(rel)? else { return Ok(Vec::new()) };
        let (file, fst) = self.tree.open_file(rel)?;
        if fst.id() != fb.id {
            return Err(Error::Changed(rel.display().to_string()));
        }
        Ok(fb.objects(&file)?.damaged.clone())
    }

    /// The archives of a planned binary (second planning stage, once).
    pub(super) fn archives(&self, rel: &Path, fb: &FatBinary) -> Result<Arc<crate::plan::Archives>> {
        if let Some(a) = fb.archives_if_ready(&self.cfg.selection, self.cfg.naming, self.cfg.compression) {
            return Ok(a);
        }
        let (file, fst) = self.tree.open_file(rel)?;
        if fst.id() != fb.id {
            return Err(Error::Changed(rel.display().to_string()));
        }
        let a = fb.archives(&file, &self.cfg.selection, self.cfg.naming, self.cfg.compression)?;
        if !a.objects.problems.is_empty() {
            log::warn!("{}: some wrappers have no code objects: {}", rel.display(), a.objects.problems.join("; "));
        }
        Ok(a)
    }

    pub(super) fn file_node(&self, rel: &Path, st: SourceStat) -> Result<Node> {
        if self.hidden(rel) {
            return Err(Error::NotFound);
        }
        let (fst, a) = self.analyze(rel, &st)?;
        Ok(match a {
            Analysis::Plain => Node::Unchanged(fst),
            Analysis::Fat(fb) => Node::Transformed(fst, fb),
        })
    }

    /// The synthesized archive `name` in `bin_dir/.kpack`, if any; with
    /// `from_cache`, a compressed archive the disk cache holds is answered
    /// from the cache's metadata alone (see [`Caches::cached_archive_len`]).
    pub(super) fn synth_archive(&self, bin_dir: &Path, name: &str, from_cache: bool) -> Result<Option<Node>> {
        let Some(ArchiveName { group, .. }) = ArchiveName::parse(name) else { return Ok(None) };
        let bin = bin_dir.join(&group);
        // A binary replaced between its stat and its planning is looked at
        // again (as `open` does), rather than failing the lookup.
        for _ in 0..3 {
            let st = match self.tree.stat(&bin) {
                Ok(st) if st.kind == SourceKind::File => st,
                _ => return Ok(None),
            };
            let (fst, fb) = match self.file_node(&bin, st) {
                Ok(Node::Transformed(fst, fb)) => (fst, fb),
                Ok(_) | Err(Error::NotFound) => return Ok(None),
                Err(Error::Changed(_)) => continue,
                Err(e) => return Err(e),
            };
            let arel = bin_dir.join(KPACK_DIR).join(name);
            // An entry exists only for a name this configuration produced
            // from this very version of the binary (the key holds the
            // source identity and content identity, the path and the
            // configuration), so the binary's archives need not be planned
            // to answer for it — only its headers (the plan above) and its
            // bundles' headers are read.
            if from_cache && self.cfg.compression != ArchiveCompression::None && self.caches.disk.is_some() {
                match self.caches.cheap_content_id(&fb, &|| self.source_of(&bin, &fst)) {
                    Ok(Some(content)) => {
                        let key = Caches::key(self.tree.root(), &arel, &fst.id(), &content, &self.cfg, "archive");
                        if let Some(len) = self.caches.cached_archive_len(&key) {
                            return Ok(Some(Node::CachedArchive { binary: fst, group: group.to_string(), content, len }));
                        }
                    }
                    Ok(None) => {}
                    Err(Error::Changed(_)) => continue,
                    Err(e) => return Err(e),
                }
            }
            let ap = match self.archives(&bin, &fb) {
                Ok(archives) => match archives.by_name.get(name) {
                    Some(ap) => ap.clone(),
                    None => return Ok(None),
                },
                Err(Error::Changed(_)) => continue,
                Err(e) => return Err(e),
            };
            if ap.compressed {
                // Its size is the compressed form's: computed now (or found
                // in the cache), once per plan.
                let len = self.caches.content_id(&fb, &|| self.source_of(&bin, &fst)).and_then(|content| {
                    let key = Caches::key(self.tree.root(), &arel, &fst.id(), &content, &self.cfg, "archive");
                    self.caches.compressed_len(&key, &ap, &|| self.source_of(&bin, &fst))
                });
                match len {
                    Ok(_) => {}
                    Err(Error::Changed(_)) => continue,
                    Err(e) => return Err(e),
                }
            }
            return Ok(Some(Node::Archive(fst, fb, ap)));
        }
        Err(Error::Changed(bin.display().to_string()))
    }
}
