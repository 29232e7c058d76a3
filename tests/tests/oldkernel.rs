//! Executables whose program header table the transform relocates must
//! start on kernels before Linux 5.18 (EL8's 4.18 among them), which tell
//! ld.so the table is at the first PT_LOAD's `p_vaddr - p_offset` plus
//! `e_phoff` instead of translating `e_phoff` through the segment that maps
//! it. This machine's kernel computes `AT_PHDR` the right way, so it is the
//! oracle: a probe preloaded into the running program
//! (`tests/fixtures/phdr_probe.c`) reports `getauxval(AT_PHDR)`,
//! `dl_iterate_phdr`'s view and the old kernels' address, and the two must
//! agree, with the table in memory equal to the file's. Run from a real
//! mount and from a bake, PIE and non-PIE, against the test HIP runtime.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use kpackfs_tests::*;

struct Probe {
    at_phdr: u64,
    dl_phdr: u64,
    old_kernel: u64,
    old_mapped: bool,
    table: Vec<u8>,
}

fn build_probe(dir: &Path) -> PathBuf {
    let so = dir.join("phdr_probe.so");
    let src = repo().join("tests/fixtures/phdr_probe.c");
    let st = Command::new("cc").args(["-O2", "-shared", "-fPIC", "-Wall", "-Werror", "-o"]).arg(&so).arg(&src).status().expect("cc");
    assert!(st.success(), "building the probe failed");
    so
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s, 16).unwrap()
}

fn run_probe(exe: &Path, probe: &Path, out: &Path) -> Probe {
    let o = Command::new(exe)
        .env("LD_LIBRARY_PATH", &Stub::get().dir)
        .env("LD_PRELOAD", probe)
        .env("PHDR_PROBE_OUT", out)
        .env("KPACK_STUB_ARCH", "gfx90a:xnack-")
        .output()
        .unwrap();
    assert!(o.status.success(), "{} failed: {}{}", exe.display(), String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let line = fs::read_to_string(out).unwrap_or_else(|e| panic!("{}: the probe wrote nothing: {e}", exe.display()));
    let field = |k: &str| line.split_whitespace().find_map(|w| w.strip_prefix(k)).unwrap_or_else(|| panic!("no {k} in {line}")).to_string();
    let table = field("table=");
    Probe {
        at_phdr: hex(&field("at_phdr=")),
        dl_phdr: hex(&field("dl_phdr=")),
        old_kernel: hex(&field("old_kernel=")),
        old_mapped: field("old_mapped=") == "1",
        table: (0..table.len() / 2).map(|i| u8::from_str_radix(&table[2 * i..2 * i + 2], 16).unwrap()).collect(),
    }
}

/// `e_phoff` and the program header table as the file holds them.
fn file_table(path: &Path) -> (u64, Vec<u8>) {
    let b = fs::read(path).unwrap();
    let phoff = u64::from_le_bytes(b[0x20..0x28].try_into().unwrap());
    let phnum = u16::from_le_bytes(b[0x38..0x3a].try_into().unwrap()) as u64;
    (phoff, b[phoff as usize..(phoff + phnum * 56) as usize].to_vec())
}

fn check(exe: &Path, probe: &Path, out: &Path, relocated: bool) {
    let p = run_probe(exe, probe, out);
    let (phoff, table) = file_table(exe);
    let what = exe.display();
    // The test would prove nothing on a table the transform left alone.
    assert_eq!(phoff != 64, relocated, "{what}: e_phoff {phoff:#x}");
    assert_eq!(p.dl_phdr, p.at_phdr, "{what}: dl_iterate_phdr and AT_PHDR disagree");
    assert_eq!(p.table, table, "{what}: the table in memory is not the file's");
    assert!(p.old_mapped, "{what}: an old kernel's AT_PHDR {:#x} is not in a loaded segment", p.old_kernel);
    assert_eq!(p.old_kernel, p.at_phdr, "{what}: an old kernel would pass AT_PHDR {:#x}, the table is at {:#x}", p.old_kernel, p.at_phdr);
}

#[test]
fn relocated_program_headers_are_where_old_kernels_look() {
    require_root();
    let src = tempdir();
    fs::create_dir(src.path().join("bin")).unwrap();
    for exe in ["app_pie", "app_nopie"] {
        fs::copy(assets().join("bin").join(exe), src.path().join("bin").join(exe)).unwrap();
    }
    let work = tempdir();
    let probe = build_probe(work.path());
    let m = Mount::new(Some(src.path()), "gfx90a:xnack-", &[]);
    let baked = bake(src.path(), "gfx90a:xnack-", &[]);
    for exe in ["app_pie", "app_nopie"] {
        check(&src.path().join("bin").join(exe), &probe, &work.path().join(format!("{exe}.fat")), false);
        check(&m.path(format!("bin/{exe}")), &probe, &work.path().join(format!("{exe}.mount")), true);
        check(&baked.path().join("out/bin").join(exe), &probe, &work.path().join(format!("{exe}.bake")), true);
    }
}

/// `verify` names an executable whose relocated table breaks the old
/// kernels' rule: the reference tool's own `app_pie.kpacked` (the golden)
/// put in place of split's output; split's output itself passes.
#[test]
fn verify_reports_executables_old_kernels_cannot_start() {
    let src = tempdir();
    fs::create_dir(src.path().join("bin")).unwrap();
    fs::copy(assets().join("bin/app_pie"), src.path().join("bin/app_pie")).unwrap();
    let out = tempdir();
    let o = Command::new(kpackfs()).arg("split").arg(src.path()).arg(out.path().join("o")).args(["--component", "app", "-q"]).output().unwrap();
    assert!(o.status.success(), "split: {}", String::from_utf8_lossy(&o.stderr));
    let verify = || Command::new(kpackfs()).arg("verify").arg(out.path().join("o")).output().unwrap();
    let v = verify();
    let text = format!("{}{}", String::from_utf8_lossy(&v.stdout), String::from_utf8_lossy(&v.stderr));
    assert!(v.status.success() && !text.contains("old-kernels"), "{text}");
    let exe = out.path().join("o/app_generic/bin/app_pie");
    assert!(exe.is_file(), "split's layout changed: {}", exe.display());
    fs::copy(vectors().join("generated-golden/elf/app_pie.kpacked"), &exe).unwrap();
    let v = verify();
    let text = format!("{}{}", String::from_utf8_lossy(&v.stdout), String::from_utf8_lossy(&v.stderr));
    assert_eq!(v.status.code(), Some(1), "{text}");
    assert!(text.contains("bin/app_pie") && text.contains("kernels before Linux 5.18 pass 0x8000"), "{text}");
}
