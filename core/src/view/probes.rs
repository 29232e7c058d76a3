//! Which files of a directory are fat binaries, paid for once.
//!
//! A listing must know whether a directory holds fat binaries (it then
//! shows `.kpack`), and that takes a look at each file's headers: cold, a
//! disk read per file. So the answers are kept — per path in memory, and
//! per source directory in the cache directory, keyed by the directory's
//! identity and holding each file's identity (device, inode, size, mtime,
//! ctime) with its answer — so a remount or a second daemon opens only the
//! files that changed. Files too short to be fat binaries are never opened;
//! the rest of a directory is opened in batches whose first pages are
//! requested together, so the disk serves them in parallel, and a large
//! directory's batches run on several threads (see [`super::parallel`]).
//!
//! Records are written whole (see [`crate::data_cache::RecordStore`]).
//! Like the other cache entries, a record trusts a file's identity to stand
//! for its bytes (see [`super::cached`] for where it may not).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::sync::atomic::Ordering;

use crate::data_cache::Key;
use crate::formats::host::{self, Probe, MIN_FAT_SIZE};
use crate::io::ReadAt;
use crate::source::{SourceId, SourceStat, Time};

use super::lookup::Analysis;
use super::{parallel, View};

/// Bumped when a record's layout or meaning changes.
const RECORD_FORMAT: &[u8] = b"kpackfs-probes-1";
/// Files opened at once by one thread (their first pages requested
/// together); a listing runs up to [`parallel::THREADS`] such batches.
const BATCH: usize = 64;
/// Bytes of a file a probe reads first (the magic, and most headers).
const HEAD: u64 = 4096;

type Record = HashMap<OsString, (SourceId, Probe)>;

fn probe_code(p: Probe) -> u8 {
    match p {
        Probe::Plain => 0,
        Probe::Fat => 1,
        Probe::Refused => 2,
    }
}

fn encode(entries: &[(&OsStr, SourceId, Probe)]) -> Vec<u8> {
    let mut b = Vec::with_capacity(entries.len() * 72);
    for (name, id, p) in entries {
        let n = name.as_encoded_bytes();
        b.extend_from_slice(&(n.len() as u32).to_le_bytes());
        b.extend_from_slice(n);
        for v in [id.dev, id.ino, id.size, id.mtime.sec as u64, u64::from(id.mtime.nsec), id.ctime.sec as u64, u64::from(id.ctime.nsec)] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.push(probe_code(*p));
    }
    b
}

/// The record in `b`, or `None` if it does not parse (the entry's checksum
/// held, so only a bug or another version writes such a thing: ignored).
fn decode(mut b: &[u8]) -> Option<Record> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (h, t) = (b.get(..n)?, b.get(n..)?);
        *b = t;
        Some(h)
    }
    fn u64_of(b: &mut &[u8]) -> Option<u64> {
        Some(u64::from_le_bytes(take(b, 8)?.try_into().ok()?))
    }
    let mut r = Record::new();
    while !b.is_empty() {
        let n = u32::from_le_bytes(take(&mut b, 4)?.try_into().ok()?) as usize;
        let name = take(&mut b, n)?;
        let name = std::str::from_utf8(name).ok().map(OsString::from).or_else(|| os_from_bytes(name))?;
        let mut v = [0u64; 7];
        for x in &mut v {
            *x = u64_of(&mut b)?;
        }
        let time = |s: u64, ns: u64| Some(Time { sec: s as i64, nsec: u32::try_from(ns).ok()? });
        let id = SourceId { dev: v[0], ino: v[1], size: v[2], mtime: time(v[3], v[4])?, ctime: time(v[5], v[6])? };
        let p = match take(&mut b, 1)?[0] {
            0 => Probe::Plain,
            1 => Probe::Fat,
            2 => Probe::Refused,
            _ => return None,
        };
        r.insert(name, (id, p));
    }
    Some(r)
}

#[cfg(unix)]
fn os_from_bytes(b: &[u8]) -> Option<OsString> {
    Some(<OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b).to_os_string())
}

#[cfg(not(unix))]
fn os_from_bytes(_: &[u8]) -> Option<OsString> {
    None
}

impl View {
    fn probe_key(&self, rel: &Path, dir: &SourceStat) -> Key {
        let root = self.tree.root().as_os_str().as_encoded_bytes();
        let d = dir.id();
        let mut id = Vec::with_capacity(48);
        for v in [d.dev, d.ino, d.mtime.sec as u64, u64::from(d.mtime.nsec), d.ctime.sec as u64, u64::from(d.ctime.nsec)] {
            id.extend_from_slice(&v.to_le_bytes());
        }
        Key::of(&[RECORD_FORMAT, root, rel.as_os_str().as_encoded_bytes(), &id])
    }

    fn load_record(&self, key: &Key) -> Option<Record> {
        decode(&self.caches.probes.as_ref()?.get(key)?)
    }

    /// What is known, without opening it, about the file `rel` at version
    /// `st`: a probe or plan made for this very version, or its size.
    pub(super) fn known_probe(&self, rel: &Path, st: &SourceStat) -> Option<Probe> {
        if let Some(p) = self.plans.probe(st.id(), rel) {
            return Some(p);
        }
        if let Some(a) = self.plans.planned(st.id(), rel) {
            return Some(if matches!(a, Analysis::Fat(_)) { Probe::Fat } else { Probe::Plain });
        }
        (st.size < MIN_FAT_SIZE).then_some(Probe::Plain)
    }

    /// Probes `files[i]` for each `i` of `batch`: opened together, their
    /// first pages requested together, so the disk serves them in parallel.
    fn probe_batch(&self, rel: &Path, files: &[(OsString, SourceStat)], batch: &[usize]) -> Vec<(usize, Probe)> {
        let names: Vec<&OsStr> = batch.iter().map(|&i| files[i].0.as_os_str()).collect();
        let opened = match self.tree.open_many(rel, &names) {
            Ok(o) => o,
            Err(e) => {
                log::debug!("{}: probes failed ({e}); will retry", rel.display());
                return Vec::new();
            }
        };
        for (f, _) in opened.iter().flatten() {
            f.prefetch(0, HEAD);
        }
        let mut out = Vec::with_capacity(batch.len());
        for (&i, o) in batch.iter().zip(opened) {
            self.stats.probes_run.fetch_add(1, Ordering::Relaxed);
            let (name, st) = &files[i];
            match o {
                Ok((f, fst)) if fst.id() == st.id() => match host::probe_class(&f) {
                    Ok(p) => out.push((i, p)),
                    Err(e) => log::debug!("{}: probe failed ({e}); will retry", rel.join(name).display()),
                },
                // Changed since the listing's stat: its own event follows.
                Ok(_) => {}
                Err(e) => log::debug!("{}: probe failed ({e}); will retry", rel.join(name).display()),
            }
        }
        out
    }

    /// The fat binaries among `files` (regular files of directory `rel`,
    /// with their `lstat`; `dir` is the directory's), sorted as given.
    ///
    /// Only definite answers are kept: a file that could not be opened or
    /// read now (out of descriptors, an I/O error) counts as not fat and
    /// is asked again next time, so its `.kpack` directory never goes
    /// missing for good while the binary itself is served transformed.
    pub(super) fn fat_files(&self, rel: &Path, dir: &SourceStat, files: &[(OsString, SourceStat)]) -> Vec<OsString> {
        let key = self.caches.probes.as_ref().map(|_| self.probe_key(rel, dir));
        let record = key.as_ref().and_then(|k| self.load_record(k));
        let mut answers: Vec<Option<Probe>> = Vec::with_capacity(files.len());
        let mut todo = Vec::new();
        for (i, (name, st)) in files.iter().enumerate() {
            let known = self.known_probe(&rel.join(name), st).or_else(|| record.as_ref()?.get(name).filter(|r| r.0 == st.id()).map(|r| r.1));
            if known.is_none() {
                todo.push(i);
            }
            answers.push(known);
        }
        let found = parallel::chunked(todo.len(), BATCH, |r| self.probe_batch(rel, files, &todo[r]));
        for (i, p) in found.into_iter().filter_map(|(_, c)| c).flatten() {
            answers[i] = Some(p);
        }
        for ((name, st), a) in files.iter().zip(&answers) {
            if let Some(p) = a {
                self.plans.set_probe(st.id(), rel.join(name), *p);
            }
        }
        // The record is (re)written once every file has an answer and some
        // were not in it: new, or changed in place (which leaves the
        // directory's identity, and so the key, as it was).
        if let (Some(key), Some(store)) = (key, &self.caches.probes) {
            let stale = record.is_none() || !todo.is_empty();
            if stale && answers.iter().all(Option::is_some) {
                let entries: Vec<(&OsStr, SourceId, Probe)> =
                    files.iter().zip(&answers).filter_map(|((n, st), a)| Some((n.as_os_str(), st.id(), (*a)?))).collect();
                if let Err(e) = store.put(&key, &encode(&entries)) {
                    log::debug!("{}: probe record not kept: {e}", rel.display());
                }
            }
        }
        files.iter().zip(&answers).filter(|(_, a)| **a == Some(Probe::Fat)).map(|((n, _), _)| n.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_garbage_is_refused() {
        let id = SourceId { dev: 1, ino: 2, size: 3, mtime: Time { sec: -4, nsec: 5 }, ctime: Time { sec: 6, nsec: 999_999_999 } };
        let b = encode(&[(OsStr::new("a.so"), id, Probe::Fat), (OsStr::new("b"), id, Probe::Refused), (OsStr::new(""), id, Probe::Plain)]);
        let r = decode(&b).unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r[OsStr::new("a.so")], (id, Probe::Fat));
        assert_eq!(r[OsStr::new("b")], (id, Probe::Refused));
        assert_eq!(r[OsStr::new("")], (id, Probe::Plain));
        for cut in 1..b.len() {
            if let Some(r) = decode(&b[..cut]) {
                assert!(r.len() < 3, "a truncated record parsed whole at {cut}");
            }
        }
        let mut bad = b.clone();
        let last = bad.len() - 1;
        bad[last] = 9;
        assert!(decode(&bad).is_none());
    }
}
