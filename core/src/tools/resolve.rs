//! `kpackfs resolve`: do what the runtime loader does for a kpack'd binary
//! (FORMATS.md §6, both loader generations), without a GPU.
//!
//! For every HIPK wrapper: follow its relocated pointer to the marker as
//! `ld.so` would set it, take `co_index` from `reserved1`, expand the
//! marker's search paths from the binary's real directory (what
//! `/proc/self/maps` would report), open the candidate archives and pick
//! the TOC entry. This is an independent reading of the *output* files — it
//! shares no state with the planner that produced them.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::{Component, Path, PathBuf};

use thiserror::Error;

use crate::formats::bundle;
use crate::formats::host::{self, HostError, RawWrapper};
use crate::formats::kpack::{Archive, KpackError};
use crate::formats::marker::{Marker, MAX_MARKER};
use crate::formats::target::{compatible_targets, device_arch_list, TargetId};
use crate::formats::wrapper::WrapperKind;
use crate::io::{read_vec_at, ReadAt};

/// Which loader's selection rule to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoaderGen {
    /// ROCm/rocm-kpack e348328: the first archive whose `gfx_arches`
    /// lists a compatible target is used, and its answer is final (B9).
    Feb2026,
    /// rocm-systems `shared/kpack`: on failure, try the next candidate.
    Newest,
}

/// The loader's error codes (FORMATS.md §6.1) that resolution can end in.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LoadError {
    #[error("INVALID_METADATA: {0}")]
    InvalidMetadata(String),
    #[error("ARCHIVE_NOT_FOUND")]
    ArchiveNotFound,
    #[error("ARCH_NOT_FOUND")]
    ArchNotFound,
    #[error("KERNEL_NOT_FOUND: {0}")]
    KernelNotFound(String),
    #[error("DECOMPRESSION_FAILED: {0}")]
    Decompression(String),
    #[error("IO_ERROR: {0}")]
    Io(String),
}

#[derive(Debug, Error)]
pub enum ResolveError {
    #[error("{0}: {1}")]
    Io(PathBuf, io::Error),
    /// The binary's headers are corrupt or unsupported.
    #[error("{0}: {1}")]
    Host(PathBuf, String),
    #[error("{0}: not a HIP binary (no wrapper section)")]
    NoWrappers(PathBuf),
    #[error("{0}: unsupported binary format")]
    Format(PathBuf),
}

/// Where one wrapper's code object came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Archive path, or `None` for a fat (HIPF) wrapper served from its bundle.
    pub archive: Option<PathBuf>,
    pub key: String,
    pub arch: String,
    pub bytes: Vec<u8>,
}

#[derive(Debug, Clone)]
pub struct WrapperResolution {
    pub index: u32,
    pub kind: WrapperKind,
    pub co_index: u32,
    pub result: Result<Resolved, LoadError>,
}

/// Environment the runtime honours (`ROCM_KPACK_PATH`, `…_PREFIX`).
#[derive(Debug, Clone, Default)]
pub struct LoaderEnv {
    pub path: Vec<PathBuf>,
    pub prefix: Vec<PathBuf>,
}

impl LoaderEnv {
    pub fn from_env() -> LoaderEnv {
        let sep = if cfg!(windows) { ';' } else { ':' };
        let list = |k: &str| -> Vec<PathBuf> { std::env::var(k).unwrap_or_default().split(sep).filter(|s| !s.is_empty()).map(PathBuf::from).collect() };
        LoaderEnv { path: list("ROCM_KPACK_PATH"), prefix: list("ROCM_KPACK_PATH_PREFIX") }
    }
}

/// `weakly_canonical`: canonicalize the longest existing prefix, then
/// append the rest with `.`/`..` removed lexically.
fn weakly_canonical(p: &Path) -> PathBuf {
    let comps: Vec<Component> = p.components().collect();
    for split in (0..=comps.len()).rev() {
        let head: PathBuf = comps[..split].iter().collect();
        if let Ok(mut c) = head.canonicalize() {
            push_lexically(&mut c, comps[split..].iter().copied());
            return c;
        }
    }
    p.to_path_buf()
}

/// Appends `comps` to `base` without touching the file system: `.` is
/// dropped, `..` removes the last component. The one lexical rule for
/// [`weakly_canonical`]'s tail and `doctor`'s RECORD paths.
pub(crate) fn push_lexically<'a>(base: &mut PathBuf, comps: impl IntoIterator<Item = Component<'a>>) {
    for comp in comps {
        match comp {
            Component::ParentDir => {
                base.pop();
            }
            Component::CurDir => {}
            other => base.push(other.as_os_str()),
        }
    }
}

/// The ordered candidate archive paths for one marker.
pub fn candidates(marker: &Marker, binary_dir: &Path, arch_list: &[TargetId], env: &LoaderEnv) -> Vec<PathBuf> {
    if !env.path.is_empty() {
        return env.path.clone();
    }
    let mut out = env.prefix.clone();
    for sp in &marker.search_paths {
        let p = Path::new(sp);
        let joined = if p.is_absolute() { p.to_path_buf() } else { binary_dir.join(p) };
        let resolved = weakly_canonical(&joined);
        let s = resolved.to_string_lossy();
        if s.contains("@GFXARCH@") {
            for a in arch_list {
                for t in compatible_targets(&a.to_string()) {
                    out.push(PathBuf::from(s.replacen("@GFXARCH@", &t, 1)));
                }
            }
        } else {
            out.push(resolved);
        }
    }
    out
}

struct OpenArchive {
    path: PathBuf,
    file: File,
    archive: Archive,
}

/// Opens every usable candidate once (missing or unreadable ones are
/// skipped, as the runtime does).
fn open_candidates(paths: &[PathBuf], cache: &mut HashMap<PathBuf, Option<std::rc::Rc<OpenArchive>>>) -> Vec<std::rc::Rc<OpenArchive>> {
    let mut out: Vec<std::rc::Rc<OpenArchive>> = Vec::new();
    for p in paths {
        let canon = p.canonicalize().unwrap_or_else(|_| p.clone());
        let entry = cache.entry(canon.clone()).or_insert_with(|| {
            let meta = std::fs::metadata(&canon).ok()?;
            if !meta.is_file() {
                return None;
            }
            let file = File::open(&canon).ok()?;
            let archive = Archive::open(&file).ok()?;
            Some(std::rc::Rc::new(OpenArchive { path: p.clone(), file, archive }))
        });
        if let Some(a) = entry {
            if !out.iter().any(|o| std::rc::Rc::ptr_eq(o, a)) {
                out.push(a.clone());
            }
        }
    }
    out
}

fn load_error(e: KpackError) -> LoadError {
    match e {
        KpackError::KernelNotFound { key, arch } => LoadError::KernelNotFound(format!("{key} / {arch}")),
        KpackError::Decompress(s) => LoadError::Decompression(s),
        other => LoadError::Io(other.to_string()),
    }
}

/// Selects and loads the code object for (`key`, `arch_list`) the way
/// loader generation `gen` does.
fn select(archives: &[std::rc::Rc<OpenArchive>], key: &str, arch_list: &[TargetId], gen: LoaderGen) -> Result<Resolved, LoadError> {
    if archives.is_empty() {
        return Err(LoadError::ArchiveNotFound);
    }
    let mut last: Option<LoadError> = None;
    for a in arch_list {
        for t in compatible_targets(&a.to_string()) {
            for arc in archives.iter().filter(|o| o.archive.toc.has_arch(&t)) {
                match arc.archive.get_kernel(&arc.file, key, &t) {
                    Ok(bytes) => return Ok(Resolved { archive: Some(arc.path.clone()), key: key.to_string(), arch: t, bytes }),
                    Err(e) if gen == LoaderGen::Feb2026 => return Err(load_error(e)),
                    Err(e) => {
                        let e = load_error(e);
                        let fall_through = matches!(e, LoadError::KernelNotFound(_));
                        last = Some(e.clone());
                        if !fall_through {
                            return Err(e);
                        }
                    }
                }
            }
        }
    }
    Err(last.unwrap_or(LoadError::ArchNotFound))
}

/// Resolves every wrapper of `binary` for a device whose ISA is `isa`.
pub fn resolve(binary: &Path, isa: &TargetId, gen: LoaderGen, env: &LoaderEnv) -> Result<Vec<WrapperResolution>, ResolveError> {
    let mut out = Vec::new();
    resolve_each(binary, isa, gen, env, &mut |w| out.push(w))?;
    Ok(out)
}

/// `binary` opened, its wrappers, and the directory the runtime resolves its
/// markers' search paths from: that of the binary's real path (symlinks
/// resolved, as the runtime finds it through `/proc/self/maps`).
fn open_wrappers(binary: &Path) -> Result<(File, Vec<RawWrapper>, PathBuf), ResolveError> {
    let io_err = |e| ResolveError::Io(binary.to_path_buf(), e);
    let real = binary.canonicalize().map_err(io_err)?;
    let file = File::open(&real).map_err(io_err)?;
    let wrappers = host::wrappers(&file).map_err(|e| match e {
        HostError::NotHost => ResolveError::Format(binary.to_path_buf()),
        HostError::NoWrappers => ResolveError::NoWrappers(binary.to_path_buf()),
        HostError::Io(e) => ResolveError::Io(binary.to_path_buf(), e),
        HostError::Format(m) => ResolveError::Host(binary.to_path_buf(), m.to_string()),
    })?;
    let dir = real.parent().unwrap_or(Path::new("/")).to_path_buf();
    Ok((file, wrappers, dir))
}

/// The marker a kpacked wrapper points at: at most [`MAX_MARKER`] bytes of
/// its mapped range, decoded. One reader for resolving and for the paths
/// `doctor` and `carried` report, so they never disagree on which markers
/// can be read; the error is the one [`resolve_each`] reports.
fn read_marker(file: &File, w: &RawWrapper) -> Result<Marker, LoadError> {
    let off = w.pointer_offset.ok_or_else(|| LoadError::InvalidMetadata(format!("pointer {:#x?} is not mapped from the file", w.pointer)))?;
    let n = w.mapped_len.min(MAX_MARKER as u64) as usize;
    let bytes = read_vec_at(file, off, n).map_err(|e| LoadError::Io(e.to_string()))?;
    Marker::decode(&bytes).map_err(|e| LoadError::InvalidMetadata(e.to_string()))
}

/// [`resolve`], handing each wrapper's resolution to `each` as it is made,
/// in wrapper order: a caller that checks and drops each code object (as
/// `verify` does) holds one at a time, not the whole library's.
pub fn resolve_each(binary: &Path, isa: &TargetId, gen: LoaderGen, env: &LoaderEnv, each: &mut dyn FnMut(WrapperResolution)) -> Result<(), ResolveError> {
    let (file, wrappers, dir) = open_wrappers(binary)?;
    let arch_list = device_arch_list(isa);
    let mut cache = HashMap::new();
    for w in wrappers {
        let co_index = w.wrapper.co_index();
        let result = match w.wrapper.kind() {
            WrapperKind::Kpacked => (|| {
                let marker = read_marker(&file, &w)?;
                let key = format!("{}#{}", marker.kernel_name, co_index);
                let paths = candidates(&marker, &dir, &arch_list, env);
                let archives = open_candidates(&paths, &mut cache);
                select(&archives, &key, &arch_list, gen)
            })(),
            WrapperKind::Fat => fat_choice(&file, &w, isa),
            WrapperKind::Other(m) => Err(LoadError::InvalidMetadata(format!("wrapper magic {m:#010x}"))),
        };
        each(WrapperResolution { index: w.index, kind: w.wrapper.kind(), co_index, result });
    }
    Ok(())
}

/// The archive paths the markers of `binary` send the loader to for a
/// device of `isa`, in the order it tries them, each once: what `doctor`
/// names when an archive is missing. Markers that cannot be read are left
/// out (their wrappers fail with `INVALID_METADATA` in [`resolve_each`]).
pub fn search_paths(binary: &Path, isa: &TargetId, env: &LoaderEnv) -> Result<Vec<PathBuf>, ResolveError> {
    let (file, wrappers, dir) = open_wrappers(binary)?;
    let arch_list = device_arch_list(isa);
    let mut out: Vec<PathBuf> = Vec::new();
    for w in wrappers.iter().filter(|w| w.wrapper.kind() == WrapperKind::Kpacked) {
        let Ok(marker) = read_marker(&file, w) else { continue };
        for p in candidates(&marker, &dir, &arch_list, env) {
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    Ok(out)
}

/// What the fat runtime picks from a HIPF wrapper's own bundle for a
/// device of `isa`: native, generic, then SPIR-V (`arch` = `amdgcnspirv`,
/// the object it would JIT-compile).
fn fat_choice(src: &dyn ReadAt, w: &RawWrapper, isa: &TargetId) -> Result<Resolved, LoadError> {
    let off = w.pointer_offset.ok_or_else(|| LoadError::InvalidMetadata("fat pointer not mapped".into()))?;
    let chunk = bundle::parse_chunk(src, off, off + w.mapped_len).map_err(|e| LoadError::Io(e.to_string()))?;
    let objs = bundle::chunk_objects(src, &chunk, w.index as usize).map_err(|e| LoadError::Io(e.to_string()))?;
    let o = crate::plan::best_for(&objs, isa).ok_or(LoadError::ArchNotFound)?;
    let bytes = bundle::read_object(src, &o.location).map_err(|e| LoadError::Decompression(e.to_string()))?;
    Ok(Resolved { archive: None, key: o.entry_id.clone(), arch: o.arch.clone(), bytes })
}

/// What a binary's wrappers can reach: the targets its fat bundles or its
/// markers' archives carry, and the archive paths the markers name (with
/// `@GFXARCH@` left in), for messages when a device gets nothing.
#[derive(Debug, Default)]
pub struct Carried {
    pub targets: std::collections::BTreeSet<String>,
    pub searched: Vec<PathBuf>,
}

/// [`Carried`] for `binary`, found the way [`resolve_each`] looks: the
/// markers' search paths from the binary's real directory (or the
/// `ROCM_KPACK_PATH…` variables), every archive whose name fits the
/// `@GFXARCH@` pattern, and the fat wrappers' bundles.
pub fn carried(binary: &Path, env: &LoaderEnv) -> Result<Carried, ResolveError> {
    let (file, wrappers, dir) = open_wrappers(binary)?;
    let mut out = Carried::default();
    let add_archive = |p: &Path, out: &mut Carried| {
        if let Ok(a) = File::open(p).and_then(|f| Archive::open(&f).map_err(io::Error::other)) {
            out.targets.extend(a.toc.gfx_arches.iter().cloned());
        }
    };
    for w in wrappers {
        match w.wrapper.kind() {
            WrapperKind::Kpacked => {
                let Ok(marker) = read_marker(&file, &w) else { continue };
                // The pattern itself: `candidates` with a placeholder target.
                let patterns = candidates(&marker, &dir, &[], env);
                let templated = marker.search_paths.iter().filter(|_| env.path.is_empty()).map(|sp| {
                    let p = Path::new(sp);
                    weakly_canonical(&if p.is_absolute() { p.to_path_buf() } else { dir.join(p) })
                });
                for p in patterns.into_iter().chain(templated) {
                    if out.searched.contains(&p) {
                        continue;
                    }
                    let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                    match name.split_once("@GFXARCH@") {
                        Some((pre, post)) => {
                            let parent = p.parent().unwrap_or(Path::new("/"));
                            for e in std::fs::read_dir(parent).into_iter().flatten().flatten() {
                                let n = e.file_name().to_string_lossy().into_owned();
                                if n.len() > pre.len() + post.len() && n.starts_with(pre) && n.ends_with(post) {
                                    add_archive(&e.path(), &mut out);
                                }
                            }
                        }
                        None => add_archive(&p, &mut out),
                    }
                    out.searched.push(p);
                }
            }
            WrapperKind::Fat => {
                let Some(off) = w.pointer_offset else { continue };
                let objs = bundle::parse_chunk(&file, off, off + w.mapped_len).and_then(|c| bundle::chunk_objects(&file, &c, w.index as usize));
                out.targets.extend(objs.into_iter().flatten().map(|o| o.arch));
            }
            WrapperKind::Other(_) => {}
        }
    }
    Ok(out)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    /// The existing part is resolved through its symlink; the missing rest
    /// has `.` dropped and `..` taken lexically, as the loader's
    /// `weakly_canonical` does.
    #[test]
    fn weakly_canonical_resolves_the_existing_head_and_the_rest_lexically() {
        let t = tempfile::tempdir().unwrap();
        let real = t.path().canonicalize().unwrap().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, t.path().join("link")).unwrap();
        let got = weakly_canonical(&t.path().join("link/missing/../a/./b.kpack"));
        assert_eq!(got, real.join("a/b.kpack"));
        assert_eq!(weakly_canonical(&t.path().join("link/x/y/../../..")), real.parent().unwrap());
    }
}
