//! `kpackfs split-wheel` on a fat wheel built from test_assets binaries:
//! the host and device wheels install with pip into a target directory,
//! and the test HIP runtime loads clang-offload-bundler's objects from the
//! installed tree; a host wheel installed alone is reported by `verify`
//! and fails to load rather than loading wrong code.
//! Needs: python3 with pip (apt-get install python3-pip).

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use kpackfs_tests::*;

const LIBS: [&str; 2] = ["libtwo.so", "libmulti.so"];
const WHEEL: &str = "hiplib-1.2-py3-none-linux_x86_64.whl";

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn kp(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(kpackfs()).args(args).output().expect("kpackfs")
}

fn python(script: &str, args: &[&Path]) -> Output {
    let o = Command::new("python3").arg("-c").arg(script).args(args).output().expect("python3 (apt-get install python3)");
    assert!(o.status.success(), "python3: {}", text(&o));
    o
}

/// A fat wheel: a package with two HIP libraries, rocBLAS tables for two
/// targets, dist-info with a RECORD. `extra` adds one more entry name.
fn fat_wheel(dir: &Path, extra: Option<&str>) -> std::path::PathBuf {
    let p = dir.join(WHEEL);
    let script = r#"
import base64, hashlib, sys, zipfile
out, bins, extra = sys.argv[1], sys.argv[2], sys.argv[3]
rec = []
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    def add(n, d, mode=0o644):
        zi = zipfile.ZipInfo(n, (2024, 1, 1, 0, 0, 0)); zi.external_attr = (0o100000 | mode) << 16
        zi.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(zi, d)
        rec.append(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}")
    add("hiplib/__init__.py", b"")
    for l in ["libtwo.so", "libmulti.so"]:
        add(f"hiplib/lib/{l}", open(f"{bins}/{l}", "rb").read(), 0o755)
    add("hiplib/lib/rocblas/library/TensileLibrary_gfx90a.dat", b"t90a")
    add("hiplib/lib/rocblas/library/TensileLibrary_gfx1030.dat", b"t1030")
    if extra != "-":
        add(extra, b"x")
    add("hiplib-1.2.dist-info/METADATA", b"Metadata-Version: 2.1\nName: hiplib\nVersion: 1.2\n\nA test package.\n")
    add("hiplib-1.2.dist-info/WHEEL", b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n")
    rec.append("hiplib-1.2.dist-info/RECORD,,")
    z.writestr("hiplib-1.2.dist-info/RECORD", "\n".join(rec) + "\n")
"#;
    python(script, &[&p, &assets().join("bin"), Path::new(extra.unwrap_or("-"))]);
    p
}

/// Every RECORD line's hash and size match the entry's bytes.
fn check_record(wheel: &Path) {
    let script = r#"
import base64, hashlib, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
rec = [n for n in z.namelist() if n.endswith(".dist-info/RECORD")]
assert len(rec) == 1, rec
lines = [l for l in z.read(rec[0]).decode().splitlines() if l]
names = set(z.namelist())
listed = set()
for l in lines:
    n, h, s = l.rsplit(",", 2)
    listed.add(n)
    if n == rec[0]:
        assert h == "" and s == "", l
        continue
    d = z.read(n)
    assert h == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b"=").decode(), l
    assert int(s) == len(d), l
assert listed == names, (listed ^ names)
"#;
    python(script, &[wheel]);
}

fn pip_install(target: &Path, wheels: &[&Path]) {
    let o = Command::new("python3")
        .args(["-m", "pip", "install", "-q", "--no-index", "--no-deps", "--disable-pip-version-check", "--break-system-packages", "--target"])
        .arg(target)
        .args(wheels)
        .output()
        .expect("python3 -m pip (apt-get install python3-pip)");
    assert!(o.status.success(), "pip install: {}", text(&o));
}

#[test]
fn wheel_splits_installs_and_loads_exactly() {
    let dir = tempdir();
    let fat = fat_wheel(dir.path(), None);
    let out = dir.path().join("out");
    let o = kp(&["split-wheel".as_ref(), fat.as_os_str(), out.as_os_str(), "-q".as_ref()]);
    assert!(o.status.success(), "{}", text(&o));
    let mut names: Vec<String> = fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            WHEEL,
            "hiplib_device_gfx1030-1.2-py3-none-linux_x86_64.whl",
            "hiplib_device_gfx906-1.2-py3-none-linux_x86_64.whl",
            "hiplib_device_gfx90a-1.2-py3-none-linux_x86_64.whl"
        ]
    );
    for n in &names {
        check_record(&out.join(n));
    }
    let host = out.join(WHEEL);
    let dev = out.join("hiplib_device_gfx90a-1.2-py3-none-linux_x86_64.whl");
    let meta = python("import sys, zipfile; print(zipfile.ZipFile(sys.argv[1]).read('hiplib-1.2.dist-info/METADATA').decode())", &[&host]);
    let meta = String::from_utf8_lossy(&meta.stdout);
    assert!(meta.contains("Provides-Extra: device-gfx90a\nRequires-Dist: hiplib-device-gfx90a==1.2; extra == \"device-gfx90a\""), "{meta}");
    assert!(meta.contains("Provides-Extra: device-all") && meta.contains("\n\nA test package."), "{meta}");

    // Unpacked fat wheel: the oracle tree for verify.
    let fat_tree = dir.path().join("fat");
    python("import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])", &[&fat, &fat_tree]);

    let site = dir.path().join("site");
    pip_install(&site, &[&host, &dev]);
    assert!(site.join("hiplib/.kpack/hiplib_gfx90a:xnack-.kpack").is_file());
    assert!(site.join("hiplib/lib/rocblas/library/TensileLibrary_gfx90a.dat").is_file());
    assert!(!site.join("hiplib/lib/rocblas/library/TensileLibrary_gfx1030.dat").exists(), "other targets' tables are in their own wheels");
    let v = kp(&["verify".as_ref(), site.as_os_str(), "--against".as_ref(), fat_tree.as_os_str(), "--targets".as_ref(), "gfx90a".as_ref()]);
    assert!(v.status.success() && text(&v).contains("verify: OK"), "{}", text(&v));
    let work = tempdir();
    check_stub_loads(&site.join("hiplib/lib"), &LIBS, "gfx90a:xnack-", work.path());

    // The host wheel alone: verify names the missing archives; loading
    // fails (no archive) instead of finding wrong code.
    let alone = dir.path().join("alone");
    pip_install(&alone, &[&host]);
    let v = kp(&["verify".as_ref(), alone.as_os_str(), "--targets".as_ref(), "gfx90a".as_ref()]);
    assert_eq!(v.status.code(), Some(1), "{}", text(&v));
    assert!(text(&v).contains("hiplib_gfx90a:xnack-.kpack: archive for gfx90a:xnack- listed in the pack manifest is missing"), "{}", text(&v));
    // doctor names the extra that brings the missing device wheel (from
    // the installed METADATA), and passes the complete pair.
    let d = kp(&["doctor".as_ref(), alone.as_os_str(), "--arch".as_ref(), "gfx90a:xnack-".as_ref()]);
    assert_eq!(d.status.code(), Some(1), "{}", text(&d));
    let pip = "pip install 'hiplib[device-gfx90a]' brings it (hiplib-device-gfx90a==1.2)";
    for (lib, ws) in [("libmulti.so", "wrapper 0"), ("libtwo.so", "wrappers 0, 1")] {
        let line = format!(
            "hiplib/lib/{lib}: PROBLEM for gfx90a:xnack-: no archive found for {ws} (looked for hiplib/.kpack/hiplib_{{gfx90a:xnack-|gfx90a}}.kpack); {pip}\n"
        );
        assert!(text(&d).contains(&line), "{line}not in:\n{}", text(&d));
    }
    let d = kp(&["doctor".as_ref(), site.as_os_str(), "--arch".as_ref(), "gfx90a:xnack-".as_ref()]);
    assert!(d.status.success() && text(&d).contains("2 ok, 0 with warnings, 0 with problems"), "{}", text(&d));
    let r = kp(&["resolve".as_ref(), alone.join("hiplib/lib/libtwo.so").as_os_str(), "--arch".as_ref(), "gfx90a:xnack-".as_ref()]);
    assert_eq!(r.status.code(), Some(1), "{}", text(&r));
    assert!(text(&r).contains("ARCHIVE_NOT_FOUND"), "{}", text(&r));

    // Deterministic: the same wheel gives the same bytes.
    let again = dir.path().join("again");
    let o = kp(&["split-wheel".as_ref(), fat.as_os_str(), again.as_os_str(), "-q".as_ref()]);
    assert!(o.status.success(), "{}", text(&o));
    for n in &names {
        assert!(fs::read(out.join(n)).unwrap() == fs::read(again.join(n)).unwrap(), "{n} differs between two runs");
    }
}

#[test]
fn hostile_wheels_are_refused() {
    let dir = tempdir();
    for (i, bad) in ["../evil.py", "hiplib/../../evil.py", "/abs.py"].iter().enumerate() {
        let d = dir.path().join(i.to_string());
        fs::create_dir_all(&d).unwrap();
        let w = fat_wheel(&d, Some(bad));
        let out = d.join("out");
        let o = kp(&["split-wheel".as_ref(), w.as_os_str(), out.as_os_str(), "-q".as_ref()]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", text(&o));
        assert!(!dir.path().join("evil.py").exists() && !d.join("evil.py").exists());
        assert!(!out.exists(), "{bad}: a refused split-wheel left its output directory");
    }
    let not_zip = dir.path().join("x-1-py3-none-any.whl");
    fs::write(&not_zip, b"not a zip").unwrap();
    let o = kp(&["split-wheel".as_ref(), not_zip.as_os_str(), dir.path().join("o").as_os_str()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

/// Rewrites `src` into `dst` through a Python snippet that sees `z` (the
/// input ZipFile), `out` (the output ZipFile) and `record` (its RECORD's
/// name), and copies every entry it did not handle.
fn rewrite_wheel(src: &Path, dst: &Path, snippet: &str) {
    let script = format!(
        r#"
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
record = [n for n in z.namelist() if n.endswith(".dist-info/RECORD")][0]
done = set()
with zipfile.ZipFile(sys.argv[2], "w", zipfile.ZIP_DEFLATED) as out:
{}
    for i in z.infolist():
        if i.filename not in done:
            out.writestr(i, z.read(i.filename))
"#,
        snippet.lines().map(|l| format!("    {l}\n")).collect::<String>()
    );
    python(&script, &[src, dst]);
}

/// Splits `wheel` into `dir/out`, expecting exit 2 with every needle in
/// the message and no output left.
fn refused(wheel: &Path, dir: &Path, needles: &[&str]) {
    let out = dir.join("out");
    let o = kp(&["split-wheel".as_ref(), wheel.as_os_str(), out.as_os_str(), "-q".as_ref()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    for n in needles {
        assert!(text(&o).contains(n), "{n:?} not in: {}", text(&o));
    }
    assert!(!out.exists(), "a refused split-wheel left {}", out.display());
}

/// A wheel that already holds an archive or the pack manifest where
/// split-wheel writes them would ship the stale file in the host wheel
/// and a new one in a device wheel: refused, naming the entry.
#[test]
fn a_wheel_holding_generated_paths_is_refused() {
    let dir = tempdir();
    for (i, entry) in ["hiplib/.kpack/hiplib_gfx90a:xnack-.kpack", "hiplib/.kpack/hiplib.kpm"].iter().enumerate() {
        let d = dir.path().join(i.to_string());
        fs::create_dir_all(&d).unwrap();
        let w = fat_wheel(&d, Some(entry));
        refused(&w, &d, &[entry, "split already or carries stale archives"]);
    }
}

/// Entries must match the wheel's RECORD: a changed byte, an unlisted
/// entry and a missing RECORD are refused, naming the entry.
#[test]
fn a_wheel_not_matching_its_record_is_refused() {
    let dir = tempdir();
    let fat = fat_wheel(dir.path(), None);
    let cases = [
        ("tampered", "d = bytearray(z.read('hiplib/lib/libtwo.so')); d[4096] ^= 1\nout.writestr(z.getinfo('hiplib/lib/libtwo.so'), bytes(d)); done.add('hiplib/lib/libtwo.so')", "hiplib/lib/libtwo.so: does not match its RECORD hash"),
        ("unlisted", "out.writestr('hiplib/extra.py', b'x')", "hiplib/extra.py: in the wheel but not in its RECORD"),
        ("no-record", "done.add(record)", "RECORD"),
    ];
    for (name, snippet, needle) in cases {
        let d = dir.path().join(name);
        fs::create_dir_all(&d).unwrap();
        let w = d.join(WHEEL);
        rewrite_wheel(&fat, &w, snippet);
        refused(&w, &d, &[needle]);
    }
}

/// A zip bomb (64 MiB of zeros deflated to 64 KiB) is refused before it is
/// unpacked; `--max-unpack-ratio` lets a genuine wheel through.
#[test]
fn a_zip_bomb_is_refused() {
    let dir = tempdir();
    let fat = fat_wheel(dir.path(), None);
    let w = dir.path().join("bomb").join(WHEEL);
    fs::create_dir_all(w.parent().unwrap()).unwrap();
    let snippet = r#"import base64, hashlib
data = bytes(64 << 20)
out.writestr("hiplib/zeros.bin", data)
h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
rec = z.read(record).decode().replace(record + ",,", f"hiplib/zeros.bin,sha256={h},{len(data)}\n{record},,")
out.writestr(z.getinfo(record), rec); done.add(record)"#;
    rewrite_wheel(&fat, &w, snippet);
    refused(&w, w.parent().unwrap(), &["hiplib/zeros.bin", "zip bomb", "--max-unpack-ratio"]);
    let out = dir.path().join("bomb/allowed");
    let o = kp(&["split-wheel".as_ref(), w.as_os_str(), out.as_os_str(), "-q".as_ref(), "--max-unpack-ratio".as_ref(), "5000".as_ref()]);
    assert!(o.status.success(), "{}", text(&o));
}

/// Errors name the wheel's entries, not the staging directory they were
/// unpacked to (gone when the user reads the message).
#[test]
fn errors_name_the_wheel_not_the_staging_directory() {
    let dir = tempdir();
    let fat = fat_wheel(dir.path(), None);
    let out = dir.path().join("out");
    let o = kp(&["split-wheel".as_ref(), fat.as_os_str(), out.as_os_str(), "-q".as_ref(), "--targets".as_ref(), "gfx1100".as_ref()]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!text(&o).contains(".kpackfs-"), "{}", text(&o));
    assert!(text(&o).contains(&format!("{}:hiplib", fat.display())), "{}", text(&o));
    assert!(!out.exists());
}
