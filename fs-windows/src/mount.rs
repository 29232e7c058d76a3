//! `kpackfs mount` on Windows: checks the arguments, mounts the view with
//! Dokan (write-protected), serves until Ctrl-C (or Ctrl-Break, closing the
//! console, logoff, shutdown, or `dokanctl /u`), then unmounts cleanly.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dokan::{FileSystemMountError, FileSystemMounter, MountFlags, MountOptions};
use widestring::U16CString;
use winapi::shared::minwindef::{BOOL, DWORD, FALSE, TRUE};
use winapi::um::consoleapi::SetConsoleCtrlHandler;

use crate::cli::{MountArgs, MountPoint, Naming};
use crate::dokan_fs::KpackDokan;
use kpackfs_cli::{source_dir, view_config, Failure};

/// The mount point the console handler unmounts.
static MOUNTED_AT: OnceLock<U16CString> = OnceLock::new();

/// Console control handler (runs on a thread of its own): unmount, which
/// makes the main thread's wait return.
unsafe extern "system" fn on_console_event(event: DWORD) -> BOOL {
    match MOUNTED_AT.get() {
        Some(mp) => {
            log::info!("console event {event}: unmounting {}", mp.to_string_lossy());
            if !dokan::unmount(mp) {
                log::warn!("unmounting {} failed", mp.to_string_lossy());
            }
            TRUE
        }
        None => FALSE,
    }
}

fn mount_error(e: FileSystemMountError, mp: &str) -> Failure {
    match e {
        FileSystemMountError::DriveLetter | FileSystemMountError::MountPoint | FileSystemMountError::Mount => {
            Failure::usage(format!("mountpoint {mp}: {e} (is it in use, or not an empty NTFS directory?)"))
        }
        FileSystemMountError::DriverInstall | FileSystemMountError::Start | FileSystemMountError::Version => {
            Failure::runtime(format!("mounting at {mp}: {e} (is the Dokan 2.0.6 driver installed?)"))
        }
        FileSystemMountError::General => Failure::runtime(format!("mounting at {mp}: {e}")),
    }
}

pub fn run(args: MountArgs) -> Result<(), Failure> {
    let (source, mnt) = kpackfs_cli::mount_paths(args.demo, &args.paths)?;
    let src = source_dir(source.as_deref())?;
    let cfg = view_config(src.clone(), &args.view, crate::cli::WINDOWS_NAMING)?;
    let mp = MountPoint::parse(&mnt.to_string_lossy()).map_err(Failure::usage)?;
    let mp = match mp {
        MountPoint::Drive(c) => {
            if std::path::Path::new(&format!("{c}:\\")).exists() {
                return Err(Failure::usage(format!("mountpoint {c}: is busy: the drive letter is in use")));
            }
            MountPoint::Drive(c)
        }
        MountPoint::Dir(d) => {
            let md = std::fs::metadata(&d).map_err(|e| Failure::usage(format!("mountpoint {}: {e}", d.display())))?;
            if !md.is_dir() {
                return Err(Failure::usage(format!("mountpoint {}: not a directory", d.display())));
            }
            if std::fs::read_dir(&d).map_err(|e| Failure::usage(format!("mountpoint {}: {e}", d.display())))?.next().is_some() {
                return Err(Failure::usage(format!("mountpoint {}: not empty", d.display())));
            }
            let d = std::path::absolute(&d).map_err(|e| Failure::usage(format!("mountpoint {}: {e}", d.display())))?;
            if d.starts_with(&src) {
                return Err(Failure::usage(format!("mountpoint {} lies inside the source {}", d.display(), src.display())));
            }
            MountPoint::Dir(d)
        }
    };
    let mp_str = mp.dokan_string();
    if args.view.archive_names == Some(Naming::Target) {
        log::warn!("--archive-names target: archives whose names contain ':' (feature-qualified targets) cannot be shown on Windows");
    }

    let view = Arc::new(kpackfs_cli::open_view(cfg, &args.view, kpackfs_core::view::CopyPolicy::Decoding)?);
    let handler = KpackDokan::new(view.clone(), args.case_sensitive);
    let mount_point = U16CString::from_str(&mp_str).map_err(|_| Failure::usage(format!("mountpoint {mp_str:?}: invalid")))?;
    let mut flags = MountFlags::WRITE_PROTECT;
    if args.case_sensitive {
        flags |= MountFlags::CASE_SENSITIVE;
    }
    if args.dokan_debug {
        flags |= MountFlags::DEBUG | MountFlags::STDERR;
    }
    let options = MountOptions { single_thread: args.threads == 1, flags, timeout: Duration::from_secs(u64::from(args.timeout)), ..Default::default() };

    dokan::init();
    let _ = MOUNTED_AT.set(mount_point.clone());
    // SAFETY: registers a plain function; it only reads a static.
    if unsafe { SetConsoleCtrlHandler(Some(on_console_event), TRUE) } == FALSE {
        log::warn!("no console control handler: unmount with `dokanctl /u {mp_str}`");
    }
    let result = {
        let mut mounter = FileSystemMounter::new(&handler, &mount_point, &options);
        match mounter.mount() {
            Ok(fs) => {
                log::info!("serving {} at {mp_str} for {}", src.display(), view.config().selection);
                eprintln!("kpackfs: serving {} at {mp_str} for {} (Ctrl-C to unmount)", src.display(), view.config().selection);
                // Dropping the file system waits until it is unmounted.
                drop(fs);
                Ok(())
            }
            Err(e) => Err(mount_error(e, &mp_str)),
        }
    };
    dokan::shutdown();
    log::info!("counters at unmount:\n{}", view.stats());
    result
}
