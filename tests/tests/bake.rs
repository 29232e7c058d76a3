//! `kpackfs bake` refuses destinations it cannot write safely and leaves
//! nothing behind when it fails: a destination inside the source (or the
//! source inside the destination) is refused before anything is written,
//! and a bake that runs out of space (a small tmpfs mounted by the test)
//! leaves the destination as it was. `resolve --out` likewise writes its
//! objects only when every wrapper resolved and they all fit.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kpackfs_tests::*;

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn bake_to(source: &Path, dest: &Path) -> Output {
    Command::new(kpackfs()).arg("bake").arg(source).arg(dest).args(["--arch", "gfx90a", "-q"]).args(with_cache_dir(&[])).output().expect("kpackfs")
}

/// Every path below `root` (not following symlinks).
fn listing(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            out.push(e.path());
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn bake_refuses_destinations_nested_with_the_source() {
    let work = tempdir();
    let src = work.path().join("src");
    fs::create_dir_all(src.join("lib")).unwrap();
    fs::write(src.join("lib/data.txt"), b"a small source").unwrap();
    std::os::unix::fs::symlink(&src, work.path().join("link")).unwrap();
    let before = listing(work.path());
    // Inside the source: directly, through a symlink to it, through `..`
    // of directories that do not exist yet, and the source itself seen
    // through a path that does not exist yet.
    for dest in ["src/out", "link/new/out", "nothere/../src/out", "src/nothere/../out", "link/x/.."] {
        let o = bake_to(&src, &work.path().join(dest));
        assert_eq!(o.status.code(), Some(2), "{dest}: {}", text(&o));
        assert!(text(&o).contains("inside one another"), "{dest}: {}", text(&o));
        assert_eq!(listing(work.path()), before, "{dest}: something was written");
    }
    // The source inside the destination (an empty source, so the
    // destination is empty too): refused as well.
    let empty = work.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let o = bake_to(&empty, &empty);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // Next to the source is fine.
    let o = bake_to(&src, &work.path().join("out"));
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(fs::read(work.path().join("out/lib/data.txt")).unwrap(), b"a small source");
}

#[test]
fn bake_out_of_space_leaves_no_partial_destination() {
    require_root();
    let work = tempdir();
    // The demo install and a plain file that cannot fit: ENOSPC part way.
    let src = work.path().join("src");
    let st = Command::new("cp").arg("-a").arg(assets().join("demo-install")).arg(&src).status().unwrap();
    assert!(st.success());
    fs::write(src.join("share/padding.bin"), vec![0x5a; 1 << 20]).unwrap();
    let small = Tmpfs::new(&work.path().join("small"), "256k");

    // Into the (empty) mount point itself, and into a directory to create.
    for dest in [small.0.clone(), small.0.join("new/dest")] {
        let o = bake_to(&src, &dest);
        assert_eq!(o.status.code(), Some(1), "{}: {}", dest.display(), text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("No space left on device") && err.contains("left as it was"), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(!err.contains(".kpackfs-"), "names the staging directory: {err}");
        assert_eq!(listing(&small.0), Vec::<PathBuf>::new(), "{}: partial output left", dest.display());
    }
    // And it fits once the padding is gone.
    fs::remove_file(src.join("share/padding.bin")).unwrap();
    let o = bake_to(&src, &small.0);
    assert!(o.status.success(), "{}", text(&o));
    assert!(small.0.join("lib/libdemo.so").is_file());
}

#[test]
fn resolve_out_writes_all_or_nothing() {
    require_root();
    let work = tempdir();
    let lib = assets().join("bin/libtwo.so");
    let resolve = |arch: &str, out: &Path| Command::new(kpackfs()).arg("resolve").arg(&lib).args(["--arch", arch, "--out"]).arg(out).output().expect("kpackfs");
    // A target the library does not carry is refused before anything is
    // written (exit 2, the README's exit-status table).
    let out = work.path().join("none");
    let o = resolve("gfx1100", &out);
    assert!(!out.exists(), "a failed resolve created its output directory");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("carries no code for it"), "{}", text(&o));
    // Objects that do not fit (4.5 KB each into one page): nothing partial.
    let small = Tmpfs::new(&work.path().join("small"), "4k");
    let o = resolve("gfx90a:xnack-", &small.0);
    assert_eq!(listing(&small.0), Vec::<PathBuf>::new(), "partial objects left");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("No space left on device"), "{}", text(&o));
    // Both objects when it works.
    let o = resolve("gfx90a:xnack-", &out);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(listing(&out), vec![out.join("0.co"), out.join("1.co")]);
}
