//! Positional reads over the things the engine parses: files (via `pread`,
//! never long-lived mmaps, so a source truncated under us yields an error
//! instead of SIGBUS) and in-memory buffers (tests, fuzzing, small blobs).

use std::fs::File;
use std::io;

/// A random-access byte source. Implementations must be safe to call from
/// several threads at once (positional reads carry no cursor).
pub trait ReadAt: Send + Sync {
    /// Reads up to `buf.len()` bytes at `offset`; returns the count read,
    /// 0 only at or past the end.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize>;

    /// Total length in bytes.
    fn size(&self) -> io::Result<u64>;

    /// Hints that `[offset, offset+len)` will be read soon, so scattered
    /// small reads (bundle headers across a 1.3 GB section) are fetched from
    /// disk in parallel instead of one seek at a time. Default: nothing.
    fn prefetch(&self, _offset: u64, _len: u64) {}
}

/// Fills `buf` completely from `offset` or fails with `UnexpectedEof`.
pub fn read_exact_at(src: &dyn ReadAt, mut offset: u64, mut buf: &mut [u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match src.read_at(offset, buf) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("short read at offset {offset}"))),
            Ok(n) => {
                offset += n as u64;
                buf = &mut buf[n..];
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Whether a read error may go away on retry (a failing disk, no
/// descriptors left) rather than describe the file: a read past the end
/// (`UnexpectedEof`) is the file's own shape, and answers stay cacheable.
pub fn is_transient(e: &io::Error) -> bool {
    e.kind() != io::ErrorKind::UnexpectedEof
}

/// Reads exactly `len` bytes at `offset` into a new vector. The caller must
/// have bounded `len` against the source size: this is the only place that
/// allocates from a length that came out of a header.
pub fn read_vec_at(src: &dyn ReadAt, offset: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut v = vec![0u8; len];
    read_exact_at(src, offset, &mut v)?;
    Ok(v)
}

impl ReadAt for [u8] {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let len = self.len() as u64;
        if offset >= len {
            return Ok(0);
        }
        let start = offset as usize;
        let n = buf.len().min(self.len() - start);
        buf[..n].copy_from_slice(&self[start..start + n]);
        Ok(n)
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.len() as u64)
    }
}

impl ReadAt for Vec<u8> {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.as_slice().read_at(offset, buf)
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.len() as u64)
    }
}

impl ReadAt for File {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        #[cfg(unix)]
        {
            std::os::unix::fs::FileExt::read_at(self, buf, offset)
        }
        #[cfg(windows)]
        {
            std::os::windows::fs::FileExt::seek_read(self, buf, offset)
        }
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }

    fn prefetch(&self, offset: u64, len: u64) {
        #[cfg(target_os = "linux")]
        {
            let _ = rustix::fs::fadvise(self, offset, std::num::NonZeroU64::new(len), rustix::fs::Advice::WillNeed);
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (offset, len);
    }
}

/// Little-endian field access on byte slices, bounds-checked: every caller
/// handles `None` as "truncated input" instead of panicking.
pub(crate) trait LeBytes {
    fn u16_at(&self, off: usize) -> Option<u16>;
    fn u32_at(&self, off: usize) -> Option<u32>;
    fn u64_at(&self, off: usize) -> Option<u64>;
}

impl LeBytes for [u8] {
    fn u16_at(&self, off: usize) -> Option<u16> {
        let b = self.get(off..off.checked_add(2)?)?;
        Some(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32_at(&self, off: usize) -> Option<u32> {
        let b = self.get(off..off.checked_add(4)?)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64_at(&self, off: usize) -> Option<u64> {
        let b = self.get(off..off.checked_add(8)?)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Some(u64::from_le_bytes(a))
    }
}
