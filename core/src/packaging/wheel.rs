//! `kpackfs split-wheel`: a fat Python wheel → a host wheel (same name,
//! version and tags; fat binaries transformed) and device wheels holding
//! the archives and database files, with the split engine: by default one
//! per target, sub-family and family of the family table
//! ([`super::wheel_family`]), or one per processor (`--layout processor`).
//!
//! The *overlay root* — where `.kpack/` goes and what TOC keys are
//! relative to — is the one top-level directory holding every fat binary
//! and database file (`torch/` → archives in `torch/.kpack/`, keys like
//! `lib/libtorch_hip.so#0`), or the wheel's root when they are spread over
//! several. The host wheel's METADATA gains one extra per target (or
//! processor), `device-<target>`, requiring `<name>-device-<target>` of the
//! same version (and, in the family layout, its family wheels), and
//! `device-all`; device wheels require the host wheel of their version.
//! The portable SPIR-V artifact becomes `<prefix>-amdgcnspirv`, which has
//! no extra of its own: every device extra requires it, since the runtime
//! JIT-compiles it on any GPU without a native object.
//! A host wheel installed alone fails at load time with
//! "archive not found" — never wrong code — and `kpackfs verify` names the
//! missing archive (the host wheel's pack manifest lists them all).
//!
//! Output zips are deterministic: entries sorted (dist-info last, RECORD
//! at the very end), times fixed at 1980-01-01, modes kept, deflated
//! except zstd archives (already compressed: stored).
//!
//! The input is not trusted: entries must be plain relative paths, unpack
//! within [`UnpackLimits`] (zip bombs), and match the wheel's RECORD
//! ([`super::record`]); an input holding a file where the split writes an
//! archive or pack manifest is refused (it was split before, or carries
//! stale archives that would ship beside the new ones). Output wheels are
//! staged ([`crate::staging`]): a failed run leaves OUTPUT as it was.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use zip::ZipArchive;

use crate::plan::db::Rules;

use crate::staging::Staging;

use super::manifest::ARTIFACT_MANIFEST;
#[cfg(test)]
use super::record::b64url;
use super::wheel_devices::{processor_headers, DeviceCtx};
pub use super::wheel_zip::WheelName;
use super::wheel_zip::{escape, perm_of, Entries, Source};
use super::{split, wheel_family, Progress, SplitConfig, SplitError, SplitReport};

/// Bounds on unpacking a wheel, against zip bombs: each entry larger than
/// [`UnpackLimits::RATIO_FLOOR`] may unpack to at most `max_ratio` times
/// its compressed size, all entries together to at most `max_ratio` times
/// the wheel's size (entries sharing compressed bytes), and no entry to
/// more than the size its header declares.
#[derive(Debug, Clone, Copy)]
pub struct UnpackLimits {
    pub max_ratio: u64,
}

impl UnpackLimits {
    /// Entries up to this size are not ratio-checked: small text files
    /// (an empty `__init__.py` padded by a header) compress absurdly well.
    pub const RATIO_FLOOR: u64 = 1 << 20;
    /// Deflate's best case is about 1032:1; real libraries, code objects
    /// and database files stay well below 50:1.
    pub const DEFAULT_RATIO: u64 = 200;
}

impl Default for UnpackLimits {
    fn default() -> Self {
        UnpackLimits { max_ratio: Self::DEFAULT_RATIO }
    }
}

/// How device wheels are grouped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WheelLayout {
    /// One wheel per bundle of the family table, target wheels requiring
    /// their sub-family and family wheels ([`super::wheel_family`]).
    #[default]
    Family,
    /// One wheel per processor, `py3-none` tags, no parents: the layout
    /// of kpackfs before the family layout (and of upstream's older
    /// splitter).
    Processor,
}

/// What split-wheel writes besides the split itself.
#[derive(Debug, Clone)]
pub struct WheelOptions {
    pub layout: WheelLayout,
    pub limits: UnpackLimits,
    /// Device wheels are named `<prefix>-<bundle>`; default `<name>-device`.
    pub device_prefix: Option<String>,
    /// Family layout: the host requires `rocm-bootstrap`, as upstream's
    /// host wheels do (it selects the device extra at install time).
    pub bootstrap_dep: bool,
    /// Family layout: extra `Requires-Dist` lines of every device wheel
    /// (`@GFXARCH@` → the wheel's key; see [`wheel_family::device_metadata`]).
    pub device_requires: Vec<String>,
}

impl Default for WheelOptions {
    fn default() -> Self {
        WheelOptions { layout: WheelLayout::Family, limits: UnpackLimits::default(), device_prefix: None, bootstrap_dep: true, device_requires: Vec::new() }
    }
}

/// What split-wheel wrote.
#[derive(Debug, Default)]
pub struct WheelReport {
    pub host: PathBuf,
    pub devices: Vec<PathBuf>,
    pub split: SplitReport,
    /// Family layout: targets the family table does not list, each
    /// packaged as a target wheel with no parents (never `amdgcnspirv`).
    pub unlisted: Vec<String>,
}

/// Extracts `wheel` into `dir`, refusing entries that could leave it or
/// unpack beyond `limits`.
fn extract(wheel: &Path, dir: &Path, limits: UnpackLimits) -> Result<Vec<String>, SplitError> {
    let bad = |m: String| SplitError::Usage(format!("{}: {m}", wheel.display()));
    let f = File::open(wheel).map_err(|e| SplitError::io(wheel, e))?;
    let wheel_size = f.metadata().map_err(|e| SplitError::io(wheel, e))?.len();
    let mut z = ZipArchive::new(f).map_err(|e| bad(format!("not a zip archive: {e}")))?;
    let hint = format!("a zip bomb? if the wheel is genuine, raise --max-unpack-ratio (now {})", limits.max_ratio);
    let mut total: u64 = 0;
    let mut names = Vec::new();
    for i in 0..z.len() {
        let mut e = z.by_index(i).map_err(|e| bad(e.to_string()))?;
        let name = e.name().map_err(|e| bad(e.to_string()))?.into_owned();
        let safe = !name.is_empty()
            && !name.contains('\\')
            && !name.contains('\0')
            && Path::new(&name).components().all(|c| matches!(c, Component::Normal(_)))
            && !name.starts_with('/');
        if !safe || e.is_symlink() {
            return Err(bad(format!("entry {name:?} is not a plain relative path")));
        }
        let (size, packed) = (e.size(), e.compressed_size());
        if size > UnpackLimits::RATIO_FLOOR && size > packed.saturating_mul(limits.max_ratio) {
            return Err(bad(format!("entry {name:?} unpacks to {size} bytes from {packed} (over {}:1): {hint}", limits.max_ratio)));
        }
        total = total.saturating_add(size);
        if total > UnpackLimits::RATIO_FLOOR.max(wheel_size.saturating_mul(limits.max_ratio)) {
            return Err(bad(format!("entries unpack to more than {}:1 of the wheel's {wheel_size} bytes: {hint}", limits.max_ratio)));
        }
        let to = dir.join(&name);
        if e.is_dir() {
            std::fs::create_dir_all(&to).map_err(|err| SplitError::io(&to, err))?;
            continue;
        }
        if let Some(d) = to.parent() {
            std::fs::create_dir_all(d).map_err(|err| SplitError::io(d, err))?;
        }
        let mut out = File::options().write(true).create_new(true).open(&to).map_err(|err| SplitError::io(&to, err))?;
        // Never more than the header declares (what the limits judged).
        let n = io::copy(&mut (&mut e).take(size.saturating_add(1)), &mut out).map_err(|err| bad(format!("{name}: {err}")))?;
        if n > size {
            return Err(bad(format!("entry {name:?} unpacks to more than the {size} bytes its header declares: {hint}")));
        }
        let mode = e.unix_mode().map_or(0o644, |m| m & 0o777);
        drop(out);
        crate::copy::set_perm(&to, mode | 0o400).map_err(|err| SplitError::io(&to, err))?;
        names.push(name);
    }
    Ok(names)
}

/// Inserts `extra` header lines at the end of METADATA's header block.
fn add_headers(metadata: &str, extra: &[String]) -> String {
    let (head, body) = match metadata.find("\n\n") {
        Some(i) => (&metadata[..i + 1], &metadata[i + 1..]),
        None => (metadata, ""),
    };
    let mut out = head.to_string();
    if !out.ends_with('\n') {
        out.push('\n');
    }
    for l in extra {
        out.push_str(l);
        out.push('\n');
    }
    out.push_str(body);
    out
}

fn header(metadata: &str, key: &str) -> Option<String> {
    metadata.lines().take_while(|l| !l.is_empty()).find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix(':')).map(|v| v.trim().to_string()))
}

/// Splits `wheel` into `output/` (host wheel under the input's name, one
/// device wheel per processor), all or nothing.
pub fn split_wheel(wheel: &Path, output: &Path, base: &SplitConfig, opts: &WheelOptions, progress: &Progress) -> Result<WheelReport, SplitError> {
    let file_name = wheel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let wn =
        WheelName::parse(&file_name).ok_or_else(|| SplitError::Usage(format!("{file_name:?}: not a wheel file name (NAME-VERSION-PY-ABI-PLATFORM.whl)")))?;
    if std::fs::metadata(output).is_ok_and(|m| !m.is_dir()) {
        return Err(SplitError::Usage(format!("{}: exists and is not a directory", output.display())));
    }
    let host_path = output.join(&file_name);
    if host_path.exists() {
        return Err(SplitError::Usage(format!("{}: already exists", host_path.display())));
    }
    let staging = Staging::begin(output, "split-wheel").map_err(|e| SplitError::io(output, e))?;
    let scratch = staging.path().join(".work");
    let r = split_in(wheel, &wn, output, staging.path(), &scratch, base, opts, progress);
    let _ = std::fs::remove_dir_all(&scratch);
    let r = r.map_err(|e| in_wheel_terms(e, &scratch.join("wheel"), wheel, staging.path(), output))?;
    staging.commit(false).map_err(|e| SplitError::io(output, e))?;
    Ok(r)
}

/// An error about the unpacked copy of the wheel, reworded to name the
/// wheel's entry (`dist/x.whl:pkg/lib/libx.so`) instead of a path in the
/// staging directory, which is gone by the time the user reads it.
/// Other staging paths become OUTPUT.
fn in_wheel_terms(e: SplitError, unpacked: &Path, wheel: &Path, stage: &Path, output: &Path) -> SplitError {
    let prefix = unpacked.display().to_string();
    let entry = |p: PathBuf| match (p.strip_prefix(unpacked), p.starts_with(stage)) {
        (Ok(rel), _) => PathBuf::from(format!("{}:{}", wheel.display(), super::slash(rel))),
        (_, true) => output.to_path_buf(),
        _ => p,
    };
    let text = |m: String| m.replace(&format!("{prefix}/"), &format!("{}:", wheel.display())).replace(&prefix, &wheel.display().to_string());
    match e {
        SplitError::Usage(m) => SplitError::Usage(text(m)),
        SplitError::NoMatch(m) => SplitError::NoMatch(text(m)),
        SplitError::Io { path, err } => SplitError::Io { path: entry(path), err },
        SplitError::Changed(p) => SplitError::Changed(entry(p)),
        SplitError::Bundle(p, m) => SplitError::Bundle(entry(p), m),
        SplitError::Archive(p, m) => SplitError::Archive(entry(p), m),
        other => other,
    }
}

/// Unpacks, checks and splits `wheel`, writing the wheels into `stage`
/// (the paths reported are where they will be in `output`).
#[allow(clippy::too_many_arguments)]
fn split_in(
    wheel: &Path,
    wn: &WheelName,
    output: &Path,
    stage: &Path,
    scratch: &Path,
    base: &SplitConfig,
    opts: &WheelOptions,
    progress: &Progress,
) -> Result<WheelReport, SplitError> {
    let ex = scratch.join("wheel");
    let names = extract(wheel, &ex, opts.limits)?;
    let dist_info = names
        .iter()
        .filter_map(|n| n.split('/').next().filter(|d| d.ends_with(".dist-info")))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .map(str::to_string)
        .collect::<Vec<_>>();
    let [dist_info] = &dist_info[..] else {
        return Err(SplitError::Usage(format!("{}: expected one .dist-info directory, found {}", wheel.display(), dist_info.len())));
    };
    super::record::check(&ex, &names, &format!("{dist_info}/RECORD")).map_err(|m| SplitError::Usage(format!("{}: {m}", wheel.display())))?;
    let meta_path = ex.join(dist_info).join("METADATA");
    let metadata = std::fs::read_to_string(&meta_path).map_err(|e| SplitError::io(&meta_path, e))?;
    let name = header(&metadata, "Name").ok_or_else(|| SplitError::Usage(format!("{}: METADATA has no Name", wheel.display())))?;
    let version = header(&metadata, "Version").unwrap_or_else(|| wn.version.clone());

    // The overlay root: the one top-level directory with all device code.
    let rules: &Rules = &base.rules;
    let mut tops = BTreeSet::new();
    for n in &names {
        let p = ex.join(n);
        let device = rules.classify(Path::new(n)).is_some() || File::open(&p).is_ok_and(|f| crate::formats::host::probe(&f));
        if device {
            tops.insert(if n.contains('/') { n.split('/').next().unwrap_or("").to_string() } else { String::new() });
        }
    }
    let overlay = match tops.iter().collect::<Vec<_>>()[..] {
        [t] if !t.is_empty() && !t.ends_with(".data") => t.clone(),
        _ => String::new(),
    };
    let component = escape(&name).to_lowercase();
    let family = opts.layout == WheelLayout::Family;
    let cfg = SplitConfig { component: component.clone(), family_bundles: family, ..base.clone() };
    let sp = scratch.join("split");
    let report = split(&ex.join(&overlay), &sp, &cfg, progress).map_err(|e| match e {
        SplitError::Occupied { rel, .. } => {
            let entry = if overlay.is_empty() { super::slash(&rel) } else { format!("{overlay}/{}", super::slash(&rel)) };
            SplitError::Usage(format!(
                "{}: holds {entry}, a path split-wheel writes (an archive or the pack manifest): the wheel looks split already or carries stale archives; remove the entry, or split the fat original",
                wheel.display()
            ))
        }
        other => other,
    })?;

    // Host wheel: the wheel outside the overlay root as it was, the generic
    // artifact inside it, METADATA with the device extras.
    let devices: Vec<String> =
        report.artifacts.iter().filter_map(|a| a.name.strip_prefix(&format!("{component}_"))).filter(|s| *s != "generic").map(str::to_string).collect();
    let prefix = opts.device_prefix.clone().unwrap_or_else(|| format!("{name}-device"));
    let groups = wheel_family::group(&devices);
    let extra =
        if family { wheel_family::host_headers(&version, &prefix, &groups, opts.bootstrap_dep) } else { processor_headers(&version, &prefix, &devices) };
    let mut host = Entries::default();
    let in_overlay = |n: &str| !overlay.is_empty() && n.starts_with(&format!("{overlay}/"));
    let meta_name = format!("{dist_info}/METADATA");
    for n in &names {
        if !overlay.is_empty() && !in_overlay(n) && *n != meta_name {
            host.0.push((n.clone(), Source::File(ex.join(n))));
        }
    }
    let generic = sp.join(format!("{component}_generic"));
    host.add_tree(&generic, &overlay, &|rel| rel == ARTIFACT_MANIFEST || rel == meta_name);
    let meta_mode = std::fs::metadata(&meta_path).map(|m| perm_of(&m)).unwrap_or(0o644);
    host.0.push((meta_name.clone(), Source::Bytes(add_headers(&metadata, &extra).into_bytes(), meta_mode)));
    let host_name = wheel.file_name().unwrap_or_default();
    let mut out = WheelReport { host: output.join(host_name), devices: Vec::new(), split: report.clone(), unlisted: Vec::new() };

    // Device wheels.
    let dev = DeviceCtx {
        name: &name,
        version: &version,
        prefix: &prefix,
        overlay: &overlay,
        wn,
        split_dir: &sp,
        component: &component,
        output,
        stage,
        requires: &opts.device_requires,
    };
    if family {
        out.unlisted = groups.iter().filter(|g| g.is_unlisted()).map(|g| g.key.clone()).collect();
        for g in &groups {
            out.devices.push(dev.family_wheel(g, &groups)?);
        }
    } else {
        for p in &devices {
            out.devices.push(dev.processor_wheel(p)?);
        }
    }
    host.write(&stage.join(host_name), dist_info)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_encodings() {
        let w = WheelName::parse("torch-2.9.0+rocm7.0-cp312-cp312-manylinux_2_28_x86_64.whl").unwrap();
        assert_eq!((w.dist.as_str(), w.version.as_str(), w.platform.as_str()), ("torch", "2.9.0+rocm7.0", "manylinux_2_28_x86_64"));
        assert_eq!(WheelName::parse("a-1-2-py3-none-any.whl").unwrap().build.as_deref(), Some("2"));
        assert!(WheelName::parse("a-1-py3.whl").is_none() && WheelName::parse("a--1-py3-none-any.whl").is_none());
        assert_eq!(escape("my-lib.x"), "my_lib_x");
        // RFC 4648 §10 vectors, URL-safe alphabet, no padding.
        assert_eq!(b64url(b"foob"), "Zm9vYg");
        assert_eq!(b64url(b"fooba"), "Zm9vYmE");
        assert_eq!(b64url(&[0xfb, 0xff]), "-_8");
        let m = add_headers("Metadata-Version: 2.1\nName: x\n\nbody\n", &["Provides-Extra: a".into()]);
        assert_eq!(m, "Metadata-Version: 2.1\nName: x\nProvides-Extra: a\n\nbody\n");
        assert_eq!(header(&m, "Name").as_deref(), Some("x"));
    }
}
