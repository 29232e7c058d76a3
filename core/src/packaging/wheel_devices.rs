//! Writing device wheels, in either layout of `split-wheel`: the
//! processor layout's wheel per processor, and the family layout's wheel
//! per bundle ([`super::wheel_family`]), which may merge several split
//! artifacts (`gfx1250` and `gfx1250-strict`) into one wheel.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::manifest::ARTIFACT_MANIFEST;
use super::wheel_zip::{escape, Entries, Source, WheelName};
use super::{wheel_family, SplitError};
use crate::formats::target::SPIRV_ARCH;

/// The host METADATA lines of the processor layout: one extra per
/// processor, each also requiring the portable SPIR-V wheel when the split
/// writes one (it serves every GPU; it has no extra of its own), and
/// `device-all` requiring every device wheel.
pub(super) fn processor_headers(version: &str, prefix: &str, devices: &[String]) -> Vec<String> {
    let spirv = devices.iter().any(|p| p == SPIRV_ARCH);
    let mut extra = Vec::new();
    for p in devices.iter().filter(|p| *p != SPIRV_ARCH) {
        extra.push(format!("Provides-Extra: device-{p}"));
        extra.push(format!("Requires-Dist: {prefix}-{p}=={version}; extra == \"device-{p}\""));
        if spirv {
            extra.push(format!("Requires-Dist: {prefix}-{SPIRV_ARCH}=={version}; extra == \"device-{p}\""));
        }
    }
    if !devices.is_empty() {
        extra.push("Provides-Extra: device-all".into());
        for p in devices {
            extra.push(format!("Requires-Dist: {prefix}-{p}=={version}; extra == \"device-all\""));
        }
    }
    extra
}

/// What writing a device wheel needs to know about the split.
pub(super) struct DeviceCtx<'a> {
    pub(super) name: &'a str,
    pub(super) version: &'a str,
    pub(super) prefix: &'a str,
    pub(super) overlay: &'a str,
    pub(super) wn: &'a WheelName,
    pub(super) split_dir: &'a Path,
    pub(super) component: &'a str,
    pub(super) output: &'a Path,
    pub(super) stage: &'a Path,
    /// Extra `Requires-Dist` lines of family-layout device wheels.
    pub(super) requires: &'a [String],
}

impl DeviceCtx<'_> {
    fn artifact(&self, a: &str) -> PathBuf {
        self.split_dir.join(format!("{}_{a}", self.component))
    }

    /// Writes `e` as `file` with dist-info `di`; returns its OUTPUT path.
    fn finish(&self, e: Entries, file: String, di: &str) -> Result<PathBuf, SplitError> {
        let path = self.output.join(&file);
        if path.exists() {
            return Err(SplitError::Usage(format!("{}: already exists", path.display())));
        }
        e.write(&self.stage.join(&file), di)?;
        Ok(path)
    }

    /// The processor layout's wheel for processor `p`, as kpackfs wrote
    /// it before the family layout.
    pub(super) fn processor_wheel(&self, p: &str) -> Result<PathBuf, SplitError> {
        let (name, version) = (self.name, self.version);
        let dn = format!("{}-{p}", self.prefix);
        let esc = escape(&dn);
        let di = format!("{esc}-{version}.dist-info");
        let mut e = Entries::default();
        e.add_tree(&self.artifact(p), self.overlay, &|rel| rel == ARTIFACT_MANIFEST);
        let summary =
            if p == SPIRV_ARCH { wheel_family::summary(name, p) } else { format!("{name}'s GPU code objects and database files for {p} (kpack archives)") };
        let meta = format!("Metadata-Version: 2.1\nName: {dn}\nVersion: {version}\nSummary: {summary}\nRequires-Dist: {name}=={version}\n");
        e.0.push((format!("{di}/METADATA"), Source::Bytes(meta.into_bytes(), 0o644)));
        let mut tags = String::new();
        for plat in self.wn.platform.split('.') {
            tags.push_str(&format!("Tag: py3-none-{plat}\n"));
        }
        let wheel_file = format!("Wheel-Version: 1.0\nGenerator: kpackfs {}\nRoot-Is-Purelib: false\n{tags}", env!("CARGO_PKG_VERSION"));
        e.0.push((format!("{di}/WHEEL"), Source::Bytes(wheel_file.into_bytes(), 0o644)));
        self.finish(e, format!("{esc}-{version}-py3-none-{}.whl", self.wn.platform), &di)
    }

    /// The family layout's wheel for bundle `g`: its artifacts' files (one
    /// copy of a file two artifacts hold alike; different files at one
    /// path are refused), the host's tags, parents in METADATA.
    pub(super) fn family_wheel(&self, g: &wheel_family::DeviceWheel, all: &[wheel_family::DeviceWheel]) -> Result<PathBuf, SplitError> {
        let version = self.version;
        let dn = wheel_family::dist_name(self.prefix, &g.key);
        let esc = escape(&dn);
        let di = format!("{esc}-{version}.dist-info");
        let mut files: BTreeMap<String, (String, Source)> = BTreeMap::new();
        for a in &g.artifacts {
            let mut one = Entries::default();
            one.add_tree(&self.artifact(a), self.overlay, &|rel| rel == ARTIFACT_MANIFEST);
            for (n, src) in one.0 {
                if let Some((other, Source::File(prev))) = files.get(&n) {
                    let Source::File(this) = &src else { continue };
                    let same = std::fs::read(prev).map_err(|e| SplitError::io(prev, e))? == std::fs::read(this).map_err(|e| SplitError::io(this, e))?;
                    if !same {
                        return Err(SplitError::Usage(format!(
                            "{n}: {other} and {a} hold different files at this path, and the family layout packages both in {dn}; split with --layout processor"
                        )));
                    }
                    continue;
                }
                files.insert(n, (a.clone(), src));
            }
        }
        let mut e = Entries(files.into_iter().map(|(n, (_, src))| (n, src)).collect());
        let meta = wheel_family::device_metadata(self.name, version, self.prefix, g, all, self.requires);
        e.0.push((format!("{di}/METADATA"), Source::Bytes(meta.into_bytes(), 0o644)));
        let tags = wheel_family::tag_lines(self.wn);
        let wheel_file = format!("Wheel-Version: 1.0\nGenerator: kpackfs {}\nRoot-Is-Purelib: false\n{tags}", env!("CARGO_PKG_VERSION"));
        e.0.push((format!("{di}/WHEEL"), Source::Bytes(wheel_file.into_bytes(), 0o644)));
        if !self.overlay.is_empty() {
            e.0.push((format!("{di}/top_level.txt"), Source::Bytes(format!("{}\n", self.overlay).into_bytes(), 0o644)));
        }
        let wn = self.wn;
        self.finish(e, format!("{esc}-{version}-{}-{}-{}.whl", wn.python, wn.abi, wn.platform), &di)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// The names and bytes of a written wheel's entries.
    fn entries(wheel: &Path) -> Vec<(String, Vec<u8>)> {
        let mut z = zip::ZipArchive::new(std::fs::File::open(wheel).unwrap()).unwrap();
        (0..z.len())
            .map(|i| {
                let mut e = z.by_index(i).unwrap();
                let mut b = Vec::new();
                e.read_to_end(&mut b).unwrap();
                (e.name().unwrap().into_owned(), b)
            })
            .collect()
    }

    /// Two artifacts of one owner (gfx1250, gfx1250-strict) holding the
    /// same file are packaged once; holding different bytes at one path,
    /// they are refused, naming both.
    #[test]
    fn merged_artifacts_share_alike_files_and_refuse_different_ones() {
        let t = tempfile::tempdir().unwrap();
        let (split, out, stage) = (t.path().join("split"), t.path().join("out"), t.path().join("stage"));
        let put = |art: &str, rel: &str, data: &[u8]| {
            let p = split.join(format!("c_{art}")).join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, data).unwrap();
        };
        put("gfx1250", ".kpack/c_gfx1250.kpack", b"a");
        put("gfx1250-strict", ".kpack/c_gfx1250-strict.kpack", b"b");
        put("gfx1250", "db/shared.dat", b"same");
        put("gfx1250-strict", "db/shared.dat", b"same");
        std::fs::create_dir_all(&stage).unwrap();
        let wn = WheelName::parse("pkg-1.0-cp312-cp312-linux_x86_64.whl").unwrap();
        let ctx = DeviceCtx {
            name: "pkg",
            version: "1.0",
            prefix: "pkg-device",
            overlay: "pkg",
            wn: &wn,
            split_dir: &split,
            component: "c",
            output: &out,
            stage: &stage,
            requires: &[],
        };
        let groups = wheel_family::group(&["gfx1250".to_string(), "gfx1250-strict".to_string()]);
        assert_eq!(groups.len(), 1);
        let path = ctx.family_wheel(&groups[0], &groups).unwrap();
        assert_eq!(path, out.join("pkg_device_gfx1250-1.0-cp312-cp312-linux_x86_64.whl"));
        let got = entries(&stage.join(path.file_name().unwrap()));
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "pkg/.kpack/c_gfx1250-strict.kpack",
                "pkg/.kpack/c_gfx1250.kpack",
                "pkg/db/shared.dat",
                "pkg_device_gfx1250-1.0.dist-info/METADATA",
                "pkg_device_gfx1250-1.0.dist-info/WHEEL",
                "pkg_device_gfx1250-1.0.dist-info/top_level.txt",
                "pkg_device_gfx1250-1.0.dist-info/RECORD",
            ]
        );
        let wheel_file = &got[4].1;
        assert!(String::from_utf8_lossy(wheel_file).ends_with("Root-Is-Purelib: false\nTag: cp312-cp312-linux_x86_64\n"));

        put("gfx1250-strict", "db/shared.dat", b"different");
        let stage2 = t.path().join("stage2");
        std::fs::create_dir_all(&stage2).unwrap();
        let ctx = DeviceCtx { stage: &stage2, ..ctx };
        let err = ctx.family_wheel(&groups[0], &groups).unwrap_err().to_string();
        assert!(err.contains("pkg/db/shared.dat: gfx1250 and gfx1250-strict hold different files"), "{err}");
    }

    /// The processor layout's extras with a SPIR-V artifact (by hand): no
    /// `device-amdgcnspirv`; every processor's extra and `device-all`
    /// require the SPIR-V wheel. Without one, the lines are as before.
    #[test]
    fn processor_extras_require_the_spirv_wheel() {
        let d = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            processor_headers("1", "x-device", &d(&["amdgcnspirv", "gfx90a"])),
            [
                "Provides-Extra: device-gfx90a",
                "Requires-Dist: x-device-gfx90a==1; extra == \"device-gfx90a\"",
                "Requires-Dist: x-device-amdgcnspirv==1; extra == \"device-gfx90a\"",
                "Provides-Extra: device-all",
                "Requires-Dist: x-device-amdgcnspirv==1; extra == \"device-all\"",
                "Requires-Dist: x-device-gfx90a==1; extra == \"device-all\"",
            ]
        );
        assert_eq!(
            processor_headers("1", "x-device", &d(&["gfx90a"])),
            [
                "Provides-Extra: device-gfx90a",
                "Requires-Dist: x-device-gfx90a==1; extra == \"device-gfx90a\"",
                "Provides-Extra: device-all",
                "Requires-Dist: x-device-gfx90a==1; extra == \"device-all\"",
            ]
        );
    }
}
