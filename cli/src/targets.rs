//! One rule for every command that is given targets (`bake --arch`,
//! `split --targets`, `verify --targets`, `resolve --arch`, and `mount`'s
//! warning): a target that selects nothing the install carries is named,
//! with what the install does carry and the nearest name ("did you mean
//! gfx90a?"). Without it a typo (`gfx90`) silently produced a view whose
//! libraries had no device code at all, or a `verify` that checked nothing.

use std::collections::BTreeSet;
use std::path::Path;

use kpackfs_core::formats::target::{Selection, TargetId, SPIRV_ARCH};
use kpackfs_core::plan::db::Rules;

use super::Failure;

/// Whether code objects, archives or database files carried as `carried`
/// (an `archs` key: a target ID, or `gfx11*` for a database family) belong
/// to `sel`'s target `t`.
fn selects(t: &TargetId, carried: &str) -> bool {
    if let Some(prefix) = carried.strip_suffix('*') {
        return t.processor.starts_with(prefix);
    }
    let one = Selection { targets: vec![t.clone()] };
    TargetId::parse(carried).is_ok_and(|c| one.selects(&c))
}

/// The targets `root` carries (code objects of fat binaries, archives,
/// database files), scanning only until every target of `sel` has matched
/// something: on an install that has them, the scan stops early.
pub fn carried(root: &Path, rules: &Rules, sel: &Selection) -> BTreeSet<String> {
    let counts = |u: &kpackfs_core::tools::archs::TargetUse| u.code_objects > 0 || u.archives > 0 || u.db_files > 0;
    let all_found = |r: &kpackfs_core::tools::archs::ArchReport| sel.targets.iter().all(|t| r.targets.iter().any(|(c, u)| counts(u) && selects(t, c)));
    match kpackfs_core::tools::archs::archs_loaded_until(root, rules, &mut |r| all_found(r)) {
        Ok(r) => r.targets.into_iter().filter(|(_, u)| counts(u)).map(|(t, _)| t).collect(),
        Err(e) => {
            log::debug!("{}: scanning for targets: {e}", root.display());
            BTreeSet::new()
        }
    }
}

/// The targets of `sel` that select nothing in `carried`.
pub fn unmatched<'a>(sel: &'a Selection, carried: &BTreeSet<String>) -> Vec<&'a TargetId> {
    sel.targets.iter().filter(|t| !carried.iter().any(|c| selects(t, c))).collect()
}

/// Edit distance counting a swap of neighbours as one edit (optimal
/// string alignment; target names are short).
fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

/// The carried name nearest to `t`: the same processor's variants when the
/// install has that processor with other features (`gfx90a:xnack-` for
/// `gfx90a:xnack+`), else the processors one edit away, a swap of
/// neighbours included (`gfx906 or gfx90a` for `gfx90`, `gfx90a` for
/// `gfx09a`); a farther name is another GPU, not a typo.
pub fn suggest(t: &TargetId, carried: &BTreeSet<String>) -> Option<String> {
    let ids: Vec<TargetId> = carried.iter().filter_map(|c| TargetId::parse(c).ok()).collect();
    let same: Vec<String> = ids.iter().filter(|c| c.processor == t.processor).map(ToString::to_string).collect();
    if !same.is_empty() {
        return Some(same.join(" or "));
    }
    let procs: BTreeSet<&str> = ids.iter().map(|c| c.processor.as_str()).collect();
    let best = procs.iter().map(|p| distance(&t.processor, p)).min().filter(|d| *d <= 1)?;
    let near: Vec<&str> = procs.into_iter().filter(|p| distance(&t.processor, p) == best).collect();
    Some(near.join(" or "))
}

/// One line for the targets of `sel` that `place` does not carry, or
/// `None` when each matches something (or `place` carries nothing
/// target-specific, where every selection gives the same output).
/// `what` names the option (`--arch`, `--targets`).
pub fn not_carried(what: &str, sel: &Selection, place: &Path, carried: &BTreeSet<String>) -> Option<String> {
    if carried.is_empty() {
        return None;
    }
    let missing = unmatched(sel, carried);
    if missing.is_empty() {
        return None;
    }
    // SPIR-V objects are no match for a processor, but they do serve it.
    let spirv =
        if carried.contains(SPIRV_ARCH) { "; its portable SPIR-V code objects (amdgcnspirv) are served for it, JIT-compiled by the runtime" } else { "" };
    let names: Vec<String> = missing.iter().map(ToString::to_string).collect();
    let list: Vec<&str> = carried.iter().map(String::as_str).collect();
    let hints: Vec<String> = missing.iter().filter_map(|t| suggest(t, carried).map(|s| format!("{s} for {t}"))).collect();
    let hint = match hints.as_slice() {
        [] => String::new(),
        [one] if missing.len() == 1 => format!("; did you mean {}?", one.rsplit_once(" for ").map_or(one.as_str(), |(s, _)| s)),
        more => format!("; did you mean {}?", more.join(", ")),
    };
    Some(format!("{what} {}: {} carries no code for it (it carries: {}){hint}{spirv}", names.join(","), place.display(), list.join(", ")))
}

/// [`not_carried`] as a usage error (exit status 2): for commands whose
/// output would be wrong for a target the install does not carry.
pub fn require_carried(what: &str, sel: &Selection, place: &Path, rules: &Rules) -> Result<(), Failure> {
    let carried = carried(place, rules, sel);
    match not_carried(what, sel, place, &carried) {
        // With SPIR-V objects every target has code: say so, go on.
        Some(msg) if carried.contains(SPIRV_ARCH) => {
            log::warn!("{msg}");
            Ok(())
        }
        Some(msg) => Err(Failure::usage(msg)),
        None => Ok(()),
    }
}

pub use kpackfs_core::formats::target::device_variants;

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn typo_is_named_with_the_nearest_carried_name() {
        let carried = set(&["gfx1030", "gfx906", "gfx90a:xnack+", "gfx90a:xnack-"]);
        let sel = Selection::parse("gfx90").unwrap();
        let msg = not_carried("--arch", &sel, Path::new("/i"), &carried).unwrap();
        assert_eq!(msg, "--arch gfx90: /i carries no code for it (it carries: gfx1030, gfx906, gfx90a:xnack+, gfx90a:xnack-); did you mean gfx906 or gfx90a?");
        // The same processor with other features is the better hint.
        let sel = Selection::parse("gfx90a:sramecc+:xnack-,gfx1100").unwrap();
        assert_eq!(unmatched(&sel, &carried).len(), 1, "gfx90a:xnack- objects run on gfx90a:sramecc+:xnack-");
        let sel = Selection::parse("gfx1031").unwrap();
        assert!(not_carried("--arch", &sel, Path::new("/i"), &carried).unwrap().ends_with("did you mean gfx1030?"));
        assert!(not_carried("--arch", &Selection::parse("gfx09a").unwrap(), Path::new("/i"), &carried).unwrap().ends_with("did you mean gfx90a?"));
        let sel = Selection::parse("gfx1250").unwrap();
        assert!(!not_carried("--arch", &sel, Path::new("/i"), &carried).unwrap().contains("did you mean"));
    }

    #[test]
    fn bare_processors_stand_for_their_device_variants() {
        let names = |t: &str| device_variants(&TargetId::parse(t).unwrap()).iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(names("gfx90a"), ["gfx90a:sramecc+:xnack-", "gfx90a:sramecc+:xnack+", "gfx90a:sramecc-:xnack-", "gfx90a:sramecc-:xnack+"]);
        assert_eq!(names("gfx900"), ["gfx900:xnack-", "gfx900:xnack+"]);
        assert_eq!(names("gfx1100"), ["gfx1100"]);
        assert_eq!(names("gfx90a:xnack+"), ["gfx90a:xnack+"]);
    }

    #[test]
    fn carried_selections_and_empty_installs_pass() {
        let carried = set(&["gfx10-3-generic", "gfx90a:xnack-", "gfx11*"]);
        for ok in ["gfx90a", "gfx90a:xnack-", "gfx1030", "gfx1151"] {
            assert_eq!(not_carried("--arch", &Selection::parse(ok).unwrap(), Path::new("/i"), &carried), None, "{ok}");
        }
        assert!(not_carried("--arch", &Selection::parse("gfx90a:xnack+").unwrap(), Path::new("/i"), &carried)
            .unwrap()
            .ends_with("did you mean gfx90a:xnack-?"));
        assert_eq!(not_carried("--arch", &Selection::parse("gfx90").unwrap(), Path::new("/i"), &BTreeSet::new()), None);
    }

    /// SPIR-V objects match no processor (the line still names what is
    /// missing) but the line says they serve it.
    #[test]
    fn spirv_is_no_match_but_is_mentioned() {
        let carried = set(&["amdgcnspirv", "gfx1100"]);
        let msg = not_carried("--arch", &Selection::parse("gfx1030").unwrap(), Path::new("/i"), &carried).unwrap();
        assert!(msg.starts_with("--arch gfx1030: /i carries no code for it (it carries: amdgcnspirv, gfx1100)"), "{msg}");
        assert!(msg.contains("SPIR-V"), "{msg}");
        assert_eq!(not_carried("--arch", &Selection::parse("gfx1100").unwrap(), Path::new("/i"), &carried), None);
        assert!(!not_carried("--arch", &Selection::parse("gfx1030").unwrap(), Path::new("/i"), &set(&["gfx1100"])).unwrap().contains("SPIR-V"));
    }
}
