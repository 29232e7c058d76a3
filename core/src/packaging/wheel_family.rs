//! The family layout of `split-wheel` (the default): device wheels per
//! bundle of the family table ([`super::families`]) rather than per
//! processor, as upstream's newest wheel splitter lays them out.
//!
//! * Each split artifact goes to the wheel of its bundle: a target's owner
//!   (`gfx1250-strict` → `gfx1250`; xnack variants are already in their
//!   processor's artifact, so `…_gfx90a:xnack+.kpack` ships in the gfx90a
//!   wheel under its full name), a generic target's sub-family or family,
//!   a family database artifact's own key (`gfx11`, `gfx12_0`).
//! * A target wheel requires its host and its parent sub-family and family
//!   wheels, when this split writes them: installing one target's wheel
//!   brings everything that target loads.
//! * The host declares `device-<target>` for every target-level wheel
//!   (requiring it and its parents) and `device-all`.
//!
//! Targets the table does not list (gfx940, future ones) get a target
//! wheel of their own with no parents; the caller warns about them.
//!
//! The portable SPIR-V artifact (`amdgcnspirv`) is no target and in no
//! family: it gets a wheel of its own, `<prefix>-amdgcnspirv`, which every
//! target wheel and every `device-<target>` extra requires (and
//! `device-all`), because the runtime JIT-compiles it on any GPU a library
//! has no native object for (docs/packaging.md). rocm-bootstrap 0.3.0 has
//! no bundle key for it, so this is kpackfs's own extension.

use std::collections::{BTreeMap, BTreeSet};

use super::families::{self, Level};
use super::wheel_zip::WheelName;
use crate::formats::target::SPIRV_ARCH;

/// One device wheel to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceWheel {
    /// Bundle key (`gfx1100`, `gfx110x`, `gfx11`).
    pub key: String,
    /// `None`: not in the family table (packaged as a target with no parents).
    pub level: Option<Level>,
    /// The split artifacts (processor or bundle names) it holds.
    pub artifacts: Vec<String>,
}

impl DeviceWheel {
    /// A target-level wheel: one with an extra of its own and parents.
    fn is_target(&self) -> bool {
        matches!(self.level, Some(Level::Target) | None) && !self.is_spirv()
    }

    /// The portable SPIR-V wheel, which serves every target.
    pub fn is_spirv(&self) -> bool {
        self.key == SPIRV_ARCH
    }

    /// A target the family table does not list (warned about); the SPIR-V
    /// wheel is expected outside the table and is not one.
    pub fn is_unlisted(&self) -> bool {
        self.level.is_none() && !self.is_spirv()
    }
}

/// Groups split artifacts (names after `<component>_`) into device wheels,
/// sorted by key.
pub fn group(artifacts: &[String]) -> Vec<DeviceWheel> {
    let t = families::table();
    let mut by_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for a in artifacts {
        let key = t.bundle_of(a).unwrap_or_else(|| a.clone());
        by_key.entry(key).or_default().push(a.clone());
    }
    by_key.into_iter().map(|(key, artifacts)| DeviceWheel { level: t.level(&key), key, artifacts }).collect()
}

/// The keys of the wheels a target `key`'s wheel and extra require
/// besides its own, those this split writes only: its parents (sub-family,
/// then family), then the SPIR-V wheel.
fn parents_written(key: &str, wheels: &[DeviceWheel]) -> Vec<String> {
    let mut v: Vec<String> = families::table().parents(key).into_iter().filter(|p| wheels.iter().any(|w| w.key == *p)).collect();
    if wheels.iter().any(DeviceWheel::is_spirv) {
        v.push(SPIRV_ARCH.to_string());
    }
    v
}

/// Distribution name of the wheel for `key`.
pub fn dist_name(prefix: &str, key: &str) -> String {
    format!("{prefix}-{}", families::dist_part(key))
}

/// The marker `--device-requires-dist` lines carry for the wheel's key.
pub const GFXARCH: &str = "@GFXARCH@";

/// The Summary of device wheel `key` of `host`.
pub fn summary(host: &str, key: &str) -> String {
    if key == SPIRV_ARCH {
        format!("{host}'s portable SPIR-V code objects (amdgcnspirv), JIT-compiled for any GPU without a native object (kpack archives)")
    } else {
        format!("{host}'s GPU code objects and database files for {} (kpack archives)", families::table().display(key))
    }
}

/// METADATA of device wheel `w`. `requires` are extra `Requires-Dist`
/// values (upstream's `--device-requires-dist`, e.g. the SDK's device
/// package `rocm-sdk-device-@GFXARCH@ == 7.1`): `@GFXARCH@` becomes the
/// wheel's key, and a line holding it is left out of sub-family, family
/// and SPIR-V wheels, as upstream does for families (there is no such SDK
/// package per family, nor for `amdgcnspirv`).
pub fn device_metadata(host: &str, version: &str, prefix: &str, w: &DeviceWheel, wheels: &[DeviceWheel], requires: &[String]) -> String {
    let mut m = format!(
        "Metadata-Version: 2.4\nName: {}\nVersion: {version}\nSummary: {}\nRequires-Dist: {host} == {version}\n",
        dist_name(prefix, &w.key),
        summary(host, &w.key),
    );
    for r in requires {
        if r.contains(GFXARCH) && !w.is_target() {
            continue;
        }
        m.push_str(&format!("Requires-Dist: {}\n", r.replace(GFXARCH, &w.key)));
    }
    if w.is_target() {
        for p in parents_written(&w.key, wheels) {
            m.push_str(&format!("Requires-Dist: {} == {version}\n", dist_name(prefix, &p)));
        }
    }
    m
}

/// The header lines the host wheel's METADATA gains.
pub fn host_headers(version: &str, prefix: &str, wheels: &[DeviceWheel], bootstrap: bool) -> Vec<String> {
    let mut out = Vec::new();
    if bootstrap {
        out.push("Requires-Dist: rocm-bootstrap".to_string());
    }
    let req = |key: &str, extra: &str| format!("Requires-Dist: {} == {version}; extra == \"{extra}\"", dist_name(prefix, key));
    for w in wheels.iter().filter(|w| w.is_target()) {
        let extra = format!("device-{}", w.key);
        out.push(format!("Provides-Extra: {extra}"));
        out.push(req(&w.key, &extra));
        for p in parents_written(&w.key, wheels) {
            out.push(req(&p, &extra));
        }
    }
    if !wheels.is_empty() {
        out.push("Provides-Extra: device-all".into());
        let all: BTreeSet<String> = wheels.iter().map(|w| dist_name(prefix, &w.key)).collect();
        for d in all {
            out.push(format!("Requires-Dist: {d} == {version}; extra == \"device-all\""));
        }
    }
    out
}

/// `Tag:` lines for the host wheel's tags, every combination of its
/// compressed tag sets (`py2.py3-none-any` → two lines).
pub fn tag_lines(wn: &WheelName) -> String {
    let mut s = String::new();
    for py in wn.python.split('.') {
        for abi in wn.abi.split('.') {
            for plat in wn.platform.split('.') {
                s.push_str(&format!("Tag: {py}-{abi}-{plat}\n"));
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// The worked example of docs/research/wheels.md §3.5 (objects for
    /// gfx1100, gfx1151 and gfx90a, an AOTriton gfx11 family directory),
    /// with the METADATA lines written out by hand.
    #[test]
    fn torch_like_example() {
        let w = group(&names(&["gfx1100", "gfx1151", "gfx11", "gfx90a"]));
        let keys: Vec<&str> = w.iter().map(|w| w.key.as_str()).collect();
        assert_eq!(keys, ["gfx11", "gfx1100", "gfx1151", "gfx90a"]);
        let p = "torch-device";
        assert_eq!(
            device_metadata("torch", "2.9", p, &w[1], &w, &[]),
            "Metadata-Version: 2.4\nName: torch-device-gfx1100\nVersion: 2.9\n\
             Summary: torch's GPU code objects and database files for gfx1100 (kpack archives)\n\
             Requires-Dist: torch == 2.9\nRequires-Dist: torch-device-gfx11 == 2.9\n"
        );
        let requires = |w: &DeviceWheel, all| -> Vec<String> {
            device_metadata("torch", "2.9", p, w, all, &[]).lines().filter_map(|l| l.strip_prefix("Requires-Dist: ")).map(str::to_string).collect()
        };
        assert_eq!(requires(&w[0], &w), ["torch == 2.9"], "a family wheel has no parents");
        assert_eq!(requires(&w[3], &w), ["torch == 2.9"], "parents not written are not required");
        let sdk = ["rocm-sdk-device-@GFXARCH@ == 7.1".to_string(), "extra-lib".to_string()];
        let with_sdk = |w: &DeviceWheel| -> Vec<String> {
            device_metadata("torch", "2.9", p, w, &[], &sdk).lines().filter_map(|l| l.strip_prefix("Requires-Dist: ")).map(str::to_string).collect()
        };
        assert_eq!(with_sdk(&w[1]), ["torch == 2.9", "rocm-sdk-device-gfx1100 == 7.1", "extra-lib"]);
        assert_eq!(with_sdk(&w[0]), ["torch == 2.9", "extra-lib"], "no @GFXARCH@ line in a family wheel");
        assert_eq!(
            host_headers("2.9", p, &w, true),
            [
                "Requires-Dist: rocm-bootstrap",
                "Provides-Extra: device-gfx1100",
                "Requires-Dist: torch-device-gfx1100 == 2.9; extra == \"device-gfx1100\"",
                "Requires-Dist: torch-device-gfx11 == 2.9; extra == \"device-gfx1100\"",
                "Provides-Extra: device-gfx1151",
                "Requires-Dist: torch-device-gfx1151 == 2.9; extra == \"device-gfx1151\"",
                "Requires-Dist: torch-device-gfx11 == 2.9; extra == \"device-gfx1151\"",
                "Provides-Extra: device-gfx90a",
                "Requires-Dist: torch-device-gfx90a == 2.9; extra == \"device-gfx90a\"",
                "Provides-Extra: device-all",
                "Requires-Dist: torch-device-gfx11 == 2.9; extra == \"device-all\"",
                "Requires-Dist: torch-device-gfx1100 == 2.9; extra == \"device-all\"",
                "Requires-Dist: torch-device-gfx1151 == 2.9; extra == \"device-all\"",
                "Requires-Dist: torch-device-gfx90a == 2.9; extra == \"device-all\"",
            ]
        );
    }

    #[test]
    fn owners_generics_and_unlisted_targets() {
        let w = group(&names(&["gfx1250", "gfx1250-strict", "gfx12_0", "gfx12-generic", "gfx940", "gfx1201"]));
        let got: Vec<(&str, Option<Level>, Vec<&str>)> =
            w.iter().map(|w| (w.key.as_str(), w.level, w.artifacts.iter().map(String::as_str).collect())).collect();
        assert_eq!(
            got,
            [
                ("gfx1201", Some(Level::Target), vec!["gfx1201"]),
                ("gfx1250", Some(Level::Target), vec!["gfx1250", "gfx1250-strict"]),
                ("gfx12_0", Some(Level::SubFamily), vec!["gfx12_0", "gfx12-generic"]),
                ("gfx940", None, vec!["gfx940"]),
            ]
        );
        assert_eq!(dist_name("x-device", "gfx12_0"), "x-device-gfx12-0");
        let h = host_headers("1", "x-device", &w, false);
        assert!(h.contains(&"Requires-Dist: x-device-gfx12-0 == 1; extra == \"device-gfx1201\"".to_string()), "{h:#?}");
        assert!(h.contains(&"Provides-Extra: device-gfx940".to_string()) && !h.iter().any(|l| l == "Provides-Extra: device-gfx12_0"));
        let wn = WheelName::parse("a-1-py2.py3-none-linux_x86_64.whl").unwrap();
        assert_eq!(tag_lines(&wn), "Tag: py2-none-linux_x86_64\nTag: py3-none-linux_x86_64\n");
    }

    /// The SPIR-V wheel (docs/packaging.md, METADATA lines by hand): no
    /// extra of its own, not unlisted, no parents and no `@GFXARCH@` line;
    /// every target wheel and `device-<target>` extra requires it after
    /// its parents, and `device-all` requires it.
    #[test]
    fn spirv_wheel_is_required_by_every_target() {
        let w = group(&names(&["amdgcnspirv", "gfx1100", "gfx11", "gfx1030"]));
        let keys: Vec<(&str, bool, bool)> = w.iter().map(|w| (w.key.as_str(), w.is_spirv(), w.is_unlisted())).collect();
        assert_eq!(keys, [("amdgcnspirv", true, false), ("gfx1030", false, false), ("gfx11", false, false), ("gfx1100", false, false)]);
        let p = "lib-device";
        let sdk = ["rocm-sdk-device-@GFXARCH@ == 7.1".to_string()];
        assert_eq!(
            device_metadata("lib", "1", p, &w[0], &w, &sdk),
            "Metadata-Version: 2.4\nName: lib-device-amdgcnspirv\nVersion: 1\n\
             Summary: lib's portable SPIR-V code objects (amdgcnspirv), JIT-compiled for any GPU without a native object (kpack archives)\n\
             Requires-Dist: lib == 1\n"
        );
        assert!(
            device_metadata("lib", "1", p, &w[3], &w, &sdk).ends_with(
                "Requires-Dist: lib == 1\nRequires-Dist: rocm-sdk-device-gfx1100 == 7.1\nRequires-Dist: lib-device-gfx11 == 1\nRequires-Dist: lib-device-amdgcnspirv == 1\n"
            ),
            "a target wheel brings the SPIR-V wheel"
        );
        assert!(device_metadata("lib", "1", p, &w[2], &w, &[]).ends_with("Requires-Dist: lib == 1\n"), "a family wheel does not");
        assert_eq!(
            host_headers("1", p, &w, false),
            [
                "Provides-Extra: device-gfx1030",
                "Requires-Dist: lib-device-gfx1030 == 1; extra == \"device-gfx1030\"",
                "Requires-Dist: lib-device-amdgcnspirv == 1; extra == \"device-gfx1030\"",
                "Provides-Extra: device-gfx1100",
                "Requires-Dist: lib-device-gfx1100 == 1; extra == \"device-gfx1100\"",
                "Requires-Dist: lib-device-gfx11 == 1; extra == \"device-gfx1100\"",
                "Requires-Dist: lib-device-amdgcnspirv == 1; extra == \"device-gfx1100\"",
                "Provides-Extra: device-all",
                "Requires-Dist: lib-device-amdgcnspirv == 1; extra == \"device-all\"",
                "Requires-Dist: lib-device-gfx1030 == 1; extra == \"device-all\"",
                "Requires-Dist: lib-device-gfx11 == 1; extra == \"device-all\"",
                "Requires-Dist: lib-device-gfx1100 == 1; extra == \"device-all\"",
            ]
        );
    }
}
