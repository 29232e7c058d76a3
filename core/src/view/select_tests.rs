//! Which archives a view serves and which code object each archive entry
//! holds, judged by tables written by hand from the loader rules in docs/
//! (kpack-archives.md §6.2, §8) and by the objects clang-offload-bundler
//! extracted from the test assets (test_assets/expected). Unit-level, so
//! that `cargo test --lib` (what tests/mutants.sh runs per mutant) sees
//! archive planning and `best_for`; tests/tests/oracle.rs checks the same
//! end to end through the test runtime.

use std::path::{Path, PathBuf};

use super::{ArchiveNaming, View, ViewConfig};
use crate::formats::bundle::write_bundle;
use crate::formats::elf::ElfFile;
use crate::formats::kpack::Archive;
use crate::formats::target::Selection;

fn assets() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../test_assets")
}

/// A code object clang-offload-bundler extracted (bundle 0).
fn co(bin: &str, arch: &str) -> Vec<u8> {
    std::fs::read(assets().join("expected").join(bin).join("0").join(format!("{}.co", arch.replace(':', "_")))).unwrap()
}

/// libmulti.so with its bundle replaced by `entries`.
fn with_bundle(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let b = write_bundle(entries, 8);
    let mut data = std::fs::read(assets().join("bin/libmulti.so")).unwrap();
    let s = *ElfFile::parse(&data).unwrap().fatbin().unwrap();
    let (at, size) = (s.offset as usize, s.size as usize);
    assert!(b.len() < size);
    data[at..at + size].fill(0);
    data[at..at + b.len()].copy_from_slice(&b);
    data
}

/// libmulti.so with its bundle replaced: xnack- before xnack+, a generic
/// object beside a native one, two equally good gfx1030 entries.
fn hand_binary() -> Vec<u8> {
    let (xm, xp, generic, native, dup) = (
        co("libmulti.so", "gfx90a:xnack-"),
        co("libmulti.so", "gfx90a:xnack+"),
        co("libmulti.so", "gfx1030"),
        co("libtwo.so", "gfx1030"),
        co("app_pie", "gfx1030"),
    );
    with_bundle(&[
        ("host-x86_64-unknown-linux", &[]),
        ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-", &xm),
        ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+", &xp),
        ("hipv4-amdgcn-amd-amdhsa--gfx10-3-generic", &generic),
        ("hipv4-amdgcn-amd-amdhsa--gfx1030", &native),
        ("hip-amdgcn-amd-amdhsa--gfx1030", &dup),
    ])
}

/// A name the planner accepts at its limit (255 minus the 44 bytes kept
/// for `_<target>.kpack`).
fn long_name() -> String {
    format!("{}.so", "l".repeat(255 - 44 - 3))
}

/// Targets whose archive names with [`long_name`] are 255 and 256 bytes.
const AT_LIMIT: &str = "gfx90a:sramecc+:xnack+:tgsplit+:abcd+";
const PAST_LIMIT: &str = "gfx90a:sramecc+:xnack+:tgsplit+:abcde+";

fn source() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for b in ["libmulti.so", "libtwo.so", "app_pie"] {
        std::fs::copy(assets().join("bin").join(b), d.path().join(b)).unwrap();
    }
    std::fs::write(d.path().join("libhand.so"), hand_binary()).unwrap();
    let x = co("libmulti.so", "gfx90a:xnack-");
    let (a, b) = (format!("hipv4-amdgcn-amd-amdhsa--{AT_LIMIT}"), format!("hipv4-amdgcn-amd-amdhsa--{PAST_LIMIT}"));
    std::fs::write(d.path().join(long_name()), with_bundle(&[("host-x86_64-unknown-linux", &[]), (&a, &x), (&b, &x)])).unwrap();
    d
}

fn view(src: &Path, sel: &str) -> View {
    View::new(ViewConfig {
        source: src.to_path_buf(),
        selection: Selection::parse(sel).unwrap(),
        cache_bytes: 1 << 20,
        naming: ArchiveNaming::TargetId,
        compression: Default::default(),
        db_rules: Default::default(),
    })
    .unwrap()
}

/// Archive targets served for `bin`, sorted.
fn archives(v: &View, bin: &str) -> Vec<String> {
    let Ok(a) = v.lookup(v.root_ino(), std::ffi::OsStr::new(".kpack")) else { return Vec::new() };
    let prefix = format!("{bin}_");
    let mut out: Vec<String> =
        v.readdir(a.ino).unwrap().into_iter().filter_map(|e| e.name.to_str()?.strip_prefix(&prefix)?.strip_suffix(".kpack").map(str::to_string)).collect();
    out.sort();
    out
}

fn read_all(v: &View, rel: &str) -> Vec<u8> {
    let f = v.open_path(Path::new(rel)).unwrap();
    let mut buf = vec![0u8; f.len() as usize];
    let mut got = 0;
    while got < buf.len() {
        let n = f.read_at(got as u64, &mut buf[got..]).unwrap();
        assert!(n > 0, "{rel}: short read");
        got += n;
    }
    buf
}

/// (binary, archive targets) for each of four binaries.
type PerBinary = [(&'static str, &'static [&'static str]); 4];

/// By hand: the archive targets `--arch SEL` serves per binary.
const ARCHIVES: [(&str, PerBinary); 7] = [
    ("gfx90a:xnack+", [("libmulti.so", &["gfx90a:xnack+"]), ("libtwo.so", &["gfx90a"]), ("app_pie", &[]), ("libhand.so", &["gfx90a:xnack+"])]),
    ("gfx90a:xnack-", [("libmulti.so", &["gfx90a:xnack-"]), ("libtwo.so", &["gfx90a"]), ("app_pie", &["gfx90a:xnack-"]), ("libhand.so", &["gfx90a:xnack-"])]),
    (
        "gfx90a:sramecc+:xnack-",
        [("libmulti.so", &["gfx90a:xnack-"]), ("libtwo.so", &["gfx90a"]), ("app_pie", &["gfx90a:xnack-"]), ("libhand.so", &["gfx90a:xnack-"])],
    ),
    ("gfx906", [("libmulti.so", &["gfx906"]), ("libtwo.so", &[]), ("app_pie", &[]), ("libhand.so", &[])]),
    ("gfx1030", [("libmulti.so", &["gfx1030"]), ("libtwo.so", &["gfx1030"]), ("app_pie", &["gfx1030"]), ("libhand.so", &["gfx10-3-generic", "gfx1030"])]),
    ("gfx1031", [("libmulti.so", &[]), ("libtwo.so", &[]), ("app_pie", &[]), ("libhand.so", &["gfx10-3-generic"])]),
    (
        "gfx90a",
        [
            ("libmulti.so", &["gfx90a:xnack+", "gfx90a:xnack-"]),
            ("libtwo.so", &["gfx90a"]),
            ("app_pie", &["gfx90a:xnack-"]),
            ("libhand.so", &["gfx90a:xnack+", "gfx90a:xnack-"]),
        ],
    ),
];

/// By hand: the object an archive of target T holds for each binary —
/// what a device whose ISA is exactly T loads (exact features beat "any",
/// native beats generic, first in bundle order on a tie): (binary, T,
/// expected object as (asset, arch) of test_assets/expected).
const CONTENT: [(&str, &str, (&str, &str)); 12] = [
    ("libmulti.so", "gfx90a:xnack+", ("libmulti.so", "gfx90a:xnack+")),
    ("libmulti.so", "gfx90a:xnack-", ("libmulti.so", "gfx90a:xnack-")),
    ("libmulti.so", "gfx906", ("libmulti.so", "gfx906")),
    ("libmulti.so", "gfx1030", ("libmulti.so", "gfx1030")),
    ("libtwo.so", "gfx90a", ("libtwo.so", "gfx90a")),
    ("libtwo.so", "gfx1030", ("libtwo.so", "gfx1030")),
    ("app_pie", "gfx90a:xnack-", ("app_pie", "gfx90a:xnack-")),
    ("app_pie", "gfx1030", ("app_pie", "gfx1030")),
    ("libhand.so", "gfx90a:xnack+", ("libmulti.so", "gfx90a:xnack+")),
    ("libhand.so", "gfx90a:xnack-", ("libmulti.so", "gfx90a:xnack-")),
    ("libhand.so", "gfx10-3-generic", ("libmulti.so", "gfx1030")),
    ("libhand.so", "gfx1030", ("libtwo.so", "gfx1030")),
];

#[test]
fn each_selection_serves_the_archives_the_rules_say() {
    let src = source();
    for (sel, rows) in ARCHIVES {
        let v = view(src.path(), sel);
        for (bin, want) in rows {
            assert_eq!(archives(&v, bin), want, "--arch {sel}: {bin}");
        }
    }
}

#[test]
fn each_archive_entry_is_the_object_the_rules_say() {
    let src = source();
    let v = view(src.path(), "gfx90a,gfx906,gfx1030,gfx1031");
    for (bin, t, (asset, arch)) in CONTENT {
        let data = read_all(&v, &format!(".kpack/{bin}_{t}.kpack"));
        let a = Archive::open(&data).unwrap();
        assert_eq!(a.toc.gfx_arches, [t], "{bin} {t}");
        // Header fields (kpack-archives.md §6.2): the group is the file
        // name, the family the file target.
        assert_eq!((a.toc.group_name.as_str(), a.toc.gfx_arch_family.as_str()), (bin, t), "{bin} {t}: header");
        // libtwo has two wrappers (bundle 1's objects are in expected/…/1).
        let wrappers = if bin == "libtwo.so" { 2 } else { 1 };
        assert_eq!(a.toc.toc.len(), wrappers, "{bin} {t}: keys");
        for w in 0..wrappers {
            let key = a.toc.toc.iter().map(|(k, _)| k).find(|k| k.ends_with(&format!("#{w}"))).unwrap_or_else(|| panic!("{bin} {t}: no #{w}")).clone();
            let want = std::fs::read(assets().join("expected").join(asset).join(w.to_string()).join(format!("{}.co", arch.replace(':', "_")))).unwrap();
            assert!(a.get_kernel(&data, &key, t).unwrap() == want, "{bin} {t} {key}: not the bundler's {asset} {arch}");
        }
    }
}

/// Archive names up to 255 bytes are served; longer ones are not.
#[test]
fn archive_names_up_to_the_name_limit() {
    let src = source();
    let v = view(src.path(), "gfx90a");
    assert_eq!(format!("{}_{AT_LIMIT}.kpack", long_name()).len(), 255);
    assert_eq!(archives(&v, &long_name()), [AT_LIMIT]);
}
