//! AMDGPU target IDs (`gfx90a:sramecc+:xnack-`), the loader's compatibility
//! rules, and the user's target selection.
//!
//! Two notions matter and are easy to confuse:
//! * a *code object* target says what the object was built for; a feature it
//!   omits means "Any" (works either way);
//! * a *device* ISA says what the GPU is; the loader probes code objects for
//!   every feature subset of it (FORMATS.md §6.3).

use std::fmt;

use thiserror::Error;

/// Prefix the HSA runtime puts in front of ISA names.
pub const HSA_PREFIX: &str = "amdgcn-amd-amdhsa--";

#[derive(Debug, Error, PartialEq, Eq)]
pub enum TargetError {
    #[error("empty target")]
    Empty,
    #[error("target {0:?}: processor must look like gfxNNN (e.g. gfx90a, gfx1100, gfx9-4-generic)")]
    BadProcessor(String),
    #[error("target {0:?}: feature {1:?} must be a name followed by + or - (e.g. xnack-)")]
    BadFeature(String, String),
    #[error("target {0:?}: feature {1:?} given twice")]
    DuplicateFeature(String, String),
}

/// A parsed target ID: processor plus ordered `(feature, on)` pairs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TargetId {
    pub processor: String,
    pub features: Vec<(String, bool)>,
}

impl TargetId {
    /// Parses `gfx90a`, `gfx90a:xnack-`, `amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-`.
    /// Features keep the order given (the loader's probing depends on it).
    pub fn parse(s: &str) -> Result<TargetId, TargetError> {
        let s = s.strip_prefix(HSA_PREFIX).unwrap_or(s);
        if s.is_empty() {
            return Err(TargetError::Empty);
        }
        let mut parts = s.split(':');
        let processor = parts.next().unwrap_or_default();
        if !valid_processor(processor) {
            return Err(TargetError::BadProcessor(s.to_string()));
        }
        let mut features: Vec<(String, bool)> = Vec::new();
        for f in parts {
            let (name, on) = match (f.strip_suffix('+'), f.strip_suffix('-')) {
                (Some(n), _) => (n, true),
                (_, Some(n)) => (n, false),
                _ => return Err(TargetError::BadFeature(s.to_string(), f.to_string())),
            };
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric()) {
                return Err(TargetError::BadFeature(s.to_string(), f.to_string()));
            }
            if features.iter().any(|(n, _)| n == name) {
                return Err(TargetError::DuplicateFeature(s.to_string(), name.to_string()));
            }
            features.push((name.to_string(), on));
        }
        Ok(TargetId { processor: processor.to_string(), features })
    }

    pub fn bare(processor: &str) -> TargetId {
        TargetId { processor: processor.to_string(), features: Vec::new() }
    }

    /// The SPIR-V pseudo-target [`SPIRV_ARCH`] as an arch key. [`TargetId::parse`]
    /// refuses it on purpose: it is never a device or a selectable target.
    pub fn spirv() -> TargetId {
        TargetId::bare(SPIRV_ARCH)
    }

    pub fn is_spirv(&self) -> bool {
        self.processor == SPIRV_ARCH
    }

    pub fn feature(&self, name: &str) -> Option<bool> {
        self.features.iter().find(|(n, _)| n == name).map(|(_, on)| *on)
    }

    pub fn is_generic(&self) -> bool {
        self.processor.ends_with("-generic")
    }

    /// Whether a code object built for `obj` runs on a device whose ISA is
    /// exactly `self` (features `self` omits are treated as unknown, so an
    /// object requiring them does not qualify). Returns a rank: higher is a
    /// better match — native beats generic, then more specified features.
    pub fn accepts(&self, obj: &TargetId) -> Option<u32> {
        let native = if obj.processor == self.processor {
            true
        } else if generic_of(&self.processor) == Some(obj.processor.as_str()) {
            false
        } else {
            return None;
        };
        for (name, on) in &obj.features {
            if self.feature(name) != Some(*on) {
                return None;
            }
        }
        Some(if native { 1000 } else { 0 } + obj.features.len() as u32)
    }
}

impl fmt::Display for TargetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.processor)?;
        for (name, on) in &self.features {
            write!(f, ":{}{}", name, if *on { '+' } else { '-' })?;
        }
        Ok(())
    }
}

impl std::str::FromStr for TargetId {
    type Err = TargetError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TargetId::parse(s)
    }
}

fn valid_processor(p: &str) -> bool {
    let Some(rest) = p.strip_prefix("gfx") else { return false };
    !rest.is_empty() && rest.as_bytes()[0].is_ascii_digit() && rest.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The arch string of an offload-bundle entry ID: the text after the last
/// `--` (features included), or `None` when there is no `--` (FORMATS.md §1.2).
pub fn arch_of_entry_id(id: &str) -> Option<&str> {
    id.rfind("--").map(|i| &id[i + 2..])
}

/// Host entries (`host-x86_64-unknown-linux[-gnu]`) carry no device code.
pub fn is_host_entry(id: &str) -> bool {
    id.starts_with("host")
}

/// The identity kpackfs gives a portable SPIR-V code object: its arch key,
/// the `<target>` of its archive name (`<binary>_amdgcnspirv.kpack`) and the
/// name the loader is asked for after the native and generic ISAs
/// (docs/research/spirv.md §4–5). It is no device and has no features.
pub const SPIRV_ARCH: &str = "amdgcnspirv";

/// Whether a bundle entry ID names a portable SPIR-V code object the HIP
/// runtime would JIT-compile: offload kind `hip`, `hipv4` or `hcc` (the
/// kinds comgr accepts), triple `spirv64-amd-amdhsa` with an empty or
/// `unknown` environment (clang writes the first, the runtime also asks for
/// the second), processor `amdgcnspirv` and no features (comgr refuses
/// features on SPIR-V names). Any other spelling, such as
/// `hip-amdgcn-amd-amdhsa--amdgcnspirv`, is not SPIR-V to the runtime.
pub fn is_spirv_entry(id: &str) -> bool {
    let Some((kind, rest)) = id.split_once('-') else { return false };
    matches!(kind, "hip" | "hipv4" | "hcc") && matches!(rest, "spirv64-amd-amdhsa--amdgcnspirv" | "spirv64-amd-amdhsa-unknown-amdgcnspirv")
}

/// The generic family the HIP runtime itself falls back to for a device
/// (clr's own table, docs/research/spirv.md §2 item 4). It is
/// [`generic_of`] without gfx940/gfx941 and without `gfx12-5-generic`: on
/// those devices the fat runtime goes from the native object straight to
/// SPIR-V, so a view must too.
pub fn runtime_generic_of(processor: &str) -> Option<&'static str> {
    match processor {
        "gfx940" | "gfx941" | "gfx1250" | "gfx1251" => None,
        p => generic_of(p),
    }
}

/// Generic processor family of a concrete processor, per LLVM's
/// AMDGPUUsage table. gfx908/gfx90a are deliberately absent: no generic
/// target covers them.
pub fn generic_of(processor: &str) -> Option<&'static str> {
    Some(match processor {
        "gfx900" | "gfx902" | "gfx904" | "gfx906" | "gfx909" | "gfx90c" => "gfx9-generic",
        "gfx940" | "gfx941" | "gfx942" | "gfx950" => "gfx9-4-generic",
        "gfx1010" | "gfx1011" | "gfx1012" | "gfx1013" => "gfx10-1-generic",
        "gfx1030" | "gfx1031" | "gfx1032" | "gfx1033" | "gfx1034" | "gfx1035" | "gfx1036" => "gfx10-3-generic",
        "gfx1100" | "gfx1101" | "gfx1102" | "gfx1103" | "gfx1150" | "gfx1151" | "gfx1152" | "gfx1153" => "gfx11-generic",
        "gfx1200" | "gfx1201" => "gfx12-generic",
        "gfx1250" | "gfx1251" => "gfx12-5-generic",
        _ => return None,
    })
}

/// Whether a device of this processor has an `sramecc` setting in its target
/// ID (the HSA runtime's ISA registry: the GFX9 data-center parts).
pub fn has_sramecc(processor: &str) -> bool {
    matches!(processor, "gfx906" | "gfx908" | "gfx90a" | "gfx940" | "gfx941" | "gfx942" | "gfx950")
}

/// Whether a device of this processor has an `xnack` setting in its target
/// ID (the HSA runtime's ISA registry: GFX8 APUs, GFX9, GFX10.1).
pub fn has_xnack(processor: &str) -> bool {
    matches!(
        processor,
        "gfx801"
            | "gfx810"
            | "gfx900"
            | "gfx902"
            | "gfx904"
            | "gfx906"
            | "gfx908"
            | "gfx909"
            | "gfx90a"
            | "gfx90c"
            | "gfx940"
            | "gfx941"
            | "gfx942"
            | "gfx950"
            | "gfx1010"
            | "gfx1011"
            | "gfx1012"
            | "gfx1013"
    )
}

/// The loader's list of target strings to probe for one ISA string, most
/// specific first (FORMATS.md §6.3): every feature subset in descending
/// bitmask order, the rightmost feature being the low bit. Works on the
/// raw string so that unusual spellings are probed exactly as the loader
/// would.
pub fn compatible_targets(isa: &str) -> Vec<String> {
    let isa = isa.strip_prefix(HSA_PREFIX).unwrap_or(isa);
    let mut parts = isa.split(':');
    let processor = parts.next().unwrap_or_default();
    let features: Vec<&str> = parts.filter(|p| !p.is_empty()).collect();
    let n = features.len().min(16);
    let mut out = Vec::with_capacity(1 << n);
    for mask in (0u32..(1u32 << n)).rev() {
        let mut s = processor.to_string();
        for (j, f) in features.iter().take(n).enumerate() {
            if mask & (1 << (n - 1 - j)) != 0 {
                s.push(':');
                s.push_str(f);
            }
        }
        out.push(s);
    }
    out
}

/// The device ISA list the HIP runtime hands to the loader for one device:
/// the native ISA, where the runtime knows one its generic family with the
/// same features (FORMATS.md §2.4), and last the portable SPIR-V identity
/// [`SPIRV_ARCH`] — the order of the fat runtime's own choice, which a
/// runtime able to JIT SPIR-V from archives (rocm-systems #11040) keeps
/// (docs/research/spirv.md §5.4).
pub fn device_arch_list(isa: &TargetId) -> Vec<TargetId> {
    if isa.is_spirv() {
        // The pseudo-device "no native object" of `verify` and tests.
        return vec![isa.clone()];
    }
    let mut v = vec![isa.clone()];
    if let Some(g) = runtime_generic_of(&isa.processor) {
        v.push(TargetId { processor: g.to_string(), features: isa.features.clone() });
    }
    v.push(TargetId::spirv());
    v
}

/// The device ISAs a GPU of `t`'s processor can report when `t` names
/// none of its features (`gfx90a` → `gfx90a:sramecc+:xnack-`,
/// `gfx90a:sramecc+:xnack+`, `gfx90a:sramecc-:xnack-`,
/// `gfx90a:sramecc-:xnack+`; the usual setting first), in the runtime's
/// feature order; `t` itself when it names features or the processor has
/// none. The loader is always handed a fully named ISA, so a bare name
/// stands for "whichever of these my GPU is".
pub fn device_variants(t: &TargetId) -> Vec<TargetId> {
    if !t.features.is_empty() {
        return vec![t.clone()];
    }
    let sram: &[Option<bool>] = if has_sramecc(&t.processor) { &[Some(true), Some(false)] } else { &[None] };
    let xnack: &[Option<bool>] = if has_xnack(&t.processor) { &[Some(false), Some(true)] } else { &[None] };
    let mut out = Vec::new();
    for s in sram {
        for x in xnack {
            let mut v = TargetId::bare(&t.processor);
            v.features.extend(s.map(|on| ("sramecc".to_string(), on)));
            v.features.extend(x.map(|on| ("xnack".to_string(), on)));
            out.push(v);
        }
    }
    out
}

/// The targets a view serves, as given by the user (`gfx90a:xnack-,gfx1030`).
///
/// A bare processor selects every feature variant of it (so the view serves
/// any such device); one with features selects what the loader accepts for a
/// device with exactly those features. Generic code objects of the
/// processor's family are selected along with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    pub targets: Vec<TargetId>,
}

impl Selection {
    pub fn parse(s: &str) -> Result<Selection, TargetError> {
        let mut targets = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let t = TargetId::parse(part)?;
            if !targets.contains(&t) {
                targets.push(t);
            }
        }
        if targets.is_empty() {
            return Err(TargetError::Empty);
        }
        Ok(Selection { targets })
    }

    /// Whether code objects built for `obj` belong in the view.
    pub fn selects(&self, obj: &TargetId) -> bool {
        self.targets.iter().any(|sel| {
            if sel.features.is_empty() {
                // The processor itself (a generic selection such as
                // `gfx9-4-generic` matches its own objects this way), or
                // the generic family a specific processor can also run.
                obj.processor == sel.processor || generic_of(&sel.processor) == Some(obj.processor.as_str())
            } else {
                sel.accepts(obj).is_some()
            }
        })
    }

    /// Whether a database file for `processor` (with an optional xnack
    /// setting from Tensile's `-xnack±` naming) belongs in the view.
    pub fn selects_db(&self, processor: &str, xnack: Option<bool>) -> bool {
        self.targets.iter().any(|sel| {
            sel.processor == processor
                && match (xnack, sel.feature("xnack")) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                }
        })
    }
}

impl fmt::Display for Selection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.targets.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{t}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "target_tests.rs"]
mod tests;

/// The name in `known` nearest to `name` (edit distance), for "did you
/// mean …?" hints; `None` when nothing is close (more than a third of the
/// longer name, at least 2, would have to change). Ties go to the first.
pub fn suggest_target<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    fn distance(a: &str, b: &str) -> usize {
        let b: Vec<char> = b.chars().collect();
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut prev = row[0];
            row[0] = i + 1;
            for (j, cb) in b.iter().enumerate() {
                let cur = row[j + 1];
                row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
                prev = cur;
            }
        }
        row[b.len()]
    }
    let mut best: Option<(usize, &str)> = None;
    for k in known {
        let d = distance(name, k);
        let limit = (name.chars().count().max(k.chars().count()) / 3).max(2);
        if d <= limit && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, k));
        }
    }
    best.map(|(_, k)| k)
}

#[cfg(test)]
mod suggest_tests {
    use super::suggest_target;

    #[test]
    fn nearest_names() {
        let known = ["gfx1030", "gfx1100", "gfx90a"];
        assert_eq!(suggest_target("gfx90", known), Some("gfx90a"));
        // A tie goes to the first name given.
        assert_eq!(suggest_target("gfx90", ["gfx906", "gfx90a"]), Some("gfx906"));
        assert_eq!(suggest_target("gfx1101", known), Some("gfx1100"));
        assert_eq!(suggest_target("gfx942", ["gfx1030"]), None);
        assert_eq!(suggest_target("x", Vec::<&str>::new()), None);
    }
}
