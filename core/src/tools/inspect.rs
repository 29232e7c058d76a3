//! `kpackfs inspect FILE`: what a file holds, for humans — wrappers,
//! bundles, targets, code-object sizes, marker, archive TOC.

use std::fmt::Write as _;
use std::fs::File;
use std::io;
use std::path::Path;

use crate::formats::bundle;
use crate::formats::host;
use crate::formats::kpack::{Archive, Scheme};
use crate::io::read_exact_at;

fn inspect_kpack(out: &mut String, f: &File) {
    match Archive::open(f) {
        Err(e) => {
            let _ = writeln!(out, "kpack archive, unreadable: {e}");
        }
        Ok(a) => {
            let t = &a.toc;
            let _ = writeln!(out, "kpack archive v1, {} bytes, TOC at {:#x}", a.size, a.toc_offset);
            let _ = writeln!(out, "group {:?}, family {:?}, arches {:?}, scheme {}", t.group_name, t.gfx_arch_family, t.gfx_arches, t.scheme_name());
            if let Scheme::None { blobs } = &t.scheme {
                let _ = writeln!(out, "{} blob(s), {} bytes", blobs.len(), blobs.iter().map(|b| b.1).sum::<u64>());
            }
            for (key, archs) in &t.toc {
                for (arch, e) in archs {
                    let _ = writeln!(out, "  {key:<40} {arch:<24} ordinal {:<5} {} bytes", e.ordinal, e.original_size);
                }
            }
        }
    }
}

/// A text report about `path`.
pub fn inspect(path: &Path) -> io::Result<String> {
    let f = File::open(path)?;
    let mut out = String::new();
    let mut magic = [0u8; 24];
    let len = f.metadata()?.len();
    let n = (len as usize).min(24);
    read_exact_at(&f, 0, &mut magic[..n])?;
    if let Some(r) = host::describe(&mut out, &f) {
        r?;
        return Ok(out);
    }
    match () {
        _ if magic.starts_with(b"KPAK") => inspect_kpack(&mut out, &f),
        _ if magic.starts_with(bundle::CCOB_MAGIC) || &magic == bundle::BUNDLE_MAGIC => {
            let _ = writeln!(out, "raw fat section / offload bundle, {len} bytes");
            bundle::describe_fatbin(&mut out, &f, 0, len);
        }
        _ => {
            let _ = writeln!(out, "not a host binary, bundle or kpack archive ({len} bytes)");
        }
    }
    Ok(out)
}
