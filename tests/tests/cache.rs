//! Archive compression and the cache directory, through real mounts and
//! the real CLI: CCOB sources get `zstd-per-kernel` archives that both
//! loader generations resolve to clang-offload-bundler's objects; plain
//! sources keep zero-copy `none` archives; the cache directory is reused by
//! remounts and `bake`; a daemon killed while writing it, or a damaged
//! entry, never leads to wrong bytes; an empty selection is reported once.
//! What others may do to the cache directory: `cache_hostile.rs`.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kpackfs_tests::cache::*;
use kpackfs_tests::*;

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
        assert_eq!(counter(&stats(&m.mnt), "disk_misses"), 1);
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
    assert_eq!(counter(&s, "disk_misses"), 0, "{s}");
    assert_eq!(counter(&s, "plans_built"), 1, "{s}");
    assert!(fs::read(m.path(ARCHIVE)).unwrap() == want);
    // Sealed by the daemon that wrote it, in this boot: served without
    // reading it whole for its checksum first (data_cache/meta.rs).
    assert_eq!(counter(&stats(&m.mnt), "disk_checked"), 0);
    // And so does bake, and a second daemon on the same directory.
    let b = bake(src.path(), "gfx90a", &opts);
    assert!(fs::read(b.path().join("out").join(ARCHIVE)).unwrap() == want);
    let m2 = Mount::new(Some(src.path()), "gfx90a", &opts);
    assert!(fs::read(m2.path(ARCHIVE)).unwrap() == want);
    assert_eq!(counter(&stats(&m2.mnt), "disk_misses"), 0);
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
    let s = stats(&m.mnt);
    assert_eq!((counter(&s, "disk_damaged"), counter(&s, "disk_checked")), (1, 1), "{s}");
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
