//! `kpackfs doctor`: "why does my GPU get no code?" For every HIP host
//! binary under a prefix (an install, a site-packages, a kpackfs mount, a
//! baked tree) it resolves every wrapper for each device the way the newest
//! runtime does ([`crate::tools::resolve`], `LoaderGen::Newest`: every matching
//! archive most specific first, falling through on a missing kernel; the
//! device's generic family; `ROCM_KPACK_PATH`/`ROCM_KPACK_PATH_PREFIX`; the
//! library's real path) and says, per binary and device, what is wrong:
//! which archive is missing (and which Python extra would bring it), which
//! kernel is in none of the archives, which archives are present but
//! empty, which markers cannot be read; fat binaries get what they carry.
//!
//! Platform-independent: it reads files only, and returns a typed
//! [`DoctorReport`] that the command line prints (text or JSON).

mod python;
mod report;

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::formats::kpack::{Archive, ArchiveName};
use crate::formats::target::TargetId;
use crate::formats::wrapper::WrapperKind;
use crate::tools::resolve::{self, LoadError, LoaderEnv, LoaderGen, ResolveError};

pub use python::{Distribution, Installed, Provider};

#[derive(Debug, Error)]
pub enum DoctorError {
    /// PREFIX cannot be read (missing, unreadable): a usage error.
    #[error("{0}: {1}")]
    Prefix(PathBuf, std::io::Error),
}

/// One GPU to check for: its name as given, and the device ISAs it may
/// stand for (a bare processor stands for whichever of its feature
/// variants the GPU reports; a full target ID for itself).
#[derive(Debug, Clone)]
pub struct Device {
    pub name: TargetId,
    pub variants: Vec<TargetId>,
}

/// What to check: the devices and the loader's environment.
#[derive(Debug, Clone)]
pub struct DoctorConfig {
    pub devices: Vec<Device>,
    pub env: LoaderEnv,
}

/// How bad a finding is: a problem means the device gets no code (or the
/// wrong file); a warning works with the newest runtime but is fragile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Warning,
    Problem,
}

/// An archive path and what is there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Candidate {
    Missing,
    /// Exists but is not an archive the loader can open.
    Unusable(String),
    /// An archive listing these targets, holding `entries` code objects.
    Archive {
        arches: Vec<String>,
        entries: usize,
    },
}

/// One thing wrong for one binary on one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// No archive exists at any path the markers lead to.
    ArchiveMissing {
        wrappers: Vec<u32>,
        looked_for: Vec<PathBuf>,
        /// Search directories that do not exist at all (a marker pointing
        /// nowhere, a `.kpack/` that was never installed).
        missing_dirs: Vec<PathBuf>,
        /// Targets the binary's archives (found by the marker's pattern)
        /// do carry.
        carried: Vec<String>,
        provider: Option<Provider>,
        /// What `ROCM_KPACK_PATH`/`…_PREFIX` did to the search, if set.
        env_note: Option<String>,
    },
    /// Archives are there, but none lists a target this device accepts.
    NoArchiveForDevice { wrappers: Vec<u32>, archives: Vec<(PathBuf, Vec<String>)>, provider: Option<Provider> },
    /// The archives for the device lack these kernels (key per wrapper).
    KernelMissing { kernels: Vec<(u32, String)>, archives: Vec<PathBuf> },
    /// A wrapper's marker cannot be read.
    BadMarker { wrappers: Vec<u32>, message: String },
    /// A code object exists but cannot be read or decoded.
    Unreadable { wrapper: u32, message: String },
    /// Fat wrappers without a code object for the device.
    FatNoCode { wrappers: Vec<u32>, carries: Vec<String> },
    /// Fat wrappers without a native or generic code object for the
    /// device, but with a SPIR-V one (`amdgcnspirv`), which the HIP runtime
    /// compiles for the GPU when it loads it: works, with a slower start.
    SpirvOnly { wrappers: Vec<u32> },
    /// An archive the loader opens for this device holds no code object.
    EmptyArchive { path: PathBuf },
    /// A candidate path holds a file the loader skips (not an archive).
    UnusableArchive { path: PathBuf, message: String },
    /// The newest runtime resolves every wrapper, an older one (ROCm/rocm-kpack
    /// e348328, no fall-through) does not: an overlay archive that lacks
    /// kernels its `gfx_arches` claim.
    OlderRuntimeFails { wrappers: Vec<u32>, error: String },
}

impl Finding {
    pub fn severity(&self) -> Severity {
        match self {
            Finding::EmptyArchive { .. } | Finding::UnusableArchive { .. } | Finding::OlderRuntimeFails { .. } | Finding::SpirvOnly { .. } => Severity::Warning,
            _ => Severity::Problem,
        }
    }
}

/// One binary on one device.
#[derive(Debug, Clone)]
pub struct DeviceReport {
    /// The device as given.
    pub device: TargetId,
    /// The device ISA resolved for (a feature variant of a bare processor).
    pub isa: TargetId,
    /// Wrappers that resolved.
    pub resolved: usize,
    /// Archives the code objects came from.
    pub archives: Vec<PathBuf>,
    pub findings: Vec<Finding>,
}

impl DeviceReport {
    pub fn worst(&self) -> Option<Severity> {
        self.findings.iter().map(Finding::severity).max()
    }
}

/// One HIP host binary.
#[derive(Debug, Clone)]
pub struct BinaryReport {
    /// As found under the prefix.
    pub path: PathBuf,
    /// Where the runtime resolves its markers from (symlinks resolved).
    pub real: PathBuf,
    pub kpacked: usize,
    pub fat: usize,
    /// Targets its fat bundles or its archives carry.
    pub carries: Vec<String>,
    pub devices: Vec<DeviceReport>,
    /// The binary could not be read as a host binary.
    pub error: Option<String>,
}

impl BinaryReport {
    pub fn worst(&self) -> Option<Severity> {
        if self.error.is_some() {
            return Some(Severity::Problem);
        }
        self.devices.iter().filter_map(DeviceReport::worst).max()
    }
}

#[derive(Debug, Clone)]
pub struct DoctorReport {
    pub prefix: PathBuf,
    pub devices: Vec<TargetId>,
    pub binaries: Vec<BinaryReport>,
    /// Whether `*.dist-info` were found (a Python environment).
    pub python: bool,
}

impl DoctorReport {
    /// True when no binary has a problem and at least one was checked.
    pub fn ok(&self) -> bool {
        !self.binaries.is_empty() && self.binaries.iter().all(|b| b.worst() != Some(Severity::Problem))
    }

    /// Every target the binaries carry.
    pub fn carried(&self) -> BTreeSet<String> {
        self.binaries.iter().flat_map(|b| b.carries.iter().cloned()).collect()
    }
}

/// The files to look at: every regular file under `root` outside `.kpack/`
/// directories, and symlinks whose target lies outside `root` (a library
/// linked in from another install: the runtime resolves its markers from
/// there). Sorted, as found (not canonicalised).
fn files(root: &Path) -> Vec<PathBuf> {
    // Kernel file systems hold no binaries, and some of their files block
    // a reader (`/proc/kmsg`): not entered from a prefix above them.
    let pseudo = |p: &Path| ["/proc", "/sys", "/dev"].iter().any(|k| p == Path::new(k) && !root.starts_with(k));
    // No host binary is this small; a zero-sized /proc-like file is skipped unread.
    let big_enough = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.len() >= 64);
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            log::debug!("{}: not readable, skipped", dir.display());
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() && e.file_name() != crate::view::KPACK_DIR && !pseudo(&p) => stack.push(p),
                Ok(t) if t.is_file() && big_enough(&p) => out.push(p),
                Ok(t) if t.is_symlink() && std::fs::canonicalize(&p).is_ok_and(|real| !real.starts_with(root) && real.is_file()) => out.push(p),
                _ => {}
            }
        }
    }
    out.sort();
    out
}

/// The site directories around `prefix`: those under it holding
/// `*.dist-info`, and `prefix`'s own ancestors that do (doctor run on
/// `site-packages/torch`).
fn python_sites(prefix: &Path, files: &[PathBuf]) -> Installed {
    let mut sites: BTreeSet<PathBuf> = BTreeSet::new();
    for f in files {
        if f.file_name().is_some_and(|n| n == "METADATA") {
            if let Some(site) = f.parent().filter(|d| d.extension().is_some_and(|x| x == "dist-info")).and_then(Path::parent) {
                sites.insert(site.to_path_buf());
            }
        }
    }
    for a in prefix.ancestors().take(4) {
        let has = std::fs::read_dir(a).into_iter().flatten().flatten().any(|e| e.file_name().to_string_lossy().ends_with(".dist-info"));
        if has {
            sites.insert(a.to_path_buf());
        }
    }
    let mut installed = Installed::default();
    for s in &sites {
        installed.add_site(s);
    }
    installed
}

/// Runs the doctor over `prefix` (a directory, or one binary).
pub fn doctor(prefix: &Path, cfg: &DoctorConfig) -> Result<DoctorReport, DoctorError> {
    let prefix = std::fs::canonicalize(prefix).map_err(|e| DoctorError::Prefix(prefix.to_path_buf(), e))?;
    let md = std::fs::metadata(&prefix).map_err(|e| DoctorError::Prefix(prefix.clone(), e))?;
    let list = if md.is_dir() {
        std::fs::read_dir(&prefix).map_err(|e| DoctorError::Prefix(prefix.clone(), e))?;
        files(&prefix)
    } else {
        vec![prefix.clone()]
    };
    let installed = python_sites(if md.is_dir() { &prefix } else { prefix.parent().unwrap_or(&prefix) }, &list);
    let mut binaries = Vec::new();
    for f in &list {
        if let Some(b) = check_binary(f, cfg, &installed) {
            binaries.push(b);
        }
    }
    Ok(DoctorReport { prefix, devices: cfg.devices.iter().map(|d| d.name.clone()).collect(), binaries, python: !installed.is_empty() })
}

/// Whether an ELF file is an object file or core dump (`e_type` other than
/// executable or shared object): never a host binary the runtime loads,
/// so not reported as an unreadable one (`.o`, `crt1.o`, a `.a` member).
fn elf_not_loadable(f: &File) -> bool {
    let mut h = [0u8; 18];
    if crate::io::read_exact_at(f, 0, &mut h).is_err() || &h[..4] != b"\x7fELF" {
        return false;
    }
    let e_type = if h[5] == 2 { u16::from_be_bytes([h[16], h[17]]) } else { u16::from_le_bytes([h[16], h[17]]) };
    !matches!(e_type, 2 | 3)
}

/// The wrapper kinds of `path`, or `None` when it is no HIP host binary.
fn wrapper_kinds(path: &Path) -> Option<Result<(usize, usize), String>> {
    let f = File::open(path).ok()?;
    crate::formats::host::detect(&f)?;
    if elf_not_loadable(&f) {
        return None;
    }
    match crate::formats::host::wrappers(&f) {
        Ok(ws) => {
            let k = ws.iter().filter(|w| w.wrapper.kind() == WrapperKind::Kpacked).count();
            Some(Ok((k, ws.len() - k)))
        }
        Err(crate::formats::host::HostError::NoWrappers | crate::formats::host::HostError::NotHost) => None,
        Err(e) => Some(Err(e.to_string())),
    }
}

fn check_binary(path: &Path, cfg: &DoctorConfig, installed: &Installed) -> Option<BinaryReport> {
    let kinds = wrapper_kinds(path)?;
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut b = BinaryReport { path: path.to_path_buf(), real, kpacked: 0, fat: 0, carries: Vec::new(), devices: Vec::new(), error: None };
    match kinds {
        Ok((k, f)) => (b.kpacked, b.fat) = (k, f),
        Err(e) => {
            b.error = Some(e);
            return Some(b);
        }
    }
    let carried = match resolve::carried(path, &cfg.env) {
        Ok(c) => c,
        Err(e) => {
            b.error = Some(e.to_string());
            return Some(b);
        }
    };
    b.carries = carried.targets.iter().cloned().collect();
    for device in &cfg.devices {
        match check_device(path, device, cfg, installed, &b.carries) {
            Ok(d) => b.devices.push(d),
            Err(e) => {
                b.error = Some(e.to_string());
                break;
            }
        }
    }
    Some(b)
}

/// Resolves `path` for every feature variant of `device` until one
/// resolves every wrapper (the first variant when none does).
fn best_variant(path: &Path, device: &Device, env: &LoaderEnv) -> Result<(TargetId, Vec<Outcome>), ResolveError> {
    let mut first = None;
    for v in device.variants.iter().chain(device.variants.is_empty().then_some(&device.name)) {
        let r = outcomes(path, v, LoaderGen::Newest, env)?;
        if r.iter().all(|w| w.result.is_ok()) {
            return Ok((v.clone(), r));
        }
        first.get_or_insert((v.clone(), r));
    }
    Ok(first.unwrap_or_else(|| (device.name.clone(), Vec::new())))
}

/// The target of SPIR-V code objects in offload bundles
/// (`hip-spirv64-amd-amdhsa--amdgcnspirv`), compiled for any GPU at load.
pub const SPIRV_TARGET: &str = crate::formats::target::SPIRV_ARCH;

/// What the loader's variables did to the search: `ROCM_KPACK_PATH`
/// replaces the markers' paths; both are split at the platform's list
/// separator, so on Linux a file name holding ':' (`x_gfx90a:xnack-.kpack`)
/// cannot be named there.
fn env_note(env: &LoaderEnv) -> Option<String> {
    let sep = if cfg!(windows) { ";" } else { ":" };
    for (var, list) in [("ROCM_KPACK_PATH", &env.path), ("ROCM_KPACK_PATH_PREFIX", &env.prefix)] {
        for w in 2..=list.len().min(4) {
            for parts in list.windows(w) {
                let joined: Vec<String> = parts.iter().map(|p| p.to_string_lossy().into_owned()).collect();
                let joined = PathBuf::from(joined.join(sep));
                if !parts.iter().any(|p| p.is_file()) && joined.is_file() {
                    return Some(format!("{var} is split at '{sep}', so {} cannot be named there: link it under a name without '{sep}'", joined.display()));
                }
            }
        }
    }
    (!env.path.is_empty()).then(|| "ROCM_KPACK_PATH is set: only the archives it names are looked at, not the markers' paths".to_string())
}

/// One wrapper's resolution without the code object's bytes.
struct Outcome {
    index: u32,
    kind: WrapperKind,
    /// The archive it came from (`None`: its fat bundle).
    result: Result<Option<PathBuf>, LoadError>,
    /// What it resolved to is SPIR-V (compiled at load).
    spirv: bool,
}

/// Resolves `path` for `isa` keeping no code object: each is decoded
/// (so a damaged one is found) and dropped, one at a time, whatever the
/// library's size.
fn outcomes(path: &Path, isa: &TargetId, gen: LoaderGen, env: &LoaderEnv) -> Result<Vec<Outcome>, ResolveError> {
    let mut v = Vec::new();
    resolve::resolve_each(path, isa, gen, env, &mut |w| {
        let spirv = w.result.as_ref().is_ok_and(|r| r.arch == SPIRV_TARGET);
        v.push(Outcome { index: w.index, kind: w.kind, result: w.result.map(|r| r.archive), spirv })
    })?;
    Ok(v)
}

fn probe(path: &Path) -> Candidate {
    let Ok(md) = std::fs::metadata(path) else { return Candidate::Missing };
    if !md.is_file() {
        return Candidate::Unusable("not a regular file".into());
    }
    match File::open(path).map_err(|e| e.to_string()).and_then(|f| Archive::open(&f).map_err(|e| e.to_string())) {
        Ok(a) => Candidate::Archive { entries: a.toc.toc.iter().map(|(_, v)| v.len()).sum(), arches: a.toc.gfx_arches },
        Err(e) => Candidate::Unusable(e),
    }
}

fn check_device(path: &Path, device: &Device, cfg: &DoctorConfig, installed: &Installed, carries: &[String]) -> Result<DeviceReport, ResolveError> {
    let (isa, runs) = best_variant(path, device, &cfg.env)?;
    let mut d = DeviceReport { device: device.name.clone(), isa: isa.clone(), resolved: 0, archives: Vec::new(), findings: Vec::new() };
    // The SPIR-V archive is a candidate for every device; it is named only
    // where the binary carries SPIR-V (elsewhere its absence is normal).
    let spirv_carried = carries.iter().any(|t| t == SPIRV_TARGET);
    let paths: Vec<PathBuf> = resolve::search_paths(path, &isa, &cfg.env)?
        .into_iter()
        .filter(|p| spirv_carried || !p.file_name().and_then(|n| ArchiveName::parse(&n.to_string_lossy())).is_some_and(|a| a.is_spirv()))
        .collect();
    let probed: Vec<(PathBuf, Candidate)> = paths.iter().map(|p| (p.clone(), probe(p))).collect();
    let accepted: BTreeSet<String> =
        crate::formats::target::device_arch_list(&isa).iter().flat_map(|a| crate::formats::target::compatible_targets(&a.to_string())).collect();
    let provider = || installed.provider(path, &isa).or_else(|| installed.provider(&std::fs::canonicalize(path).unwrap_or_default(), &isa));

    let (mut no_archive, mut no_arch, mut bad_marker, mut fat_none) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut kernels = Vec::new();
    let mut marker_msg = String::new();
    // Wrappers the runtime serves only by compiling SPIR-V at load.
    let mut spirv_used = Vec::new();
    for w in &runs {
        if w.spirv {
            spirv_used.push(w.index);
        }
        match (&w.result, w.kind) {
            (Ok(archive), _) => {
                d.resolved += 1;
                if let Some(a) = archive {
                    if !d.archives.contains(a) {
                        d.archives.push(a.clone());
                    }
                }
            }
            (Err(LoadError::ArchNotFound), WrapperKind::Fat) => fat_none.push(w.index),
            (Err(LoadError::ArchiveNotFound), _) => no_archive.push(w.index),
            (Err(LoadError::ArchNotFound), _) => no_arch.push(w.index),
            (Err(LoadError::KernelNotFound(k)), _) => kernels.push((w.index, k.split(" / ").next().unwrap_or(k).to_string())),
            (Err(LoadError::InvalidMetadata(m)), _) => {
                bad_marker.push(w.index);
                marker_msg = m.clone();
            }
            (Err(e), _) => d.findings.push(Finding::Unreadable { wrapper: w.index, message: e.to_string() }),
        }
    }
    if !no_archive.is_empty() {
        let mut missing_dirs: Vec<PathBuf> = Vec::new();
        for p in &paths {
            if let Some(dir) = p.parent().filter(|dir| !dir.as_os_str().is_empty() && !dir.is_dir()) {
                if !missing_dirs.iter().any(|m| m == dir) {
                    missing_dirs.push(dir.to_path_buf());
                }
            }
        }
        let carried = carries.to_vec();
        let env_note = env_note(&cfg.env);
        d.findings.push(Finding::ArchiveMissing { wrappers: no_archive, looked_for: paths.clone(), missing_dirs, carried, provider: provider(), env_note });
    }
    if !no_arch.is_empty() {
        let archives =
            probed.iter().filter_map(|(p, c)| if let Candidate::Archive { arches, .. } = c { Some((p.clone(), arches.clone())) } else { None }).collect();
        d.findings.push(Finding::NoArchiveForDevice { wrappers: no_arch, archives, provider: provider() });
    }
    if !kernels.is_empty() {
        let archives = probed
            .iter()
            .filter(|(_, c)| matches!(c, Candidate::Archive { arches, .. } if arches.iter().any(|a| accepted.contains(a))))
            .map(|(p, _)| p.clone())
            .collect();
        d.findings.push(Finding::KernelMissing { kernels, archives });
    }
    if !bad_marker.is_empty() {
        d.findings.push(Finding::BadMarker { wrappers: bad_marker, message: marker_msg });
    }
    if !fat_none.is_empty() {
        d.findings.push(Finding::FatNoCode { wrappers: fat_none, carries: carries.to_vec() });
    }
    if !spirv_used.is_empty() {
        // No code object for this GPU but a SPIR-V one (clang's
        // `--offload-arch=amdgcnspirv`), from the bundle or an archive.
        d.findings.push(Finding::SpirvOnly { wrappers: spirv_used });
    }
    for (p, c) in &probed {
        match c {
            Candidate::Archive { entries: 0, .. } => d.findings.push(Finding::EmptyArchive { path: p.clone() }),
            Candidate::Unusable(m) => d.findings.push(Finding::UnusableArchive { path: p.clone(), message: m.clone() }),
            _ => {}
        }
    }
    // What an older runtime (no fall-through) makes of a tree the newest
    // one accepts: TheRock's hipErrorInvalidImage with overlay archives.
    if d.findings.iter().all(|f| f.severity() == Severity::Warning) && runs.iter().any(|w| w.kind == WrapperKind::Kpacked) {
        let old = outcomes(path, &isa, LoaderGen::Feb2026, &cfg.env)?;
        let failed: Vec<&Outcome> = old.iter().filter(|w| w.result.is_err()).collect();
        if let Some(first) = failed.first().and_then(|w| w.result.as_ref().err()) {
            d.findings.push(Finding::OlderRuntimeFails { wrappers: failed.iter().map(|w| w.index).collect(), error: first.to_string() });
        }
    }
    Ok(d)
}
