//! Wheel files as zips: the name's fields, PEP 427 name escaping, and a
//! deterministic writer with a fresh RECORD — shared by the host wheel
//! ([`super::wheel`]) and the device wheels ([`super::wheel_devices`]).

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, DateTime, ZipWriter};

use super::record::{b64url, csv_field};
use super::SplitError;

/// `{dist}-{version}(-{build})?-{python}-{abi}-{platform}.whl`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WheelName {
    pub dist: String,
    pub version: String,
    pub build: Option<String>,
    pub python: String,
    pub abi: String,
    pub platform: String,
}

impl WheelName {
    pub fn parse(file_name: &str) -> Option<WheelName> {
        let stem = file_name.strip_suffix(".whl")?;
        let p: Vec<&str> = stem.split('-').collect();
        let (dist, version, build, rest) = match p.len() {
            5 => (p[0], p[1], None, &p[2..]),
            6 => (p[0], p[1], Some(p[2].to_string()), &p[3..]),
            _ => return None,
        };
        if p.iter().any(|s| s.is_empty()) {
            return None;
        }
        Some(WheelName { dist: dist.into(), version: version.into(), build, python: rest[0].into(), abi: rest[1].into(), platform: rest[2].into() })
    }
}

/// A wheel-escaped distribution name (PEP 427: runs of `-_.` become `_`).
pub(super) fn escape(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if "-_.".contains(c) {
            if !out.ends_with('_') {
                out.push('_');
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A zip under construction: (name in the wheel, file on disk or bytes).
#[derive(Default)]
pub(super) struct Entries(pub(super) Vec<(String, Source)>);

pub(super) enum Source {
    File(PathBuf),
    Bytes(Vec<u8>, u32),
}

impl Entries {
    pub(super) fn add_tree(&mut self, root: &Path, under: &str, skip: &dyn Fn(&str) -> bool) {
        for rel in super::tree_files(root, false).iter().map(|p| super::slash(p)) {
            if !skip(&rel) {
                let name = if under.is_empty() { rel.clone() } else { format!("{under}/{rel}") };
                self.0.push((name, Source::File(root.join(&rel))));
            }
        }
    }

    /// Writes the wheel with a fresh RECORD at `dist_info/RECORD`.
    pub(super) fn write(mut self, path: &Path, dist_info: &str) -> Result<(), SplitError> {
        use sha2::Digest;
        let record_name = format!("{dist_info}/RECORD");
        self.0.retain(|(n, _)| *n != record_name);
        // Package files first, then dist-info, each sorted: pip and auditors
        // expect the metadata at the end.
        self.0.sort_by(|a, b| (a.0.starts_with(&format!("{dist_info}/")), &a.0).cmp(&(b.0.starts_with(&format!("{dist_info}/")), &b.0)));
        let zerr = |e: zip::result::ZipError| SplitError::Archive(path.to_path_buf(), e.to_string());
        let out = File::options().write(true).create_new(true).open(path).map_err(|e| SplitError::io(path, e))?;
        let mut z = ZipWriter::new(io::BufWriter::new(out));
        let mut record = String::new();
        let mut buf = vec![0u8; 1 << 20];
        for (name, src) in &self.0 {
            let (mode, len, mut reader): (u32, u64, Box<dyn Read>) = match src {
                Source::File(p) => {
                    let f = File::open(p).map_err(|e| SplitError::io(p, e))?;
                    let md = f.metadata().map_err(|e| SplitError::io(p, e))?;
                    (perm_of(&md), md.len(), Box::new(f))
                }
                Source::Bytes(b, m) => (*m, b.len() as u64, Box::new(io::Cursor::new(b.clone()))),
            };
            let stored = name.ends_with(".kpack") && is_zstd_archive(src);
            let opts = SimpleFileOptions::default()
                .compression_method(if stored { CompressionMethod::Stored } else { CompressionMethod::Deflated })
                .last_modified_time(DateTime::default())
                .unix_permissions(mode)
                .large_file(len >= u64::from(u32::MAX));
            z.start_file(name.as_str(), opts).map_err(zerr)?;
            let mut h = sha2::Sha256::new();
            loop {
                let n = reader.read(&mut buf).map_err(|e| SplitError::io(path, e))?;
                if n == 0 {
                    break;
                }
                h.update(&buf[..n]);
                z.write_all(&buf[..n]).map_err(|e| SplitError::io(path, e))?;
            }
            record.push_str(&format!("{},sha256={},{len}\n", csv_field(name), b64url(&h.finalize())));
        }
        record.push_str(&format!("{},,\n", csv_field(&record_name)));
        z.start_file(
            record_name.as_str(),
            SimpleFileOptions::default().compression_method(CompressionMethod::Deflated).last_modified_time(DateTime::default()).unix_permissions(0o644),
        )
        .map_err(zerr)?;
        z.write_all(record.as_bytes()).map_err(|e| SplitError::io(path, e))?;
        let w = z.finish().map_err(zerr)?;
        // No fsync, as cp, tar and pip do not: the staging directory is
        // what keeps a failed run from leaving partial output behind.
        w.into_inner().map_err(|e| SplitError::io(path, e.into_error()))?;
        Ok(())
    }
}

pub(super) fn is_zstd_archive(src: &Source) -> bool {
    let Source::File(p) = src else { return false };
    let Ok(f) = File::open(p) else { return false };
    crate::formats::kpack::Archive::open(&f).is_ok_and(|a| a.toc.scheme_name() == crate::formats::kpack::SCHEME_ZSTD)
}

#[cfg(unix)]
pub(super) fn perm_of(md: &std::fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    md.permissions().mode() & 0o777
}

#[cfg(not(unix))]
pub(super) fn perm_of(_md: &std::fs::Metadata) -> u32 {
    0o644
}
