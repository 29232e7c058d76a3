//! Helpers for the cache-directory tests (`cache.rs`, `cache_hostile.rs`):
//! a source tree with plain and CCOB binaries, the archive they are judged
//! by, and exact resolution against clang-offload-bundler's objects.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{assets, bake, expected_arch, expected_object, kpackfs, tempdir, wrapper_bundles, TempDir};

/// lib/ with a plain binary and two CCOB variants (v3 zstd, v2 zlib).
pub fn source() -> TempDir {
    let dir = tempdir();
    let lib = dir.path().join("lib");
    fs::create_dir_all(&lib).unwrap();
    fs::copy(assets().join("bin/libtwo.so"), lib.join("libtwo.so")).unwrap();
    recompress("libtwo.so", &lib.join("libtwo_ccob.so"), &["--ccob-version", "3"]);
    recompress("libmulti.so", &lib.join("libmulti_zlib.so"), &["--ccob-version", "2", "--method", "zlib"]);
    dir
}

/// `kpackfs recompress` of test asset `asset` (test_assets/bin) to `out`.
pub fn recompress(asset: &str, out: &Path, args: &[&str]) {
    let st = Command::new(kpackfs()).arg("recompress").arg(assets().join("bin").join(asset)).arg(out).args(args).stderr(Stdio::null()).status().unwrap();
    assert!(st.success());
}

/// The test asset a binary of [`source`] was made from.
fn asset_of(name: &str) -> &str {
    match name {
        "libtwo_ccob.so" => "libtwo.so",
        "libmulti_zlib.so" => "libmulti.so",
        n => n,
    }
}

/// The scheme `kpackfs inspect` reports for an archive.
pub fn scheme(archive: &Path) -> String {
    let o = Command::new(kpackfs()).arg("inspect").arg(archive).output().unwrap();
    assert!(o.status.success(), "inspect {}: {}", archive.display(), String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    text.split("scheme ").nth(1).and_then(|r| r.split_whitespace().next()).unwrap_or_else(|| panic!("no scheme in {text}")).to_string()
}

/// Every wrapper of `root/lib/name` resolves, with both loaders agreeing,
/// to clang-offload-bundler's object of test asset `asset` for `device`.
pub fn resolves_to(root: &Path, name: &str, asset: &str, device: &str) {
    let out = tempdir();
    let o = Command::new(kpackfs())
        .arg("resolve")
        .arg(root.join("lib").join(name))
        .args(["--arch", device, "--loader", "both", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "resolve {name} for {device}: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    for (i, bundle) in wrapper_bundles(asset).into_iter().enumerate() {
        let got = fs::read(out.path().join(format!("{i}.co"))).unwrap();
        let want = expected_object(asset, bundle, expected_arch(asset, device));
        assert!(got == want, "{name} wrapper {i} for {device}: code object differs from clang-offload-bundler's object of {asset}");
    }
}

/// [`resolves_to`] for a binary of [`source`], against the asset it was
/// made from.
pub fn resolves_exactly(root: &Path, name: &str, device: &str) {
    resolves_to(root, name, asset_of(name), device);
}

/// The files of `dir` whose names end in `suffix`, sorted (none if `dir`
/// is missing).
pub fn entries(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> =
        fs::read_dir(dir).map(|d| d.flatten().map(|e| e.path()).filter(|p| p.to_string_lossy().ends_with(suffix)).collect()).unwrap_or_default();
    v.sort();
    v
}

/// The archive of [`source`] most tests read: CCOB-sourced, so it is
/// compressed and kept in the cache directory.
pub const ARCHIVE: &str = "lib/.kpack/libtwo_ccob.so_gfx90a.kpack";

/// What [`ARCHIVE`] must hold: computed with no cache directory at all.
pub fn reference_archive(src: &Path) -> Vec<u8> {
    let b = bake(src, "gfx90a", &["--cache-dir", "none"]);
    fs::read(b.path().join("out").join(ARCHIVE)).unwrap()
}
