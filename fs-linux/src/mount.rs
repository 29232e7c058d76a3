//! `kpackfs mount`: argument checks, detaching, the FUSE session, clean
//! unmount on SIGINT/SIGTERM/SIGHUP.
//!
//! Detaching re-executes the binary in the foreground as a child in its own
//! session and waits for it to report that the mount is live (the
//! fuser session returns only after the kernel handshake), so a script can
//! use the mountpoint on its next line. Re-exec instead of `fork` keeps the
//! daemon free of a half-copied multi-threaded runtime.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use fuser::{Config, MountOption, SessionACL};

use crate::cli::MountArgs;
use kpackfs_cli::{normalize_args, open_view, parse_size, selection_warning, source_dir, view_config, Compression, Failure, Naming};
use kpackfs_core::namespace::Namespace;
use kpackfs_core::view::CopyPolicy;

use crate::mounts::{detach_lazily, is_mountpoint, mounts_at};

/// Set in the detached child: report readiness on stdout.
const READY_ENV: &str = "KPACKFS_REPORT_READY";

/// Applies `-o a,b=c` options (fstab / mount helper style).
fn apply_options(args: &mut MountArgs) -> Result<(), Failure> {
    let opts: Vec<String> = args.options.iter().flat_map(|o| o.split(',')).map(str::trim).filter(|o| !o.is_empty()).map(String::from).collect();
    let mut from_options = false;
    for o in opts {
        let (k, v) = match o.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (o.as_str(), None),
        };
        fn need<'a>(k: &str, v: Option<&'a str>) -> Result<&'a str, Failure> {
            v.ok_or_else(|| Failure::usage(format!("-o {k} needs a value")))
        }
        match k {
            // Repeat `arch=` for several targets: commas separate options here.
            "arch" => {
                let t = need(k, v)?;
                args.view.arch = Some(match args.view.arch.take() {
                    Some(prev) if from_options => format!("{prev},{t}"),
                    _ => t.to_string(),
                });
                from_options = true;
            }
            "allow_other" => args.allow_other = true,
            "auto_unmount" => args.auto_unmount = true,
            "foreground" => args.foreground = true,
            "cache_size" => args.view.cache_size = parse_size(need(k, v)?).map_err(Failure::usage)?,
            "threads" => args.threads = need(k, v)?.parse().map_err(|_| Failure::usage("-o threads needs a number"))?,
            "ttl" => args.ttl = need(k, v)?.parse().map_err(|_| Failure::usage("-o ttl needs seconds"))?,
            "no_passthrough" => args.no_passthrough = true,
            "nonempty" => args.nonempty = true,
            "archive_names" => {
                args.view.archive_names = Some(match need(k, v)? {
                    "target" => Naming::Target,
                    "processor" => Naming::Processor,
                    x => return Err(Failure::usage(format!("-o archive_names={x}: use target or processor"))),
                })
            }
            "log_file" => args.log_file = Some(PathBuf::from(need(k, v)?)),
            "materialize" => args.materialize = true,
            // One view per `view=` (commas separate options here).
            "view" => args.views.push(need(k, v)?.to_string()),
            "cache_dir" => args.view.cache_dir = Some(PathBuf::from(need(k, v)?)),
            "cache_dir_size" => args.view.cache_dir_size = parse_size(need(k, v)?).map_err(Failure::usage)?,
            "archive_compression" => {
                args.view.archive_compression = match need(k, v)? {
                    "none" => Compression::None,
                    "zstd" => Compression::Zstd,
                    "auto" => Compression::Auto,
                    x => return Err(Failure::usage(format!("-o archive_compression={x}: use none, zstd or auto"))),
                }
            }
            // Rule files only: a rule itself may hold ',' ({a,b}), which separates options here.
            "db_rules" => args.view.db.db_rules.push(PathBuf::from(need(k, v)?)),
            // Generic options mount(8)/mount.fuse3/systemd pass along: the
            // view is always read-only, nodev, nosuid.
            "ro"
            | "rw"
            | "dev"
            | "nodev"
            | "suid"
            | "nosuid"
            | "exec"
            | "noexec"
            | "atime"
            | "noatime"
            | "relatime"
            | "auto"
            | "noauto"
            | "user"
            | "nouser"
            | "users"
            | "defaults"
            | "nofail"
            | "_netdev"
            | "default_permissions"
            | "fsname"
            | "subtype"
            | "async"
            | "sync" => {
                if k == "rw" {
                    log::debug!("-o rw ignored: the view is read-only");
                }
            }
            k if k.starts_with("x-") || k.starts_with("comment") => {}
            // `-o arch=gfx90a,gfx1030`: commas separate options here.
            k if kpackfs_core::formats::target::TargetId::parse(k).is_ok() => {
                return Err(Failure::usage(format!(
                    "unknown mount option {k:?}: commas separate options, so repeat arch= for each target (-o arch=…,arch={k})"
                )))
            }
            k => return Err(Failure::usage(format!("unknown mount option {k:?}"))),
        }
    }
    Ok(())
}

/// How long a busy mount keeps serving its current users after SIGTERM.
const GRACE: Duration = Duration::from_secs(5);

/// Detaches `mnt` lazily if it is still mounted (`why` goes to the log).
fn detach_if_still_mounted(mnt: &Path, why: &str) {
    if is_mountpoint(mnt) {
        log::info!("{} {why}: detaching it lazily", mnt.display());
        if let Err(e) = detach_lazily(mnt) {
            log::error!("detaching {}: {e}", mnt.display());
        }
    }
}

/// Sets the mount's readahead window to [`crate::fuse::READAHEAD`]: the
/// kernel offers FUSE 128 KiB at init and lets the daemon only lower it;
/// its bdi knob (root only) raises it.
fn set_readahead(mnt: &Path) {
    // The topmost mount there: ours.
    let Some(dev) = mounts_at(mnt).pop().map(|m| m.dev) else { return };
    let knob = format!("/sys/class/bdi/{dev}/read_ahead_kb");
    let kib = crate::fuse::READAHEAD / 1024;
    match std::fs::write(&knob, kib.to_string()) {
        Ok(()) => log::debug!("readahead of {} set to {kib} KiB", mnt.display()),
        Err(e) => log::debug!("could not set readahead ({knob}: {e}); the kernel's 128 KiB stays"),
    }
}

/// Starts the daemon as a detached child and waits until its mount is live.
fn detach() -> Result<(), Failure> {
    let exe = std::env::current_exe().map_err(|e| Failure::runtime(format!("cannot find own executable: {e}")))?;
    let mut argv: Vec<OsString> = std::env::args_os().skip(1).collect();
    argv = normalize_args([OsString::from("kpackfs")].into_iter().chain(argv).collect()).into_iter().skip(1).collect();
    argv.insert(1, "--foreground".into());
    let mut cmd = Command::new(exe);
    cmd.args(&argv).env(READY_ENV, "1").stdin(Stdio::null()).stdout(Stdio::piped());
    // A session of its own: no controlling terminal, so neither a hangup
    // nor `stty tostop` (a background write to the tty) can stop the daemon.
    // SAFETY: setsid is async-signal-safe; nothing else runs in the child.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|e| Failure::runtime(format!("cannot start the daemon: {e}")))?;
    let (tx, rx) = std::sync::mpsc::channel();
    if let Some(out) = child.stdout.take() {
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(out).read_line(&mut line);
            let _ = tx.send(line);
        });
    }
    match rx.recv_timeout(READY_TIMEOUT) {
        Ok(line) if line.trim() == "ready" => return Ok(()),
        Ok(_) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Failure::runtime(format!("the daemon did not report a live mount within {} s; stopped it", READY_TIMEOUT.as_secs())));
        }
    }
    let status = child.wait().map_err(|e| Failure::runtime(e.to_string()))?;
    Err(Failure { code: status.code().unwrap_or(1).clamp(1, 255) as u8, msg: "mount failed (see above)".into() })
}

/// How long `mount` (detaching) waits for the daemon's mount to go live.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Opens where a detached daemon's output goes (the log file or
/// /dev/null) — before mounting, so a bad `--log-file` is reported.
fn open_log(log_file: Option<&Path>) -> Result<std::fs::File, Failure> {
    match log_file {
        Some(p) => std::fs::OpenOptions::new().create(true).append(true).open(p).map_err(|e| Failure::usage(format!("--log-file {}: {e}", p.display()))),
        None => std::fs::OpenOptions::new().write(true).open("/dev/null").map_err(|e| Failure::runtime(format!("/dev/null: {e}"))),
    }
}

/// Points stdout/stderr at `target` once detached, so a closed terminal
/// never breaks the daemon.
fn redirect_stdio(target: &std::fs::File) {
    use std::os::fd::AsRawFd;
    // SAFETY: dup2 onto the standard descriptors with a valid open fd.
    unsafe {
        libc::dup2(target.as_raw_fd(), 1);
        libc::dup2(target.as_raw_fd(), 2);
    }
}

/// Whether `sig` was ignored when the daemon started (e.g. SIGHUP under
/// `nohup`): such a signal is left ignored rather than turned into an unmount.
fn inherited_ignore(sig: i32) -> bool {
    // SAFETY: querying (not changing) the disposition into a zeroed struct.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Refuses a mountpoint that would hide or loop on the install: the
/// source itself, a directory inside it or one containing it, and (unless
/// `nonempty`) a directory with entries, whose contents the mount would
/// hide from every process on the machine (FUSE tools refuse it alike).
fn check_mountpoint(src: &Path, mnt: &Path, nonempty: bool) -> Result<(), Failure> {
    if mnt == src {
        return Err(Failure::usage(format!("mountpoint {} is the source: the view would hide the install; mount it elsewhere", mnt.display())));
    }
    if mnt.starts_with(src) {
        return Err(Failure::usage(format!("mountpoint {} lies inside the source {}; mount the view outside it", mnt.display(), src.display())));
    }
    // The daemon must never reach its own mount: a worker waiting on a
    // request to its own filesystem can deadlock the mount.
    if src.starts_with(mnt) {
        return Err(Failure::usage(format!("source {} lies inside the mountpoint {}; mount the view outside it", src.display(), mnt.display())));
    }
    if !nonempty {
        let mut entries = std::fs::read_dir(mnt).map_err(|e| Failure::usage(format!("mountpoint {}: {e}", mnt.display())))?;
        if let Some(first) = entries.next() {
            let name = first.map(|e| e.file_name().to_string_lossy().into_owned()).unwrap_or_default();
            return Err(Failure::usage(format!(
                "mountpoint {} is not empty (it holds {name:?}…) and the view would hide it; use an empty directory, or -o nonempty (--nonempty) to mount over it",
                mnt.display()
            )));
        }
    }
    Ok(())
}

pub fn run(mut args: MountArgs) -> Result<(), Failure> {
    apply_options(&mut args)?;
    let (source, mnt) = kpackfs_cli::mount_paths(args.demo, &args.paths)?;
    let src = source_dir(source.as_deref())?;
    // `--views a,b/c`: one view per item (`/`, or `+` before a target, joins
    // targets of one view); the first is configured as `--arch` would be,
    // the others alike.
    let view_sels = kpackfs_core::namespace::view_selections(&args.views);
    if !view_sels.is_empty() {
        if args.view.arch.is_some() {
            return Err(Failure::usage("--arch and --views exclude each other (each view names its targets)"));
        }
        args.view.arch = Some(view_sels[0].clone());
    }
    let cfg = view_config(src.clone(), &args.view, Naming::Target)?;
    let mut more = Vec::new();
    for sel in view_sels.iter().skip(1) {
        let mut a = args.view.clone();
        a.arch = Some(sel.clone());
        more.push(view_config(src.clone(), &a, Naming::Target)?);
    }
    let mut seen = std::collections::HashSet::new();
    for s in std::iter::once(&cfg).chain(&more).map(|c| c.selection.to_string()) {
        if !seen.insert(s.clone()) {
            return Err(Failure::usage(format!("--views names {s} twice")));
        }
    }
    let md = std::fs::metadata(&mnt).map_err(|e| Failure::usage(format!("mountpoint {}: {e}", mnt.display())))?;
    if !md.is_dir() {
        return Err(Failure::usage(format!("mountpoint {}: not a directory", mnt.display())));
    }
    let mnt = std::fs::canonicalize(&mnt).map_err(|e| Failure::usage(format!("mountpoint {}: {e}", mnt.display())))?;
    if is_mountpoint(&mnt) {
        return Err(Failure::usage(format!("mountpoint {} is busy: something is already mounted there", mnt.display())));
    }
    check_mountpoint(&src, &mnt, args.nonempty)?;
    // The cache directory is written by the daemon: never inside its own
    // mount (a deadlock) nor inside the source (entries would show up in
    // the view and be watched as source changes).
    if let Some(dir) = args.view.cache_dir() {
        kpackfs_cli::not_a_directory("--cache-dir", &dir)?;
        // kpackfs's own directory there, refused if a symlink, before any
        // path is resolved (as `bake` does).
        let own = kpackfs_core::data_cache::own_dir(&dir).map_err(|e| Failure::usage(format!("--cache-dir: {e}")))?;
        let canon = std::fs::canonicalize(&own).map_err(|e| Failure::usage(format!("--cache-dir {}: {e}", dir.display())))?;
        if canon.starts_with(&mnt) {
            return Err(Failure::usage(format!("--cache-dir {} lies inside the mountpoint", dir.display())));
        }
        if canon.starts_with(&src) {
            return Err(Failure::usage(format!("--cache-dir {} lies inside the source", dir.display())));
        }
        args.view.cache_dir = Some(canon);
    } else if args.materialize {
        return Err(Failure::usage("--materialize needs a cache directory (--cache-dir)"));
    }
    if !args.foreground {
        return detach();
    }

    // Large transient buffers (decoded code objects) go straight to mmap and
    // back to the system when freed: glibc would otherwise keep them in its
    // arenas and the daemon's RSS would grow past its cache budget.
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only adjusts allocator tunables; called before any
    // worker thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
    // Catch signals before the mount exists, so none can kill the daemon
    // between mounting and the handler thread's start.
    let mut sigs = vec![signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM];
    if !inherited_ignore(signal_hook::consts::SIGHUP) {
        sigs.push(signal_hook::consts::SIGHUP);
    }
    let mut signals = signal_hook::iterator::Signals::new(&sigs).map_err(|e| Failure::runtime(format!("signal handling: {e}")))?;
    let detached = std::env::var_os(READY_ENV).is_some();
    // From here on everything goes to the log file when there is one; the
    // terminal keeps only what its user must see (logging::tell_terminal).
    let log_file = match &args.log_file {
        Some(p) => {
            let f = open_log(Some(p))?;
            crate::logging::to_file(&f);
            Some(f)
        }
        None => None,
    };
    let log = match log_file {
        Some(f) => Some(f),
        None if detached => {
            // Its stderr goes to /dev/null once it is ready: the journal
            // (syslog) keeps what it logs, from here on.
            if let Err(e) = crate::logging::to_syslog() {
                eprintln!("kpackfs: no syslog ({e}): the daemon's warnings will be lost once it detaches; give --log-file FILE to keep them");
            }
            Some(open_log(None)?)
        }
        None => None,
    };
    // Whether the selection matches anything is told once, in the
    // background: the scan reads every binary's bundle headers.
    let (check_src, check_rules, check_sels) =
        (src.clone(), cfg.db_rules.clone(), std::iter::once(&cfg).chain(&more).map(|c| c.selection.clone()).collect::<Vec<_>>());
    let check = std::thread::Builder::new()
        .name("kpackfs-check".into())
        .spawn(move || {
            for sel in &check_sels {
                // The view is still mounted (an operator may mount before
                // the libraries arrive), but the person who ran it is told.
                if let Some(w) = selection_warning(&check_src, sel, &check_rules) {
                    // Terminal first: once the log has the line, so has the terminal.
                    crate::logging::tell_terminal(&w);
                    log::warn!("{w}");
                }
            }
            // Lets tests (and a curious operator) know the check is over.
            log::info!("selection check finished");
        })
        .map_err(|e| Failure::runtime(e.to_string()))?;
    let policy = if args.materialize { CopyPolicy::All } else { CopyPolicy::Reopened };
    let first = open_view(cfg, &args.view, policy)?;
    let view = Arc::new(if view_sels.is_empty() { Namespace::single(first) } else { Namespace::several(first, more) });
    let watcher = match crate::watch::Watcher::new(&src) {
        Ok(w) => Some(w),
        Err(e) => {
            log::warn!("not watching the source for changes ({e}); the kernel notices them after --ttl");
            None
        }
    };
    let fs = crate::fuse::KpackFs::new(crate::fs::Fs::new(view.clone(), Duration::from_secs(args.ttl), !args.no_passthrough, watcher.clone()));
    let mut config = Config::default();
    let fsname = format!("kpackfs:{}", src.display()).replace([',', ' ', '\t', '\n'], "_");
    config.mount_options = vec![
        MountOption::RO,
        MountOption::FSName(fsname),
        MountOption::Subtype("kpackfs".into()),
        MountOption::DefaultPermissions,
        MountOption::NoAtime,
        MountOption::NoDev,
        MountOption::NoSuid,
    ];
    if args.auto_unmount {
        config.mount_options.push(MountOption::AutoUnmount);
    }
    config.acl = if args.allow_other {
        SessionACL::All
    } else if args.auto_unmount {
        SessionACL::RootAndOwner
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(args.threads as usize);
    config.clone_fd = true;

    // Kept open until the process ends: its closing wakes the watchdog.
    let _watchdog = if args.auto_unmount { Some(crate::watchdog::spawn(&mnt)?) } else { None };
    let mut session = fuser::Session::new(fs, &mnt, &config).map_err(|e| Failure::runtime(format!("mounting at {}: {e}", mnt.display())))?;
    set_readahead(&mnt);
    if let Some(w) = watcher {
        let (v, n) = (view.clone(), session.notifier());
        std::thread::Builder::new().name("kpackfs-watch".into()).spawn(move || w.run(v, n)).map_err(|e| Failure::runtime(e.to_string()))?;
    }
    log::info!("serving {} at {} for {}", src.display(), mnt.display(), view.selections());

    // Signals end the mount cleanly: unmount; if the mount is busy, detach
    // it lazily (new users no longer see it), let current users finish for
    // a grace period, then exit, which ends the detached connection.
    let sig_mnt = mnt.clone();
    let mut unmounter = session.unmount_callable();
    let sig_view = view.clone();
    std::thread::Builder::new()
        .name("kpackfs-signals".into())
        .spawn(move || {
            let Some(sig) = signals.forever().next() else { return };
            log::info!("signal {sig}: unmounting {}", sig_mnt.display());
            // Success may still leave the mount alive (without privilege,
            // fuser detaches lazily through fusermount; with auto-unmount it
            // only closes the socket), so the thread never returns here: if
            // the session has not ended by the grace period, the process
            // exits. (Returning would also leave the signals ignored.)
            if let Err(e) = unmounter.unmount() {
                log::warn!("unmounting {}: {e}", sig_mnt.display());
            }
            detach_if_still_mounted(&sig_mnt, "busy");
            // A second signal ends the grace period early.
            let deadline = std::time::Instant::now() + GRACE;
            while std::time::Instant::now() < deadline && signals.pending().next().is_none() {
                std::thread::sleep(Duration::from_millis(50));
            }
            log::info!("counters at exit:\n{}", sig_view.stats());
            std::process::exit(0);
        })
        .map_err(|e| Failure::runtime(e.to_string()))?;

    if detached {
        // Give the selection check a moment, so its warning reaches the
        // terminal that ran `mount` rather than only the log.
        let until = std::time::Instant::now() + Duration::from_millis(500);
        while !check.is_finished() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Some(log) = &log {
            let mut out = std::io::stdout();
            let _ = writeln!(out, "ready");
            let _ = out.flush();
            redirect_stdio(log);
        }
        crate::logging::release_terminal();
        // A daemon pins no directory (every path it uses is absolute).
        let _ = std::env::set_current_dir("/");
    } else {
        // `-f`: one line once the mount is live, wherever stderr goes.
        let live = format!("serving {} at {} for {} (Ctrl-C to unmount)", src.display(), mnt.display(), view.selections());
        if crate::logging::has_terminal() {
            crate::logging::tell_terminal(&live);
        } else {
            eprintln!("kpackfs: {live}");
        }
    }
    let r = session.run();
    // The session can end with the mount still attached: with
    // --auto-unmount, fusermount's watchdog unmounts without MNT_DETACH and
    // gives up if the mount is busy. Never leave a dead mount behind.
    detach_if_still_mounted(&mnt, "still attached after the session ended");
    // (The counters were logged by the filesystem's destroy.)
    r.map_err(|e| Failure::runtime(format!("FUSE session: {e}")))
}
