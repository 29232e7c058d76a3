//! Writing served content to local files: the path `bake` and the disk
//! cache share (both sit above it; it knows layouts and files only).
//!
//! Source extents go through `copy_file_range` (an in-kernel copy, no
//! user-space buffer), zeros become holes, and only synthesized bytes pass
//! through memory, 1 MiB at a time — so writing a 1.3 GB library for one
//! target costs a few megabytes.

use std::fs::{self, File};
use std::io;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::source::Time;

use crate::layout::{Layout, Piece};

/// Copies `len` bytes of `src` at `src_off` to `dst` at `dst_off` in the
/// kernel where possible.
#[cfg(target_os = "linux")]
pub fn copy_range(src: &File, mut src_off: u64, dst: &File, mut dst_off: u64, mut len: u64) -> io::Result<()> {
    while len > 0 {
        let chunk = len.min(1 << 30) as usize;
        match rustix::fs::copy_file_range(src, Some(&mut src_off), dst, Some(&mut dst_off), chunk) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "source shorter than planned")),
            Ok(n) => len -= n as u64,
            Err(e) if e == rustix::io::Errno::XDEV || e == rustix::io::Errno::NOSYS || e == rustix::io::Errno::INVAL || e == rustix::io::Errno::OPNOTSUPP => {
                return copy_range_buffered(src, src_off, dst, dst_off, len)
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
pub fn copy_range(src: &File, src_off: u64, dst: &File, dst_off: u64, len: u64) -> io::Result<()> {
    copy_range_buffered(src, src_off, dst, dst_off, len)
}

fn copy_range_buffered(src: &File, mut src_off: u64, dst: &File, mut dst_off: u64, mut len: u64) -> io::Result<()> {
    let mut buf = vec![0u8; (1 << 20).min(len as usize)];
    while len > 0 {
        let n = (buf.len() as u64).min(len) as usize;
        crate::io::read_exact_at(src, src_off, &mut buf[..n])?;
        write_all_at(dst, &buf[..n], dst_off)?;
        src_off += n as u64;
        dst_off += n as u64;
        len -= n as u64;
    }
    Ok(())
}

pub fn write_all_at(f: &File, mut buf: &[u8], mut off: u64) -> io::Result<()> {
    while !buf.is_empty() {
        #[cfg(unix)]
        let n = std::os::unix::fs::FileExt::write_at(f, buf, off)?;
        #[cfg(windows)]
        let n = std::os::windows::fs::FileExt::seek_write(f, buf, off)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "write returned 0"));
        }
        buf = &buf[n..];
        off += n as u64;
    }
    Ok(())
}

/// Reads the layout's own bytes at an offset into a buffer.
pub type ReadFn<'a, E> = dyn FnMut(u64, &mut [u8]) -> Result<usize, E> + 'a;

/// Writes `layout` to `dst` at offset 0: source extents copied from
/// `src`, holes for zeros, everything else through `read` (which serves
/// the layout's own bytes and may refuse with the caller's error).
pub fn write_layout<E: From<io::Error>>(layout: &Layout, src: &File, read: &mut ReadFn<'_, E>, dst: &File) -> Result<u64, E> {
    let mut buf = Vec::new();
    for e in layout.extents() {
        match &e.piece {
            Piece::Source { offset } => copy_range(src, *offset, dst, e.start, e.len)?,
            Piece::Zeros => {}
            _ => {
                let mut pos = e.start;
                let end = e.start + e.len;
                while pos < end {
                    let n = ((end - pos) as usize).min(1 << 20);
                    buf.resize(n, 0);
                    let got = read(pos, &mut buf)?;
                    if got != n {
                        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "short read of served content").into());
                    }
                    write_all_at(dst, &buf, pos)?;
                    pos += n as u64;
                }
            }
        }
    }
    dst.set_len(layout.len())?;
    Ok(layout.len())
}

// File attributes, shared by bake and the packager's split.

pub fn systime(t: Time) -> SystemTime {
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::new(t.sec as u64, t.nsec)
    } else {
        UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs())
    }
}

#[cfg(unix)]
pub fn set_perm(p: &Path, perm: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(p, fs::Permissions::from_mode(perm))
}

#[cfg(not(unix))]
pub fn set_perm(p: &Path, perm: u32) -> io::Result<()> {
    let mut perms = fs::metadata(p)?.permissions();
    perms.set_readonly(perm & 0o222 == 0);
    fs::set_permissions(p, perms)
}

/// Opens a directory so its times can be set (Windows needs backup
/// semantics and the right to write attributes for that).
#[cfg(windows)]
pub fn open_dir(p: &Path) -> io::Result<File> {
    use std::os::windows::fs::OpenOptionsExt;
    // FILE_WRITE_ATTRIBUTES; FILE_FLAG_BACKUP_SEMANTICS
    fs::OpenOptions::new().access_mode(0x0100).custom_flags(0x0200_0000).open(p)
}

#[cfg(not(windows))]
pub fn open_dir(p: &Path) -> io::Result<File> {
    File::open(p)
}

#[cfg(unix)]
pub fn set_link_times(p: &Path, a: Time, m: Time) -> io::Result<()> {
    use rustix::fs::{AtFlags, Timespec, Timestamps, CWD};
    let ts = |t: Time| Timespec { tv_sec: t.sec, tv_nsec: t.nsec as _ };
    rustix::fs::utimensat(CWD, p, &Timestamps { last_access: ts(a), last_modification: ts(m) }, AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(())
}

#[cfg(not(unix))]
pub fn set_link_times(_p: &Path, _a: Time, _m: Time) -> io::Result<()> {
    Ok(())
}
