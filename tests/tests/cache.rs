//! Archive compression and the cache directory, through real mounts and
//! the real CLI: CCOB sources get `zstd-per-kernel` archives that both
//! loader generations resolve to clang-offload-bundler's objects; plain
//! sources keep zero-copy `none` archives; the cache directory is reused by
//! remounts and `bake`; a daemon killed while writing it, or a damaged
//! entry, never leads to wrong bytes; an empty selection is reported once.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kpackfs_tests::*;

/// lib/ with a plain binary and two CCOB variants (v3 zstd, v2 zlib).
fn source() -> TempDir {
    let dir = tempdir();
    let lib = dir.path().join("lib");
    fs::create_dir_all(&lib).unwrap();
    fs::copy(assets().join("bin/libtwo.so"), lib.join("libtwo.so")).unwrap();
    recompress("libtwo.so", &lib.join("libtwo_ccob.so"), &["--ccob-version", "3"]);
    recompress("libmulti.so", &lib.join("libmulti_zlib.so"), &["--ccob-version", "2", "--method", "zlib"]);
    dir
}

fn recompress(asset: &str, out: &Path, args: &[&str]) {
    let st = Command::new(kpackfs()).arg("recompress").arg(assets().join("bin").join(asset)).arg(out).args(args).stderr(Stdio::null()).status().unwrap();
    assert!(st.success());
}

fn asset_of(name: &str) -> &str {
    match name {
        "libtwo_ccob.so" => "libtwo.so",
        "libmulti_zlib.so" => "libmulti.so",
        n => n,
    }
}

/// The scheme `kpackfs inspect` reports for an archive.
fn scheme(archive: &Path) -> String {
    let o = Command::new(kpackfs()).arg("inspect").arg(archive).output().unwrap();
    assert!(o.status.success(), "inspect {}: {}", archive.display(), String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    text.split("scheme ").nth(1).and_then(|r| r.split_whitespace().next()).unwrap_or_else(|| panic!("no scheme in {text}")).to_string()
}

/// Every wrapper of `lib` (a served binary under `root/lib`) resolves, with
/// both loaders agreeing, to clang-offload-bundler's object for `device`.
fn resolves_exactly(root: &Path, name: &str, device: &str) {
    let out = tempdir();
    let o = Command::new(kpackfs())
        .arg("resolve")
        .arg(root.join("lib").join(name))
        .args(["--arch", device, "--loader", "both", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "resolve {name} for {device}: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let asset = asset_of(name);
    for (i, bundle) in wrapper_bundles(asset).into_iter().enumerate() {
        let got = fs::read(out.path().join(format!("{i}.co"))).unwrap();
        let want = expected_object(asset, bundle, expected_arch(asset, device));
        assert!(got == want, "{name} wrapper {i} for {device}: code object differs from clang-offload-bundler's");
    }
}

/// The archive schemes and exact resolution of a served tree.
fn check_tree(root: &Path, expect: &[(&str, &str)]) {
    for (name, want) in expect {
        for (file_target, device) in [("gfx90a:xnack-", "gfx90a:sramecc+:xnack-"), ("gfx1030", "gfx1030")] {
            let target = if *name == "libtwo.so" || *name == "libtwo_ccob.so" { file_target.split(':').next().unwrap() } else { file_target };
            let archive = root.join(format!("lib/.kpack/{name}_{target}.kpack"));
            assert_eq!(scheme(&archive), *want, "{}", archive.display());
            resolves_exactly(root, name, device);
        }
    }
}

#[test]
fn ccob_sources_get_zstd_archives_that_resolve_exactly() {
    require_root();
    let src = source();
    let arch = "gfx90a:xnack-,gfx1030";
    let auto = [("libtwo.so", "none"), ("libtwo_ccob.so", "zstd-per-kernel"), ("libmulti_zlib.so", "zstd-per-kernel")];
    let m = Mount::new(Some(src.path()), arch, &[]);
    check_tree(&m.mnt, &auto);
    let baked = bake(src.path(), arch, &[]);
    check_tree(&baked.path().join("out"), &auto);
    assert_same_tree(&snapshot(&m.mnt), &snapshot(&baked.path().join("out")), "mount vs bake (auto)");
    // Forced either way, through the CLI and the fstab form.
    let zstd = bake(src.path(), arch, &["--archive-compression", "zstd"]);
    check_tree(&zstd.path().join("out"), &[("libtwo.so", "zstd-per-kernel"), ("libtwo_ccob.so", "zstd-per-kernel")]);
    let none = Mount::new(Some(src.path()), arch, &["-o", "archive_compression=none"]);
    check_tree(&none.mnt, &[("libtwo.so", "none"), ("libtwo_ccob.so", "none"), ("libmulti_zlib.so", "none")]);
}

fn stats(mnt: &Path) -> String {
    let out = Command::new("python3").arg("-c").arg("import os,sys; print(os.getxattr(sys.argv[1], 'user.kpackfs.stats').decode())").arg(mnt).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stat_value(stats: &str, key: &str) -> u64 {
    stats.lines().find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse().ok())).unwrap_or_else(|| panic!("no {key} in {stats}"))
}

fn entries(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> =
        fs::read_dir(dir).map(|d| d.flatten().map(|e| e.path()).filter(|p| p.to_string_lossy().ends_with(suffix)).collect()).unwrap_or_default();
    v.sort();
    v
}

const ARCHIVE: &str = "lib/.kpack/libtwo_ccob.so_gfx90a.kpack";

/// What the archive must hold: computed with no cache directory at all.
fn reference_archive(src: &Path) -> Vec<u8> {
    let b = bake(src, "gfx90a", &["--cache-dir", "none"]);
    fs::read(b.path().join("out").join(ARCHIVE)).unwrap()
}

#[test]
fn the_cache_dir_is_reused_by_remounts_and_bake() {
    require_root();
    let src = source();
    let cache = tempdir();
    let dir = cache.path().join("c");
    let opts = ["--cache-dir", dir.to_str().unwrap()];
    let want = reference_archive(src.path());
    {
        let m = Mount::new(Some(src.path()), "gfx90a", &opts);
        assert_eq!(fs::metadata(m.path(ARCHIVE)).unwrap().len(), want.len() as u64);
        assert_eq!(stat_value(&stats(&m.mnt), "disk_misses"), 1);
        assert!(fs::read(m.path(ARCHIVE)).unwrap() == want);
    }
    let made: Vec<(PathBuf, u64)> = entries(&dir, ".data")
        .into_iter()
        .map(|p| {
            let i = fs::metadata(&p).unwrap().ino();
            (p, i)
        })
        .collect();
    assert_eq!(made.len(), 1, "{made:?}");
    let mode = fs::metadata(&dir).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o700, "cache dir not private");
    // A fresh mount finds it: the first stat plans the binary's transform
    // (its headers) and reads its bundles' headers (the content identity
    // in the key), then looks up the entry's meta; nothing is recomputed.
    let m = Mount::new(Some(src.path()), "gfx90a", &opts);
    assert_eq!(fs::metadata(m.path(ARCHIVE)).unwrap().len(), want.len() as u64);
    let s = stats(&m.mnt);
    assert_eq!(stat_value(&s, "disk_misses"), 0, "{s}");
    assert_eq!(stat_value(&s, "plans_built"), 1, "{s}");
    assert!(fs::read(m.path(ARCHIVE)).unwrap() == want);
    // And so does bake, and a second daemon on the same directory.
    let b = bake(src.path(), "gfx90a", &opts);
    assert!(fs::read(b.path().join("out").join(ARCHIVE)).unwrap() == want);
    let m2 = Mount::new(Some(src.path()), "gfx90a", &opts);
    assert!(fs::read(m2.path(ARCHIVE)).unwrap() == want);
    assert_eq!(stat_value(&stats(&m2.mnt), "disk_misses"), 0);
    // Bake also made the entries of the other CCOB binary's archives; the
    // first entry is the same file (not rewritten).
    let after: Vec<(PathBuf, u64)> = entries(&dir, ".data")
        .into_iter()
        .map(|p| {
            let i = fs::metadata(&p).unwrap().ino();
            (p, i)
        })
        .collect();
    assert!(after.contains(&made[0]), "the entry was rewritten: {after:?} vs {made:?}");
    assert_eq!(after.len(), 3, "libtwo_ccob's archive and libmulti_zlib's two (xnack-, xnack+): {after:?}");
}

#[test]
fn a_daemon_killed_while_writing_or_a_damaged_entry_never_serves_wrong_bytes() {
    require_root();
    let src = source();
    let cache = tempdir();
    let dir = cache.path().join("c");
    let want = reference_archive(src.path());
    let work = tempdir();
    let mnt = work.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    // The daemon stalls between writing the entry and renaming it.
    let mut child = Command::new(kpackfs())
        .args(["mount", "-f"])
        .arg(src.path())
        .arg(&mnt)
        .args(["--arch", "gfx90a", "--auto-unmount", "--cache-dir"])
        .arg(&dir)
        .env("KPACKFS_TEST_SLOW_CACHE_WRITE", "20000")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !mounted(&mnt) {
        assert!(start.elapsed() < Duration::from_secs(20), "mount did not come up");
        std::thread::sleep(Duration::from_millis(10));
    }
    let archive = mnt.join(ARCHIVE);
    let stat = std::thread::spawn(move || fs::metadata(archive).map(|m| m.len()));
    let start = Instant::now();
    while !entries(&dir, ".data").iter().any(|p| p.file_name().unwrap().to_string_lossy().starts_with("tmp.") && fs::metadata(p).unwrap().len() > 0) {
        assert!(start.elapsed() < Duration::from_secs(20), "no entry being written");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(stat.join().unwrap().is_err(), "the killed daemon answered");
    let start = Instant::now();
    while mounted(&mnt) {
        if start.elapsed() > Duration::from_secs(5) {
            let _ = Command::new("umount").arg("-l").arg(&mnt).status();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(entries(&dir, ".meta").is_empty(), "a half-written entry was completed");

    // The next mount serves the right bytes and clears the leftover.
    {
        let m = Mount::new(Some(src.path()), "gfx90a", &["--cache-dir", dir.to_str().unwrap()]);
        assert!(fs::read(m.path(ARCHIVE)).unwrap() == want, "wrong archive after a killed write");
        resolves_exactly(&m.mnt, "libtwo_ccob.so", "gfx90a:sramecc+:xnack-");
    }
    let leftovers: Vec<PathBuf> = entries(&dir, "").into_iter().filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("tmp.")).collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // One byte of the stored entry flipped (same length): found, rebuilt.
    let data = entries(&dir, ".data");
    assert_eq!(data.len(), 1);
    let mut b = fs::read(&data[0]).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 0x40;
    fs::write(&data[0], &b).unwrap();
    let m = Mount::new(Some(src.path()), "gfx90a", &["--cache-dir", dir.to_str().unwrap()]);
    assert!(fs::read(m.path(ARCHIVE)).unwrap() == want, "a damaged entry was served");
    assert_eq!(stat_value(&stats(&m.mnt), "disk_damaged"), 1);
    // A truncated one too.
    drop(m);
    let data = entries(&dir, ".data");
    fs::write(&data[0], b"KPAK").unwrap();
    let m = Mount::new(Some(src.path()), "gfx90a", &["--cache-dir", dir.to_str().unwrap()]);
    assert_eq!(fs::metadata(m.path(ARCHIVE)).unwrap().len(), want.len() as u64);
    assert!(fs::read(m.path(ARCHIVE)).unwrap() == want, "a truncated entry was served");
}

fn warnings(text: &str) -> usize {
    text.lines().filter(|l| l.contains("carries no code for it")).count()
}

#[test]
fn an_empty_selection_is_reported_once() {
    require_root();
    let demo = assets().join("demo-install");
    let work = tempdir();
    let log = work.path().join("log");
    let info = PathBuf::from("info");
    let mut m = Mount::new_full(Some(&demo), "gfx1100", &[], Some(&log), &[("RUST_LOG", &info)]);
    let finished = |log: &Path| {
        let start = Instant::now();
        while !fs::read_to_string(log).unwrap().contains("selection check finished") && start.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(20));
        }
        fs::read_to_string(log).unwrap().contains("selection check finished")
    };
    assert!(finished(&log), "the selection check did not finish");
    // Browsing does not repeat it: everything the daemon logged, up to its
    // exit, holds the one warning.
    let _ = snapshot(&m.mnt);
    assert!(m.terminate().is_some_and(|st| st.success()));
    let text = fs::read_to_string(&log).unwrap();
    assert_eq!(warnings(&text), 1, "{text}");
    let line = text.lines().find(|l| l.contains("carries no code for it")).unwrap();
    assert!(line.contains("gfx1100") && line.contains("gfx1030") && line.contains("gfx90a"), "{line}");
    drop(m);

    let out = work.path().join("out");
    // bake refuses it (a bake without device code for the target is useless).
    let o = Command::new(kpackfs()).arg("bake").arg(&demo).arg(&out).args(["--arch", "gfx1100", "-q"]).args(with_cache_dir(&[])).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(warnings(&String::from_utf8_lossy(&o.stderr)), 1, "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!out.exists());

    // A selection that matches says nothing.
    let log2 = work.path().join("log2");
    let mut m = Mount::new_full(Some(&demo), "gfx90a", &[], Some(&log2), &[("RUST_LOG", &info)]);
    assert!(finished(&log2), "the selection check did not finish");
    let _ = snapshot(&m.mnt);
    assert!(m.terminate().is_some_and(|st| st.success()));
    assert_eq!(warnings(&fs::read_to_string(&log2).unwrap()), 0);
}

// ---- the cache directory is kpackfs's own, and never in the way ------------------------

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

use std::os::unix::fs::OpenOptionsExt;

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

/// A small tmpfs, unmounted on drop.
struct Tmpfs(TempDir);

impl Tmpfs {
    fn new(size: &str) -> Tmpfs {
        let t = tempdir();
        let st = Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size},mode=0755"), "tmpfs"]).arg(t.path()).status().unwrap();
        assert!(st.success(), "mount tmpfs");
        Tmpfs(t)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

#[test]
fn a_full_cache_dir_serves_from_memory_with_one_warning() {
    require_root();
    let src = source();
    let reference = bake(src.path(), "gfx90a", &["--cache-dir", "none"]);
    let fs_ = Tmpfs::new("1m");
    let dir = fs_.0.path().join("c");
    let work = tempdir();
    let log = work.path().join("log");
    let m = Mount::new_logged(Some(src.path()), "gfx90a", &["--cache-dir", dir.to_str().unwrap()], &log);
    // Fill the file system.
    {
        use std::io::Write;
        let mut f = fs::File::create(fs_.0.path().join("filler")).unwrap();
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

use std::os::unix::fs::PermissionsExt;

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

impl Drop for Squash {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.at).status();
        let _ = Command::new("losetup").arg("-d").arg(&self.loopdev).status();
    }
}

/// Every wrapper of `root/lib/name` resolves to clang-offload-bundler's
/// object of `asset` for `device`.
fn resolves_to(root: &Path, name: &str, asset: &str, device: &str) {
    let out = tempdir();
    let o = Command::new(kpackfs())
        .arg("resolve")
        .arg(root.join("lib").join(name))
        .args(["--arch", device, "--loader", "both", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "resolve {name}: {}", String::from_utf8_lossy(&o.stderr));
    for (i, bundle) in wrapper_bundles(asset).into_iter().enumerate() {
        let got = fs::read(out.path().join(format!("{i}.co"))).unwrap();
        assert!(got == expected_object(asset, bundle, expected_arch(asset, device)), "{name} wrapper {i}: not {asset}'s object");
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
        let img = work.path().join(format!("img{i}.sqfs"));
        let st = Command::new("mksquashfs")
            .arg(tree)
            .arg(&img)
            .args(["-noappend", "-no-xattrs", "-all-root", "-all-time", "1700000000", "-mkfs-time", "1700000000", "-quiet", "-no-progress"])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "mksquashfs");
        imgs.push(img);
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
        let md = fs::metadata(src.join("lib/libx.so")).unwrap();
        ((md.dev(), md.ino(), md.size(), md.mtime(), md.mtime_nsec(), md.ctime(), md.ctime_nsec()), a.loopdev.clone())
    };
    let _b = Squash::mount(&imgs[1], &src, Some(&loopdev));
    let md = fs::metadata(src.join("lib/libx.so")).unwrap();
    assert_eq!((md.dev(), md.ino(), md.size(), md.mtime(), md.mtime_nsec(), md.ctime(), md.ctime_nsec()), ident, "the fixture must repeat the identity");
    let m = Mount::new(Some(&src), device, &opts);
    resolves_to(&m.mnt, "libx.so", "libmulti.so", device);
    drop(m);
    let out = tempdir();
    let st = Command::new(kpackfs()).arg("bake").arg(&src).arg(out.path().join("out")).args(["--arch", device, "-q"]).args(opts).status().unwrap();
    assert!(st.success());
    resolves_to(&out.path().join("out"), "libx.so", "libmulti.so", device);
}
