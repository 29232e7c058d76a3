//! `kpackfs split`: the packager's offline split of a build artifact into a
//! generic artifact (host code, binaries transformed to carry markers) and
//! one artifact per GPU processor (`.kpack` archives and database files),
//! the shapes upstream's packaging pipeline consumes (docs/packaging.md).
//!
//! It is the view's engine used once instead of lazily: the same planner
//! transforms each binary, the same rule table routes database files, the
//! same archive writer encodes TOCs. What differs is the grouping: one
//! archive group per component (not per binary), placed at the install
//! root, with every binary's marker pointing there (`../` per directory
//! level) — so generic and target artifacts overlay into one tree.
//!
//! Output is deterministic (sorted walk, ordinals in walk × wrapper order,
//! times taken from the input) and written under a staging directory that
//! is renamed into place only when complete.

mod archives;
pub mod families;
mod manifest;
pub mod recombine;
mod record;
mod scan;
pub mod verify;
pub mod wheel;
mod wheel_devices;
pub mod wheel_family;
mod wheel_zip;
mod write;

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use thiserror::Error;

use crate::formats::target::{Selection, TargetId};
use crate::plan::db::{DbArch, Rules};
use crate::plan::{ArchiveCompression, ArchiveNaming};
use crate::source::{SourceTree, Time};
use crate::staging::Staging;

use manifest::{sha256_file, write_artifact_manifest, KpmFile, PackManifest};
use scan::{EntryKind, FileClass, Input};
pub use write::Progress;

#[derive(Debug, Error)]
pub enum SplitError {
    /// Bad arguments or an unusable input/output (exit status 2).
    #[error("{0}")]
    Usage(String),
    #[error("{path}: {err}")]
    Io { path: PathBuf, err: io::Error },
    #[error("{0}: changed while being split; run again")]
    Changed(PathBuf),
    #[error("{0}: offload bundle: {1}")]
    Bundle(PathBuf, String),
    #[error("{0}: archive: {1}")]
    Archive(PathBuf, String),
    /// Fat binaries exist but none carries a selected target.
    #[error("{0}")]
    NoMatch(String),
    #[error("internal error: {0}")]
    Internal(String),
    /// The input holds a file at a path the split generates (exit 2).
    #[error("{}: already holds {}, a path split writes (an archive or the pack manifest): the input looks split already or carries stale archives; remove it, or split the fat original", input.display(), rel.display())]
    Occupied { input: PathBuf, rel: PathBuf },
}

impl SplitError {
    pub fn io(path: &Path, err: impl Into<io::Error>) -> SplitError {
        SplitError::Io { path: path.to_path_buf(), err: err.into() }
    }
}

/// What to split and how.
#[derive(Debug, Clone)]
pub struct SplitConfig {
    /// Component name: names the artifacts and the archive group.
    pub component: String,
    /// Keep only these targets (others — such as a build system's fallback
    /// target — are dropped); `None`: every target found.
    pub targets: Option<Selection>,
    pub naming: ArchiveNaming,
    pub compression: ArchiveCompression,
    pub rules: Arc<Rules>,
    /// Worker threads.
    pub jobs: usize,
    /// Route database files named for a processor family (`gfx11*`) to one
    /// artifact named by the family table's bundle (`gfx11`, `gfx110x`;
    /// [`families::Families::bundle_of_prefix`]) instead of a copy per
    /// member processor: the family wheel layout installs them once.
    pub family_bundles: bool,
}

/// One written artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactReport {
    pub name: String,
    pub files: u64,
    pub bytes: u64,
}

/// What a split did.
#[derive(Debug, Default, Clone)]
pub struct SplitReport {
    pub artifacts: Vec<ArtifactReport>,
    /// Fat binaries transformed into the generic artifact.
    pub transformed: u64,
    /// Fat binaries copied unchanged, with the reason.
    pub refused: Vec<(String, String)>,
    /// Archives: file name, bytes, TOC entries.
    pub archives: Vec<(String, u64, usize)>,
    /// Database files routed to target artifacts (counted once per copy).
    pub db_files: u64,
    /// Targets found but not selected, dropped from the output.
    pub dropped_targets: Vec<String>,
    /// `--targets` entries with features, each kept as its whole processor
    /// (`gfx90a:xnack-` → `gfx90a`): see [`processor_selection`].
    pub widened_targets: Vec<(String, String)>,
}

/// The selection split works with: each target reduced to its processor.
/// A processor's artifact is installed on every device of that processor,
/// whatever its xnack/sramecc mode, so it must hold every variant: with
/// `gfx90a:xnack-` taken literally, the `-xnack+` Tensile kernels and the
/// `gfx90a:xnack+` code objects would be in no output at all, and an xnack+
/// process would find no kernels (the bug upstream fixed in rocm-systems
/// #7645, whose splitter reduces its targets the same way). `-strict` is
/// part of the processor name and is kept. Returns the reduced selection
/// and the (given, processor) pairs that changed.
fn processor_selection(s: &Selection) -> (Selection, Vec<(String, String)>) {
    let mut targets: Vec<TargetId> = Vec::new();
    let mut widened = Vec::new();
    for t in &s.targets {
        if !t.features.is_empty() {
            widened.push((t.to_string(), t.processor.clone()));
        }
        let bare = TargetId::bare(&t.processor);
        if !targets.contains(&bare) {
            targets.push(bare);
        }
    }
    (Selection { targets }, widened)
}

/// A component name must be usable in file names and as a TOC group.
fn check_component(c: &str) -> Result<(), SplitError> {
    let ok = !c.is_empty() && !c.starts_with('.') && c.len() <= 128 && c.chars().all(|ch| ch.is_ascii_alphanumeric() || "_-+.".contains(ch));
    if !ok {
        return Err(SplitError::Usage(format!("--component {c:?}: use letters, digits and _ - + . (not starting with .)")));
    }
    Ok(())
}

/// The artifacts a database file belongs to. `known` are the processors
/// the split writes artifacts for; a family (`gfx11*`) goes to each known
/// member, or to an artifact named by the family when none is known;
/// with `family_bundles`, to the family table's bundle when it has one.
fn db_artifacts(a: &DbArch, known: &BTreeSet<String>, sel: Option<&Selection>, family_bundles: bool) -> Vec<String> {
    if sel.is_some_and(|s| !a.selected_by(s)) {
        return Vec::new();
    }
    match a {
        DbArch::Processor { processor, .. } => vec![processor.clone()],
        DbArch::Family(prefix) if family_bundles && families::table().bundle_of_prefix(prefix).is_some() => {
            families::table().bundle_of_prefix(prefix).into_iter().collect()
        }
        DbArch::Family(prefix) => {
            let mut members: Vec<String> = known.iter().filter(|p| p.starts_with(prefix.as_str())).cloned().collect();
            if let Some(s) = sel {
                members.retain(|p| s.targets.iter().any(|t| &t.processor == p));
                for t in &s.targets {
                    if t.processor.starts_with(prefix.as_str()) && !members.contains(&t.processor) {
                        members.push(t.processor.clone());
                    }
                }
            }
            if members.is_empty() {
                members.push(prefix.clone());
            }
            members.sort();
            members
        }
    }
}

/// Splits the artifact at `input` into `output/<component>_generic` and
/// `output/<component>_<processor>` per target.
pub fn split(input: &Path, output: &Path, cfg: &SplitConfig, progress: &Progress) -> Result<SplitReport, SplitError> {
    let c = cfg.component.as_str();
    check_component(c)?;
    let input = Input::open(input)?;
    // Writing inside the input would split the output as it appears.
    if let (Ok(i), Ok(o)) = (crate::staging::resolve_path(&input.root), crate::staging::resolve_path(output)) {
        if o.starts_with(&i) {
            return Err(SplitError::Usage(format!("{}: the output may not be inside the input {}", output.display(), input.root.display())));
        }
    }
    if std::fs::metadata(output).is_ok_and(|m| !m.is_dir()) {
        return Err(SplitError::Usage(format!("{}: exists and is not a directory", output.display())));
    }
    // Everything is written under a staging directory in OUTPUT; a failed
    // split drops it, and OUTPUT too when this run created it.
    let staging = Staging::begin(output, &format!("split-{c}")).map_err(|e| SplitError::io(output, e))?;
    let taken = format!("{c}_");
    for e in std::fs::read_dir(output).map_err(|e| SplitError::io(output, e))? {
        let name = e.map_err(|e| SplitError::io(output, e))?.file_name();
        if name.to_string_lossy().starts_with(&taken) {
            return Err(SplitError::Usage(format!("{}: already holds {} (artifacts of component {c})", output.display(), name.to_string_lossy())));
        }
    }
    let entries = scan::scan(&input, c, &cfg.rules, cfg.jobs)?;
    let mut report = SplitReport::default();
    let reduced = cfg.targets.as_ref().map(processor_selection);
    let cfg = &match reduced {
        Some((sel, widened)) => {
            report.widened_targets = widened;
            SplitConfig { targets: Some(sel), ..cfg.clone() }
        }
        None => cfg.clone(),
    };

    // Targets: what the fat binaries carry, less what is not selected.
    let found = archives::code_targets(&entries);
    let sel = cfg.targets.as_ref();
    report.dropped_targets = found.iter().filter(|t| sel.is_some_and(|s| !s.selects(t))).map(ToString::to_string).collect();
    let any_fat = entries.iter().any(|e| matches!(e.kind, EntryKind::File(FileClass::Fat(..))));
    let spirv_carried = entries.iter().any(|e| matches!(&e.kind, EntryKind::File(FileClass::Fat(_, o)) if o.objects.iter().flatten().any(|c| c.is_spirv())));
    if let Some(s) = sel {
        // SPIR-V objects serve every target: then no selection is empty.
        if any_fat && !spirv_carried && !found.is_empty() && found.iter().all(|t| !s.selects(t)) {
            let list: Vec<String> = found.iter().map(ToString::to_string).collect();
            return Err(SplitError::NoMatch(format!("--targets {s} matches no code object of {}; it carries: {}", input.root.display(), list.join(", "))));
        }
    }
    let planned = archives::plan(&entries, &input, c, sel, cfg.naming, cfg.compression);
    if spirv_carried && !planned.iter().any(|a| a.artifact == crate::formats::target::SPIRV_ARCH) {
        // No selected device would take the SPIR-V objects: say they are left out.
        report.dropped_targets.push(crate::formats::target::SPIRV_ARCH.to_string());
    }
    let mut known: BTreeSet<String> = planned.iter().map(|a| a.artifact.clone()).collect();
    for e in &entries {
        if let EntryKind::File(FileClass::Db(DbArch::Processor { processor, xnack })) = &e.kind {
            if sel.is_none_or(|s| s.selects_db(processor, *xnack)) {
                known.insert(processor.clone());
            }
        }
    }

    write_all(&input, &entries, &planned, &known, cfg, staging.path(), progress, &mut report)?;
    // Complete: move the artifacts into place.
    staging.commit(false).map_err(|e| SplitError::io(output, e))?;
    Ok(report)
}

/// Writes every artifact under `staging`.
#[allow(clippy::too_many_arguments)]
fn write_all(
    input: &Input,
    entries: &[scan::Entry],
    planned: &[archives::PlannedArchive],
    known: &BTreeSet<String>,
    cfg: &SplitConfig,
    staging: &Path,
    progress: &Progress,
    report: &mut SplitReport,
) -> Result<(), SplitError> {
    let c = cfg.component.as_str();
    let generic = format!("{c}_generic");
    let art_dir = |name: &str| staging.join(name);
    let in_prefix = |pi: usize, rel: &Path| -> PathBuf {
        let p = &input.prefixes[pi];
        if p.is_empty() {
            rel.to_path_buf()
        } else {
            Path::new(p).join(rel)
        }
    };
    // Artifact → prefixes it holds files of.
    let mut used: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    used.insert(generic.clone(), (0..input.prefixes.len()).collect());
    for pi in 0..input.prefixes.len() {
        std::fs::create_dir_all(art_dir(&generic).join(in_prefix(pi, Path::new("")))).map_err(|e| SplitError::io(staging, e))?;
    }
    let mut jobs = Vec::new();
    let mut newest = Time::default();
    for (i, e) in entries.iter().enumerate() {
        let to_generic = art_dir(&generic).join(in_prefix(e.prefix, &e.rel));
        match &e.kind {
            EntryKind::Dir => std::fs::create_dir_all(&to_generic).map_err(|err| SplitError::io(&to_generic, err))?,
            EntryKind::Symlink(target) => {
                let arts = match cfg.rules.classify(&e.rel) {
                    Some(a) => db_artifacts(&a, known, cfg.targets.as_ref(), cfg.family_bundles).into_iter().map(|p| format!("{c}_{p}")).collect(),
                    None => vec![generic.clone()],
                };
                for art in arts {
                    let at = art_dir(&art).join(in_prefix(e.prefix, &e.rel));
                    if let Some(d) = at.parent() {
                        std::fs::create_dir_all(d).map_err(|err| SplitError::io(d, err))?;
                    }
                    make_symlink(target, &at).map_err(|err| SplitError::io(&at, err))?;
                    let _ = crate::copy::set_link_times(&at, e.stat.atime, e.stat.mtime);
                    used.entry(art).or_default().insert(e.prefix);
                }
            }
            EntryKind::File(class) => match class {
                FileClass::Db(a) => {
                    for p in db_artifacts(a, known, cfg.targets.as_ref(), cfg.family_bundles) {
                        let art = format!("{c}_{p}");
                        jobs.push(write::FileJob { entry: i, dest: art_dir(&art).join(in_prefix(e.prefix, &e.rel)) });
                        used.entry(art).or_default().insert(e.prefix);
                        report.db_files += 1;
                    }
                }
                FileClass::Fat(..) => {
                    newest = newest.max(e.stat.mtime);
                    report.transformed += 1;
                    jobs.push(write::FileJob { entry: i, dest: to_generic });
                }
                FileClass::Refused(why) => {
                    report.refused.push((in_prefix(e.prefix, &e.rel).display().to_string(), why.to_string()));
                    jobs.push(write::FileJob { entry: i, dest: to_generic });
                }
                FileClass::Plain => jobs.push(write::FileJob { entry: i, dest: to_generic }),
            },
        }
    }
    // Archives live in the `.kpack/` of the first prefix holding a fat
    // binary: prefixes are overlaid into one install root, where every
    // binary's `../`-relative search path meets them.
    let archive_prefix = entries.iter().find(|e| matches!(e.kind, EntryKind::File(FileClass::Fat(..)))).map_or(0, |e| e.prefix);
    let kpack_rel = in_prefix(archive_prefix, Path::new(crate::formats::kpack::KPACK_DIR));
    let paths: Vec<PathBuf> = planned.iter().map(|a| art_dir(&format!("{c}_{}", a.artifact)).join(&kpack_rel).join(&a.name)).collect();
    // An input file at a path split writes (an archive, the pack
    // manifest) would ship twice: the stale one in generic, the new one in
    // a target artifact, and the installed tree would hold whichever was
    // installed last. Such an input was split before or carries stale
    // archives; it is refused rather than guessed at.
    if !planned.is_empty() {
        let mut generated: BTreeSet<PathBuf> = planned.iter().map(|a| kpack_rel.join(&a.name)).collect();
        generated.insert(kpack_rel.join(PackManifest::file_name(c)));
        if let Some(e) = entries.iter().find(|e| generated.contains(&in_prefix(e.prefix, &e.rel))) {
            return Err(SplitError::Occupied { input: input.root.clone(), rel: in_prefix(e.prefix, &e.rel) });
        }
    }
    for a in planned {
        used.entry(format!("{c}_{}", a.artifact)).or_default().insert(archive_prefix);
    }
    let trees: Vec<SourceTree> =
        input.prefixes.iter().map(|p| SourceTree::open(&input.root.join(p)).map_err(|e| SplitError::io(&input.root.join(p), e))).collect::<Result<_, _>>()?;
    let scratch = staging.join(".scratch");
    std::fs::create_dir_all(&scratch).map_err(|e| SplitError::io(&scratch, e))?;
    write::run(&trees, entries, &jobs, planned, &paths, &scratch, cfg.jobs, progress)?;
    let _ = std::fs::remove_dir_all(&scratch);

    // The pack manifest, in the generic artifact.
    if !planned.is_empty() {
        let mut kpm = PackManifest { component_name: c.to_string(), prefix: input.prefixes[archive_prefix].clone(), kpack_files: BTreeMap::new() };
        for (a, p) in planned.iter().zip(&paths) {
            let size = std::fs::metadata(p).map_err(|e| SplitError::io(p, e))?.len();
            let sha256 = sha256_file(p).map_err(|e| SplitError::io(p, e))?;
            kpm.kpack_files.insert(a.spec.gfx_arch_family.clone(), KpmFile { file: a.name.clone(), size, kernel_count: a.entries as u64, sha256 });
            report.archives.push((a.name.clone(), size, a.entries));
        }
        let dir = art_dir(&generic).join(&kpack_rel);
        std::fs::create_dir_all(&dir).map_err(|e| SplitError::io(&dir, e))?;
        let p = dir.join(PackManifest::file_name(c));
        std::fs::write(&p, kpm.encode()).map_err(|e| SplitError::io(&p, e))?;
    }
    for (art, prefixes) in &used {
        let dir = art_dir(art);
        let list: Vec<String> = prefixes.iter().map(|&i| input.prefixes[i].clone()).collect();
        write_artifact_manifest(&dir, &list).map_err(|e| SplitError::io(&dir, e))?;
        let (files, bytes) = count_files(&dir);
        report.artifacts.push(ArtifactReport { name: art.clone(), files, bytes });
    }
    prune_emptied(&art_dir(&generic), &input.root);
    finish_times(staging, &input.root, newest)
}

/// Removes generic directories left empty because everything in them was
/// target-specific (per-architecture database directories); directories
/// empty in the input stay.
fn prune_emptied(dir: &Path, input_root: &Path) {
    fn walk(d: &Path, rel: &Path, input_root: &Path) -> bool {
        let Ok(rd) = std::fs::read_dir(d) else { return false };
        let mut empty = true;
        for e in rd.flatten() {
            let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
            if !(is_dir && walk(&e.path(), &rel.join(e.file_name()), input_root)) {
                empty = false;
            }
        }
        let was_empty = std::fs::read_dir(input_root.join(rel)).map(|mut r| r.next().is_none()).unwrap_or(true);
        if empty && !was_empty && !rel.as_os_str().is_empty() {
            return std::fs::remove_dir(d).is_ok();
        }
        false
    }
    walk(dir, Path::new(""), input_root);
}

#[cfg(unix)]
fn make_symlink(target: &std::ffi::OsStr, at: &Path) -> io::Result<()> {
    std::os::unix::fs::symlink(target, at)
}

#[cfg(not(unix))]
fn make_symlink(target: &std::ffi::OsStr, at: &Path) -> io::Result<()> {
    std::os::windows::fs::symlink_file(target, at)
}

/// Every file (and, with `links`, symlink) below `root`, relative and
/// sorted: the listing verify, recombine and split-wheel walk.
pub(crate) fn tree_files(root: &Path, links: bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(root.join(&rel)) else { continue };
        for e in rd.flatten() {
            let r = rel.join(e.file_name());
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(r),
                Ok(t) if t.is_file() || (links && t.is_symlink()) => out.push(r),
                _ => {}
            }
        }
    }
    out.sort();
    out
}

/// A relative path with `/` separators (archive and wheel names).
pub(crate) fn slash(p: &Path) -> String {
    p.iter().map(|c| c.to_string_lossy()).collect::<Vec<_>>().join("/")
}

/// Files (not counting the manifest) and their bytes under `dir`.
fn count_files(dir: &Path) -> (u64, u64) {
    let mut n = (0, 0);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let Ok(md) = e.metadata() else { continue };
            if md.is_dir() {
                stack.push(e.path());
            } else if !(d == dir && e.file_name() == manifest::ARTIFACT_MANIFEST) {
                n.0 += 1;
                n.1 += md.len();
            }
        }
    }
    n
}

/// Directory modes and times from the input, deepest first, so the output
/// does not depend on when it was written; directories the input lacks
/// (`.kpack/`) get 0755 and the newest binary's time, as do the archives
/// and manifests.
fn finish_times(staging: &Path, input_root: &Path, newest: Time) -> Result<(), SplitError> {
    let t = crate::copy::systime(newest);
    let mut dirs = Vec::new();
    let mut stack: Vec<(PathBuf, PathBuf)> = Vec::new();
    for art in std::fs::read_dir(staging).map_err(|e| SplitError::io(staging, e))?.flatten() {
        stack.push((art.path(), PathBuf::new()));
    }
    while let Some((d, rel)) = stack.pop() {
        for e in std::fs::read_dir(&d).map_err(|err| SplitError::io(&d, err))?.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            let r = rel.join(e.file_name());
            if ft.is_dir() {
                stack.push((e.path(), r));
            } else if ft.is_file() && (e.file_name() == manifest::ARTIFACT_MANIFEST || rel.file_name().is_some_and(|n| n == crate::formats::kpack::KPACK_DIR)) {
                let f = std::fs::File::options().write(true).open(e.path()).map_err(|err| SplitError::io(&e.path(), err))?;
                let _ = f.set_times(std::fs::FileTimes::new().set_accessed(t).set_modified(t));
            }
        }
        dirs.push((d, rel));
    }
    for (d, rel) in dirs.iter().rev() {
        let (perm, mtime) = match std::fs::metadata(input_root.join(rel)) {
            Ok(md) if md.is_dir() && !rel.as_os_str().is_empty() => (perm_of(&md), md.modified().unwrap_or(t)),
            _ => (0o755, t),
        };
        let _ = crate::copy::set_perm(d, perm);
        if let Ok(f) = crate::copy::open_dir(d) {
            let _ = f.set_times(std::fs::FileTimes::new().set_accessed(mtime).set_modified(mtime));
        }
    }
    Ok(())
}

#[cfg(unix)]
fn perm_of(md: &std::fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    md.permissions().mode() & 0o7777
}

#[cfg(not(unix))]
fn perm_of(md: &std::fs::Metadata) -> u32 {
    if md.permissions().readonly() {
        0o555
    } else {
        0o755
    }
}
