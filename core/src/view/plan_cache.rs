//! The view's memory of what it planned, per source version: the plan of
//! each (version, path), the version each path is at now, and the cheap
//! probe answer ("fat or not") per path.
//!
//! Why one type: these three maps change together — a new version of a
//! file drops the old version's plan, a source event drops a path's plan
//! and probe, a directory event drops everything in it — and each of
//! those rules once lived as a few lines scattered over the view, where a
//! forgotten one was a leak or a stale answer. The view still owns what
//! hangs off a version elsewhere (decoded objects in the memory cache,
//! the parent's listing): the methods here return the versions they
//! replaced or dropped, and the view retires those.
//!
//! Generic over the plan type so the rules are unit-tested with plain
//! values.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use dashmap::DashMap;

use crate::source::SourceId;

/// What [`PlanCache::observe`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Observed {
    /// `path` was not known at this version (new to the cache, forgotten
    /// since, or replaced): the caller revives `current`'s objects.
    pub moved: bool,
    /// The version `path` was at before, if it was another one: its plan
    /// is gone; the caller retires what else it kept for it.
    pub replaced: Option<SourceId>,
    /// The version current once this call is done (another request may
    /// have moved it on meanwhile): the caller keeps that one's objects.
    pub current: Option<SourceId>,
}

pub(super) struct PlanCache<A, P> {
    /// Plans by version and path, each made once by whichever request
    /// comes first (the others wait on the `OnceLock`).
    plans: DashMap<(SourceId, PathBuf), Arc<OnceLock<A>>>,
    current: DashMap<PathBuf, SourceId>,
    /// One entry per path, for its last probed version: a file replaced
    /// again and again keeps one entry, so memory stays flat.
    probes: DashMap<PathBuf, (SourceId, P)>,
    /// More plans than this and everything is dropped (they are remade on
    /// demand): a bound on memory for trees of millions of files.
    max_plans: usize,
}

impl<A: Clone, P: Copy> PlanCache<A, P> {
    pub(super) fn new(max_plans: usize) -> Self {
        PlanCache { plans: DashMap::new(), current: DashMap::new(), probes: DashMap::new(), max_plans }
    }

    /// The finished plan of version `id` of `path`, if there is one.
    pub(super) fn planned(&self, id: SourceId, path: &Path) -> Option<A> {
        let cell = self.plans.get(&(id, path.to_path_buf())).map(|c| c.clone())?;
        cell.get().cloned()
    }

    /// The probe answer for version `id` of `path`, if it was probed.
    pub(super) fn probe(&self, id: SourceId, path: &Path) -> Option<P> {
        self.probes.get(path).filter(|p| p.0 == id).map(|p| p.1)
    }

    pub(super) fn set_probe(&self, id: SourceId, path: PathBuf, probe: P) {
        self.probes.insert(path, (id, probe));
    }

    /// Records that `path` is at version `id` now (a request opened it).
    pub(super) fn observe(&self, path: &Path, id: SourceId) -> Observed {
        let old = self.current.insert(path.to_path_buf(), id);
        let replaced = old.filter(|o| *o != id);
        if let Some(old) = replaced {
            self.plans.remove(&(old, path.to_path_buf()));
        }
        Observed { moved: old != Some(id), replaced, current: self.current.get(path).map(|c| *c) }
    }

    /// The cell the plan of version `id` of `path` is made in, shared by
    /// concurrent requests for it. If another version became current
    /// meanwhile, the cell is handed out but not kept: otherwise a file
    /// replaced under busy readers would leave a dead plan behind now and
    /// then (whoever moves `current` on after this check removes the entry
    /// itself).
    pub(super) fn cell(&self, path: &Path, id: SourceId) -> Arc<OnceLock<A>> {
        if self.plans.len() > self.max_plans {
            self.plans.clear();
            self.probes.clear();
        }
        let key = (id, path.to_path_buf());
        let cell = self.plans.entry(key.clone()).or_insert_with(|| Arc::new(OnceLock::new())).clone();
        if self.current.get(path).map(|c| *c) != Some(id) {
            self.plans.remove(&key);
        }
        cell
    }

    /// Forgets `path` (its source changed): returns the version it was
    /// at, whose plan is gone.
    pub(super) fn forget(&self, path: &Path) -> Option<SourceId> {
        self.probes.remove(path);
        let (_, id) = self.current.remove(path)?;
        self.plans.remove(&(id, path.to_path_buf()));
        Some(id)
    }

    /// Forgets every path directly in `dir`: returns their versions.
    pub(super) fn forget_dir(&self, dir: &Path) -> Vec<SourceId> {
        let in_dir = |p: &Path| p.parent() == Some(dir);
        let mut gone = Vec::new();
        self.current.retain(|p, id| {
            let keep = !in_dir(p);
            if !keep {
                gone.push(*id);
            }
            keep
        });
        self.plans.retain(|(_, p), _| !in_dir(p));
        self.probes.retain(|p, _| !in_dir(p));
        gone
    }

    pub(super) fn plans_len(&self) -> usize {
        self.plans.len()
    }

    pub(super) fn probes_len(&self) -> usize {
        self.probes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::Time;

    fn id(n: u64) -> SourceId {
        SourceId { dev: 0, ino: n, size: n, mtime: Time::default(), ctime: Time::default() }
    }

    fn plan(c: &PlanCache<&'static str, bool>, path: &str, v: u64, what: &'static str) -> Observed {
        let o = c.observe(Path::new(path), id(v));
        let _ = c.cell(Path::new(path), id(v)).get_or_init(|| what);
        o
    }

    #[test]
    fn a_new_version_drops_the_old_plan_and_says_so() {
        let c = PlanCache::new(100);
        assert_eq!(plan(&c, "lib/a.so", 1, "v1"), Observed { moved: true, replaced: None, current: Some(id(1)) });
        assert_eq!(c.planned(id(1), Path::new("lib/a.so")), Some("v1"));
        // The same version again replaces nothing.
        assert_eq!(plan(&c, "lib/a.so", 1, "again"), Observed { moved: false, replaced: None, current: Some(id(1)) });
        assert_eq!(c.planned(id(1), Path::new("lib/a.so")), Some("v1"));
        assert_eq!(plan(&c, "lib/a.so", 2, "v2"), Observed { moved: true, replaced: Some(id(1)), current: Some(id(2)) });
        // Forgotten (a source event), then seen again at the same version.
        c.forget(Path::new("lib/a.so"));
        assert_eq!(plan(&c, "lib/a.so", 2, "v2"), Observed { moved: true, replaced: None, current: Some(id(2)) });
        assert_eq!(c.planned(id(1), Path::new("lib/a.so")), None);
        assert_eq!(c.planned(id(2), Path::new("lib/a.so")), Some("v2"));
        assert_eq!(c.plans_len(), 1);
    }

    #[test]
    fn a_superseded_version_is_planned_but_not_kept() {
        let c: PlanCache<&str, bool> = PlanCache::new(100);
        let p = Path::new("lib/a.so");
        c.observe(p, id(1));
        // Version 2 became current between this request's observe and cell.
        c.observe(p, id(2));
        let cell = c.cell(p, id(1));
        assert_eq!(*cell.get_or_init(|| "v1"), "v1", "the request still gets its plan");
        assert_eq!(c.planned(id(1), p), None);
        assert_eq!(c.plans_len(), 0);
    }

    #[test]
    fn probes_keep_one_entry_per_path_and_answer_only_their_version() {
        let c: PlanCache<&str, bool> = PlanCache::new(100);
        let p = Path::new("lib/a.so");
        for v in 1..50 {
            c.set_probe(id(v), p.to_path_buf(), v % 2 == 0);
        }
        assert_eq!(c.probes_len(), 1);
        assert_eq!(c.probe(id(49), p), Some(false));
        assert_eq!(c.probe(id(48), p), None);
    }

    #[test]
    fn forgetting_a_path_or_a_directory_drops_plans_probes_and_versions() {
        let c = PlanCache::new(100);
        plan(&c, "lib/a.so", 1, "a");
        plan(&c, "lib/b.so", 2, "b");
        plan(&c, "lib/sub/c.so", 3, "c");
        plan(&c, "other/d.so", 4, "d");
        c.set_probe(id(1), "lib/a.so".into(), true);
        c.set_probe(id(3), "lib/sub/c.so".into(), true);
        assert_eq!(c.forget(Path::new("lib/a.so")), Some(id(1)));
        assert_eq!(c.forget(Path::new("lib/a.so")), None);
        assert_eq!((c.planned(id(1), Path::new("lib/a.so")), c.probe(id(1), Path::new("lib/a.so"))), (None, None));
        let mut gone = c.forget_dir(Path::new("lib"));
        gone.sort_by_key(|g| format!("{g:?}"));
        assert_eq!(gone, vec![id(2)], "only lib's own entries, not lib/sub's");
        assert_eq!(c.planned(id(3), Path::new("lib/sub/c.so")), Some("c"));
        assert_eq!(c.probe(id(3), Path::new("lib/sub/c.so")), Some(true));
        assert_eq!(c.planned(id(4), Path::new("other/d.so")), Some("d"));
    }

    #[test]
    fn past_the_bound_everything_is_dropped_and_remade() {
        let c = PlanCache::new(3);
        for v in 1..=4 {
            plan(&c, &format!("f{v}"), v, "x");
            c.set_probe(id(v), format!("f{v}").into(), true);
        }
        assert_eq!(c.plans_len(), 4, "the bound is checked before a plan goes in");
        plan(&c, "f5", 5, "x");
        assert_eq!(c.plans_len(), 1);
        assert_eq!(c.probes_len(), 0);
        assert_eq!(c.planned(id(5), Path::new("f5")), Some("x"));
    }
}
