//! `kpackfs archs SOURCE`: which GPU targets an install carries, from fat
//! binaries (bundle headers only), database files and existing archives.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::bundle;
use crate::db::{self, DbArch};
use crate::elf::ElfFile;
use crate::host::{self, HostFormat};
use crate::source::{SourceKind, SourceTree};
use crate::view::archive_name_target;

/// Per-target totals.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TargetUse {
    pub binaries: u64,
    pub code_objects: u64,
    pub bytes: u64,
    pub db_files: u64,
    pub archives: u64,
}

#[derive(Debug, Default)]
pub struct ArchReport {
    pub fat_binaries: u64,
    pub targets: BTreeMap<String, TargetUse>,
    /// Fat binaries whose bundles could not be read.
    pub unreadable: Vec<(PathBuf, String)>,
}

impl fmt::Display for ArchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{:<28} {:>9} {:>13} {:>14} {:>9} {:>9}", "target", "binaries", "code objects", "bytes", "db files", "archives")?;
        for (t, u) in &self.targets {
            writeln!(f, "{t:<28} {:>9} {:>13} {:>14} {:>9} {:>9}", u.binaries, u.code_objects, u.bytes, u.db_files, u.archives)?;
        }
        writeln!(f, "{} fat binaries", self.fat_binaries)?;
        for (p, e) in &self.unreadable {
            writeln!(f, "unreadable: {}: {e}", p.display())?;
        }
        Ok(())
    }
}

fn fat_section(f: &std::fs::File) -> Option<(u64, u64)> {
    match host::detect(f)? {
        HostFormat::Elf => {
            let elf = ElfFile::parse(f).ok()?;
            let s = elf.fatbin().copied()?;
            (s.sh_type != 8 && s.offset.checked_add(s.size)? <= elf.len).then_some((s.offset, s.size))
        }
        HostFormat::Pe => crate::coff::fat_section(f),
    }
}

/// Walks `root` (never following symlinks) and tallies targets.
pub fn archs(root: &Path) -> io::Result<ArchReport> {
    let tree = SourceTree::open(root)?;
    let mut report = ArchReport::default();
    let mut stack = vec![PathBuf::new()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = tree.read_dir(&dir) else { continue };
        for (name, _) in entries {
            let rel = dir.join(&name);
            let Ok(st) = tree.stat(&rel) else { continue };
            match st.kind {
                SourceKind::Dir => stack.push(rel),
                SourceKind::File => {
                    let rel_s = rel.to_string_lossy().replace('\\', "/");
                    if rel.parent().and_then(Path::file_name).is_some_and(|n| n == ".kpack") {
                        if let Some(t) = archive_name_target(&name.to_string_lossy()) {
                            report.targets.entry(t.to_string()).or_default().archives += 1;
                            continue;
                        }
                    }
                    if let Some(a) = db::classify(&rel_s) {
                        let key = match a {
                            DbArch::Processor { processor, xnack: Some(x) } => format!("{processor}:xnack{}", if x { '+' } else { '-' }),
                            DbArch::Processor { processor, xnack: None } => processor,
                            DbArch::Family(p) => format!("{p}*"),
                        };
                        report.targets.entry(key).or_default().db_files += 1;
                        continue;
                    }
                    let Ok((f, _)) = tree.open_file(&rel) else { continue };
                    let Some((off, size)) = fat_section(&f) else { continue };
                    report.fat_binaries += 1;
                    let objs = match bundle::fatbin_objects(&f, off, off + size) {
                        Ok(o) => o,
                        Err(e) => {
                            report.unreadable.push((rel.clone(), e.to_string()));
                            continue;
                        }
                    };
                    let mut seen = std::collections::BTreeSet::new();
                    for o in objs {
                        let u = report.targets.entry(o.arch.clone()).or_default();
                        u.code_objects += 1;
                        u.bytes += o.location.len();
                        if seen.insert(o.arch.clone()) {
                            u.binaries += 1;
                        }
                    }
                }
                _ => {}
            }
        }
    }
    Ok(report)
}
