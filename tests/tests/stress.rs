//! Concurrency: 8 threads doing random `pread`s across every file of a
//! mounted view (plain, transformed, synthesized archives, CCOB-compressed
//! sources decoded through a deliberately tiny LRU — archives kept in scheme
//! `none`, so every read of them decodes) for a fixed time, each
//! compared byte for byte against the baked tree. Zero mismatches allowed.
//! KPACKFS_STRESS_SECS overrides the duration (default 20 s).

use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kpackfs_tests::*;

#[test]
fn eight_threads_of_random_reads_match_the_baked_tree() {
    require_root();
    let src = tempdir();
    let root = src.path();
    let cp = Command::new("cp").arg("-a").arg(assets().join("demo-install/.")).arg(root).status().unwrap();
    assert!(cp.success());
    for (input, out, extra) in [
        ("libtwo.so", "lib/libtwo_ccob.so", vec!["--ccob-version", "3"]),
        ("libmulti.so", "lib/libmulti_zlib.so", vec!["--ccob-version", "2", "--method", "zlib"]),
        ("librdc.so", "lib/librdc_v1.so", vec!["--ccob-version", "1"]),
    ] {
        let st = Command::new(kpackfs())
            .arg("recompress")
            .arg(assets().join("bin").join(input))
            .arg(root.join(out))
            .args(&extra)
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(st.success());
    }
    for b in ["librelr.so", "libpage.so", "app_nopie"] {
        fs::copy(assets().join("bin").join(b), root.join("lib").join(b)).unwrap();
    }
    let arch = "gfx90a,gfx1030";
    // 16 KiB of cache holds one decoded bundle: constant eviction. (With
    // the default `auto`, CCOB archives would be served compressed from the
    // cache directory instead: tests/tests/cache.rs and load.rs cover that.)
    // No cache directory either: no local copies take reads off the daemon.
    let none = ["--archive-compression", "none", "--cache-dir", "none"];
    let m = Mount::new(Some(root), arch, &["--cache-size", "16K", "--threads", "4", none[0], none[1], none[2], none[3]]);
    let baked = bake(root, arch, &none);
    let out = baked.path().join("out");
    let files: Vec<(PathBuf, Vec<u8>)> =
        snapshot(&out).into_iter().filter(|(_, n)| matches!(n, Node::File { .. })).map(|(p, _)| (p.clone(), fs::read(out.join(&p)).unwrap())).collect();
    assert!(files.iter().any(|(p, _)| p.to_string_lossy().contains("libtwo_ccob.so_gfx90a.kpack")));
    let files = Arc::new(files);
    let secs = std::env::var("KPACKFS_STRESS_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(20u64);
    let deadline = Instant::now() + Duration::from_secs(secs);
    let reads = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let files = files.clone();
            let mnt = m.mnt.clone();
            let reads = reads.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (t + 1));
                let handles: Vec<fs::File> = files.iter().map(|(p, _)| fs::File::open(mnt.join(p)).unwrap()).collect();
                // O_DIRECT handles bypass the page cache: every read reaches the daemon.
                let direct: Vec<fs::File> = files
                    .iter()
                    .map(|(p, _)| {
                        use std::os::unix::fs::OpenOptionsExt;
                        fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(mnt.join(p)).unwrap()
                    })
                    .collect();
                let mut mismatches = Vec::new();
                while Instant::now() < deadline {
                    let i = rng.below(files.len() as u64) as usize;
                    let (path, want) = &files[i];
                    let len = want.len() as u64;
                    let off = rng.below(len + 64);
                    let span = if rng.below(4) == 0 { 1 << 20 } else { 8192 };
                    let n = 1 + rng.below(span) as usize;
                    // Alternate between long-lived handles and fresh opens.
                    let (off, got) = match rng.below(8) {
                        0 => (off, pread(&fs::File::open(mnt.join(path)).unwrap(), off, n)),
                        1..=4 => pread_direct(&direct[i], off, n),
                        _ => (off, pread(&handles[i], off, n)),
                    };
                    let n = got.len().max(n);
                    let s = (off.min(len)) as usize;
                    let e = (off.saturating_add(n as u64).min(len)) as usize;
                    if got != want[s..e] {
                        mismatches.push(format!("{} @{off}+{n}", path.display()));
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
                mismatches
            })
        })
        .collect();
    // Keep evicting the kernel's page cache so reads keep reaching the daemon.
    let dropper = std::thread::spawn(move || {
        while Instant::now() < deadline {
            drop_caches("1");
            std::thread::sleep(Duration::from_millis(300));
        }
    });
    let mut bad = Vec::new();
    for t in threads {
        bad.extend(t.join().unwrap());
    }
    dropper.join().unwrap();
    let total = reads.load(Ordering::Relaxed);
    let stats =
        Command::new("python3").arg("-c").arg("import os,sys; print(os.getxattr(sys.argv[1], 'user.kpackfs.stats').decode())").arg(&m.mnt).output().unwrap();
    let stats = String::from_utf8_lossy(&stats.stdout).into_owned();
    let counter = |k: &str| stats.lines().find_map(|l| l.strip_prefix(k).and_then(|v| v.trim().parse::<u64>().ok())).unwrap_or(0);
    eprintln!("daemon counters:\n{stats}");
    assert!(bad.is_empty(), "{} mismatches in {total} reads, e.g. {:?}", bad.len(), &bad[..bad.len().min(10)]);
    assert!(total > 1000, "only {total} reads");
    assert!(counter("reads ") > total / 4, "the daemon served only {} reads: the page cache hid the test", counter("reads "));
    assert!(counter("cache_evictions ") > 0, "the tiny LRU never evicted");
    eprintln!("{total} random reads over {} files, no mismatch", files.len());
}
