//! Helpers for the end-to-end tests: locating the `kpackfs` binary and the
//! test data, real mounts that always get unmounted, tree comparison, and
//! the test HIP runtime (`tests/hip-stub`).
//!
//! These tests really mount (FUSE) and need root (as in CI); they fail —
//! never skip — when something they need is missing, with the command that
//! installs it.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use tempfile::TempDir;

pub mod cache;
mod runtime;
pub mod wheel;

pub use runtime::*;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().expect("repo root")
}

pub fn assets() -> PathBuf {
    repo().join("test_assets")
}

/// The compatibility vectors (reference-tool goldens and upstream archives,
/// see `test_assets/vectors/README.md`).
pub fn vectors() -> PathBuf {
    let p = assets().join("vectors");
    assert!(p.join("upstream-kpack").is_dir(), "test vectors not found at {}", p.display());
    p
}

/// The `kpackfs` binary built by this `cargo test` run (cargo builds every
/// binary target of the workspace before running tests).
pub fn kpackfs() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let bin = dir.join("kpackfs");
    assert!(bin.is_file(), "{} not built: run `cargo test --workspace` (or `cargo build -p kpackfs`)", bin.display());
    bin
}

pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "the mount tests need root (FUSE mounts, setpriv, unshare), as in CI");
    assert!(Path::new("/dev/fuse").exists(), "/dev/fuse missing: these tests need FUSE");
}

pub fn tempdir() -> TempDir {
    tempfile::Builder::new().prefix("kpackfs-test-").tempdir().expect("tempdir")
}

/// The cache directory of this test process's mounts and bakes (never the
/// machine's `/var/cache/kpackfs`): one per test binary, so its tests also
/// share it the way several daemons would.
/// Removed when the test process exits (statics are never dropped, so a
/// `TempDir` here would stay behind in /tmp after every run).
pub fn test_cache_dir() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    extern "C" fn remove_at_exit() {
        if let Some(d) = DIR.get() {
            let _ = fs::remove_dir_all(d);
        }
    }
    DIR.get_or_init(|| {
        let d = tempdir().keep();
        // SAFETY: registers a plain function with no captured state.
        unsafe { libc::atexit(remove_at_exit) };
        d
    })
}

/// `extra` plus `--cache-dir <test cache>` unless it names a cache dir.
pub fn with_cache_dir(extra: &[&str]) -> Vec<OsString> {
    let mut v: Vec<OsString> = extra.iter().map(OsString::from).collect();
    if !extra.iter().any(|a| a.starts_with("--cache-dir")) {
        v.push("--cache-dir".into());
        v.push(test_cache_dir().join("cache").into());
    }
    v
}

/// Is something mounted exactly at `mnt`?
pub fn mounted(mnt: &Path) -> bool {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let want = mnt.to_string_lossy().replace(' ', "\\040");
    info.lines().any(|l| l.split(' ').nth(4) == Some(want.as_str()))
}

/// A live `kpackfs mount -f` that is unmounted (and reaped) on drop.
pub struct Mount {
    pub mnt: PathBuf,
    pub child: Option<Child>,
    _dir: Option<TempDir>,
}

impl Mount {
    /// Mounts `source` (None: the embedded demo, `--demo`) for `arch` with extra args.
    pub fn new(source: Option<&Path>, arch: &str, extra: &[&str]) -> Mount {
        let dir = tempdir();
        let mnt = dir.path().join("mnt");
        fs::create_dir(&mnt).expect("mkdir mnt");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
        let mut m = Mount::at(source, &mnt, arch, extra);
        m._dir = Some(dir);
        m
    }

    pub fn at(source: Option<&Path>, mnt: &Path, arch: &str, extra: &[&str]) -> Mount {
        Mount::at_logged(source, mnt, arch, extra, None, &[])
    }

    /// Like [`Mount::new`], with these variables in the daemon's
    /// environment (e.g. `KPACKFS_SYSFS_ROOT` for `--arch auto`).
    pub fn new_with_env(source: Option<&Path>, arch: &str, extra: &[&str], env: &[(&str, &Path)]) -> Mount {
        let dir = tempdir();
        let mnt = dir.path().join("mnt");
        fs::create_dir(&mnt).expect("mkdir mnt");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
        let mut m = Mount::at_logged(source, &mnt, arch, extra, None, env);
        m._dir = Some(dir);
        m
    }

    /// Like [`Mount::new`], with these variables in the daemon's
    /// environment and its stderr (its log) in `log` if given.
    pub fn new_full(source: Option<&Path>, arch: &str, extra: &[&str], log: Option<&Path>, env: &[(&str, &Path)]) -> Mount {
        let dir = tempdir();
        let mnt = dir.path().join("mnt");
        fs::create_dir(&mnt).expect("mkdir mnt");
        let mut m = Mount::at_logged(source, &mnt, arch, extra, log, env);
        m._dir = Some(dir);
        m
    }

    /// Like [`Mount::new`], with the daemon's stderr (its log) in `log`.
    pub fn new_logged(source: Option<&Path>, arch: &str, extra: &[&str], log: &Path) -> Mount {
        let dir = tempdir();
        let mnt = dir.path().join("mnt");
        fs::create_dir(&mnt).expect("mkdir mnt");
        let mut m = Mount::at_logged(source, &mnt, arch, extra, Some(log), &[]);
        m._dir = Some(dir);
        m
    }

    fn at_logged(source: Option<&Path>, mnt: &Path, arch: &str, extra: &[&str], log: Option<&Path>, env: &[(&str, &Path)]) -> Mount {
        let mut cmd = Command::new(kpackfs());
        cmd.envs(env.iter().copied());
        cmd.arg("mount").arg("-f");
        match source {
            Some(s) => cmd.arg(s),
            None => cmd.arg("--demo"),
        };
        cmd.arg(mnt);
        // An empty `arch`: the extra arguments select (e.g. `--views`).
        if !arch.is_empty() {
            cmd.arg("--arch").arg(arch);
        }
        cmd.args(with_cache_dir(extra));
        cmd.stdin(Stdio::null()).stdout(Stdio::null());
        match log {
            Some(p) => {
                cmd.stderr(fs::File::create(p).expect("log file"));
            }
            None => {
                cmd.stderr(Stdio::inherit());
            }
        }
        let mut child = cmd.spawn().expect("spawn kpackfs");
        let start = Instant::now();
        while !mounted(mnt) {
            if let Ok(Some(st)) = child.try_wait() {
                panic!("kpackfs mount exited early: {st}");
            }
            assert!(start.elapsed() < Duration::from_secs(20), "mount at {} did not come up", mnt.display());
            std::thread::sleep(Duration::from_millis(10));
        }
        Mount { mnt: mnt.to_path_buf(), child: Some(child), _dir: None }
    }

    pub fn path(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.mnt.join(rel)
    }

    /// Sends SIGTERM and waits for the daemon; returns its exit status.
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        loop {
            if let Ok(Some(st)) = child.try_wait() {
                return Some(st);
            }
            if start.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                return child.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        self.terminate();
        if mounted(&self.mnt) {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
    }
}

/// One node of a tree, as seen through the filesystem API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Dir { mode: u32 },
    File { mode: u32, size: u64, sha: [u8; 32] },
    Link { target: OsString },
}

/// Walks `root` without following symlinks. For files, also checks that
/// `stat` size equals the number of bytes read.
pub fn snapshot(root: &Path) -> BTreeMap<PathBuf, Node> {
    let mut out = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let p = root.join(&rel);
        let md = fs::symlink_metadata(&p).unwrap_or_else(|e| panic!("lstat {}: {e}", p.display()));
        let ft = md.file_type();
        let node = if ft.is_symlink() {
            Node::Link { target: fs::read_link(&p).expect("readlink").into_os_string() }
        } else if ft.is_dir() {
            for e in fs::read_dir(&p).unwrap_or_else(|e| panic!("readdir {}: {e}", p.display())) {
                stack.push(rel.join(e.expect("dirent").file_name()));
            }
            Node::Dir { mode: md.mode() & 0o7777 }
        } else {
            let mut data = Vec::new();
            fs::File::open(&p).and_then(|mut f| f.read_to_end(&mut data)).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
            assert_eq!(data.len() as u64, md.len(), "{}: stat size {} but {} bytes read", p.display(), md.len(), data.len());
            Node::File { mode: md.mode() & 0o7777, size: md.len(), sha: sha256(&data) }
        };
        out.insert(rel, node);
    }
    out
}

/// Asserts two snapshots are identical, naming the first differences.
pub fn assert_same_tree(a: &BTreeMap<PathBuf, Node>, b: &BTreeMap<PathBuf, Node>, what: &str) {
    let mut diffs = Vec::new();
    for (k, v) in a {
        match b.get(k) {
            None => diffs.push(format!("only in first: {}", k.display())),
            Some(w) if w != v => diffs.push(format!("differs: {} ({v:?} vs {w:?})", k.display())),
            _ => {}
        }
    }
    for k in b.keys().filter(|k| !a.contains_key(*k)) {
        diffs.push(format!("only in second: {}", k.display()));
    }
    assert!(diffs.is_empty(), "{what}: {} differences:\n{}", diffs.len(), diffs.join("\n"));
}

/// Bakes `source` for `arch` into a new directory with the real CLI.
pub fn bake(source: &Path, arch: &str, extra: &[&str]) -> TempDir {
    let dir = tempdir();
    let dest = dir.path().join("out");
    let st = Command::new(kpackfs()).arg("bake").arg(source).arg(&dest).arg("--arch").arg(arch).arg("-q").args(with_cache_dir(extra)).status().expect("bake");
    assert!(st.success(), "bake failed: {st}");
    dir
}

pub fn sha256(data: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(data).into()
}

/// The daemon's counters: `user.kpackfs.stats` of the mount's root.
pub fn stats(mnt: &Path) -> String {
    let out = Command::new("python3").arg("-c").arg("import os,sys; print(os.getxattr(sys.argv[1], 'user.kpackfs.stats').decode())").arg(mnt).output().unwrap();
    assert!(out.status.success(), "user.kpackfs.stats of {}: {}", mnt.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Counter `name` of a [`stats`] text.
pub fn counter(stats: &str, name: &str) -> u64 {
    let name = name.trim();
    stats
        .lines()
        .find_map(|l| l.split_once(' ').filter(|(k, _)| *k == name).and_then(|(_, v)| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no {name} in {stats}"))
}

/// Retries `f` until it returns true or `secs` pass: for what a daemon
/// does in the background (the watcher, local copies).
pub fn eventually(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    f()
}

/// Writes `level` to /proc/sys/vm/drop_caches, one writer at a time across
/// every test thread and test process: the lock is an exclusive `flock` on
/// the procfs file itself (so no lock file is left behind). Dropping is
/// machine-wide, so parallel tests take turns rather than stacking drops.
pub fn drop_caches(level: &str) {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let mut f = fs::OpenOptions::new().write(true).open("/proc/sys/vm/drop_caches").expect("drop_caches (the tests run as root)");
    // SAFETY: flock(2) on a descriptor we own; released when `f` closes.
    while unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
        assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EINTR), "flock");
    }
    f.write_all(level.as_bytes()).expect("write drop_caches");
}

/// Random-access comparison helper: pread `len` bytes at `off` from both.
pub fn pread(f: &fs::File, off: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let mut got = 0;
    while got < len {
        match f.read_at(&mut buf[got..], off + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("pread: {e}"),
        }
    }
    buf.truncate(got);
    buf
}

/// A small deterministic PRNG (xorshift64*), so failures reproduce.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
}

/// `pread` through an `O_DIRECT` descriptor: offset and length are rounded
/// to 4 KiB and the buffer is 4 KiB-aligned, as direct I/O requires.
/// Returns the aligned offset and the bytes read there.
pub fn pread_direct(f: &fs::File, off: u64, len: usize) -> (u64, Vec<u8>) {
    const A: usize = 4096;
    let start = off / A as u64 * A as u64;
    let n = ((off - start) as usize + len).div_ceil(A) * A;
    let layout = std::alloc::Layout::from_size_align(n, A).expect("layout");
    // SAFETY: non-zero size; the buffer is freed below with the same layout.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    assert!(!ptr.is_null());
    // SAFETY: ptr points to n writable bytes owned by this function.
    let buf = unsafe { std::slice::from_raw_parts_mut(ptr, n) };
    let mut got = 0;
    while got < n {
        match f.read_at(&mut buf[got..], start + got as u64) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("O_DIRECT pread at {start}+{n}: {e}"),
        }
        if got % A != 0 {
            break;
        }
    }
    let out = buf[..got].to_vec();
    // SAFETY: allocated above with this layout.
    unsafe { std::alloc::dealloc(ptr, layout) };
    (start, out)
}

/// A tmpfs mounted for one test, unmounted (and its directory removed)
/// when dropped.
pub struct Tmpfs(pub PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (`256k`) at `at` (made if missing); needs root.
    pub fn new(at: &Path, size: &str) -> Tmpfs {
        fs::create_dir_all(at).unwrap();
        let st = Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size},mode=0755"), "kpackfs-test"]).arg(at).status().expect("mount");
        assert!(st.success(), "mount -t tmpfs failed: {st}");
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let st = Command::new("umount").arg(&self.0).status();
        assert!(st.is_ok_and(|s| s.success()) || std::thread::panicking(), "umount {} failed", self.0.display());
        let _ = fs::remove_dir(&self.0);
    }
}

/// libtwo.so (test_assets/bin) with each bundle replaced in place by a CCOB
/// v3 zstd of itself plus a 96 KiB host entry of zeros, which compresses
/// to almost nothing and carries no device code: decoded content over 64
/// KiB, so the view plans from a decoded prefix (the entry table) and reads
/// code objects through its hash-checked decodes, as for real libraries.
/// Wrapper i still points at bundle i, so clang-offload-bundler's goldens
/// of libtwo.so ([`expected_object`]) are the oracle. Returns the bytes
/// and each CCOB's (offset, length, header length).
pub fn padded_ccob_libtwo() -> (Vec<u8>, Vec<(u64, u64, u64)>) {
    use kpackfs_core::formats::bundle::{self, ccob, CcobMethod, Chunk};
    let fat = fs::read(assets().join("bin/libtwo.so")).expect("libtwo.so");
    let elf = kpackfs_core::formats::elf::ElfFile::parse(&fat).expect("libtwo.so is ELF");
    let sec = elf.fatbin().expect("fat section");
    let mut out = fat.clone();
    let mut ccobs = Vec::new();
    for c in bundle::scan_fatbin(&fat, sec.offset, sec.offset + sec.size).expect("bundles") {
        let Chunk::Plain { at, bundle: b } = c else { panic!("libtwo.so has plain bundles") };
        let payloads: Vec<(String, Vec<u8>)> =
            b.entries.iter().map(|e| (e.id.clone(), fat[(at + e.offset) as usize..(at + e.offset + e.size) as usize].to_vec())).collect();
        let mut entries: Vec<(&str, &[u8])> = payloads.iter().map(|(id, p)| (id.as_str(), p.as_slice())).collect();
        let pad = vec![0u8; 96 << 10];
        entries.push(("host-x86_64-unknown-linux-gnu-padding", &pad));
        let mut packed = ccob::encode(&bundle::write_bundle(&entries, 4096), 3, CcobMethod::Zstd, 3).expect("encode");
        let len = packed.len() as u64;
        assert!(len <= b.len, "the CCOB fits the bundle's place");
        packed.resize(b.len as usize, 0);
        out[at as usize..(at + b.len) as usize].copy_from_slice(&packed);
        ccobs.push((at, len, 32));
    }
    (out, ccobs)
}

/// A byte of the CCOB at `at` in `data` whose change (xor 1) leaves the
/// CCOB decodable — to other bytes, with the same entry table — found with
/// the unchecked decoder: a damage only the header's hash reveals.
pub fn silent_ccob_flip(data: &[u8], at: u64) -> usize {
    use kpackfs_core::formats::bundle::{self, ccob, Chunk};
    let chunk = bundle::parse_chunk(&data.to_vec(), at, data.len() as u64).expect("CCOB");
    let Chunk::Compressed { len, header, .. } = &chunk else { panic!("not a CCOB") };
    let intact = ccob::decode(&data.to_vec(), at, *len, header).expect("intact CCOB");
    let table = bundle::parse_bundle(&intact, 0, intact.len() as u64).expect("inner bundle").header_len as usize;
    for i in (at + header.header_len + 16)..(at + len) {
        let mut bad = data.to_vec();
        bad[i as usize] ^= 1;
        if let Ok(d) = ccob::decode_range_prechecked(&bad, at, *len, header, 0, header.uncompressed_size) {
            if d != intact && d[..table] == intact[..table] {
                return i as usize;
            }
        }
    }
    panic!("no payload byte of the CCOB at {at:#x} changes it silently");
}
