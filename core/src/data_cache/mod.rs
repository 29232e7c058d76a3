//! Caches of work that is expensive to redo: decoded code objects and
//! synthesized files (compressed archives, local copies for kernel
//! passthrough).
//!
//! One interface, [`DataCache`], with two implementations: [`MemoryCache`]
//! (a byte-bounded LRU in the daemon's memory, gone at unmount) and
//! [`DiskCache`] (a bounded directory reused across remounts, reboots,
//! several daemons and `bake`). Callers ask for a value by [`Key`] and say
//! how to compute it; the cache computes it once, however many readers ask
//! at the same time.

mod dir;
mod disk;
mod entry;
mod memory;
mod meta;
mod records;

use std::fs::File;
use std::io::{self, Seek, Write};
use std::sync::Arc;

use md5::{Digest, Md5};
use thiserror::Error;

pub use dir::{default_dir, own_dir, OWN_SUBDIR, TAG_NAME};
pub use disk::{DiskCache, DiskCacheError, DiskStats};
pub use memory::{ByteLru, CacheStats};
pub use records::RecordStore;

/// The in-memory implementation: decoded values by key.
pub type MemoryCache = ByteLru<Key, CacheError>;

/// Identifies one cached value: a digest of everything its bytes depend
/// on (source identity, path, selection, format version…). Two values with
/// the same key are the same bytes, so a key can be shared by daemons and
/// survive reboots.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Key([u8; 16]);

impl Key {
    /// The key of `parts`, each length-prefixed so that `("ab","c")` and
    /// `("a","bc")` differ. MD5 is plenty: entries are private to the
    /// daemon's user, so no one chooses keys adversarially; the digest only
    /// has to spread.
    pub fn of(parts: &[&[u8]]) -> Key {
        let mut h = Md5::new();
        for p in parts {
            h.update((p.len() as u64).to_le_bytes());
            h.update(p);
        }
        Key(h.finalize().into())
    }

    pub fn bytes(&self) -> &[u8; 16] {
        &self.0
    }

    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Where a value is written while it is computed: memory, or the disk
/// cache's file (which writers may fill by in-kernel copies).
pub trait Sink: Write + Seek {
    fn as_file(&mut self) -> Option<&File> {
        None
    }
}

impl Sink for io::Cursor<Vec<u8>> {}

impl Sink for File {
    fn as_file(&mut self) -> Option<&File> {
        Some(self)
    }
}

/// Computes a value into a sink.
pub type Fill<'a> = dyn FnMut(&mut dyn Sink) -> Result<(), CacheError> + 'a;

#[derive(Debug, Error, Clone)]
pub enum CacheError {
    /// The value could not be computed (its source is unreadable, changed,
    /// or corrupt); the computation's own typed error.
    #[error("{0}")]
    Compute(Arc<dyn std::error::Error + Send + Sync>),
    #[error("cache I/O: {0}")]
    Io(Arc<io::Error>),
    /// The disk cache cannot take this value now (its lock is held too
    /// long, or writing failed: a full disk); the caller computes it
    /// without the disk cache.
    #[error("{0}")]
    Unavailable(String),
}

impl From<io::Error> for CacheError {
    fn from(e: io::Error) -> Self {
        CacheError::Io(Arc::new(e))
    }
}

impl CacheError {
    /// A computation's failure, keeping its typed error.
    pub fn compute(e: impl std::error::Error + Send + Sync + 'static) -> CacheError {
        CacheError::Compute(Arc::new(e))
    }

    /// The computation's error, if it is of type `E`.
    pub fn compute_error<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            CacheError::Compute(e) => e.downcast_ref::<E>(),
            _ => None,
        }
    }
}

/// A cached value: bytes in memory, or a complete file of the disk cache.
#[derive(Clone, Debug)]
pub enum Data {
    Memory(Arc<Vec<u8>>),
    File(Arc<EntryFile>),
}

/// An open, verified disk-cache entry. It stays readable through this
/// handle even if the entry is evicted meanwhile (unlinked, not truncated).
#[derive(Debug)]
pub struct EntryFile {
    pub file: File,
    pub len: u64,
}

impl Data {
    pub fn len(&self) -> u64 {
        match self {
            Data::Memory(v) => v.len() as u64,
            Data::File(f) => f.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads at `offset`; short only at the end.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Data::Memory(v) => crate::io::ReadAt::read_at(v.as_slice(), offset, buf),
            Data::File(f) => {
                let want = (f.len.saturating_sub(offset)).min(buf.len() as u64) as usize;
                crate::io::read_exact_at(&f.file, offset, &mut buf[..want])?;
                Ok(want)
            }
        }
    }

    /// The backing file, for kernel passthrough and in-kernel copies.
    pub fn file(&self) -> Option<&File> {
        match self {
            Data::Memory(_) => None,
            Data::File(f) => Some(&f.file),
        }
    }
}

/// One interface for both caches.
pub trait DataCache: Send + Sync {
    /// The value of `key` if it is cached (never computes).
    fn get(&self, key: &Key) -> Option<Data>;

    /// The value of `key`, computed by `fill` and stored if missing. Every
    /// concurrent caller for the same key waits for one computation; a
    /// failed computation is returned and not remembered.
    fn get_or_insert(&self, key: &Key, fill: &mut Fill<'_>) -> Result<Data, CacheError>;
}

impl DataCache for MemoryCache {
    fn get(&self, key: &Key) -> Option<Data> {
        self.peek(key).map(Data::Memory)
    }

    fn get_or_insert(&self, key: &Key, fill: &mut Fill<'_>) -> Result<Data, CacheError> {
        let v = self.get_or_load(key, || {
            let mut c = io::Cursor::new(Vec::new());
            fill(&mut c)?;
            Ok(Arc::new(c.into_inner()))
        });
        v.map(Data::Memory)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_length_prefixed() {
        assert_ne!(Key::of(&[b"ab", b"c"]), Key::of(&[b"a", b"bc"]));
        assert_eq!(Key::of(&[b"x"]), Key::of(&[b"x"]));
        assert_eq!(Key::of(&[b"x"]).hex().len(), 32);
    }

    #[test]
    fn memory_cache_computes_once_and_reads() {
        let c = MemoryCache::new(1 << 20);
        let k = Key::of(&[b"k"]);
        assert!(c.get(&k).is_none());
        let mut calls = 0;
        let d = c
            .get_or_insert(&k, &mut |s| {
                calls += 1;
                s.write_all(b"hello")?;
                Ok(())
            })
            .unwrap();
        assert_eq!(d.len(), 5);
        let d2 = c.get_or_insert(&k, &mut |_| panic!("computed twice")).unwrap();
        let mut b = [0u8; 8];
        assert_eq!(d2.read_at(1, &mut b).unwrap(), 4);
        assert_eq!(&b[..4], b"ello");
        assert_eq!(calls, 1);
        let e = c.get_or_insert(&Key::of(&[b"bad"]), &mut |_| Err(CacheError::compute(std::io::Error::other("boom"))));
        assert!(matches!(e, Err(CacheError::Compute(m)) if m.to_string() == "boom"));
    }
}
