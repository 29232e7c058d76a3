//! Writing a split: every file copy, transformed binary and code object is
//! a job, and jobs run on all cores.
//!
//! Memory stays bounded whatever the input's size: files and plain code
//! objects are copied by the kernel (`copy_file_range`) from source to
//! destination ranges; a compressed (CCOB) bundle is decoded once, by one
//! worker, and the objects of every target are cut from it; frames of
//! `zstd-per-kernel` archives go to a side file as they are made, and the
//! archive is assembled in ordinal order at the end, so the bytes do not
//! depend on which worker finished first.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::copy::{copy_range, write_all_at, write_layout};
use crate::formats::bundle::ccob::Uncached;
use crate::formats::bundle::{ccob, ObjectLocation};
use crate::formats::kpack::compress_frame;
use crate::io::read_vec_at;
use crate::plan::ZSTD_LEVEL;
use crate::source::{SourceStat, SourceTree};

use super::archives::PlannedArchive;
use super::scan::{Entry, EntryKind, FileClass};
use super::SplitError;

/// A file to write from an input entry.
pub struct FileJob {
    pub entry: usize,
    pub dest: PathBuf,
}

/// What one worker does.
enum Job<'a> {
    File(&'a FileJob),
    /// Objects cut from one source chunk (a plain range, or one CCOB) of
    /// one binary: (archive, ordinal, location).
    Objects {
        entry: usize,
        outs: ChunkOuts,
    },
}

/// Progress shared with the caller's display.
#[derive(Default)]
pub struct Progress {
    pub bytes_done: AtomicU64,
    pub bytes_total: AtomicU64,
    pub jobs_done: AtomicUsize,
    pub jobs_total: AtomicUsize,
}

/// An archive being written.
struct ArchiveOut {
    path: PathBuf,
    file: File,
    /// Scheme `none`: where each ordinal goes.
    positions: Vec<(u64, u64)>,
    /// Scheme `zstd-per-kernel`: the side file of frames.
    frames: Option<Mutex<Frames>>,
    frames_path: PathBuf,
}

/// Frames of one archive as they are made, in completion order.
struct Frames {
    file: File,
    len: u64,
    /// Where each ordinal's frame lies in `file`.
    at: Vec<Option<(u64, u64)>>,
}

/// Bytes of decoded bundles held at once, over all workers: the largest
/// real bundles decode to ~100 MB (librocsparse's), and two workers each
/// holding one would double the peak. A bundle larger than the budget
/// still decodes, alone.
const DECODE_BUDGET: u64 = 128 << 20;

#[derive(Default)]
struct DecodeBudget {
    used: Mutex<u64>,
    freed: std::sync::Condvar,
}

/// A share of the budget, returned on drop.
struct Held<'a>(&'a DecodeBudget, u64);

impl DecodeBudget {
    fn take(&self, n: u64) -> Held<'_> {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        while *used > 0 && *used + n > DECODE_BUDGET {
            used = self.freed.wait(used).unwrap_or_else(|p| p.into_inner());
        }
        *used += n;
        Held(self, n)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut used = self.0.used.lock().unwrap_or_else(|p| p.into_inner());
        *used -= self.1;
        self.0.freed.notify_all();
    }
}

/// Objects cut from one source chunk: (archive, ordinal, location).
type ChunkOuts = Vec<(usize, u64, ObjectLocation)>;

fn open_new(p: &Path) -> Result<File, SplitError> {
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).map_err(|e| SplitError::io(d, e))?;
    }
    OpenOptions::new().read(true).write(true).create_new(true).open(p).map_err(|e| SplitError::io(p, e))
}

/// Writes all `files` and `archives` (at `archive_paths`) with `jobs`
/// workers. `trees` are the input's prefixes.
#[allow(clippy::too_many_arguments)]
pub fn run(
    trees: &[SourceTree],
    entries: &[Entry],
    files: &[FileJob],
    archives: &[PlannedArchive],
    archive_paths: &[PathBuf],
    scratch: &Path,
    jobs: usize,
    progress: &Progress,
) -> Result<(), SplitError> {
    // Open the archives; `none` ones get their header and TOC now.
    let mut outs = Vec::new();
    for (i, (a, path)) in archives.iter().zip(archive_paths).enumerate() {
        let file = open_new(path)?;
        let frames_path = scratch.join(format!("{i}.frames"));
        if a.compressed {
            let frames = open_new(&frames_path)?;
            let frames = Frames { file: frames, len: 0, at: vec![None; a.spec.blobs.len()] };
            outs.push(ArchiveOut { path: path.clone(), file, positions: Vec::new(), frames: Some(Mutex::new(frames)), frames_path });
        } else {
            let (head, positions, toc) = a.spec.none_parts();
            let toc_at = u64::from_le_bytes(head[8..16].try_into().unwrap_or_default());
            write_all_at(&file, &head, 0).map_err(|e| SplitError::io(path, e))?;
            write_all_at(&file, &toc, toc_at).map_err(|e| SplitError::io(path, e))?;
            outs.push(ArchiveOut { path: path.clone(), file, positions, frames: None, frames_path });
        }
    }
    // Group each binary's objects by the chunk they come from, so a CCOB
    // is decoded once for all targets.
    let mut chunks: BTreeMap<(usize, u64), ChunkOuts> = BTreeMap::new();
    for (ai, a) in archives.iter().enumerate() {
        for (ord, (entry, loc)) in a.sources.iter().enumerate() {
            let at = match loc {
                ObjectLocation::Range { offset, .. } => *offset,
                ObjectLocation::InCcob { ccob_at, .. } => *ccob_at,
            };
            chunks.entry((*entry, at)).or_default().push((ai, ord as u64, loc.clone()));
        }
    }
    let mut work: Vec<Job> = files.iter().map(Job::File).collect();
    work.extend(chunks.into_iter().map(|((entry, _), outs)| Job::Objects { entry, outs }));
    // Big jobs first, so the last minutes are not one worker alone.
    let size = |j: &Job| -> u64 {
        match j {
            Job::File(f) => entries[f.entry].stat.size,
            Job::Objects { outs, .. } => outs.iter().map(|(_, _, l)| l.len()).sum(),
        }
    };
    work.sort_by_key(|j| std::cmp::Reverse(size(j)));
    progress.bytes_total.fetch_add(work.iter().map(size).sum(), Ordering::Relaxed);
    progress.jobs_total.fetch_add(work.len(), Ordering::Relaxed);

    let next = AtomicUsize::new(0);
    let budget = DecodeBudget::default();
    let failed = AtomicBool::new(false);
    let errors: Mutex<Vec<SplitError>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs.max(1) {
            s.spawn(|| loop {
                if failed.load(Ordering::Relaxed) {
                    break;
                }
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some(job) = work.get(k) else { break };
                let r = match job {
                    Job::File(f) => write_file(trees, &entries[f.entry], &f.dest),
                    Job::Objects { entry, outs: list } => write_objects(trees, &entries[*entry], list, &outs, &budget),
                };
                match r {
                    Ok(()) => {
                        progress.bytes_done.fetch_add(size(job), Ordering::Relaxed);
                        progress.jobs_done.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        failed.store(true, Ordering::Relaxed);
                        errors.lock().unwrap_or_else(|p| p.into_inner()).push(e);
                    }
                }
            });
        }
    });
    if let Some(e) = errors.into_inner().unwrap_or_else(|p| p.into_inner()).into_iter().next() {
        return Err(e);
    }
    for (a, o) in archives.iter().zip(outs) {
        if let Some(frames) = o.frames {
            assemble_zstd(a, &o.file, &o.path, frames.into_inner().unwrap_or_else(|p| p.into_inner()))?;
            let _ = std::fs::remove_file(&o.frames_path);
        }
    }
    Ok(())
}

/// Opens an entry's source, checking it is still the version scanned.
fn open_source(trees: &[SourceTree], e: &Entry) -> Result<(File, PathBuf), SplitError> {
    let tree = &trees[e.prefix];
    let path = tree.root().join(&e.rel);
    let (f, st): (File, SourceStat) = tree.open_file(&e.rel).map_err(|err| SplitError::io(&path, err))?;
    if st.id() != e.stat.id() {
        return Err(SplitError::Changed(path));
    }
    Ok((f, path))
}

fn write_file(trees: &[SourceTree], e: &Entry, dest: &Path) -> Result<(), SplitError> {
    let (src, path) = open_source(trees, e)?;
    let dst = open_new(dest)?;
    let werr = |err| SplitError::io(dest, err);
    match &e.kind {
        EntryKind::File(FileClass::Fat(fb, _)) => {
            let layout = &fb.plan.layout;
            let mut read = |off: u64, buf: &mut [u8]| -> std::io::Result<usize> {
                layout.read_at(off, buf, &src, &Uncached).map_err(|err| std::io::Error::other(err.to_string()))
            };
            write_layout(layout, &src, &mut read, &dst).map_err(|err| SplitError::io(&path, err))?;
        }
        _ => {
            copy_range(&src, 0, &dst, 0, e.stat.size).map_err(|err| SplitError::io(&path, err))?;
            dst.set_len(e.stat.size).map_err(werr)?;
        }
    }
    let times = std::fs::FileTimes::new().set_accessed(crate::copy::systime(e.stat.atime)).set_modified(crate::copy::systime(e.stat.mtime));
    dst.set_times(times).map_err(werr)?;
    drop(dst);
    crate::copy::set_perm(dest, e.stat.perm).map_err(werr)
}

fn write_objects(trees: &[SourceTree], e: &Entry, list: &[(usize, u64, ObjectLocation)], outs: &[ArchiveOut], budget: &DecodeBudget) -> Result<(), SplitError> {
    let (src, path) = open_source(trees, e)?;
    let rerr = |err: std::io::Error| SplitError::io(&path, err);
    // A CCOB: decoded once, every target's objects cut from it.
    let mut _held = None;
    let decoded = match list.first().map(|(_, _, l)| l) {
        Some(ObjectLocation::InCcob { ccob_at, ccob_len, header, .. }) => {
            _held = Some(budget.take(header.uncompressed_size));
            Some(
                ccob::decode_range(&src, *ccob_at, *ccob_len, header, 0, header.uncompressed_size)
                    .map_err(|err| SplitError::Bundle(path.clone(), err.to_string()))?,
            )
        }
        _ => None,
    };
    for (ai, ord, loc) in list {
        let out = &outs[*ai];
        // Cut from the decoded bundle without a copy; a plain object to
        // compress is read once.
        let bytes: Option<std::borrow::Cow<[u8]>> = match (loc, &decoded) {
            (ObjectLocation::InCcob { offset, len, .. }, Some(d)) => {
                let r = usize::try_from(*offset).ok().zip(usize::try_from(offset + len).ok()).and_then(|(a, b)| d.get(a..b));
                Some(r.ok_or_else(|| SplitError::Bundle(path.clone(), "object outside its decoded bundle".into()))?.into())
            }
            (ObjectLocation::Range { offset, len }, _) if out.frames.is_some() => Some(read_vec_at(&src, *offset, *len as usize).map_err(rerr)?.into()),
            (ObjectLocation::Range { offset, len }, _) => {
                let (pos, n) = out.positions[*ord as usize];
                debug_assert_eq!(n, *len);
                copy_range(&src, *offset, &out.file, pos, *len).map_err(rerr)?;
                None
            }
            (ObjectLocation::InCcob { .. }, None) => return Err(SplitError::Internal("CCOB object grouped with a plain one".into())),
        };
        let Some(bytes) = bytes else { continue };
        match &out.frames {
            Some(frames) => {
                let frame = compress_frame(&bytes, ZSTD_LEVEL).map_err(|err| SplitError::Archive(out.path.clone(), err.to_string()))?;
                let mut g = frames.lock().unwrap_or_else(|p| p.into_inner());
                let at = g.len;
                write_all_at(&g.file, &frame, at).map_err(|err| SplitError::io(&out.frames_path, err))?;
                g.len += frame.len() as u64;
                g.at[*ord as usize] = Some((at, frame.len() as u64));
            }
            None => {
                let (pos, _) = out.positions[*ord as usize];
                write_all_at(&out.file, &bytes, pos).map_err(|err| SplitError::io(&out.path, err))?;
            }
        }
    }
    Ok(())
}

/// Header, frame count, each frame with its length in ordinal order, TOC.
fn assemble_zstd(a: &PlannedArchive, file: &File, path: &Path, frames: Frames) -> Result<(), SplitError> {
    let (side, at) = (frames.file, frames.at);
    let werr = |err| SplitError::io(path, err);
    let mut lens = Vec::with_capacity(at.len());
    for (i, f) in at.iter().enumerate() {
        let (_, n) = f.ok_or_else(|| SplitError::Internal(format!("{}: no frame for ordinal {i}", path.display())))?;
        if n > u64::from(u32::MAX) {
            return Err(SplitError::Archive(path.to_path_buf(), "zstd frame over 4 GiB".into()));
        }
        lens.push(n);
    }
    let count = u32::try_from(lens.len()).map_err(|_| SplitError::Archive(path.to_path_buf(), "too many code objects".into()))?;
    let (head, toc) = a.spec.zstd_parts(&lens);
    write_all_at(file, &head, 0).map_err(werr)?;
    write_all_at(file, &count.to_le_bytes(), 64).map_err(werr)?;
    let mut pos = 68u64;
    for f in at.iter().flatten() {
        write_all_at(file, &(f.1 as u32).to_le_bytes(), pos).map_err(werr)?;
        copy_range(&side, f.0, file, pos + 4, f.1).map_err(werr)?;
        pos += 4 + f.1;
    }
    if pos - 64 > u64::from(u32::MAX) {
        return Err(SplitError::Archive(path.to_path_buf(), "zstd region over 4 GiB".into()));
    }
    write_all_at(file, &toc, pos).map_err(werr)?;
    file.set_len(pos + toc.len() as u64).map_err(werr)
}
