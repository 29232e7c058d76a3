//! The archives of a fat binary: which exist for a selection, what each
//! holds (for every wrapper and arch key, the code object the fat runtime
//! would choose), how they are named and stored.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use crate::formats::bundle::{self, CodeObject, ObjectLocation};
use crate::formats::kpack::{ArchiveName, ArchiveSpec, BlobData};
use crate::formats::target::{Selection, TargetId, SPIRV_ARCH};
use crate::layout::{Encoded, Layout};

use crate::formats::host::WrapperRef;

use super::select::{choice_for_key, spirv_needed, Objects};

/// Longest file name the view can serve (Linux NAME_MAX, NTFS's limit).
pub(super) const NAME_MAX: usize = 255;
/// Room kept for `_<target>.kpack` in archive names
/// (`_gfx10-3-generic:sramecc+:xnack+.kpack` is 38 bytes).
pub(super) const MAX_TARGET_SUFFIX: usize = 44;

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

/// One view's archives of a binary.
#[derive(Debug)]
pub struct Archives {
    pub objects: Arc<Objects>,
    /// Archives exposed for the selection, by file name.
    pub by_name: BTreeMap<String, Arc<ArchivePlan>>,
}

/// What makes one view's archives differ from another's.
pub(super) fn view_key(selection: &Selection, naming: ArchiveNaming, compression: ArchiveCompression) -> String {
    format!("{selection}/{naming:?}/{compression:?}")
}

/// What the archive plan needs of a fat binary.
pub(super) struct ArchiveSource<'a> {
    /// The archive group (the binary's file name).
    pub group: &'a str,
    /// The marker's kernel name, which keys the binary's TOC entries.
    pub kernel_name: &'a str,
    pub wrappers: &'a [WrapperRef],
}

impl ArchiveSource<'_> {
    pub(super) fn plan_archives(
        &self,
        a: &Objects,
        selection: &Selection,
        naming: ArchiveNaming,
        compression: ArchiveCompression,
    ) -> BTreeMap<String, Arc<ArchivePlan>> {
        let selected: Vec<&TargetId> = a.targets.iter().filter(|t| selection.selects(t)).collect();
        let mut files: BTreeMap<String, Vec<TargetId>> = BTreeMap::new();
        for t in selected {
            let file_target = match naming {
                ArchiveNaming::TargetId => t.to_string(),
                ArchiveNaming::Processor => t.processor.clone(),
            };
            files.entry(file_target).or_default().push(t.clone());
        }
        // A SPIR-V archive goes with the others only where some wrapper's
        // choice for a selected device is its SPIR-V object.
        if spirv_needed(&a.objects, selection) {
            files.insert(SPIRV_ARCH.to_string(), vec![TargetId::spirv()]);
        }
        let mut out = BTreeMap::new();
        for (file_target, mut keys) in files {
            keys.sort_by(|a, b| b.features.len().cmp(&a.features.len()).then(a.cmp(b)));
            let name = ArchiveName::new(self.group, file_target.as_str()).to_string();
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

    fn build_archive(&self, objects: &[Vec<CodeObject>], file_target: &str, keys: &[TargetId]) -> (ArchiveSpec, usize) {
        let mut spec = ArchiveSpec {
            group_name: self.group.to_string(),
            gfx_arch_family: file_target.to_string(),
            gfx_arches: keys.iter().map(ToString::to_string).collect(),
            ..ArchiveSpec::default()
        };
        // One blob per distinct code object, shared by every entry using it.
        let mut ordinals: HashMap<ObjectLocation, u64> = HashMap::new();
        let mut blobs: HashMap<u64, Arc<Encoded>> = HashMap::new();
        let mut entries = 0;
        for (w, objs) in self.wrappers.iter().zip(objects) {
            let key = format!("{}#{}", self.kernel_name, w.index);
            for k in keys {
                let Some(o) = choice_for_key(objs, k) else { continue };
                let next = spec.blobs.len() as u64;
                let ordinal = *ordinals.entry(o.location.clone()).or_insert_with(|| {
                    spec.blobs.push(match &o.location {
                        ObjectLocation::Range { offset, len } => BlobData::Source { offset: *offset, len: *len },
                        ObjectLocation::InCcob { ccob_at, ccob_len, header, offset, len } => {
                            let blob = blobs.entry(*ccob_at).or_insert_with(|| Arc::new(bundle::ccob::encoded(*ccob_at, *ccob_len, header))).clone();
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
