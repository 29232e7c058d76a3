//! Which archives a split writes and what each holds.
//!
//! One archive per target (or per processor, with processor naming) for the
//! whole component: every fat binary's wrappers are keyed
//! `<kernel_name>#<wrapper index>`, the key the runtime asks for. As in the
//! view, each archive is complete for the targets it lists: for every
//! wrapper and arch key it holds the code object the fat runtime would have
//! chosen for a device of exactly that ISA (the exact target, else the most
//! specific compatible one), so the first-match (Feb-2026) and the
//! fall-through (newest) loaders resolve the same object — except where
//! that object is SPIR-V: a wrapper has no entry in a device archive then,
//! and its SPIR-V object is in the component's `_amdgcnspirv` archive
//! (artifact `<component>_amdgcnspirv`, arch key `amdgcnspirv`), which a
//! runtime that JIT-compiles SPIR-V from archives asks for last.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::formats::bundle::{CodeObject, ObjectLocation};
use crate::formats::kpack::{ArchiveName, ArchiveSpec, BlobData};
use crate::formats::msgpack::Value;
use crate::formats::target::{Selection, TargetId, SPIRV_ARCH};
use crate::plan::{ArchiveCompression, ArchiveNaming};

use super::scan::{Entry, EntryKind, FileClass, Input};

/// One archive to write.
#[derive(Debug)]
pub struct PlannedArchive {
    /// The artifact it belongs to (the processor: `gfx90a`, `gfx1250-strict`).
    pub artifact: String,
    /// File name in `.kpack/`: `<component>_<target>.kpack`.
    pub name: String,
    pub spec: ArchiveSpec,
    /// Per ordinal: the entry (fat binary) and where the object lies in it.
    pub sources: Vec<(usize, ObjectLocation)>,
    pub entries: usize,
    /// Stored as `zstd-per-kernel` (else `none`).
    pub compressed: bool,
}

/// The processor an archive target belongs to, which names its artifact.
pub fn artifact_of(t: &TargetId) -> String {
    t.processor.clone()
}

/// Every code-object target of the input's fat binaries, sorted.
pub fn code_targets(entries: &[Entry]) -> BTreeSet<TargetId> {
    let mut out = BTreeSet::new();
    for e in entries {
        if let EntryKind::File(FileClass::Fat(_, objs)) = &e.kind {
            out.extend(objs.targets.iter().cloned());
        }
    }
    out
}

pub fn plan(
    entries: &[Entry],
    input: &Input,
    component: &str,
    selection: Option<&Selection>,
    naming: ArchiveNaming,
    compression: ArchiveCompression,
) -> Vec<PlannedArchive> {
    let mut files: BTreeMap<String, Vec<TargetId>> = BTreeMap::new();
    for t in code_targets(entries) {
        if selection.is_some_and(|s| !s.selects(&t)) {
            continue;
        }
        let file_target = match naming {
            ArchiveNaming::TargetId => t.to_string(),
            ArchiveNaming::Processor => t.processor.clone(),
        };
        files.entry(file_target).or_default().push(t);
    }
    // The component's `_amdgcnspirv` archive, holding every SPIR-V object
    // of the component (it serves every GPU): always without `--targets`,
    // else only when a selected device would take some SPIR-V object.
    let fat_objects = || {
        entries.iter().filter_map(|e| match &e.kind {
            EntryKind::File(FileClass::Fat(_, objs)) => Some(objs),
            _ => None,
        })
    };
    let has_spirv = fat_objects().any(|o| o.objects.iter().flatten().any(CodeObject::is_spirv));
    if has_spirv && selection.is_none_or(|s| fat_objects().any(|o| crate::plan::spirv_needed(&o.objects, s))) {
        files.insert(SPIRV_ARCH.to_string(), vec![TargetId::spirv()]);
    }
    let mut out = Vec::new();
    for (file_target, mut keys) in files {
        keys.sort_by(|a, b| b.features.len().cmp(&a.features.len()).then(a.cmp(b)));
        let artifact = artifact_of(&keys[0]);
        let mut spec = ArchiveSpec {
            group_name: component.to_string(),
            gfx_arch_family: file_target.clone(),
            gfx_arches: keys.iter().map(ToString::to_string).collect(),
            ..ArchiveSpec::default()
        };
        let mut sources = Vec::new();
        let mut ordinals: HashMap<(usize, ObjectLocation), u64> = HashMap::new();
        let mut entries_n = 0;
        for (ei, e) in entries.iter().enumerate() {
            let EntryKind::File(FileClass::Fat(fb, objs)) = &e.kind else { continue };
            let prefix = &input.prefixes[e.prefix];
            for (w, wobjs) in fb.plan.wrappers.iter().zip(&objs.objects) {
                let key = format!("{}#{}", fb.marker.kernel_name, w.index);
                for k in &keys {
                    let Some(o) = crate::plan::choice_for_key(wobjs, k) else { continue };
                    let next = spec.blobs.len() as u64;
                    let ordinal = *ordinals.entry((ei, o.location.clone())).or_insert_with(|| {
                        spec.blobs.push(blob_of(&o.location));
                        sources.push((ei, o.location.clone()));
                        next
                    });
                    spec.add(&key, &k.to_string(), ordinal);
                    // The reference splitter's entry metadata (ignored by
                    // the runtime; kept for tools that read it).
                    if let Some(e) = spec.toc.last_mut().and_then(|(_, v)| v.last_mut()) {
                        e.1.metadata = Some(Value::Map(vec![
                            (Value::from("target"), Value::from(o.entry_id.as_str())),
                            (Value::from("source_prefix"), Value::from(prefix.as_str())),
                        ]));
                    }
                    entries_n += 1;
                }
            }
        }
        if entries_n == 0 {
            continue;
        }
        let decodes = spec.blobs.iter().any(|b| matches!(b, BlobData::Decoded { .. }));
        let compressed = match compression {
            ArchiveCompression::None => false,
            ArchiveCompression::Zstd => true,
            ArchiveCompression::Auto => decodes,
        };
        let name = ArchiveName::new(component, file_target.as_str()).to_string();
        out.push(PlannedArchive { artifact, name, spec, sources, entries: entries_n, compressed });
    }
    out
}

/// The archive writer's view of an object: its length is all the TOC
/// needs; the bytes are fetched by the split's workers from `sources`.
fn blob_of(loc: &ObjectLocation) -> BlobData {
    match loc {
        ObjectLocation::Range { offset, len } => BlobData::Source { offset: *offset, len: *len },
        ObjectLocation::InCcob { ccob_at, ccob_len, header, offset, len } => {
            BlobData::Decoded { blob: std::sync::Arc::new(crate::formats::bundle::ccob::encoded(*ccob_at, *ccob_len, header)), offset: *offset, len: *len }
        }
    }
}
