//! Runtime loading without a GPU, from the mountpoint: hipcc-built programs
//! and libraries are run / dlopen'ed inside the mount against the test HIP
//! runtime (`tests/hip-stub`, standing in for `libamdhip64.so.5`). Its
//! `__hipRegisterFatBinary` sees HIPK, follows the relocated pointer to the
//! marker in memory, finds the binary through /proc/self/maps, expands
//! `@GFXARCH@`, opens the archive inside the mount and loads the code
//! object, which must equal what clang-offload-bundler extracts from the
//! original. Also: non-root users through --allow-other, and a bind mount
//! in a new mount namespace (containers).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use kpackfs_tests::*;

/// A source tree holding the hipcc-built test binaries.
fn source() -> TempDir {
    let dir = tempdir();
    let root = dir.path();
    fs::create_dir_all(root.join("lib")).unwrap();
    fs::create_dir_all(root.join("bin")).unwrap();
    for lib in ["libtwo.so", "libmulti.so", "librdc.so", "librelr.so", "libpage.so", "libhost.so"] {
        fs::copy(assets().join("bin").join(lib), root.join("lib").join(lib)).unwrap();
    }
    for exe in ["app_pie", "app_nopie"] {
        fs::copy(assets().join("bin").join(exe), root.join("bin").join(exe)).unwrap();
    }
    // CCOB-compressed variants (their code objects come out of the LRU).
    recompress(&assets().join("bin/libtwo.so"), &root.join("lib/libtwo_ccob.so"), &["--ccob-version", "3"]);
    recompress(&assets().join("bin/libmulti.so"), &root.join("lib/libmulti_zlib.so"), &["--ccob-version", "2", "--method", "zlib"]);
    fs::set_permissions(root, fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// The test asset a served binary was made from.
fn asset_of(name: &str) -> &str {
    match name {
        "libtwo_ccob.so" => "libtwo.so",
        "libmulti_zlib.so" => "libmulti.so",
        n => n,
    }
}

fn recompress(input: &Path, output: &Path, args: &[&str]) {
    let st = Command::new(kpackfs()).arg("recompress").arg(input).arg(output).args(args).stderr(std::process::Stdio::null()).status().unwrap();
    assert!(st.success(), "recompress {}", input.display());
}

/// Runs `cmd` (a program or the dlopen driver) with the stub for `device`
/// and returns the records it wrote.
fn run_with_stub(cmd: &mut Command, device: &str, loader: &str, out: &Path) -> Vec<StubRecord> {
    let stub = Stub::get();
    fs::create_dir_all(out).unwrap();
    fs::set_permissions(out, fs::Permissions::from_mode(0o777)).unwrap();
    let o = cmd.env("LD_LIBRARY_PATH", &stub.dir).env("KPACK_STUB_ARCH", device).env("KPACK_STUB_LOADER", loader).env("KPACK_STUB_OUT", out).output().unwrap();
    assert!(o.status.success(), "{cmd:?} failed: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    stub_records(out)
}

/// `registrations`: how many wrappers the program registers (the fat
/// original registers the same ones; `-fgpu-rdc` builds register one of
/// their two wrappers).
fn check_records(recs: &[StubRecord], name: &str, path_in_mount: &Path, mnt: &Path, device: &str) {
    let binary = asset_of(name);
    let bundles = wrapper_bundles(binary);
    let registrations = if binary == "librdc.so" { 1 } else { bundles.len() };
    let mine: Vec<&StubRecord> = recs.iter().filter(|r| r.binary == path_in_mount).collect();
    assert_eq!(mine.len(), registrations, "{binary}: {} registrations for {} wrappers: {recs:#?}", mine.len(), bundles.len());
    for r in &mine {
        let i = r.co_index as usize;
        assert_eq!(r.magic, "HIPK", "{binary} wrapper {i}: {r:?}");
        assert_eq!(r.status, "OK", "{binary} wrapper {i} on {device}: {r:?}");
        assert!(i < bundles.len(), "{binary}: co_index {i} out of range");
        assert!(Path::new(&r.source).starts_with(mnt), "{binary}: archive {} outside the mount", r.source);
        let want = expected_object(binary, bundles[i], expected_arch(binary, device));
        assert!(r.bytes.as_deref() == Some(want.as_slice()), "{binary} wrapper {i} on {device}: code object differs from clang-offload-bundler's");
    }
}

#[test]
fn programs_and_libraries_load_their_code_objects_from_the_mount() {
    require_root();
    let src = source();
    let m = Mount::new(Some(src.path()), "gfx90a:xnack-,gfx1030", &[]);
    let work = tempdir();
    let mut n = 0;
    for device in ["gfx90a:sramecc+:xnack-", "gfx1030"] {
        for loader in ["feb2026", "newest"] {
            for exe in ["app_pie", "app_nopie"] {
                n += 1;
                let out = work.path().join(n.to_string());
                let bin = m.path(format!("bin/{exe}"));
                let recs = run_with_stub(&mut Command::new(&bin), device, loader, &out);
                check_records(&recs, exe, &bin, &m.mnt, device);
            }
            for lib in ["libtwo.so", "libmulti.so", "librdc.so", "librelr.so", "libpage.so", "libtwo_ccob.so", "libmulti_zlib.so"] {
                n += 1;
                let out = work.path().join(n.to_string());
                let path = m.path(format!("lib/{lib}"));
                let recs = run_with_stub(Command::new(Stub::get().driver()).arg(&path), device, loader, &out);
                check_records(&recs, lib, &path, &m.mnt, device);
            }
        }
    }
}

#[test]
fn fat_and_kpacked_runs_agree() {
    // The stub's own fat-path choice on the original binary is the oracle
    // for "what the fat runtime would have picked"; the kpack'd binary in
    // the mount must load the very same bytes.
    require_root();
    let src = source();
    let m = Mount::new(Some(src.path()), "gfx90a", &[]);
    let work = tempdir();
    for (i, lib) in ["libtwo.so", "libmulti.so", "librdc.so"].iter().enumerate() {
        let fat = run_with_stub(
            Command::new(Stub::get().driver()).arg(src.path().join("lib").join(lib)),
            "gfx90a:xnack-",
            "feb2026",
            &work.path().join(format!("f{i}")),
        );
        let kp =
            run_with_stub(Command::new(Stub::get().driver()).arg(m.path(format!("lib/{lib}"))), "gfx90a:xnack-", "feb2026", &work.path().join(format!("k{i}")));
        assert!(fat.iter().all(|r| r.magic == "HIPF" && r.status == "OK"), "{fat:?}");
        // The kpack'd run really went through the kpack loader: HIPK
        // wrappers, archives inside the mount.
        assert!(
            kp.iter().all(|r| r.magic == "HIPK" && r.status == "OK" && Path::new(&r.source).starts_with(&m.mnt)),
            "{lib}: {:?}",
            kp.iter().map(|r| (&r.magic, &r.status, &r.source)).collect::<Vec<_>>()
        );
        assert_eq!(fat.len(), kp.len());
        for (a, b) in fat.iter().zip(&kp) {
            assert!(a.bytes.is_some() && a.bytes == b.bytes, "{lib}: fat {a:?} vs kpack'd {b:?}");
        }
    }
}

fn as_nobody(cmd: &str) -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", cmd]);
    c
}

#[test]
fn other_users_read_and_dlopen_through_allow_other() {
    require_root();
    let src = source();
    let m = Mount::new(Some(src.path()), "gfx1030", &["--allow-other"]);
    let lib = m.path("lib/libtwo.so");
    let cat = as_nobody(&format!("cat '{}' >/dev/null", lib.display())).status().unwrap();
    assert!(cat.success(), "nobody cannot read through --allow-other");
    let work = tempdir();
    fs::set_permissions(work.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let out = work.path().join("o");
    let driver = Stub::get().driver();
    let recs = run_with_stub(&mut as_nobody(&format!("exec '{}' '{}'", driver.display(), lib.display())), "gfx1030", "feb2026", &out);
    check_records(&recs, "libtwo.so", &lib, &m.mnt, "gfx1030");

    // Without --allow-other the same user is refused: the flag is what
    // containers need.
    let m2 = Mount::new(Some(src.path()), "gfx1030", &[]);
    let denied = as_nobody(&format!("cat '{}' >/dev/null 2>&1", m2.path("lib/libtwo.so").display())).status().unwrap();
    assert!(!denied.success(), "another user read a mount without --allow-other");
}

#[test]
fn bind_mount_in_a_new_namespace_serves_identical_bytes() {
    require_root();
    let src = source();
    let arch = "gfx90a:xnack-";
    let m = Mount::new(Some(src.path()), arch, &["--allow-other"]);
    let baked = bake(src.path(), arch, &[]);
    let out = baked.path().join("out");
    let files: Vec<PathBuf> = snapshot(&out).into_iter().filter_map(|(p, n)| matches!(n, Node::File { .. }).then_some(p)).collect();
    assert!(files.len() >= 10, "{files:?}");
    let target = tempdir();
    let list: Vec<String> = files.iter().map(|f| format!("'{}'", f.display())).collect();
    let script = format!(
        "mount --make-rprivate / && mount --bind '{}' '{}' && cd '{}' && sha256sum {}",
        m.mnt.display(),
        target.path().display(),
        target.path().display(),
        list.join(" ")
    );
    let o = Command::new("unshare").args(["-m", "sh", "-c", &script]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    for f in &files {
        let want: String = sha256(&fs::read(out.join(f)).unwrap()).iter().map(|b| format!("{b:02x}")).collect();
        let line = text.lines().find(|l| l.ends_with(&format!("  {}", f.display()))).unwrap_or_else(|| panic!("{} missing in {text}", f.display()));
        assert!(line.starts_with(&want), "{}: bind-mounted bytes differ", f.display());
    }
    // The namespace's bind mount never leaked into ours.
    assert!(!mounted(target.path()));
}
