//! Rewrites a fat binary with every uncompressed offload bundle replaced,
//! in place, by its CCOB-compressed form (zero-padded to the original
//! extent). Section layout and wrapper pointers stay valid, so the result
//! is what a compressed (`--offload-compress`) build would load as — the
//! way to get CCOB test data and benchmark inputs from Debian's libraries,
//! whose toolchain predates bundle compression.

use std::fs::{self, OpenOptions};
use std::io;
use std::path::Path;

use crate::formats::bundle::{self, ccob, CcobMethod, Chunk};
use crate::io::read_vec_at;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RecompressReport {
    pub bundles: u64,
    pub compressed: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

/// Copies `input` to `output`, compressing the bundles of its fat section.
pub fn recompress(input: &Path, output: &Path, version: u16, method: CcobMethod, level: i32) -> io::Result<RecompressReport> {
    let src = fs::File::open(input)?;
    let (off, size) = match crate::formats::host::Host::open(&src) {
        Ok(h) => h.fat_section().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("no {} device-code section with file bytes", h.format())))?,
        Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
    };
    let chunks = bundle::scan_fatbin(&src, off, off + size).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
    fs::copy(input, output)?;
    let out = OpenOptions::new().write(true).open(output)?;
    let mut report = RecompressReport::default();
    for c in chunks {
        report.bundles += 1;
        let Chunk::Plain { at, bundle } = c else { continue };
        let raw = read_vec_at(&src, at, bundle.len as usize)?;
        let packed = ccob::encode(&raw, version, method, level)?;
        report.bytes_before += raw.len() as u64;
        if packed.len() >= raw.len() {
            report.bytes_after += raw.len() as u64;
            continue;
        }
        let mut region = packed;
        report.bytes_after += region.len() as u64;
        region.resize(raw.len(), 0);
        write_all_at(&out, &region, at)?;
        report.compressed += 1;
    }
    Ok(report)
}

fn write_all_at(f: &fs::File, buf: &[u8], off: u64) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::write_all_at(f, buf, off)
    }
    #[cfg(windows)]
    {
        let mut done = 0;
        while done < buf.len() {
            done += std::os::windows::fs::FileExt::seek_write(f, &buf[done..], off + done as u64)?;
        }
        Ok(())
    }
}
