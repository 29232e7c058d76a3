//! The demo install (`test_assets/demo-install/`), compiled into the
//! binary so `kpackfs` serves it when no source is given, even outside a
//! checkout. It is unpacked once per content version into a cache
//! directory and served read-only from there.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

static DEMO: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/demo-install.bin"));

/// An entry of the packed tree.
struct Item<'a> {
    kind: u8,
    mode: u32,
    path: &'a str,
    data: &'a [u8],
}

fn items() -> Vec<Item<'static>> {
    let mut out = Vec::new();
    let mut b = DEMO;
    while b.len() >= 9 {
        let kind = b[0];
        let mode = u32::from_le_bytes([b[1], b[2], b[3], b[4]]);
        let plen = u32::from_le_bytes([b[5], b[6], b[7], b[8]]) as usize;
        let Some(path) = b.get(9..9 + plen).and_then(|p| std::str::from_utf8(p).ok()) else { break };
        let rest = &b[9 + plen..];
        let Some(dlen) = rest.get(..8).map(|d| u64::from_le_bytes(d.try_into().unwrap_or_default()) as usize) else { break };
        let Some(data) = rest.get(8..8 + dlen) else { break };
        out.push(Item { kind, mode, path, data });
        b = &rest[8 + dlen..];
    }
    out
}

fn content_tag() -> String {
    // FNV-1a of the packed bytes: a new build with a changed demo unpacks anew.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in DEMO {
        h = (h ^ x as u64).wrapping_mul(0x100_0000_01b3);
    }
    format!("{h:016x}")
}

fn unpack(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    for it in items() {
        let p = dir.join(it.path);
        match it.kind {
            b'd' => fs::create_dir_all(&p)?,
            b'f' => fs::write(&p, it.data)?,
            #[cfg(unix)]
            b'l' => std::os::unix::fs::symlink(String::from_utf8_lossy(it.data).as_ref(), &p)?,
            _ => continue,
        }
        #[cfg(unix)]
        if it.kind != b'l' {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&p, fs::Permissions::from_mode(it.mode))?;
        }
        #[cfg(not(unix))]
        let _ = it.mode;
    }
    Ok(())
}

/// Path of the unpacked demo install (unpacking it on first use).
pub fn demo_install() -> io::Result<PathBuf> {
    // Windows: %LOCALAPPDATA%\kpackfs (symlinks of the demo are left out
    // there: creating them needs Developer Mode).
    #[cfg(windows)]
    let cache = std::env::var_os("LOCALAPPDATA").map(PathBuf::from);
    #[cfg(not(windows))]
    let cache = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")));
    let base = cache.unwrap_or_else(std::env::temp_dir).join("kpackfs");
    let dir = base.join(format!("demo-install-{}", content_tag()));
    if dir.is_dir() {
        return Ok(dir);
    }
    fs::create_dir_all(&base)?;
    // Unpack beside and rename, so concurrent first runs never see half a tree.
    let tmp = base.join(format!(".demo-{}-{}", std::process::id(), content_tag()));
    let _ = fs::remove_dir_all(&tmp);
    unpack(&tmp)?;
    match fs::rename(&tmp, &dir) {
        Ok(()) => Ok(dir),
        Err(_) if dir.is_dir() => {
            let _ = fs::remove_dir_all(&tmp);
            Ok(dir)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn packed_tree_is_complete() {
        let items = super::items();
        let paths: Vec<&str> = items.iter().map(|i| i.path).collect();
        assert!(paths.contains(&"lib/libdemo.so.1.0"), "{paths:?}");
        let link = items.iter().find(|i| i.path == "lib/libdemo.so").unwrap();
        assert_eq!((link.kind, link.data), (b'l', b"libdemo.so.1".as_slice()));
        let total: usize = items.iter().map(|i| 9 + i.path.len() + 8 + i.data.len()).sum();
        assert_eq!(total, super::DEMO.len());
    }
}
