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
//! [`parse_config`]). A target the configuration names but no shard
//! carries is an error (a typo would otherwise write a package group with
//! nothing in it), and so is a target the shards carry that no group
//! names (it would silently be left out) unless the caller allows drops.
//!
//! Nothing is written through a symlink: shards come from other machines,
//! and a symlink `share/d -> /elsewhere` in one shard with `share/d/evil`
//! in another would otherwise write `/elsewhere/evil`. Every directory of
//! an output path is created or checked to be a real directory, files are
//! created exclusively, and the output is staged ([`crate::staging`]) so a
//! refused or failed run leaves OUTPUT as it was.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::formats::target::{suggest_target, TargetId};
use crate::staging::Staging;

use super::manifest::{read_artifact_manifest, write_artifact_manifest, PackManifest};
use super::SplitError;

#[derive(Debug, Default)]
pub struct RecombineReport {
    pub shards: usize,
    /// Written artifacts and their file counts.
    pub artifacts: Vec<(String, u64)>,
    /// Target artifacts no group names, left out (with `allow_drop`).
    pub unclaimed: Vec<String>,
    /// Targets the configuration names but no shard carries (tolerated
    /// only when the configuration says `error_on_missing_architecture:
    /// false`).
    pub missing: Vec<String>,
}

/// What the caller allows beyond the configuration.
#[derive(Debug, Default, Clone, Copy)]
pub struct RecombineOptions {
    /// Leave out target artifacts no group names, instead of refusing.
    pub allow_drop: bool,
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
    /// Upstream's `validation.error_on_missing_architecture`: `Some(true)`
    /// fails when a group names a target no shard built for some
    /// component; `Some(false)` tolerates targets no shard built at all
    /// (a shared configuration listing more than this build has); absent,
    /// such a target is an error.
    pub error_on_missing_architecture: Option<bool>,
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
        error_on_missing_architecture: obj.get("validation").and_then(|v| v.get("error_on_missing_architecture")).and_then(|b| b.as_bool()),
        ..Config::default()
    };
    for (name, targets) in groups {
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "_-+.".contains(c)) || name.starts_with('.') {
            return Err(format!("group name {name:?}: use letters, digits and _ - + ."));
        }
        // `<component>_generic` is the host artifact: a group of that name
        // would merge device code into it.
        if name.eq_ignore_ascii_case("generic") {
            return Err(format!("group name {name:?} is reserved for the generic (host) artifact: choose another name"));
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
    rel.extension().is_some_and(|e| e == "kpm") && rel.parent().and_then(Path::file_name).is_some_and(|n| n == crate::formats::kpack::KPACK_DIR)
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::symlink_metadata(a), std::fs::symlink_metadata(b)) {
        (Ok(ma), Ok(mb)) if ma.file_type().is_symlink() && mb.file_type().is_symlink() => std::fs::read_link(a).ok() == std::fs::read_link(b).ok(),
        (Ok(ma), Ok(mb)) if ma.is_file() && mb.is_file() && ma.len() == mb.len() => {
            crate::packaging::manifest::sha256_file(a).ok() == crate::packaging::manifest::sha256_file(b).ok()
        }
        _ => false,
    }
}

/// Creates the directories of `rel` under `root` one by one, refusing any
/// that exists as something else (a symlink, above all: writing through
/// it would write outside the output). `host` is the component's generic
/// output, installed over the same root: a directory there that is a
/// symlink would be written through at installation.
fn make_parents(root: &Path, rel: &Path, host: Option<&Path>) -> Result<(), SplitError> {
    let Some(parent) = rel.parent() else { return Ok(()) };
    let mut cur = PathBuf::new();
    for c in parent.components() {
        cur.push(c);
        if let Some(h) = host {
            if std::fs::symlink_metadata(h.join(&cur)).is_ok_and(|m| !m.is_dir()) {
                return Err(through_link(&cur, rel));
            }
        }
        let d = root.join(&cur);
        match std::fs::symlink_metadata(&d) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(through_link(&cur, rel)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir(&d).map_err(|e| SplitError::io(&d, e))?,
            Err(e) => return Err(SplitError::io(&d, e)),
        }
    }
    Ok(())
}

fn through_link(dir: &Path, rel: &Path) -> SplitError {
    SplitError::Usage(format!(
        "{}: a symlink or file in one shard, a directory holding {} in another: refusing to write through it",
        dir.display(),
        rel.display()
    ))
}

/// Copies `from` (a file or symlink) to `root/rel`, keeping mode and
/// times; an existing identical file is fine, a different one a conflict.
fn place(from: &Path, root: &Path, rel: &Path, host: Option<&Path>, what: &str) -> Result<u64, SplitError> {
    let to = root.join(rel);
    if std::fs::symlink_metadata(&to).is_ok() {
        if same_file(from, &to) {
            return Ok(0);
        }
        return Err(SplitError::Usage(format!("{}: {what} hold different files at this path", rel.display())));
    }
    make_parents(root, rel, host)?;
    let md = std::fs::symlink_metadata(from).map_err(|e| SplitError::io(from, e))?;
    if md.file_type().is_symlink() {
        if host.is_some_and(|h| std::fs::symlink_metadata(h.join(rel)).is_ok_and(|m| m.is_dir())) {
            return Err(through_link(rel, Path::new("files")));
        }
        let t = std::fs::read_link(from).map_err(|e| SplitError::io(from, e))?;
        #[cfg(unix)]
        std::os::unix::fs::symlink(&t, &to).map_err(|e| SplitError::io(&to, e))?;
        #[cfg(not(unix))]
        std::os::windows::fs::symlink_file(&t, &to).map_err(|e| SplitError::io(&to, e))?;
        return Ok(1);
    }
    // Created exclusively: never opens what is already there.
    let mut src = std::fs::File::open(from).map_err(|e| SplitError::io(from, e))?;
    let mut dst = std::fs::File::options().write(true).create_new(true).open(&to).map_err(|e| SplitError::io(&to, e))?;
    std::io::copy(&mut src, &mut dst).map_err(|e| SplitError::io(&to, e))?;
    dst.set_permissions(md.permissions()).map_err(|e| SplitError::io(&to, e))?;
    if let Ok(m) = md.modified() {
        let _ = dst.set_times(std::fs::FileTimes::new().set_modified(m).set_accessed(m));
    }
    Ok(1)
}

/// Checks the configuration against what the shards carry, before
/// anything is written: every named target must be carried by some shard
/// (unless the configuration tolerates it), every carried one named by
/// some group (unless drops are allowed).
fn check_targets(cfg: &Config, comps: &BTreeMap<String, ComponentArts>, opts: RecombineOptions, report: &mut RecombineReport) -> Result<(), SplitError> {
    let carried: BTreeSet<&str> = comps.values().flat_map(|(_, t)| t.iter().map(|(p, _)| p.as_str())).collect();
    let list = || if carried.is_empty() { "none".to_string() } else { carried.iter().copied().collect::<Vec<_>>().join(", ") };
    for (g, procs) in &cfg.groups {
        for p in procs.iter().filter(|p| !carried.contains(p.as_str())) {
            if cfg.error_on_missing_architecture == Some(false) {
                if !report.missing.contains(p) {
                    report.missing.push(p.clone());
                }
                continue;
            }
            let hint = suggest_target(p, carried.iter().copied()).map(|s| format!("; did you mean {s}?")).unwrap_or_default();
            return Err(SplitError::Usage(format!("group {g}: no shard carries {p} (the shards carry {}){hint}", list())));
        }
    }
    let named: BTreeSet<&str> = cfg.groups.values().flatten().map(String::as_str).collect();
    let dropped: Vec<&str> = carried.iter().copied().filter(|p| !named.contains(p)).collect();
    if !dropped.is_empty() && !opts.allow_drop {
        return Err(SplitError::Usage(format!(
            "the configuration leaves out {} (carried by the shards, named by no group): add them to a group, or pass --allow-drop to leave them out",
            dropped.join(", ")
        )));
    }
    Ok(())
}

pub fn recombine(shards: &Path, output: &Path, config: &Path, opts: RecombineOptions) -> Result<RecombineReport, SplitError> {
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
    check_targets(&cfg, &comps, opts, &mut report)?;
    // An output inside the shards would be read as a shard by the next run,
    // or by this one, when inside an artifact being copied.
    if let (Ok(s), Ok(o)) = (crate::staging::resolve_path(shards), crate::staging::resolve_path(output)) {
        if o.starts_with(&s) {
            return Err(SplitError::Usage(format!("{}: the output may not be inside the shards directory {}", output.display(), shards.display())));
        }
    }
    if std::fs::metadata(output).is_ok_and(|m| !m.is_dir()) {
        return Err(SplitError::Usage(format!("{}: exists and is not a directory", output.display())));
    }
    for c in comps.keys() {
        for n in std::iter::once(format!("{c}_generic")).chain(groups.keys().map(|g| format!("{c}_{g}"))) {
            if std::fs::symlink_metadata(output.join(&n)).is_ok() {
                return Err(SplitError::Usage(format!("{}: already exists", output.join(n).display())));
            }
        }
    }
    let staging = Staging::begin(output, "recombine").map_err(|e| SplitError::io(output, e))?;
    let stage = staging.path();
    for (c, (generics, targets)) in &comps {
        let names = [format!("{c}_generic")];
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
            let out = stage.join(&names[0]);
            std::fs::create_dir(&out).map_err(|e| SplitError::io(&out, e))?;
            let mut n = 0;
            for p in list.iter().filter(|p| !is_kpm(p)) {
                n += place(&first.dir.join(p), &out, p, None, "generic artifacts")?;
            }
            if let Some((p, k)) = kpm {
                make_parents(&out, &p, None)?;
                let to = out.join(&p);
                let mut f = std::fs::File::options().write(true).create_new(true).open(&to).map_err(|e| SplitError::io(&to, e))?;
                std::io::Write::write_all(&mut f, &k.encode()).map_err(|e| SplitError::io(&to, e))?;
                n += 1;
            }
            report.artifacts.push((names[0].clone(), n.saturating_sub(1)));
        }
        // Each group: its processors' target artifacts overlaid.
        let mut claimed = BTreeSet::new();
        for (g, procs) in groups {
            let members: Vec<&(String, Art)> = targets.iter().filter(|(p, _)| procs.contains(p)).collect();
            if cfg.error_on_missing_architecture == Some(true) {
                if let Some(p) = procs.iter().find(|p| !targets.iter().any(|(q, _)| q == *p)) {
                    return Err(SplitError::Usage(format!("group {g}: no shard built {p} for {c}")));
                }
            }
            if members.is_empty() {
                continue;
            }
            let out = stage.join(format!("{c}_{g}"));
            std::fs::create_dir(&out).map_err(|e| SplitError::io(&out, e))?;
            let host = stage.join(&names[0]);
            let mut prefixes: Vec<String> = Vec::new();
            let mut n = 0;
            for (p, a) in members {
                claimed.insert(a.name.clone());
                for f in super::tree_files(&a.dir, true) {
                    if f.as_os_str() == super::manifest::ARTIFACT_MANIFEST {
                        continue;
                    }
                    n += place(&a.dir.join(&f), &out, &f, Some(&host), &format!("target artifacts for {p}"))?;
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
    staging.commit(false).map_err(|e| SplitError::io(output, e))?;
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
        assert_eq!((up.primary_shard.as_deref(), up.error_on_missing_architecture), (Some("b"), Some(true)));
        for bad in [
            r#"[]"#,
            r#"{"groups": {}}"#,
            r#"{"groups": {"../x": ["gfx90a"]}}"#,
            r#"{"groups": {"generic": ["gfx90a"]}}"#,
            r#"{"groups": {"Generic": ["gfx90a"]}}"#,
            r#"{"groups": {"a": "gfx90a"}}"#,
            r#"{"groups": {"a": ["nonsense!"]}}"#,
            "not json",
            r#"{"a": ["gfx90a"]}"#,
        ] {
            assert!(parse_config(bad).is_err(), "{bad}");
        }
    }
}
