//! Choosing a code object for a device: what the fat runtime does for
//! each wrapper, and so what every archive and tool must reproduce.

use crate::formats::bundle::CodeObject;
use crate::formats::target::{device_variants, runtime_generic_of, Selection, TargetId};

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

/// The code object the fat runtime would pick from `objs` for a device
/// whose ISA is exactly `device`, in its order (docs/research/spirv.md §2):
/// 1. native: the best compatible object of the device's processor;
/// 2. generic: one of the family the runtime itself knows
///    ([`runtime_generic_of`]);
/// 3. SPIR-V: the wrapper's portable object, which the runtime JIT-compiles
///    (the first one in bundle order);
/// 4. kpackfs's extension: a generic object of a family only LLVM's table
///    names (`gfx12-5-generic` on gfx1250, `gfx9-4-generic` on gfx940),
///    where the fat runtime would load nothing at all.
///
/// Within a step the object naming more features wins, then the first.
/// The caller tells a SPIR-V choice by [`CodeObject::is_spirv`].
pub fn best_for<'a>(objs: &'a [CodeObject], device: &TargetId) -> Option<&'a CodeObject> {
    let runtime_generic = runtime_generic_of(&device.processor);
    let mut best: Option<(u32, &CodeObject)> = None;
    for o in objs {
        let rank = if o.is_spirv() {
            Some(SPIRV_RANK)
        } else {
            let Ok(t) = TargetId::parse(&o.arch) else { continue };
            device.accepts(&t).map(|r| match r {
                // `accepts`: native 1000 + features, generic 0 + features.
                r if r >= 1000 => NATIVE_RANK + r - 1000,
                r if runtime_generic == Some(t.processor.as_str()) => GENERIC_RANK + r,
                r => r,
            })
        };
        if let Some(rank) = rank {
            if best.is_none_or(|(r, _)| rank > r) {
                best = Some((rank, o));
            }
        }
    }
    best.map(|(_, o)| o)
}

const NATIVE_RANK: u32 = 3000;
const GENERIC_RANK: u32 = 2000;
const SPIRV_RANK: u32 = 1000;

/// What an archive entry under arch key `key` holds for a wrapper with
/// objects `objs`. For a device key, the fat runtime's choice unless that
/// is SPIR-V: an archive of a device target never hands SPIR-V bytes to a
/// runtime that loads the blob as an ELF; the wrapper gets no entry there
/// and the loader falls through to the SPIR-V archive. For the SPIR-V key,
/// the wrapper's SPIR-V object (the first in bundle order).
pub fn choice_for_key<'a>(objs: &'a [CodeObject], key: &TargetId) -> Option<&'a CodeObject> {
    if key.is_spirv() {
        return objs.iter().find(|o| o.is_spirv());
    }
    best_for(objs, key).filter(|o| !o.is_spirv())
}

/// Whether the fat runtime would take the SPIR-V object of some wrapper
/// (`objects`, one list per wrapper) on some device `selection` serves:
/// the condition for exposing the binary's `_amdgcnspirv` archive.
pub fn spirv_needed(objects: &[Vec<CodeObject>], selection: &Selection) -> bool {
    let devices: Vec<TargetId> = selection.targets.iter().flat_map(device_variants).collect();
    objects.iter().filter(|objs| objs.iter().any(CodeObject::is_spirv)).any(|objs| devices.iter().any(|d| best_for(objs, d).is_some_and(CodeObject::is_spirv)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::bundle::ObjectLocation;

    /// Objects tagged by their offset, in bundle order.
    fn objs(archs: &[&str]) -> Vec<CodeObject> {
        archs
            .iter()
            .enumerate()
            .map(|(i, a)| CodeObject {
                chunk_index: 0,
                entry_id: format!("x--{a}"),
                arch: a.to_string(),
                location: ObjectLocation::Range { offset: i as u64, len: 1 },
            })
            .collect()
    }

    fn pick(archs: &[&str], device: &str) -> Option<String> {
        let o = objs(archs);
        let index = |c: &CodeObject| o.iter().position(|x| x == c).unwrap_or(usize::MAX);
        best_for(&o, &TargetId::parse(device).unwrap()).map(|c| format!("{}@{}", c.arch, index(c)))
    }

    /// By hand from the runtime's order (docs/research/spirv.md §2):
    /// (objects in bundle order, device, expected "arch@index").
    #[test]
    fn the_runtimes_order() {
        let table: &[(&[&str], &str, Option<&str>)] = &[
            (&["amdgcnspirv", "gfx1100"], "gfx1100", Some("gfx1100@1")),
            (&["amdgcnspirv", "gfx11-generic"], "gfx1101", Some("gfx11-generic@1")),
            (&["gfx11-generic", "amdgcnspirv"], "gfx1030", Some("amdgcnspirv@1")),
            (&["gfx12-5-generic", "amdgcnspirv"], "gfx1250", Some("amdgcnspirv@1")),
            (&["gfx9-4-generic", "amdgcnspirv"], "gfx940", Some("amdgcnspirv@1")),
            (&["gfx9-4-generic", "amdgcnspirv"], "gfx942", Some("gfx9-4-generic@0")),
            (&["gfx12-5-generic"], "gfx1250", Some("gfx12-5-generic@0")),
            (&["gfx90a:xnack+", "amdgcnspirv"], "gfx90a:sramecc+:xnack-", Some("amdgcnspirv@1")),
            (&["gfx90a:xnack+", "amdgcnspirv"], "gfx90a:sramecc+:xnack+", Some("gfx90a:xnack+@0")),
            (&["amdgcnspirv", "amdgcnspirv"], "gfx1030", Some("amdgcnspirv@0")),
            (&["gfx1100"], "gfx1030", None),
        ];
        for (archs, device, want) in table {
            assert_eq!(pick(archs, device).as_deref(), *want, "{archs:?} on {device}");
        }
    }

    #[test]
    fn device_keys_never_get_spirv_and_the_spirv_key_only_spirv() {
        let o = objs(&["gfx90a:xnack+", "amdgcnspirv"]);
        let key = |s: &str| TargetId::parse(s).unwrap();
        assert!(choice_for_key(&o, &key("gfx90a:xnack-")).is_none());
        assert_eq!(choice_for_key(&o, &key("gfx90a:xnack+")).map(|c| c.arch.as_str()), Some("gfx90a:xnack+"));
        assert_eq!(choice_for_key(&o, &TargetId::spirv()).map(|c| c.arch.as_str()), Some("amdgcnspirv"));
        assert!(choice_for_key(&objs(&["gfx90a"]), &TargetId::spirv()).is_none());
        // A bare gfx90a selection serves xnack- devices, which take SPIR-V.
        let sel = |s: &str| Selection::parse(s).unwrap();
        assert!(spirv_needed(std::slice::from_ref(&o), &sel("gfx90a")));
        assert!(!spirv_needed(std::slice::from_ref(&o), &sel("gfx90a:xnack+")));
        assert!(spirv_needed(&[objs(&["gfx1100"]), objs(&["amdgcnspirv"])], &sel("gfx1100")));
        assert!(!spirv_needed(&[objs(&["gfx1100", "amdgcnspirv"])], &sel("gfx1100")));
    }
}
