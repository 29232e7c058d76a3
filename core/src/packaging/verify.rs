//! `kpackfs verify`: checks split (or recombined, or installed) output the
//! way a packaging pipeline needs before it publishes:
//!
//! 1. manifests: every artifact's `artifact_manifest.txt` names existing
//!    prefixes; the generic artifact's pack manifest (`.kpm`) decodes;
//! 2. archives: each one the pack manifest lists exists with the recorded
//!    size and SHA-256, opens, and every entry decodes to its recorded size;
//!    no archive is left unlisted;
//! 3. no contamination: an archive or database file sits in the artifact
//!    of its own processor, never in another's or in the generic one;
//! 4. fat binaries converted: no host binary with device code is left;
//! 5. the one that matters: every wrapper of every host binary resolves,
//!    through both loader generations, for every target the archives
//!    claim — and with `--against`, to the very code object the fat
//!    original's runtime would pick.
//!
//! Artifacts are overlaid (their prefixes are install roots laid over one
//! another) into a scratch tree of links, so the loader's path rules run on
//! a real directory as they would after installation.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};

use crate::formats::kpack::Archive;
use crate::formats::target::{Selection, TargetId, SPIRV_ARCH};
use crate::formats::wrapper::WrapperKind;
use crate::plan::db::Rules;
use crate::tools::resolve::{self, LoaderEnv, LoaderGen};

use super::manifest::{read_artifact_manifest, sha256_file, PackManifest};
use super::SplitError;

/// One problem found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub check: &'static str,
    pub path: String,
    pub message: String,
}

/// What verify looked at and found.
#[derive(Debug, Default, Clone)]
pub struct VerifyReport {
    pub artifacts: usize,
    pub binaries: usize,
    pub archives: usize,
    /// Wrapper × target resolutions that succeeded.
    pub resolved: usize,
    /// Targets the archives claim.
    pub targets: Vec<String>,
    pub problems: Vec<Finding>,
    /// What was checked, and what could not be with what the tree holds
    /// (an installed tree or a baked view has no pack manifest and no
    /// artifacts): said, so that an OK is never taken for more than it is.
    pub checked: Vec<String>,
    pub not_checked: Vec<String>,
    /// Whether code objects were compared with the fat original.
    pub exact: bool,
}

impl VerifyReport {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }

    fn problem(&mut self, check: &'static str, path: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Finding { check, path: path.into(), message: message.into() });
    }

    /// The one-line summary.
    pub fn summary(&self) -> String {
        format!(
            "verify: {} — {} artifact(s), {} host binar{}, {} archive(s), targets [{}], {} wrapper resolutions{}{}",
            if self.ok() { "OK" } else { "FAILED" },
            self.artifacts,
            self.binaries,
            if self.binaries == 1 { "y" } else { "ies" },
            self.archives,
            self.targets.join(", "),
            self.resolved,
            if self.exact { " exact" } else { "" },
            if self.ok() { String::new() } else { format!(", {} problem(s)", self.problems.len()) }
        )
    }
}

/// One file of the overlaid tree.
#[derive(Debug, Clone)]
struct Placed {
    real: PathBuf,
    /// Artifact name (`""` for a plain tree) and the prefix it came from.
    artifact: String,
    prefix: String,
}

/// Finds the artifacts at `dir`: itself, its subdirectories, or none (a
/// plain installed tree).
fn artifacts(dir: &Path) -> Result<Vec<(String, PathBuf, Vec<String>)>, SplitError> {
    if let Some(p) = read_artifact_manifest(dir)? {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        return Ok(vec![(name, dir.to_path_buf(), p)]);
    }
    let mut out = Vec::new();
    let mut subs: Vec<PathBuf> = std::fs::read_dir(dir).map_err(|e| SplitError::io(dir, e))?.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
    subs.sort();
    for s in subs {
        if let Some(p) = read_artifact_manifest(&s)? {
            out.push((s.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(), s, p));
        }
    }
    Ok(out)
}

/// The processor (artifact suffix) a target or database arch belongs to.
fn processor_of(t: &str) -> String {
    TargetId::parse(t).map(|t| t.processor).unwrap_or_else(|_| t.trim_end_matches('*').to_string())
}

/// Verifies `dir`; `against` is the fat input the output was made from;
/// `only` restricts the targets checked (an installation that holds some
/// device packages only).
pub fn verify(dir: &Path, against: Option<&Path>, only: Option<&Selection>, rules: &Rules) -> Result<VerifyReport, SplitError> {
    let wanted = |t: &str| only.is_none_or(|s| TargetId::parse(t).is_ok_and(|t| s.selects(&t)));
    let mut r = VerifyReport::default();
    let arts = artifacts(dir)?;
    let plain = arts.is_empty();
    // Overlay: install-root-relative path → where it is.
    let mut tree: BTreeMap<String, Placed> = BTreeMap::new();
    let mut kpms: Vec<(String, PackManifest)> = Vec::new();
    if plain {
        for f in super::tree_files(dir, false) {
            tree.insert(super::slash(&f), Placed { real: dir.join(&f), artifact: String::new(), prefix: String::new() });
        }
    }
    for (name, path, prefixes) in &arts {
        r.artifacts += 1;
        for p in prefixes {
            let root = if p.is_empty() { path.clone() } else { path.join(p) };
            if !root.is_dir() {
                r.problem("manifest", super::slash(&root), "prefix listed in artifact_manifest.txt does not exist");
                continue;
            }
            for f in super::tree_files(&root, false) {
                let rel = super::slash(&f);
                if p.is_empty() && rel == super::manifest::ARTIFACT_MANIFEST {
                    continue;
                }
                let real = root.join(&f);
                if let Some(prev) = tree.get(&rel) {
                    let same = std::fs::read(&prev.real).ok() == std::fs::read(&real).ok();
                    if !same {
                        r.problem("overlay", rel.clone(), format!("{} and {} hold different files at this path", prev.artifact, name));
                    }
                    continue;
                }
                tree.insert(rel, Placed { real, artifact: name.clone(), prefix: p.clone() });
            }
        }
    }
    // Pack manifests.
    for (rel, pl) in &tree {
        if rel.ends_with(".kpm") && rel.rsplit('/').nth(1) == Some(crate::formats::kpack::KPACK_DIR) {
            match std::fs::read(&pl.real).map_err(|e| e.to_string()).and_then(|b| PackManifest::decode(&b)) {
                Ok(m) => kpms.push((rel.clone(), m)),
                Err(e) => r.problem("manifest", rel.clone(), format!("pack manifest unreadable: {e}")),
            }
        }
    }
    // Archives: listed, intact, in their own artifact.
    let mut listed: BTreeMap<String, (String, super::manifest::KpmFile)> = BTreeMap::new();
    for (rel, m) in &kpms {
        let dir_rel = rel.rsplit_once('/').map_or("", |(d, _)| d);
        for (arch, f) in &m.kpack_files {
            listed.insert(format!("{dir_rel}/{}", f.file), (arch.clone(), f.clone()));
        }
    }
    let mut claimed: BTreeSet<String> = BTreeSet::new();
    // Processor → artifacts holding its archives or database files, and
    // each such placement (path, what, processor, artifact).
    let mut homes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut placed: Vec<(String, String, String, String)> = Vec::new();
    for (rel, pl) in &tree {
        if !rel.ends_with(".kpack") || rel.rsplit('/').nth(1) != Some(crate::formats::kpack::KPACK_DIR) {
            continue;
        }
        r.archives += 1;
        let checked = check_archive(&pl.real);
        let toc = match checked {
            Ok(t) => t,
            Err(e) => {
                r.problem("archive", rel.clone(), e);
                continue;
            }
        };
        claimed.extend(toc.iter().filter(|t| wanted(t)).cloned());
        match listed.get(rel) {
            Some((_, f)) => {
                let size = std::fs::metadata(&pl.real).map(|m| m.len()).unwrap_or(0);
                let sha = sha256_file(&pl.real).unwrap_or_default();
                if size != f.size || (!f.sha256.is_empty() && sha != f.sha256) {
                    r.problem("archive", rel.clone(), format!("differs from the pack manifest (size {size} vs {}, sha256 {sha} vs {})", f.size, f.sha256));
                }
            }
            None if !kpms.is_empty() => r.problem("archive", rel.clone(), "not listed in the pack manifest"),
            None => {}
        }
        if !plain {
            for t in &toc {
                homes.entry(processor_of(t)).or_default().insert(pl.artifact.clone());
                placed.push((rel.clone(), format!("archive for {t}"), processor_of(t), pl.artifact.clone()));
            }
        }
    }
    for (rel, (arch, _)) in &listed {
        if !tree.contains_key(rel) && wanted(arch) {
            r.problem("archive", rel.clone(), format!("archive for {arch} listed in the pack manifest is missing"));
            claimed.insert(arch.clone());
        }
    }
    // Without a pack manifest nothing records what the archives should
    // hold: a changed byte in a `none` archive would pass unseen.
    if kpms.is_empty() && r.archives > 0 && plain {
        // An installed tree, a baked view or a mount records none: say
        // what that leaves unchecked instead of failing it.
        r.not_checked.push("archive sizes and digests: no pack manifest (.kpack/*.kpm) here".into());
    } else if kpms.is_empty() && r.archives > 0 {
        r.problem(
            "manifest",
            dir.display().to_string(),
            format!("no pack manifest (.kpack/*.kpm) found: the {} archive(s) cannot be checked against recorded sizes and digests", r.archives),
        );
    }
    r.targets = claimed.iter().cloned().collect();
    // Database files in their own artifacts; host binaries converted.
    let mut binaries = Vec::new();
    for (rel, pl) in &tree {
        if rel.rsplit('/').nth(1) == Some(crate::formats::kpack::KPACK_DIR) {
            continue;
        }
        if let Some(a) = rules.classify(Path::new(rel)) {
            if !plain && !a.to_string().ends_with('*') {
                let p = processor_of(&a.to_string());
                homes.entry(p.clone()).or_default().insert(pl.artifact.clone());
                placed.push((rel.clone(), format!("database file for {a}"), p, pl.artifact.clone()));
            } else if !plain && pl.artifact.ends_with("_generic") {
                r.problem("contamination", rel.clone(), format!("database file for {a} is in the generic artifact"));
            }
            continue;
        }
        let Ok(f) = File::open(&pl.real) else { continue };
        if crate::formats::host::detect(&f).is_none() {
            continue;
        }
        if crate::formats::host::probe(&f) {
            r.problem("converted", rel.clone(), "fat binary left with its device code");
            continue;
        }
        if let Some((old, actual)) = crate::formats::elf::ElfFile::parse(&f).ok().and_then(|e| e.old_kernel_phdr_mismatch()) {
            r.problem(
                "old-kernels",
                rel.clone(),
                format!(
                    "program header table mapped at {actual:#x}, but kernels before Linux 5.18 pass {old:#x} to ld.so: this executable will not start there"
                ),
            );
        }
        binaries.push(rel.clone());
    }
    // Contamination: in a split, each processor's files are in the artifact
    // named after it; in a recombined tree (artifacts named by package
    // group), each processor's files are in one artifact only. Never in
    // the generic one.
    for (rel, what, p, art) in &placed {
        let suffix = art.rsplit_once('_').map_or("", |(_, s)| s);
        let by_processor = homes.contains_key(suffix);
        let wrong = suffix == "generic" || (by_processor && suffix != p) || (!by_processor && homes.get(p).is_some_and(|h| h.len() > 1));
        if wrong {
            r.problem("contamination", rel.clone(), format!("{what} is in artifact {art}"));
        }
    }
    // Resolution through the loader rules, in a linked overlay.
    let scratch = if plain { None } else { Some(Scratch::new()?) };
    let root = scratch.as_ref().map_or(dir.to_path_buf(), |s| s.0.clone());
    if let Some(s) = &scratch {
        for (rel, pl) in &tree {
            if binaries.contains(rel) || rel.ends_with(".kpack") {
                s.link(rel, &pl.real, rel.ends_with(".kpack"))?;
            }
        }
    }
    let env = LoaderEnv::default();
    for rel in &binaries {
        let bin = root.join(rel);
        let fat_path = against.map(|a| {
            let pl = &tree[rel];
            if pl.prefix.is_empty() {
                a.join(rel)
            } else {
                a.join(&pl.prefix).join(rel)
            }
        });
        let mut is_hip = false;
        // Whether any wrapper of a kpack'd binary reached an archive.
        let mut reached = false;
        for t in &claimed {
            // The SPIR-V archive is checked as a device with no native or
            // generic object would reach it: through `amdgcnspirv` alone.
            let spirv = t == SPIRV_ARCH;
            let isa = match TargetId::parse(t) {
                Ok(isa) => isa,
                Err(_) if spirv => TargetId::spirv(),
                Err(_) => continue,
            };
            let runs: Vec<_> = [LoaderGen::Feb2026, LoaderGen::Newest].iter().map(|g| outcomes(&bin, &isa, *g, &env)).collect();
            let fat = fat_path.as_ref().map(|p| outcomes(p, &isa, LoaderGen::Newest, &env));
            match &fat {
                Some(Err(resolve::ResolveError::NoWrappers(_))) => continue,
                Some(Err(e)) => {
                    r.problem("resolve", rel.clone(), format!("fat original: {e}"));
                    continue;
                }
                _ => {}
            }
            // Damaged fat wrappers, reported once for both loaders.
            let mut unreadable: BTreeSet<usize> = BTreeSet::new();
            for (gen, run) in [LoaderGen::Feb2026, LoaderGen::Newest].iter().zip(&runs) {
                let ws = match run {
                    Ok(ws) => ws,
                    Err(resolve::ResolveError::NoWrappers(_)) => continue,
                    Err(e) => {
                        r.problem("resolve", rel.clone(), e.to_string());
                        continue;
                    }
                };
                is_hip = true;
                reached |= ws.iter().any(|w| w.kind == WrapperKind::Kpacked && !matches!(&w.result, Err(e) if e.starts_with("ARCHIVE_NOT_FOUND")));
                // Without the fat original, a binary carries a target when
                // any of its wrappers resolves for it; then all must. (An
                // archive missing altogether is the pack manifest's check.)
                let carries = ws.iter().any(|w| w.result.is_ok());
                for (i, w) in ws.iter().enumerate() {
                    if w.kind != WrapperKind::Kpacked {
                        continue;
                    }
                    let fat_w = match &fat {
                        Some(Ok(f)) => f.get(i),
                        _ => None,
                    };
                    if let Some(Outcome { result: Err(e), damaged: true, .. }) = fat_w {
                        // Nothing to compare with: never call that exact.
                        if unreadable.insert(i) {
                            r.problem("resolve", rel.clone(), format!("wrapper {} for {t}: the fat original cannot be read: {e}", w.index));
                        }
                        continue;
                    }
                    // SPIR-V from archives needs a runtime newer than the
                    // fall-through loader (rocm-systems #11040 after #9953):
                    // the Feb-2026 loader is not asked to reach it past a
                    // device archive (docs/research/spirv.md §5.4).
                    let newest_spirv = matches!(&runs[1], Ok(n) if n.get(i).is_some_and(|o| o.spirv));
                    if *gen == LoaderGen::Feb2026 && !spirv && (fat_w.is_some_and(|fw| fw.spirv) || newest_spirv) {
                        continue;
                    }
                    let want = match &fat {
                        Some(Ok(_)) => Some(fat_w.and_then(|fw| fw.result.as_ref().ok())),
                        _ => None,
                    };
                    match (&w.result, want) {
                        (Ok(got), Some(Some(b))) if b == got => r.resolved += 1,
                        (Ok(_), Some(Some(_))) => {
                            r.problem("resolve", rel.clone(), format!("wrapper {} for {t}: code object differs from the fat original's", w.index))
                        }
                        (Ok(_), Some(None)) => {
                            r.problem("resolve", rel.clone(), format!("wrapper {} for {t}: resolves, but the fat original has no code object for it", w.index))
                        }
                        (Err(e), Some(Some(_))) => r.problem("resolve", rel.clone(), format!("wrapper {} for {t}: {e} (the fat original has one)", w.index)),
                        (Err(_), Some(None)) => {}
                        (Ok(_), None) => r.resolved += 1,
                        // A wrapper without SPIR-V has nothing for the
                        // SPIR-V pseudo-device; that is no fault.
                        (Err(e), None) if carries && !spirv => r.problem("resolve", rel.clone(), format!("wrapper {} for {t}: {e}", w.index)),
                        (Err(_), None) => {}
                    }
                }
            }
        }
        if is_hip || claimed.is_empty() {
            r.binaries += 1;
        }
        // A kpack'd binary whose markers lead to no archive for any target
        // the tree carries: nothing of it would load (and without a pack
        // manifest nothing else says so).
        if !reached && kpacked(&bin) {
            let looked = resolve::carried(&bin, &env).map(|c| c.searched).unwrap_or_default();
            let base = std::fs::canonicalize(&root).unwrap_or_else(|_| root.clone());
            let looked: Vec<String> = looked.iter().map(|p| p.strip_prefix(&base).unwrap_or(p).display().to_string()).collect();
            let targets = if claimed.is_empty() { "any target".to_string() } else { claimed.iter().cloned().collect::<Vec<_>>().join(", ") };
            r.problem("markers", rel.clone(), format!("kpack'd, but its markers lead to no archive for {targets} (looked for {})", looked.join(", ")));
        }
    }
    r.resolved /= 2; // both loaders counted each resolution
                     // A mistyped path must not pass having checked nothing (kpack'd
                     // binaries whose archives are all gone are reported above).
    if arts.is_empty() && kpms.is_empty() && r.archives == 0 && !r.problems.iter().any(|p| p.check == "markers") {
        r.problem(
            "input",
            dir.display().to_string(),
            "nothing to verify: no artifact (artifact_manifest.txt), no pack manifest (.kpack/*.kpm) and no .kpack archive found here or one level down",
        );
    }
    r.exact = against.is_some();
    if r.archives > 0 {
        r.checked.push("every archive opens and every code object in it decodes".into());
    }
    if !kpms.is_empty() {
        r.checked.push("archives against the pack manifest (presence, size, SHA-256)".into());
    }
    if !plain {
        r.checked.push("artifact manifests; each processor's files in its own artifact".into());
    }
    if r.binaries > 0 {
        r.checked.push(format!(
            "{} host binar{}: none left fat; every wrapper resolves through both loader generations for each target the archives claim{}",
            r.binaries,
            if r.binaries == 1 { "y" } else { "ies" },
            if against.is_some() { ", to the fat original's code object" } else { "" }
        ));
    }
    if against.is_none() && r.resolved > 0 {
        r.not_checked.push("code objects against the fat original (no --against SOURCE)".into());
    }
    Ok(r)
}

/// Whether `bin` has a kpack'd (HIPK) wrapper.
fn kpacked(bin: &Path) -> bool {
    File::open(bin).ok().and_then(|f| crate::formats::host::wrappers(&f).ok()).is_some_and(|ws| ws.iter().any(|w| w.wrapper.kind() == WrapperKind::Kpacked))
}

/// One wrapper's resolution reduced to what verify compares: the code
/// object's SHA-256, or the loader's error.
struct Outcome {
    index: u32,
    kind: WrapperKind,
    result: Result<[u8; 32], String>,
    /// The code object exists but could not be decoded (a damaged
    /// compressed bundle, a damaged zstd frame).
    damaged: bool,
    /// The code object is portable SPIR-V (the runtime would JIT it).
    spirv: bool,
}

/// Resolves `bin` keeping digests only: one code object in memory at a
/// time, whatever the library's size.
fn outcomes(bin: &Path, isa: &TargetId, gen: LoaderGen, env: &LoaderEnv) -> Result<Vec<Outcome>, resolve::ResolveError> {
    use sha2::Digest;
    let mut v = Vec::new();
    resolve::resolve_each(bin, isa, gen, env, &mut |w| {
        let damaged = matches!(w.result, Err(resolve::LoadError::Decompression(_)));
        let spirv = w.result.as_ref().is_ok_and(|r| r.arch == SPIRV_ARCH);
        let result = w.result.map(|r| sha2::Sha256::digest(&r.bytes).into()).map_err(|e| e.to_string());
        v.push(Outcome { index: w.index, kind: w.kind, result, damaged, spirv });
    })?;
    Ok(v)
}

/// Opens an archive and decodes every entry (a zstd frame's content
/// checksum, when it has one, is checked by the decoder); every stored
/// blob or frame must belong to an entry, so none goes unchecked. Returns
/// its `gfx_arches`.
fn check_archive(path: &Path) -> Result<Vec<String>, String> {
    let f = File::open(path).map_err(|e| e.to_string())?;
    let a = Archive::open(&f).map_err(|e| e.to_string())?;
    let stored = match &a.toc.scheme {
        crate::formats::kpack::Scheme::None { blobs } => blobs.len(),
        crate::formats::kpack::Scheme::Zstd { .. } => a.frames.len(),
    };
    let used: BTreeSet<u64> = a.toc.toc.iter().flat_map(|(_, archs)| archs.iter().map(|(_, e)| e.ordinal)).collect();
    if let Some(o) = (0..stored as u64).find(|o| !used.contains(o)) {
        return Err(format!("stored blob {o} belongs to no TOC entry (unchecked bytes)"));
    }
    for (key, archs) in &a.toc.toc {
        for (arch, e) in archs {
            if !a.toc.has_arch(arch) {
                return Err(format!("entry {key} / {arch}: arch not listed in gfx_arches"));
            }
            let b = a.get_kernel(&f, key, arch).map_err(|err| format!("entry {key} / {arch}: {err}"))?;
            if b.len() as u64 != e.original_size {
                return Err(format!("entry {key} / {arch}: {} bytes, TOC says {}", b.len(), e.original_size));
            }
        }
    }
    Ok(a.toc.gfx_arches.clone())
}

/// A temporary overlay directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Scratch, SplitError> {
        let base = std::env::temp_dir();
        for i in 0..1000u32 {
            let p = base.join(format!("kpackfs-verify-{}-{i}", std::process::id()));
            match std::fs::create_dir(&p) {
                Ok(()) => return Ok(Scratch(p)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(SplitError::io(&p, e)),
            }
        }
        Err(SplitError::Usage("no scratch directory available".into()))
    }

    /// Places `real` at `rel`: a hard link (a copy across file systems)
    /// for binaries, whose own directory the loader resolves from; a
    /// symlink for archives, which the loader follows.
    fn link(&self, rel: &str, real: &Path, archive: bool) -> Result<(), SplitError> {
        let at = self.0.join(rel);
        if let Some(d) = at.parent() {
            std::fs::create_dir_all(d).map_err(|e| SplitError::io(d, e))?;
        }
        let real = std::fs::canonicalize(real).map_err(|e| SplitError::io(real, e))?;
        let r = if archive { symlink(&real, &at) } else { std::fs::hard_link(&real, &at).or_else(|_| std::fs::copy(&real, &at).map(|_| ())) };
        r.map_err(|e| SplitError::io(&at, e))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(unix)]
fn symlink(to: &Path, at: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(to, at)
}

#[cfg(not(unix))]
fn symlink(to: &Path, at: &Path) -> std::io::Result<()> {
    std::fs::copy(to, at).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::kpack::{ArchiveSpec, BlobData, EntrySpec};

    /// A frame no TOC entry refers to would never be decoded, so its bytes
    /// (and checksum) would go unchecked: verify names it.
    #[test]
    fn a_stored_blob_outside_the_toc_is_a_problem() {
        let t = tempfile::tempdir().unwrap();
        let objs: [&[u8]; 2] = [b"first code object", b"second code object"];
        let spec = ArchiveSpec {
            group_name: "g".into(),
            gfx_arch_family: "gfx1030".into(),
            gfx_arches: vec!["gfx1030".into()],
            toc: vec![("lib/x.so#0".into(), vec![("gfx1030".into(), EntrySpec { ordinal: 0, metadata: None })])],
            blobs: objs.iter().map(|b| BlobData::Owned(b.to_vec().into())).collect(),
        };
        let frames: Vec<Vec<u8>> = objs.iter().map(|b| crate::formats::kpack::compress_frame(b, 3).unwrap()).collect();
        std::fs::create_dir_all(t.path().join(".kpack")).unwrap();
        std::fs::write(t.path().join(".kpack/g_gfx1030.kpack"), spec.bytes_zstd_frames(&frames)).unwrap();
        let r = verify(t.path(), None, None, &Rules::default()).unwrap();
        assert!(r.problems.iter().any(|p| p.check == "archive" && p.message.contains("stored blob 1 belongs to no TOC entry")), "{:?}", r.problems);
    }
}
