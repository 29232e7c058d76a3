//! One fat binary as the view serves it: its transformed layout, the code
//! objects behind each wrapper, and the `.kpack` archives that hold the
//! selected targets' code objects.
//!
//! Archives are per binary (one group per fat binary, named after the file),
//! so each archive is complete for the only binary that points at it: for
//! every wrapper and every arch key it lists, it holds the code object the
//! fat runtime would have chosen for a device of that ISA (exact target if
//! present, else the most specific compatible one, else the generic one).
//! That makes the Feb-2026 loader (first matching archive wins, B9) and the
//! newest one (falls through) resolve identically.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use crate::formats::bundle::{self, CodeObject};
use crate::formats::host::{self, HostPlan, NotTransformed};
use crate::formats::marker::Marker;
use crate::formats::target::{Selection, TargetId};
use crate::io::{is_transient, ReadAt};
use crate::source::SourceId;

use super::archive::{view_key, ArchiveCompression, ArchiveNaming, ArchiveSource, Archives, MAX_TARGET_SUFFIX, NAME_MAX};
use super::select::Objects;

/// A fat binary planned for the view.
///
/// Planning has two stages so that `stat` of a 1.3 GB library reads only
/// its headers: the transform itself (headers, relocations, wrappers), and
/// — on the first access to its archives — the bundle headers behind every
/// wrapper (scattered over the whole device-code section). A wrapper whose
/// bundle cannot be read simply has no archive entry: the runtime fails on
/// it exactly as the fat runtime would on the broken bundle.
#[derive(Debug)]
pub struct FatBinary {
    pub id: SourceId,
    pub group: String,
    pub marker: Marker,
    pub plan: HostPlan,
    objects: OnceLock<Arc<Objects>>,
    /// Archive plans per view configuration (selection, naming,
    /// compression): several views in one daemon share the plan and the
    /// code objects, each with its own archives.
    archives: std::sync::Mutex<Vec<(String, Arc<Archives>)>>,
}

/// Why planning serves a fat binary unchanged although its format could
/// be transformed.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The runtime would expand it in the archive search path.
    #[error("file name contains @GFXARCH@")]
    PlaceholderInName,
    #[error("file name too long for its archives ({0} bytes)")]
    NameTooLong(usize),
    #[error("wrapper {0} does not point into the fat section")]
    WrapperOutsideFatSection(u32),
}

impl FatBinary {
    /// Plans the transform of binary `rel` (root-relative, `/`-separated; its
    /// file name is the group). Any refusal means "serve unchanged".
    pub fn analyze(src: &dyn ReadAt, id: SourceId, rel: &str) -> Result<FatBinary, NotTransformed> {
        let group = rel.rsplit('/').next().unwrap_or(rel).to_string();
        if group.contains("@GFXARCH@") {
            return Err(NotTransformed::refused(Refusal::PlaceholderInName));
        }
        // Archive names are `<group>_<target>.kpack`; the longest target
        // name we could need must fit.
        if group.len() + MAX_TARGET_SUFFIX > NAME_MAX {
            return Err(NotTransformed::refused(Refusal::NameTooLong(group.len())));
        }
        let marker = Marker::for_group(&group, 0, rel);
        Self::analyze_marked(src, id, &group, marker)
    }

    /// Plans the transform of a binary with a given marker and group, for
    /// the packager's split, where one group (the component) spans many
    /// binaries and the archives sit at the install root rather than beside
    /// each binary. Any refusal means "copy unchanged".
    pub fn analyze_marked(src: &dyn ReadAt, id: SourceId, group: &str, marker: Marker) -> Result<FatBinary, NotTransformed> {
        let plan = host::plan(src, &marker.encode())?;
        if plan.wrappers.iter().all(|w| w.already_kpacked) {
            return Err(NotTransformed::Plain);
        }
        if let Some(w) = plan.wrappers.iter().find(|w| !w.already_kpacked && w.fatbin_offset.is_none()) {
            return Err(NotTransformed::refused(Refusal::WrapperOutsideFatSection(w.index)));
        }
        Ok(FatBinary { id, group: group.to_string(), marker, plan, objects: OnceLock::new(), archives: Default::default() })
    }

    /// The second planning stage (the code objects behind each wrapper),
    /// computed once from `src`, the source version this plan was made from.
    pub fn objects(&self, src: &dyn ReadAt) -> std::io::Result<Arc<Objects>> {
        if let Some(o) = self.objects.get() {
            return Ok(o.clone());
        }
        let o = Arc::new(self.plan_stage2(src)?);
        Ok(self.objects.get_or_init(|| o).clone())
    }

    /// One view's archives, if already planned.
    pub fn archives_if_ready(&self, selection: &Selection, naming: ArchiveNaming, compression: ArchiveCompression) -> Option<Arc<Archives>> {
        let key = view_key(selection, naming, compression);
        self.archives.lock().unwrap_or_else(|p| p.into_inner()).iter().find(|(k, _)| *k == key).map(|(_, a)| a.clone())
    }

    /// One view's archives (second stage, code objects computed once for
    /// every view) from `src`, which must be the source version this plan
    /// was made from.
    ///
    /// A failed read of the source (other than a read past its end, which
    /// is the file's own shape) is returned and not remembered: the next
    /// request tries again, instead of the binary's archives lacking that
    /// wrapper's code objects for the life of the plan.
    pub fn archives(&self, src: &dyn ReadAt, selection: &Selection, naming: ArchiveNaming, compression: ArchiveCompression) -> std::io::Result<Arc<Archives>> {
        if let Some(a) = self.archives_if_ready(selection, naming, compression) {
            return Ok(a);
        }
        let key = view_key(selection, naming, compression);
        let objects = self.objects(src)?;
        let by_name = ArchiveSource { group: &self.group, kernel_name: &self.marker.kernel_name, wrappers: &self.plan.wrappers }.plan_archives(
            &objects,
            selection,
            naming,
            compression,
        );
        let mut m = self.archives.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, a)) = m.iter().find(|(k, _)| *k == key) {
            return Ok(a.clone());
        }
        let a = Arc::new(Archives { objects, by_name });
        m.push((key, a.clone()));
        Ok(a)
    }

    fn plan_stage2(&self, src: &dyn ReadAt) -> std::io::Result<Objects> {
        let plan = &self.plan;
        let fat_end = plan.fat_offset + plan.fat_size;
        // Bundle headers are scattered over the section: ask for all of them
        // at once, then parse.
        for w in &plan.wrappers {
            if let Some(off) = w.fatbin_offset {
                src.prefetch(plan.fat_offset + off, 4096);
            }
        }
        let mut a = Objects::default();
        // Per bundle offset: its objects, or (damaged compressed bundle?, why).
        let mut by_offset: HashMap<u64, Result<Vec<CodeObject>, (bool, String)>> = HashMap::new();
        for w in &plan.wrappers {
            if w.already_kpacked {
                a.objects.push(Vec::new());
                continue;
            }
            let Some(off) = w.fatbin_offset else {
                a.problems.push(format!("wrapper {} does not point into the fat section", w.index));
                a.objects.push(Vec::new());
                continue;
            };
            let objs = match by_offset.entry(off) {
                Entry::Occupied(o) => o.into_mut(),
                Entry::Vacant(v) => {
                    let at = plan.fat_offset + off;
                    v.insert(match bundle::parse_chunk(src, at, fat_end).and_then(|chunk| bundle::chunk_objects(src, &chunk, w.index as usize)) {
                        Err(bundle::BundleError::Io(e)) if is_transient(&e) => return Err(e),
                        r => r.map_err(|e| (matches!(e, bundle::BundleError::HashMismatch { .. } | bundle::BundleError::Ccob { .. }), e.to_string())),
                    })
                }
            };
            match objs {
                Ok(o) => a.objects.push(o.clone()),
                Err((damaged, e)) => {
                    a.problems.push(format!("wrapper {}: {e}", w.index));
                    if *damaged {
                        a.damaged.push(format!("wrapper {}: {e}", w.index));
                    }
                    a.objects.push(Vec::new());
                }
            }
        }
        for o in a.objects.iter().flatten() {
            if let Ok(t) = TargetId::parse(&o.arch) {
                if !a.targets.contains(&t) {
                    a.targets.push(t);
                }
            }
        }
        a.targets.sort();
        Ok(a)
    }
}
