//! Where diagnostics go. `env_logger` on stderr (`RUST_LOG`, warn by
//! default), with two things a mount's operator needs:
//!
//! * with `--log-file` everything after argument parsing goes to the file
//!   (the daemon's stderr is pointed at it), while the few lines the person
//!   who ran `mount` must see — a target the install does not carry, a
//!   mount that failed — also reach the terminal ([`tell_terminal`]);
//! * a detached daemon without `--log-file` (whose stderr ends up on
//!   /dev/null) also sends every record to syslog — the journal on a
//!   systemd machine — as other FUSE daemons do ([`to_syslog`]);
//! * fuser's `Failed to umount filesystem: Invalid argument` is dropped: it
//!   is logged on every ordinary `umount`, when the session ends after the
//!   kernel already removed the mount (EINVAL: nothing is mounted there).

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::Mutex;

use log::{Log, Metadata, Record};

/// The terminal the command was run from, kept while stderr goes to a log
/// file (until a detached daemon reports ready and lets the tty go).
static TERMINAL: Mutex<Option<File>> = Mutex::new(None);

/// Names the syslog socket instead of `/dev/log` (tests stand a socket of
/// their own in for it; a container may bind the host's elsewhere).
pub const SYSLOG_SOCKET_ENV: &str = "KPACKFS_SYSLOG_SOCKET";

type Syslog = syslog::Logger<syslog::LoggerBackend, syslog::Formatter3164>;

/// Where records also go once [`to_syslog`] connected.
static SYSLOG: Mutex<Option<Syslog>> = Mutex::new(None);

/// Connects to syslog (`$KPACKFS_SYSLOG_SOCKET`, else `/dev/log` or the
/// other usual sockets) as `kpackfs[PID]`, facility daemon: from now on
/// every record that passes the filter is also sent there. Returns what
/// went wrong when there is no syslog to talk to.
pub fn to_syslog() -> Result<(), String> {
    let formatter = syslog::Formatter3164 { facility: syslog::Facility::LOG_DAEMON, hostname: None, process: "kpackfs".into(), pid: std::process::id() };
    let logger = match std::env::var_os(SYSLOG_SOCKET_ENV) {
        Some(p) => syslog::unix_custom(formatter, &p).map_err(|e| format!("{}: {e}", std::path::Path::new(&p).display())),
        None => syslog::unix(formatter).map_err(|e| format!("/dev/log: {e}")),
    }?;
    if let Ok(mut s) = SYSLOG.lock() {
        *s = Some(logger);
    }
    Ok(())
}

/// Sends `record` to syslog if [`to_syslog`] connected; a failed send is
/// dropped (there is nowhere left to say so).
fn send_syslog(record: &Record<'_>) {
    let Ok(mut guard) = SYSLOG.lock() else { return };
    let Some(s) = guard.as_mut() else { return };
    // One line per record: syslog splits nothing, the journal shows it whole.
    let msg = if record.target().starts_with("kpackfs") { record.args().to_string() } else { format!("{}: {}", record.target(), record.args()) };
    let _ = match record.level() {
        log::Level::Error => s.err(msg),
        log::Level::Warn => s.warning(msg),
        log::Level::Info => s.info(msg),
        log::Level::Debug | log::Level::Trace => s.debug(msg),
    };
}

/// The logger with fuser's spurious unmount warning filtered out.
struct Filtered(env_logger::Logger);

/// Whether `record` is fuser's warning that unmounting a mount the kernel
/// already removed failed.
fn spurious(record: &Record<'_>) -> bool {
    record.target().starts_with("fuser::session") && record.level() == log::Level::Warn && {
        let msg = record.args().to_string();
        msg.starts_with("Failed to umount filesystem") && msg.contains("os error 22")
    }
}

impl Log for Filtered {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        self.0.enabled(m)
    }
    fn log(&self, record: &Record<'_>) {
        if self.0.matches(record) && !spurious(record) {
            self.0.log(record);
            send_syslog(record);
        }
    }
    fn flush(&self) {
        self.0.flush();
    }
}

/// Installs the logger; `plain` turns colours off (for output that will be
/// redirected to a file, where escape codes would only be noise).
pub fn init(plain: bool) {
    let mut b = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"));
    b.format_timestamp_millis();
    if plain {
        b.write_style(env_logger::WriteStyle::Never);
    }
    let logger = b.build();
    let max = logger.filter();
    if log::set_boxed_logger(Box::new(Filtered(logger))).is_ok() {
        log::set_max_level(max);
    }
}

/// Points stderr at `log`, keeping the terminal for [`tell_terminal`].
pub fn to_file(log: &File) {
    // SAFETY: dup/dup2 on the standard error descriptor and an open file.
    unsafe {
        let tty = libc::dup(2);
        if tty >= 0 {
            if let Ok(mut t) = TERMINAL.lock() {
                *t = Some(File::from_raw_fd(tty));
            }
        }
        libc::dup2(log.as_raw_fd(), 2);
    }
}

/// Writes `kpackfs: msg` on the terminal if stderr was pointed at a log
/// file (where `log` has put it already); otherwise it is on stderr.
pub fn tell_terminal(msg: &str) {
    if let Ok(mut t) = TERMINAL.lock() {
        if let Some(f) = t.as_mut() {
            let _ = writeln!(f, "kpackfs: {msg}");
        }
    }
}

/// Closes the terminal kept by [`to_file`] (a daemon pins no tty).
pub fn release_terminal() {
    if let Ok(mut t) = TERMINAL.lock() {
        *t = None;
    }
}

/// Whether [`to_file`] kept a terminal (diagnostics go to a log file).
pub fn has_terminal() -> bool {
    TERMINAL.lock().is_ok_and(|t| t.is_some())
}
