//! `kpackfs recombine`: merges the output of splits run on different build
//! shards (each built for some GPU targets) into package groups.
//!
//! Per component: the generic artifact is taken once — every shard's must
//! hold the same files, byte for byte, apart from the pack manifest, or the
//! shards' host binaries were built differently and no single generic
//! package can serve them all (refused, naming the first differing file);
//! the pack manifests are merged (a target two shards built differently is
//! refused, not decided by whichever comes last). Each group named in the
//! configuration gets one artifact `<component>_<group>` holding the
//! target artifacts of its processors.
//!
//! Configuration (JSON): `{"groups": {"gfx90X": ["gfx90a", "gfx908"],
//! "gfx110X": ["gfx1100", "gfx1101"]}}`, or upstream's form with
//! `architecture_groups`, `primary_shard` and `validation` (see
//! [`parse_config`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::target::TargetId;

use super::manifest::{read_artifact_manifest, write_artifact_manifest, PackManifest};
use super::SplitError;

#[derive(Debug, Default)]
pub struct RecombineReport {
    pub shards: usize,
    /// Written artifacts and their file counts.
    pub artifacts: Vec<(String, u64)>,
    /// Target artifacts no group names, left out.
    pub unclaimed: Vec<String>,
}

/// One input artifact.
#[derive(Debug, Clone)]
struct Art {
    shard: String,
    name: String,
    dir: PathBuf,
    prefixes: Vec<String>,
}

/// A component's generic artifacts and its (processor, artifact) pairs.
type ComponentArts = (Vec<Art>, Vec<(String, Art)>);

/// What the configuration says.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Package group → processors.
    pub groups: BTreeMap<String, Vec<String>>,
    /// The shard whose generic artifact is written (all must agree anyway).
    pub primary_shard: Option<String>,
    /// Fail when a group names a target no shard built.
    pub error_on_missing_architecture: bool,
}

/// Reads either form: kpackfs's `{"groups": {name: [targets]}}`, or
/// upstream's `{"primary_shard": …, "architecture_groups": {name:
/// {"display_name": …, "architectures": [targets]}}, "validation":
/// {"error_on_missing_architecture": …}}`.
pub fn parse_config(text: &str) -> Result<Config, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let obj = v.as_object().ok_or("expected a JSON object")?;
    let groups = obj
        .get("groups")
        .or_else(|| obj.get("architecture_groups"))
        .ok_or("expected \"groups\" (or upstream's \"architecture_groups\")")?
        .as_object()
        .ok_or("groups: expected an object {name: [targets]}")?;
    let mut out = Config {
        primary_shard: obj.get("primary_shard").and_then(|p| p.as_str()).map(str::to_string),
        error_on_missing_architecture: obj.get("validation").and_then(|v| v.get("error_on_missing_architecture")).and_then(|b| b.as_bool()).unwrap_or(false),
        ..Config::default()
    };
    for (name, targets) in groups {
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "_-+.".contains(c)) || name.starts_with('.') {
            return Err(format!("group name {name:?}: use letters, digits and _ - + ."));
        }
        let list = targets.get("architectures").unwrap_or(targets).as_array().ok_or_else(|| format!("group {name}: expected an array of targets"))?;
        let mut procs = Vec::new();
        for t in list {
            let s = t.as_str().ok_or_else(|| format!("group {name}: targets must be strings"))?;
            let id = TargetId::parse(s).map_err(|e| format!("group {name}: target {s:?}: {e}"))?;
            procs.push(id.processor);
        }
        out.groups.insert(name.clone(), procs);
    }
    if out.groups.is_empty() {
        return Err("no groups".into());
    }
    Ok(out)
}

fn find_artifacts(shards: &Path) -> Result<(usize, Vec<Art>), SplitError> {
    let mut out = Vec::new();
    let mut nshards = 0;
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(shards).map_err(|e| SplitError::io(shards, e))?.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
    entries.sort();
    let name_of = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut flat = false;
    for e in entries {
        if let Some(prefixes) = read_artifact_manifest(&e)? {
            flat = true;
            out.push(Art { shard: ".".into(), name: name_of(&e), dir: e, prefixes });
            continue;
        }
        let mut subs: Vec<PathBuf> = std::fs::read_dir(&e).map_err(|err| SplitError::io(&e, err))?.flatten().map(|x| x.path()).filter(|p| p.is_dir()).collect();
        subs.sort();
        let mut any = false;
        for s in subs {
            if let Some(prefixes) = read_artifact_manifest(&s)? {
                any = true;
                out.push(Art { shard: name_of(&e), name: name_of(&s), dir: s, prefixes });
            }
        }
        nshards += usize::from(any);
    }
    Ok((nshards + usize::from(flat), out))
}

fn is_kpm(rel: &Path) -> bool {
    rel.extension().is_some_and(|e| e == "kpm") && rel.parent().and_then(Path::file_name).is_some_and(|n| n == crate::view::KPACK_DIR)
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::symlink_metadata(a), std::fs::symlink_metadata(b)) {
        (Ok(ma), Ok(mb)) if ma.file_type().is_symlink() && mb.file_type().is_symlink() => std::fs::read_link(a).ok() == std::fs::read_link(b).ok(),
        (Ok(ma), Ok(mb)) if ma.is_file() && mb.is_file() && ma.len() == mb.len() => {
            crate::split::manifest::sha256_file(a).ok() == crate::split::manifest::sha256_file(b).ok()
        }
        _ => false,
    }
}

/// Copies `from` (a file or symlink) to `to`, keeping mode and times;
/// an existing identical file is fine, a different one a conflict.
fn place(from: &Path, to: &Path, what: &str) -> Result<u64, SplitError> {
    if std::fs::symlink_metadata(to).is_ok() {
        if same_file(from, to) {
            return Ok(0);
        }
        return Err(SplitError::Usage(format!("{}: {what} hold different files at this path", to.display())));
    }
    if let Some(d) = to.parent() {
        std::fs::create_dir_all(d).map_err(|e| SplitError::io(d, e))?;
    }
    let md = std::fs::symlink_metadata(from).map_err(|e| SplitError::io(from, e))?;
    if md.file_type().is_symlink() {
        let t = std::fs::read_link(from).map_err(|e| SplitError::io(from, e))?;
        #[cfg(unix)]
        std::os::unix::fs::symlink(&t, to).map_err(|e| SplitError::io(to, e))?;
        #[cfg(not(unix))]
        std::os::windows::fs::symlink_file(&t, to).map_err(|e| SplitError::io(to, e))?;
        return Ok(1);
    }
    std::fs::copy(from, to).map_err(|e| SplitError::io(to, e))?;
    if let Ok(m) = md.modified() {
        if let Ok(f) = std::fs::File::options().write(true).open(to) {
            let _ = f.set_times(std::fs::FileTimes::new().set_modified(m).set_accessed(m));
        }
    }
    Ok(1)
}

pub fn recombine(shards: &Path, output: &Path, config: &Path) -> Result<RecombineReport, SplitError> {
    let text = std::fs::read_to_string(config).map_err(|e| SplitError::io(config, e))?;
    let cfg = parse_config(&text).map_err(|e| SplitError::Usage(format!("{}: {e}", config.display())))?;
    let groups = &cfg.groups;
    let (nshards, mut arts) = find_artifacts(shards)?;
    // The primary shard's generic artifact goes first (it is the one written).
    if let Some(p) = &cfg.primary_shard {
        if !arts.iter().any(|a| &a.shard == p) {
            return Err(SplitError::Usage(format!("primary_shard {p:?} is not a shard of {}", shards.display())));
        }
        arts.sort_by_key(|a| a.shard != *p);
    }
    if arts.is_empty() {
        return Err(SplitError::Usage(format!("{}: no artifacts (directories with artifact_manifest.txt) found", shards.display())));
    }
    let mut report = RecombineReport { shards: nshards, ..Default::default() };
    // Component → generic artifacts and target artifacts.
    let mut comps: BTreeMap<String, ComponentArts> = BTreeMap::new();
    for a in &arts {
        let Some((c, suffix)) = a.name.rsplit_once('_') else {
            return Err(SplitError::Usage(format!("{}: artifact name is not <component>_<generic|target>", a.dir.display())));
        };
        let e = comps.entry(c.to_string()).or_default();
        if suffix == "generic" {
            e.0.push(a.clone());
        } else {
            e.1.push((suffix.to_string(), a.clone()));
        }
    }
    std::fs::create_dir_all(output).map_err(|e| SplitError::io(output, e))?;
    for (c, (generics, targets)) in &comps {
        let mut names = vec![format!("{c}_generic")];
        names.extend(groups.keys().map(|g| format!("{c}_{g}")));
        for n in &names {
            if output.join(n).exists() {
                return Err(SplitError::Usage(format!("{}: already exists", output.join(n).display())));
            }
        }
        // The generic artifact, once.
        if let Some(first) = generics.first() {
            let list = super::tree_files(&first.dir, true);
            let mut kpm: Option<(PathBuf, PackManifest)> = None;
            for g in generics {
                let other = super::tree_files(&g.dir, true);
                let (a, b): (BTreeSet<_>, BTreeSet<_>) = (list.iter().filter(|p| !is_kpm(p)).collect(), other.iter().filter(|p| !is_kpm(p)).collect());
                if let Some(p) = a.symmetric_difference(&b).next() {
                    return Err(SplitError::Usage(format!(
                        "generic artifacts of {c} differ: {} is in one shard ({}) but not another ({})",
                        p.display(),
                        first.shard,
                        g.shard
                    )));
                }
                for p in &a {
                    if !same_file(&first.dir.join(p), &g.dir.join(p)) {
                        return Err(SplitError::Usage(format!(
                            "generic artifacts of {c} differ at {} (shards {} and {}): their host binaries were built differently",
                            p.display(),
                            first.shard,
                            g.shard
                        )));
                    }
                }
                for p in other.iter().filter(|p| is_kpm(p)) {
                    let m = std::fs::read(g.dir.join(p)).map_err(|e| e.to_string()).and_then(|b| PackManifest::decode(&b));
                    let m = m.map_err(|e| SplitError::Usage(format!("{}: {e}", g.dir.join(p).display())))?;
                    match &mut kpm {
                        None => kpm = Some((p.clone(), m)),
                        Some((_, k)) => k.merge(&m).map_err(|e| SplitError::Usage(format!("{c}: {e}")))?,
                    }
                }
            }
            let out = output.join(&names[0]);
            let mut n = 0;
            for p in list.iter().filter(|p| !is_kpm(p)) {
                n += place(&first.dir.join(p), &out.join(p), "generic artifacts")?;
            }
            if let Some((p, k)) = kpm {
                let to = out.join(&p);
                if let Some(d) = to.parent() {
                    std::fs::create_dir_all(d).map_err(|e| SplitError::io(d, e))?;
                }
                std::fs::write(&to, k.encode()).map_err(|e| SplitError::io(&to, e))?;
                n += 1;
            }
            report.artifacts.push((names[0].clone(), n.saturating_sub(1)));
        }
        // Each group: its processors' target artifacts overlaid.
        let mut claimed = BTreeSet::new();
        for (g, procs) in groups {
            let members: Vec<&(String, Art)> = targets.iter().filter(|(p, _)| procs.contains(p)).collect();
            if cfg.error_on_missing_architecture {
                if let Some(p) = procs.iter().find(|p| !targets.iter().any(|(q, _)| q == *p)) {
                    return Err(SplitError::Usage(format!("group {g}: no shard built {p} for {c}")));
                }
            }
            if members.is_empty() {
                continue;
            }
            let out = output.join(format!("{c}_{g}"));
            let mut prefixes: Vec<String> = Vec::new();
            let mut n = 0;
            for (p, a) in members {
                claimed.insert(a.name.clone());
                for f in super::tree_files(&a.dir, true) {
                    if f.as_os_str() == super::manifest::ARTIFACT_MANIFEST {
                        continue;
                    }
                    n += place(&a.dir.join(&f), &out.join(&f), &format!("target artifacts for {p}"))?;
                }
                for pre in &a.prefixes {
                    if !prefixes.contains(pre) {
                        prefixes.push(pre.clone());
                    }
                }
            }
            write_artifact_manifest(&out, &prefixes).map_err(|e| SplitError::io(&out, e))?;
            report.artifacts.push((format!("{c}_{g}"), n));
        }
        for (_, a) in targets {
            if !claimed.contains(&a.name) && !report.unclaimed.contains(&a.name) {
                report.unclaimed.push(a.name.clone());
            }
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_forms() {
        let g = parse_config(r#"{"groups": {"gfx90X": ["gfx90a:xnack-", "gfx908"], "gfx110X": ["gfx1100"]}}"#).unwrap();
        assert_eq!(g.groups["gfx90X"], vec!["gfx90a", "gfx908"]);
        let up = parse_config(
            r#"{"primary_shard": "b", "architecture_groups": {"gfx110X": {"display_name": "ROCm gfx110X", "architectures": ["gfx1100", "gfx1101"]}},
                "validation": {"error_on_missing_architecture": true}}"#,
        )
        .unwrap();
        assert_eq!(up.groups["gfx110X"], vec!["gfx1100", "gfx1101"]);
        assert_eq!((up.primary_shard.as_deref(), up.error_on_missing_architecture), (Some("b"), true));
        for bad in [
            r#"[]"#,
            r#"{"groups": {}}"#,
            r#"{"groups": {"../x": ["gfx90a"]}}"#,
            r#"{"groups": {"a": "gfx90a"}}"#,
            r#"{"groups": {"a": ["nonsense!"]}}"#,
            "not json",
            r#"{"a": ["gfx90a"]}"#,
        ] {
            assert!(parse_config(bad).is_err(), "{bad}");
        }
    }
}
