//! Acceptance on real ROCm libraries: Debian's librocsparse.so.0.1
//! (1.3 GB of device code, 111 wrappers) and librocrand.so.1.1 are baked
//! for `gfx90a:xnack-` and for `gfx1030`; then, for every wrapper, what the
//! runtime loader recovers from the baked host library and archive (both
//! loader generations) must equal what clang-offload-bundler extracts from
//! the original's bundle for that target.
//!
//! The oracle side is independent of kpackfs: the fat section is located
//! with binutils' `readelf`, bundles are cut at their 4 KiB-aligned magics
//! with a few lines here, and clang-offload-bundler unbundles them.
//! Needs: apt-get install librocsparse0 librocrand1 clang-15 binutils.

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use kpackfs_core::formats::target::TargetId;
use kpackfs_core::tools::resolve::{self, LoaderEnv, LoaderGen};
use kpackfs_tests::*;

const LIBDIR: &str = "/usr/lib/x86_64-linux-gnu";
const BUNDLER: &str = "/usr/lib/llvm-15/bin/clang-offload-bundler";
const MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";

/// Checks the inputs exist and returns a lock held for the test's run:
/// the tests hard-link the system libraries, and linking or unlinking
/// changes the shared inode's ctime, which a split running at that moment
/// rightly reports as "changed while being split". One test at a time
/// (in this process and in any other test run on the machine) uses them.
fn require_inputs() -> fs::File {
    for lib in ["librocsparse.so.0.1", "librocrand.so.1.1"] {
        assert!(Path::new(LIBDIR).join(lib).is_file(), "{LIBDIR}/{lib} missing: apt-get install librocsparse0 librocrand1");
    }
    assert!(Path::new(BUNDLER).is_file(), "{BUNDLER} missing: apt-get install clang-15");
    // The lock is on the library itself (flock changes no time stamp), so
    // the test leaves no lock file behind.
    let lock = fs::File::open(Path::new(LIBDIR).join("librocsparse.so.0.1")).expect("open the library");
    // SAFETY: flock on a descriptor owned by `lock`; released when it is dropped.
    assert_eq!(unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) }, 0, "flock");
    lock
}

/// (offset, size) of `.hip_fatbin`, as binutils reads it.
fn fatbin_section(path: &Path) -> (u64, u64) {
    let out = Command::new("readelf").args(["-S", "-W"]).arg(path).output().expect("readelf (apt-get install binutils)");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.contains(" .hip_fatbin ")).expect(".hip_fatbin in readelf -S");
    let f: Vec<&str> = line.split_whitespace().collect();
    let i = f.iter().position(|x| *x == ".hip_fatbin").unwrap();
    // Name Type Address Off Size ...
    (u64::from_str_radix(f[i + 3], 16).unwrap(), u64::from_str_radix(f[i + 4], 16).unwrap())
}

/// Cuts the uncompressed bundles out of the section: each starts at a
/// 4 KiB-aligned offset with the magic; its end is max(offset+size).
fn bundles(path: &Path) -> Vec<(u64, u64)> {
    let (off, size) = fatbin_section(path);
    let f = fs::File::open(path).unwrap();
    let mut out = Vec::new();
    let mut pos = 0u64;
    let mut head = [0u8; 24];
    while pos + 32 <= size {
        f.read_exact_at(&mut head, off + pos).unwrap();
        if head != MAGIC {
            pos += 4096;
            continue;
        }
        let mut n = [0u8; 8];
        f.read_exact_at(&mut n, off + pos + 24).unwrap();
        let count = u64::from_le_bytes(n);
        let mut desc = off + pos + 32;
        let mut end = 0;
        for _ in 0..count {
            let mut d = [0u8; 24];
            f.read_exact_at(&mut d, desc).unwrap();
            let o = u64::from_le_bytes(d[0..8].try_into().unwrap());
            let s = u64::from_le_bytes(d[8..16].try_into().unwrap());
            let l = u64::from_le_bytes(d[16..24].try_into().unwrap());
            end = end.max(o + s);
            desc += 24 + l;
        }
        out.push((off + pos, end));
        pos += end.div_ceil(4096) * 4096;
    }
    out
}

/// clang-offload-bundler's code objects of every bundle for `targets`.
fn oracle(path: &Path, targets: &[&str], work: &Path) -> Vec<Vec<Vec<u8>>> {
    let f = fs::File::open(path).unwrap();
    let mut all = Vec::new();
    for (i, (at, len)) in bundles(path).into_iter().enumerate() {
        let mut b = vec![0u8; len as usize];
        f.read_exact_at(&mut b, at).unwrap();
        let input = work.join("bundle.bin");
        fs::write(&input, &b).unwrap();
        let mut cmd = Command::new(BUNDLER);
        cmd.args(["--unbundle", "--type=o"]).arg(format!("--input={}", input.display()));
        let outs: Vec<PathBuf> = (0..targets.len()).map(|k| work.join(format!("{i}-{k}.co"))).collect();
        for (t, o) in targets.iter().zip(&outs) {
            cmd.arg(format!("--targets=hipv4-amdgcn-amd-amdhsa--{t}")).arg(format!("--output={}", o.display()));
        }
        let st = cmd.status().unwrap();
        assert!(st.success(), "clang-offload-bundler failed on bundle {i} of {}", path.display());
        all.push(outs.iter().map(|o| fs::read(o).unwrap()).collect());
        for o in outs {
            let _ = fs::remove_file(o);
        }
    }
    all
}

/// Hard-links (or copies) the Debian libraries into a fresh source tree.
fn source() -> TempDir {
    let dir = tempdir();
    let lib = dir.path().join("lib");
    fs::create_dir(&lib).unwrap();
    for (file, link) in [("librocsparse.so.0.1", "librocsparse.so.0"), ("librocrand.so.1.1", "librocrand.so.1")] {
        let from = Path::new(LIBDIR).join(file);
        if fs::hard_link(&from, lib.join(file)).is_err() {
            fs::copy(&from, lib.join(file)).unwrap();
        }
        std::os::unix::fs::symlink(file, lib.join(link)).unwrap();
    }
    dir
}

#[test]
fn baked_debian_libraries_resolve_to_clang_offload_bundler_objects() {
    let _inputs = require_inputs();
    let src = source();
    let work = tempdir();
    let targets = ["gfx90a:xnack-", "gfx1030"];
    let start = Instant::now();
    let expected: Vec<(&str, Vec<Vec<Vec<u8>>>)> =
        ["librocsparse.so.0.1", "librocrand.so.1.1"].iter().map(|l| (*l, oracle(&src.path().join("lib").join(l), &targets, work.path()))).collect();
    eprintln!("oracle extraction: {:.1}s", start.elapsed().as_secs_f64());
    assert_eq!(expected[0].1.len(), 111, "librocsparse should have 111 bundles");
    for (k, target) in targets.iter().enumerate() {
        let t = Instant::now();
        let baked = bake(src.path(), target, &[]);
        eprintln!("bake for {target}: {:.2}s", t.elapsed().as_secs_f64());
        let out = baked.path().join("out/lib");
        for (lib, per_bundle) in &expected {
            // Resolve through the versioned symlink, as the dynamic linker would.
            let bin = out.join(lib);
            for gen in [LoaderGen::Feb2026, LoaderGen::Newest] {
                let isa = TargetId::parse(target).unwrap();
                let res = resolve::resolve(&bin, &isa, gen, &LoaderEnv::default()).unwrap();
                assert_eq!(res.len(), per_bundle.len(), "{lib}: wrappers vs bundles");
                for (i, w) in res.iter().enumerate() {
                    let r = w.result.as_ref().unwrap_or_else(|e| panic!("{lib} wrapper {i} on {target} ({gen:?}): {e}"));
                    assert_eq!(w.co_index as usize, i);
                    assert!(r.archive.as_ref().is_some_and(|a| a.starts_with(&out)), "{lib}: {:?}", r.archive);
                    assert_eq!(r.arch, *target);
                    assert!(r.bytes == per_bundle[i][k], "{lib} wrapper {i} on {target} ({gen:?}): code object differs from clang-offload-bundler's");
                }
            }
        }
        // The slim host libraries carry no device code any more.
        let fat = fs::metadata(src.path().join("lib/librocsparse.so.0.1")).unwrap().len();
        let slim = fs::metadata(out.join("librocsparse.so.0.1")).unwrap().len();
        assert!(slim * 50 < fat, "librocsparse: {slim} bytes after, {fat} before");
    }
}

/// The packager's path on the same libraries: an artifact with two
/// prefixes is split on two "shards" (one per GPU family), recombined into
/// package groups, verified against the fat input, installed (prefixes
/// overlaid), and every wrapper must resolve, with both loader
/// generations, to clang-offload-bundler's object for the target.
#[test]
fn split_and_recombined_debian_libraries_resolve_to_clang_offload_bundler_objects() {
    let _inputs = require_inputs();
    let art = tempdir();
    for (prefix, file) in [("sparse/stage", "librocsparse.so.0.1"), ("rand/stage", "librocrand.so.1.1")] {
        let lib = art.path().join(prefix).join("lib");
        fs::create_dir_all(&lib).unwrap();
        let from = Path::new(LIBDIR).join(file);
        if fs::hard_link(&from, lib.join(file)).is_err() {
            fs::copy(&from, lib.join(file)).unwrap();
        }
    }
    fs::write(art.path().join("artifact_manifest.txt"), "sparse/stage\nrand/stage\n").unwrap();
    let shards = tempdir();
    let kp = |args: &[&std::ffi::OsStr]| {
        let o = Command::new(kpackfs()).args(args).output().unwrap();
        assert!(o.status.success(), "kpackfs {args:?}: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    for (shard, targets) in [("a", "gfx90a"), ("b", "gfx1030")] {
        let t = Instant::now();
        kp(&[
            "split".as_ref(),
            art.path().as_os_str(),
            shards.path().join(shard).as_os_str(),
            "-c".as_ref(),
            "rocm".as_ref(),
            "--targets".as_ref(),
            targets.as_ref(),
            "-q".as_ref(),
        ]);
        eprintln!("split for {targets}: {:.2}s", t.elapsed().as_secs_f64());
    }
    let cfg = shards.path().join("groups.json");
    fs::write(&cfg, r#"{"groups": {"gfx90X": ["gfx90a"], "gfx103X": ["gfx1030"]}}"#).unwrap();
    let out = tempdir();
    kp(&["recombine".as_ref(), shards.path().as_os_str(), out.path().as_os_str(), "--config".as_ref(), cfg.as_os_str()]);
    let v = kp(&["verify".as_ref(), out.path().as_os_str(), "--against".as_ref(), art.path().as_os_str()]);
    assert!(v.contains("verify: OK"), "{v}");

    let work = tempdir();
    let targets = ["gfx90a:xnack-", "gfx1030"];
    // (prefix, library, code objects per bundle per target)
    type Expected<'a> = Vec<(&'a str, &'a str, Vec<Vec<Vec<u8>>>)>;
    let expected: Expected = [("sparse/stage", "librocsparse.so.0.1"), ("rand/stage", "librocrand.so.1.1")]
        .iter()
        .map(|(p, l)| (*p, *l, oracle(&art.path().join(p).join("lib").join(l), &targets, work.path())))
        .collect();
    for (k, (target, group)) in targets.iter().zip(["rocm_gfx90X", "rocm_gfx103X"]).enumerate() {
        let root = work.path().join(group);
        fs::create_dir_all(&root).unwrap();
        for a in ["rocm_generic", group] {
            for p in ["sparse/stage", "rand/stage"] {
                let from = out.path().join(a).join(p);
                if from.is_dir() {
                    assert!(Command::new("cp").arg("-a").arg(format!("{}/.", from.display())).arg(&root).status().unwrap().success());
                }
            }
        }
        for (_, lib, per_bundle) in &expected {
            let bin = root.join("lib").join(lib);
            let fat = fs::metadata(Path::new(LIBDIR).join(lib)).unwrap().len();
            assert!(fs::metadata(&bin).unwrap().len() < fat, "{lib}: host library not slimmed");
            for gen in [LoaderGen::Feb2026, LoaderGen::Newest] {
                let res = resolve::resolve(&bin, &TargetId::parse(target).unwrap(), gen, &LoaderEnv::default()).unwrap();
                assert_eq!(res.len(), per_bundle.len(), "{lib}: wrappers vs bundles");
                for (i, w) in res.iter().enumerate() {
                    let r = w.result.as_ref().unwrap_or_else(|e| panic!("{lib} wrapper {i} on {target} ({gen:?}): {e}"));
                    assert!(r.archive.as_ref().is_some_and(|a| a.starts_with(root.join(".kpack"))), "{lib}: {:?}", r.archive);
                    assert!(r.bytes == per_bundle[i][k], "{lib} wrapper {i} on {target} ({gen:?}): not clang-offload-bundler's object");
                }
            }
        }
    }
}
