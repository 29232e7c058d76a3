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
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use crate::formats::bundle::{self, CodeObject, ObjectLocation};
use crate::formats::host::{self, HostPlan, NotTransformed};
use crate::formats::kpack::{ArchiveSpec, BlobData};
use crate::formats::marker::Marker;
use crate::formats::target::{Selection, TargetId};
use crate::io::{is_transient, ReadAt};
use crate::layout::{BlobRef, Layout};
use crate::source::SourceId;

/// Longest file name the view can serve (Linux NAME_MAX, NTFS's limit).
const NAME_MAX: usize = 255;
/// Room kept for `_<target>.kpack` in archive names
/// (`_gfx10-3-generic:sramecc+:xnack+.kpack` is 38 bytes).
const MAX_TARGET_SUFFIX: usize = 44;

/// How archive files are named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ArchiveNaming {
    /// `<group>_<target-id>.kpack`, one archive per target ID (features
    /// included, so names may contain `:`) — what the reference splitter
    /// writes.
    #[default]
    TargetId,
    /// `<group>_<processor>.kpack` listing every selected feature variant in
    /// `gfx_arches` — no `:` in names, for Windows (FORMATS.md §9.5).
    Processor,
}

/// How synthesized archives store their code objects (`--archive-compression`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ArchiveCompression {
    /// Scheme `none`: code objects back to back — for plain bundles, extents
    /// of the source file served without a copy.
    None,
    /// Scheme `zstd-per-kernel`: one level-3 zstd frame per code object,
    /// computed once (at the archive's first `stat`) and kept in the cache.
    Zstd,
    /// `zstd` for archives whose code objects come from compressed (CCOB)
    /// bundles — stored uncompressed they would be many times the fat
    /// install's size — and `none` where they are plain source ranges.
    #[default]
    Auto,
}

/// zstd level of compressed archives (the reference writer's).
pub const ZSTD_LEVEL: i32 = 3;

/// One archive of a binary.
#[derive(Debug)]
pub struct ArchivePlan {
    pub name: String,
    /// Arch keys (`gfx_arches`), most specific first.
    pub keys: Vec<TargetId>,
    /// What the archive holds; the `zstd-per-kernel` form is written from it.
    pub spec: ArchiveSpec,
    /// The archive in scheme `none` (served when not compressed).
    pub layout: Layout,
    /// Stored as `zstd-per-kernel` (else `none`, served from `layout`).
    pub compressed: bool,
    /// Length of the compressed form, once computed or found in the cache.
    compressed_len: OnceLock<u64>,
    /// TOC entries (binary key × arch key).
    pub entries: usize,
}

impl ArchivePlan {
    /// Bytes served, if known: the `none` layout's length, or the
    /// compressed form's once it has been computed (see [`Self::set_compressed_len`]).
    pub fn served_len(&self) -> Option<u64> {
        if self.compressed {
            self.compressed_len.get().copied()
        } else {
            Some(self.layout.len())
        }
    }

    /// Records the compressed form's length (deterministic: the first
    /// value stands).
    pub fn set_compressed_len(&self, n: u64) -> u64 {
        *self.compressed_len.get_or_init(|| n)
    }

    /// Whether serving the `none` form means decoding compressed bundles
    /// (worth keeping on disk, unlike plain source extents).
    pub fn decodes(&self) -> bool {
        self.spec.blobs.iter().any(|b| matches!(b, BlobData::Decoded { .. }))
    }
}

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

/// The second stage, the same for every view: the code objects behind each
/// wrapper and the targets present.
#[derive(Debug, Default)]
pub struct Objects {
    /// Code objects behind each wrapper (by wrapper index; empty for
    /// wrappers already HIPK or whose bundle is unreadable).
    pub objects: Vec<Vec<CodeObject>>,
    /// Every target present, sorted.
    pub targets: Vec<TargetId>,
    /// Why some wrappers have no code objects.
    pub problems: Vec<String>,
    /// The subset of `problems` due to a compressed bundle (CCOB) that
    /// could not be decoded or failed its hash check: its code objects
    /// exist but are damaged. A mount serves the rest; one-shot tools
    /// (`split`, `bake`) fail rather than write a tree lacking them.
    pub damaged: Vec<String>,
}

/// One view's archives of a binary.
#[derive(Debug)]
pub struct Archives {
    pub objects: Arc<Objects>,
    /// Archives exposed for the selection, by file name.
    pub by_name: BTreeMap<String, Arc<ArchivePlan>>,
}

/// What makes one view's archives differ from another's.
fn view_key(selection: &Selection, naming: ArchiveNaming, compression: ArchiveCompression) -> String {
    format!("{selection}/{naming:?}/{compression:?}")
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
        let by_name = self.plan_archives(&objects, selection, naming, compression);
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

    /// Archive file name for a file target string.
    pub fn archive_name(&self, file_target: &str) -> String {
        crate::formats::kpack::ArchiveName::new(self.group.as_str(), file_target).to_string()
    }

    fn plan_archives(&self, a: &Objects, selection: &Selection, naming: ArchiveNaming, compression: ArchiveCompression) -> BTreeMap<String, Arc<ArchivePlan>> {
        let selected: Vec<&TargetId> = a.targets.iter().filter(|t| selection.selects(t)).collect();
        let mut files: BTreeMap<String, Vec<TargetId>> = BTreeMap::new();
        for t in selected {
            let file_target = match naming {
                ArchiveNaming::TargetId => t.to_string(),
                ArchiveNaming::Processor => t.processor.clone(),
            };
            files.entry(file_target).or_default().push(t.clone());
        }
        let mut out = BTreeMap::new();
        for (file_target, mut keys) in files {
            keys.sort_by(|a, b| b.features.len().cmp(&a.features.len()).then(a.cmp(b)));
            let name = self.archive_name(&file_target);
            if name.len() > NAME_MAX {
                continue;
            }
            let (spec, entries) = self.build_archive(&a.objects, &file_target, &keys);
            if entries > 0 {
                let decoded = spec.blobs.iter().any(|b| matches!(b, BlobData::Decoded { .. }));
                let compressed = match compression {
                    ArchiveCompression::None => false,
                    ArchiveCompression::Zstd => true,
                    ArchiveCompression::Auto => decoded,
                };
                let layout = spec.layout_none();
                out.insert(name.clone(), Arc::new(ArchivePlan { name, keys, spec, layout, compressed, compressed_len: OnceLock::new(), entries }));
            }
        }
        out
    }

    /// The code object the fat runtime would pick from `objs` for a device
    /// whose ISA is exactly `device`.
    pub fn best_for<'a>(objs: &'a [CodeObject], device: &TargetId) -> Option<&'a CodeObject> {
        let mut best: Option<(u32, &CodeObject)> = None;
        for o in objs {
            let Ok(t) = TargetId::parse(&o.arch) else { continue };
            if let Some(rank) = device.accepts(&t) {
                if best.is_none_or(|(r, _)| rank > r) {
                    best = Some((rank, o));
                }
            }
        }
        best.map(|(_, o)| o)
    }

    fn build_archive(&self, objects: &[Vec<CodeObject>], file_target: &str, keys: &[TargetId]) -> (ArchiveSpec, usize) {
        let mut spec = ArchiveSpec {
            group_name: self.group.clone(),
            gfx_arch_family: file_target.to_string(),
            gfx_arches: keys.iter().map(ToString::to_string).collect(),
            ..ArchiveSpec::default()
        };
        // One blob per distinct code object, shared by every entry using it.
        let mut ordinals: HashMap<ObjectLocation, u64> = HashMap::new();
        let mut blobs: HashMap<u64, Arc<BlobRef>> = HashMap::new();
        let mut entries = 0;
        for (w, objs) in self.plan.wrappers.iter().zip(objects) {
            let key = format!("{}#{}", self.marker.kernel_name, w.index);
            for k in keys {
                let Some(o) = Self::best_for(objs, k) else { continue };
                let next = spec.blobs.len() as u64;
                let ordinal = *ordinals.entry(o.location.clone()).or_insert_with(|| {
                    spec.blobs.push(match &o.location {
                        ObjectLocation::Range { offset, len } => BlobData::Source { offset: *offset, len: *len },
                        ObjectLocation::InCcob { ccob_at, ccob_len, header, offset, len } => {
                            let blob = blobs.entry(*ccob_at).or_insert_with(|| Arc::new(bundle::ccob::blob_ref(*ccob_at, *ccob_len, header))).clone();
                            BlobData::Decoded { blob, offset: *offset, len: *len }
                        }
                    });
                    next
                });
                spec.add(&key, &k.to_string(), ordinal);
                entries += 1;
            }
        }
        (spec, entries)
    }
}
