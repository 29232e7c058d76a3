//! The cache directory is kpackfs's own and never in the way, whatever
//! else is in it or happens to it (through real mounts and the real CLI):
//! a FIFO at an entry's path, another process stopped while holding an
//! entry's lock, a full file system, a shared 1777 directory with foreign
//! files, a symlink in place of the directory, and a source file whose
//! identity (device, inode, size, times) repeats with other contents.

use std::fs;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kpackfs_tests::cache::*;
use kpackfs_tests::*;

/// Waits (bounded) for `f` run on another thread: a hang fails the test
/// instead of blocking it. The bound is a hang detector, not a timing.
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(120)).unwrap_or_else(|_| panic!("{what}: no answer (hung)"))
}

/// The one `.data` entry of cache directory `dir`.
fn only_entry(dir: &Path) -> PathBuf {
    let data: Vec<PathBuf> = entries(dir, ".data").into_iter().filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with("tmp.")).collect();
    assert_eq!(data.len(), 1, "{data:?}");
    data[0].clone()
}

#[test]
fn a_fifo_at_an_entry_path_is_refused_not_waited_on() {
    require_root();
    let src = source();
    let cache = tempdir();
    let dir = cache.path().join("c");
    let opts = ["--cache-dir", dir.to_str().unwrap()];
    let want = reference_archive(src.path());
    {
        let m = Mount::new(Some(src.path()), "gfx90a", &opts);
        fs::metadata(m.path(ARCHIVE)).unwrap();
    }
    // The entry's data replaced by a FIFO nobody writes to.
    let data = only_entry(&dir);
    fs::remove_file(&data).unwrap();
    let c = std::ffi::CString::new(data.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let m = Mount::new(Some(src.path()), "gfx90a", &opts);
    let p = m.path(ARCHIVE);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(fs::read(p).map_err(|e| e.to_string()));
    });
    let got = rx.recv_timeout(Duration::from_secs(120));
    if got.is_err() {
        // Release the stuck worker so the mount can go away, then fail.
        let _ = fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(&data);
        panic!("reading the archive hung on the FIFO at {}", data.display());
    }
    assert!(got.unwrap().unwrap() == want, "wrong archive");
}

#[test]
fn a_stopped_lock_holder_does_not_stall_other_daemons() {
    require_root();
    let src = source();
    let cache = tempdir();
    let dir = cache.path().join("c");
    let reference = bake(src.path(), "gfx90a", &["--cache-dir", "none"]);
    let out = tempdir();
    // A bake that holds the entry's lock while it writes, then is stopped
    // (Ctrl-Z).
    let mut baker = Command::new(kpackfs())
        .arg("bake")
        .arg(src.path())
        .arg(out.path().join("out"))
        .args(["--arch", "gfx90a", "-q", "--cache-dir"])
        .arg(&dir)
        .env("KPACKFS_TEST_SLOW_CACHE_WRITE", "600000")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let pid = baker.id() as i32;
    let start = Instant::now();
    while !entries(&dir, ".data").iter().any(|p| p.file_name().unwrap().to_string_lossy().starts_with("tmp.")) {
        if let Ok(Some(st)) = baker.try_wait() {
            panic!("bake ended early: {st}");
        }
        assert!(start.elapsed() < Duration::from_secs(60), "bake wrote no entry");
        std::thread::sleep(Duration::from_millis(10));
    }
    let _reap = Reap(baker);
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let work = tempdir();
    let log = work.path().join("log");
    let m = Mount::new_logged(Some(src.path()), "gfx90a", &["--cache-dir", dir.to_str().unwrap()], &log);
    // Whichever archive the bake holds, every one is read.
    let mnt = m.mnt.clone();
    let got = within("reading while another process holds an entry's lock", move || snapshot(&mnt));
    assert_same_tree(&got, &snapshot(&reference.path().join("out")), "mount vs bake without a cache dir");
    resolves_exactly(&m.mnt, "libtwo_ccob.so", "gfx90a:sramecc+:xnack-");
    let text = fs::read_to_string(&log).unwrap();
    assert!(text.contains("locked by another process"), "no log line: {text}");
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
}

#[test]
fn a_full_cache_dir_serves_from_memory_with_one_warning() {
    require_root();
    let src = source();
    let reference = bake(src.path(), "gfx90a", &["--cache-dir", "none"]);
    let work = tempdir();
    let fs_ = Tmpfs::new(&work.path().join("fs"), "1m");
    let dir = fs_.0.join("c");
    let log = work.path().join("log");
    let m = Mount::new_logged(Some(src.path()), "gfx90a", &["--cache-dir", dir.to_str().unwrap()], &log);
    // Fill the file system.
    {
        use std::io::Write;
        let mut f = fs::File::create(fs_.0.join("filler")).unwrap();
        let block = vec![0u8; 4096];
        while f.write_all(&block).is_ok() {}
    }
    let archives: Vec<PathBuf> =
        fs::read_dir(reference.path().join("out/lib/.kpack")).unwrap().flatten().map(|e| e.path()).filter(|p| scheme(p) == "zstd-per-kernel").collect();
    assert!(archives.len() >= 2, "{archives:?}");
    for a in &archives {
        let rel = a.strip_prefix(reference.path().join("out")).unwrap();
        let got = fs::read(m.path(rel)).unwrap_or_else(|e| panic!("{}: {e}", rel.display()));
        assert!(got == fs::read(a).unwrap(), "{}: wrong bytes", rel.display());
    }
    resolves_exactly(&m.mnt, "libtwo_ccob.so", "gfx90a:sramecc+:xnack-");
    drop(m);
    let text = fs::read_to_string(&log).unwrap();
    let n = text.lines().filter(|l| l.contains("cannot write entries")).count();
    assert_eq!(n, 1, "{text}");
    assert!(entries(&dir, "").iter().all(|p| !p.file_name().unwrap().to_string_lossy().starts_with("tmp.")), "partial entries left");
}

#[test]
fn a_shared_directory_is_left_as_it_was() {
    require_root();
    let src = source();
    let want = reference_archive(src.path());
    let shared = tempdir();
    let dir = shared.path().join("shared");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o1777)).unwrap();
    let key = "0123456789abcdef0123456789abcdef";
    let foreign = [format!("tmp.1.{key}.data"), format!("{key}.data"), format!("{key}.meta"), format!("{key}.lock")];
    for f in &foreign {
        fs::write(dir.join(f), b"someone else's").unwrap();
        std::os::unix::fs::chown(dir.join(f), Some(65534), Some(65534)).unwrap();
    }
    let opts = ["--cache-dir", dir.to_str().unwrap(), "--cache-dir-size", "1"];
    {
        let m = Mount::new(Some(src.path()), "gfx90a", &opts);
        assert!(fs::read(m.path(ARCHIVE)).unwrap() == want);
    }
    let b = bake(src.path(), "gfx90a", &opts);
    assert!(fs::read(b.path().join("out").join(ARCHIVE)).unwrap() == want);
    assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o7777, 0o1777, "mode changed");
    for f in &foreign {
        assert_eq!(fs::read(dir.join(f)).unwrap_or_default(), b"someone else's", "{f} touched");
    }
    let mut names: Vec<String> = fs::read_dir(&dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    let mut expect: Vec<String> = foreign.to_vec();
    expect.push("kpackfs".into());
    expect.sort();
    assert_eq!(names, expect);
    assert!(dir.join("kpackfs/CACHEDIR.TAG").is_file());
}

#[test]
fn a_symlinked_cache_dir_is_refused_by_mount_and_bake() {
    require_root();
    let src = source();
    let work = tempdir();
    let real = work.path().join("real");
    fs::create_dir(&real).unwrap();
    let link = work.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let mnt = work.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mut child = Command::new(kpackfs())
        .args(["mount", "-f"])
        .arg(src.path())
        .arg(&mnt)
        .args(["--arch", "gfx90a", "--cache-dir"])
        .arg(&link)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let st = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if mounted(&mnt) || start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            let _ = Command::new("umount").arg("-l").arg(&mnt).status();
            panic!("mount accepted a symlinked --cache-dir");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(st.code(), Some(2), "mount: {err}");
    assert!(err.contains("symlink"), "{err}");
    let o = Command::new(kpackfs())
        .arg("bake")
        .arg(src.path())
        .arg(work.path().join("out"))
        .args(["--arch", "gfx90a", "-q", "--cache-dir"])
        .arg(&link)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "bake: {}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("symlink"));
    assert_eq!(fs::read_dir(&real).unwrap().count(), 0, "something was written through the symlink");
}

/// A squashfs image attached to a loop device and mounted; all undone on
/// drop.
struct Squash {
    loopdev: String,
    at: PathBuf,
}

impl Squash {
    /// A reproducible image of `tree` at `img`: fixed times and owner, so
    /// two trees of the same shape give their files the same identity.
    fn image(tree: &Path, img: &Path) -> PathBuf {
        let st = Command::new("mksquashfs")
            .arg(tree)
            .arg(img)
            .args(["-noappend", "-no-xattrs", "-all-root", "-all-time", "1700000000", "-mkfs-time", "1700000000", "-quiet", "-no-progress"])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "mksquashfs");
        img.to_path_buf()
    }

    /// Mounts `img` at `at` through `loopdev` (or the first free one).
    fn mount(img: &Path, at: &Path, loopdev: Option<&str>) -> Squash {
        let loopdev = match loopdev {
            Some(d) => {
                assert!(Command::new("losetup").args(["-r", d]).arg(img).status().unwrap().success(), "losetup {d}");
                d.to_string()
            }
            None => {
                let o = Command::new("losetup").args(["-r", "-f", "--show"]).arg(img).output().unwrap();
                assert!(o.status.success(), "losetup: {}", String::from_utf8_lossy(&o.stderr));
                String::from_utf8_lossy(&o.stdout).trim().to_string()
            }
        };
        let s = Squash { loopdev, at: at.to_path_buf() };
        let st = Command::new("mount").args(["-t", "squashfs", "-o", "ro"]).arg(&s.loopdev).arg(at).status().unwrap();
        assert!(st.success(), "mount squashfs");
        s
    }
}

/// A file's identity as the view keys it: device, inode, size, mtime and
/// ctime (seconds and nanoseconds).
fn identity(path: &Path) -> (u64, u64, u64, i64, i64, i64, i64) {
    let md = fs::metadata(path).unwrap();
    (md.dev(), md.ino(), md.size(), md.mtime(), md.mtime_nsec(), md.ctime(), md.ctime_nsec())
}

impl Drop for Squash {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.at).status();
        let _ = Command::new("losetup").arg("-d").arg(&self.loopdev).status();
    }
}

#[test]
fn same_identity_different_contents_never_meet_a_stale_entry() {
    require_root();
    // Two reproducible images of lib/libx.so: the same path, size, mtime,
    // inode number (and ctime = mtime), different code objects (from
    // libtwo and from libmulti, the shorter one padded at its end).
    let work = tempdir();
    let mut made = Vec::new();
    for (i, asset) in ["libtwo.so", "libmulti.so"].into_iter().enumerate() {
        let tree = work.path().join(format!("tree{i}"));
        fs::create_dir_all(tree.join("lib")).unwrap();
        recompress(asset, &tree.join("lib/libx.so"), &["--ccob-version", "3"]);
        made.push(tree);
    }
    let len = made.iter().map(|t| fs::metadata(t.join("lib/libx.so")).unwrap().len()).max().unwrap();
    let mut imgs = Vec::new();
    for (i, tree) in made.iter().enumerate() {
        let f = fs::OpenOptions::new().write(true).open(tree.join("lib/libx.so")).unwrap();
        f.set_len(len).unwrap();
        imgs.push(Squash::image(tree, &work.path().join(format!("img{i}.sqfs"))));
    }
    let src = work.path().join("src");
    fs::create_dir(&src).unwrap();
    let cache = tempdir();
    let opts = ["--cache-dir", cache.path().to_str().unwrap()];
    let device = "gfx1030";
    let (ident, loopdev) = {
        let a = Squash::mount(&imgs[0], &src, None);
        let m = Mount::new(Some(&src), device, &opts);
        resolves_to(&m.mnt, "libx.so", "libtwo.so", device);
        (identity(&src.join("lib/libx.so")), a.loopdev.clone())
    };
    let _b = Squash::mount(&imgs[1], &src, Some(&loopdev));
    assert_eq!(identity(&src.join("lib/libx.so")), ident, "the fixture must repeat the identity");
    let m = Mount::new(Some(&src), device, &opts);
    resolves_to(&m.mnt, "libx.so", "libmulti.so", device);
    drop(m);
    let out = tempdir();
    let st = Command::new(kpackfs()).arg("bake").arg(&src).arg(out.path().join("out")).args(["--arch", device, "-q"]).args(opts).status().unwrap();
    assert!(st.success());
    resolves_to(&out.path().join("out"), "libx.so", "libmulti.so", device);
}

/// Copies of files with no cheap content identity (a transformed binary,
/// uncompressed bundles) are pinned to the mount their source is on: a
/// second daemon over the same mount uses them; another image mounted in
/// its place, on the same loop device with the same file identities (and
/// the same transformed length: one letter of the host's `.comment`
/// differs), never does.
#[test]
fn a_copy_serves_its_own_mount_of_the_source_only() {
    require_root();
    let work = tempdir();
    let mut imgs = Vec::new();
    for i in 0..2 {
        let tree = work.path().join(format!("tree{i}"));
        fs::create_dir_all(tree.join("lib")).unwrap();
        let mut b = fs::read(assets().join("bin/libtwo.so")).unwrap();
        if i == 1 {
            // The last note: the first ones are in the device code.
            let at = b.windows(13).rposition(|w| w == b"clang version").unwrap();
            b[at] = b'C';
        }
        fs::write(tree.join("lib/libx.so"), b).unwrap();
        imgs.push(Squash::image(&tree, &work.path().join(format!("img{i}.sqfs"))));
    }
    let src = work.path().join("src");
    fs::create_dir(&src).unwrap();
    let cache = tempdir();
    let opts = ["--cache-dir", cache.path().to_str().unwrap()];
    let device = "gfx1030";
    let used = |m: &Mount| counter(&stats(&m.mnt), "copies_used");
    let (ident, loopdev, first) = {
        let a = Squash::mount(&imgs[0], &src, None);
        let m = Mount::new(Some(&src), device, &opts);
        let lib = m.path("lib/libx.so");
        // Opened twice: copied in the background; a later open uses it.
        let first = fs::read(&lib).unwrap();
        assert!(eventually(30, || fs::read(&lib).unwrap() == first && used(&m) > 0), "no copy used: {}", stats(&m.mnt));
        drop(m);
        // Another daemon over the same mount: the copy at the first open.
        let m = Mount::new(Some(&src), device, &opts);
        assert!(fs::read(m.path("lib/libx.so")).unwrap() == first);
        assert_eq!(used(&m), 1, "{}", stats(&m.mnt));
        resolves_to(&m.mnt, "libx.so", "libtwo.so", device);
        (identity(&src.join("lib/libx.so")), a.loopdev.clone(), first)
    };
    let _b = Squash::mount(&imgs[1], &src, Some(&loopdev));
    assert_eq!(identity(&src.join("lib/libx.so")), ident, "the fixture must repeat the identity");
    let m = Mount::new(Some(&src), device, &opts);
    let served = fs::read(m.path("lib/libx.so")).unwrap();
    assert_eq!(used(&m), 0, "the other image's copy was used: {}", stats(&m.mnt));
    resolves_to(&m.mnt, "libx.so", "libtwo.so", device);
    let baked = bake(&src, device, &["--cache-dir", "none"]);
    assert!(served == fs::read(baked.path().join("out/lib/libx.so")).unwrap(), "the view of the second image differs from its bake");
    assert!(served.len() == first.len() && served != first, "the fixture must change the transformed bytes, not their length");
}
