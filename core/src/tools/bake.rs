//! `kpackfs bake`: write a view to disk — the packager's fast path, and the
//! oracle the mount tests compare against.
//!
//! Files are written by [`crate::copy`] extent by extent from their
//! layouts (source ranges by in-kernel copy), so baking a 1.3 GB library
//! for one target costs a few megabytes of memory; compressed archives come
//! from the data cache, where `mount` and earlier bakes may have left them.

use std::ffi::OsString;
use std::fs::{self, FileTimes, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::copy::{open_dir, set_link_times, set_perm, systime};
use crate::staging::Staging;
use crate::view::{self, NodeType, Origin, View, ROOT_INO};

#[derive(Debug, Error)]
pub enum BakeError {
    #[error("destination {0} exists and is not an empty directory")]
    DestNotEmpty(PathBuf),
    /// Baking into the source would bake its own output, level after level.
    #[error("destination {dest} and source {src} are inside one another: choose a destination outside the source")]
    Nested { src: PathBuf, dest: PathBuf },
    #[error("{path}: {err}")]
    View { path: PathBuf, err: view::Error },
    #[error("{path}: {err}")]
    Io { path: PathBuf, err: io::Error },
    /// A binary with a damaged compressed bundle: its code objects cannot
    /// be written, and a tree without them is not a bake of the source.
    #[error("{path}: damaged offload bundle: {what}")]
    Damaged { path: PathBuf, what: String },
}

impl BakeError {
    /// Bad arguments or an unusable destination (exit status 2), as
    /// opposed to a failure while working.
    pub fn is_usage(&self) -> bool {
        matches!(self, BakeError::DestNotEmpty(_) | BakeError::Nested { .. })
    }
}

/// What was written.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BakeReport {
    pub dirs: u64,
    pub files: u64,
    pub symlinks: u64,
    pub transformed: u64,
    pub archives: u64,
    pub bytes: u64,
}

/// Progress callback argument.
pub struct Progress<'a> {
    pub report: &'a BakeReport,
    pub current: &'a Path,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> BakeError + '_ {
    move |err| BakeError::Io { path: path.to_path_buf(), err }
}

fn view_err(path: &Path) -> impl FnOnce(view::Error) -> BakeError + '_ {
    move |err| BakeError::View { path: path.to_path_buf(), err }
}

#[cfg(unix)]
fn make_symlink(_view: &View, _link: &Path, target: &OsString, at: &Path) -> io::Result<()> {
    std::os::unix::fs::symlink(target, at)
}

/// Windows has file and directory symlinks: which one is decided by what
/// the link text leads to in the view (resolved lexically from the link's
/// directory); `/` in the text becomes `\`. Creating symlinks needs
/// Developer Mode or an elevated prompt.
#[cfg(windows)]
fn make_symlink(view: &View, link: &Path, target: &OsString, at: &Path) -> io::Result<()> {
    let text = target.to_string_lossy();
    let mut to: Vec<&str> = link.parent().map(|p| p.iter().filter_map(|c| c.to_str()).collect()).unwrap_or_default();
    let mut inside = !text.starts_with(['/', '\\']) && text.as_bytes().get(1) != Some(&b':');
    for c in text.split(['/', '\\']) {
        match c {
            "" | "." => {}
            ".." => inside &= to.pop().is_some(),
            n => to.push(n),
        }
    }
    let to_dir = inside && view.getattr_path(&to.iter().collect::<PathBuf>()).is_ok_and(|a| a.kind == NodeType::Dir);
    let text = text.replace('/', "\\");
    let r = if to_dir { std::os::windows::fs::symlink_dir(&text, at) } else { std::os::windows::fs::symlink_file(&text, at) };
    r.map_err(|e| match e.raw_os_error() {
        // ERROR_PRIVILEGE_NOT_HELD
        Some(1314) => io::Error::new(e.kind(), "creating a symbolic link needs Developer Mode or an elevated prompt"),
        _ => e,
    })
}

/// A name Windows cannot hold is an error, not a surprise: `a:b` would
/// silently create the alternate data stream `b` of file `a`.
/// Feature-qualified archive names (`…_gfx90a:xnack-.kpack`) are the usual
/// cause: bake with archive names by processor.
#[cfg(windows)]
fn check_name(name: &std::ffi::OsStr) -> io::Result<()> {
    let s = name.to_string_lossy();
    if s.chars().any(|c| matches!(c, '\\' | '/' | ':' | '*' | '?' | '"' | '<' | '>' | '|') || (c as u32) < 0x20) {
        let msg = "name not allowed on Windows (archive names with ':' need --archive-names processor)";
        return Err(io::Error::new(io::ErrorKind::InvalidInput, msg));
    }
    Ok(())
}

#[cfg(not(windows))]
fn check_name(_name: &std::ffi::OsStr) -> io::Result<()> {
    Ok(())
}

/// Bakes the whole view into `dest` (which must not exist or be empty, and
/// must be neither inside the source nor contain it).
///
/// The tree is written under a [`Staging`] directory in `dest` and moved
/// into place only when complete: a bake that fails (ENOSPC, a damaged
/// source file) leaves `dest` as it was — still empty, or not there.
/// Error messages name paths as they would be in `dest`.
pub fn bake(view: &View, dest: &Path, progress: &mut dyn FnMut(&Progress<'_>)) -> Result<BakeReport, BakeError> {
    let source = &view.config().source;
    if crate::staging::nested(source, dest).unwrap_or(false) {
        return Err(BakeError::Nested { src: source.clone(), dest: dest.to_path_buf() });
    }
    match fs::metadata(dest) {
        Ok(md) if !md.is_dir() => return Err(BakeError::DestNotEmpty(dest.to_path_buf())),
        Ok(_) => {
            if fs::read_dir(dest).map_err(io_err(dest))?.next().is_some() {
                return Err(BakeError::DestNotEmpty(dest.to_path_buf()));
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(dest)(e)),
    }
    let staging = Staging::begin(dest, "bake").map_err(io_err(dest))?;
    let (report, top) = bake_into(view, staging.path(), dest, progress)?;
    staging.commit(false).map_err(io_err(dest))?;
    for (rel, a) in &top {
        finish_dir(&dest.join(rel), a)?;
    }
    Ok(report)
}

/// Writes the view under `stage`; `dest` only names paths in errors.
/// Returns the report and the directories still to finish in `dest` (the
/// root's children first, the root last).
fn bake_into(view: &View, stage: &Path, dest: &Path, progress: &mut dyn FnMut(&Progress<'_>)) -> Result<(BakeReport, Vec<(PathBuf, view::Attr)>), BakeError> {
    let mut report = BakeReport::default();
    // Directories get their modes and times after their children are in.
    let mut finish_dirs: Vec<(PathBuf, view::Attr)> = Vec::new();
    let mut stack: Vec<(u64, PathBuf)> = vec![(ROOT_INO, PathBuf::new())];
    while let Some((ino, rel)) = stack.pop() {
        let attr = view.getattr(ino).map_err(view_err(&rel))?;
        finish_dirs.push((rel.clone(), attr));
        report.dirs += 1;
        for e in view.readdir(ino).map_err(view_err(&rel))? {
            let child_rel = rel.join(&e.name);
            let out = stage.join(&child_rel);
            let named = dest.join(&child_rel);
            check_name(&e.name).map_err(io_err(&named))?;
            let a = view.lookup(ino, &e.name).map_err(view_err(&child_rel))?;
            match a.kind {
                NodeType::Dir => {
                    fs::create_dir(&out).map_err(io_err(&named))?;
                    stack.push((a.ino, child_rel.clone()));
                }
                NodeType::Symlink => {
                    let target = view.readlink(a.ino).map_err(view_err(&child_rel))?;
                    make_symlink(view, &child_rel, &target, &out).map_err(io_err(&named))?;
                    set_link_times(&out, a.atime, a.mtime).map_err(io_err(&named))?;
                    report.symlinks += 1;
                }
                NodeType::File => {
                    let f = view.open(a.ino).map_err(view_err(&child_rel))?;
                    let dst = OpenOptions::new().write(true).create_new(true).open(&out).map_err(io_err(&named))?;
                    report.bytes += f.write_to(&dst).map_err(|e| match e {
                        // The destination's failure, not the source's.
                        view::Error::Io(err) if is_dest_full(&err) => io_err(&named)(err),
                        other => view_err(&child_rel)(other),
                    })?;
                    dst.set_times(FileTimes::new().set_accessed(systime(a.atime)).set_modified(systime(a.mtime))).map_err(io_err(&named))?;
                    drop(dst);
                    set_perm(&out, a.perm).map_err(io_err(&named))?;
                    report.files += 1;
                    match a.origin {
                        Origin::Transformed => {
                            let damaged = view.damaged_bundles(&child_rel).map_err(view_err(&child_rel))?;
                            if !damaged.is_empty() {
                                return Err(BakeError::Damaged { path: child_rel, what: damaged.join("; ") });
                            }
                            report.transformed += 1
                        }
                        Origin::Archive => report.archives += 1,
                        _ => {}
                    }
                }
            }
            progress(&Progress { report: &report, current: &child_rel });
        }
    }
    // The root and its subdirectories get their modes and times once
    // moved to `dest`: moving a directory to another parent needs write
    // permission on it, which a read-only mode from the source would deny.
    let (mut top, rest): (Vec<_>, Vec<_>) = finish_dirs.into_iter().partition(|(rel, _)| rel.components().count() <= 1);
    for (rel, a) in rest.iter().rev() {
        finish_dir(&stage.join(rel), a)?;
    }
    top.reverse();
    Ok((report, top))
}

/// Errors that say the destination is full or unwritable.
fn is_dest_full(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded | io::ErrorKind::FileTooLarge | io::ErrorKind::ReadOnlyFilesystem)
}

fn finish_dir(dir: &Path, a: &view::Attr) -> Result<(), BakeError> {
    set_perm(dir, a.perm).map_err(io_err(dir))?;
    let times = FileTimes::new().set_accessed(systime(a.atime)).set_modified(systime(a.mtime));
    if let Ok(d) = open_dir(dir) {
        let _ = d.set_times(times);
    }
    Ok(())
}
