//! The two manifests of split artifacts.
//!
//! * `artifact_manifest.txt`: the prefixes (install roots) an artifact
//!   holds, one per line — the build system's own format, which the split
//!   reads from its input and writes into every output artifact.
//! * `<component>.kpm` in the generic artifact's `.kpack/` directory: which
//!   archive each target has, with its size, entry count and SHA-256. The
//!   runtime no longer reads it (archives are found by `@GFXARCH@`
//!   expansion); it is what `verify` checks archives against, so a
//!   tampered or missing archive is caught, and what `recombine` merges
//!   when shards built for different targets meet.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use crate::formats::msgpack::{self, Value};

use super::SplitError;

pub const ARTIFACT_MANIFEST: &str = "artifact_manifest.txt";

/// The prefixes of the artifact at `dir`, if it has a manifest. `.` stands
/// for the artifact's root and becomes `""`. A prefix that could leave the
/// artifact is refused.
pub fn read_artifact_manifest(dir: &Path) -> Result<Option<Vec<String>>, SplitError> {
    let path = dir.join(ARTIFACT_MANIFEST);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(SplitError::io(&path, e)),
    };
    let mut out: Vec<String> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let p = line.trim_end_matches('/');
        let bad = line.starts_with('/') || p.contains('\\') || p.split('/').any(|c| c == ".." || c.is_empty());
        if bad {
            return Err(SplitError::Usage(format!("{}:{}: prefix {line:?} must be a relative path inside the artifact", path.display(), n + 1)));
        }
        let p = if p == "." { String::new() } else { p.trim_start_matches("./").to_string() };
        if !out.contains(&p) {
            out.push(p);
        }
    }
    if out.is_empty() {
        return Err(SplitError::Usage(format!("{}: lists no prefix", path.display())));
    }
    Ok(Some(out))
}

pub fn write_artifact_manifest(dir: &Path, prefixes: &[String]) -> io::Result<()> {
    let mut text = String::new();
    for p in prefixes {
        text.push_str(if p.is_empty() { "." } else { p });
        text.push('\n');
    }
    std::fs::write(dir.join(ARTIFACT_MANIFEST), text)
}

/// One archive as the pack manifest lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KpmFile {
    /// File name in the `.kpack/` directory.
    pub file: String,
    pub size: u64,
    /// TOC entries (binary key × arch key).
    pub kernel_count: u64,
    /// Lowercase hex SHA-256 of the whole archive.
    pub sha256: String,
}

/// `<component>.kpm`: the component's archives by target.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PackManifest {
    pub component_name: String,
    /// The prefix whose `.kpack/` holds the archives (`""`: the root).
    pub prefix: String,
    pub kpack_files: BTreeMap<String, KpmFile>,
}

impl PackManifest {
    pub fn file_name(component: &str) -> String {
        format!("{component}.kpm")
    }

    /// MessagePack, keys in a fixed order, so equal manifests are equal bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut o = Vec::new();
        msgpack::write_map_len(&mut o, 4);
        msgpack::write_str(&mut o, "format_version");
        msgpack::write_uint(&mut o, 1);
        msgpack::write_str(&mut o, "component_name");
        msgpack::write_str(&mut o, &self.component_name);
        msgpack::write_str(&mut o, "prefix");
        msgpack::write_str(&mut o, &self.prefix);
        msgpack::write_str(&mut o, "kpack_files");
        msgpack::write_map_len(&mut o, self.kpack_files.len() as u32);
        for (arch, f) in &self.kpack_files {
            msgpack::write_str(&mut o, arch);
            msgpack::write_map_len(&mut o, 4);
            msgpack::write_str(&mut o, "file");
            msgpack::write_str(&mut o, &f.file);
            msgpack::write_str(&mut o, "size");
            msgpack::write_uint(&mut o, f.size);
            msgpack::write_str(&mut o, "kernel_count");
            msgpack::write_uint(&mut o, f.kernel_count);
            msgpack::write_str(&mut o, "sha256");
            msgpack::write_str(&mut o, &f.sha256);
        }
        o
    }

    pub fn decode(bytes: &[u8]) -> Result<PackManifest, String> {
        let v = msgpack::decode_first(bytes).map_err(|e| format!("not MessagePack: {e}"))?;
        let Value::Map(m) = v else { return Err("not a map".into()) };
        let s = |m: &[(Value, Value)], k: &str| -> Result<String, String> {
            msgpack::map_get(m, k).and_then(Value::as_str).map(str::to_string).ok_or_else(|| format!("no string {k}"))
        };
        let u =
            |m: &[(Value, Value)], k: &str| -> Result<u64, String> { msgpack::map_get(m, k).and_then(Value::as_u64).ok_or_else(|| format!("no integer {k}")) };
        if u(&m, "format_version")? != 1 {
            return Err("format_version is not 1".into());
        }
        let mut out = PackManifest { component_name: s(&m, "component_name")?, prefix: s(&m, "prefix")?, kpack_files: BTreeMap::new() };
        let Some(Value::Map(files)) = msgpack::map_get(&m, "kpack_files") else { return Err("no kpack_files map".into()) };
        for (k, v) in files {
            let (Some(arch), Value::Map(f)) = (k.as_str(), v) else { return Err("kpack_files entry is not string -> map".into()) };
            let file = KpmFile { file: s(f, "file")?, size: u(f, "size")?, kernel_count: u(f, "kernel_count")?, sha256: s(f, "sha256").unwrap_or_default() };
            if file.file.contains('/') || file.file.contains('\\') || file.file.starts_with('.') {
                return Err(format!("archive name {:?} is not a plain file name", file.file));
            }
            out.kpack_files.insert(arch.to_string(), file);
        }
        Ok(out)
    }

    /// Adds another shard's archives; the same target with a different
    /// archive is a conflict (two shards built the same target
    /// differently), which is refused rather than resolved by whoever
    /// comes last.
    pub fn merge(&mut self, other: &PackManifest) -> Result<(), String> {
        if other.component_name != self.component_name || other.prefix != self.prefix {
            return Err(format!(
                "manifests of {:?} (prefix {:?}) and {:?} (prefix {:?}) do not describe the same component",
                self.component_name, self.prefix, other.component_name, other.prefix
            ));
        }
        for (arch, f) in &other.kpack_files {
            match self.kpack_files.get(arch) {
                Some(g) if g != f => return Err(format!("target {arch}: shards hold different archives ({} vs {})", g.sha256, f.sha256)),
                Some(_) => {}
                None => {
                    self.kpack_files.insert(arch.clone(), f.clone());
                }
            }
        }
        Ok(())
    }
}

/// Lowercase hex SHA-256 of a file, read in 1 MiB pieces.
pub fn sha256_file(path: &Path) -> io::Result<String> {
    Ok(digest_file::<sha2::Sha256>(path)?.iter().map(|b| format!("{b:02x}")).collect())
}

/// The `D` digest of a file, read in 1 MiB pieces (archives and wheels'
/// files can be large: never the whole file in memory). One reader for the
/// manifests' hex SHA-256 and the RECORD check's base64 digests.
pub(crate) fn digest_file<D: sha2::Digest>(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut h = D::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(h.finalize().to_vec());
        }
        h.update(&buf[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kpm_round_trip_and_merge() {
        let f = |n: &str| KpmFile { file: format!("c_{n}.kpack"), size: 10, kernel_count: 2, sha256: "ab".repeat(32) };
        let mut a = PackManifest { component_name: "c".into(), prefix: "p/stage".into(), kpack_files: BTreeMap::from([("gfx90a".into(), f("gfx90a"))]) };
        let b = PackManifest { kpack_files: BTreeMap::from([("gfx1100".into(), f("gfx1100"))]), ..a.clone() };
        assert_eq!(PackManifest::decode(&a.encode()).unwrap(), a);
        a.merge(&b).unwrap();
        assert_eq!(a.kpack_files.len(), 2);
        let mut c = b.clone();
        c.kpack_files.get_mut("gfx1100").unwrap().sha256 = "cd".repeat(32);
        assert!(a.merge(&c).unwrap_err().contains("gfx1100"));
        let other = PackManifest { component_name: "d".into(), ..b };
        assert!(a.merge(&other).is_err());
    }

    /// `sha256_file` against digests from elsewhere: FIPS 180-2's "abc",
    /// and coreutils' `sha256sum` of 2 MiB + 3 bytes (`(i * 7) % 256`), so
    /// that a piece boundary of the 1 MiB reads is crossed twice.
    #[test]
    fn sha256_file_matches_independent_digests() {
        let dir = tempfile::tempdir().unwrap();
        let small = dir.path().join("abc");
        std::fs::write(&small, b"abc").unwrap();
        assert_eq!(sha256_file(&small).unwrap(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        let big = dir.path().join("big");
        std::fs::write(&big, (0..(1usize << 21) + 3).map(|i| (i * 7 % 256) as u8).collect::<Vec<u8>>()).unwrap();
        assert_eq!(sha256_file(&big).unwrap(), "fa76ddc2190a64cb8955c079e207644498a3eabc160e73a073e881c7ef2a76f7");
        assert!(sha256_file(&dir.path().join("missing")).is_err());
    }

    proptest::proptest! {
        /// Untrusted pack manifests (verify, recombine read them from
        /// artifacts) decode or fail; they never panic.
        #[test]
        fn kpm_decode_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = PackManifest::decode(&bytes);
        }

        /// Mutating a valid manifest never panics either.
        #[test]
        fn kpm_mutations_never_panic(at in 0usize..200, bit in 0u8..8) {
            let m = PackManifest { component_name: "c".into(), prefix: "p".into(), kpack_files: BTreeMap::from([("gfx90a".into(), KpmFile { file: "c_gfx90a.kpack".into(), size: 1, kernel_count: 1, sha256: "00".into() })]) };
            let mut b = m.encode();
            let i = at % b.len();
            b[i] ^= 1 << bit;
            let _ = PackManifest::decode(&b);
        }
    }

    #[test]
    fn manifest_prefixes() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(ARTIFACT_MANIFEST), "# c\nmath-libs/BLAS/rocBLAS/stage\n\n./x/stage/\n.\n").unwrap();
        assert_eq!(read_artifact_manifest(d.path()).unwrap().unwrap(), vec!["math-libs/BLAS/rocBLAS/stage", "x/stage", ""]);
        for bad in ["../up", "/abs", "a//b", "a\\b"] {
            std::fs::write(d.path().join(ARTIFACT_MANIFEST), bad).unwrap();
            assert!(read_artifact_manifest(d.path()).is_err(), "{bad}");
        }
        let e = tempfile::tempdir().unwrap();
        assert!(read_artifact_manifest(e.path()).unwrap().is_none());
    }
}
