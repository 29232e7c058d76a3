//! Small records in the cache directory: facts about source files that are
//! cheap to keep and costly to learn again (which files are fat binaries),
//! read and written whole.
//!
//! Unlike [`super::DiskCache`] entries (large values computed once under a
//! lock, served by the kernel), a record is a few kilobytes that any daemon
//! may write at any time: each is written under a temporary name and
//! renamed into place, so readers see an old record, a new one, or none;
//! two daemons writing the same record write the same facts. A record
//! carries its own length and CRC-32: a torn or damaged one is ignored
//! (and so rewritten). Records live in their own subdirectory of the cache
//! directory, bounded apart from the entries, so they never take the
//! entries' room, counters or locks.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::dir::{create_private, open_private};
use super::Key;

const MAGIC: &[u8; 8] = b"KPFSREC1";
const HEADER: usize = 8 + 8 + 4;
const TMP_PREFIX: &str = "tmp.";
/// Largest record read (a directory of ~500,000 files).
const MAX_RECORD: u64 = 64 << 20;

/// A directory of records.
#[derive(Debug)]
pub struct RecordStore {
    dir: PathBuf,
}

impl RecordStore {
    /// The store in subdirectory `name` of `cache_dir` (kpackfs's own,
    /// private cache directory), created if missing. Records beyond
    /// `limit` bytes in all are removed, least recently written first;
    /// temporary files of writers that died are removed.
    pub fn open(cache_dir: &Path, name: &str, limit: u64) -> io::Result<RecordStore> {
        let dir = cache_dir.join(name);
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        // Only a real directory (the parent is private: nobody else can
        // have put anything else there, but a symlink is never followed).
        if !fs::symlink_metadata(&dir)?.is_dir() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{} is not a directory", dir.display())));
        }
        let s = RecordStore { dir };
        s.prune(limit);
        Ok(s)
    }

    fn path(&self, key: &Key) -> PathBuf {
        self.dir.join(format!("{}.rec", key.hex()))
    }

    /// The record of `key`, if present and intact.
    pub fn get(&self, key: &Key) -> Option<Vec<u8>> {
        let mut f = open_private(&self.path(key), false).ok()??;
        let mut head = [0u8; HEADER];
        f.read_exact(&mut head).ok()?;
        if &head[..8] != MAGIC {
            return None;
        }
        let len = u64::from_le_bytes(head[8..16].try_into().ok()?);
        let crc = u32::from_le_bytes(head[16..20].try_into().ok()?);
        if len > MAX_RECORD {
            return None;
        }
        let mut body = Vec::with_capacity(len as usize);
        f.take(len + 1).read_to_end(&mut body).ok()?;
        (body.len() as u64 == len && crc32fast::hash(&body) == crc).then_some(body)
    }

    /// Writes the record of `key` (replacing any).
    pub fn put(&self, key: &Key, body: &[u8]) -> io::Result<()> {
        let tmp = self.dir.join(format!("{TMP_PREFIX}{}.{}", std::process::id(), key.hex()));
        let r = (|| {
            let mut f: File = create_private(&tmp)?;
            f.write_all(MAGIC)?;
            f.write_all(&(body.len() as u64).to_le_bytes())?;
            f.write_all(&crc32fast::hash(body).to_le_bytes())?;
            f.write_all(body)?;
            fs::rename(&tmp, self.path(key))
        })();
        if r.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        r
    }

    /// Removes stale temporary files, and the oldest records while there
    /// are more than `limit` bytes of them.
    fn prune(&self, limit: u64) {
        let Ok(rd) = fs::read_dir(&self.dir) else { return };
        let mut recs = Vec::new();
        let mut total = 0u64;
        let old = SystemTime::now() - Duration::from_secs(600);
        for e in rd.flatten() {
            let Ok(md) = e.metadata() else { continue };
            let name = e.file_name();
            let name = name.to_string_lossy();
            let mtime = md.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            if name.starts_with(TMP_PREFIX) {
                if mtime < old {
                    let _ = fs::remove_file(e.path());
                }
            } else if name.ends_with(".rec") && md.is_file() {
                total += md.len();
                recs.push((mtime, md.len(), e.path()));
            }
        }
        if total <= limit {
            return;
        }
        recs.sort();
        for (_, len, p) in recs {
            if total <= limit / 2 {
                break;
            }
            if fs::remove_file(&p).is_ok() {
                total -= len;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_damage_is_ignored_and_the_store_is_bounded() {
        let d = tempfile::tempdir().unwrap();
        let s = RecordStore::open(d.path(), "r", 1 << 20).unwrap();
        let k = Key::of(&[b"a"]);
        assert!(s.get(&k).is_none());
        s.put(&k, b"hello").unwrap();
        assert_eq!(s.get(&k).as_deref(), Some(&b"hello"[..]));
        s.put(&k, b"again").unwrap();
        assert_eq!(s.get(&k).as_deref(), Some(&b"again"[..]));
        // A flipped byte or a cut record is not served.
        let p = s.path(&k);
        let mut raw = fs::read(&p).unwrap();
        let last = raw.len() - 1;
        raw[last] ^= 1;
        fs::write(&p, &raw).unwrap();
        assert!(s.get(&k).is_none());
        fs::write(&p, &raw[..raw.len() - 2]).unwrap();
        assert!(s.get(&k).is_none());
        // Over the bound at the next open: the oldest go first.
        for i in 0..10u8 {
            s.put(&Key::of(&[&[i]]), &[i; 100]).unwrap();
        }
        let s = RecordStore::open(d.path(), "r", 600).unwrap();
        let left = fs::read_dir(&s.dir).unwrap().count();
        assert!(left <= 4, "{left} records left of 11");
    }
}
