//! The platform-independent part of the `kpackfs` command line (feature
//! `cli`): `bake`, `inspect`, `archs`, `resolve`, `recompress`, and the
//! options `mount` shares with them. The Linux (FUSE) and Windows (Dokan)
//! binaries add their own `mount` and call [`run_common`] for the rest, so
//! both platforms behave the same.
//!
//! Exit status: 0 success, 1 failure while working, 2 bad arguments or an
//! unusable source/mountpoint.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand, ValueEnum};

mod packaging;

use crate::bundle::CcobMethod;
use crate::data_cache::DiskCache;
use crate::db::Rules;
use crate::machine::{Machine, RuntimeEnv};
use crate::resolve::{self, LoaderEnv, LoaderGen};
use crate::target::{Selection, TargetId};
use crate::view::{ArchiveCompression, ArchiveNaming, CopyPolicy, View, ViewConfig};
use crate::wrapper::WrapperKind;

pub use packaging::{RecombineArgs, SplitArgs, SplitCompression, SplitOptions, SplitWheelArgs, VerifyArgs};

/// A user-facing failure with its exit status.
#[derive(Debug, PartialEq, Eq)]
pub struct Failure {
    pub code: u8,
    pub msg: String,
}

impl Failure {
    pub fn usage(msg: impl Into<String>) -> Failure {
        Failure { code: 2, msg: msg.into() }
    }
    pub fn runtime(msg: impl Into<String>) -> Failure {
        Failure { code: 1, msg: msg.into() }
    }
}

/// The commands every platform has.
#[derive(Debug, Subcommand)]
pub enum CommonCommand {
    /// Write the view of SOURCE to DEST on disk.
    Bake(BakeArgs),
    /// Show wrappers, bundles, targets, code-object sizes, marker or archive TOC of a file.
    Inspect { file: PathBuf },
    /// List the GPU targets an install carries, or (--machine) this
    /// machine's GPUs and what `--arch auto` resolves to.
    Archs {
        /// Install to scan (default: the embedded demo install).
        source: Option<PathBuf>,
        /// Show this machine's GPUs and what `--arch auto` resolves to.
        ///
        /// One line per GPU node of the kernel's KFD topology with the
        /// target ID the HIP runtime gives it, the XNACK mode when a GPU has
        /// one, and the `auto:` line. Exit status 2 when there is no AMD
        /// GPU. Linux only.
        #[arg(long, conflicts_with = "source")]
        machine: bool,
        #[command(flatten)]
        db: DbRuleArgs,
    },
    /// Do what the runtime loader does for a kpack'd binary, for one device ISA.
    Resolve(ResolveArgs),
    /// Copy a fat binary with its offload bundles CCOB-compressed in place
    /// (test and benchmark data).
    Recompress(RecompressArgs),
    /// Split a build artifact into a generic artifact (host code with
    /// markers) and one artifact per GPU processor (archives, database files).
    Split(SplitArgs),
    /// Check split, recombined or installed output: manifests, archives,
    /// contamination, and that every wrapper resolves for every target.
    Verify(VerifyArgs),
    /// Merge split shards built for different targets into package groups.
    Recombine(RecombineArgs),
    /// Split a fat Python wheel into a host wheel and one device wheel per
    /// GPU processor.
    SplitWheel(SplitWheelArgs),
}

/// Subcommand names, for recognising the `mount.fuse` helper form.
pub const SUBCOMMANDS: &[&str] =
    &["mount", "bake", "inspect", "archs", "resolve", "recompress", "split", "verify", "recombine", "split-wheel", "generate", "help", "__unmount-watchdog"];

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Naming {
    /// `<binary>_<target-id>.kpack` (feature-qualified names contain ':').
    Target,
    /// `<binary>_<processor>.kpack` listing feature variants inside (no ':').
    Processor,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Compression {
    /// Scheme `none`: code objects stored as they are.
    None,
    /// Scheme `zstd-per-kernel`: one level-3 zstd frame per code object.
    Zstd,
    /// `zstd` where the code objects come from compressed (CCOB) bundles,
    /// `none` where they are plain ranges of the source (served without a copy).
    Auto,
}

impl From<Compression> for ArchiveCompression {
    fn from(c: Compression) -> Self {
        match c {
            Compression::None => ArchiveCompression::None,
            Compression::Zstd => ArchiveCompression::Zstd,
            Compression::Auto => ArchiveCompression::Auto,
        }
    }
}

impl From<Naming> for ArchiveNaming {
    fn from(n: Naming) -> Self {
        match n {
            Naming::Target => ArchiveNaming::TargetId,
            Naming::Processor => ArchiveNaming::Processor,
        }
    }
}

/// Options shared by `mount` and `bake`.
#[derive(Debug, Args, Clone)]
pub struct ViewArgs {
    /// Targets to serve: `gfx90a:xnack-`, `gfx1100`, `gfx90a,gfx1030`, or
    /// `auto` (this machine's GPUs).
    ///
    /// A bare processor selects all its feature variants. `auto` stands for
    /// the GPUs of this machine, each named as the HIP runtime names it
    /// (`gfx90a:sramecc+:xnack-`), read from the kernel's KFD topology
    /// (/sys/class/kfd; Linux only) and honouring HSA_XNACK,
    /// HSA_ENABLE_SRAMECC and HSA_OVERRIDE_GFX_VERSION in kpackfs's
    /// environment. It mixes with named targets (`auto,gfx1030`); a machine
    /// without an AMD GPU fails with exit status 2. `kpackfs archs
    /// --machine` shows what it resolves to.
    #[arg(long, short = 'a', value_name = "TARGET[,TARGET…]|auto")]
    pub arch: Option<String>,
    /// Memory for decompressed bundles (e.g. 256M, 1G).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "256M")]
    pub cache_size: u64,
    /// How synthesized archives are named [default: target on Linux,
    /// processor on Windows, whose names cannot hold ':'].
    #[arg(long, value_enum)]
    pub archive_names: Option<Naming>,
    /// How archives store code objects.
    #[arg(long, value_enum, default_value_t = Compression::Auto)]
    pub archive_compression: Compression,
    /// Persistent cache of compressed archives and local copies, shared by
    /// mounts and bakes of the same source [default: /var/cache/kpackfs for
    /// root, $XDG_CACHE_HOME/kpackfs (~/.cache/kpackfs) for a user,
    /// %LOCALAPPDATA%\kpackfs on Windows]; `none`: no cache directory
    /// (compressed archives are then kept in memory).
    #[arg(long, value_name = "DIR|none")]
    pub cache_dir: Option<PathBuf>,
    /// Largest size of the cache directory; least recently used entries
    /// are evicted beyond it.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "10G")]
    pub cache_dir_size: u64,
    #[command(flatten)]
    pub db: DbRuleArgs,
}

impl ViewArgs {
    /// The cache directory to use, if any.
    pub fn cache_dir(&self) -> Option<PathBuf> {
        match &self.cache_dir {
            Some(d) if d.as_os_str() == "none" => None,
            Some(d) => Some(d.clone()),
            None => crate::data_cache::default_dir(),
        }
    }
}

/// The operator's database-file rules (README, "Database files"), tried
/// before the built-in ones: for layouts a ROCm release adds before
/// kpackfs knows them, without a rebuild.
#[derive(Debug, Args, Clone, Default)]
pub struct DbRuleArgs {
    /// Add a database-file rule (repeatable), e.g.
    /// '**/mylib/library/{arch}/**' or '**/site/tables.dat -> gfx1151'.
    #[arg(long = "db-rule", value_name = "RULE")]
    pub db_rule: Vec<String>,
    /// Read database-file rules from FILE, one per line (repeatable).
    #[arg(long = "db-rules", value_name = "FILE")]
    pub db_rules: Vec<PathBuf>,
}

impl DbRuleArgs {
    /// The operator's rules followed by the built-in ones; a bad rule is a
    /// usage error naming its file and line.
    pub fn rules(&self) -> Result<Rules, Failure> {
        Rules::with_operator_rules(&self.db_rule, &self.db_rules).map_err(|e| Failure::usage(e.to_string()))
    }
}

#[derive(Debug, Args)]
pub struct BakeArgs {
    pub source: PathBuf,
    pub dest: PathBuf,
    #[command(flatten)]
    pub view: ViewArgs,
    /// No progress on stderr.
    #[arg(short, long)]
    pub quiet: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Loader {
    /// ROCm/rocm-kpack e348328: first archive with a compatible target wins.
    Feb2026,
    /// rocm-systems shared/kpack: falls through on KERNEL_NOT_FOUND.
    Newest,
    /// Both; report a disagreement as a failure.
    Both,
}

#[derive(Debug, Args)]
pub struct ResolveArgs {
    /// A kpack'd (or fat) host binary, e.g. inside a mount or a baked tree.
    pub binary: PathBuf,
    /// Device ISA, e.g. `gfx90a:sramecc+:xnack-` or `gfx1030`.
    #[arg(long, short = 'a')]
    pub arch: String,
    #[arg(long, value_enum, default_value_t = Loader::Both)]
    pub loader: Loader,
    /// Write each resolved code object to DIR/<index>.co.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct RecompressArgs {
    pub input: PathBuf,
    pub output: PathBuf,
    /// CCOB format version (1, 2 or 3).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=3))]
    pub ccob_version: u16,
    /// zstd or zlib.
    #[arg(long, default_value = "zstd")]
    pub method: String,
    #[arg(long, default_value_t = 3)]
    pub level: i32,
}

/// `256M`, `1G`, `4096`, `64k` → bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        None => (s, 1u64),
        Some((i, _)) => {
            let unit = s[i..].trim_end_matches(['B', 'b', 'i']).to_ascii_uppercase();
            let m = match unit.as_str() {
                "" => 1,
                "K" => 1 << 10,
                "M" => 1 << 20,
                "G" => 1 << 30,
                "T" => 1 << 40,
                _ => return Err(format!("bad size {s:?} (use e.g. 512M, 2G)")),
            };
            (&s[..i], m)
        }
    };
    num.parse::<u64>().map_err(|_| format!("bad size {s:?}"))?.checked_mul(mult).ok_or_else(|| format!("size {s:?} too large"))
}

/// Rewrites `kpackfs SOURCE MOUNTPOINT -o …` (how `mount.fuse3` calls a
/// `fuse.kpackfs` filesystem) into `kpackfs mount …`.
pub fn normalize_args(mut args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    if let Some(first) = args.get(1).and_then(|a| a.to_str()) {
        if !first.starts_with('-') && !SUBCOMMANDS.contains(&first) {
            args.insert(1, "mount".into());
        }
    }
    args
}

pub fn human(n: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < U.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}

/// The source to serve: the given directory, or the embedded demo install.
/// Linux resolves symlinks in it; Windows keeps a plain absolute path
/// (`canonicalize` would give `\\?\C:\…`, which Dokan and many tools reject).
pub fn source_dir(source: Option<&Path>) -> Result<PathBuf, Failure> {
    match source {
        Some(s) => {
            let md = std::fs::metadata(s).map_err(|e| Failure::usage(format!("source {}: {e}", s.display())))?;
            if !md.is_dir() {
                return Err(Failure::usage(format!("source {}: not a directory", s.display())));
            }
            let p = if cfg!(windows) { std::path::absolute(s) } else { std::fs::canonicalize(s) };
            p.map_err(|e| Failure::usage(format!("source {}: {e}", s.display())))
        }
        None => crate::demo::demo_install().map_err(|e| Failure::runtime(format!("unpacking the demo install: {e}"))),
    }
}

/// Names a directory to read in place of `/sys` for `--arch auto` and
/// `archs --machine`: the tests' fake topologies, or a host's sysfs mounted
/// elsewhere in a container.
pub const SYSFS_ROOT_ENV: &str = "KPACKFS_SYSFS_ROOT";

/// This machine's GPUs (`--arch auto`, `archs --machine`): the KFD topology
/// under `$KPACKFS_SYSFS_ROOT` or `/sys`, named for a process with this
/// process's `HSA_*` variables. `what` starts the failure's message.
pub fn this_machine(what: &str) -> Result<Machine, Failure> {
    if cfg!(windows) {
        return Err(Failure::usage(format!(
            "{what}: finding the GPUs reads Linux's KFD topology and is not supported on Windows; name the targets (e.g. --arch gfx1100)"
        )));
    }
    let root = std::env::var_os(SYSFS_ROOT_ENV).map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/sys"));
    let env = RuntimeEnv::from_process().map_err(|e| Failure::usage(format!("{what}: {e}")))?;
    Machine::read(&root, &env).map_err(|e| Failure::usage(format!("{what}: {e}")))
}

/// `--arch` with each `auto` replaced by this machine's target IDs.
pub(super) fn expand_auto(arch: &str) -> Result<String, Failure> {
    if !arch.split(',').any(|p| p.trim() == "auto") {
        return Ok(arch.to_string());
    }
    let targets = this_machine("--arch auto")?.targets().map_err(|e| Failure::usage(format!("--arch auto: {e}")))?;
    let machine: Vec<String> = targets.iter().map(ToString::to_string).collect();
    let machine = machine.join(",");
    let parts: Vec<&str> = arch.split(',').map(|p| if p.trim() == "auto" { machine.as_str() } else { p }).collect();
    let expanded = parts.join(",");
    log::info!("--arch {arch}: {expanded}");
    Ok(expanded)
}

/// The view a command serves; `default_naming` is the platform's.
pub fn view_config(source: PathBuf, args: &ViewArgs, default_naming: Naming) -> Result<ViewConfig, Failure> {
    let given = args.arch.as_deref().ok_or_else(|| Failure::usage("--arch is required (e.g. --arch gfx90a:xnack-, or --arch auto)"))?;
    let arch = expand_auto(given)?;
    let selection = Selection::parse(&arch).map_err(|e| Failure::usage(format!("--arch {given:?}: {e}")))?;
    Ok(ViewConfig {
        source,
        selection,
        cache_bytes: args.cache_size,
        naming: args.archive_names.unwrap_or(default_naming).into(),
        compression: args.archive_compression.into(),
        db_rules: Arc::new(args.db.rules()?),
    })
}

/// The view a command serves, with its cache directory (see
/// [`ViewArgs::cache_dir`]) holding what `policy` says.
pub fn open_view(cfg: ViewConfig, args: &ViewArgs, policy: CopyPolicy) -> Result<View, Failure> {
    let src = cfg.source.clone();
    let view = View::new(cfg).map_err(|e| Failure::usage(format!("source {}: {e}", src.display())))?;
    let Some(dir) = args.cache_dir() else {
        if policy == CopyPolicy::All {
            return Err(Failure::usage("--materialize needs a cache directory (--cache-dir)"));
        }
        return Ok(view);
    };
    let disk = DiskCache::open(&dir, args.cache_dir_size).map_err(|e| Failure::usage(format!("--cache-dir: {e}")))?;
    view.with_disk_cache(std::sync::Arc::new(disk), policy).map_err(|e| Failure::usage(format!("--cache-dir {}: {e}", dir.display())))
}

/// One warning line when the selection matches no code object of the
/// install at `source` (a typo'd target, or an install built for other
/// GPUs): the view then serves every binary with empty archives. `None`
/// when something matches or the install has no device code at all.
pub fn selection_warning(source: &Path, selection: &Selection) -> Option<String> {
    // Only code objects count here; database files are merely skipped.
    let matches = |t: &String, u: &crate::archs::TargetUse| u.code_objects > 0 && TargetId::parse(t).is_ok_and(|t| selection.selects(&t));
    let r = crate::archs::archs_loaded_until(source, Rules::builtin(), &mut |r| r.targets.iter().any(|(t, u)| matches(t, u))).ok()?;
    let carried: Vec<&String> = r.targets.iter().filter(|(_, u)| u.code_objects > 0).map(|(t, _)| t).collect();
    if carried.is_empty() {
        return None;
    }
    (!r.targets.iter().any(|(t, u)| matches(t, u))).then(|| {
        let list: Vec<&str> = carried.iter().map(|t| t.as_str()).collect();
        format!("--arch {selection} matches no code object in {}; it carries: {}", source.display(), list.join(", "))
    })
}

/// Writes command output to stdout; a reader that went away (`| head`)
/// ends the output quietly instead of panicking.
pub(super) fn emit(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure::runtime(format!("writing output: {e}"))),
    }
}

/// A progress line that overwrites the previous one (padding instead of
/// ANSI escapes, which older Windows consoles print literally).
pub(super) fn status_line(s: &str) -> String {
    let s: String = s.chars().take(110).collect();
    format!("\r{s:<110}")
}

fn bake(args: BakeArgs, default_naming: Naming) -> Result<(), Failure> {
    let src = source_dir(Some(&args.source))?;
    let cfg = view_config(src.clone(), &args.view, default_naming)?;
    if let Some(w) = selection_warning(&src, &cfg.selection) {
        log::warn!("{w}");
    }
    let view = open_view(cfg, &args.view, CopyPolicy::Never)?;
    let start = Instant::now();
    let mut last = Instant::now();
    let quiet = args.quiet;
    let mut progress = |p: &crate::bake::Progress<'_>| {
        if !quiet && last.elapsed() >= Duration::from_millis(500) {
            last = Instant::now();
            eprint!("{}", status_line(&format!("baking: {} files, {} written — {}", p.report.files, human(p.report.bytes), p.current.display())));
            let _ = std::io::stderr().flush();
        }
    };
    let r = crate::bake::bake(&view, &args.dest, &mut progress).map_err(|e| match e {
        crate::bake::BakeError::DestNotEmpty(_) => Failure::usage(e.to_string()),
        other => Failure::runtime(other.to_string()),
    })?;
    if !quiet {
        eprintln!(
            "{}",
            status_line(&format!(
                "baked {} in {:.2}s: {} files ({} transformed, {} archives), {} symlinks, {} directories, {}",
                args.dest.display(),
                start.elapsed().as_secs_f64(),
                r.files,
                r.transformed,
                r.archives,
                r.symlinks,
                r.dirs,
                human(r.bytes)
            ))
        );
    }
    Ok(())
}

fn inspect(file: &Path) -> Result<(), Failure> {
    let report = crate::inspect::inspect(file).map_err(|e| Failure::usage(format!("{}: {e}", file.display())))?;
    emit(&report)
}

fn archs(source: Option<&Path>, machine: bool, db: &DbRuleArgs) -> Result<(), Failure> {
    if machine {
        let report = this_machine("archs --machine")?.report().map_err(|e| Failure::usage(format!("archs --machine: {e}")))?;
        return emit(&report);
    }
    let src = source_dir(source)?;
    let rules = db.rules()?;
    let r = crate::archs::archs(&src, &rules).map_err(|e| Failure::usage(format!("{}: {e}", src.display())))?;
    emit(&r.to_string())
}

/// Short content fingerprint for the resolve table (FNV-1a, not security).
fn short_hash(b: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h = (h ^ x as u64).wrapping_mul(0x100_0000_01b3);
    }
    format!("{h:016x}")
}

fn resolve_cmd(args: ResolveArgs) -> Result<(), Failure> {
    let isa = TargetId::parse(&args.arch).map_err(|e| Failure::usage(format!("--arch {:?}: {e}", args.arch)))?;
    let env = LoaderEnv::from_env();
    let gens: &[LoaderGen] = match args.loader {
        Loader::Feb2026 => &[LoaderGen::Feb2026],
        Loader::Newest => &[LoaderGen::Newest],
        Loader::Both => &[LoaderGen::Feb2026, LoaderGen::Newest],
    };
    let mut runs = Vec::new();
    for g in gens {
        let r = resolve::resolve(&args.binary, &isa, *g, &env).map_err(|e| Failure::usage(e.to_string()))?;
        runs.push((*g, r));
    }
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).map_err(|e| Failure::runtime(format!("{}: {e}", dir.display())))?;
    }
    let mut failed = false;
    let (_, first) = &runs[0];
    let mut text = String::new();
    use std::fmt::Write as _;
    let _ = writeln!(text, "{:<6} {:<5} {:<6} {:<60} {:<44} {:<24} {:>10}  fnv64", "wrapper", "magic", "co", "archive", "key", "arch", "bytes");
    for (i, w) in first.iter().enumerate() {
        let magic = match w.kind {
            WrapperKind::Fat => "HIPF",
            WrapperKind::Kpacked => "HIPK",
            WrapperKind::Other(_) => "????",
        };
        match &w.result {
            Ok(r) => {
                let archive = r.archive.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "(fat bundle)".into());
                let _ = writeln!(
                    text,
                    "{:<6} {:<5} {:<6} {:<60} {:<44} {:<24} {:>10}  {}",
                    w.index,
                    magic,
                    w.co_index,
                    archive,
                    r.key,
                    r.arch,
                    r.bytes.len(),
                    short_hash(&r.bytes)
                );
                if let Some(dir) = &args.out {
                    let p = dir.join(format!("{}.co", w.index));
                    std::fs::write(&p, &r.bytes).map_err(|e| Failure::runtime(format!("{}: {e}", p.display())))?;
                }
            }
            Err(e) => {
                failed = true;
                let _ = writeln!(text, "{:<6} {:<5} {:<6} {e}", w.index, magic, w.co_index);
            }
        }
        for (g, other) in &runs[1..] {
            let same = match (&w.result, other.get(i).map(|o| &o.result)) {
                (Ok(a), Some(Ok(b))) => a.bytes == b.bytes && a.archive == b.archive,
                (Err(a), Some(Err(b))) => a == b,
                _ => false,
            };
            if !same {
                failed = true;
                let desc = match other.get(i).map(|o| &o.result) {
                    Some(Ok(b)) => format!("{} / {}", b.archive.as_ref().map(|p| p.display().to_string()).unwrap_or_default(), b.arch),
                    Some(Err(e)) => e.to_string(),
                    None => "missing".into(),
                };
                let _ = writeln!(text, "       {g:?} loader disagrees: {desc}");
            }
        }
    }
    emit(&text)?;
    if failed {
        return Err(Failure::runtime("not every wrapper resolved (identically with every loader)"));
    }
    Ok(())
}

fn recompress(a: RecompressArgs) -> Result<(), Failure> {
    let method = match a.method.as_str() {
        "zstd" => CcobMethod::Zstd,
        "zlib" => CcobMethod::Zlib,
        m => return Err(Failure::usage(format!("--method {m:?}: use zstd or zlib"))),
    };
    let r = crate::recompress::recompress(&a.input, &a.output, a.ccob_version, method, a.level)
        .map_err(|e| Failure::usage(format!("{}: {e}", a.input.display())))?;
    eprintln!("{}: {} of {} bundles compressed ({} -> {})", a.output.display(), r.compressed, r.bundles, human(r.bytes_before), human(r.bytes_after));
    Ok(())
}

/// Runs one of the commands every platform shares; `default_naming` is how
/// the platform names archives unless `--archive-names` says otherwise.
pub fn run_common(cmd: CommonCommand, default_naming: Naming) -> Result<(), Failure> {
    match cmd {
        CommonCommand::Bake(b) => bake(b, default_naming),
        CommonCommand::Inspect { file } => inspect(&file),
        CommonCommand::Archs { source, machine, db } => archs(source.as_deref(), machine, &db),
        CommonCommand::Resolve(r) => resolve_cmd(r),
        CommonCommand::Recompress(r) => recompress(r),
        CommonCommand::Split(a) => packaging::split_cmd(a, default_naming),
        CommonCommand::Verify(a) => packaging::verify_cmd(a),
        CommonCommand::Recombine(a) => packaging::recombine_cmd(a),
        CommonCommand::SplitWheel(a) => packaging::split_wheel_cmd(a, default_naming),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("12X").is_err());
        assert!(parse_size("").is_err());
    }

    #[test]
    fn helper_form() {
        let a = normalize_args(vec!["kpackfs".into(), "/src".into(), "/mnt".into(), "-o".into(), "arch=gfx90a".into()]);
        assert_eq!(a[1], "mount");
        let b = normalize_args(vec!["kpackfs".into(), "bake".into()]);
        assert_eq!(b[1], "bake");
    }
}
