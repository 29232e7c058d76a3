//! `kpackfs`: serve a fat ROCm install as a slim per-GPU prefix (FUSE).
//!
//! Exit status: 0 success, 1 failure while working, 2 bad arguments or an
//! unusable source/mountpoint.

use std::process::ExitCode;

use clap::Parser;

use kpackfs::cli::{Cli, Command};
#[cfg(target_os = "linux")]
use kpackfs::{logging, mount, watchdog};
use kpackfs_cli::{normalize_args, run_common, Failure, Naming};

fn run(cli: Cli) -> Result<(), Failure> {
    match cli.cmd {
        #[cfg(target_os = "linux")]
        Command::Mount(m) => mount::run(m),
        #[cfg(not(target_os = "linux"))]
        Command::Mount(_) => Err(Failure::usage("mounting needs Linux (FUSE); use kpackfs-windows on Windows")),
        Command::Common(c) => run_common(c, Naming::Target),
        #[cfg(target_os = "linux")]
        Command::UnmountWatchdog { mountpoint } => watchdog::run(&mountpoint),
        #[cfg(not(target_os = "linux"))]
        Command::UnmountWatchdog { .. } => Ok(()),
        Command::Generate(g) => kpackfs::generate::run(g),
    }
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // clap would suggest `mount` for these: the opposite of what was meant.
    if let Some(cmd) = args.get(1).and_then(|a| a.to_str()).filter(|a| matches!(*a, "umount" | "unmount")) {
        eprintln!("kpackfs: there is no {cmd} command: unmount a view with `umount MOUNTPOINT` (as a user: `fusermount3 -u MOUNTPOINT`)");
        return ExitCode::from(2);
    }
    let cli = Cli::parse_from(normalize_args(args));
    // A mount logging to a file gets no colour codes in it.
    #[cfg(target_os = "linux")]
    logging::init(matches!(&cli.cmd, Command::Mount(m) if m.log_file.is_some() || m.options.iter().any(|o| o.contains("log_file="))));
    #[cfg(not(target_os = "linux"))]
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).format_timestamp_millis().init();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("kpackfs: {}", f.msg);
            #[cfg(target_os = "linux")]
            logging::tell_terminal(&f.msg);
            ExitCode::from(f.code)
        }
    }
}
