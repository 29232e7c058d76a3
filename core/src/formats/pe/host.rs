//! PE's implementation of the host-binary interface
//! ([`HostFile`](crate::formats::traits::HostFile)).

use std::fmt::Write as _;
use std::io;

use crate::formats::bundle::describe_fatbin;
use crate::formats::traits::{HostError, HostFile, HostFormat, HostPlan, NotTransformed, RawWrapper};
use crate::io::{read_vec_at, ReadAt};

use super::{plan, PeError, PeFile, MARKER_SECTION};

/// The interface's error for a PE complaint (I/O kept apart).
fn format_err(e: PeError) -> HostError {
    match e {
        PeError::Io(e) => HostError::Io(e),
        PeError::NotPe | PeError::NotPe32Plus => HostError::NotHost,
        other => HostError::Format(Box::new(other)),
    }
}

/// Plain files are not logged; fat binaries we cannot transform are.
fn refusal(e: PeError) -> NotTransformed {
    match e {
        PeError::NotPe | PeError::NotPe32Plus | PeError::NotFat | PeError::AlreadyKpacked => NotTransformed::Plain,
        other => NotTransformed::refused(other),
    }
}

impl HostFile for PeFile {
    const FORMAT: HostFormat = HostFormat::Pe;

    fn parse_host(src: &dyn ReadAt) -> Result<Self, HostError> {
        PeFile::parse(src).map_err(format_err)
    }

    fn check_fat(&self) -> Result<(), HostError> {
        self.classify().map_err(format_err)
    }

    fn check_plan(&self) -> Result<(), NotTransformed> {
        self.classify().map_err(refusal)
    }

    fn fat_section(&self) -> Option<(u64, u64)> {
        self.fat_range()
    }

    /// Pointers at the preferred image base (the DIR64 base relocation
    /// moves wrapper and target together).
    fn raw_wrappers(&self, src: &dyn ReadAt) -> Result<Vec<RawWrapper>, HostError> {
        let ws = self.wrappers(src).map_err(|_| HostError::NoWrappers)?;
        Ok(ws
            .into_iter()
            .map(|(index, wrapper, _)| {
                let rva = wrapper.binary.wrapping_sub(self.image_base);
                RawWrapper { index, wrapper, pointer: Some(wrapper.binary), pointer_offset: self.rva_to_off(rva), mapped_len: self.mapped_after(rva) }
            })
            .collect())
    }

    fn plan_transform(&self, src: &dyn ReadAt, marker: &[u8]) -> Result<HostPlan, NotTransformed> {
        self.classify().map_err(refusal)?;
        plan(src, self, marker).map_err(refusal)
    }

    fn describe(&self, out: &mut String, src: &dyn ReadAt) -> io::Result<()> {
        let pe = self;
        let _ = writeln!(
            out,
            "PE32+ image base {:#x}, {} bytes, file/section alignment {:#x}/{:#x}, {} sections",
            pe.image_base,
            pe.len,
            pe.file_alignment,
            pe.section_alignment,
            pe.sections.len()
        );
        for s in &pe.sections {
            let _ = writeln!(
                out,
                "  {:<8} rva {:#08x} vsize {:#08x} raw {:#08x}+{:#08x} flags {:#010x}",
                s.name_str(),
                s.virtual_address,
                s.virtual_size,
                s.pointer_to_raw_data,
                s.size_of_raw_data,
                s.characteristics
            );
        }
        match pe.classify() {
            Ok(()) => {
                let _ = writeln!(out, "fat binary: would be transformed");
            }
            Err(e) => {
                let _ = writeln!(out, "not transformed: {e}");
            }
        }
        if let Ok(ws) = pe.wrappers(src) {
            let _ = writeln!(out, ".hipFatB: {} wrapper(s)", ws.len());
            for (i, w, _) in ws.iter().take(64) {
                let _ = writeln!(out, "  [{i}] {:?} pointer {:#x} reserved1 {:#x}", w.kind(), w.binary, w.reserved1);
            }
        }
        if let Some((off, size)) = pe.fat_range() {
            let _ = writeln!(out, ".hip_fat: {size} bytes at file offset {off:#x}");
            describe_fatbin(out, src, off, off + size);
        }
        if let Some((_, s)) = pe.section(MARKER_SECTION) {
            if s.size_of_raw_data > 0 {
                let b = read_vec_at(src, s.pointer_to_raw_data as u64, s.virtual_size.min(s.size_of_raw_data) as usize)?;
                match crate::formats::marker::Marker::decode(&b) {
                    Ok(m) => {
                        let _ = writeln!(out, ".kpackrf: kernel_name {:?}, search paths {:?}", m.kernel_name, m.search_paths);
                    }
                    Err(e) => {
                        let _ = writeln!(out, ".kpackrf: {e}");
                    }
                }
            }
        }
        Ok(())
    }
}
