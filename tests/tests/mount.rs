//! Real FUSE mounts of the demo install: the mounted view equals the baked
//! one, it is read-only, and it behaves like a production filesystem
//! (clean unmount on signals, busy mountpoints refused, detach, mount
//! helper form, stable inodes and listings, operator counters).

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use kpackfs_tests::*;

fn demo() -> PathBuf {
    assets().join("demo-install")
}

#[test]
fn mounted_view_equals_baked_view() {
    require_root();
    for arch in ["gfx90a:xnack-", "gfx1030", "gfx90a,gfx1030", "gfx906", "gfx90a"] {
        let m = Mount::new(Some(&demo()), arch, &[]);
        let baked = bake(&demo(), arch, &[]);
        let a = snapshot(&m.mnt);
        let b = snapshot(&baked.path().join("out"));
        assert_same_tree(&a, &b, &format!("mount vs bake for {arch}"));
        // The view really is slim: the processors its names mention are
        // exactly the selected ones (the demo carries gfx90a, gfx906 and
        // gfx1030 database files, kernels and code objects; by hand).
        let want: &[&str] = match arch {
            "gfx90a:xnack-" | "gfx90a" => &["gfx90a"],
            "gfx1030" => &["gfx1030"],
            "gfx90a,gfx1030" => &["gfx1030", "gfx90a"],
            "gfx906" => &["gfx906"],
            _ => unreachable!(),
        };
        assert_eq!(processors_named(&a), want, "{arch}: processors in the view's names");
    }
    assert_eq!(processors_named(&snapshot(&demo())), ["gfx1030", "gfx906", "gfx90a"], "the demo's own names");
}

/// The `gfx…` processors mentioned anywhere in a tree's paths, sorted.
fn processors_named(tree: &std::collections::BTreeMap<PathBuf, Node>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in tree.keys() {
        let s = p.to_string_lossy();
        let mut rest = &s[..];
        while let Some(i) = rest.find("gfx") {
            let tail = &rest[i + 3..];
            let n = tail.find(|c: char| !c.is_ascii_alphanumeric()).unwrap_or(tail.len());
            if n > 0 && tail.as_bytes()[0].is_ascii_digit() {
                out.push(format!("gfx{}", &tail[..n]));
            }
            rest = &tail[n..];
        }
    }
    out.sort();
    out.dedup();
    out
}

#[test]
fn selections_hide_other_targets() {
    require_root();
    let m = Mount::new(Some(&demo()), "gfx90a:xnack-", &[]);
    let lib = m.path("lib/rocblas/library");
    let names: Vec<String> = fs::read_dir(&lib).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(names.iter().any(|n| n.contains("gfx90a")), "{names:?}");
    assert!(!names.iter().any(|n| n.contains("gfx1030") || n.contains("gfx906")), "{names:?}");
    assert!(names.contains(&"TensileLibrary_fallback.dat".to_string()), "generic files stay: {names:?}");
    assert!(!m.path("lib/aotriton/kernels/gfx1030").exists());
    assert!(m.path("lib/.kpack/libdemo.so.1.0_gfx90a:xnack-.kpack").is_file());
    assert!(!m.path("lib/.kpack/libdemo.so.1.0_gfx90a:xnack+.kpack").exists());
    assert!(!m.path("lib/.kpack/libdemo.so.1.0_gfx1030.kpack").exists());
    // Transformed binaries are smaller than their fat originals.
    let fat = fs::metadata(demo().join("lib/libdemo.so.1.0")).unwrap().len();
    let slim = fs::metadata(m.path("lib/libdemo.so.1.0")).unwrap().len();
    assert!(slim < fat, "{slim} >= {fat}");
}

/// `--arch auto` serves exactly what naming the machine's GPU target does
/// (the MI210 fixture: `gfx90a:sramecc+:xnack-`).
#[test]
fn arch_auto_serves_the_machines_targets() {
    require_root();
    let fixture = repo().join("tests/fixtures/kfd/mi210");
    let m = Mount::new_with_env(Some(&demo()), "auto", &[], &[("KPACKFS_SYSFS_ROOT", &fixture)]);
    let baked = bake(&demo(), "gfx90a:sramecc+:xnack-", &[]);
    assert_same_tree(&snapshot(&m.mnt), &snapshot(&baked.path().join("out")), "mount --arch auto on the MI210 fixture");
    assert!(m.path("lib/.kpack/libdemo.so.1.0_gfx90a:xnack-.kpack").is_file());
    assert!(!m.path("lib/.kpack/libdemo.so.1.0_gfx90a:xnack+.kpack").exists());
    assert!(!m.path("lib/aotriton/kernels/gfx1030").exists());
}

#[test]
fn embedded_demo_is_served_with_demo() {
    require_root();
    let m = Mount::new(None, "gfx1030", &[]);
    let baked = bake(&demo(), "gfx1030", &[]);
    let a = snapshot(&m.mnt);
    let b = snapshot(&baked.path().join("out"));
    // Same content and modes (the unpacked copy has its own times).
    assert_same_tree(&a, &b, "embedded demo vs test_assets demo");
}

fn errno_of(rc: i32) -> i32 {
    assert_eq!(rc, -1, "operation unexpectedly succeeded");
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

#[test]
fn every_mutating_operation_is_erofs() {
    require_root();
    let m = Mount::new(Some(&demo()), "gfx90a", &[]);
    let file = m.path("lib/libdemo.so.1.0");
    let dir = m.path("lib");
    let new = m.path("lib/new");
    // SAFETY: plain libc calls on valid NUL-terminated paths and buffers.
    unsafe {
        let erofs = |rc: i32, what: &str| assert_eq!(errno_of(rc), libc::EROFS, "{what}");
        erofs(libc::open(c(&file).as_ptr(), libc::O_WRONLY), "open for write");
        erofs(libc::open(c(&file).as_ptr(), libc::O_RDWR), "open read-write");
        erofs(libc::open(c(&file).as_ptr(), libc::O_RDONLY | libc::O_TRUNC), "open with O_TRUNC");
        erofs(libc::open(c(&new).as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o644), "create");
        erofs(libc::mkdir(c(&new).as_ptr(), 0o755), "mkdir");
        erofs(libc::mknod(c(&new).as_ptr(), libc::S_IFIFO | 0o644, 0), "mknod");
        erofs(libc::unlink(c(&file).as_ptr()), "unlink");
        erofs(libc::rmdir(c(&m.path("share/doc/demo")).as_ptr()), "rmdir");
        erofs(libc::rename(c(&file).as_ptr(), c(&new).as_ptr()), "rename");
        erofs(libc::link(c(&file).as_ptr(), c(&new).as_ptr()), "link");
        erofs(libc::symlink(c(Path::new("x")).as_ptr(), c(&new).as_ptr()), "symlink");
        erofs(libc::chmod(c(&file).as_ptr(), 0o600), "chmod (setattr)");
        erofs(libc::chown(c(&file).as_ptr(), 1, 1), "chown (setattr)");
        erofs(libc::truncate(c(&file).as_ptr(), 0), "truncate (setattr)");
        erofs(libc::utimes(c(&file).as_ptr(), std::ptr::null()), "utimes (setattr)");
        let name = CString::new("user.test").unwrap();
        erofs(libc::setxattr(c(&file).as_ptr(), name.as_ptr(), b"1".as_ptr().cast(), 1, 0), "setxattr");
        erofs(libc::removexattr(c(&file).as_ptr(), name.as_ptr()), "removexattr");
        erofs(libc::access(c(&file).as_ptr(), libc::W_OK), "access(W_OK)");
        // Writing through a read-only descriptor is EBADF, as anywhere.
        let fd = libc::open(c(&file).as_ptr(), libc::O_RDONLY);
        assert!(fd >= 0);
        assert_eq!(errno_of(libc::write(fd, b"x".as_ptr().cast(), 1) as i32), libc::EBADF);
        assert_eq!(errno_of(libc::fallocate(fd, 0, 0, 10)), libc::EBADF, "fallocate on a read-only descriptor");
        libc::close(fd);
        let _ = dir;
    }
    // Nothing changed.
    let baked = bake(&demo(), "gfx90a", &[]);
    assert_same_tree(&snapshot(&m.mnt), &snapshot(&baked.path().join("out")), "after write attempts");
}

/// A shell with its cwd in `mnt` and `lib/libhost.so` open there; returns
/// once it has both (it says so on its stdout).
fn hold_busy(mnt: &Path) -> std::process::Child {
    use std::io::BufRead;
    let mut holder = Command::new("sh")
        .arg("-c")
        .arg("exec 3<lib/libhost.so; echo holding; exec sleep 30")
        .current_dir(mnt)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(holder.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line, "holding\n", "the holder could not open a file in the mount");
    holder
}

#[test]
fn sigterm_unmounts_cleanly_even_when_busy() {
    require_root();
    let mut m = Mount::new(Some(&demo()), "gfx90a", &[]);
    assert!(mounted(&m.mnt));
    let st = m.terminate().expect("daemon status");
    assert!(st.success(), "daemon exit {st}");
    assert!(!mounted(&m.mnt), "stale mount after SIGTERM");

    // A process with its cwd and an open file inside keeps the mount busy:
    // the daemon still leaves no mount behind.
    let mut m = Mount::new(Some(&demo()), "gfx90a", &[]);
    let mut holder = hold_busy(&m.mnt);
    let st = m.terminate().expect("daemon status");
    assert!(st.success(), "daemon exit {st}");
    assert!(!mounted(&m.mnt), "stale mount after SIGTERM while busy");
    let _ = holder.kill();
    let _ = holder.wait();

    // Same with --auto-unmount, where unmounting goes through fusermount's
    // watchdog and "succeeds" while the mount is still busy.
    let mut m = Mount::new(Some(&demo()), "gfx90a", &["--auto-unmount"]);
    let mut holder = hold_busy(&m.mnt);
    let st = m.terminate().expect("daemon did not exit after SIGTERM with --auto-unmount while busy");
    assert!(st.success(), "daemon exit {st}");
    let _ = holder.kill();
    let _ = holder.wait();
    let start = std::time::Instant::now();
    while mounted(&m.mnt) && start.elapsed() < std::time::Duration::from_secs(5) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!mounted(&m.mnt), "stale mount after SIGTERM with --auto-unmount while busy");
}

#[test]
fn busy_mountpoint_is_refused_with_a_clear_message() {
    require_root();
    let m = Mount::new(Some(&demo()), "gfx90a", &[]);
    let out = Command::new(kpackfs()).arg("mount").arg(demo()).arg(&m.mnt).arg("--arch").arg("gfx90a").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("busy") && err.lines().count() == 1, "{err}");
    // The first mount is untouched.
    assert!(m.path("lib/libhost.so").is_file());
}

#[test]
fn detached_mount_is_usable_on_the_next_line() {
    require_root();
    let dir = tempdir();
    let mnt = dir.path().join("m");
    fs::create_dir(&mnt).unwrap();
    let st = Command::new(kpackfs()).arg("mount").arg(demo()).arg(&mnt).arg("--arch").arg("gfx90a:xnack-").status().unwrap();
    assert!(st.success());
    // No waiting: the mount is live when the command returns.
    let data = fs::read(mnt.join("lib/.kpack/libdemo.so.1.0_gfx90a:xnack-.kpack"));
    let unmounted = Command::new("umount").arg(&mnt).status().unwrap().success();
    assert!(data.is_ok(), "{data:?}");
    assert!(unmounted);
    assert!(!mounted(&mnt));
}

#[test]
fn mount_helper_form_works() {
    require_root();
    // mount(8) -> mount.fuse3 -> `kpackfs SOURCE MOUNTPOINT -o opts`.
    // `-t fuse.kpackfs` finds `kpackfs` on mount's sanitized PATH; the
    // equivalent `-t fuse prog#source` form names the binary explicitly, so
    // the test needs no install.
    let dir = tempdir();
    let mnt = dir.path().join("m");
    fs::create_dir(&mnt).unwrap();
    let out = Command::new("mount")
        .args(["-t", "fuse", "-o", "arch=gfx90a,arch=gfx1030,ro,nodev,nosuid,allow_other"])
        .arg(format!("{}#{}", kpackfs().display(), demo().display()))
        .arg(&mnt)
        .output()
        .unwrap();
    assert!(out.status.success(), "mount -t fuse.kpackfs failed: {}", String::from_utf8_lossy(&out.stderr));
    let ok = mnt.join("lib/.kpack/libdemo.so.1.0_gfx1030.kpack").is_file() && mnt.join("lib/.kpack/libdemo.so.1.0_gfx90a:xnack+.kpack").is_file();
    let un = Command::new("umount").arg(&mnt).status().unwrap().success();
    assert!(ok, "helper-form mount does not serve both targets");
    assert!(un && !mounted(&mnt));
}

#[test]
fn inodes_and_listings_are_stable() {
    require_root();
    let m = Mount::new(Some(&demo()), "gfx90a", &["--ttl", "0"]);
    let list = |p: &Path| -> Vec<(std::ffi::OsString, u64)> {
        let mut v: Vec<_> = fs::read_dir(p).unwrap().map(|e| e.unwrap()).map(|e| (e.file_name(), e.ino())).collect();
        v.sort();
        v
    };
    let first = list(&m.path("lib"));
    let inos: Vec<u64> = ["lib/libdemo.so.1.0", "lib/.kpack", "bin/demo_app"].iter().map(|p| fs::symlink_metadata(m.path(p)).unwrap().ino()).collect();
    drop_caches("3");
    assert_eq!(list(&m.path("lib")), first);
    let again: Vec<u64> = ["lib/libdemo.so.1.0", "lib/.kpack", "bin/demo_app"].iter().map(|p| fs::symlink_metadata(m.path(p)).unwrap().ino()).collect();
    assert_eq!(inos, again);
    // readdir order is the same on every pass, and `.`/`..` come first.
    let raw1: Vec<_> = fs::read_dir(m.path("lib")).unwrap().map(|e| e.unwrap().file_name()).collect();
    let raw2: Vec<_> = fs::read_dir(m.path("lib")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(raw1, raw2);
}

#[test]
fn operator_counters_are_readable_in_the_mount() {
    require_root();
    let m = Mount::new(Some(&demo()), "gfx90a", &["--cache-dir", "none"]);
    // Names and values per node; foreign names are absent (ENODATA).
    let out = Command::new("python3")
        .arg("-c")
        .arg(concat!(
            "import os,sys,errno\n",
            "print(sorted(os.listxattr(sys.argv[1])))\n",
            "print(sorted(os.listxattr(sys.argv[2])))\n",
            "print(os.getxattr(sys.argv[2], 'user.kpackfs.targets').decode())\n",
            "print(sorted(os.listxattr(sys.argv[3])))\n",
            "try:\n    os.getxattr(sys.argv[2], 'security.selinux')\nexcept OSError as e:\n    print(errno.errorcode[e.errno])\n",
        ))
        .arg(&m.mnt)
        .arg(m.path("lib/libdemo.so.1.0"))
        .arg(m.path("share/doc/demo/README.txt"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "['user.kpackfs.arch', 'user.kpackfs.origin', 'user.kpackfs.source', 'user.kpackfs.stats']");
    assert_eq!(lines[1], "['user.kpackfs.origin', 'user.kpackfs.targets']");
    assert_eq!(lines[2], "gfx1030,gfx906,gfx90a:xnack-,gfx90a:xnack+", "targets libdemo carries");
    assert_eq!(lines[3], "['user.kpackfs.origin']");
    assert_eq!(lines[4], "ENODATA");
    // Reads reach the daemon (no cache directory: no local copy to serve
    // them from).
    let _ = fs::read(m.path("lib/libdemo.so.1.0")).unwrap();
    let s = stats(&m.mnt);
    assert!(counter(&s, "bytes_served") > 0 && counter(&s, "plans_built") >= 1, "{s}");
    let out = Command::new("python3")
        .arg("-c")
        .arg("import os,sys; print(os.getxattr(sys.argv[1], 'user.kpackfs.origin').decode())")
        .arg(m.path("lib/libdemo.so.1.0"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "transformed");
}

#[test]
fn statfs_reports_the_source_filesystem() {
    require_root();
    let m = Mount::new(Some(&demo()), "gfx90a", &[]);
    // SAFETY: statvfs into a zeroed struct.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c(&m.mnt).as_ptr(), &mut s) }, 0);
    assert!(s.f_blocks > 0 && s.f_namemax >= 255);
    assert_eq!(s.f_bavail, 0, "a read-only view has no free space");
}

#[test]
fn materialized_copies_are_served_by_the_kernel_and_identical() {
    require_root();
    let cache = tempdir();
    let dir = cache.path().join("copies");
    let m = Mount::new(Some(&demo()), "gfx90a", &["--materialize", "--cache-dir", dir.to_str().unwrap()]);
    let baked = bake(&demo(), "gfx90a", &[]);
    let files = ["lib/libdemo.so.1.0", "lib/.kpack/libdemo.so.1.0_gfx90a:xnack-.kpack", "bin/demo_app"];
    // A handle kept open in page-cache mode must keep working while the
    // file's copy appears (the kernel forbids mixing modes on one inode).
    let held = fs::File::open(m.path(files[0])).unwrap();
    for f in files {
        assert_eq!(fs::read(m.path(f)).unwrap(), fs::read(baked.path().join("out").join(f)).unwrap(), "{f}");
    }
    let copies = || fs::read_dir(&dir).map(|d| d.filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".data")).count()).unwrap_or(0);
    // A reader that keeps reading: a source changed in the last two
    // seconds (the demo was just unpacked) is copied once it has settled.
    let reread = || files.iter().for_each(|f| drop(fs::read(m.path(f)).unwrap()));
    assert!(eventually(30, || {
        reread();
        copies() == files.len()
    }));
    drop(held);
    let reads = || counter(&stats(&m.mnt), "reads");
    drop_caches("3");
    let before = reads();
    for f in files {
        assert_eq!(fs::read(m.path(f)).unwrap(), fs::read(baked.path().join("out").join(f)).unwrap(), "{f} (from its copy)");
    }
    assert_eq!(reads(), before, "reads reached the daemon although the copies exist");
    assert_same_tree(&snapshot(&m.mnt), &snapshot(&baked.path().join("out")), "materialized mount vs bake");
}

/// An install-looking directory (like /opt/rocm) in a fresh tempdir.
fn fake_install() -> (TempDir, PathBuf) {
    let dir = tempdir();
    let inst = dir.path().join("rocm");
    fs::create_dir_all(inst.join("lib")).unwrap();
    fs::write(inst.join("lib/libamdhip64.so"), b"the install").unwrap();
    (dir, inst)
}

/// Unmounts `mnt` if a (broken) kpackfs mounted something there.
fn unmount_stray(mnt: &Path) -> bool {
    let was = mounted(mnt);
    if was {
        let _ = Command::new("umount").arg("-l").arg(mnt).status();
    }
    was
}

#[test]
fn forgotten_source_never_mounts_the_demo_over_the_install() {
    require_root();
    let (_dir, inst) = fake_install();
    let cache = tempdir();
    // `kpackfs mount /opt/rocm --arch gfx90a` and mount(8)'s bare form.
    for argv in [vec!["mount".as_ref(), inst.as_os_str()], vec![inst.as_os_str()]] {
        let out = Command::new(kpackfs()).args(&argv).args(["--arch", "gfx90a", "--cache-dir"]).arg(cache.path()).output().unwrap();
        let stray = unmount_stray(&inst);
        assert!(!stray, "kpackfs {argv:?} mounted over the install");
        assert_eq!(out.status.code(), Some(2), "{argv:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(fs::read(inst.join("lib/libamdhip64.so")).unwrap(), b"the install");
    }
    // Asked for by name, the demo is served.
    let m = Mount::new(None, "gfx1030", &[]);
    assert!(m.path("lib/.kpack/libdemo.so.1.0_gfx1030.kpack").is_file());
}

#[test]
fn nonempty_mountpoint_needs_nonempty() {
    require_root();
    let (_dir, inst) = fake_install();
    let cache = tempdir();
    let out = Command::new(kpackfs()).arg("mount").arg(demo()).arg(&inst).args(["--arch", "gfx90a", "--cache-dir"]).arg(cache.path()).output().unwrap();
    let stray = unmount_stray(&inst);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!stray, "mounted over a non-empty directory");
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("not empty") && err.contains("nonempty") && err.contains(&*inst.to_string_lossy()) && err.lines().count() == 1, "{err}");
    // Asked for, it mounts over it (and hides its entries while mounted).
    for opt in [&["-o", "nonempty"][..], &["--nonempty"]] {
        let m = Mount::at(Some(&demo()), &inst, "gfx90a", opt);
        assert!(m.path("lib/libdemo.so.1.0").is_file(), "{opt:?}");
        assert!(!m.path("lib/libamdhip64.so").exists(), "{opt:?}");
    }
    assert_eq!(fs::read(inst.join("lib/libamdhip64.so")).unwrap(), b"the install");
}

#[test]
fn mountpoint_equal_to_inside_or_containing_the_source_is_refused() {
    require_root();
    let (dir, inst) = fake_install();
    let cache = tempdir();
    let empty = inst.join("empty");
    fs::create_dir(&empty).unwrap();
    // (source, mountpoint, what the one line says)
    let cases = [(&inst, &inst, "is the source"), (&inst, &empty, "inside the source"), (&inst, &dir.path().to_path_buf(), "lies inside the mountpoint")];
    for (src, mnt, want) in cases {
        let out =
            Command::new(kpackfs()).arg("mount").arg(src).arg(mnt).args(["--arch", "gfx90a", "--nonempty", "--cache-dir"]).arg(cache.path()).output().unwrap();
        let stray = unmount_stray(mnt);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!stray, "mounted {} at {}", src.display(), mnt.display());
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(want) && err.lines().count() == 1, "{} at {}: {err}", src.display(), mnt.display());
    }
}

/// Polls `path` until it contains `what` (the daemon writes it; the
/// deadline only turns a hang into a failure).
fn wait_for_text(path: &Path, what: &str) -> String {
    let start = std::time::Instant::now();
    loop {
        let text = fs::read_to_string(path).unwrap_or_default();
        if text.contains(what) {
            return text;
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(30), "{} never got {what:?}:\n{text}", path.display());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// With --log-file every diagnostic goes to the file; the terminal gets
/// the `-f` line saying the mount is live and the warning about a target
/// the install does not carry. An ordinary `umount` logs no fuser warning
/// and the counters once.
#[test]
fn log_file_gets_the_log_and_the_terminal_what_its_user_must_see() {
    require_root();
    let work = tempdir();
    let (mnt, log, tty) = (work.path().join("mnt"), work.path().join("daemon.log"), work.path().join("terminal"));
    fs::create_dir(&mnt).unwrap();
    /// Kills the daemon and unmounts if the test fails half-way.
    struct Guard(std::process::Child, PathBuf);
    impl Drop for Guard {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
            if mounted(&self.1) {
                let _ = Command::new("umount").arg("-l").arg(&self.1).status();
            }
        }
    }
    let child = Command::new(kpackfs())
        .args(["mount", "-f"])
        .arg(demo())
        .arg(&mnt)
        .args(["--arch", "gfx1100", "--log-file"])
        .arg(&log)
        .args(with_cache_dir(&[]))
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(fs::File::create(&tty).unwrap())
        .spawn()
        .unwrap();
    let mut guard = Guard(child, mnt.clone());
    let child = &mut guard.0;
    let start = std::time::Instant::now();
    while !mounted(&mnt) {
        assert!(child.try_wait().unwrap().is_none(), "kpackfs exited early: {}", fs::read_to_string(&tty).unwrap_or_default());
        assert!(start.elapsed() < std::time::Duration::from_secs(20), "mount did not come up");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    wait_for_text(&log, "carries no code for it");
    let unmounted = Command::new("umount").arg(&mnt).status().unwrap().success();
    let st = child.wait().unwrap();
    drop(guard);
    assert!(unmounted && st.success(), "umount {unmounted}, daemon {st}");
    let terminal = fs::read_to_string(&tty).unwrap();
    let lines: Vec<&str> = terminal.lines().collect();
    assert_eq!(lines.len(), 2, "terminal:\n{terminal}");
    assert!(lines.iter().any(|l| l.starts_with("kpackfs: serving ") && l.ends_with("(Ctrl-C to unmount)")), "terminal:\n{terminal}");
    let demo = demo();
    let warning =
        format!("kpackfs: --arch gfx1100: {} carries no code for it (it carries: gfx1030, gfx906, gfx90a, gfx90a:xnack+, gfx90a:xnack-)", demo.display());
    assert!(lines.contains(&warning.as_str()), "terminal:\n{terminal}");
    let text = fs::read_to_string(&log).unwrap();
    assert!(text.contains(" INFO  kpackfs::mount] serving "), "{text}");
    assert!(text.contains("carries no code for it"), "{text}");
    assert!(!text.contains("Failed to umount"), "fuser's spurious warning:\n{text}");
    assert_eq!(text.matches("counters").count(), 1, "{text}");
}

/// Issue 20 item 8: the source is free once the view is unmounted and its
/// daemon has exited — nothing (a passthrough backing file, the watchdog
/// process, a late thread) keeps a loop-mounted image busy. The view is
/// read through first (every file opened: passthrough backing files,
/// archives built), with --auto-unmount (the watchdog and fusermount3's
/// helper run beside the daemon).
#[test]
fn a_loop_mounted_source_is_free_when_the_daemon_has_exited() {
    require_root();
    let work = tempdir();
    let (image, src, mnt) = (work.path().join("demo.sqfs"), work.path().join("src"), work.path().join("mnt"));
    fs::create_dir(&src).unwrap();
    fs::create_dir(&mnt).unwrap();
    let st = Command::new("mksquashfs")
        .arg(demo())
        .arg(&image)
        .args(["-quiet", "-noappend"])
        .stdout(std::process::Stdio::null())
        .status()
        .expect("mksquashfs (apt-get install squashfs-tools)");
    assert!(st.success());
    assert!(Command::new("mount").args(["-o", "loop,ro"]).arg(&image).arg(&src).status().unwrap().success(), "loop mount");
    /// Unmounts the image (and the view) whatever happens.
    struct Image(PathBuf, PathBuf);
    impl Drop for Image {
        fn drop(&mut self) {
            for p in [&self.1, &self.0] {
                if mounted(p) {
                    let _ = Command::new("umount").arg("-l").arg(p).status();
                }
            }
        }
    }
    let _image = Image(src.clone(), mnt.clone());
    let mut m = Mount::at(Some(&src), &mnt, "gfx90a", &["--auto-unmount"]);
    let _ = snapshot(&m.mnt);
    // An operator's unmount, then the daemon's exit.
    assert!(Command::new("umount").arg(&mnt).status().unwrap().success());
    let mut child = m.child.take().expect("daemon");
    assert!(child.wait().unwrap().success());
    let out = Command::new("umount").arg(&src).output().unwrap();
    assert!(out.status.success(), "the image is still busy after the daemon exited: {}", String::from_utf8_lossy(&out.stderr));
}

/// The mount's readahead window is raised to 512 KiB (the kernel offers
/// FUSE 128 KiB; fuse.rs's READAHEAD, measured in bench/ANALYSIS.md). The
/// knob is found by `findmnt`'s device number, not kpackfs's own lookup.
#[test]
fn the_readahead_window_is_raised() {
    require_root();
    let m = Mount::new(Some(&demo()), "gfx90a", &[]);
    let out = Command::new("findmnt").args(["-n", "-o", "MAJ:MIN"]).arg(&m.mnt).output().unwrap();
    let dev = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().trim().to_string();
    let kb = fs::read_to_string(format!("/sys/class/bdi/{dev}/read_ahead_kb")).unwrap();
    assert_eq!(kb.trim(), "512", "bdi {dev}");
}
