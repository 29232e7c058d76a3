//! Probes paid once (issue 23): which files are fat binaries is learnt by
//! opening them, once; a remount over the same cache directory opens none
//! of the unchanged files again, only a changed one; files too short to be
//! fat binaries are never opened; and listings still show `.kpack` exactly
//! where a fat binary is. Observed through the daemon's counters
//! (`user.kpackfs.stats`: `probes_run`), with no timing.

use std::fs;
use std::path::Path;

use kpackfs_tests::*;

fn probes_run(mnt: &Path) -> u64 {
    counter(&stats(mnt), "probes_run")
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// Lists every directory of the view and stats every entry (what
/// `find -printf %s` does).
fn walk(mnt: &Path) -> usize {
    let mut n = 0;
    for d in ["", "lib", "data"] {
        for e in fs::read_dir(mnt.join(d)).unwrap() {
            fs::symlink_metadata(e.unwrap().path()).unwrap();
            n += 1;
        }
    }
    n
}

/// lib/: a fat library (by an odd name too) and a plain host library;
/// data/: 20 text files, 3 ELF-magic files that are not host binaries, and
/// 5 files too short to be fat binaries.
fn source() -> TempDir {
    let src = tempdir();
    let lib = src.path().join("lib");
    let data = src.path().join("data");
    fs::create_dir_all(&lib).unwrap();
    fs::create_dir_all(&data).unwrap();
    fs::copy(assets().join("bin/libtwo.so"), lib.join("libtwo.so")).unwrap();
    fs::copy(assets().join("bin/libmulti.so"), data.join("kernels.dat")).unwrap();
    for i in 0..20 {
        fs::write(data.join(format!("t{i:02}.txt")), format!("{i}\n").repeat(100)).unwrap();
    }
    for i in 0..3 {
        let mut b = b"\x7fELF\x02\x01\x01".to_vec();
        b.resize(500, i);
        fs::write(data.join(format!("k{i}.co")), b).unwrap();
    }
    for i in 0..5 {
        fs::write(data.join(format!("s{i}")), b"\x7fELF short").unwrap();
    }
    src
}

#[test]
fn a_remount_with_a_warm_cache_dir_probes_only_what_changed() {
    require_root();
    let src = source();
    let cache = tempdir();
    let dir = cache.path().join("c");
    let opts = ["--cache-dir", dir.to_str().unwrap()];
    // Probed: libtwo.so, kernels.dat, 20 texts, 3 .co files; never the 5
    // short ones.
    let probed = 25;
    let n = {
        let m = Mount::new(Some(src.path()), "gfx90a", &opts);
        let n = walk(&m.mnt);
        assert_eq!(probes_run(&m.mnt), probed, "{}", stats(&m.mnt));
        assert!(names(&m.path("lib")).contains(&".kpack".to_string()));
        assert!(names(&m.path("data")).contains(&".kpack".to_string()), "kernels.dat is a fat binary");
        assert!(m.path("data/.kpack/kernels.dat_gfx90a:xnack-.kpack").is_file());
        n
    };
    // A remount (a second daemon alike) opens none of them again, lists
    // the same, and looking every entry up opens nothing either.
    {
        let m = Mount::new(Some(src.path()), "gfx90a", &opts);
        assert_eq!(walk(&m.mnt), n);
        assert_eq!(probes_run(&m.mnt), 0, "{}", stats(&m.mnt));
        assert!(names(&m.path("data")).contains(&".kpack".to_string()));
        assert!(m.path("data/.kpack/kernels.dat_gfx90a:xnack-.kpack").is_file());
    }
    // A file rewritten in place (the directory's identity stays): only it
    // is probed again — and found to be a fat binary now.
    fs::copy(assets().join("bin/libmulti.so"), src.path().join("data/t05.txt")).unwrap();
    {
        let m = Mount::new(Some(src.path()), "gfx90a", &opts);
        assert_eq!(walk(&m.mnt), n);
        assert_eq!(probes_run(&m.mnt), 1, "{}", stats(&m.mnt));
        assert!(m.path("data/.kpack/t05.txt_gfx90a:xnack-.kpack").is_file());
    }
    // And the record now knows it.
    let m = Mount::new(Some(src.path()), "gfx90a", &opts);
    assert_eq!(walk(&m.mnt), n);
    assert_eq!(probes_run(&m.mnt), 0, "{}", stats(&m.mnt));
}

#[test]
fn without_a_cache_dir_each_file_is_probed_once_per_daemon() {
    require_root();
    let src = source();
    let m = Mount::new(Some(src.path()), "gfx90a", &["--cache-dir", "none"]);
    let n = walk(&m.mnt);
    assert_eq!(probes_run(&m.mnt), 25, "{}", stats(&m.mnt));
    // Listed again after a change (the new file too short to be probed,
    // so the count says exactly what was opened), the unchanged files are
    // not opened again.
    fs::write(src.path().join("data/new.txt"), "x").unwrap();
    let start = std::time::Instant::now();
    while !names(&m.path("data")).contains(&"new.txt".to_string()) {
        assert!(start.elapsed() < std::time::Duration::from_secs(20), "the new file never showed");
        std::thread::yield_now();
    }
    assert_eq!(walk(&m.mnt), n + 1);
    assert_eq!(probes_run(&m.mnt), 25, "{}", stats(&m.mnt));
}
