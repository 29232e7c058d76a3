//! Command line of `kpackfs.exe`: a Windows `mount`, plus the commands
//! every platform shares (`kpackfs_cli`: `bake`, `inspect`, `archs`,
//! `resolve`, `recompress`), with archive names by processor by default
//! (`:` is not allowed in Windows names, FORMATS.md §9.5).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

pub use kpackfs_cli::{CommonCommand, Loader, Naming, ViewArgs};

#[derive(Debug, Parser)]
#[command(name = "kpackfs", version, about = "A fat ROCm install as a slim per-GPU prefix (Windows: Dokan)", long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Mount SOURCE (`--demo`: the embedded demo install) at MOUNTPOINT (a
    /// drive letter such as `K:` or an empty NTFS directory) as a read-only
    /// view for the selected targets. Ctrl-C unmounts.
    Mount(MountArgs),
    #[command(flatten)]
    Common(CommonCommand),
}

/// Windows names cannot hold `:`: archives are named by processor unless
/// `--archive-names target` says otherwise (FORMATS.md §9.5).
pub const WINDOWS_NAMING: Naming = Naming::Processor;

#[derive(Debug, Args)]
pub struct MountArgs {
    /// `SOURCE MOUNTPOINT` (with --demo: `MOUNTPOINT`)
    #[arg(value_name = "PATHS", num_args = 1..=2, required = true)]
    pub paths: Vec<PathBuf>,
    /// Serve the embedded demo install instead of a SOURCE.
    #[arg(long)]
    pub demo: bool,
    #[command(flatten)]
    pub view: ViewArgs,
    /// Accepted for compatibility with the Linux CLI: on Windows the mount
    /// always runs in the foreground of its console (Ctrl-C unmounts).
    #[arg(short, long)]
    pub foreground: bool,
    /// Dokan dispatch threads: 1 serves requests one at a time; any other
    /// value lets Dokan's own thread pool serve them concurrently.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub threads: u16,
    /// Match names exactly (default: case-insensitive, case-preserving, as NTFS).
    #[arg(long)]
    pub case_sensitive: bool,
    /// Seconds Dokan waits for one request before giving up on the file
    /// system (it then unmounts it).
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub timeout: u32,
    /// Print Dokan's debug messages on stderr.
    #[arg(long)]
    pub dokan_debug: bool,
    /// Append log lines to FILE instead of stderr.
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
}

/// Where Dokan mounts the view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountPoint {
    /// A drive letter (`K`, `K:`, `K:\`), upper case.
    Drive(char),
    /// An (empty, NTFS) directory.
    Dir(PathBuf),
}

impl MountPoint {
    pub fn parse(s: &str) -> Result<MountPoint, String> {
        let t = s.trim_end_matches(['\\', '/']);
        let b = t.as_bytes();
        let letter = match b {
            [c] => Some(*c),
            [c, b':'] => Some(*c),
            _ => None,
        };
        match letter {
            Some(c) if c.is_ascii_alphabetic() => Ok(MountPoint::Drive(c.to_ascii_uppercase() as char)),
            Some(_) if b.len() == 2 => Err(format!("mountpoint {s:?}: not a drive letter")),
            _ if s.is_empty() => Err("empty mountpoint".into()),
            _ => Ok(MountPoint::Dir(PathBuf::from(s))),
        }
    }

    /// The string handed to Dokan (`K:\` or the directory).
    pub fn dokan_string(&self) -> String {
        match self {
            MountPoint::Drive(c) => format!("{c}:\\"),
            MountPoint::Dir(p) => p.to_string_lossy().into_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_defaults_match_linux_but_archive_names() {
        let c = Cli::try_parse_from(["kpackfs", "mount", "C:\\rocm", "K:", "--arch", "gfx90a:xnack-"]).unwrap();
        let Command::Mount(m) = c.cmd else { panic!("not mount") };
        assert_eq!(m.paths, [PathBuf::from("C:\\rocm"), PathBuf::from("K:")]);
        assert_eq!(m.view.arch.as_deref(), Some("gfx90a:xnack-"));
        assert_eq!(m.view.cache_size, 256 << 20);
        assert_eq!(m.view.archive_names.unwrap_or(WINDOWS_NAMING), Naming::Processor);
        assert_eq!((m.threads, m.timeout, m.case_sensitive, m.dokan_debug, m.foreground), (4, 120, false, false, false));
    }

    #[test]
    fn mount_options() {
        let c = Cli::try_parse_from([
            "kpackfs",
            "mount",
            "K:",
            "-a",
            "gfx1030",
            "--cache-size",
            "1G",
            "--threads",
            "1",
            "--archive-names",
            "target",
            "--case-sensitive",
            "-f",
            "--log-file",
            "C:\\kpackfs.log",
        ])
        .unwrap();
        let Command::Mount(m) = c.cmd else { panic!("not mount") };
        assert_eq!(m.paths, [PathBuf::from("K:")]);
        assert_eq!((m.view.cache_size, m.threads, m.view.archive_names), (1 << 30, 1, Some(Naming::Target)));
        assert!(m.case_sensitive && m.foreground);
        assert_eq!(m.log_file, Some(PathBuf::from("C:\\kpackfs.log")));
        assert!(Cli::try_parse_from(["kpackfs", "mount", "K:", "--threads", "0"]).is_err());
        assert!(Cli::try_parse_from(["kpackfs", "mount", "a", "b", "c"]).is_err());
        assert!(Cli::try_parse_from(["kpackfs", "mount", "K:", "--cache-size", "lots"]).is_err());
        assert!(Cli::try_parse_from(["kpackfs", "mount", "K:", "--archive-names", "colon"]).is_err());
    }

    #[test]
    fn other_commands() {
        let c = Cli::try_parse_from(["kpackfs", "bake", "src", "dst", "--arch", "gfx942", "-q"]).unwrap();
        let Command::Common(CommonCommand::Bake(b)) = c.cmd else { panic!("not bake") };
        assert!(b.quiet && b.view.archive_names.is_none());
        let c = Cli::try_parse_from(["kpackfs", "resolve", "x.dll", "-a", "gfx1030", "--loader", "newest"]).unwrap();
        let Command::Common(CommonCommand::Resolve(r)) = c.cmd else { panic!("not resolve") };
        assert_eq!((r.arch.as_str(), r.loader), ("gfx1030", Loader::Newest));
        assert!(matches!(Cli::try_parse_from(["kpackfs", "archs"]).unwrap().cmd, Command::Common(CommonCommand::Archs { source: None, .. })));
        assert!(matches!(Cli::try_parse_from(["kpackfs", "inspect", "a.dll"]).unwrap().cmd, Command::Common(CommonCommand::Inspect { .. })));
        assert!(matches!(Cli::try_parse_from(["kpackfs", "recompress", "a", "b"]).unwrap().cmd, Command::Common(CommonCommand::Recompress(_))));
    }

    #[test]
    fn mount_points() {
        assert_eq!(MountPoint::parse("K"), Ok(MountPoint::Drive('K')));
        assert_eq!(MountPoint::parse("k:"), Ok(MountPoint::Drive('K')));
        assert_eq!(MountPoint::parse("K:\\"), Ok(MountPoint::Drive('K')));
        assert_eq!(MountPoint::parse("C:\\mnt\\rocm"), Ok(MountPoint::Dir(PathBuf::from("C:\\mnt\\rocm"))));
        assert_eq!(MountPoint::parse("mnt"), Ok(MountPoint::Dir(PathBuf::from("mnt"))));
        assert!(MountPoint::parse("1:").is_err());
        assert!(MountPoint::parse("").is_err());
        assert_eq!(MountPoint::Drive('K').dokan_string(), "K:\\");
        assert_eq!(MountPoint::Dir(PathBuf::from("C:\\m")).dokan_string(), "C:\\m");
    }
}
