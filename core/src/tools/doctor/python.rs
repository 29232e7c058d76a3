//! Which installed Python distribution would bring a missing archive: the
//! host wheels `split-wheel` (and upstream's wheel splitter) write declare
//! one extra per GPU, `device-<target>`, requiring the device wheel that
//! holds its archives. `doctor` reads the installed `*.dist-info`
//! (`RECORD` says which files a distribution installed, `METADATA` which
//! extras it offers) to name the `pip install` that fixes a missing archive.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::formats::target::{compatible_targets, generic_of, TargetId};
use crate::tools::resolve::push_lexically;

/// One installed distribution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Distribution {
    pub name: String,
    pub version: String,
    /// `Provides-Extra` values, in METADATA order.
    pub extras: Vec<String>,
    /// Extra → the requirement it adds (`hiplib-device-gfx90a==1.2`).
    pub requires: BTreeMap<String, String>,
}

/// What `doctor` suggests for a missing archive of a Python package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provider {
    /// The distribution that installed the binary.
    pub dist: String,
    pub version: String,
    /// The extra that brings the device's archives, if the distribution
    /// offers one.
    pub extra: Option<String>,
    /// What that extra requires (the device wheel), when METADATA says.
    pub requirement: Option<String>,
    /// The `device-*` extras the distribution does offer.
    pub offered: Vec<String>,
}

impl Provider {
    /// One clause for a finding's message.
    pub fn advice(&self) -> String {
        match (&self.extra, &self.requirement) {
            (Some(e), Some(r)) => format!("pip install '{}[{e}]' brings it ({r})", self.dist),
            (Some(e), None) => format!("pip install '{}[{e}]' brings it", self.dist),
            (None, _) if self.offered.is_empty() => format!("{} {} was installed without device extras", self.dist, self.version),
            (None, _) => format!("{} {} offers no extra for this GPU (it offers: {})", self.dist, self.version, self.offered.join(", ")),
        }
    }
}

/// The installed distributions found, keyed by every file their RECORD
/// lists (absolute, lexically normalised).
#[derive(Debug, Default)]
pub struct Installed {
    dists: Vec<Distribution>,
    files: BTreeMap<PathBuf, usize>,
}

/// `a/b/../c` → `a/c`, without touching the file system (RECORD paths
/// may climb out of site-packages to `bin/`).
fn normalise(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    push_lexically(&mut out, p.components());
    out
}

/// The value of METADATA header `key` lines (the header block only).
fn headers<'a>(metadata: &'a str, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    metadata
        .lines()
        .take_while(|l| !l.is_empty())
        .filter_map(move |l| l.split_once(':').filter(|(k, _)| k.trim().eq_ignore_ascii_case(key)).map(|(_, v)| v.trim()))
}

/// Parses METADATA; `None` without a Name.
pub fn parse_metadata(text: &str) -> Option<Distribution> {
    let name = headers(text, "Name").next()?.to_string();
    let version = headers(text, "Version").next().unwrap_or_default().to_string();
    let extras: Vec<String> = headers(text, "Provides-Extra").map(str::to_string).collect();
    let mut requires = BTreeMap::new();
    for r in headers(text, "Requires-Dist") {
        // `NAME==V; extra == "device-gfx90a"` (either quote).
        let Some((req, marker)) = r.split_once(';') else { continue };
        let m = marker.replace('\'', "\"");
        if let Some(e) = m.split("extra").nth(1).and_then(|rest| rest.split('"').nth(1)) {
            requires.entry(e.to_string()).or_insert_with(|| req.trim().to_string());
        }
    }
    Some(Distribution { name, version, extras, requires })
}

impl Installed {
    /// Reads every `*.dist-info` directly in `site` (a site-packages or a
    /// `pip install --target` directory).
    pub fn add_site(&mut self, site: &Path) {
        let Ok(rd) = std::fs::read_dir(site) else { return };
        let mut infos: Vec<PathBuf> = rd.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "dist-info") && p.is_dir()).collect();
        infos.sort();
        for info in infos {
            let Ok(meta) = std::fs::read_to_string(info.join("METADATA")) else { continue };
            let Some(dist) = parse_metadata(&meta) else {
                log::debug!("{}: METADATA without a Name", info.display());
                continue;
            };
            let idx = self.dists.len();
            self.dists.push(dist);
            let record = std::fs::read_to_string(info.join("RECORD")).unwrap_or_default();
            for line in record.lines() {
                // `path,hash,size`; a path holding commas is quoted (csv).
                let path = match line.strip_prefix('"') {
                    Some(q) => q.split_once('"').map_or(q, |(p, _)| p),
                    None => line.split(',').next().unwrap_or_default(),
                };
                if !path.is_empty() {
                    self.files.insert(normalise(&site.join(path)), idx);
                }
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.dists.is_empty()
    }

    /// The distribution that installed `binary` (an absolute path as found
    /// under the site directory) and the extra that would bring the code
    /// for `device`: `device-<processor>`, else `device-<package owner>`,
    /// else one named after a target the device accepts or its generic
    /// family, else `device-all`.
    pub fn provider(&self, binary: &Path, device: &TargetId) -> Option<Provider> {
        let d = &self.dists[*self.files.get(&normalise(binary))?];
        let mut names = vec![device.processor.clone()];
        // The family layout's extras name the package owner of a target
        // that shares another's wheel (`gfx1250-strict` → `device-gfx1250`).
        names.extend(crate::packaging::families::table().bundle_of(&device.processor).filter(|o| *o != device.processor));
        names.extend(compatible_targets(&device.to_string()));
        names.extend(generic_of(&device.processor).map(str::to_string));
        names.push("all".into());
        let extra = names.iter().map(|n| format!("device-{n}")).find(|e| d.extras.contains(e));
        let requirement = extra.as_ref().and_then(|e| d.requires.get(e).cloned());
        let offered = d.extras.iter().filter(|e| e.starts_with("device-")).cloned().collect();
        Some(Provider { dist: d.name.clone(), version: d.version.clone(), extra, requirement, offered })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_extras_and_their_requirements() {
        let text = "Metadata-Version: 2.1\nName: hiplib\nVersion: 1.2\nProvides-Extra: device-gfx90a\nRequires-Dist: hiplib-device-gfx90a==1.2; extra == \"device-gfx90a\"\nProvides-Extra: device-all\nRequires-Dist: hiplib-device-gfx90a==1.2; extra == 'device-all'\n\nProvides-Extra: not-a-header\n";
        let d = parse_metadata(text).unwrap();
        assert_eq!(d.name, "hiplib");
        assert_eq!(d.extras, ["device-gfx90a", "device-all"]);
        assert_eq!(d.requires.get("device-gfx90a").map(String::as_str), Some("hiplib-device-gfx90a==1.2"));
        assert_eq!(d.requires.get("device-all").map(String::as_str), Some("hiplib-device-gfx90a==1.2"));
        assert_eq!(parse_metadata("Version: 1\n"), None);
    }

    #[test]
    fn the_extra_for_a_device() {
        let t = tempfile::tempdir().unwrap();
        let info = t.path().join("hiplib-1.2.dist-info");
        std::fs::create_dir_all(&info).unwrap();
        std::fs::write(
            info.join("METADATA"),
            "Name: hiplib\nVersion: 1.2\nProvides-Extra: device-gfx1030\nRequires-Dist: hiplib-device-gfx1030==1.2; extra == \"device-gfx1030\"\nProvides-Extra: device-gfx90a\nProvides-Extra: device-gfx1250\n",
        )
        .unwrap();
        std::fs::write(info.join("RECORD"), "hiplib/lib/libtwo.so,sha256=x,1\n\"hiplib/odd,name.so\",,\n").unwrap();
        let mut i = Installed::default();
        i.add_site(t.path());
        let lib = t.path().join("hiplib/lib/../lib/libtwo.so");
        let p = i.provider(&lib, &TargetId::parse("gfx1030").unwrap()).unwrap();
        assert_eq!(p.advice(), "pip install 'hiplib[device-gfx1030]' brings it (hiplib-device-gfx1030==1.2)");
        let p = i.provider(&lib, &TargetId::parse("gfx90a:sramecc+:xnack-").unwrap()).unwrap();
        assert_eq!(p.advice(), "pip install 'hiplib[device-gfx90a]' brings it");
        let p = i.provider(&lib, &TargetId::parse("gfx1100").unwrap()).unwrap();
        assert_eq!(p.advice(), "hiplib 1.2 offers no extra for this GPU (it offers: device-gfx1030, device-gfx90a, device-gfx1250)");
        let p = i.provider(&lib, &TargetId::parse("gfx1250-strict").unwrap()).unwrap();
        assert_eq!(p.advice(), "pip install 'hiplib[device-gfx1250]' brings it", "gfx1250-strict is packaged with gfx1250");
        assert!(i.provider(&t.path().join("hiplib/odd,name.so"), &TargetId::parse("gfx1030").unwrap()).is_some());
        assert!(i.provider(&t.path().join("other.so"), &TargetId::parse("gfx1030").unwrap()).is_none());
    }
}
