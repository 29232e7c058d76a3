//! The filesystem without FUSE: [`Fs`] over a view of a temporary copy of
//! the committed test assets, driven as `fuse.rs` drives it. Oracles: the
//! source files themselves (bytes, sizes, modes), the code objects
//! clang-offload-bundler extracted (test_assets/expected), and hand-written
//! lists and errno values.

use std::cell::Cell;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fuser::{Errno, FileType, OpenFlags};
use kpackfs_core::formats::target::Selection;
use kpackfs_core::namespace::Namespace;
use kpackfs_core::view::{ArchiveNaming, View, ViewConfig, ROOT_INO};

use crate::fs::{BackingOpener, DirPlusReplier, DirReplier, Entry, Fs, XattrReply, NEGATIVE_TTL, STATS_SLACK};

const TTL: Duration = Duration::from_secs(3600);

fn assets() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../test_assets")
}

/// A source holding two fat binaries, one plain library, a symlink to it
/// and an empty directory; removed on drop.
fn source() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for b in ["libmulti.so", "libtwo.so", "libhost.so"] {
        std::fs::copy(assets().join("bin").join(b), d.path().join(b)).unwrap();
    }
    std::os::unix::fs::symlink("libhost.so", d.path().join("liblink.so")).unwrap();
    std::fs::create_dir(d.path().join("sub")).unwrap();
    d
}

/// A test backing id.
#[derive(Debug)]
struct Backing;

/// Registers files for "passthrough" (or refuses with `refuse`), counting calls.
struct Opener {
    calls: Cell<u32>,
    refuse: Option<i32>,
}

impl Opener {
    fn new(refuse: Option<i32>) -> Opener {
        Opener { calls: Cell::new(0), refuse }
    }
}

impl BackingOpener<Backing> for Opener {
    fn open_backing(&self, _file: &File) -> std::io::Result<Backing> {
        self.calls.set(self.calls.get() + 1);
        match self.refuse {
            Some(e) => Err(std::io::Error::from_raw_os_error(e)),
            None => Ok(Backing),
        }
    }
}

fn fs_over(src: &Path, passthrough: bool) -> Fs<Backing> {
    let view = View::new(view_cfg(src)).unwrap();
    let fs = Fs::new(Arc::new(Namespace::single(view)), TTL, passthrough, None);
    fs.set_passthrough(passthrough);
    fs
}

fn ino(fs: &Fs<Backing>, parent: u64, name: &str) -> u64 {
    let e = fs.lookup(parent, OsStr::new(name)).unwrap();
    assert_ne!(e.attr.ino.0, 0, "{name} not found");
    e.attr.ino.0
}

/// Everything `fh` reads from 0, in `chunk`-byte requests.
fn read_all(fs: &Fs<Backing>, fh: u64, chunk: u32) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let got = fs.read(fh, out.len() as u64, chunk, |r| r.unwrap().to_vec());
        if got.is_empty() {
            return out;
        }
        out.extend_from_slice(&got);
    }
}

const RDONLY: OpenFlags = OpenFlags(libc::O_RDONLY);

#[test]
fn lookup_answers_entries_and_negative_entries() {
    let src = source();
    let fs = fs_over(src.path(), false);
    let e = fs.lookup(ROOT_INO, OsStr::new("libhost.so")).unwrap();
    assert_eq!((e.attr.kind, e.ttl), (FileType::RegularFile, TTL));
    assert_eq!(fs.lookup(ROOT_INO, OsStr::new("sub")).unwrap().attr.kind, FileType::Directory);
    assert_eq!(fs.lookup(ROOT_INO, OsStr::new("liblink.so")).unwrap().attr.kind, FileType::Symlink);
    // Fat binaries get the synthesized archive directory.
    assert_eq!(fs.lookup(ROOT_INO, OsStr::new(".kpack")).unwrap().attr.kind, FileType::Directory);
    // Missing: a negative entry (node 0), kept at most NEGATIVE_TTL.
    let neg = fs.lookup(ROOT_INO, OsStr::new("libnone.so")).unwrap();
    assert_eq!((neg.attr.ino.0, neg.ttl), (0, NEGATIVE_TTL));
    let short = Fs::<Backing>::new(Arc::new(Namespace::single(View::new(view_cfg(src.path())).unwrap())), Duration::from_secs(1), false, None);
    assert_eq!(short.lookup(ROOT_INO, OsStr::new("libnone.so")).unwrap().ttl, Duration::from_secs(1));
    // Errors other than a missing name are errors.
    let file = ino(&fs, ROOT_INO, "libhost.so");
    assert_eq!(fs.lookup(file, OsStr::new("x")).unwrap_err(), Errno::ENOTDIR);
    assert_eq!(fs.lookup(ROOT_INO, OsStr::new("..")).unwrap_err(), Errno::EINVAL);
    assert_eq!(fs.lookup(ROOT_INO, OsStr::new(&"n".repeat(300))).unwrap_err(), Errno::ENAMETOOLONG);
}

fn view_cfg(src: &Path) -> ViewConfig {
    ViewConfig {
        source: src.to_path_buf(),
        selection: Selection::parse("gfx1030").unwrap(),
        cache_bytes: 1 << 20,
        naming: ArchiveNaming::TargetId,
        compression: Default::default(),
        db_rules: Default::default(),
    }
}

#[test]
fn getattr_reports_the_source_and_the_opened_version() {
    let src = source();
    let fs = fs_over(src.path(), false);
    let root = fs.getattr(ROOT_INO, None).unwrap();
    assert_eq!((root.attr.kind, root.ttl), (FileType::Directory, TTL));
    let host = ino(&fs, ROOT_INO, "libhost.so");
    let md = std::fs::metadata(src.path().join("libhost.so")).unwrap();
    let a = fs.getattr(host, None).unwrap().attr;
    assert_eq!(
        (a.size, a.perm as u32, a.uid, a.blocks),
        (md.len(), md.permissions().mode() & 0o7777, std::os::unix::fs::MetadataExt::uid(&md), md.len().div_ceil(512))
    );
    // Through a handle: the version opened, even once the name is gone.
    let fh = fs.open(host, RDONLY, &Opener::new(None)).unwrap().fh;
    std::fs::remove_file(src.path().join("libhost.so")).unwrap();
    assert_eq!(fs.getattr(host, Some(fh)).unwrap().attr.size, md.len());
    // An inode number the view never handed out.
    assert_eq!(fs.getattr(12345, None).unwrap_err(), Errno::ESTALE);
}

#[test]
fn read_serves_source_bytes_and_archives_of_the_bundlers_objects() {
    let src = source();
    let fs = fs_over(src.path(), false);
    let host = ino(&fs, ROOT_INO, "libhost.so");
    let fh = fs.open(host, RDONLY, &Opener::new(None)).unwrap().fh;
    assert!(read_all(&fs, fh, 4096) == std::fs::read(assets().join("bin/libhost.so")).unwrap());
    // Past the end: nothing.
    assert_eq!(fs.read(fh, 1 << 40, 4096, |r| r.unwrap().len()), 0);
    fs.release(host, fh);
    assert_eq!(fs.read(fh, 0, 10, |r| r.map(<[u8]>::len)), Err(Errno::EBADF));

    let kdir = ino(&fs, ROOT_INO, ".kpack");
    let arc = ino(&fs, kdir, "libmulti.so_gfx1030.kpack");
    let fh = fs.open(arc, RDONLY, &Opener::new(None)).unwrap().fh;
    let bytes = read_all(&fs, fh, 1000);
    assert_eq!(bytes.len() as u64, fs.getattr(arc, None).unwrap().attr.size);
    let co = std::fs::read(assets().join("expected/libmulti.so/0/gfx1030.co")).unwrap();
    assert!(bytes.windows(co.len()).any(|w| w == co), "the archive lacks clang-offload-bundler's gfx1030 object");
    let other = std::fs::read(assets().join("expected/libmulti.so/0/gfx906.co")).unwrap();
    assert!(!bytes.windows(other.len()).any(|w| w == other), "the archive holds another target's object");
}

#[test]
fn open_is_read_only() {
    let src = source();
    let fs = fs_over(src.path(), false);
    let host = ino(&fs, ROOT_INO, "libhost.so");
    for flags in [libc::O_WRONLY, libc::O_RDWR, libc::O_RDONLY | libc::O_TRUNC] {
        assert!(matches!(fs.open(host, OpenFlags(flags), &Opener::new(None)), Err(Errno::EROFS)));
    }
    let sub = ino(&fs, ROOT_INO, "sub");
    assert!(matches!(fs.open(sub, RDONLY, &Opener::new(None)), Err(Errno::EISDIR)));
    assert_eq!(fs.access(host, true), Err(Errno::EROFS));
    assert_eq!(fs.access(host, false), Ok(()));
}

#[test]
fn passthrough_is_chosen_per_inode_and_never_mixed() {
    let src = source();
    let fs = fs_over(src.path(), true);
    let host = ino(&fs, ROOT_INO, "libhost.so");
    let multi = ino(&fs, ROOT_INO, "libmulti.so");
    let ok = Opener::new(None);
    // Unchanged file: passthrough, one backing id shared by its handles.
    let a = fs.open(host, RDONLY, &ok).unwrap();
    let b = fs.open(host, RDONLY, &ok).unwrap();
    assert!(Arc::ptr_eq(a.backing.as_ref().unwrap(), b.backing.as_ref().unwrap()));
    assert_eq!(ok.calls.get(), 1);
    // A transformed binary has no local file holding its bytes.
    assert!(fs.open(multi, RDONLY, &ok).unwrap().backing.is_none());
    fs.release(host, a.fh);
    fs.release(host, b.fh);
    // (fuse.rs drops its `Opened` once the reply is sent.)
    drop((a, b));
    // Refused for this file: served through the page cache; while that
    // handle is open, the inode stays in that mode.
    let c = fs.open(host, RDONLY, &Opener::new(Some(libc::EMFILE))).unwrap();
    assert!(c.backing.is_none());
    let d = fs.open(host, RDONLY, &ok).unwrap();
    assert!(d.backing.is_none());
    assert_eq!(ok.calls.get(), 1, "passthrough tried for an inode with cached handles");
    fs.release(host, c.fh);
    fs.release(host, d.fh);
    let e = fs.open(host, RDONLY, &ok).unwrap();
    assert!(e.backing.is_some(), "the inode's handles are all closed: passthrough again");
    fs.release(host, e.fh);
    drop(e);
    // Refused for the mount (no privilege): never asked again.
    let denied = Opener::new(Some(libc::EPERM));
    for _ in 0..2 {
        let f = fs.open(host, RDONLY, &denied).unwrap();
        assert!(f.backing.is_none());
        fs.release(host, f.fh);
    }
    assert_eq!(denied.calls.get(), 1);
    // Without passthrough negotiated, never asked.
    let off = fs_over(src.path(), false);
    let none = Opener::new(None);
    let h = ino(&off, ROOT_INO, "libhost.so");
    assert!(off.open(h, RDONLY, &none).unwrap().backing.is_none());
    assert_eq!(none.calls.get(), 0);
}

/// Collects `readdir` entries, full after `room` of them.
struct Names {
    got: Vec<(OsString, u64, FileType)>,
    room: usize,
}

impl DirReplier for Names {
    fn add(&mut self, _ino: u64, offset: u64, kind: FileType, name: &OsStr) -> bool {
        if self.got.len() == self.room {
            return true;
        }
        self.got.push((name.to_os_string(), offset, kind));
        false
    }
}

struct Plus {
    got: Vec<(OsString, u64, Entry)>,
    room: usize,
}

impl DirPlusReplier for Plus {
    fn add(&mut self, name: &OsStr, offset: u64, e: &Entry) -> bool {
        if self.got.len() == self.room {
            return true;
        }
        self.got.push((name.to_os_string(), offset, e.clone()));
        false
    }
}

#[test]
fn readdir_lists_at_stable_offsets() {
    let src = source();
    let fs = fs_over(src.path(), false);
    let fh = fs.opendir(ROOT_INO).unwrap();
    let mut all = Names { got: Vec::new(), room: usize::MAX };
    fs.readdir(ROOT_INO, fh, 0, &mut all).unwrap();
    let mut names: Vec<&str> = all.got.iter().map(|(n, _, _)| n.to_str().unwrap()).collect();
    assert_eq!(&names[..2], [".", ".."]);
    names.sort();
    assert_eq!(names, [".", "..", ".kpack", "libhost.so", "liblink.so", "libmulti.so", "libtwo.so", "sub"]);
    let offsets: Vec<u64> = all.got.iter().map(|(_, o, _)| *o).collect();
    assert_eq!(offsets, (1..=8).collect::<Vec<u64>>());
    // Resuming where a full reply stopped gives the rest, in order.
    let mut first = Names { got: Vec::new(), room: 3 };
    fs.readdir(ROOT_INO, fh, 0, &mut first).unwrap();
    let mut rest = Names { got: Vec::new(), room: usize::MAX };
    fs.readdir(ROOT_INO, fh, first.got.last().unwrap().1, &mut rest).unwrap();
    first.got.extend(rest.got);
    assert_eq!(first.got, all.got);
    // The snapshot stays as opened, even when the source changes.
    std::fs::write(src.path().join("new.txt"), b"x").unwrap();
    let mut again = Names { got: Vec::new(), room: usize::MAX };
    fs.readdir(ROOT_INO, fh, 0, &mut again).unwrap();
    assert_eq!(again.got, all.got);
    // The archive directory lists the selected target's archives.
    let kdir = ino(&fs, ROOT_INO, ".kpack");
    let kfh = fs.opendir(kdir).unwrap();
    let mut k = Names { got: Vec::new(), room: usize::MAX };
    fs.readdir(kdir, kfh, 2, &mut k).unwrap();
    let mut knames: Vec<&str> = k.got.iter().map(|(n, _, _)| n.to_str().unwrap()).collect();
    knames.sort();
    assert_eq!(knames, ["libmulti.so_gfx1030.kpack", "libtwo.so_gfx1030.kpack"]);
    fs.releasedir(fh);
    assert_eq!(fs.readdir(ROOT_INO, fh, 0, &mut Names { got: Vec::new(), room: 9 }), Err(Errno::EBADF));
    let file = ino(&fs, ROOT_INO, "libhost.so");
    assert_eq!(fs.opendir(file), Err(Errno::ENOTDIR));
}

#[test]
fn readdirplus_gives_attributes_and_forgets_what_was_not_sent() {
    let src = source();
    let fs = fs_over(src.path(), false);
    let fh = fs.opendir(ROOT_INO).unwrap();
    let mut all = Plus { got: Vec::new(), room: usize::MAX };
    fs.readdirplus(ROOT_INO, fh, 0, &mut all).unwrap();
    assert_eq!(all.got.len(), 8);
    for (name, _, e) in &all.got {
        assert_eq!(e.ttl, TTL);
        let kind = match name.to_str().unwrap() {
            "." | ".." | ".kpack" | "sub" => FileType::Directory,
            "liblink.so" => FileType::Symlink,
            _ => FileType::RegularFile,
        };
        assert_eq!(e.attr.kind, kind, "{name:?}");
    }
    let sizes: Vec<(String, u64)> =
        all.got.iter().filter(|(n, _, _)| n == "libhost.so").map(|(n, _, e)| (n.to_string_lossy().into_owned(), e.attr.size)).collect();
    assert_eq!(sizes, [("libhost.so".to_string(), std::fs::metadata(src.path().join("libhost.so")).unwrap().len())]);
    // An entry that did not fit is not held for the kernel: the table
    // holds the root and what was sent.
    let fresh = fs_over(src.path(), false);
    let fh = fresh.opendir(ROOT_INO).unwrap();
    let mut three = Plus { got: Vec::new(), room: 3 };
    fresh.readdirplus(ROOT_INO, fh, 0, &mut three).unwrap();
    let s = fresh.stats();
    let inodes = s.lines().find_map(|l| l.strip_prefix("inodes ")).unwrap();
    assert_eq!(inodes, "2", "{s}");
}

#[test]
fn xattrs_in_our_namespace_with_size_probes() {
    let src = source();
    let fs = fs_over(src.path(), false);
    let host = ino(&fs, ROOT_INO, "libhost.so");
    let origin = OsStr::new("user.kpackfs.origin");
    assert_eq!(fs.getxattr(host, origin, 0), Ok(XattrReply::Size(11)));
    assert_eq!(fs.getxattr(host, origin, 11), Ok(XattrReply::Data(b"passthrough".to_vec())));
    assert_eq!(fs.getxattr(host, origin, 10), Err(Errno::ERANGE));
    // Other namespaces: no such attribute, without asking the view.
    assert_eq!(fs.getxattr(host, OsStr::new("security.selinux"), 0), Err(Errno::NO_XATTR));
    assert_eq!(fs.getxattr(12345, OsStr::new("security.selinux"), 0), Err(Errno::ESTALE));
    assert_eq!(fs.getxattr(host, OsStr::new("user.kpackfs.stats"), 0), Err(Errno::NO_XATTR));
    // The counters: a size probe promises room for growth.
    let stats = OsStr::new("user.kpackfs.stats");
    let XattrReply::Size(n) = fs.getxattr(ROOT_INO, stats, 0).unwrap() else { panic!("no size") };
    let XattrReply::Data(v) = fs.getxattr(ROOT_INO, stats, n).unwrap() else { panic!("no data") };
    assert_eq!(n as usize, v.len() + STATS_SLACK as usize);
    // Lists: NUL-terminated names (hand-written), sized the same way.
    let want = b"user.kpackfs.origin\0user.kpackfs.stats\0user.kpackfs.arch\0user.kpackfs.source\0".to_vec();
    assert_eq!(fs.listxattr(ROOT_INO, 0), Ok(XattrReply::Size(want.len() as u32)));
    assert_eq!(fs.listxattr(ROOT_INO, want.len() as u32), Ok(XattrReply::Data(want.clone())));
    assert_eq!(fs.listxattr(ROOT_INO, want.len() as u32 - 1), Err(Errno::ERANGE));
    let multi = ino(&fs, ROOT_INO, "libmulti.so");
    assert_eq!(fs.listxattr(multi, 1000), Ok(XattrReply::Data(b"user.kpackfs.origin\0user.kpackfs.targets\0".to_vec())));
    assert_eq!(fs.getxattr(multi, OsStr::new("user.kpackfs.targets"), 1000), Ok(XattrReply::Data(b"gfx1030,gfx906,gfx90a:xnack-,gfx90a:xnack+".to_vec())));
}

#[test]
fn readlink_and_view_errors_reach_the_caller_as_errno() {
    let src = source();
    let fs = fs_over(src.path(), false);
    let link = ino(&fs, ROOT_INO, "liblink.so");
    assert_eq!(fs.readlink(link), Ok(OsString::from("libhost.so")));
    let host = ino(&fs, ROOT_INO, "libhost.so");
    assert_eq!(fs.readlink(host), Err(Errno::EINVAL));
    // A FIFO in the source is never served: no such name.
    let fifo = src.path().join("fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    assert_eq!(fs.lookup(ROOT_INO, OsStr::new("fifo")).unwrap().attr.ino.0, 0);
    let s = fs.statfs().unwrap();
    assert!(s.block_size > 0 && s.name_max > 0);
}
