//! Choosing a code object for a device: what the fat runtime does for
//! each wrapper, and so what every archive and tool must reproduce.

use crate::formats::bundle::CodeObject;
use crate::formats::target::TargetId;

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
