//! All-or-nothing output for the commands that write trees (`bake`,
//! `split`, `split-wheel`, `recombine`, `resolve --out`).
//!
//! Everything is written under a private staging directory *inside* the
//! output directory (`OUTPUT/.kpackfs-<what>.<pid>.<n>`), which is on the
//! output's file system even when OUTPUT is a mount point (a small tmpfs,
//! a USB disk), so the final step is a handful of renames. A run that
//! fails — an error, ENOSPC, a panic unwinding — drops its [`Staging`],
//! which removes the staging directory and the output directory itself
//! (and any parents) when this run created them: a failed command leaves
//! the output as it found it.
//!
//! [`resolve_path`] and [`nested`] decide whether an output lies inside an
//! input (or the other way round) before anything is written.

use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A staging directory for one output; see the module documentation.
#[derive(Debug)]
pub struct Staging {
    output: PathBuf,
    dir: PathBuf,
    /// The directories this run created to make `output`, outermost first.
    created: Vec<PathBuf>,
    /// Entries already moved into `output` by an unfinished commit.
    moved: Vec<PathBuf>,
    done: bool,
}

/// Distinguishes stagings of one process (split-wheel runs a split).
static SERIAL: AtomicU64 = AtomicU64::new(0);

impl Staging {
    /// Creates `output` if it is missing (remembering what was created)
    /// and an empty staging directory inside it, readable by this user
    /// only while it is being filled.
    pub fn begin(output: &Path, what: &str) -> io::Result<Staging> {
        let mut created = Vec::new();
        let mut cur = output.to_path_buf();
        let mut missing = Vec::new();
        while !cur.as_os_str().is_empty() && std::fs::symlink_metadata(&cur).is_err() {
            missing.push(cur.clone());
            match cur.parent() {
                Some(p) => cur = p.to_path_buf(),
                None => break,
            }
        }
        let mut st = Staging { output: output.to_path_buf(), dir: PathBuf::new(), created: Vec::new(), moved: Vec::new(), done: false };
        for d in missing.into_iter().rev() {
            match std::fs::create_dir(&d) {
                Ok(()) => created.push(d),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    st.created = created;
                    return Err(e);
                }
            }
        }
        st.created = created;
        let n = SERIAL.fetch_add(1, Ordering::Relaxed);
        let dir = output.join(format!(".kpackfs-{what}.{}.{n}", std::process::id()));
        // A leftover of a killed run with the same pid.
        let _ = std::fs::remove_dir_all(&dir);
        create_private_dir(&dir)?;
        st.dir = dir;
        Ok(st)
    }

    /// Where to write.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Moves every entry of the staging directory into the output. An
    /// existing entry of the same name is an error (nothing is replaced)
    /// unless `replace_files`, which lets files — never directories — be
    /// replaced. On error, whatever was moved is removed again.
    pub fn commit(mut self, replace_files: bool) -> io::Result<()> {
        let mut names: Vec<_> = std::fs::read_dir(&self.dir)?.map(|e| e.map(|e| e.file_name())).collect::<io::Result<_>>()?;
        names.sort();
        for n in &names {
            let to = self.output.join(n);
            if let Ok(md) = std::fs::symlink_metadata(&to) {
                if !(replace_files && md.is_file()) {
                    return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{}: already exists", to.display())));
                }
            }
        }
        for n in &names {
            let (from, to) = (self.dir.join(n), self.output.join(n));
            rename(&from, &to, replace_files)?;
            self.moved.push(to);
        }
        std::fs::remove_dir(&self.dir)?;
        self.done = true;
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        for m in &self.moved {
            let _ = remove_any(m);
        }
        if !self.dir.as_os_str().is_empty() {
            if let Err(e) = std::fs::remove_dir_all(&self.dir) {
                log::warn!("{}: could not remove the staging directory: {e}", self.dir.display());
            }
        }
        // Innermost first, and only when empty: never another's files.
        for d in self.created.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

fn remove_any(p: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(p) {
        Ok(md) if md.is_dir() => std::fs::remove_dir_all(p),
        Ok(_) => std::fs::remove_file(p),
        Err(e) => Err(e),
    }
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().mode(0o700).create(dir)
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> io::Result<()> {
    std::fs::create_dir(dir)
}

/// `rename`, refusing to replace an existing entry unless `replace`
/// (atomically on Linux: a concurrent writer's file is never clobbered).
#[cfg(target_os = "linux")]
fn rename(from: &Path, to: &Path, replace: bool) -> io::Result<()> {
    if replace {
        return std::fs::rename(from, to);
    }
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE).map_err(io::Error::from)
}

#[cfg(not(target_os = "linux"))]
fn rename(from: &Path, to: &Path, replace: bool) -> io::Result<()> {
    if !replace && std::fs::symlink_metadata(to).is_ok() {
        return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{}: already exists", to.display())));
    }
    std::fs::rename(from, to)
}

/// The path `p` will name once it is created: symlinks resolved as far as
/// the path exists, the rest appended with `.` dropped and `..` taken
/// lexically (a directory that does not exist yet cannot be a symlink, so
/// once created, its `..` is the directory above it). Errors when an
/// existing component cannot be resolved (a dangling symlink, no
/// permission) — such a path is unusable as an output anyway.
pub fn resolve_path(p: &Path) -> io::Result<PathBuf> {
    let abs = std::path::absolute(p)?;
    let mut cur = PathBuf::new();
    let mut exists = true;
    for c in abs.components() {
        match c {
            Component::Prefix(_) | Component::RootDir => cur.push(c.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                cur.pop();
            }
            Component::Normal(n) => {
                cur.push(n);
                if exists {
                    match std::fs::symlink_metadata(&cur) {
                        Ok(_) => cur = std::fs::canonicalize(&cur)?,
                        Err(e) if e.kind() == io::ErrorKind::NotFound => exists = false,
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }
    Ok(cur)
}

/// Whether one of `a` and `b` lies inside the other (or they are the same
/// place), after [`resolve_path`]. `None` when either cannot be resolved.
pub fn nested(a: &Path, b: &Path) -> Option<bool> {
    let (a, b) = (resolve_path(a).ok()?, resolve_path(b).ok()?);
    Some(a.starts_with(&b) || b.starts_with(&a))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp() -> PathBuf {
        let d = std::env::temp_dir().join(format!("kpackfs-staging-test.{}.{}", std::process::id(), SERIAL.fetch_add(1, Ordering::Relaxed)));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::canonicalize(d).unwrap()
    }

    #[test]
    fn failure_leaves_nothing_and_commit_moves_everything() {
        let t = tmp();
        // Output and a parent created by this run: both gone after a failure.
        let out = t.join("a/b");
        let s = Staging::begin(&out, "test").unwrap();
        std::fs::write(s.path().join("f"), b"x").unwrap();
        drop(s);
        assert!(!t.join("a").exists(), "created directories left behind");
        // An existing output keeps what it had, gets what was staged.
        std::fs::create_dir(t.join("o")).unwrap();
        std::fs::write(t.join("o/old"), b"old").unwrap();
        let s = Staging::begin(&t.join("o"), "test").unwrap();
        std::fs::create_dir(s.path().join("d")).unwrap();
        std::fs::write(s.path().join("d/f"), b"new").unwrap();
        drop(s);
        assert_eq!(std::fs::read_dir(t.join("o")).unwrap().count(), 1);
        let s = Staging::begin(&t.join("o"), "test").unwrap();
        std::fs::create_dir(s.path().join("d")).unwrap();
        std::fs::write(s.path().join("d/f"), b"new").unwrap();
        s.commit(false).unwrap();
        assert_eq!(std::fs::read(t.join("o/d/f")).unwrap(), b"new");
        assert_eq!(std::fs::read_dir(t.join("o")).unwrap().count(), 2, "staging directory left behind");
        // Never replaces a directory; files only when asked.
        let s = Staging::begin(&t.join("o"), "test").unwrap();
        std::fs::create_dir(s.path().join("d")).unwrap();
        std::fs::write(s.path().join("old"), b"new").unwrap();
        assert!(s.commit(true).is_err());
        assert_eq!(std::fs::read(t.join("o/old")).unwrap(), b"old");
        let s = Staging::begin(&t.join("o"), "test").unwrap();
        std::fs::write(s.path().join("old"), b"new").unwrap();
        s.commit(true).unwrap();
        assert_eq!(std::fs::read(t.join("o/old")).unwrap(), b"new");
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn nesting_sees_through_symlinks_and_dotdot() {
        let t = tmp();
        let src = t.join("src");
        std::fs::create_dir_all(src.join("sub")).unwrap();
        std::os::unix::fs::symlink(&src, t.join("link")).unwrap();
        for dest in ["src/out", "src", "link/new/deeper", "nothere/../src/x", "src/nothere/..", "src/sub/../out"] {
            assert_eq!(nested(&src, &t.join(dest)), Some(true), "{dest}");
        }
        for dest in ["out", "srcx", "src/../out", "nothere/../../x"] {
            assert_eq!(nested(&src, &t.join(dest)), Some(false), "{dest}");
        }
        // A source inside the destination.
        assert_eq!(nested(&src.join("sub"), &t.join("link")), Some(true));
        std::fs::remove_dir_all(&t).unwrap();
    }
}
