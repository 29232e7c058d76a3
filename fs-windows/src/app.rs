//! The commands of `kpackfs.exe`. Everything but `mount` is the same core
//! call as on Linux (`fs-linux/src/main.rs`); no format logic lives here.
//!
//! Exit status: 0 success, 1 failure while working, 2 bad arguments or an
//! unusable source/mountpoint.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;

use crate::cli::{BakeArgs, Cli, Command, Loader, ResolveArgs, ViewArgs};
use kpackfs_core::resolve::{self, LoaderEnv, LoaderGen};
use kpackfs_core::target::{Selection, TargetId};
use kpackfs_core::view::{View, ViewConfig};

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

/// The source to serve: the given directory, or the embedded demo install.
pub fn source_dir(source: Option<&Path>) -> Result<PathBuf, Failure> {
    match source {
        Some(s) => {
            let md = std::fs::metadata(s).map_err(|e| Failure::usage(format!("source {}: {e}", s.display())))?;
            if !md.is_dir() {
                return Err(Failure::usage(format!("source {}: not a directory", s.display())));
            }
            absolute(s).map_err(|e| Failure::usage(format!("source {}: {e}", s.display())))
        }
        None => kpackfs_core::demo::demo_install().map_err(|e| Failure::runtime(format!("unpacking the demo install: {e}"))),
    }
}

/// An absolute, lexically clean path. Not `canonicalize`: on Windows that
/// yields `\\?\C:\…` verbatim paths, which Dokan and many tools reject.
pub fn absolute(p: &Path) -> std::io::Result<PathBuf> {
    std::path::absolute(p)
}

pub fn view_config(source: PathBuf, args: &ViewArgs) -> Result<ViewConfig, Failure> {
    let arch = args.arch.as_deref().ok_or_else(|| Failure::usage("--arch is required (e.g. --arch gfx90a:xnack-)"))?;
    let selection = Selection::parse(arch).map_err(|e| Failure::usage(format!("--arch {arch:?}: {e}")))?;
    Ok(ViewConfig { source, selection, cache_bytes: args.cache_size, naming: args.archive_names.into() })
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

/// A progress line that overwrites the previous one (padding instead of
/// ANSI escapes, which older Windows consoles print literally).
fn status_line(s: &str) -> String {
    let s: String = s.chars().take(110).collect();
    format!("\r{s:<110}")
}

fn bake(args: BakeArgs) -> Result<(), Failure> {
    let src = source_dir(Some(&args.source))?;
    let view = View::new(view_config(src, &args.view)?).map_err(|e| Failure::usage(format!("source {}: {e}", args.source.display())))?;
    let start = Instant::now();
    let mut last = Instant::now();
    let quiet = args.quiet;
    let mut progress = |p: &kpackfs_core::bake::Progress<'_>| {
        if !quiet && last.elapsed() >= Duration::from_millis(500) {
            last = Instant::now();
            eprint!("{}", status_line(&format!("baking: {} files, {} written — {}", p.report.files, human(p.report.bytes), p.current.display())));
            let _ = std::io::stderr().flush();
        }
    };
    let r = kpackfs_core::bake::bake(&view, &args.dest, &mut progress).map_err(|e| match e {
        kpackfs_core::bake::BakeError::DestNotEmpty(_) => Failure::usage(e.to_string()),
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
    let report = kpackfs_core::inspect::inspect(file).map_err(|e| Failure::usage(format!("{}: {e}", file.display())))?;
    print!("{report}");
    Ok(())
}

fn archs(source: Option<&Path>) -> Result<(), Failure> {
    let src = source_dir(source)?;
    let r = kpackfs_core::archs::archs(&src).map_err(|e| Failure::usage(format!("{}: {e}", src.display())))?;
    print!("{r}");
    Ok(())
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
    let Some((_, first)) = runs.first() else { return Ok(()) };
    println!("{:<6} {:<5} {:<6} {:<60} {:<44} {:<24} {:>10}  fnv64", "wrapper", "magic", "co", "archive", "key", "arch", "bytes");
    for (i, w) in first.iter().enumerate() {
        let magic = match w.kind {
            kpackfs_core::wrapper::WrapperKind::Fat => "HIPF",
            kpackfs_core::wrapper::WrapperKind::Kpacked => "HIPK",
            kpackfs_core::wrapper::WrapperKind::Other(_) => "????",
        };
        match &w.result {
            Ok(r) => {
                let archive = r.archive.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "(fat bundle)".into());
                println!("{:<6} {:<5} {:<6} {:<60} {:<44} {:<24} {:>10}  {}", w.index, magic, w.co_index, archive, r.key, r.arch, r.bytes.len(), short_hash(&r.bytes));
                if let Some(dir) = &args.out {
                    let p = dir.join(format!("{}.co", w.index));
                    std::fs::write(&p, &r.bytes).map_err(|e| Failure::runtime(format!("{}: {e}", p.display())))?;
                }
            }
            Err(e) => {
                failed = true;
                println!("{:<6} {:<5} {:<6} {e}", w.index, magic, w.co_index);
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
                println!("       {g:?} loader disagrees: {desc}");
            }
        }
    }
    if failed {
        return Err(Failure::runtime("not every wrapper resolved (identically with every loader)"));
    }
    Ok(())
}

pub fn run(cli: Cli) -> Result<(), Failure> {
    match cli.cmd {
        #[cfg(windows)]
        Command::Mount(m) => crate::mount::run(m),
        #[cfg(not(windows))]
        Command::Mount(_) => Err(Failure::usage("mounting with Dokan needs Windows; on Linux use the FUSE `kpackfs` (fs-linux)")),
        Command::Bake(b) => bake(b),
        Command::Inspect { file } => inspect(&file),
        Command::Archs { source } => archs(source.as_deref()),
        Command::Resolve(r) => resolve_cmd(r),
    }
}

/// `main` of `kpackfs.exe`.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let log_file = match &cli.cmd {
        Command::Mount(m) => m.log_file.clone(),
        _ => None,
    };
    let mut logger = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"));
    logger.format_timestamp_millis();
    if let Some(p) = &log_file {
        match std::fs::OpenOptions::new().create(true).append(true).open(p) {
            Ok(f) => {
                logger.target(env_logger::Target::Pipe(Box::new(f)));
            }
            Err(e) => {
                eprintln!("kpackfs: --log-file {}: {e}", p.display());
                return ExitCode::from(2);
            }
        }
    }
    logger.init();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("kpackfs: {}", f.msg);
            ExitCode::from(f.code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demo() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../test_assets/demo-install")
    }

    #[test]
    fn view_config_needs_a_valid_arch() {
        let args = |arch: Option<&str>| ViewArgs { arch: arch.map(String::from), cache_size: 1 << 20, archive_names: crate::cli::Naming::Processor };
        assert_eq!(view_config(demo(), &args(None)).unwrap_err().code, 2);
        assert_eq!(view_config(demo(), &args(Some("sm_80"))).unwrap_err().code, 2);
        let c = view_config(demo(), &args(Some("gfx90a:xnack-"))).unwrap();
        assert_eq!(c.naming, kpackfs_core::view::ArchiveNaming::Processor);
        assert_eq!(c.cache_bytes, 1 << 20);
    }

    #[test]
    fn sources_must_be_directories() {
        assert_eq!(source_dir(Some(Path::new("/definitely/not/here"))).unwrap_err().code, 2);
        let file = demo().join("lib/libdemo.so.1.0");
        assert_eq!(source_dir(Some(&file)).unwrap_err().code, 2);
        let d = source_dir(Some(&demo())).unwrap();
        assert!(d.is_absolute() && d.is_dir());
    }

    #[test]
    fn bake_writes_the_view_without_colons() {
        let dest = std::env::temp_dir().join(format!("kpackfs-windows-bake-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dest);
        let args = BakeArgs {
            source: demo(),
            dest: dest.clone(),
            view: ViewArgs { arch: Some("gfx90a".into()), cache_size: 1 << 20, archive_names: crate::cli::Naming::Processor },
            quiet: true,
        };
        let r = bake(args);
        let mut names = Vec::new();
        let mut stack = vec![dest.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let e = e.unwrap();
                names.push(e.file_name().to_string_lossy().into_owned());
                if e.file_type().unwrap().is_dir() {
                    stack.push(e.path());
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dest);
        r.unwrap();
        assert!(names.iter().any(|n| n.ends_with("_gfx90a.kpack")), "{names:?}");
        assert!(names.iter().all(|n| !n.contains(':')), "{names:?}");
    }

    /// On Windows a `:` in a name would create an alternate data stream:
    /// baking feature-qualified archive names is refused, with the fix.
    #[cfg(windows)]
    #[test]
    fn bake_refuses_names_windows_cannot_hold() {
        let dest = std::env::temp_dir().join(format!("kpackfs-windows-bake-colon-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dest);
        let args = BakeArgs {
            source: demo(),
            dest: dest.clone(),
            view: ViewArgs { arch: Some("gfx90a".into()), cache_size: 1 << 20, archive_names: crate::cli::Naming::Target },
            quiet: true,
        };
        let e = bake(args).unwrap_err();
        let _ = std::fs::remove_dir_all(&dest);
        assert_eq!(e.code, 1);
        assert!(e.msg.contains("--archive-names processor"), "{}", e.msg);
    }

    #[test]
    fn sizes_for_humans() {
        assert_eq!(human(12), "12 B");
        assert_eq!(human(3 << 20), "3.0 MiB");
        assert_eq!(status_line("x").len(), 111);
    }

    #[cfg(not(windows))]
    #[test]
    fn mount_needs_windows() {
        let cli = Cli::try_parse_from(["kpackfs", "mount", "K:", "--arch", "gfx90a"]).unwrap();
        assert_eq!(run(cli).unwrap_err().code, 2);
    }
}
