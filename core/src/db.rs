//! Architecture-specific database files (FORMATS.md §7, newest rules from
//! UPSTREAM-NEWEST.md §7): Tensile libraries of rocBLAS / hipBLASLt /
//! hipSPARSELt, MIOpen databases and CK libraries, AOTriton kernel images.
//! The view hides those of unselected targets; files whose names carry no
//! architecture are generic and always shown.

use crate::target::Selection;

/// The architecture a database file belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbArch {
    /// One processor, optionally with Tensile's `-xnack±` qualifier.
    Processor { processor: String, xnack: Option<bool> },
    /// A family named by a prefix (`aotriton.images/amd-gfx11xx` → `gfx11`).
    Family(String),
}

impl DbArch {
    pub fn selected_by(&self, sel: &Selection) -> bool {
        match self {
            DbArch::Processor { processor, xnack } => sel.selects_db(processor, *xnack),
            DbArch::Family(prefix) => sel.targets.iter().any(|t| t.processor.starts_with(prefix.as_str())),
        }
    }
}

/// MIOpen names run the arch straight into a CU count (`gfx90878.db`), so
/// known processors are matched by prefix first (upstream's fixed list).
const MIOPEN_ARCHS: &[&str] = &[
    "gfx1250-strict", "gfx1250", "gfx1201", "gfx1200", "gfx1151", "gfx1150", "gfx1102", "gfx1101", "gfx1100",
    "gfx1030", "gfx1010", "gfx950", "gfx942", "gfx941", "gfx940", "gfx90a", "gfx908", "gfx906", "gfx900",
];

/// First `gfx\d+[a-z]*(-strict)?(-xnack[+-])?` in `s`.
fn arch_in(s: &str) -> Option<DbArch> {
    let b = s.as_bytes();
    let mut from = 0;
    while let Some(i) = s[from..].find("gfx").map(|i| i + from) {
        let mut j = i + 3;
        let digits = j;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        if j == digits {
            from = i + 3;
            continue;
        }
        while j < b.len() && b[j].is_ascii_lowercase() {
            j += 1;
        }
        if s[j..].starts_with("-strict") {
            j += "-strict".len();
        }
        let processor = s[i..j].to_string();
        let xnack = match s.get(j..j + 7) {
            Some("-xnack+") => Some(true),
            Some("-xnack-") => Some(false),
            _ => None,
        };
        return Some(DbArch::Processor { processor, xnack });
    }
    None
}

fn miopen_arch(name: &str) -> Option<DbArch> {
    let i = name.find("gfx")?;
    let rest = &name[i..];
    for a in MIOPEN_ARCHS {
        if rest.starts_with(a) && !rest[a.len()..].starts_with(|c: char| c.is_ascii_lowercase()) {
            return Some(DbArch::Processor { processor: a.to_string(), xnack: None });
        }
    }
    arch_in(rest)
}

/// Classifies `rel` (root-relative, `/`-separated). `None`: not an
/// arch-specific database file (generic or not a database at all).
pub fn classify(rel: &str) -> Option<DbArch> {
    let comps: Vec<&str> = rel.split('/').collect();
    let name = comps.last().copied().unwrap_or_default();

    // Tensile: rocblas/library, hipblaslt/library, hipsparselt/library.
    for lib in ["rocblas", "hipblaslt", "hipsparselt"] {
        if let Some(pos) = comps.windows(2).position(|w| w[0] == lib && w[1] == "library") {
            // Per-arch directory layout: library/<arch>/... holds only that arch.
            if let Some(dir) = comps.get(pos + 2).filter(|_| comps.len() > pos + 3) {
                if dir.starts_with("gfx") {
                    if let Some(a) = arch_in(dir) {
                        return Some(a);
                    }
                }
            }
            if [".co", ".hsaco", ".dat"].iter().any(|s| name.ends_with(s)) {
                return arch_in(name);
            }
            return None;
        }
    }

    // MIOpen databases.
    if rel.contains("miopen/db") && [".model", ".kdb", ".db.txt", ".fdb.txt"].iter().any(|s| name.ends_with(s)) {
        return miopen_arch(name);
    }
    // MIOpen's per-arch CK libraries.
    let stem = name.strip_prefix("lib").unwrap_or(name);
    if stem.starts_with("MIOpenCK") && (name.ends_with(".so") || name.ends_with(".dll") || name.contains(".so.")) {
        if let Some(u) = stem.rfind("_gfx") {
            return arch_in(&stem[u + 1..]);
        }
    }

    // AOTriton: aotriton/kernels/<gfx…>/…
    if let Some(pos) = comps.windows(2).position(|w| w[0] == "aotriton" && w[1] == "kernels") {
        if let Some(dir) = comps.get(pos + 2).filter(|d| d.starts_with("gfx")) {
            return arch_in(dir);
        }
        return None;
    }
    // Newer AOTriton: aotriton.images/amd-<dir>/, with xx/x wildcards.
    if let Some(pos) = comps.iter().position(|c| *c == "aotriton.images") {
        if let Some(dir) = comps.get(pos + 1).and_then(|d| d.strip_prefix("amd-")).filter(|_| comps.len() > pos + 2) {
            if let Some(prefix) = dir.strip_suffix("xx").or_else(|| dir.strip_suffix('x')) {
                return Some(DbArch::Family(prefix.to_string()));
            }
            return arch_in(dir);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(processor: &str, xnack: Option<bool>) -> Option<DbArch> {
        Some(DbArch::Processor { processor: processor.into(), xnack })
    }

    #[test]
    fn rules() {
        assert_eq!(classify("lib/rocblas/library/TensileLibrary_gfx90a.dat"), p("gfx90a", None));
        assert_eq!(classify("lib/rocblas/library/Kernels.so-000-gfx1030.hsaco"), p("gfx1030", None));
        assert_eq!(classify("lib/rocblas/library/TensileLibrary_lazy_gfx90a-xnack+.co"), p("gfx90a", Some(true)));
        assert_eq!(classify("lib/rocblas/library/TensileLibrary_fallback.dat"), None);
        assert_eq!(classify("lib/rocblas/library/TensileManifest.txt"), None);
        assert_eq!(classify("lib/hipblaslt/library/gfx942/TensileManifest.txt"), p("gfx942", None));
        assert_eq!(classify("share/miopen/db/gfx942.tn.model"), p("gfx942", None));
        assert_eq!(classify("share/miopen/db/gfx908_ConvAsm1x1U_decoder.ktn.model"), p("gfx908", None));
        assert_eq!(classify("share/miopen/db/gfx90878.db.txt"), p("gfx908", None));
        assert_eq!(classify("share/miopen/db/gfx1030_36.kdb"), p("gfx1030", None));
        assert_eq!(classify("share/miopen/db/readme.txt"), None);
        assert_eq!(classify("lib/libMIOpenCKGroupedConv_gfx942.so"), p("gfx942", None));
        assert_eq!(classify("lib/aotriton/kernels/gfx90a/flash.hsaco"), p("gfx90a", None));
        assert_eq!(classify("lib/aotriton/kernels/README"), None);
        assert_eq!(classify("lib/aotriton.images/amd-gfx11xx/flash/a.aks2"), Some(DbArch::Family("gfx11".into())));
        assert_eq!(classify("lib/aotriton.images/amd-gfx942/flash/a.aks2"), p("gfx942", None));
        assert_eq!(classify("lib/libfoo_gfx90a.so"), None);
        assert_eq!(classify("bin/gfx90a.dat"), None);
    }

    #[test]
    fn selection() {
        let s = Selection::parse("gfx90a:xnack-").unwrap();
        assert!(classify("lib/rocblas/library/TensileLibrary_gfx90a.dat").unwrap().selected_by(&s));
        assert!(!classify("lib/rocblas/library/TensileLibrary_gfx90a-xnack+.dat").unwrap().selected_by(&s));
        assert!(!classify("lib/rocblas/library/TensileLibrary_gfx1030.dat").unwrap().selected_by(&s));
        let s = Selection::parse("gfx1100").unwrap();
        assert!(DbArch::Family("gfx11".into()).selected_by(&s));
    }
}
