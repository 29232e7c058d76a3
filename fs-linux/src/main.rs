//! `kpackfs`: serve a fat ROCm install as a slim per-GPU prefix.
//!
//! Exit status: 0 success, 1 failure while working, 2 bad arguments or an
//! unusable source/mountpoint.

mod cli;
#[cfg(target_os = "linux")]
mod fuse;
#[cfg(target_os = "linux")]
mod mount;
#[cfg(target_os = "linux")]
mod watch;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;

use cli::{BakeArgs, Cli, Command, Loader, ResolveArgs, ViewArgs};
use kpackfs_core::resolve::{self, LoaderEnv, LoaderGen};
use kpackfs_core::target::{Selection, TargetId};
use kpackfs_core::view::{View, ViewConfig};

/// A user-facing failure with its exit status.
#[derive(Debug)]
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
            std::fs::canonicalize(s).map_err(|e| Failure::usage(format!("source {}: {e}", s.display())))
        }
        None => kpackfs_core::demo::demo_install().map_err(|e| Failure::runtime(format!("unpacking the demo install: {e}"))),
    }
}

pub fn view_config(source: PathBuf, args: &ViewArgs) -> Result<ViewConfig, Failure> {
    let arch = args.arch.as_deref().ok_or_else(|| Failure::usage("--arch is required (e.g. --arch gfx90a:xnack-)"))?;
    let selection = Selection::parse(arch).map_err(|e| Failure::usage(format!("--arch {arch:?}: {e}")))?;
    Ok(ViewConfig { source, selection, cache_bytes: args.cache_size, naming: args.archive_names.into() })
}

fn human(n: u64) -> String {
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

fn bake(args: BakeArgs) -> Result<(), Failure> {
    let src = source_dir(Some(&args.source))?;
    let view = View::new(view_config(src, &args.view)?).map_err(|e| Failure::usage(format!("source {}: {e}", args.source.display())))?;
    let start = Instant::now();
    let mut last = Instant::now();
    let quiet = args.quiet;
    let mut progress = |p: &kpackfs_core::bake::Progress<'_>| {
        if !quiet && last.elapsed() >= Duration::from_millis(500) {
            last = Instant::now();
            eprint!("\rbaking: {} files, {} written — {}\x1b[K", p.report.files, human(p.report.bytes), p.current.display());
            let _ = std::io::stderr().flush();
        }
    };
    let r = kpackfs_core::bake::bake(&view, &args.dest, &mut progress).map_err(|e| match e {
        kpackfs_core::bake::BakeError::DestNotEmpty(_) => Failure::usage(e.to_string()),
        other => Failure::runtime(other.to_string()),
    })?;
    if !quiet {
        eprintln!(
            "\rbaked {} in {:.2}s: {} files ({} transformed, {} archives), {} symlinks, {} directories, {}\x1b[K",
            args.dest.display(),
            start.elapsed().as_secs_f64(),
            r.files,
            r.transformed,
            r.archives,
            r.symlinks,
            r.dirs,
            human(r.bytes)
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

/// Short content fingerprint for the resolve table (FNV-1a, not security).
fn short_hash(b: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h = (h ^ x as u64).wrapping_mul(0x100_0000_01b3);
    }
    format!("{h:016x}")
}

fn recompress(a: cli::RecompressArgs) -> Result<(), Failure> {
    let method = match a.method.as_str() {
        "zstd" => kpackfs_core::bundle::CcobMethod::Zstd,
        "zlib" => kpackfs_core::bundle::CcobMethod::Zlib,
        m => return Err(Failure::usage(format!("--method {m:?}: use zstd or zlib"))),
    };
    let r = kpackfs_core::recompress::recompress(&a.input, &a.output, a.ccob_version, method, a.level)
        .map_err(|e| Failure::usage(format!("{}: {e}", a.input.display())))?;
    eprintln!(
        "{}: {} of {} bundles compressed ({} -> {})",
        a.output.display(),
        r.compressed,
        r.bundles,
        human(r.bytes_before),
        human(r.bytes_after)
    );
    Ok(())
}

fn run(cli: Cli) -> Result<(), Failure> {
    match cli.cmd {
        #[cfg(target_os = "linux")]
        Command::Mount(m) => mount::run(m),
        #[cfg(not(target_os = "linux"))]
        Command::Mount(_) => Err(Failure::usage("mounting needs Linux (FUSE); use kpackfs-windows on Windows")),
        Command::Bake(b) => bake(b),
        Command::Inspect { file } => inspect(&file),
        Command::Archs { source } => archs(source.as_deref()),
        Command::Resolve(r) => resolve_cmd(r),
        Command::Recompress(r) => recompress(r),
    }
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).format_timestamp_millis().init();
    let args = cli::normalize_args(std::env::args_os().collect());
    let cli = Cli::parse_from(args);
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("kpackfs: {}", f.msg);
            ExitCode::from(f.code)
        }
    }
}
