//! The commands of `kpackfs.exe`. Everything but `mount` is the shared
//! `kpackfs_cli` layer the Linux binary uses too; no format logic
//! lives here.
//!
//! Exit status: 0 success, 1 failure while working, 2 bad arguments or an
//! unusable source/mountpoint.

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command, WINDOWS_NAMING};
pub use kpackfs_cli::{source_dir, view_config, Failure};

pub fn run(cli: Cli) -> Result<(), Failure> {
    match cli.cmd {
        #[cfg(windows)]
        Command::Mount(m) => crate::mount::run(m),
        #[cfg(not(windows))]
        Command::Mount(_) => Err(Failure::usage("mounting with Dokan needs Windows; on Linux use the FUSE `kpackfs` (fs-linux)")),
        Command::Common(c) => kpackfs_cli::run_common(c, WINDOWS_NAMING),
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

    use kpackfs_cli::{BakeArgs, CommonCommand, Naming, ViewArgs};
    use std::path::{Path, PathBuf};

    fn bake(args: BakeArgs) -> Result<(), Failure> {
        kpackfs_cli::run_common(CommonCommand::Bake(args), WINDOWS_NAMING)
    }

    fn demo() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../test_assets/demo-install")
    }

    #[test]
    fn view_config_needs_a_valid_arch() {
        let args = |arch: Option<&str>| ViewArgs {
            arch: arch.map(String::from),
            cache_size: 1 << 20,
            archive_names: None,
            archive_compression: kpackfs_cli::Compression::Auto,
            cache_dir: None,
            cache_dir_size: 1 << 30,
            db: Default::default(),
        };
        assert_eq!(view_config(demo(), &args(None), WINDOWS_NAMING).unwrap_err().code, 2);
        assert_eq!(view_config(demo(), &args(Some("sm_80")), WINDOWS_NAMING).unwrap_err().code, 2);
        let c = view_config(demo(), &args(Some("gfx90a:xnack-")), WINDOWS_NAMING).unwrap();
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
            view: ViewArgs {
                arch: Some("gfx90a".into()),
                cache_size: 1 << 20,
                archive_names: Some(Naming::Processor),
                archive_compression: kpackfs_cli::Compression::Auto,
                cache_dir: None,
                cache_dir_size: 1 << 30,
                db: Default::default(),
            },
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
            view: ViewArgs {
                arch: Some("gfx90a".into()),
                cache_size: 1 << 20,
                archive_names: Some(Naming::Target),
                archive_compression: kpackfs_cli::Compression::Auto,
                cache_dir: None,
                cache_dir_size: 1 << 30,
                db: Default::default(),
            },
            quiet: true,
        };
        let e = bake(args).unwrap_err();
        let _ = std::fs::remove_dir_all(&dest);
        assert_eq!(e.code, 1);
        assert!(e.msg.contains("--archive-names processor"), "{}", e.msg);
    }

    #[cfg(not(windows))]
    #[test]
    fn mount_needs_windows() {
        let cli = Cli::try_parse_from(["kpackfs", "mount", "K:", "--arch", "gfx90a"]).unwrap();
        assert_eq!(run(cli).unwrap_err().code, 2);
    }
}
