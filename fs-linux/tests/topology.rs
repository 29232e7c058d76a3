//! `kpackfs archs --machine` on a KFD topology (via `KPACKFS_SYSFS_ROOT`)
//! whose files are not what sysfs holds: a FIFO, a symlink to `/dev/zero`,
//! a 300 MB file. Issue 18 item 7: these hung the command or exhausted
//! memory. The child runs with its address space limited (so a regression
//! fails instead of eating the machine's memory) and is waited for with a
//! bound (so a regression fails instead of hanging the suite).

use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const NODES_DIR: &str = "class/kfd/kfd/topology/nodes";

/// A temporary sysfs root, removed on drop.
struct Root(PathBuf);

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn node(root: &Path, n: u32) -> PathBuf {
    let dir = root.join(NODES_DIR).join(n.to_string());
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("properties")
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", p.display());
}

/// Runs `kpackfs archs --machine` on `root` with at most 1 GiB of address
/// space; fails if it has not finished after 60 s (then it is killed).
fn archs_machine(root: &Path) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kpackfs"));
    cmd.args(["archs", "--machine"])
        .env("KPACKFS_SYSFS_ROOT", root)
        .env_remove("HSA_XNACK")
        .env_remove("HSA_ENABLE_SRAMECC")
        .env_remove("HSA_OVERRIDE_GFX_VERSION")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit { rlim_cur: 1 << 30, rlim_max: 1 << 30 };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().expect("run kpackfs");
    let pid = child.id() as i32;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(out) => out.expect("wait for kpackfs"),
        Err(_) => {
            // SAFETY: our child, not yet reaped (the waiting thread reaps it).
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("kpackfs archs --machine did not finish in 60 s");
        }
    }
}

#[test]
fn odd_topology_files_are_refused_promptly() {
    let root = Root(std::env::temp_dir().join(format!("kpackfs-topology-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&root.0);
    std::fs::write(node(&root.0, 0), "cpu_cores_count 16\nsimd_count 0\ngfx_target_version 0\n").unwrap();
    std::fs::write(node(&root.0, 1), "simd_count 96\ngfx_target_version 110000\ndevice_id 29772\ncapability 0\n").unwrap();
    mkfifo(&node(&root.0, 2));
    std::os::unix::fs::symlink("/dev/zero", node(&root.0, 3)).unwrap();
    // 300 MB (sparse) whose first lines would name a gfx90a.
    let big = node(&root.0, 4);
    std::fs::write(&big, "simd_count 64\ngfx_target_version 90010\n").unwrap();
    std::fs::OpenOptions::new().write(true).open(&big).unwrap().set_len(300 << 20).unwrap();
    let noretry = root.0.join("module/amdgpu/parameters/noretry");
    std::fs::create_dir_all(noretry.parent().unwrap()).unwrap();
    mkfifo(&noretry);

    let out = archs_machine(&root.0);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{:?}\n{stderr}", out.status);
    assert_eq!(stdout, "node 1: gfx1100 (gfx_target_version 110000, device 0x744c)\nauto: gfx1100\n", "{stderr}");
    for (what, needle) in [
        ("node 2", "not a regular file (a FIFO)"),
        ("node 3", "not a regular file (a character device)"),
        ("node 4", "larger than 64 KiB"),
        ("noretry", "not a regular file (a FIFO)"),
    ] {
        let line = stderr.lines().find(|l| l.contains(what) || (what == "noretry" && l.contains("/noretry:")));
        assert!(line.is_some_and(|l| l.contains(needle)), "{what}: no warning with {needle:?} in\n{stderr}");
    }
    assert_eq!(stderr.lines().count(), 4, "one warning each:\n{stderr}");
}
