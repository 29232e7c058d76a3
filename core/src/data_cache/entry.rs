//! The writer of a disk-cache entry being filled.

use std::fs::File;
use std::io::{self, Write};

/// Entries are written in aligned chunks of this size, so the page cache
/// holds them in large folios (a file written in small or unaligned pieces
/// is cached in small ones, and copying it out of the cache — every warm
/// read through kernel passthrough — is then a third slower).
const WRITE_CHUNK: usize = 1 << 20;

/// The sink of an entry being written: gathers writes into aligned chunks
/// and remembers the first write error, so that a full disk is told apart
/// from a failed computation (which sees only its own error).
pub(super) struct EntryWriter {
    pub(super) file: File,
    pub(super) error: Option<io::Error>,
    /// Bytes not yet written, which belong at `at`: they never cross a
    /// multiple of [`WRITE_CHUNK`].
    pending: Vec<u8>,
    at: u64,
}

impl EntryWriter {
    pub(super) fn new(file: File) -> EntryWriter {
        EntryWriter { file, error: None, pending: Vec::with_capacity(WRITE_CHUNK), at: 0 }
    }

    fn note<T>(&mut self, r: io::Result<T>) -> io::Result<T> {
        if let Err(e) = &r {
            if self.error.is_none() {
                self.error = Some(io::Error::new(e.kind(), e.to_string()));
            }
        }
        r
    }

    /// The first write error again, if there was one.
    fn failed(&self) -> io::Result<()> {
        match &self.error {
            Some(e) => Err(io::Error::new(e.kind(), e.to_string())),
            None => Ok(()),
        }
    }

    /// Writes the pending bytes. After a failure every later write fails
    /// too: an entry with a hole must never be completed.
    pub(super) fn drain(&mut self) -> io::Result<()> {
        self.failed()?;
        if self.pending.is_empty() {
            return Ok(());
        }
        let r = self.file.write_all(&self.pending);
        self.note(r)?;
        self.at += self.pending.len() as u64;
        self.pending.clear();
        Ok(())
    }
}

impl Write for EntryWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.failed()?;
        let end = self.at + self.pending.len() as u64;
        let room = WRITE_CHUNK - (end % WRITE_CHUNK as u64) as usize;
        let n = buf.len().min(room);
        self.pending.extend_from_slice(&buf[..n]);
        if n == room {
            self.drain()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.drain()?;
        let r = self.file.flush();
        self.note(r)
    }
}

impl io::Seek for EntryWriter {
    fn seek(&mut self, pos: io::SeekFrom) -> io::Result<u64> {
        self.drain()?;
        let r = self.file.seek(pos);
        let to = self.note(r)?;
        self.at = to;
        Ok(to)
    }
}

impl super::Sink for EntryWriter {
    /// The file, for copies made in the kernel, once the pending bytes are
    /// in it (`None` if they cannot be: the caller then writes through the
    /// sink, which fails).
    fn as_file(&mut self) -> Option<&File> {
        self.drain().ok()?;
        Some(&self.file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, SeekFrom};

    /// Writes reach the file only in whole aligned chunks (the file's
    /// length shows what was written), seeks and `as_file` write what is
    /// pending first, and the bytes end up where a plain file would have
    /// them.
    #[test]
    fn writes_reach_the_file_in_aligned_chunks() {
        let t = tempfile::tempfile().unwrap();
        let mut w = EntryWriter::new(t.try_clone().unwrap());
        let mut model = Vec::new();
        let len = || t.metadata().unwrap().len();
        let piece = |n: usize, b: u8| vec![b; n];
        w.write_all(&piece(1000, 1)).unwrap();
        model.extend(piece(1000, 1));
        assert_eq!(len(), 0);
        w.write_all(&piece(WRITE_CHUNK + 5, 2)).unwrap();
        model.extend(piece(WRITE_CHUNK + 5, 2));
        assert_eq!(len(), WRITE_CHUNK as u64);
        w.write_all(&piece(2 * WRITE_CHUNK, 3)).unwrap();
        model.extend(piece(2 * WRITE_CHUNK, 3));
        assert_eq!(len(), 3 * WRITE_CHUNK as u64);
        w.seek(SeekFrom::Start(10)).unwrap();
        assert_eq!(len(), model.len() as u64);
        w.write_all(b"patch").unwrap();
        model[10..15].copy_from_slice(b"patch");
        w.seek(SeekFrom::End(0)).unwrap();
        w.write_all(&piece(77, 4)).unwrap();
        model.extend(piece(77, 4));
        assert_eq!(len(), (3 * WRITE_CHUNK + 1005) as u64);
        // From an unaligned end, the next chunk ends on the boundary.
        w.write_all(&piece(WRITE_CHUNK, 5)).unwrap();
        model.extend(piece(WRITE_CHUNK, 5));
        assert_eq!(len(), 4 * WRITE_CHUNK as u64);
        let f = super::super::Sink::as_file(&mut w).unwrap();
        assert_eq!(f.metadata().unwrap().len(), model.len() as u64);
        let mut got = Vec::new();
        let mut r = t.try_clone().unwrap();
        r.seek(SeekFrom::Start(0)).unwrap();
        io::Read::read_to_end(&mut r, &mut got).unwrap();
        assert!(got == model, "bytes differ from the plain file's");
    }
}
