//! Bounded memory over time: the inode table follows what the kernel holds
//! (FUSE `forget`), and a source whose fat libraries are replaced again and
//! again while readers run keeps the daemon's RSS and inode count flat, with
//! zero wrong bytes.
//!
//! KPACKFS_SOAK_SECS sets the soak's length (default 30 s, CI's; a long
//! run: KPACKFS_SOAK_SECS=3600).

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kpackfs_tests::*;

/// One counter of the daemon's `user.kpackfs.stats`.
fn stat(mnt: &Path, name: &str) -> u64 {
    counter(&stats(mnt), name)
}

fn inodes(mnt: &Path) -> u64 {
    stat(mnt, "inodes")
}

/// Asks the kernel to drop every unused dentry and inode: it then sends
/// FORGET for each.
fn drop_kernel_inodes() {
    drop_caches("2");
}

fn rss_kib(pid: u32) -> u64 {
    let s = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines().find_map(|l| l.strip_prefix("VmRSS:").and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())).unwrap_or(0)
}

#[test]
fn the_inode_table_returns_to_the_live_set_after_the_kernel_forgets() {
    require_root();
    let demo = assets().join("demo-install");
    let m = Mount::new(Some(&demo), "gfx90a", &[]);
    let tree = snapshot(&m.mnt);
    // Every file held open: all of them are live (other tests of this
    // binary drop the kernel's caches at any time; held inodes stay).
    let files: Vec<&PathBuf> = tree.iter().filter(|(_, n)| matches!(n, Node::File { .. })).map(|(p, _)| p).collect();
    let handles: Vec<fs::File> = files.iter().map(|p| fs::File::open(m.path(p)).unwrap()).collect();
    drop_kernel_inodes();
    let all = inodes(&m.mnt);
    assert!(all as usize > files.len(), "{all} inodes while {} files are open", files.len());
    drop(handles);
    // One file held open: it and its directories stay live.
    let held = fs::File::open(m.path("lib/libdemo.so.1.0")).unwrap();
    assert!(
        eventually(10, || {
            drop_kernel_inodes();
            inodes(&m.mnt) <= 3
        }),
        "inode table still holds {} entries (live: root, lib, libdemo)",
        inodes(&m.mnt)
    );
    // The held file still reads, and the forgotten names come back with
    // the numbers they had.
    let mut b = [0u8; 4];
    std::os::unix::fs::FileExt::read_exact_at(&held, &mut b, 0).unwrap();
    assert_eq!(&b, b"\x7fELF");
    drop(held);
    assert!(
        eventually(10, || {
            drop_kernel_inodes();
            inodes(&m.mnt) <= 1
        }),
        "{} inodes with nothing held",
        inodes(&m.mnt)
    );
    assert_same_tree(&snapshot(&m.mnt), &tree, "the tree after the kernel forgot it");
}

/// The fat libraries of the soak source and the assets their two versions
/// are made of.
const LIBS: &[(&str, &str, &str)] = &[("liba.so", "libtwo.so", "libmulti.so"), ("libb.so", "libmulti.so", "librdc.so"), ("libc.so", "librdc.so", "libtwo.so")];

/// Every file of the view (made with `args`) of a source holding, for each
/// library, version `v` (0 or 1) of it, from the binaries in `bin`.
fn view_of_version(bin: &Path, v: usize, arch: &str, args: &[&str]) -> HashMap<PathBuf, Vec<u8>> {
    let src = tempdir();
    fs::create_dir_all(src.path().join("lib")).unwrap();
    for (name, a, b) in LIBS {
        fs::copy(bin.join(if v == 0 { a } else { b }), src.path().join("lib").join(name)).unwrap();
    }
    let baked = bake(src.path(), arch, args);
    let out = baked.path().join("out");
    snapshot(&out).into_iter().filter(|(_, n)| matches!(n, Node::File { .. })).map(|(p, _)| (p.clone(), fs::read(out.join(&p)).unwrap())).collect()
}

#[test]
fn replacing_libraries_under_readers_keeps_memory_and_inodes_flat() {
    soak(&assets().join("bin"), &[]);
}

/// The same with compressed (CCOB) bundles served as uncompressed
/// archives without a cache directory: every archive read goes through the
/// memory cache of decoded code objects, whose entries of replaced
/// versions must leave with them.
#[test]
fn replacing_compressed_libraries_keeps_decoded_objects_to_the_live_versions() {
    let bin = tempdir();
    for asset in ["libtwo.so", "libmulti.so", "librdc.so"] {
        let st = Command::new(kpackfs())
            .arg("recompress")
            .arg(assets().join("bin").join(asset))
            .arg(bin.path().join(asset))
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "recompress {asset}");
    }
    soak(bin.path(), &["--cache-dir", "none", "--archive-compression", "none"]);
}

fn soak(bin: &Path, args: &[&str]) {
    require_root();
    let secs: u64 = std::env::var("KPACKFS_SOAK_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(30);
    let arch = "gfx90a";
    let versions = [view_of_version(bin, 0, arch, args), view_of_version(bin, 1, arch, args)];
    // Decoded objects of one version of every library: what the archives
    // of the view hold.
    let archive_bytes =
        |v: &HashMap<PathBuf, Vec<u8>>| -> u64 { v.iter().filter(|(p, _)| p.extension().is_some_and(|e| e == "kpack")).map(|(_, b)| b.len() as u64).sum() };
    let live_bytes = versions.iter().map(archive_bytes).max().unwrap_or(0);
    let src = tempdir();
    let root = src.path().to_path_buf();
    fs::create_dir_all(root.join("lib")).unwrap();
    for (name, a, _) in LIBS {
        fs::copy(bin.join(a), root.join("lib").join(name)).unwrap();
    }
    let m = Mount::new(Some(&root), arch, &[&["--threads", "4"], args].concat());
    let pid = m.child.as_ref().unwrap().id();
    // Every name either version shows, and the bytes each version has.
    let mut names: Vec<PathBuf> = versions.iter().flat_map(|v| v.keys().cloned()).collect();
    names.sort();
    names.dedup();
    let versions = Arc::new(versions);
    let stop = Arc::new(AtomicBool::new(false));
    let (reads, bad, replaced, stale) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));

    // Warm up once, then take the baseline.
    for n in &names {
        let _ = fs::read(m.path(n));
    }
    // Baseline once the kernel has forgotten the warm-up's inodes.
    assert!(
        eventually(10, || {
            drop_kernel_inodes();
            inodes(&m.mnt) <= 1
        }),
        "the warm-up's inodes were not forgotten"
    );
    let (rss_start, inodes_start) = (rss_kib(pid), inodes(&m.mnt));
    let (mut rss_peak, mut inodes_peak) = (rss_start, inodes_start);

    let replacer = {
        let (root, stop, replaced, bin) = (root.clone(), stop.clone(), replaced.clone(), bin.to_path_buf());
        std::thread::spawn(move || {
            let mut v = 0;
            while !stop.load(Ordering::Relaxed) {
                v = 1 - v;
                for (name, a, b) in LIBS {
                    // The usual upgrade: write a new file, rename it over.
                    let tmp = root.join("lib").join(format!(".{name}.new"));
                    fs::copy(bin.join(if v == 0 { a } else { b }), &tmp).unwrap();
                    fs::rename(&tmp, root.join("lib").join(name)).unwrap();
                    replaced.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let readers: Vec<_> = (0..4u64)
        .map(|t| {
            let (mnt, names, versions, stop, reads, bad, stale) =
                (m.mnt.clone(), names.clone(), versions.clone(), stop.clone(), reads.clone(), bad.clone(), stale.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(0xA076_1D64_78BD_642F ^ (t + 1));
                let mut first_bad = None;
                while !stop.load(Ordering::Relaxed) {
                    let n = &names[rng.below(names.len() as u64) as usize];
                    // One open reads one version whole: it must be exactly
                    // one of the two, never a mix. A name only the other
                    // version has may be absent.
                    match fs::read(mnt.join(n)) {
                        Ok(b) => {
                            reads.fetch_add(1, Ordering::Relaxed);
                            if !versions.iter().any(|v| v.get(n) == Some(&b)) {
                                bad.fetch_add(1, Ordering::Relaxed);
                                first_bad.get_or_insert_with(|| format!("{}: {} bytes match neither version", n.display(), b.len()));
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        // The version the kernel looked up was replaced
                        // before the open reached the daemon, twice in a row
                        // (the VFS retries once): an inode names one
                        // version, so the daemon cannot serve another under
                        // it. Counted, bounded below; never wrong bytes.
                        Err(e) if e.raw_os_error() == Some(libc::ESTALE) => {
                            stale.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            bad.fetch_add(1, Ordering::Relaxed);
                            first_bad.get_or_insert_with(|| format!("{}: {e}", n.display()));
                        }
                    }
                }
                first_bad
            })
        })
        .collect();
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs(secs);
    // RSS sampled every half second (the sampling interval, not a wait for
    // anything): a leak grows with time, allocator warm-up levels off.
    let mut samples = Vec::new();
    let mut rss_series: Vec<(f64, f64)> = Vec::new();
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(500));
        drop_kernel_inodes();
        let rss = rss_kib(pid);
        rss_peak = rss_peak.max(rss);
        inodes_peak = inodes_peak.max(inodes(&m.mnt));
        rss_series.push((t0.elapsed().as_secs_f64(), rss as f64));
        if t0.elapsed().as_secs() * 10 >= (samples.len() as u64 + 1) * secs {
            samples.push(format!("{}s:{}", t0.elapsed().as_secs(), rss));
        }
    }
    stop.store(true, Ordering::Relaxed);
    replacer.join().unwrap();
    let errors: Vec<String> = readers.into_iter().filter_map(|r| r.join().unwrap()).collect();
    // Nothing held: the table shrinks back to the root.
    let settled = eventually(10, || {
        drop_kernel_inodes();
        inodes(&m.mnt) <= 1
    });
    let (rss_end, inodes_end, plans_end, cached_end) = (rss_kib(pid), inodes(&m.mnt), stat(&m.mnt, "plans"), stat(&m.mnt, "cache_bytes"));
    let (probes_end, retired_end) = (stat(&m.mnt, "probes"), stat(&m.mnt, "retired_tags"));
    // The growth rate over the second half of the run (the first holds the
    // allocator's warm-up), by least squares, in KiB per minute.
    let slope = slope_per_min(&rss_series[rss_series.len() / 2..]);
    eprintln!(
        "soak {secs} s: {} reads, {} replacements, {} bad, {} ESTALE; RSS start {rss_start} KiB, peak {rss_peak} KiB, end {rss_end} KiB; inodes start {inodes_start}, peak {inodes_peak}, end {inodes_end}; plans held at the end {plans_end}; decoded bytes cached at the end {cached_end} (one version's archives: {live_bytes})",
        reads.load(Ordering::Relaxed),
        replaced.load(Ordering::Relaxed),
        bad.load(Ordering::Relaxed),
        stale.load(Ordering::Relaxed)
    );
    eprintln!("RSS (KiB) over time: {}; slope over the second half {slope:.0} KiB/min", samples.join(" "));
    eprintln!("daemon stats at the end:\n{}", stats(&m.mnt));
    assert_eq!(bad.load(Ordering::Relaxed), 0, "wrong bytes or errors: {errors:?}");
    assert!(reads.load(Ordering::Relaxed) > 100 && replaced.load(Ordering::Relaxed) > 30, "the soak did too little");
    assert!(stale.load(Ordering::Relaxed) * 1000 < reads.load(Ordering::Relaxed), "ESTALE on more than 0.1% of opens");
    assert!(settled, "{inodes_end} inodes left with nothing held");
    // Flat: no growth with the number of versions seen (each replacement
    // is a new version; hundreds happened). Judged by the slope, so a slow
    // leak shows in a short run. Measured over 30 s (second half): about
    // 210 KiB/min with the allocator still levelling off, 1232 KiB/min with
    // e3e8cbd reverted (a leak of about 500 KiB a minute in long runs). A
    // 500 KiB/min leak on top of the warm-up fails.
    assert!(slope < 600.0, "RSS grows {slope:.0} KiB/min over the second half (samples: {})", samples.join(" "));
    // Bounded by what is live: the tree has a handful of names, each with
    // at most a few versions in flight.
    assert!(inodes_peak < 200, "inode table peaked at {inodes_peak}");
    // One plan per library at most: a plan of a replaced version left
    // behind (a request planning it raced the replacement) is a leak that
    // grows with time — it did, by about 0.5 MB of RSS a minute, before
    // such plans were dropped.
    assert!(plans_end <= LIBS.len() as u64, "{plans_end} plans held for {} libraries", LIBS.len());
    // Probe results: one per path (a95c1a6; before it, one per version).
    assert!(probes_end <= LIBS.len() as u64, "{probes_end} probe results held for {} libraries", LIBS.len());
    // Retired version tags are a ring bounded by design (1024 entries of
    // 8 bytes), not a live-set map: bounded, whatever the replacements.
    assert!(retired_end <= 1024, "{retired_end} retired tags");
    // Decoded objects: those of the live versions, and at most as much
    // again from readers of a version replaced under them (a plain source
    // decodes nothing).
    assert!(cached_end <= 2 * live_bytes, "{cached_end} decoded bytes cached; one version of every library has {live_bytes}");
    // ...and the live versions' objects stay cached: with the page cache
    // dropped, reading every file again decodes nothing (a version retired
    // by racing requests and then current again would decode on every read).
    for n in &names {
        let _ = fs::read(m.path(n));
    }
    let misses = stat(&m.mnt, "cache_misses");
    drop_caches("3");
    for n in &names {
        let _ = fs::read(m.path(n));
    }
    assert_eq!(stat(&m.mnt, "cache_misses"), misses, "the live versions' decoded objects are not cached");
    assert!(rss_end <= rss_start + 16 * 1024, "RSS grew from {rss_start} to {rss_end} KiB");
}

/// Least-squares slope of (seconds, KiB) samples, in KiB per minute.
fn slope_per_min(s: &[(f64, f64)]) -> f64 {
    let n = s.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let (mx, my) = (s.iter().map(|p| p.0).sum::<f64>() / n, s.iter().map(|p| p.1).sum::<f64>() / n);
    let sxx: f64 = s.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    let sxy: f64 = s.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    if sxx == 0.0 {
        0.0
    } else {
        sxy / sxx * 60.0
    }
}
