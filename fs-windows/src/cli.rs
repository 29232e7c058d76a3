//! Command line of `kpackfs.exe`: `mount`, `bake`, `inspect`, `archs`,
//! `resolve` — the Linux CLI (fs-linux) where Windows allows, with archive
//! names by processor by default (`:` is not allowed in Windows names,
//! FORMATS.md §9.5).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use kpackfs_core::view::ArchiveNaming;

#[derive(Debug, Parser)]
#[command(name = "kpackfs", version, about = "A fat ROCm install as a slim per-GPU prefix (Windows: Dokan)", long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Mount SOURCE (default: the embedded demo install) at MOUNTPOINT (a
    /// drive letter such as `K:` or an empty NTFS directory) as a read-only
    /// view for the selected targets. Ctrl-C unmounts.
    Mount(MountArgs),
    /// Write the view of SOURCE to DEST on disk.
    Bake(BakeArgs),
    /// Show wrappers, bundles, targets, code-object sizes, marker or archive TOC of a file.
    Inspect { file: PathBuf },
    /// List the GPU targets an install carries.
    Archs {
        /// Install to scan (default: the embedded demo install).
        source: Option<PathBuf>,
    },
    /// Do what the runtime loader does for a kpack'd binary, for one device ISA.
    Resolve(ResolveArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Naming {
    /// `<binary>_<target-id>.kpack` (feature-qualified names contain ':',
    /// which Windows cannot show: those archives stay invisible).
    Target,
    /// `<binary>_<processor>.kpack` listing feature variants inside (no ':').
    Processor,
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
    /// Targets to serve: `gfx90a:xnack-`, `gfx1100`, `gfx90a,gfx1030`. A bare
    /// processor selects all its feature variants.
    #[arg(long, short = 'a', value_name = "TARGET[,TARGET…]")]
    pub arch: Option<String>,
    /// Memory for decompressed bundles (e.g. 256M, 1G).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "256M")]
    pub cache_size: u64,
    /// How synthesized archives are named (Windows default: processor).
    #[arg(long, value_enum, default_value_t = Naming::Processor)]
    pub archive_names: Naming,
}

#[derive(Debug, Args)]
pub struct MountArgs {
    /// `[SOURCE] MOUNTPOINT`
    #[arg(value_name = "PATHS", num_args = 1..=2, required = true)]
    pub paths: Vec<PathBuf>,
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
    fn sizes() {
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("12X").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn mount_defaults_match_linux_but_archive_names() {
        let c = Cli::try_parse_from(["kpackfs", "mount", "C:\\rocm", "K:", "--arch", "gfx90a:xnack-"]).unwrap();
        let Command::Mount(m) = c.cmd else { panic!("not mount") };
        assert_eq!(m.paths, [PathBuf::from("C:\\rocm"), PathBuf::from("K:")]);
        assert_eq!(m.view.arch.as_deref(), Some("gfx90a:xnack-"));
        assert_eq!(m.view.cache_size, 256 << 20);
        assert_eq!(m.view.archive_names, Naming::Processor);
        assert_eq!(ArchiveNaming::from(m.view.archive_names), ArchiveNaming::Processor);
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
        assert_eq!((m.view.cache_size, m.threads, m.view.archive_names), (1 << 30, 1, Naming::Target));
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
        let Command::Bake(b) = c.cmd else { panic!("not bake") };
        assert!(b.quiet && b.view.archive_names == Naming::Processor);
        let c = Cli::try_parse_from(["kpackfs", "resolve", "x.dll", "-a", "gfx1030", "--loader", "newest"]).unwrap();
        let Command::Resolve(r) = c.cmd else { panic!("not resolve") };
        assert_eq!((r.arch.as_str(), r.loader), ("gfx1030", Loader::Newest));
        assert!(matches!(Cli::try_parse_from(["kpackfs", "archs"]).unwrap().cmd, Command::Archs { source: None }));
        assert!(matches!(Cli::try_parse_from(["kpackfs", "inspect", "a.dll"]).unwrap().cmd, Command::Inspect { .. }));
        assert!(Cli::try_parse_from(["kpackfs", "recompress", "a", "b"]).is_err());
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
