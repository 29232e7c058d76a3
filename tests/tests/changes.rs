//! Reliability of a live mount: sources that change underneath it, hostile
//! paths and names, and faults (kill -9, slow plans).

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kpackfs_tests::*;

fn copy_assets(root: &Path, names: &[&str]) {
    fs::create_dir_all(root.join("lib")).unwrap();
    for n in names {
        fs::copy(assets().join("bin").join(n), root.join("lib").join(n)).unwrap();
    }
}

/// The view bytes of `name` when the source holds `asset` under that name.
fn transformed(asset: &str, name: &str, arch: &str) -> Vec<u8> {
    let src = tempdir();
    fs::create_dir_all(src.path().join("lib")).unwrap();
    fs::copy(assets().join("bin").join(asset), src.path().join("lib").join(name)).unwrap();
    let b = bake(src.path(), arch, &[]);
    fs::read(b.path().join("out/lib").join(name)).unwrap()
}

/// Replaces the source's `lib/libtwo.so` the way package managers do (a
/// copy of `libmulti.so` renamed over it), waits until `served` (its path in
/// the mount) shows the new content, and returns that content.
fn replace_libtwo_by_rename(root: &Path, served: &Path, arch: &str) -> Vec<u8> {
    fs::copy(assets().join("bin/libmulti.so"), root.join("lib/.new")).unwrap();
    fs::rename(root.join("lib/.new"), root.join("lib/libtwo.so")).unwrap();
    let new = transformed("libmulti.so", "libtwo.so", arch);
    assert!(eventually(5, || fs::read(served).map(|b| b == new).unwrap_or(false)), "renamed-over file not served anew");
    new
}

#[test]
fn changes_under_a_live_mount() {
    require_root();
    let src = tempdir();
    let root = src.path();
    copy_assets(root, &["libtwo.so", "libmulti.so", "libhost.so", "app_pie"]);
    let arch = "gfx90a";
    let m = Mount::new(Some(root), arch, &[]);
    let two = m.path("lib/libtwo.so");
    let old = fs::read(&two).unwrap();
    assert_eq!(old, transformed("libtwo.so", "libtwo.so", arch));
    let held = fs::File::open(&two).unwrap();

    // Replace by rename: the new content appears (size included), the open
    // handle keeps serving the old version or fails — never a mix.
    let new = replace_libtwo_by_rename(root, &two, arch);
    assert_eq!(fs::metadata(&two).unwrap().len(), new.len() as u64);
    // The old version is still open, so its bytes still exist: a handle
    // on it keeps reading them — from the daemon, not just from cached pages.
    drop_caches("3");
    let mut via_old = vec![0u8; old.len()];
    held.read_exact_at(&mut via_old, 0).expect("a handle on the renamed-over version fails");
    assert!(via_old == old, "old handle served a mix of versions");
    // Its archives follow the new binary (libmulti carries xnack± variants).
    assert!(eventually(5, || m.path("lib/.kpack/libtwo.so_gfx90a:xnack+.kpack").exists()));
    assert!(!m.path("lib/.kpack/libtwo.so_gfx90a.kpack").exists());

    // Truncate in place under an open handle: EIO on that handle, no crash;
    // after re-lookup the short file is served (unchanged: no longer fat).
    let app = m.path("lib/app_pie");
    let h = fs::File::open(&app).unwrap();
    // What the handle opened, from a bake (reading it through the mount
    // would put it in the page cache and keep the daemon out of the read).
    let old_app = transformed("app_pie", "app_pie", arch);
    fs::OpenOptions::new().write(true).open(root.join("lib/app_pie")).unwrap().set_len(1000).unwrap();
    // Past the new end: the old version's bytes there, or EIO — never the
    // short file's end (0 bytes) or anything else.
    let (off, len) = (4096u64, 8192usize);
    assert!(old_app.len() >= off as usize + len);
    let mut buf = vec![0u8; len];
    match h.read_at(&mut buf, off) {
        // Served from the kernel's cache of the old pages, or by the daemon
        // from the version the handle opened: still the old version, whole.
        Ok(n) => assert!(n == len && buf == old_app[off as usize..off as usize + len], "{n} bytes, not the old version's, after a truncate"),
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}"),
    }
    let short = fs::read(root.join("lib/app_pie")).unwrap();
    assert!(eventually(5, || fs::read(&app).map(|b| b == short).unwrap_or(false)), "truncated file not re-served");

    // Delete and add.
    fs::remove_file(root.join("lib/libhost.so")).unwrap();
    assert!(eventually(5, || !m.path("lib/libhost.so").exists()), "deleted file still visible");
    fs::copy(assets().join("bin/libtwo.so"), root.join("lib/libnew.so")).unwrap();
    assert!(eventually(5, || fs::read_dir(m.path("lib")).unwrap().any(|e| e.unwrap().file_name() == "libnew.so")), "new file not listed");
    assert!(eventually(5, || m.path("lib/.kpack/libnew.so_gfx90a.kpack").is_file()), "new file's archive missing");
    assert_eq!(fs::read(m.path("lib/libnew.so")).unwrap(), transformed("libtwo.so", "libnew.so", arch));
}

#[test]
fn a_file_swapped_continuously_is_never_served_as_a_mix() {
    require_root();
    let src = tempdir();
    let root = src.path();
    copy_assets(root, &["libtwo.so"]);
    fs::copy(assets().join("bin/libtwo.so"), root.join("lib/flip.so")).unwrap();
    let arch = "gfx1030";
    let a = transformed("libtwo.so", "flip.so", arch);
    let b = transformed("libmulti.so", "flip.so", arch);
    let m = Mount::new(Some(root), arch, &["--ttl", "1"]);
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (root, stop) = (root.to_path_buf(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let from = if i.is_multiple_of(2) { "libmulti.so" } else { "libtwo.so" };
                let tmp = root.join(format!("lib/.tmp{i}"));
                fs::copy(assets().join("bin").join(from), &tmp).unwrap();
                fs::rename(&tmp, root.join("lib/flip.so")).unwrap();
                i += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let (ok, errors) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let (p, a, b, ok, errors) = (m.path("lib/flip.so"), a.clone(), b.clone(), ok.clone(), errors.clone());
            std::thread::spawn(move || {
                let end = Instant::now() + Duration::from_secs(4);
                while Instant::now() < end {
                    let mut data = Vec::new();
                    match fs::File::open(&p).and_then(|mut f| f.read_to_end(&mut data)) {
                        Ok(_) => {
                            assert!(data == a || data == b, "served {} bytes matching neither version", data.len());
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    for r in readers {
        r.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    flipper.join().unwrap();
    let ok = ok.load(Ordering::Relaxed);
    eprintln!("{ok} whole reads, {} errors, no mix", errors.load(Ordering::Relaxed));
    assert!(ok > 20, "only {ok} successful reads");
    assert!(m.path("lib/libtwo.so").is_file(), "daemon stopped serving");
}

#[test]
fn hostile_paths_and_names() {
    require_root();
    let src = tempdir();
    let root = src.path();
    copy_assets(root, &["libtwo.so"]);
    let outside = tempdir();
    fs::write(outside.path().join("secret"), b"do not read").unwrap();
    let sym = |t: &str, at: &str| std::os::unix::fs::symlink(t, root.join(at)).unwrap();
    sym("loop_b", "loop_a");
    sym("loop_a", "loop_b");
    sym(&outside.path().display().to_string(), "out_abs");
    sym("../../../../../../../../../..", "out_rel");
    // Non-UTF-8 names: a plain file and a fat binary.
    let bad = |n: &[u8]| root.join(OsStr::from_bytes(n));
    fs::write(bad(b"caf\xe9.txt"), b"latin-1 name").unwrap();
    fs::copy(assets().join("bin/libtwo.so"), bad(b"lib/lib\xff.so")).unwrap();
    // Names at NAME_MAX: a plain file and a fat binary whose archive name
    // would be too long (served unchanged).
    let long = "n".repeat(255);
    fs::write(root.join(&long), b"long name").unwrap();
    let long_fat = format!("lib{}.so", "f".repeat(245));
    fs::copy(assets().join("bin/libtwo.so"), root.join("lib").join(&long_fat)).unwrap();
    // A deep tree, deeper than PATH_MAX below the source root.
    let st = Command::new("python3")
        .arg("-c")
        .arg("import os,sys\nos.chdir(sys.argv[1])\nfor _ in range(300):\n    os.mkdir('d1234567890123'); os.chdir('d1234567890123')\nopen('leaf','w').write('leaf\\n')")
        .arg(root)
        .status()
        .unwrap();
    assert!(st.success());
    // Special files: never exposed, never opened.
    let mkfifo = Command::new("mkfifo").arg(root.join("fifo")).status().unwrap();
    assert!(mkfifo.success());
    let mknod = Command::new("mknod").arg(root.join("null")).args(["c", "1", "3"]).status().unwrap();
    assert!(mknod.success());
    let sock = std::os::unix::net::UnixListener::bind(root.join("sock")).unwrap();

    // Watch the outside directory: the daemon must never open anything there.
    let ino = rustix::fs::inotify::init(rustix::fs::inotify::CreateFlags::NONBLOCK).unwrap();
    let flags = rustix::fs::inotify::WatchFlags::OPEN | rustix::fs::inotify::WatchFlags::ACCESS;
    rustix::fs::inotify::add_watch(&ino, outside.path(), flags).unwrap();
    rustix::fs::inotify::add_watch(&ino, outside.path().join("secret"), flags).unwrap();

    let m = Mount::new(Some(root), "gfx90a", &[]);
    let names: Vec<Vec<u8>> = fs::read_dir(&m.mnt).unwrap().map(|e| e.unwrap().file_name().as_bytes().to_vec()).collect();
    for hidden in [&b"fifo"[..], b"null", b"sock"] {
        assert!(!names.iter().any(|n| n == hidden), "{} exposed", String::from_utf8_lossy(hidden));
        assert!(fs::symlink_metadata(m.mnt.join(OsStr::from_bytes(hidden))).is_err());
    }
    assert_eq!(fs::read_link(m.path("loop_a")).unwrap(), Path::new("loop_b"));
    assert_eq!(fs::read_link(m.path("out_abs")).unwrap(), outside.path());
    assert_eq!(fs::read_link(m.path("out_rel")).unwrap(), Path::new("../../../../../../../../../.."));
    assert_eq!(fs::read(m.mnt.join(OsStr::from_bytes(b"caf\xe9.txt"))).unwrap(), b"latin-1 name");
    assert_eq!(
        fs::read(m.mnt.join(OsStr::from_bytes(b"lib/lib\xff.so"))).unwrap(),
        fs::read(assets().join("bin/libtwo.so")).unwrap(),
        "non-UTF-8 fat binary is served unchanged"
    );
    assert_eq!(fs::read(m.path(&long)).unwrap(), b"long name");
    assert_eq!(fs::read(m.path("lib").join(&long_fat)).unwrap(), fs::read(assets().join("bin/libtwo.so")).unwrap(), "archive name too long: served unchanged");
    assert!(m.path("lib/.kpack/libtwo.so_gfx90a.kpack").is_file());
    let leaf = Command::new("python3")
        .arg("-c")
        .arg("import os,sys\nos.chdir(sys.argv[1])\nfor _ in range(300):\n    os.chdir('d1234567890123')\nprint(open('leaf').read(), end='')")
        .arg(&m.mnt)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&leaf.stdout), "leaf\n", "{}", String::from_utf8_lossy(&leaf.stderr));
    // Walk everything (without following symlinks) and read every file
    // (the deep tree was read above: cat and ls cannot take such paths).
    let walk = Command::new("sh")
        .arg("-c")
        .arg("find -P . -path ./d1234567890123 -prune -o -type f -exec cat {} + > /dev/null && ls -la . lib lib/.kpack > /dev/null")
        .current_dir(&m.mnt)
        .status()
        .unwrap();
    assert!(walk.success());
    let mut buf = vec![std::mem::MaybeUninit::<u8>::uninit(); 4096];
    let mut reader = rustix::fs::inotify::Reader::new(&ino, &mut buf);
    assert!(reader.next().is_err(), "something opened or read a file outside the source");
    drop(sock);
}

#[test]
fn kill_dash_nine_with_auto_unmount_leaves_no_mount() {
    require_root();
    let mut m = Mount::new(Some(&assets().join("demo-install")), "gfx90a", &["--auto-unmount"]);
    // Killed once serving (not inside fusermount3's mount handshake).
    assert!(eventually(10, || m.path("lib/libhost.so").is_file()));
    let mut child = m.child.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(eventually(10, || !mounted(&m.mnt)), "stale mount after kill -9 with --auto-unmount");
}

#[test]
fn a_slow_plan_does_not_stall_other_readers() {
    require_root();
    let src = tempdir();
    let root = src.path();
    copy_assets(root, &["libtwo.so", "libmulti.so", "libhost.so"]);
    fs::copy(assets().join("bin/libtwo.so"), root.join("lib/slowlib.so")).unwrap();
    // Planning slowlib waits on this FIFO until the test lets it go.
    let dir = tempdir();
    let gate = dir.path().join("gate");
    let c = std::ffi::CString::new(gate.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    let hook = PathBuf::from(format!("slowlib:{}", gate.display()));
    let mut m = Mount::new_full(Some(root), "gfx90a", &["--threads", "4"], None, &[("KPACKFS_TEST_SLOW_PLAN", &hook)]);
    let mnt = m.mnt.clone();
    let slow = {
        let p = mnt.join("lib/slowlib.so");
        std::thread::spawn(move || fs::read(&p).is_ok())
    };
    // Opening the FIFO for writing returns once the plan is reading it:
    // the slow plan is now in progress, and stays so until `release` drops.
    let release = fs::OpenOptions::new().write(true).open(&gate).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let others = {
        let mnt = mnt.clone();
        std::thread::spawn(move || {
            for f in ["lib/libtwo.so", "lib/libmulti.so", "lib/libhost.so", "lib/.kpack/libtwo.so_gfx90a.kpack"] {
                let _ = tx.send(fs::read(mnt.join(f)).map(|_| f.to_string()).map_err(|e| format!("{f}: {e}")));
            }
        })
    };
    // The other files are read while the slow plan still holds: 60 s is
    // only a bound for a hang (they would wait forever behind it).
    let mut got = Vec::new();
    for _ in 0..4 {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(r) => got.push(r),
            Err(_) => panic!("other readers blocked behind a slow plan; done: {got:?}"),
        }
    }
    assert!(!slow.is_finished(), "the slow read finished while its plan was held");
    drop(release);
    let ok = slow.join().unwrap();
    others.join().unwrap();
    assert!(m.terminate().is_some_and(|st| st.success()));
    assert!(ok, "the slow file did not read after its plan was released");
    assert!(got.iter().all(|r| r.is_ok()), "{got:?}");
    assert!(!mounted(&mnt));
}

#[test]
fn source_inode_numbers_are_not_leaked_but_stable() {
    require_root();
    let m = Mount::new(Some(&assets().join("demo-install")), "gfx90a", &[]);
    let files = ["lib/libhost.so", "lib/libdemo.so.1.0", "bin/demo_app", "share/doc/demo/README.txt"];
    let ino = |p: &str| fs::metadata(m.path(p)).unwrap().ino();
    let first: Vec<u64> = files.iter().map(|f| ino(f)).collect();
    let source: Vec<u64> = files.iter().map(|f| fs::metadata(assets().join("demo-install").join(f)).unwrap().ino()).collect();
    // Not leaked: no served number is the source file's own.
    for ((f, a), s) in files.iter().zip(&first).zip(&source) {
        assert_ne!(a, s, "{f}: the source's inode number is exposed");
    }
    let mut distinct = first.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), files.len(), "{first:?}");
    // Stable: after the kernel forgets them (FORGET), the same names get
    // the same numbers back, and readdir agrees with stat.
    drop_caches("2");
    assert_eq!(files.iter().map(|f| ino(f)).collect::<Vec<_>>(), first, "numbers changed after the kernel forgot the inodes");
    let by_readdir = fs::read_dir(m.path("lib")).unwrap().map(|e| e.unwrap()).find(|e| e.file_name() == "libhost.so").unwrap();
    assert_eq!(std::os::unix::fs::DirEntryExt::ino(&by_readdir), first[0], "readdir and stat disagree");
}

#[test]
fn materialized_copies_follow_source_changes_and_orphans_are_removed() {
    require_root();
    let src = tempdir();
    let root = src.path();
    copy_assets(root, &["libtwo.so"]);
    let cache = tempdir();
    let dir = cache.path().join("copies");
    fs::create_dir_all(&dir).unwrap();
    // A directory kpackfs made (tagged): the one it keeps entries in.
    fs::write(dir.join("CACHEDIR.TAG"), "Signature: 8a477f597d28d172789f06886806bc55\n# This file is a cache directory tag created by kpackfs.\n").unwrap();
    // A partial entry whose computation is no longer running (its key's
    // lock is free) is removed at mount; one whose lock is held (here by
    // this test, standing in for another daemon) is kept.
    let (dead, live) = ("0".repeat(32), "1".repeat(32));
    let orphan = dir.join(format!("tmp.2147483646.{dead}.data"));
    let busy = dir.join(format!("tmp.{}.{live}.data", std::process::id()));
    fs::write(&orphan, b"partial").unwrap();
    fs::write(&busy, b"partial").unwrap();
    let lock = fs::File::create(dir.join(format!("{live}.lock"))).unwrap();
    lock.lock().unwrap();
    let arch = "gfx90a";
    let two = root.join("lib/libtwo.so");
    let old = transformed("libtwo.so", "libtwo.so", arch);
    // Room for one copy of libtwo, not two: a new version's copy pushes the
    // old one out (least recently used first).
    let limit = (old.len() * 3 / 2).to_string();
    let m = Mount::new(Some(root), arch, &["--materialize", "--cache-dir", dir.to_str().unwrap(), "--cache-dir-size", &limit]);
    assert!(!orphan.exists(), "partial entry of a dead computation kept");
    assert!(busy.exists(), "partial entry of a running computation removed");
    drop(lock);
    fs::remove_file(&busy).unwrap();
    assert!(two.exists());

    let copies = || -> Vec<(String, Vec<u8>)> {
        let mut v: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_name().to_str().is_some_and(|n| !n.starts_with("tmp.") && n.ends_with(".data")))
            .map(|e| (e.file_name().to_string_lossy().into_owned(), fs::read(e.path()).unwrap()))
            .filter(|(_, b)| b.starts_with(b"\x7fELF"))
            .collect();
        v.sort();
        v
    };
    let two = m.path("lib/libtwo.so");
    assert_eq!(fs::read(&two).unwrap(), old);
    // Read again until copied: a source changed in the last two seconds
    // is copied once it has settled.
    assert!(
        eventually(20, || {
            let _ = fs::read(&two);
            copies().len() == 1
        }),
        "no local copy written"
    );
    let first = copies();
    assert!(first[0].1 == old, "local copy differs from the view");

    // A new source version gets a copy of its own; the old one is evicted.
    let new = replace_libtwo_by_rename(root, &two, arch);
    assert!(
        eventually(20, || {
            let _ = fs::read(&two);
            let c = copies();
            c.len() == 1 && c[0].0 != first[0].0
        }),
        "copy of the old version not replaced: {:?}",
        copies().iter().map(|c| &c.0).collect::<Vec<_>>()
    );
    let c = copies();
    assert!(c[0].1 == new, "local copy of the new version differs from the view ({} vs {} bytes)", c[0].1.len(), new.len());
    assert!(fs::read(&two).unwrap() == new, "view changed after the copy");
}

/// A process that maps a transformed library keeps a working mapping when
/// the library is replaced in the source (the usual upgrade: write a new
/// file, rename it over the old), even after the kernel dropped its pages.
#[test]
fn a_mapped_library_survives_its_replacement() {
    require_root();
    let src = tempdir();
    let root = src.path();
    copy_assets(root, &["libtwo.so"]);
    let arch = "gfx90a";
    let m = Mount::new(Some(root), arch, &[]);
    let lib = m.path("lib/libtwo.so");
    let old = transformed("libtwo.so", "libtwo.so", arch);
    let script = r#"
import mmap, sys, hashlib
f = open(sys.argv[1], 'rb')
mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
print('mapped', flush=True)
sys.stdin.readline()
print(hashlib.sha256(mm[:]).hexdigest(), flush=True)
"#;
    let mut child = Command::new("python3").arg("-c").arg(script).arg(&lib).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line.trim(), "mapped");
    let _new = replace_libtwo_by_rename(root, &lib, arch);
    drop_caches("3");
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"go\n").unwrap();
    line.clear();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "the mapping faulted after the replacement: {status:?}");
    let want: String = sha256(&old).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(line.trim(), want, "the mapping changed content");
}

/// A file that becomes fat by an in-place rewrite (which leaves its
/// directory's own identity unchanged) gets its `.kpack` directory and
/// archive, and the listing shows them.
#[test]
fn a_file_rewritten_in_place_into_a_fat_binary_gets_its_archives() {
    require_root();
    let src = tempdir();
    let root = src.path();
    fs::create_dir_all(root.join("lib")).unwrap();
    fs::write(root.join("lib/libx.so"), b"").unwrap();
    let arch = "gfx90a";
    let m = Mount::new(Some(root), arch, &[]);
    let names = || -> Vec<OsString> { fs::read_dir(m.path("lib")).unwrap().map(|e| e.unwrap().file_name()).collect() };
    assert_eq!(names(), vec![OsString::from("libx.so")]);
    assert!(!m.path("lib/.kpack").exists());
    let dir_mtime = fs::metadata(root.join("lib")).unwrap().modified().unwrap();
    fs::write(root.join("lib/libx.so"), fs::read(assets().join("bin/libtwo.so")).unwrap()).unwrap();
    assert_eq!(fs::metadata(root.join("lib")).unwrap().modified().unwrap(), dir_mtime, "the rewrite touched the directory");
    assert!(eventually(5, || names().contains(&OsString::from(".kpack"))), "listing still without .kpack: {:?}", names());
    assert!(eventually(5, || m.path("lib/.kpack/libx.so_gfx90a.kpack").is_file()), "archive of the rewritten file missing");
    assert_eq!(fs::read(m.path("lib/libx.so")).unwrap(), transformed("libtwo.so", "libx.so", arch));
}
