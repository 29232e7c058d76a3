//! `kpackfs inspect FILE`: what a file holds, for humans — wrappers,
//! bundles, targets, code-object sizes, marker, archive TOC.

use std::fmt::Write as _;
use std::fs::File;
use std::io;
use std::path::Path;

use crate::bundle::{self, Chunk};
use crate::elf::{ElfFile, FATBIN_SECTION, MARKER_SECTION, WRAPPER_SECTION};
use crate::host::{self, HostFormat};
use crate::io::{read_exact_at, read_vec_at, ReadAt};
use crate::kpack::{Archive, Scheme};
use crate::marker::{Marker, MAX_MARKER};
use crate::wrapper::{Wrapper, WrapperKind, WRAPPER_SIZE};

/// Describes the chunks (bundles) of a fat section `[start, end)`.
pub fn describe_fatbin(out: &mut String, src: &dyn ReadAt, start: u64, end: u64) {
    match bundle::scan_fatbin(src, start, end) {
        Err(e) => {
            let _ = writeln!(out, "  fat section unreadable: {e}");
        }
        Ok(chunks) => {
            let _ = writeln!(out, "  {} bundle(s):", chunks.len());
            for (i, c) in chunks.iter().enumerate() {
                match c {
                    Chunk::Plain { at, bundle } => {
                        let _ = writeln!(out, "   [{i}] offset {:#x}: uncompressed bundle, {} bytes", at - start, bundle.len);
                    }
                    Chunk::Compressed { at, len, header } => {
                        let _ = writeln!(
                            out,
                            "   [{i}] offset {:#x}: CCOB v{} {:?}, {len} bytes -> {} bytes",
                            at - start,
                            header.version,
                            header.method,
                            header.uncompressed_size
                        );
                    }
                }
                match bundle::chunk_objects(src, c, i) {
                    Ok(objs) => {
                        for o in objs {
                            let _ = writeln!(out, "       {:<28} {:>10} bytes  ({})", o.arch, o.location.len(), o.entry_id);
                        }
                    }
                    Err(e) => {
                        let _ = writeln!(out, "       entries unreadable: {e}");
                    }
                }
            }
        }
    }
}

fn inspect_elf(out: &mut String, f: &File) -> io::Result<()> {
    let elf = match ElfFile::parse(f) {
        Ok(e) => e,
        Err(e) => {
            let _ = writeln!(out, "ELF, not parseable: {e}");
            return Ok(());
        }
    };
    let _ = writeln!(out, "ELF64 e_type {} machine {}, {} bytes, {} program headers, {} sections", elf.eh.e_type, elf.eh.e_machine, elf.len, elf.eh.phnum, elf.eh.shnum);
    match elf.classify() {
        Ok(()) => {
            let _ = writeln!(out, "fat binary: would be transformed");
        }
        Err(e) => {
            let _ = writeln!(out, "not transformed: {e}");
        }
    }
    if let Some(i) = elf.find_section(WRAPPER_SECTION) {
        let s = elf.shdrs[i];
        let n = s.size / WRAPPER_SIZE;
        let _ = writeln!(out, "{WRAPPER_SECTION}: {n} wrapper(s) at {:#x}", s.addr);
        if s.offset.checked_add(s.size).is_some_and(|e| e <= elf.len) {
            let b = read_vec_at(f, s.offset, (n * WRAPPER_SIZE) as usize)?;
            for (k, w) in b.chunks_exact(24).filter_map(Wrapper::parse).enumerate().take(64) {
                let kind = match w.kind() {
                    WrapperKind::Fat => "HIPF".to_string(),
                    WrapperKind::Kpacked => "HIPK".to_string(),
                    WrapperKind::Other(m) => format!("{m:#010x}"),
                };
                let _ = writeln!(out, "  [{k}] {kind} version {} pointer {:#x} reserved1 {:#x}", w.version, w.binary, w.reserved1);
            }
            if n > 64 {
                let _ = writeln!(out, "  … {} more", n - 64);
            }
        }
    }
    if let Some(fb) = elf.fatbin() {
        let _ = writeln!(out, "{FATBIN_SECTION}: {} bytes at file offset {:#x} (type {})", fb.size, fb.offset, fb.sh_type);
        if fb.sh_type != 8 && fb.offset.checked_add(fb.size).is_some_and(|e| e <= elf.len) {
            describe_fatbin(out, f, fb.offset, fb.offset + fb.size);
        }
    }
    if let Some(i) = elf.find_section(MARKER_SECTION) {
        let s = elf.shdrs[i];
        let n = s.size.min(MAX_MARKER as u64);
        if s.offset.checked_add(n).is_some_and(|e| e <= elf.len) {
            let b = read_vec_at(f, s.offset, n as usize)?;
            match Marker::decode(&b) {
                Ok(m) => {
                    let _ = writeln!(out, "{MARKER_SECTION}: kernel_name {:?}, search paths {:?}", m.kernel_name, m.search_paths);
                }
                Err(e) => {
                    let _ = writeln!(out, "{MARKER_SECTION}: {e}");
                }
            }
        }
    }
    Ok(())
}

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
    match host::detect(&f) {
        Some(HostFormat::Elf) => inspect_elf(&mut out, &f)?,
        Some(HostFormat::Pe) => crate::coff::inspect(&mut out, &f)?,
        None if magic.starts_with(b"KPAK") => inspect_kpack(&mut out, &f),
        None if magic.starts_with(bundle::CCOB_MAGIC) || &magic == bundle::BUNDLE_MAGIC => {
            let _ = writeln!(out, "raw fat section / offload bundle, {len} bytes");
            describe_fatbin(&mut out, &f, 0, len);
        }
        None => {
            let _ = writeln!(out, "not a host binary, bundle or kpack archive ({len} bytes)");
        }
    }
    Ok(out)
}
