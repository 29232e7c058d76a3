//! `kpackfs archs SOURCE`: which GPU targets an install carries, from fat
//! binaries (bundle headers only), database files and existing archives.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::bundle;
use crate::db::Rules;
use crate::host;
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

/// Walks `root` (never following symlinks) and tallies targets; `rules`
/// tell database files apart (the same table the view hides them by).
pub fn archs(root: &Path, rules: &Rules) -> io::Result<ArchReport> {
    archs_until(root, rules, &mut |_| false)
}

/// [`archs`], stopping as soon as `done` says the report so far answers
/// the caller's question (asked after each fat binary). The mount's
/// empty-selection check asks only "does any code object match?": on an
/// install that carries the selected target it stops at the first binary
/// that does, instead of reading (and, for compressed bundles, partly
/// decoding) every binary of a many-gigabyte tree at each mount.
pub fn archs_until(root: &Path, rules: &Rules, done: &mut dyn FnMut(&ArchReport) -> bool) -> io::Result<ArchReport> {
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
                    if rel.parent().and_then(Path::file_name).is_some_and(|n| n == ".kpack") {
                        if let Some(t) = archive_name_target(&name.to_string_lossy()) {
                            report.targets.entry(t.to_string()).or_default().archives += 1;
                            continue;
                        }
                    }
                    if let Some(a) = rules.classify(&rel) {
                        report.targets.entry(a.to_string()).or_default().db_files += 1;
                        continue;
                    }
                    let Ok((f, _)) = tree.open_file(&rel) else { continue };
                    let Some((off, size)) = host::fat_section(&f) else { continue };
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
                    if done(&report) {
                        return Ok(report);
                    }
                }
                _ => {}
            }
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Database files are counted per target with the rule table, the
    /// operator's rules included.
    /// A scan told to stop does so after the fat binary that answered it,
    /// and only then.
    #[test]
    fn stops_when_told() {
        let root = std::env::temp_dir().join(format!("kpackfs-archs-stop-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../test_assets/bin");
        for f in ["libtwo.so", "libmulti.so", "libpage.so"] {
            std::fs::copy(bin.join(f), root.join(f)).unwrap();
        }
        let full = archs(&root, Rules::builtin()).unwrap();
        let mut asked = 0;
        let first = archs_until(&root, Rules::builtin(), &mut |_| {
            asked += 1;
            true
        })
        .unwrap();
        let never = archs_until(&root, Rules::builtin(), &mut |_| false).unwrap();
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(full.fat_binaries, 3);
        assert_eq!((first.fat_binaries, asked), (1, 1));
        assert_eq!(never.targets, full.targets);
    }

    #[test]
    fn counts_database_files_per_target() {
        let root = std::env::temp_dir().join(format!("kpackfs-archs-db-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let files = [
            "lib/x86_64-linux-gnu/rocblas/2.47.0/library/TensileLibrary_gfx90a.co",
            "lib/x86_64-linux-gnu/rocblas/2.47.0/library/Kernels.so-000-gfx90a-xnack-.hsaco",
            "lib/x86_64-linux-gnu/rocblas/2.47.0/library/Kernels.so-000-gfx90a-xnack+.hsaco",
            "lib/x86_64-linux-gnu/rocblas/2.47.0/library/Kernels.so-000-gfx1030.hsaco",
            "lib/x86_64-linux-gnu/rocblas/2.47.0/library/TensileLibrary.dat",
            "lib/hipblaslt/library/gfx942/TensileManifest.txt",
            "lib/hipblaslt/library/gfx942/a.co",
            "lib/libdevice_conv_operations_gfx1250_strict.a",
            "lib/libdevice_conv_operations_gfx1250.a",
            "lib/libdevice_conv_operations.a",
            "lib/aotriton.images/amd-gfx11xx/flash/a.aks2",
            "share/site/tables_a.bin",
        ];
        for f in files {
            let p = root.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, b"not a binary").unwrap();
        }
        let db_files = |rules: &Rules| -> Vec<(String, u64)> {
            let r = archs(&root, rules).unwrap();
            assert_eq!(r.fat_binaries, 0);
            r.targets.into_iter().map(|(t, u)| (t, u.db_files)).collect()
        };
        let want = |extra: &[(&str, u64)]| {
            let mut v: Vec<(String, u64)> = [
                ("gfx1030", 1),
                ("gfx11*", 1),
                ("gfx1250", 1),
                ("gfx1250-strict", 1),
                ("gfx90a", 1),
                ("gfx90a:xnack+", 1),
                ("gfx90a:xnack-", 1),
                ("gfx942", 2),
            ]
            .iter()
            .chain(extra)
            .map(|(t, n)| (t.to_string(), *n))
            .collect();
            v.sort();
            v
        };
        let site = Rules::with_operator_rules(&["**/site/tables_*.bin -> gfx1151".into()], &[]).unwrap();
        let (builtin, with_site) = (db_files(Rules::builtin()), db_files(&site));
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(builtin, want(&[]));
        assert_eq!(with_site, want(&[("gfx1151", 1)]));
    }
}
