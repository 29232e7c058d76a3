//! Command-line interface: `mount` (also reachable as the `mount.fuse`
//! helper form `kpackfs SOURCE MOUNTPOINT -o opts`), `bake`, `inspect`,
//! `archs`, `resolve`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use kpackfs_core::view::ArchiveNaming;

#[derive(Debug, Parser)]
#[command(name = "kpackfs", version, about = "A fat ROCm install as a slim per-GPU prefix", long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Mount SOURCE (default: the embedded demo install) at MOUNTPOINT as a
    /// view for the selected targets.
    Mount(MountArgs),
    /// Write the view of SOURCE to DEST on disk.
    Bake(BakeArgs),
    /// Show wrappers, bundles, targets, code-object sizes, marker or archive TOC of a file.
    Inspect {
        file: PathBuf,
    },
    /// List the GPU targets an install carries.
    Archs {
        /// Install to scan (default: the embedded demo install).
        source: Option<PathBuf>,
    },
    /// Do what the runtime loader does for a kpack'd binary, for one device ISA.
    Resolve(ResolveArgs),
    /// Copy a fat binary with its offload bundles CCOB-compressed in place
    /// (test and benchmark data).
    Recompress(RecompressArgs),
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

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Naming {
    /// `<binary>_<target-id>.kpack` (feature-qualified names contain ':').
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
    /// How synthesized archives are named.
    #[arg(long, value_enum, default_value_t = Naming::Target)]
    pub archive_names: Naming,
}

#[derive(Debug, Args)]
pub struct MountArgs {
    /// `[SOURCE] MOUNTPOINT`
    #[arg(value_name = "PATHS", num_args = 1..=2, required = true)]
    pub paths: Vec<PathBuf>,
    #[command(flatten)]
    pub view: ViewArgs,
    /// Stay in the foreground (default: detach once the mount is live).
    #[arg(short, long)]
    pub foreground: bool,
    /// Let other users (containers, services) access the mount.
    #[arg(long)]
    pub allow_other: bool,
    /// Unmount automatically when the daemon dies (even by SIGKILL).
    #[arg(long)]
    pub auto_unmount: bool,
    /// FUSE worker threads.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub threads: u16,
    /// Kernel attribute/entry cache lifetime, seconds.
    #[arg(long, default_value_t = 3600)]
    pub ttl: u64,
    /// Never use kernel FUSE passthrough for unchanged files.
    #[arg(long)]
    pub no_passthrough: bool,
    /// Where the detached daemon logs (default: nowhere).
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
    /// fstab-style options: arch=…, allow_other, auto_unmount, cache_size=…,
    /// threads=…, ttl=…, archive_names=…, foreground; generic mount options
    /// (ro, nodev, nosuid, noatime, defaults, nofail, _netdev, x-*) are accepted.
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
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

/// Rewrites `kpackfs SOURCE MOUNTPOINT -o …` (how `mount.fuse3` calls a
/// `fuse.kpackfs` filesystem) into `kpackfs mount …`.
pub fn normalize_args(mut args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    const SUBCOMMANDS: &[&str] = &["mount", "bake", "inspect", "archs", "resolve", "recompress", "help"];
    if let Some(first) = args.get(1).and_then(|a| a.to_str()) {
        if !first.starts_with('-') && !SUBCOMMANDS.contains(&first) {
            args.insert(1, "mount".into());
        }
    }
    args
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
