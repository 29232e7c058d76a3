//! The packager's commands (`split`, `verify`, `recombine`,
//! `split-wheel`): their options and how each runs the engine in
//! [`kpackfs_core::packaging`], with a progress bar on a terminal.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};

use kpackfs_core::formats::target::Selection;
use kpackfs_core::packaging::{Progress, SplitConfig, SplitError};
use kpackfs_core::view::ArchiveCompression;

use super::{emit, expand_auto, human, status_line, DbRuleArgs, Failure, Naming};

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum SplitCompression {
    /// Scheme `none`.
    None,
    /// Scheme `zstd-per-kernel`, level 3 (what the newest upstream splitter writes).
    Zstd,
    /// `zstd` for objects from compressed (CCOB) bundles, else `none`.
    Auto,
}

/// Options `split` and `split-wheel` share.
#[derive(Debug, Args)]
pub struct SplitOptions {
    /// Keep only these targets (e.g. `gfx90a,gfx1100`; a processor keeps
    /// its feature variants, and `gfx90a:xnack-` keeps all of gfx90a: an
    /// artifact serves every mode of its processor); others, such as a
    /// build system's fallback target, are dropped. Default: every target found.
    #[arg(long, value_name = "TARGET[,TARGET…]")]
    pub targets: Option<String>,
    #[arg(long, value_enum, default_value_t = SplitCompression::Zstd)]
    pub archive_compression: SplitCompression,
    /// How archives are named [default: target on Linux, processor on Windows].
    #[arg(long, value_enum)]
    pub archive_names: Option<Naming>,
    /// Worker threads [default: all cores].
    #[arg(long, short = 'j')]
    pub jobs: Option<usize>,
    /// No progress on stderr (it is off anyway when stderr is not a terminal).
    #[arg(short, long)]
    pub quiet: bool,
    #[command(flatten)]
    pub db: DbRuleArgs,
}

#[derive(Debug, Args)]
pub struct SplitArgs {
    /// The artifact: a directory with `artifact_manifest.txt` listing its
    /// prefixes, or one install prefix.
    pub input: PathBuf,
    /// Where `<component>_generic/` and `<component>_<processor>/` go.
    pub output: PathBuf,
    /// Component name: names the artifacts, the archives and their group.
    #[arg(long, short = 'c')]
    pub component: String,
    #[command(flatten)]
    pub opts: SplitOptions,
}

#[derive(Debug, Args)]
pub struct SplitWheelArgs {
    /// The fat wheel (NAME-VERSION-PY-ABI-PLATFORM.whl).
    pub wheel: PathBuf,
    /// Where the host wheel (same file name) and the device wheels go.
    pub output: PathBuf,
    /// Refuse entries (over 1 MiB) that unpack to more than N times their
    /// compressed size, and a wheel whose entries unpack to more than N
    /// times its size (zip bombs).
    #[arg(long, value_name = "N", default_value_t = kpackfs_core::packaging::wheel::UnpackLimits::DEFAULT_RATIO, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_unpack_ratio: u64,
    /// How device wheels are grouped: `family` (one wheel per target,
    /// sub-family and family of rocm-bootstrap 0.3.0's table, a target's
    /// wheel requiring its family wheels; upstream's newest layout) or
    /// `processor` (one wheel per processor, no dependencies between them).
    #[arg(long, value_enum, default_value_t = WheelLayoutArg::Family)]
    pub layout: WheelLayoutArg,
    /// Device wheels are named PREFIX-<target, family or amdgcnspirv> [default: <name>-device].
    #[arg(long, value_name = "PREFIX")]
    pub device_package_prefix: Option<String>,
    /// Family layout: do not make the host wheel require `rocm-bootstrap`
    /// (upstream's host wheels do).
    #[arg(long)]
    pub no_bootstrap_dep: bool,
    /// Family layout: one more `Requires-Dist` of every device wheel
    /// (repeatable); `@GFXARCH@` becomes the wheel's target, and a line
    /// holding it is left out of family and SPIR-V wheels. TheRock passes
    /// `rocm-sdk-device-@GFXARCH@ == <sdk version>`.
    #[arg(long, value_name = "REQUIREMENT")]
    pub device_requires_dist: Vec<String>,
    #[command(flatten)]
    pub opts: SplitOptions,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum WheelLayoutArg {
    Family,
    Processor,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// An artifact, a directory of artifacts (split or recombine output),
    /// or an installed tree.
    pub dir: PathBuf,
    /// The fat input the output was made from: each wrapper must resolve
    /// to the code object the fat original's runtime would pick.
    #[arg(long, value_name = "FAT_DIR")]
    pub against: Option<PathBuf>,
    /// Check only these targets (an installation holding some device
    /// packages only); default: every target the archives and pack
    /// manifests claim.
    #[arg(long, value_name = "TARGET[,TARGET…]")]
    pub targets: Option<String>,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub db: DbRuleArgs,
}

#[derive(Debug, Args)]
pub struct RecombineArgs {
    /// Directory of shards: each a split output (`<component>_generic/`,
    /// `<component>_<processor>/`), or artifacts side by side.
    pub shards: PathBuf,
    pub output: PathBuf,
    /// JSON: {"groups": {"<group>": ["gfx90a", "gfx942"], …}}.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Leave out targets the shards carry but no group names (refused
    /// otherwise).
    #[arg(long)]
    pub allow_drop: bool,
}

/// Worker threads: the user's count, else every core.
fn jobs(j: Option<usize>) -> usize {
    j.filter(|n| *n > 0).unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Runs `work` while a progress bar on stderr follows `p` (only when
/// stderr is a terminal and not `quiet`).
fn with_progress<T>(what: &str, quiet: bool, p: &Progress, work: impl FnOnce() -> T) -> T {
    use std::io::IsTerminal;
    use std::sync::atomic::{AtomicBool, Ordering};
    if quiet || !std::io::stderr().is_terminal() {
        return work();
    }
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                let (d, t) = (p.bytes_done.load(Ordering::Relaxed), p.bytes_total.load(Ordering::Relaxed));
                let line = if t == 0 {
                    format!("{what}: scanning…")
                } else {
                    let frac = (d as f64 / t as f64).min(1.0);
                    let bar: String = (0..30).map(|i| if (i as f64) < frac * 30.0 { '#' } else { '.' }).collect();
                    format!("{what}: [{bar}] {:>3.0}% {} / {}", frac * 100.0, human(d), human(t))
                };
                eprint!("{}", status_line(&line));
                let _ = std::io::stderr().flush();
            }
            eprint!("{}\r", status_line(""));
        });
        let r = work();
        done.store(true, Ordering::Relaxed);
        r
    })
}

/// The split configuration the packager's commands share.
fn split_config(component: &str, o: &SplitOptions, default_naming: Naming) -> Result<SplitConfig, Failure> {
    let targets = o.targets.as_deref().map(|t| Selection::parse(&expand_auto(t)?).map_err(|e| Failure::usage(format!("--targets {t:?}: {e}")))).transpose()?;
    Ok(SplitConfig {
        component: component.to_string(),
        targets,
        naming: o.archive_names.unwrap_or(default_naming).into(),
        compression: match o.archive_compression {
            SplitCompression::None => ArchiveCompression::None,
            SplitCompression::Zstd => ArchiveCompression::Zstd,
            SplitCompression::Auto => ArchiveCompression::Auto,
        },
        rules: Arc::new(o.db.rules()?),
        jobs: jobs(o.jobs),
        family_bundles: false,
    })
}

/// One line per feature-qualified `--targets` entry that split kept as its
/// whole processor (`kpackfs_core::packaging::processor_selection` says why).
fn note_widened(widened: &[(String, String)]) {
    for (given, processor) in widened {
        eprintln!("--targets {given}: split keeps every variant of {processor} (its artifact serves each xnack/sramecc mode of the processor)");
    }
}

fn split_failure(e: SplitError) -> Failure {
    match e {
        SplitError::Usage(m) => Failure::usage(m),
        e @ SplitError::Occupied { .. } => Failure::usage(e.to_string()),
        other => Failure::runtime(other.to_string()),
    }
}

pub(super) fn split_wheel_cmd(a: SplitWheelArgs, default_naming: Naming) -> Result<(), Failure> {
    if !a.wheel.is_file() {
        let why = if a.wheel.exists() { "not a file" } else { "no such file" };
        return Err(Failure::usage(format!("{}: {why}; split-wheel reads a wheel (NAME-VERSION-PY-ABI-PLATFORM.whl)", a.wheel.display())));
    }
    super::not_a_directory("OUTPUT", &a.output)?;
    let cfg = split_config("wheel", &a.opts, default_naming)?;
    use kpackfs_core::packaging::wheel::{UnpackLimits, WheelLayout, WheelOptions};
    if let Some(p) = &a.device_package_prefix {
        let ok = p.chars().next().is_some_and(|c| c.is_ascii_alphanumeric()) && p.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if !ok {
            return Err(Failure::usage(format!("--device-package-prefix {p:?}: a distribution name takes letters, digits and - _ .")));
        }
    }
    let wopts = WheelOptions {
        layout: match a.layout {
            WheelLayoutArg::Family => WheelLayout::Family,
            WheelLayoutArg::Processor => WheelLayout::Processor,
        },
        limits: UnpackLimits { max_ratio: a.max_unpack_ratio },
        device_prefix: a.device_package_prefix.clone(),
        bootstrap_dep: !a.no_bootstrap_dep,
        device_requires: a.device_requires_dist.clone(),
    };
    if let Some(r) = a.device_requires_dist.iter().find(|r| r.trim().is_empty() || r.contains('\n')) {
        return Err(Failure::usage(format!("--device-requires-dist {r:?}: one requirement on one line")));
    }
    let start = Instant::now();
    let progress = Progress::default();
    let r =
        with_progress("splitting wheel", a.opts.quiet, &progress, || kpackfs_core::packaging::wheel::split_wheel(&a.wheel, &a.output, &cfg, &wopts, &progress))
            .map_err(split_failure)?;
    note_widened(&r.split.widened_targets);
    if !r.split.dropped_targets.is_empty() {
        eprintln!("dropped targets not selected: {}", r.split.dropped_targets.join(", "));
    }
    if !r.unlisted.is_empty() {
        eprintln!("not in the family table (rocm-bootstrap 0.3.0), packaged as target wheels with no family: {}", r.unlisted.join(", "));
    }
    let mut text = format!("{}\n", r.host.display());
    for d in &r.devices {
        text.push_str(&format!("{}\n", d.display()));
    }
    emit(&text)?;
    eprintln!(
        "split {} in {:.2}s: host wheel + {} device wheel(s), {} binaries transformed",
        a.wheel.display(),
        start.elapsed().as_secs_f64(),
        r.devices.len(),
        r.split.transformed
    );
    Ok(())
}

pub(super) fn split_cmd(a: SplitArgs, default_naming: Naming) -> Result<(), Failure> {
    super::not_a_directory("OUTPUT", &a.output)?;
    let cfg = split_config(&a.component, &a.opts, default_naming)?;
    if let Some(sel) = &cfg.targets {
        super::targets::require_carried("--targets", sel, &a.input, &cfg.rules)?;
    }
    let start = Instant::now();
    let progress = Progress::default();
    let r =
        with_progress("splitting", a.opts.quiet, &progress, || kpackfs_core::packaging::split(&a.input, &a.output, &cfg, &progress)).map_err(split_failure)?;
    for (bin, why) in &r.refused {
        log::warn!("{bin}: fat binary copied unchanged: {why}");
    }
    note_widened(&r.widened_targets);
    if !r.dropped_targets.is_empty() {
        eprintln!("dropped targets not selected: {}", r.dropped_targets.join(", "));
    }
    if r.artifacts.len() == 1 {
        eprintln!("{}: nothing target-specific (no fat binary, no database file); only the generic artifact was written", a.component);
    }
    let mut text = String::new();
    use std::fmt::Write as _;
    for art in &r.artifacts {
        let _ = writeln!(text, "{:<40} {:>13} {:>12}", art.name, super::count(art.files, "file", "files"), human(art.bytes));
    }
    emit(&text)?;
    eprintln!(
        "split {} in {:.2}s: {} transformed, {}, {} routed",
        a.input.display(),
        start.elapsed().as_secs_f64(),
        super::count(r.transformed, "binary", "binaries"),
        super::count(r.archives.len() as u64, "archive", "archives"),
        super::count(r.db_files, "database file", "database files")
    );
    Ok(())
}

pub(super) fn verify_cmd(a: VerifyArgs) -> Result<(), Failure> {
    // A path that is not there is a mistyped argument (exit 2), once.
    for (what, p) in std::iter::once(("", &a.dir)).chain(a.against.as_ref().map(|p| ("--against ", p))) {
        if let Err(e) = std::fs::metadata(p) {
            return Err(Failure::usage(format!("{what}{}: {e}", p.display())));
        }
    }
    let rules = a.db.rules()?;
    let only = a.targets.as_deref().map(|t| Selection::parse(t).map_err(|e| Failure::usage(format!("--targets {t:?}: {e}")))).transpose()?;
    if let Some(sel) = &only {
        super::targets::require_carried("--targets", sel, &a.dir, &rules)?;
    }
    let r = kpackfs_core::packaging::verify::verify(&a.dir, a.against.as_deref(), only.as_ref(), &rules).map_err(split_failure)?;
    if a.json {
        let problems: Vec<serde_json::Value> = r.problems.iter().map(|p| serde_json::json!({"check": p.check, "path": p.path, "message": p.message})).collect();
        let v = serde_json::json!({
            "ok": r.ok(), "artifacts": r.artifacts, "binaries": r.binaries, "archives": r.archives,
            "targets": r.targets, "resolved": r.resolved, "exact": r.exact, "problems": problems,
            "checked": r.checked, "not_checked": r.not_checked,
        });
        emit(&format!("{v}\n"))?;
    } else {
        let mut text = String::new();
        for p in &r.problems {
            text.push_str(&format!("{}: {}: {}\n", p.check, p.path, p.message));
        }
        for c in &r.checked {
            text.push_str(&format!("checked: {c}\n"));
        }
        for c in &r.not_checked {
            text.push_str(&format!("not checked: {c}\n"));
        }
        text.push_str(&r.summary());
        text.push('\n');
        emit(&text)?;
    }
    if r.ok() {
        Ok(())
    } else {
        Err(Failure::runtime(format!("{} problem(s)", r.problems.len())))
    }
}

pub(super) fn recombine_cmd(a: RecombineArgs) -> Result<(), Failure> {
    let opts = kpackfs_core::packaging::recombine::RecombineOptions { allow_drop: a.allow_drop };
    let r = kpackfs_core::packaging::recombine::recombine(&a.shards, &a.output, &a.config, opts).map_err(split_failure)?;
    if !r.unclaimed.is_empty() {
        eprintln!("left out (no group names them, --allow-drop): {}", r.unclaimed.join(", "));
    }
    if !r.missing.is_empty() {
        eprintln!("named by the configuration but carried by no shard (error_on_missing_architecture: false): {}", r.missing.join(", "));
    }
    let mut text = String::new();
    for (name, files) in &r.artifacts {
        text.push_str(&format!("{name:<40} {files:>7} files\n"));
    }
    emit(&text)?;
    eprintln!("recombined {} shard(s) into {} artifact(s)", r.shards, r.artifacts.len());
    Ok(())
}
