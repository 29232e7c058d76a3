//! Load: 16 reader threads over the demo install plus Debian's ROCm
//! libraries (and a CCOB-compressed copy of librocrand decoded through a
//! small cache), comparing every read with the baked tree: zero mismatches,
//! bounded daemon memory. KPACKFS_LOAD_SECS sets the duration (default 60).
//! Needs: apt-get install librocsparse0 librocrand1.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kpackfs_tests::*;

const LIBDIR: &str = "/usr/lib/x86_64-linux-gnu";

fn link_or_copy(from: &Path, to: &Path) {
    if fs::hard_link(from, to).is_err() {
        fs::copy(from, to).unwrap();
    }
}

#[test]
fn sixteen_readers_over_demo_and_debian_libraries() {
    require_root();
    for lib in ["librocsparse.so.0.1", "librocrand.so.1.1"] {
        assert!(Path::new(LIBDIR).join(lib).is_file(), "{LIBDIR}/{lib} missing: apt-get install librocsparse0 librocrand1");
    }
    let src = tempdir();
    let root = src.path();
    assert!(Command::new("cp").arg("-a").arg(assets().join("demo-install/.")).arg(root).status().unwrap().success());
    fs::create_dir_all(root.join("rocm/lib")).unwrap();
    for lib in ["librocsparse.so.0.1", "librocrand.so.1.1"] {
        link_or_copy(&Path::new(LIBDIR).join(lib), &root.join("rocm/lib").join(lib));
    }
    let st = Command::new(kpackfs())
        .arg("recompress")
        .arg(Path::new(LIBDIR).join("librocrand.so.1.1"))
        .arg(root.join("rocm/lib/librocrand_ccob.so"))
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let arch = "gfx90a,gfx1030";
    let cache_mb = 32;
    let m = Mount::new(Some(root), arch, &["--cache-size", &format!("{cache_mb}M"), "--threads", "8"]);
    let pid = m.child.as_ref().unwrap().id();
    let baked = bake(root, arch, &[]);
    let out = baked.path().join("out");
    let files: Vec<(PathBuf, u64)> = snapshot_paths(&out);
    assert!(files.iter().any(|(p, _)| p.to_string_lossy().contains("librocrand_ccob.so_gfx1030.kpack")));
    let files = Arc::new(files);
    let secs: u64 = std::env::var("KPACKFS_LOAD_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    let deadline = Instant::now() + Duration::from_secs(secs);
    let (reads, bytes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let threads: Vec<_> = (0..16u64)
        .map(|t| {
            let (files, mnt, out, reads, bytes) = (files.clone(), m.mnt.clone(), out.clone(), reads.clone(), bytes.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(0xA5A5_5A5A_1234_5678 ^ (t * 0x9E37_79B9));
                let mut bad = Vec::new();
                let opened: Vec<(fs::File, fs::File)> =
                    files.iter().map(|(p, _)| (fs::File::open(mnt.join(p)).unwrap(), fs::File::open(out.join(p)).unwrap())).collect();
                while Instant::now() < deadline {
                    let i = rng.below(files.len() as u64) as usize;
                    let (path, len) = &files[i];
                    let off = rng.below(len + 16);
                    let span = if rng.below(5) == 0 { 1 << 20 } else { 16384 };
                    let n = 1 + rng.below(span) as usize;
                    let got = pread(&opened[i].0, off, n);
                    let want = pread(&opened[i].1, off, n);
                    if got != want {
                        bad.push(format!("{} @{off}+{n}", path.display()));
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                    bytes.fetch_add(got.len() as u64, Ordering::Relaxed);
                }
                bad
            })
        })
        .collect();
    let dropper = std::thread::spawn(move || {
        while Instant::now() < deadline {
            drop_caches("1");
            std::thread::sleep(Duration::from_millis(500));
        }
    });
    let mut bad = Vec::new();
    for t in threads {
        bad.extend(t.join().unwrap());
    }
    dropper.join().unwrap();
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let hwm_mb = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok()).unwrap() / 1024;
    let (r, b) = (reads.load(Ordering::Relaxed), bytes.load(Ordering::Relaxed));
    eprintln!("{r} reads, {} MB in {secs} s over {} files; daemon peak RSS {hwm_mb} MB (cache {cache_mb} MB)", b >> 20, files.len());
    assert!(bad.is_empty(), "{} mismatches, e.g. {:?}", bad.len(), &bad[..bad.len().min(5)]);
    assert!(r > 1000, "only {r} reads");
    assert!(hwm_mb <= 64 + cache_mb, "daemon peak RSS {hwm_mb} MB exceeds 64 MB + cache");
}

/// Regular files of a tree with their sizes.
fn snapshot_paths(root: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in fs::read_dir(root.join(&rel)).unwrap() {
            let e = e.unwrap();
            let p = rel.join(e.file_name());
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file() {
                out.push((p, e.metadata().unwrap().len()));
            }
        }
    }
    out.sort();
    out
}
