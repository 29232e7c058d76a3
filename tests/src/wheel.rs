//! Helpers for the wheel tests (`split_wheel.rs`, `spirv.rs`): building a
//! fat wheel with Python's zipfile, installing split output with pip
//! (offline, `--no-index`), and reading what was installed.
//! Needs: python3 with pip (apt-get install python3-pip).

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

/// stdout and stderr of a finished command, for messages.
pub fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Runs a Python snippet with `args`; it must succeed.
pub fn python(script: &str, args: &[&Path]) -> Output {
    let o = Command::new("python3").arg("-c").arg(script).args(args).output().expect("python3 (apt-get install python3)");
    assert!(o.status.success(), "python3: {}", text(&o));
    o
}

/// Writes wheel `out` for distribution `name` `version` with tag `tag`:
/// `files` are (entry name, file on disk, mode), then METADATA (with
/// `description` as its body when not empty), WHEEL and a RECORD with
/// every entry's sha256 and size, as a build backend would.
pub fn write_wheel(out: &Path, name: &str, version: &str, tag: &str, description: &str, files: &[(&str, &Path, u32)]) {
    let script = r#"
import base64, hashlib, sys, zipfile
out, name, version, tag, desc = sys.argv[1:6]
rest = sys.argv[6:]
di = f"{name}-{version}.dist-info"
rec = []
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    def add(n, d, mode=0o644):
        zi = zipfile.ZipInfo(n, (2024, 1, 1, 0, 0, 0)); zi.external_attr = (0o100000 | mode) << 16
        zi.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(zi, d)
        rec.append(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}")
    for i in range(0, len(rest), 3):
        add(rest[i], open(rest[i + 1], "rb").read(), int(rest[i + 2], 8))
    body = f"\n{desc}\n" if desc else ""
    add(di + "/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{body}".encode())
    add(di + "/WHEEL", f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {tag}\n".encode())
    rec.append(di + "/RECORD,,")
    z.writestr(di + "/RECORD", "\n".join(rec) + "\n")
"#;
    let modes: Vec<String> = files.iter().map(|(_, _, m)| format!("{m:o}")).collect();
    let mut args: Vec<&Path> = vec![out, Path::new(name), Path::new(version), Path::new(tag), Path::new(description)];
    for ((entry, file, _), mode) in files.iter().zip(&modes) {
        args.extend([Path::new(*entry), *file, Path::new(mode.as_str())]);
    }
    python(script, &args);
}

/// Every RECORD line's hash and size match the entry's bytes.
pub fn check_record(wheel: &Path) {
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

/// `pip install --no-index --target TARGET ARGS…`; it must succeed.
pub fn pip(target: &Path, args: &[&std::ffi::OsStr]) {
    let o = Command::new("python3")
        .args(["-m", "pip", "install", "-q", "--no-index", "--disable-pip-version-check", "--break-system-packages", "--target"])
        .arg(target)
        .args(args)
        .output()
        .expect("python3 -m pip (apt-get install python3-pip)");
    assert!(o.status.success(), "pip install: {}", text(&o));
}

/// Installs exactly `wheels` into `target` (`--no-deps`).
pub fn pip_install(target: &Path, wheels: &[&Path]) {
    let mut args: Vec<&std::ffi::OsStr> = vec!["--no-deps".as_ref()];
    args.extend(wheels.iter().map(|w| w.as_os_str()));
    pip(target, &args);
}

/// A stand-in for rocm-bootstrap (which the host wheel requires, as
/// upstream's do): an empty distribution, so pip resolves offline.
pub fn bootstrap_stub(dir: &Path) {
    let script = r#"
import sys, zipfile
with zipfile.ZipFile(sys.argv[1] + "/rocm_bootstrap-0.0.0-py3-none-any.whl", "w") as z:
    di = "rocm_bootstrap-0.0.0.dist-info"
    z.writestr(di + "/METADATA", "Metadata-Version: 2.1\nName: rocm-bootstrap\nVersion: 0.0.0\n")
    z.writestr(di + "/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    z.writestr(di + "/RECORD", f"{di}/METADATA,,\n{di}/WHEEL,,\n{di}/RECORD,,\n")
"#;
    python(script, &[dir]);
}

/// The distributions pip installed into `site`, sorted.
pub fn installed(site: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        fs::read_dir(site).unwrap().filter_map(|e| e.unwrap().file_name().into_string().ok()?.strip_suffix(".dist-info").map(str::to_string)).collect();
    v.sort();
    v
}

/// The file names in `dir`, sorted.
pub fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// The METADATA of `wheel`'s `dist_info`.
pub fn metadata(wheel: &Path, dist_info: &str) -> String {
    let o = python(
        "import sys, zipfile; print(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]).decode(), end='')",
        &[wheel, Path::new(&format!("{dist_info}/METADATA"))],
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}
