//! The `kpackfs` command line on Linux: `mount` (also reachable as the
//! `mount.fuse` helper form `kpackfs SOURCE MOUNTPOINT -o opts`) plus the
//! commands every platform shares (`kpackfs_cli`).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use kpackfs_cli::{CommonCommand, ViewArgs};

#[derive(Debug, Parser)]
#[command(name = "kpackfs", version, about = "A fat ROCm install as a slim per-GPU prefix", long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Mount SOURCE at MOUNTPOINT as a view for the selected targets
    /// (`--demo MOUNTPOINT`: the embedded demo install).
    Mount(MountArgs),
    #[command(flatten)]
    Common(CommonCommand),
    /// Internal: detaches MOUNTPOINT once standard input closes (started
    /// by a daemon mounted with --auto-unmount; see src/watchdog.rs).
    #[command(name = "__unmount-watchdog", hide = true)]
    UnmountWatchdog { mountpoint: PathBuf },
    /// Write the man pages or a shell completion script (for packaging;
    /// README, "Install").
    #[command(subcommand, hide = true)]
    Generate(Generate),
}

/// `kpackfs generate` (see src/generate.rs, which renders them).
#[derive(Debug, Subcommand)]
pub enum Generate {
    /// Write one man page per command (kpackfs.1, kpackfs-mount.1, …) into DIR.
    Man { dir: PathBuf },
    /// Print the completion script for SHELL on stdout.
    Completions { shell: clap_complete::Shell },
    /// Install the man pages and the bash, zsh and fish completions for
    /// this user (after `cargo install`): under $XDG_DATA_HOME
    /// (~/.local/share) and $XDG_CONFIG_HOME (~/.config).
    Install,
}

#[derive(Debug, Args)]
pub struct MountArgs {
    /// `SOURCE MOUNTPOINT` (with --demo: `MOUNTPOINT`)
    #[arg(value_name = "PATHS", num_args = 1..=2, required = true)]
    pub paths: Vec<PathBuf>,
    /// Serve the embedded demo install (a small fat prefix built into
    /// kpackfs) instead of a SOURCE: `kpackfs mount --demo MOUNTPOINT`.
    #[arg(long)]
    pub demo: bool,
    /// Mount over a directory that is not empty (its entries are hidden
    /// while the view is mounted); also `-o nonempty`.
    #[arg(long)]
    pub nonempty: bool,
    #[command(flatten)]
    pub view: ViewArgs,
    /// Serve several views from one daemon, each in MOUNTPOINT/<target>/:
    /// `gfx90a:xnack-,gfx942,gfx1100` (`/` joins targets of one view:
    /// `gfx90a:sramecc+:xnack-/gfx1030`; so does `+` before a target).
    /// They share plans, the code-object cache and the cache directory.
    /// Excludes --arch.
    #[arg(long, value_name = "TARGET[,TARGET…]")]
    pub views: Vec<String>,
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
    /// Copy every transformed binary and archive into the cache directory
    /// at its first open, and serve it through kernel passthrough once
    /// written (native page-cache speed; costs its size on disk). Without
    /// it a file is copied when the daemon opens it a second time, and an
    /// archive that costs a decode at once.
    #[arg(long)]
    pub materialize: bool,
    /// Where the daemon logs (default: stderr; a detached daemon also
    /// logs to syslog / the journal, `journalctl -t kpackfs`).
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
    /// fstab-style options: arch=… (`auto` for this machine's GPUs; repeat
    /// it for several targets), view=… (repeat per view), allow_other,
    /// auto_unmount, cache_size=…, threads=…, ttl=…, archive_names=…,
    /// archive_compression=…, cache_dir=…, cache_dir_size=…, materialize,
    /// no_passthrough, nonempty, log_file=…, foreground, db_rules=FILE; generic mount options
    /// (ro, nodev, nosuid, noatime, defaults, nofail, _netdev, x-*) are accepted.
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
}
