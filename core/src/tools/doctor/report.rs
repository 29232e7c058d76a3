//! The doctor's report as text (one line per binary and device, then a
//! summary) and as JSON (`--json`). Paths under the prefix are shown
//! relative to it, others in full.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::{BinaryReport, DeviceReport, DoctorReport, Finding, Severity};

fn list(v: &[String]) -> String {
    v.join(", ")
}

fn indices(v: &[u32]) -> String {
    let shown: Vec<String> = v.iter().take(8).map(u32::to_string).collect();
    let more = if v.len() > 8 { format!(" and {} more", v.len() - 8) } else { String::new() };
    format!("wrapper{} {}{more}", if v.len() == 1 { "" } else { "s" }, shown.join(", "))
}

/// The candidate paths in one piece when they differ only in the middle
/// (`lib/.kpack/x_{gfx90a:xnack-|gfx90a}.kpack`), else listed.
fn alternatives(paths: &[String]) -> String {
    if paths.len() < 2 {
        return list(paths);
    }
    let first = paths[0].as_str();
    let mut pre = first.len();
    let mut post = first.len();
    for p in &paths[1..] {
        pre = pre.min(first.bytes().zip(p.bytes()).take_while(|(a, b)| a == b).count());
        post = post.min(first.bytes().rev().zip(p.bytes().rev()).take_while(|(a, b)| a == b).count());
    }
    while !first.is_char_boundary(pre) {
        pre -= 1;
    }
    while !first.is_char_boundary(first.len() - post) {
        post -= 1;
    }
    // Cut at a name boundary: `x_{gfx90a:xnack-|gfx90a}`, not `x_gfx90a{:xnack-|}`.
    pre = first[..pre].rfind(['_', '/']).map_or(0, |i| i + 1);
    post = first[first.len() - post..].find('.').map_or(0, |i| post - i);
    let min_len = paths.iter().map(String::len).min().unwrap_or(0);
    if pre == 0 || pre + post > min_len {
        return list(paths);
    }
    let mids: Vec<&str> = paths.iter().map(|p| &p[pre..p.len() - post]).collect();
    format!("{}{{{}}}{}", &first[..pre], mids.join("|"), &first[first.len() - post..])
}

impl DoctorReport {
    /// `p` relative to the prefix when under it.
    pub fn show(&self, p: &Path) -> String {
        let base = if self.prefix.is_dir() { self.prefix.as_path() } else { self.prefix.parent().unwrap_or(Path::new("")) };
        match p.strip_prefix(base) {
            Ok(r) if !r.as_os_str().is_empty() => r.display().to_string(),
            _ => p.display().to_string(),
        }
    }

    fn shows(&self, ps: &[PathBuf]) -> Vec<String> {
        ps.iter().map(|p| self.show(p)).collect()
    }

    /// One finding as one line (without the binary and device).
    pub fn finding_text(&self, f: &Finding) -> String {
        match f {
            Finding::ArchiveMissing { wrappers, looked_for, missing_dirs, carried, provider, env_note } => {
                let mut s = format!("no archive found for {} (looked for {})", indices(wrappers), alternatives(&self.shows(looked_for)));
                if !missing_dirs.is_empty() {
                    let _ = write!(s, "; {} does not exist", list(&self.shows(missing_dirs)));
                }
                if !carried.is_empty() {
                    let _ = write!(s, "; archives present for: {}", list(carried));
                }
                if let Some(n) = env_note {
                    let _ = write!(s, "; {n}");
                }
                match provider {
                    Some(p) => {
                        let _ = write!(s, "; {}", p.advice());
                    }
                    None if env_note.is_none() => s.push_str("; install the device package for this GPU, or set ROCM_KPACK_PATH"),
                    None => {}
                }
                s
            }
            Finding::NoArchiveForDevice { wrappers, archives, provider } => {
                let have: Vec<String> =
                    archives.iter().map(|(p, a)| format!("{} ({})", self.show(p), if a.is_empty() { "no targets".into() } else { list(a) })).collect();
                let mut s = format!("no archive holds code for this GPU ({}); present: {}", indices(wrappers), list(&have));
                if let Some(p) = provider {
                    let _ = write!(s, "; {}", p.advice());
                }
                s
            }
            Finding::KernelMissing { kernels, archives } => {
                let keys: Vec<String> = kernels.iter().take(4).map(|(i, k)| format!("{k} (wrapper {i})")).collect();
                let more = if kernels.len() > 4 { format!(" and {} more", kernels.len() - 4) } else { String::new() };
                format!("kernel {}{more} is in none of the archives for this GPU: {}", list(&keys), list(&self.shows(archives)))
            }
            Finding::BadMarker { wrappers, message } => format!("marker unreadable ({}): {message}", indices(wrappers)),
            Finding::Unreadable { wrapper, message } => format!("code object of wrapper {wrapper} cannot be read: {message}"),
            Finding::FatNoCode { wrappers, carries } => format!("fat: carries {}; this GPU: missing ({})", list(carries), indices(wrappers)),
            Finding::SpirvOnly { wrappers } => format!(
                "no code object built for this GPU: the runtime compiles the SPIR-V one ({}) when it loads it, a slower first start ({})",
                super::SPIRV_TARGET,
                indices(wrappers)
            ),
            Finding::EmptyArchive { path } => format!("archive {} is present but empty", self.show(path)),
            Finding::UnusableArchive { path, message } => format!("{} is not a usable archive (the loader skips it): {message}", self.show(path)),
            Finding::OlderRuntimeFails { wrappers, error } => {
                format!("runtimes without fall-through (rocm-kpack before rocm-systems#9953) fail here: {error} ({})", indices(wrappers))
            }
        }
    }

    fn device_line(&self, b: &BinaryReport, d: &DeviceReport) -> String {
        let name = self.show(&b.path);
        let dev = if d.device == d.isa { d.device.to_string() } else { format!("{} (as {})", d.device, d.isa) };
        let mut s = String::new();
        let ok = d.worst() != Some(Severity::Problem);
        if b.kpacked == 0 && ok {
            let spirv = d.findings.iter().any(|f| matches!(f, Finding::SpirvOnly { .. }));
            let _ = write!(s, "{name}: fat: carries {}; this GPU ({dev}): {}", list(&b.carries), if spirv { "ok through SPIR-V" } else { "ok" });
        } else if ok {
            let from = list(&self.shows(&d.archives));
            let _ = write!(
                s,
                "{name}: OK for {dev}: {} of {} wrappers resolve{}",
                d.resolved,
                b.kpacked + b.fat,
                if from.is_empty() { String::new() } else { format!(" (from {from})") }
            );
        }
        for f in &d.findings {
            if !s.is_empty() {
                s.push('\n');
            }
            let tag = match f.severity() {
                Severity::Problem => "PROBLEM",
                Severity::Warning => "warning",
            };
            let _ = write!(s, "{name}: {tag} for {dev}: {}", self.finding_text(f));
        }
        s
    }

    /// The report as text, ending with the summary line.
    pub fn text(&self) -> String {
        let mut s = String::new();
        for b in &self.binaries {
            if let Some(e) = &b.error {
                let _ = writeln!(s, "{}: PROBLEM: cannot be read as a host binary: {e}", self.show(&b.path));
                continue;
            }
            if b.path != b.real && !b.real.starts_with(&self.prefix) {
                let _ = writeln!(s, "{}: a link to {} (markers resolve from there)", self.show(&b.path), b.real.display());
            }
            for d in &b.devices {
                let _ = writeln!(s, "{}", self.device_line(b, d));
            }
        }
        s.push_str(&self.summary());
        s.push('\n');
        s
    }

    /// `doctor: N HIP binaries under P for D: a ok, b with warnings, c with problems`.
    pub fn summary(&self) -> String {
        let devs: Vec<String> = self.devices.iter().map(ToString::to_string).collect();
        if self.binaries.is_empty() {
            return format!(
                "doctor: FAILED — no HIP binary under {} (looked for host binaries with kpack markers or fat device code); nothing was checked",
                self.prefix.display()
            );
        }
        let count = |w: Option<Severity>| self.binaries.iter().filter(|b| b.worst() == w).count();
        let fat = self.binaries.iter().filter(|b| b.kpacked == 0).count();
        format!(
            "doctor: {} — {} HIP binar{} ({} kpack'd, {} fat) under {} for {}: {} ok, {} with warnings, {} with problems",
            if self.ok() { "OK" } else { "FAILED" },
            self.binaries.len(),
            if self.binaries.len() == 1 { "y" } else { "ies" },
            self.binaries.len() - fat,
            fat,
            self.prefix.display(),
            devs.join(", "),
            count(None),
            count(Some(Severity::Warning)),
            count(Some(Severity::Problem)),
        )
    }

    fn finding_json(&self, f: &Finding) -> Value {
        let kind = match f {
            Finding::ArchiveMissing { .. } => "archive_missing",
            Finding::NoArchiveForDevice { .. } => "no_archive_for_device",
            Finding::KernelMissing { .. } => "kernel_missing",
            Finding::BadMarker { .. } => "bad_marker",
            Finding::Unreadable { .. } => "unreadable",
            Finding::FatNoCode { .. } => "fat_no_code",
            Finding::SpirvOnly { .. } => "spirv_only",
            Finding::EmptyArchive { .. } => "empty_archive",
            Finding::UnusableArchive { .. } => "unusable_archive",
            Finding::OlderRuntimeFails { .. } => "older_runtime_fails",
        };
        let mut v = json!({
            "kind": kind,
            "severity": if f.severity() == Severity::Problem { "problem" } else { "warning" },
            "message": self.finding_text(f),
        });
        let extra = match f {
            Finding::ArchiveMissing { looked_for, provider, .. } => {
                json!({"looked_for": self.shows(looked_for), "extra": provider.as_ref().and_then(|p| p.extra.clone()), "distribution": provider.as_ref().map(|p| p.dist.clone())})
            }
            Finding::KernelMissing { kernels, archives } => {
                json!({"kernels": kernels.iter().map(|(_, k)| k.clone()).collect::<Vec<_>>(), "archives": self.shows(archives)})
            }
            Finding::EmptyArchive { path } | Finding::UnusableArchive { path, .. } => json!({"archive": self.show(path)}),
            _ => json!({}),
        };
        if let (Some(o), Value::Object(e)) = (v.as_object_mut(), extra) {
            o.extend(e);
        }
        v
    }

    /// The report as one JSON object.
    pub fn json(&self) -> Value {
        let binaries: Vec<Value> = self
            .binaries
            .iter()
            .map(|b| {
                let devices: Vec<Value> = b
                    .devices
                    .iter()
                    .map(|d| {
                        json!({
                            "device": d.device.to_string(), "isa": d.isa.to_string(),
                            "ok": d.worst() != Some(Severity::Problem), "resolved": d.resolved,
                            "archives": self.shows(&d.archives),
                            "findings": d.findings.iter().map(|f| self.finding_json(f)).collect::<Vec<_>>(),
                        })
                    })
                    .collect();
                json!({
                    "path": self.show(&b.path), "real_path": b.real.display().to_string(),
                    "kind": if b.kpacked == 0 { "fat" } else if b.fat == 0 { "kpack" } else { "mixed" },
                    "wrappers": b.kpacked + b.fat, "carries": b.carries, "error": b.error,
                    "ok": b.worst() != Some(Severity::Problem), "devices": devices,
                })
            })
            .collect();
        json!({
            "ok": self.ok(), "prefix": self.prefix.display().to_string(),
            "devices": self.devices.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "python": self.python, "summary": self.summary(), "binaries": binaries,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::alternatives;

    #[test]
    fn candidate_paths_are_folded() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(alternatives(&v(&["l/.kpack/x_gfx90a:xnack-.kpack", "l/.kpack/x_gfx90a.kpack"])), "l/.kpack/x_{gfx90a:xnack-|gfx90a}.kpack");
        assert_eq!(alternatives(&v(&["a.kpack"])), "a.kpack");
        assert_eq!(alternatives(&v(&["/a/x.kpack", "/b/y.kpack"])), "/{a/x|b/y}.kpack");
    }
}
