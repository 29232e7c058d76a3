//! The cache directory itself and how files in it are opened: which
//! directory is kpackfs's own ([`own_dir`]: created and tagged by kpackfs,
//! never one it did not create), and opens that never follow a symlink,
//! never block on a FIFO and accept only regular files of the daemon's
//! user.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::DiskCacheError;

/// The tag that marks a directory as kpackfs's own (the Cache Directory
/// Tagging convention: backup tools skip such directories).
pub const TAG_NAME: &str = "CACHEDIR.TAG";

const TAG_SIGNATURE: &str = "Signature: 8a477f597d28d172789f06886806bc55";

const TAG_TEXT: &str = "Signature: 8a477f597d28d172789f06886806bc55\n# This file is a cache directory tag created by kpackfs.\n# For information about cache directory tags see https://bford.info/cachedir/\n";

/// The subdirectory kpackfs makes for itself in a `--cache-dir` it did not
/// create.
pub const OWN_SUBDIR: &str = "kpackfs";

/// The default cache directory: `/var/cache/kpackfs` for root,
/// `$XDG_CACHE_HOME/kpackfs` (or `~/.cache/kpackfs`) for a user,
/// `%LOCALAPPDATA%\kpackfs` on Windows.
pub fn default_dir() -> Option<PathBuf> {
    #[cfg(unix)]
    {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            return Some(PathBuf::from("/var/cache/kpackfs"));
        }
        let xdg = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).filter(|p| p.is_absolute());
        xdg.or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache"))).map(|d| d.join("kpackfs"))
    }
    #[cfg(not(unix))]
    {
        std::env::var_os("LOCALAPPDATA").map(|d| PathBuf::from(d).join("kpackfs"))
    }
}

#[cfg(unix)]
fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Flags of every open in the cache directory: never follow a symlink, and
/// never block in `open` (a FIFO planted at an entry's name would otherwise
/// hold the opening worker until someone writes to it). Regular files
/// ignore `O_NONBLOCK`.
#[cfg(unix)]
pub(super) const OPEN_FLAGS: i32 = libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK;

/// Opens `p` without following a symlink and only if it is a regular file
/// of ours. `Ok(None)`: absent, or refused (and removed).
pub(super) fn open_private(p: &Path, write: bool) -> io::Result<Option<File>> {
    let mut o = OpenOptions::new();
    o.read(true).write(write);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut o, OPEN_FLAGS);
    share_all(&mut o);
    let f = match o.open(p) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        #[cfg(unix)]
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            log::warn!("{}: cache entry is a symlink; removed", p.display());
            let _ = fs::remove_file(p);
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let md = f.metadata()?;
    #[cfg(unix)]
    let foreign = std::os::unix::fs::MetadataExt::uid(&md) != euid();
    #[cfg(not(unix))]
    let foreign = false;
    if !md.is_file() || foreign {
        log::warn!("{}: cache entry is not a regular file of this user; removed", p.display());
        let _ = fs::remove_file(p);
        return Ok(None);
    }
    Ok(Some(f))
}

/// Whether `f` (opened with [`OPEN_FLAGS`]) is a regular file of ours.
pub(super) fn is_private_file(f: &File) -> bool {
    let Ok(md) = f.metadata() else { return false };
    #[cfg(unix)]
    let ours = std::os::unix::fs::MetadataExt::uid(&md) == euid();
    #[cfg(not(unix))]
    let ours = true;
    md.is_file() && ours
}

/// On Windows, lets entries that readers hold open be renamed over and
/// deleted (eviction, rebuilding a damaged entry), as on POSIX systems:
/// without `FILE_SHARE_DELETE` both fail while any handle is open.
pub(super) fn share_all(o: &mut OpenOptions) {
    #[cfg(windows)]
    std::os::windows::fs::OpenOptionsExt::share_mode(o, 0x1 | 0x2 | 0x4);
    #[cfg(not(windows))]
    let _ = o;
}

/// Creates `p` afresh (whatever had that name is removed first, so a
/// planted FIFO or symlink is never opened), mode 0600.
pub(super) fn create_private(p: &Path) -> io::Result<File> {
    match fs::remove_file(p) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut o = OpenOptions::new();
    o.read(true).write(true).create_new(true);
    share_all(&mut o);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600).custom_flags(OPEN_FLAGS);
    }
    o.open(p)
}

/// Syncs a directory so the renames in it survive a power loss.
pub(super) fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    #[cfg(not(unix))]
    let _ = dir;
}

/// The directory kpackfs keeps its entries in, given `--cache-dir dir`:
/// `dir` itself if kpackfs created it (it carries kpackfs's tag) or if it
/// does not exist yet (it is then created 0700 and tagged); otherwise
/// (`/tmp`, a directory shared with other programs) the subdirectory
/// `dir/kpackfs`, under the same rule. A symlink is refused at either
/// level before anything is resolved or created, and nothing in a
/// directory kpackfs did not create is ever changed: its mode, its files.
pub fn own_dir(dir: &Path) -> Result<PathBuf, DiskCacheError> {
    if let Some(d) = claim(dir)? {
        return Ok(d);
    }
    let sub = dir.join(OWN_SUBDIR);
    claim(&sub)?.ok_or_else(|| DiskCacheError::NotOurs(sub, format!("it exists without kpackfs's {TAG_NAME}")))
}

/// `Some(dir)` if `dir` is kpackfs's (created now, or tagged earlier);
/// `None` if it is a directory of someone or something else.
fn claim(dir: &Path) -> Result<Option<PathBuf>, DiskCacheError> {
    let err = |e| DiskCacheError::Io(dir.to_path_buf(), e);
    let not_private = |why: String| DiskCacheError::NotPrivate(dir.to_path_buf(), why);
    let md = match fs::symlink_metadata(dir) {
        Ok(md) => md,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                let mut b = fs::DirBuilder::new();
                b.recursive(true);
                #[cfg(unix)]
                std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
                b.create(parent).map_err(err)?;
            }
            #[cfg_attr(not(unix), allow(unused_mut))]
            let mut b = fs::DirBuilder::new();
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
            match b.create(dir) {
                Ok(()) => {
                    let mut t = create_private(&dir.join(TAG_NAME)).map_err(err)?;
                    t.write_all(TAG_TEXT.as_bytes()).and_then(|()| t.sync_all()).map_err(err)?;
                    sync_dir(dir);
                    log::info!("created cache directory {}", dir.display());
                    return Ok(Some(dir.to_path_buf()));
                }
                // Made by someone else meanwhile: judged as found.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => fs::symlink_metadata(dir).map_err(err)?,
                Err(e) => return Err(err(e)),
            }
        }
        Err(e) => return Err(err(e)),
    };
    if md.file_type().is_symlink() {
        return Err(not_private("it is a symlink (refused: the cache directory is named by its real path)".into()));
    }
    if !md.is_dir() {
        return Err(not_private("not a directory".into()));
    }
    if !is_tagged(dir) {
        return Ok(None);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        if md.uid() != euid() {
            return Err(not_private(format!("owned by uid {}, not {}", md.uid(), euid())));
        }
        // Ours (tagged): put its mode back if someone widened it.
        if md.mode() & 0o077 != 0 {
            log::warn!("cache directory {}: mode {:o} made 0700 again", dir.display(), md.mode() & 0o7777);
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(err)?;
        }
    }
    Ok(Some(dir.to_path_buf()))
}

/// Whether `dir` carries kpackfs's tag (a regular file of ours).
fn is_tagged(dir: &Path) -> bool {
    let Ok(Some(f)) = open_tag(&dir.join(TAG_NAME)) else { return false };
    let mut text = String::new();
    if io::Read::read_to_string(&mut io::Read::take(f, 4096), &mut text).is_err() {
        return false;
    }
    text.starts_with(TAG_SIGNATURE) && text.contains("kpackfs")
}

/// Opens a tag without following symlinks or blocking, never removing
/// anything (the directory may not be ours).
fn open_tag(p: &Path) -> io::Result<Option<File>> {
    let mut o = OpenOptions::new();
    o.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut o, OPEN_FLAGS);
    match o.open(p) {
        Ok(f) => Ok(is_private_file(&f).then_some(f)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}
