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

use clap::{Args, Subcommand, ValueEnum};

mod commands;
mod demo;
mod doctor;
mod packaging;
pub mod targets;

use kpackfs_core::data_cache::DiskCache;
use kpackfs_core::formats::target::Selection;
use kpackfs_core::machine::{Machine, RuntimeEnv};
use kpackfs_core::plan::db::Rules;
use kpackfs_core::view::{ArchiveCompression, ArchiveNaming, CopyPolicy, View, ViewConfig};

pub use doctor::DoctorArgs;
pub use packaging::{RecombineArgs, SplitArgs, SplitCompression, SplitOptions, SplitWheelArgs, VerifyArgs, WheelLayoutArg};

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
        /// Install to scan.
        source: Option<PathBuf>,
        /// Scan the embedded demo install (what `mount --demo` serves).
        #[arg(long, conflicts_with_all = ["source", "machine"])]
        demo: bool,
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
    /// Split a fat Python wheel into a host wheel and device wheels per GPU
    /// target and family (and one for portable SPIR-V code, which every
    /// device extra requires).
    SplitWheel(SplitWheelArgs),
    /// Why does my GPU get no code? Resolve every kpack'd (or fat) binary
    /// under PREFIX for this machine's GPUs as the runtime does, and name
    /// what is missing.
    Doctor(DoctorArgs),
}

/// Subcommand names, for recognising the `mount.fuse` helper form.
pub const SUBCOMMANDS: &[&str] = &[
    "mount",
    "bake",
    "inspect",
    "archs",
    "resolve",
    "recompress",
    "split",
    "verify",
    "recombine",
    "split-wheel",
    "doctor",
    "generate",
    "help",
    "__unmount-watchdog",
];

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
            None => kpackfs_core::data_cache::default_dir(),
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
    /// Device ISA, e.g. `gfx90a:sramecc+:xnack-` or `gfx1030`; several
    /// separated by commas; `auto` for this machine's GPUs. A bare
    /// processor (`gfx90a`) stands for any device of it: its feature
    /// variants are tried, the usual setting first, and the first under
    /// which every wrapper resolves is shown.
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

/// Rewrites mount(8)'s helper invocation `kpackfs SOURCE MOUNTPOINT -o
/// OPTS` (how `mount.fuse3` runs a `fuse.kpackfs` filesystem) into
/// `kpackfs mount SOURCE MOUNTPOINT -o OPTS`. Only that exact shape is
/// rewritten — two paths, then one or more `-o OPTS` — so that anything
/// else (`kpackfs inpsect f.so`, `kpackfs status`, a forgotten `mount`)
/// reaches clap, which names the unknown command and suggests the nearest
/// one, instead of becoming a mount.
pub fn normalize_args(mut args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    if is_helper_form(args.get(1..).unwrap_or_default()) {
        args.insert(1, "mount".into());
    }
    args
}

/// `SOURCE MOUNTPOINT (-o OPTS | -oOPTS)…`, as `mount.fuse3` builds it.
fn is_helper_form(rest: &[std::ffi::OsString]) -> bool {
    let path = |a: &std::ffi::OsString| {
        let s = a.to_string_lossy();
        !s.is_empty() && !s.starts_with('-') && !SUBCOMMANDS.contains(&s.as_ref())
    };
    let [src, mnt, opts @ ..] = rest else { return false };
    if !path(src) || !path(mnt) || opts.is_empty() {
        return false;
    }
    let mut i = 0;
    while i < opts.len() {
        let o = opts[i].to_string_lossy();
        if o == "-o" && i + 1 < opts.len() {
            i += 2;
        } else if o.len() > 2 && o.starts_with("-o") {
            i += 1;
        } else {
            return false;
        }
    }
    true
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

/// `1 file`, `2 files`: counts in messages read as English.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A usage error when `p` exists but is not a directory: the OS's own
/// error for that ("File exists", "Not a directory") names neither the
/// option nor the fix. `what` names the option (`--cache-dir`, `DEST`).
pub fn not_a_directory(what: &str, p: &Path) -> Result<(), Failure> {
    match std::fs::metadata(p) {
        Ok(md) if !md.is_dir() => {
            Err(Failure::usage(format!("{what} {}: is a file, not a directory; name a directory (it is created if missing)", p.display())))
        }
        _ => Ok(()),
    }
}

/// `mount`'s SOURCE and MOUNTPOINT: both, or with `--demo` the
/// mountpoint alone (`None` = the embedded demo install). The demo is
/// served only when asked for by name: a forgotten SOURCE (`mount /opt/rocm
/// --arch …`) must never mount the demo over the install.
pub fn mount_paths(demo: bool, paths: &[PathBuf]) -> Result<(Option<PathBuf>, PathBuf), Failure> {
    match (demo, paths) {
        (false, [s, m]) => Ok((Some(s.clone()), m.clone())),
        (true, [m]) => Ok((None, m.clone())),
        (false, [p]) => Err(Failure::usage(format!(
            "mount needs SOURCE and MOUNTPOINT, got only {} (kpackfs mount SOURCE MOUNTPOINT --arch …; --demo MOUNTPOINT mounts the embedded demo install)",
            p.display()
        ))),
        (true, _) => Err(Failure::usage("--demo serves the embedded demo install: give only the MOUNTPOINT, not a SOURCE")),
        _ => Err(Failure::usage("usage: kpackfs mount SOURCE MOUNTPOINT --arch TARGET")),
    }
}

/// The source to serve: the given directory, or (`None`, which callers
/// pass only for `--demo`) the embedded demo install.
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
pub(crate) fn expand_auto(arch: &str) -> Result<String, Failure> {
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
    not_a_directory("--cache-dir", &dir)?;
    let disk = DiskCache::open(&dir, args.cache_dir_size).map_err(|e| Failure::usage(format!("--cache-dir {}: {e}", dir.display())))?;
    view.with_disk_cache(std::sync::Arc::new(disk), policy).map_err(|e| Failure::usage(format!("--cache-dir {}: {e}", dir.display())))
}

/// One warning line naming the targets of `selection` that the install at
/// `source` does not carry (a typo'd target, or an install built for other
/// GPUs: the view then serves those GPUs no device code), with what it
/// carries and the nearest name. `None` when every target matches or the
/// install has no device code at all. See [`targets`].
pub fn selection_warning(source: &Path, selection: &Selection, rules: &Rules) -> Option<String> {
    let carried = targets::carried(source, rules, selection);
    targets::not_carried("--arch", selection, source, &carried)
}

/// Writes command output to stdout; a reader that went away (`| head`)
/// ends the output quietly instead of panicking.
pub(crate) fn emit(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure::runtime(format!("writing output: {e}"))),
    }
}

/// A progress line that overwrites the previous one (padding instead of
/// ANSI escapes, which older Windows consoles print literally).
pub(crate) fn status_line(s: &str) -> String {
    let s: String = s.chars().take(110).collect();
    format!("\r{s:<110}")
}

/// Runs one of the commands every platform shares; `default_naming` is how
/// the platform names archives unless `--archive-names` says otherwise.
pub fn run_common(cmd: CommonCommand, default_naming: Naming) -> Result<(), Failure> {
    match cmd {
        CommonCommand::Bake(b) => commands::bake(b, default_naming),
        CommonCommand::Inspect { file } => commands::inspect(&file),
        CommonCommand::Archs { source, demo, machine, db } => commands::archs(source.as_deref(), demo, machine, &db),
        CommonCommand::Resolve(r) => commands::resolve_cmd(r),
        CommonCommand::Recompress(r) => commands::recompress(r),
        CommonCommand::Split(a) => packaging::split_cmd(a, default_naming),
        CommonCommand::Verify(a) => packaging::verify_cmd(a),
        CommonCommand::Recombine(a) => packaging::recombine_cmd(a),
        CommonCommand::SplitWheel(a) => packaging::split_wheel_cmd(a, default_naming),
        CommonCommand::Doctor(a) => doctor::doctor_cmd(a),
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
        let argv = |a: &[&str]| normalize_args(std::iter::once("kpackfs").chain(a.iter().copied()).map(Into::into).collect());
        assert_eq!(argv(&["/src", "/mnt", "-o", "arch=gfx90a"])[1], "mount");
        assert_eq!(argv(&["/src", "/mnt", "-o", "arch=gfx90a", "-o", "ro"])[1], "mount");
        assert_eq!(argv(&["/src", "/mnt", "-oarch=gfx90a"])[1], "mount");
        assert_eq!(argv(&["bake"])[1], "bake");
        // Not mount(8)'s shape: left for clap to reject as an unknown command.
        assert_eq!(argv(&["inpsect", "f.so"])[1], "inpsect");
        assert_eq!(argv(&["/opt/rocm", "--arch", "gfx90a"])[1], "/opt/rocm");
        assert_eq!(argv(&["/src", "/mnt"])[1], "/src");
        assert_eq!(argv(&["/src", "/mnt", "-o"])[1], "/src");
        assert_eq!(argv(&["/src", "/mnt", "-o", "arch=x", "--arch", "y"])[1], "/src");
        assert_eq!(argv(&["mount", "/mnt", "-o", "arch=x"])[1], "mount");
        assert_eq!(argv(&["mount", "/mnt", "-o", "arch=x"]).len(), 5);
    }
}
