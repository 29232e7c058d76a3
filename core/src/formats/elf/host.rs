//! ELF's implementation of the host-binary interface
//! ([`HostFile`](crate::formats::traits::HostFile)).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io;

use crate::formats::bundle::describe_fatbin;
use crate::formats::marker::{Marker, MAX_MARKER};
use crate::formats::traits::{HostError, HostFile, HostFormat, HostPlan, NotTransformed, RawWrapper, WrapperRef};
use crate::formats::wrapper::{Wrapper, WrapperKind, WRAPPER_SIZE};
use crate::io::{read_exact_at, read_vec_at, ReadAt};

use super::{plan, relocs, ElfError, ElfFile, ET_DYN, FATBIN_SECTION, MARKER_SECTION, WRAPPER_SECTION};

/// The interface's error for an ELF complaint (I/O kept apart).
fn format_err(e: ElfError) -> HostError {
    match e {
        ElfError::Io(e) => HostError::Io(e),
        ElfError::NotElf | ElfError::NotLoadable(_) => HostError::NotHost,
        other => HostError::Format(Box::new(other)),
    }
}

/// Plain files are not logged; fat binaries we cannot transform are.
fn refusal(e: ElfError) -> NotTransformed {
    match e {
        ElfError::NotElf | ElfError::NotLoadable(_) | ElfError::NotFat | ElfError::AlreadyKpacked => NotTransformed::Plain,
        other => NotTransformed::refused(other),
    }
}

impl HostFile for ElfFile {
    const FORMAT: HostFormat = HostFormat::Elf;

    fn parse_host(src: &dyn ReadAt) -> Result<Self, HostError> {
        ElfFile::parse(src).map_err(format_err)
    }

    fn check_fat(&self) -> Result<(), HostError> {
        self.classify().map_err(format_err)
    }

    fn check_plan(&self) -> Result<(), NotTransformed> {
        self.classify().map_err(refusal)
    }

    fn fat_section(&self) -> Option<(u64, u64)> {
        let s = self.fatbin().copied()?;
        (s.sh_type != 8 && s.offset.checked_add(s.size)? <= self.len).then_some((s.offset, s.size))
    }

    /// Addresses map through the first PT_LOAD containing them, as the
    /// loader maps segments.
    fn raw_wrappers(&self, src: &dyn ReadAt) -> Result<Vec<RawWrapper>, HostError> {
        let elf = self;
        let seg = elf.find_section(WRAPPER_SECTION).map(|i| elf.shdrs[i]).ok_or(HostError::NoWrappers)?;
        let n = seg.size / WRAPPER_SIZE;

        // What ld.so writes into each slot of a PIE/DSO: a RELATIVE addend, or
        // symbol + addend for `R_X86_64_64` (RDC builds); RELR/REL slots keep
        // their in-place value.
        let mut relocated: HashMap<u64, u64> = HashMap::new();
        if elf.eh.e_type == ET_DYN {
            let secs = relocs::rela_sections(src, elf).map_err(format_err)?;
            for sec in &secs {
                for r in &sec.entries {
                    if relocated.contains_key(&r.offset) {
                        continue;
                    }
                    let v = match r.r_type() {
                        8 => Some(r.addend as u64),
                        1 => relocs::symbol_target(src, elf, sec.link, r.r_sym(), r.addend).map_err(format_err)?,
                        _ => None,
                    };
                    if let Some(v) = v {
                        relocated.insert(r.offset, v);
                    }
                }
            }
        }
        let map = |addr: u64| -> Option<(u64, u64)> {
            // The loader maps PT_LOAD segments; the first one containing addr.
            let p = elf.phdrs.iter().find(|p| p.is_load() && p.contains_vaddr(addr))?;
            let d = addr - p.vaddr;
            (d < p.filesz).then(|| (p.offset + d, p.filesz - d))
        };
        let mut out = Vec::new();
        for i in 0..n.min(1 << 20) {
            let va = seg.addr + WRAPPER_SIZE * i;
            let Some((off, _)) = map(va) else { continue };
            let mut b = [0u8; 24];
            read_exact_at(src, off, &mut b)?;
            let Some(w) = Wrapper::parse(&b) else { continue };
            let pointer = Some(relocated.get(&(va + 8)).copied().unwrap_or(w.binary));
            let (pointer_offset, mapped_len) = match pointer.and_then(map) {
                Some((o, l)) => (Some(o), l),
                None => (None, 0),
            };
            out.push(RawWrapper { index: i as u32, wrapper: w, pointer, pointer_offset, mapped_len });
        }
        Ok(out)
    }

    fn plan_transform(&self, src: &dyn ReadAt, marker: &[u8]) -> Result<HostPlan, NotTransformed> {
        self.classify().map_err(refusal)?;
        let p = plan(src, self, marker).map_err(refusal)?;
        Ok(HostPlan {
            format: HostFormat::Elf,
            wrappers: p
                .wrappers
                .iter()
                .map(|w| WrapperRef { index: w.index, fatbin_offset: w.fatbin_offset(&p.fatbin), already_kpacked: w.already_kpacked })
                .collect(),
            fat_offset: p.fatbin.offset,
            fat_size: p.fatbin.size,
            deviations: p.deviations.iter().map(|d| format!("{d:?}")).collect(),
            layout: p.layout,
        })
    }

    fn describe(&self, out: &mut String, src: &dyn ReadAt) -> io::Result<()> {
        let elf = self;
        let f = src;
        let _ = writeln!(
            out,
            "ELF64 e_type {} machine {}, {} bytes, {} program headers, {} sections",
            elf.eh.e_type, elf.eh.e_machine, elf.len, elf.eh.phnum, elf.eh.shnum
        );
        if let Some((old, actual)) = elf.old_kernel_phdr_mismatch() {
            let _ = writeln!(
                out,
                "program headers: mapped at {actual:#x}, but kernels before Linux 5.18 pass {old:#x} to ld.so: this executable will not start there"
            );
        }
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
}
