//! Packs `test_assets/demo-install/` into the library so that `kpackfs`
//! can serve the demo install without a checkout (see `src/demo.rs`).
//! Format: per entry, kind byte (`d`, `f`, `l`), u32 mode, u32 path length,
//! path, u64 data length, data (file bytes or link text); paths sorted.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

fn walk(root: &Path, rel: &Path, out: &mut Vec<(PathBuf, fs::Metadata)>) {
    let mut entries: Vec<_> = fs::read_dir(root.join(rel)).map(|r| r.filter_map(Result::ok).collect()).unwrap_or_default();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let r = rel.join(e.file_name());
        let Ok(m) = fs::symlink_metadata(e.path()) else { continue };
        let is_dir = m.is_dir();
        out.push((r.clone(), m));
        if is_dir {
            walk(root, &r, out);
        }
    }
}

fn main() {
    // The manifest directory as cargo passes it to this run, not as it was
    // when the script was compiled (`env!`): cargo reuses a compiled build
    // script for a checkout at another path (CI's clone shares target/),
    // and a baked-in path to a deleted clone packed an empty demo.
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from).expect("cargo sets CARGO_MANIFEST_DIR");
    let root = manifest.join("../test_assets/demo-install");
    println!("cargo:rerun-if-changed={}", root.display());
    assert!(root.join("lib").is_dir(), "{}: the demo install is missing", root.display());
    let mut items = Vec::new();
    walk(&root, Path::new(""), &mut items);
    let mut blob = Vec::new();
    for (rel, m) in items {
        #[cfg(unix)]
        let mode = std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777;
        #[cfg(not(unix))]
        let mode = if m.is_dir() { 0o755 } else { 0o644 };
        let (kind, data) = if m.file_type().is_symlink() {
            (b'l', fs::read_link(root.join(&rel)).map(|t| t.to_string_lossy().into_owned().into_bytes()).unwrap_or_default())
        } else if m.is_dir() {
            (b'd', Vec::new())
        } else {
            (b'f', fs::read(root.join(&rel)).unwrap_or_default())
        };
        let path = rel.to_string_lossy().replace('\\', "/");
        blob.push(kind);
        blob.extend_from_slice(&mode.to_le_bytes());
        blob.extend_from_slice(&(path.len() as u32).to_le_bytes());
        blob.extend_from_slice(path.as_bytes());
        blob.extend_from_slice(&(data.len() as u64).to_le_bytes());
        blob.extend_from_slice(&data);
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default()).join("demo-install.bin");
    let mut f = fs::File::create(out).expect("write demo-install.bin");
    f.write_all(&blob).expect("write demo-install.bin");
}
