use std::path::{Path, PathBuf};

use super::*;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/kfd").join(name)
}

fn names(root: &Path, env: &RuntimeEnv) -> Vec<String> {
    machine_targets(root, env).unwrap().iter().map(ToString::to_string).collect()
}

fn env(vars: &[(&str, &str)]) -> RuntimeEnv {
    RuntimeEnv::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string()))).unwrap()
}

/// A sysfs tree with one CPU node and GPU nodes of the given
/// `gfx_target_version`/`capability`, and `noretry` when given.
fn tree(gpus: &[(u64, u64)], noretry: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let nodes = dir.path().join(NODES_DIR);
    let write = |n: usize, text: String| {
        std::fs::create_dir_all(nodes.join(n.to_string())).unwrap();
        std::fs::write(nodes.join(n.to_string()).join("properties"), text).unwrap();
    };
    write(0, "cpu_cores_count 16\nsimd_count 0\ngfx_target_version 0\n".into());
    for (i, (gfx, cap)) in gpus.iter().enumerate() {
        write(i + 1, format!("cpu_cores_count 0\nsimd_count 64\ngfx_target_version {gfx}\ndevice_id 4096\ncapability {cap}\n"));
    }
    if let Some(v) = noretry {
        let p = dir.path().join(NORETRY_PARAM);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, format!("{v}\n")).unwrap();
    }
    dir
}

const ECC: u64 = CAP_SRAM_EDC;

#[test]
fn gfx_names() {
    let name = |v| GfxVersion::from_kfd(v).and_then(|g| g.processor());
    for (v, want) in [
        (90010, "gfx90a"),
        (90402, "gfx942"),
        (90012, "gfx90c"),
        (90500, "gfx950"),
        (100300, "gfx1030"),
        (100306, "gfx1036"),
        (110000, "gfx1100"),
        (110501, "gfx1151"),
        (120001, "gfx1201"),
        (120500, "gfx1250"),
        (80001, "gfx801"),
    ] {
        assert_eq!(name(v).as_deref(), Some(want), "{v}");
    }
    assert_eq!(name(0), None);
    assert_eq!(name(91600), None, "minor 16 has no hex digit");
    assert_eq!(name(1_000_000), None);
    assert_eq!(GfxVersion::parse_override("10.3.0"), Some(GfxVersion { major: 10, minor: 3, stepping: 0 }));
    for bad in ["", "10.3", "10.3.0.1", "a.b.c", "64.0.0", "10.3.0 "] {
        assert_eq!(GfxVersion::parse_override(bad), None, "{bad:?}");
    }
}

#[test]
fn properties_parsing() {
    let p = parse_properties("cpu_cores_count 0\nsimd_count 416\ngfx_target_version 90010\ndevice_id 29711\ncapability 67108864\nname x y\n\n").unwrap();
    assert_eq!(p, Props { simd_count: 416, gfx_target_version: 90010, capability: 67108864, device_id: Some(29711) });
    assert!(parse_properties("gfx_target_version 90010\n").unwrap_err().contains("simd_count"));
    assert!(parse_properties("simd_count 4\ngfx_target_version gfx90a\n").unwrap_err().contains("line 2"));
    assert!(parse_properties("simd_count\n").is_err());
    // Lines kpackfs does not use are not judged.
    assert_eq!(parse_properties("simd_count 0\nhive_id -1\n").unwrap().simd_count, 0);
}

#[test]
fn fixtures_resolve_to_the_runtimes_names() {
    let none = RuntimeEnv::default();
    assert_eq!(names(&fixture("mi210"), &none), ["gfx90a:sramecc+:xnack-"]);
    assert_eq!(names(&fixture("mi300x"), &none), ["gfx942:sramecc+:xnack-"]);
    assert_eq!(names(&fixture("rx7900xtx"), &none), ["gfx1100"]);
    assert_eq!(names(&fixture("strix-halo"), &none), ["gfx1151"]);
    assert_eq!(names(&fixture("mixed"), &none), ["gfx1100", "gfx1036"]);
    let m = Machine::read(&fixture("mi300x"), &none).unwrap();
    assert_eq!((m.gpus.len(), m.cpu_nodes, m.skipped), (8, 2, 0));
    assert_eq!(m.gpus.iter().map(|g| g.node).collect::<Vec<_>>(), [2, 3, 4, 5, 6, 7, 8, 9]);
    assert_eq!(m.xnack, Xnack { default_on: false, can_enable: true, on: false, from_env: false });
}

#[test]
fn no_gpu() {
    let none = RuntimeEnv::default();
    let e = machine_targets(&fixture("cpu-only"), &none).unwrap_err();
    assert!(matches!(e, MachineError::NoGpu { .. }), "{e}");
    assert!(e.to_string().starts_with("no AMD GPU found: ") && e.to_string().ends_with("lists 1 CPU node and no GPU"), "{e}");
    let empty = tempfile::tempdir().unwrap();
    let e = machine_targets(empty.path(), &none).unwrap_err();
    assert!(matches!(e, MachineError::NoTopology(_)), "{e}");
    assert!(e.to_string().contains("no AMD GPU found") && e.to_string().contains("amdgpu"), "{e}");
}

#[test]
fn unusable_nodes_are_skipped() {
    let t = tree(&[(90402, ECC), (0, 0)], None);
    let nodes = t.path().join(NODES_DIR);
    std::fs::create_dir_all(nodes.join("7")).unwrap();
    std::fs::write(nodes.join("7/properties"), "simd_count many\n").unwrap();
    std::fs::create_dir_all(nodes.join("8")).unwrap(); // no properties file
    std::fs::create_dir_all(nodes.join("not-a-node")).unwrap();
    let m = Machine::read(t.path(), &RuntimeEnv::default()).unwrap();
    assert_eq!((m.gpus.len(), m.skipped), (1, 3));
    assert_eq!(m.targets().unwrap(), [TargetId::parse("gfx942:sramecc+:xnack-").unwrap()]);
    let only_bad = tree(&[(0, 0)], None);
    let e = machine_targets(only_bad.path(), &RuntimeEnv::default()).unwrap_err().to_string();
    assert!(e.ends_with("1 CPU node and no usable GPU (1 node skipped, see the warnings)"), "{e}");
}

#[test]
fn nodes_in_numeric_order() {
    let t = tree(&[(110000, 0), (100300, 0), (110000, 0), (110000, 0), (110000, 0), (110000, 0), (110000, 0), (110000, 0), (110000, 0), (90010, ECC)], None);
    // Nodes 1..=10: "10" (gfx90a) sorts after "9", and duplicates collapse.
    assert_eq!(names(t.path(), &RuntimeEnv::default()), ["gfx1100", "gfx1030", "gfx90a:sramecc+:xnack-"]);
}

#[test]
fn apu_node_with_cpu_cores_is_a_gpu() {
    // Older kernels list an APU's GPU on the CPU's node (CRAT): SIMDs decide.
    let t = tree(&[], None);
    std::fs::write(t.path().join(NODES_DIR).join("0/properties"), "cpu_cores_count 4\nsimd_count 44\ngfx_target_version 90012\n").unwrap();
    assert_eq!(names(t.path(), &RuntimeEnv::default()), ["gfx90c:xnack+"]);
}

#[test]
fn sramecc_follows_the_capability_bit_and_hsa_enable_sramecc() {
    let t = tree(&[(90010, 0), (90402, ECC | 0x2807_a280)], None);
    assert_eq!(names(t.path(), &RuntimeEnv::default()), ["gfx90a:sramecc-:xnack-", "gfx942:sramecc+:xnack-"]);
    assert_eq!(names(t.path(), &env(&[("HSA_ENABLE_SRAMECC", "1")])), ["gfx90a:sramecc+:xnack-", "gfx942:sramecc+:xnack-"]);
    assert_eq!(names(t.path(), &env(&[("HSA_ENABLE_SRAMECC", "0")])), ["gfx90a:sramecc-:xnack-", "gfx942:sramecc-:xnack-"]);
    assert_eq!(names(t.path(), &env(&[("HSA_ENABLE_SRAMECC", "yes")])), ["gfx90a:sramecc-:xnack-", "gfx942:sramecc+:xnack-"]);
}

#[test]
fn xnack_rules_follow_the_kernel() {
    let mode = |gpus: &[(u64, u64)], noretry: Option<&str>, vars: &[(&str, &str)]| {
        let t = tree(gpus, noretry);
        let m = Machine::read(t.path(), &env(vars)).unwrap();
        (m.xnack.default_on, m.xnack.can_enable, names(t.path(), &env(vars)))
    };
    // MI200/MI300 switch per process; off by default (noretry defaults to 1).
    assert_eq!(mode(&[(90010, ECC)], None, &[]), (false, true, vec!["gfx90a:sramecc+:xnack-".into()]));
    assert_eq!(mode(&[(90010, ECC)], Some("-1"), &[("HSA_XNACK", "1")]).2, ["gfx90a:sramecc+:xnack+"]);
    assert_eq!(mode(&[(90010, ECC)], Some("0"), &[]), (true, true, vec!["gfx90a:sramecc+:xnack+".into()]));
    assert_eq!(mode(&[(90010, ECC)], Some("0"), &[("HSA_XNACK", "0")]).2, ["gfx90a:sramecc+:xnack-"]);
    // MI100 follows the boot-time setting only.
    assert_eq!(mode(&[(90008, ECC)], None, &[("HSA_XNACK", "1")]), (false, false, vec!["gfx908:sramecc+:xnack-".into()]));
    assert_eq!(mode(&[(90008, ECC)], Some("0"), &[]), (true, true, vec!["gfx908:sramecc+:xnack+".into()]));
    // Raven-class APUs retry by default.
    assert_eq!(mode(&[(90002, 0)], None, &[]), (true, true, vec!["gfx902:xnack+".into()]));
    assert_eq!(mode(&[(90002, 0)], Some("1"), &[]).2, ["gfx902:xnack-"]);
    // A GFX10/11 GPU in the same process rules XNACK out for every GPU.
    assert_eq!(mode(&[(90010, ECC), (110000, 0)], Some("0"), &[("HSA_XNACK", "1")]), (false, false, vec!["gfx90a:sramecc+:xnack-".into(), "gfx1100".into()]));
    // GFX10.1 has an xnack setting but never gets it on.
    assert_eq!(mode(&[(100100, 0)], Some("0"), &[("HSA_XNACK", "1")]), (false, false, vec!["gfx1010:xnack-".into()]));
    // An unreadable parameter counts as -1.
    assert!(mode(&[(90002, 0)], Some("garbage"), &[]).0);
}

#[test]
fn gfx_version_overrides() {
    let t = tree(&[(100301, 0), (100302, 0)], None);
    assert_eq!(names(t.path(), &env(&[("HSA_OVERRIDE_GFX_VERSION", "10.3.0")])), ["gfx1030"]);
    assert_eq!(names(t.path(), &env(&[("HSA_OVERRIDE_GFX_VERSION_2", "11.0.0")])), ["gfx1031", "gfx1100"]);
    // The per-node variable wins; XNACK is decided by the real GPUs (a
    // gfx1031 posing as gfx906 is still a GFX10.3 part: no XNACK).
    assert_eq!(
        names(t.path(), &env(&[("HSA_OVERRIDE_GFX_VERSION", "10.3.0"), ("HSA_OVERRIDE_GFX_VERSION_1", "9.0.6")])),
        ["gfx906:sramecc-:xnack-", "gfx1030"]
    );
    let e = RuntimeEnv::from_vars([("HSA_OVERRIDE_GFX_VERSION".to_string(), "gfx1030".to_string())]).unwrap_err();
    assert!(e.to_string().contains("HSA_OVERRIDE_GFX_VERSION=\"gfx1030\""), "{e}");
    let ignored = env(&[("HSA_OVERRIDE_GFX_VERSION_X", "junk"), ("HSA_XNACK", "2"), ("PATH", "/bin")]);
    assert_eq!(ignored, RuntimeEnv::default());
}

#[test]
fn report_lines() {
    let none = RuntimeEnv::default();
    let r = Machine::read(&fixture("mi210"), &none).unwrap().report().unwrap();
    assert_eq!(
        r,
        "node 2: gfx90a:sramecc+:xnack- (gfx_target_version 90010, device 0x740f)\n\
         node 3: gfx90a:sramecc+:xnack- (gfx_target_version 90010, device 0x740f)\n\
         xnack: off (a process with HSA_XNACK=1 gets xnack+)\n\
         auto: gfx90a:sramecc+:xnack-\n"
    );
    let r = Machine::read(&fixture("mixed"), &none).unwrap().report().unwrap();
    assert_eq!(
        r,
        "node 1: gfx1100 (gfx_target_version 110000, device 0x744c)\n\
         node 2: gfx1036 (gfx_target_version 100306, device 0x164e)\n\
         auto: gfx1100,gfx1036\n"
    );
    assert!(Machine::read(&fixture("cpu-only"), &none).unwrap().report().is_err());
}

/// Issue 18 item 7: a topology file that is a FIFO blocked `archs
/// --machine` forever, and a huge one was read whole (and here, since its
/// start is valid, even believed). Only regular files up to 64 KiB are
/// read now; each other file costs its node (or `noretry`) with one
/// warning. Run on a thread and waited for with a bound, so a regression
/// fails instead of hanging the suite.
#[cfg(unix)]
#[test]
fn topology_files_must_be_small_regular_files() {
    use std::os::unix::ffi::OsStrExt;
    let t = tree(&[(110000, 0)], None);
    let nodes = t.path().join(NODES_DIR);
    let mkfifo = |p: &Path| {
        let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", p.display());
    };
    for n in ["5", "6", "7"] {
        std::fs::create_dir_all(nodes.join(n)).unwrap();
    }
    mkfifo(&nodes.join("5/properties"));
    // Valid properties followed by 1 MiB of (sparse) padding.
    let big = nodes.join("6/properties");
    std::fs::write(&big, "simd_count 64\ngfx_target_version 90010\n").unwrap();
    std::fs::OpenOptions::new().write(true).open(&big).unwrap().set_len(1 << 20).unwrap();
    std::fs::create_dir_all(nodes.join("7/properties")).unwrap();
    let noretry = t.path().join(NORETRY_PARAM);
    std::fs::create_dir_all(noretry.parent().unwrap()).unwrap();
    mkfifo(&noretry);

    let root = t.path().to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(Machine::read(&root, &RuntimeEnv::default()).map_err(|e| e.to_string())));
    let m = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("Machine::read blocked on a FIFO").unwrap();
    assert_eq!((m.gpus.len(), m.skipped), (1, 3));
    assert_eq!(m.targets().unwrap(), [TargetId::parse("gfx1100").unwrap()]);

    let err = |p: &Path| read_topology_file(p).unwrap_err().to_string();
    assert_eq!(err(&nodes.join("5/properties")), "not a regular file (a FIFO); refused");
    assert_eq!(err(&big), "larger than 64 KiB, not a KFD topology file; refused");
    assert_eq!(err(&nodes.join("7/properties")), "not a regular file (a directory); refused");
    assert_eq!(err(Path::new("/dev/zero")), "not a regular file (a character device); refused");
    // Exactly the cap is still read.
    std::fs::OpenOptions::new().write(true).open(&big).unwrap().set_len(MAX_TOPOLOGY_FILE).unwrap();
    assert_eq!(read_topology_file(&big).unwrap().len() as u64, MAX_TOPOLOGY_FILE);
}
