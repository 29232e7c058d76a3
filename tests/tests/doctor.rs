//! `kpackfs doctor` on real trees made from the committed test assets: a
//! split output installed without one device artifact, a fat tree, a
//! kpackfs mount on a machine with another GPU, a binary moved away from
//! its archives, a library reached through a symlink, an empty overlay
//! archive. The expected lines are written by hand from what the assets
//! carry (test_assets/build.sh: demo_app is gfx90a:xnack- and gfx1030;
//! libdemo.so.1.0 adds gfx90a:xnack+ and gfx906; libdemo2.so is bare gfx90a
//! and gfx1030, two wrappers) and the loader rules in docs/.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use kpackfs_tests::*;

/// Runs `kpackfs doctor ARGS` with `env`; exit status, stdout, stderr.
fn doctor(args: &[&std::ffi::OsStr], env: &[(&str, &Path)]) -> (Option<i32>, String, String) {
    let mut c = Command::new(kpackfs());
    c.arg("doctor").args(args).env_remove("ROCM_KPACK_PATH").env_remove("ROCM_KPACK_PATH_PREFIX");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().expect("run kpackfs");
    (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

fn os(s: &str) -> &std::ffi::OsStr {
    s.as_ref()
}

/// Every line of `want` is a line of `got`, and `got` has no other
/// PROBLEM or warning line.
fn assert_lines(got: &str, want: &[String]) {
    let lines: Vec<&str> = got.lines().collect();
    for w in want {
        assert!(lines.contains(&w.as_str()), "missing line:\n{w}\nin:\n{got}");
    }
    for l in &lines {
        if l.contains(": PROBLEM") || l.contains(": warning") {
            assert!(want.iter().any(|w| w == l), "unexpected line:\n{l}\nin:\n{got}");
        }
    }
}

/// `kpackfs split` of the demo install, its artifacts in `dir/split`.
fn split_demo(dir: &Path) -> PathBuf {
    let out = dir.join("split");
    let o = Command::new(kpackfs()).arg("split").arg(assets().join("demo-install")).arg(&out).args(["--component", "demo", "-q"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// Installs the named artifacts of a split (their prefix is `.`) into one tree.
fn install(split: &Path, artifacts: &[&str], at: &Path) {
    for a in artifacts {
        let st = Command::new("cp").arg("-a").arg(split.join(a).join(".")).arg(at).status().unwrap();
        assert!(st.success());
    }
    fs::remove_file(at.join("artifact_manifest.txt")).unwrap();
}

const MISSING_90A: &str = "(looked for .kpack/demo_{gfx90a:sramecc+:xnack-|gfx90a:sramecc+|gfx90a:xnack-|gfx90a}.kpack); archives present for: gfx1030, gfx906; install the device package for this GPU, or set ROCM_KPACK_PATH";

#[test]
fn a_split_installed_without_its_gfx90a_artifact() {
    let dir = tempdir();
    let split = split_demo(dir.path());
    let inst = dir.path().join("inst");
    fs::create_dir(&inst).unwrap();
    install(&split, &["demo_generic", "demo_gfx1030", "demo_gfx906"], &inst);
    let (code, out, err) = doctor(&[inst.as_os_str(), os("--arch"), os("gfx90a:sramecc+:xnack-,gfx1030")], &[]);
    assert_eq!(code, Some(1), "{out}{err}");
    let dev = "gfx90a:sramecc+:xnack-";
    assert_lines(
        &out,
        &[
            format!("bin/demo_app: PROBLEM for {dev}: no archive found for wrapper 0 {MISSING_90A}"),
            format!("lib/libdemo.so.1.0: PROBLEM for {dev}: no archive found for wrapper 0 {MISSING_90A}"),
            format!("lib/libdemo2.so: PROBLEM for {dev}: no archive found for wrappers 0, 1 {MISSING_90A}"),
            "bin/demo_app: OK for gfx1030: 1 of 1 wrappers resolve (from .kpack/demo_gfx1030.kpack)".into(),
            "lib/libdemo2.so: OK for gfx1030: 2 of 2 wrappers resolve (from .kpack/demo_gfx1030.kpack)".into(),
        ],
    );
    assert!(out.ends_with(&format!("under {} for {dev}, gfx1030: 0 ok, 0 with warnings, 3 with problems\n", inst.display())), "{out}");
    assert!(err.contains(&format!("--arch {dev}: {} carries no code for it (it carries: gfx1030, gfx906)", inst.display())), "{err}");

    // The same as JSON, for scripts: the typed findings and the paths.
    let (code, out, _) = doctor(&[inst.as_os_str(), os("--arch"), os(dev), os("--json")], &[]);
    assert_eq!(code, Some(1));
    let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
    assert_eq!(v["ok"], false);
    assert_eq!(v["devices"], serde_json::json!([dev]));
    let bins = v["binaries"].as_array().unwrap();
    let paths: Vec<&str> = bins.iter().map(|b| b["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["bin/demo_app", "lib/libdemo.so.1.0", "lib/libdemo2.so"]);
    for b in bins {
        assert_eq!(b["kind"], "kpack");
        let f = &b["devices"][0]["findings"][0];
        assert_eq!(f["kind"], "archive_missing", "{b}");
        assert_eq!(f["severity"], "problem");
        assert_eq!(
            f["looked_for"],
            serde_json::json!([
                ".kpack/demo_gfx90a:sramecc+:xnack-.kpack",
                ".kpack/demo_gfx90a:sramecc+.kpack",
                ".kpack/demo_gfx90a:xnack-.kpack",
                ".kpack/demo_gfx90a.kpack"
            ])
        );
    }

    // With the artifact: every binary resolves on the MI210-like device;
    // an xnack+ device gets the code of the libraries built for it, and
    // the kernel demo_app lacks for it is named (it was built for
    // gfx90a:xnack- and gfx1030 only).
    install(&split, &["demo_gfx90a"], &inst);
    let (code, out, err) = doctor(&[inst.as_os_str(), os("--arch"), os("gfx90a:sramecc+:xnack-,gfx90a:xnack+")], &[]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert_lines(
        &out,
        &[
            "lib/libdemo.so.1.0: OK for gfx90a:sramecc+:xnack-: 1 of 1 wrappers resolve (from .kpack/demo_gfx90a:xnack-.kpack)".into(),
            "lib/libdemo.so.1.0: OK for gfx90a:xnack+: 1 of 1 wrappers resolve (from .kpack/demo_gfx90a:xnack+.kpack)".into(),
            "bin/demo_app: OK for gfx90a:sramecc+:xnack-: 1 of 1 wrappers resolve (from .kpack/demo_gfx90a:xnack-.kpack)".into(),
            "bin/demo_app: PROBLEM for gfx90a:xnack+: kernel bin/demo_app#0 (wrapper 0) is in none of the archives for this GPU: .kpack/demo_gfx90a:xnack+.kpack, .kpack/demo_gfx90a.kpack".into(),
        ],
    );
    let (code, out, err) = doctor(&[inst.as_os_str(), os("--arch"), os("gfx90a:sramecc+:xnack-")], &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.ends_with("3 ok, 0 with warnings, 0 with problems\n"), "{out}");
}

/// TheRock's overlay case: an xnack archive the newest runtime falls
/// through (it lists the target, holds nothing) works with warnings; an
/// older runtime stops at it.
#[test]
fn an_empty_overlay_archive_is_a_warning() {
    use kpackfs_core::formats::kpack::ArchiveSpec;
    let dir = tempdir();
    let split = split_demo(dir.path());
    let inst = dir.path().join("inst");
    fs::create_dir(&inst).unwrap();
    install(&split, &["demo_generic", "demo_gfx90a"], &inst);
    let dev = "gfx90a:sramecc+:xnack-";
    let empty = ArchiveSpec { group_name: "demo".into(), gfx_arch_family: dev.into(), gfx_arches: vec![dev.into()], toc: vec![], blobs: vec![] };
    fs::write(inst.join(format!(".kpack/demo_{dev}.kpack")), empty.bytes_zstd_frames(&[])).unwrap();
    let (code, out, err) = doctor(&[inst.as_os_str(), os("--arch"), os(dev)], &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    let mut want = Vec::new();
    for (bin, n) in [("bin/demo_app", 1), ("lib/libdemo.so.1.0", 1), ("lib/libdemo2.so", 2)] {
        want.push(format!("{bin}: OK for {dev}: {n} of {n} wrappers resolve (from .kpack/demo_gfx90a:xnack-.kpack)"));
        want.push(format!("{bin}: warning for {dev}: archive .kpack/demo_{dev}.kpack is present but empty"));
        let ws = if n == 1 { "wrapper 0" } else { "wrappers 0, 1" };
        want.push(format!(
            "{bin}: warning for {dev}: runtimes without fall-through (rocm-kpack before rocm-systems#9953) fail here: KERNEL_NOT_FOUND: {bin}#0 / {dev} ({ws})"
        ));
    }
    assert_lines(&out, &want);
    assert!(out.ends_with("0 ok, 3 with warnings, 0 with problems\n"), "{out}");
}

#[test]
fn a_fat_tree_names_what_each_binary_carries() {
    let demo = assets().join("demo-install");
    let (code, out, err) = doctor(&[demo.as_os_str(), os("--arch"), os("gfx1030,gfx1100")], &[]);
    assert_eq!(code, Some(1), "{out}{err}");
    let carries = [
        ("bin/demo_app", "gfx1030, gfx90a:xnack-", "wrapper 0"),
        ("lib/libdemo.so.1.0", "gfx1030, gfx906, gfx90a:xnack+, gfx90a:xnack-", "wrapper 0"),
        ("lib/libdemo2.so", "gfx1030, gfx90a", "wrappers 0, 1"),
    ];
    let mut want = Vec::new();
    for (bin, t, ws) in carries {
        want.push(format!("{bin}: fat: carries {t}; this GPU (gfx1030): ok"));
        want.push(format!("{bin}: PROBLEM for gfx1100: fat: carries {t}; this GPU: missing ({ws})"));
    }
    assert_lines(&out, &want);
    assert!(
        out.ends_with(&format!(
            "3 HIP binaries (0 kpack'd, 3 fat) under {} for gfx1030, gfx1100: 0 ok, 0 with warnings, 3 with problems\n",
            demo.canonicalize().unwrap().display()
        )),
        "{out}"
    );
    assert_eq!(out.lines().filter(|l| l.contains("libhost.so")).count(), 0, "a host-only library is no HIP binary:\n{out}");
}

/// A mount made for gfx90a:xnack- on a machine whose GPU is an RX 7900 XTX
/// (the KFD fixture): the mismatch is named; on the MI210 fixture it is OK.
#[test]
fn a_mount_for_another_gpu_than_this_machines() {
    require_root();
    let m = Mount::new(None, "gfx90a:xnack-", &[]);
    let kfd = |name: &str| repo().join("tests/fixtures/kfd").join(name);
    let (code, out, err) = doctor(&[m.mnt.as_os_str()], &[("KPACKFS_SYSFS_ROOT", &kfd("rx7900xtx"))]);
    assert_eq!(code, Some(1), "{out}{err}");
    let tail = "; install the device package for this GPU, or set ROCM_KPACK_PATH";
    assert_lines(
        &out,
        &[
            format!("bin/demo_app: PROBLEM for gfx1100: no archive found for wrapper 0 (looked for bin/.kpack/demo_app_{{gfx1100|gfx11-generic}}.kpack); archives present for: gfx90a:xnack-{tail}"),
            format!("lib/libdemo.so.1.0: PROBLEM for gfx1100: no archive found for wrapper 0 (looked for lib/.kpack/libdemo.so.1.0_{{gfx1100|gfx11-generic}}.kpack); archives present for: gfx90a:xnack-{tail}"),
            format!("lib/libdemo2.so: PROBLEM for gfx1100: no archive found for wrappers 0, 1 (looked for lib/.kpack/libdemo2.so_{{gfx1100|gfx11-generic}}.kpack); archives present for: gfx90a{tail}"),
        ],
    );
    assert!(err.contains(&format!("this machine's GPU gfx1100: {} carries no code for it (it carries: gfx90a, gfx90a:xnack-)", m.mnt.display())), "{err}");
    let (code, out, err) = doctor(&[m.mnt.as_os_str()], &[("KPACKFS_SYSFS_ROOT", &kfd("mi210"))]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("lib/libdemo2.so: OK for gfx90a:sramecc+:xnack-: 2 of 2 wrappers resolve (from lib/.kpack/libdemo2.so_gfx90a.kpack)"), "{out}");
    assert!(out.ends_with("for gfx90a:sramecc+:xnack-: 3 ok, 0 with warnings, 0 with problems\n"), "{out}");
}

/// The runtime resolves a marker's `.kpack/…` from the library's real
/// directory: a copy moved elsewhere finds nothing (and the doctor says the
/// directory is not there); a symlink to the library from elsewhere works.
#[test]
fn markers_resolve_from_the_librarys_real_path() {
    let baked = bake(&assets().join("demo-install"), "gfx90a:xnack-", &[]);
    let dir = tempdir();
    let moved = dir.path().join("moved");
    fs::create_dir(&moved).unwrap();
    fs::copy(baked.path().join("out/lib/libdemo.so.1.0"), moved.join("libdemo.so.1.0")).unwrap();
    let (code, out, err) = doctor(&[moved.as_os_str(), os("--arch"), os("gfx90a:xnack-")], &[]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert_lines(
        &out,
        &["libdemo.so.1.0: PROBLEM for gfx90a:xnack-: no archive found for wrapper 0 (looked for .kpack/libdemo.so.1.0_{gfx90a:xnack-|gfx90a}.kpack); .kpack does not exist; install the device package for this GPU, or set ROCM_KPACK_PATH".into()],
    );
    // ROCM_KPACK_PATH names archives directly, as the runtime takes it:
    // split at ':', so the archive's own name cannot be given; a link to
    // it under a name without ':' can.
    let archive = baked.path().join("out/lib/.kpack/libdemo.so.1.0_gfx90a:xnack-.kpack");
    let (code, out, err) = doctor(&[moved.as_os_str(), os("--arch"), os("gfx90a:xnack-")], &[("ROCM_KPACK_PATH", &archive)]);
    assert_eq!(code, Some(1), "{out}{err}");
    let (a, b) = archive.to_str().unwrap().rsplit_once(':').unwrap();
    assert_lines(
        &out,
        &[format!(
            "libdemo.so.1.0: PROBLEM for gfx90a:xnack-: no archive found for wrapper 0 (looked for {a}, {b}); ROCM_KPACK_PATH is split at ':', so {} cannot be named there: link it under a name without ':'",
            archive.display()
        )],
    );
    let plain = dir.path().join("gfx90a.kpack");
    std::os::unix::fs::symlink(&archive, &plain).unwrap();
    let (code, out, err) = doctor(&[moved.as_os_str(), os("--arch"), os("gfx90a:xnack-")], &[("ROCM_KPACK_PATH", &plain)]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_lines(&out, &[format!("libdemo.so.1.0: OK for gfx90a:xnack-: 1 of 1 wrappers resolve (from {})", plain.display())]);

    let linked = dir.path().join("linked");
    fs::create_dir(&linked).unwrap();
    let real = baked.path().join("out/lib/libdemo.so.1.0").canonicalize().unwrap();
    std::os::unix::fs::symlink(&real, linked.join("libdemo.so")).unwrap();
    let (code, out, err) = doctor(&[linked.as_os_str(), os("--arch"), os("gfx90a:xnack-")], &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    let archive = real.parent().unwrap().join(".kpack/libdemo.so.1.0_gfx90a:xnack-.kpack");
    assert_lines(
        &out,
        &[
            format!("libdemo.so: a link to {} (markers resolve from there)", real.display()),
            format!("libdemo.so: OK for gfx90a:xnack-: 1 of 1 wrappers resolve (from {})", archive.display()),
        ],
    );
}

/// Nothing to check is a failure, never an OK; a PREFIX that is not there
/// is a bad argument.
#[test]
fn nothing_checked_is_no_success() {
    let dir = tempdir();
    fs::write(dir.path().join("notes.txt"), b"no binaries here").unwrap();
    // An ELF relocatable object (crt1.o, a .o left in a build tree) is no
    // host binary: not a finding either. A 64-byte ELF64 header, e_type 1.
    let mut obj = vec![0u8; 64];
    obj[..7].copy_from_slice(b"\x7fELF\x02\x01\x01");
    obj[16] = 1; // ET_REL
    obj[18] = 0x3e; // x86-64
    obj[20] = 1; // EV_CURRENT
    obj[52] = 64; // e_ehsize
    fs::write(dir.path().join("crt1.o"), &obj).unwrap();
    let (code, out, err) = doctor(&[dir.path().as_os_str(), os("--arch"), os("gfx90a")], &[]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(out.contains("nothing was checked") && err.contains("no HIP binary found; nothing was checked") && !out.contains("crt1.o"), "{out}{err}");
    let (code, _, err) = doctor(&[dir.path().join("nonexistent").as_os_str(), os("--arch"), os("gfx90a")], &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("nonexistent: No such file or directory"), "{err}");
}

/// Rewrites the entry ID `from` to `to` in the plain offload bundle at
/// `at` of `data`, in place: the header grows into the padding before the
/// first code object, whose offsets (from the bundle's start) stay.
fn rename_bundle_entry(data: &mut [u8], at: usize, from: &str, to: &str) {
    let u64_at = |d: &[u8], o: usize| u64::from_le_bytes(d[o..o + 8].try_into().unwrap());
    assert_eq!(&data[at..at + 24], b"__CLANG_OFFLOAD_BUNDLE__");
    let n = u64_at(data, at + 24) as usize;
    let mut entries = Vec::new();
    let mut p = at + 32;
    for _ in 0..n {
        let (off, size, len) = (u64_at(data, p), u64_at(data, p + 8), u64_at(data, p + 16) as usize);
        let id = String::from_utf8(data[p + 24..p + 24 + len].to_vec()).unwrap();
        entries.push((off, size, if id == from { to.to_string() } else { id }));
        p += 24 + len;
    }
    let mut header = b"__CLANG_OFFLOAD_BUNDLE__".to_vec();
    header.extend_from_slice(&(n as u64).to_le_bytes());
    for (off, size, id) in &entries {
        header.extend_from_slice(&off.to_le_bytes());
        header.extend_from_slice(&size.to_le_bytes());
        header.extend_from_slice(&(id.len() as u64).to_le_bytes());
        header.extend_from_slice(id.as_bytes());
    }
    let first = entries.iter().filter(|e| e.1 > 0).map(|e| e.0 as usize).min().unwrap();
    assert!(header.len() <= first, "no room for the longer header");
    data[at..at + header.len()].copy_from_slice(&header);
}

/// A fat library whose only code for a GPU is SPIR-V (clang's
/// `--offload-arch=amdgcnspirv`): the runtime compiles it at load, so it
/// works, with a warning. libtwo.so's gfx1030 entries are renamed to the
/// SPIR-V target (clang-offload-bundler lists the result).
#[test]
fn spirv_code_objects_serve_any_gpu_with_a_warning() {
    let dir = tempdir();
    let mut data = fs::read(assets().join("bin/libtwo.so")).unwrap();
    let layout = fs::read_to_string(assets().join("expected/libtwo.so/layout.tsv")).unwrap();
    let get = |k: &str| -> usize { layout.lines().find_map(|l| l.strip_prefix(k).and_then(|v| v.strip_prefix('\t'))).unwrap().trim().parse().unwrap() };
    let spirv = "hip-spirv64-amd-amdhsa--amdgcnspirv";
    for i in 0..2 {
        let at = get("fatbin_sh_offset") + get(&format!("bundle_offset_{i}"));
        rename_bundle_entry(&mut data, at, "hipv4-amdgcn-amd-amdhsa--gfx1030", spirv);
        let bundle = dir.path().join(format!("b{i}"));
        fs::write(&bundle, &data[at..at + get(&format!("bundle_size_{i}"))]).unwrap();
        let list = Command::new("/usr/lib/llvm-15/bin/clang-offload-bundler")
            .args(["--list", "--type=o"])
            .arg(format!("--input={}", bundle.display()))
            .output()
            .unwrap();
        assert!(String::from_utf8_lossy(&list.stdout).lines().any(|l| l == spirv), "{list:?}");
        fs::remove_file(&bundle).unwrap();
    }
    let lib = dir.path().join("lib");
    fs::create_dir(&lib).unwrap();
    fs::write(lib.join("libtwo.so"), &data).unwrap();
    let (code, out, err) = doctor(&[lib.as_os_str(), os("--arch"), os("gfx1100,gfx90a:xnack-")], &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_lines(
        &out,
        &[
            "libtwo.so: fat: carries amdgcnspirv, gfx90a; this GPU (gfx1100): ok through SPIR-V".into(),
            "libtwo.so: warning for gfx1100: no code object built for this GPU: the runtime compiles the SPIR-V one (amdgcnspirv) when it loads it, a slower first start (wrappers 0, 1)".into(),
            "libtwo.so: fat: carries amdgcnspirv, gfx90a; this GPU (gfx90a:xnack-): ok".into(),
        ],
    );
}
