//! Tests of the disk cache (`disk.rs`).

#[cfg(unix)]
use super::super::OWN_SUBDIR;
use super::super::TAG_NAME;
use super::*;

fn fill_with(bytes: &'static [u8]) -> impl FnMut(&mut dyn super::super::Sink) -> Result<(), CacheError> {
    move |s| {
        s.write_all(bytes)?;
        Ok(())
    }
}

/// A cache in a fresh directory holding one entry: `k`, "0123456789".
fn one_entry() -> (tempfile::TempDir, Key, DiskCache) {
    let t = tempfile::tempdir().unwrap();
    let k = Key::of(&[b"k"]);
    let c = DiskCache::open(t.path(), 1 << 20).unwrap();
    c.get_or_insert(&k, &mut fill_with(b"0123456789")).unwrap();
    (t, k, c)
}

fn read_all(d: &Data) -> Vec<u8> {
    let mut v = vec![0u8; d.len() as usize];
    assert_eq!(d.read_at(0, &mut v).unwrap(), v.len());
    v
}

#[test]
fn stores_reuses_and_survives_reopen() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("c");
    let c = DiskCache::open(&dir, 1 << 20).unwrap();
    let k = Key::of(&[b"a"]);
    assert!(c.get(&k).is_none());
    let d = c.get_or_insert(&k, &mut fill_with(b"abcdef")).unwrap();
    assert_eq!(read_all(&d), b"abcdef");
    assert_eq!(c.len_of(&k), Some(6));
    drop(c);
    let c = DiskCache::open(&dir, 1 << 20).unwrap();
    let d = c.get_or_insert(&k, &mut |_| panic!("recomputed")).unwrap();
    assert_eq!(read_all(&d), b"abcdef");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
    }
}

#[test]
fn damaged_entries_are_rebuilt_never_served() {
    let t = tempfile::tempdir().unwrap();
    let k = Key::of(&[b"k"]);
    // Same length, one byte flipped: only the checksum can tell.
    let c = DiskCache::open(t.path(), 1 << 20).unwrap();
    c.get_or_insert(&k, &mut fill_with(b"0123456789")).unwrap();
    let p = c.path(&k, "data");
    let mut b = fs::read(&p).unwrap();
    b[3] ^= 1;
    fs::write(&p, &b).unwrap();
    let c = DiskCache::open(t.path(), 1 << 20).unwrap();
    assert!(c.get(&k).is_none());
    let d = c.get_or_insert(&k, &mut fill_with(b"0123456789")).unwrap();
    assert_eq!(read_all(&d), b"0123456789");
    // Truncated.
    fs::write(&p, b"0123").unwrap();
    let c = DiskCache::open(t.path(), 1 << 20).unwrap();
    assert_eq!(c.len_of(&k), None);
    assert!(c.get(&k).is_none());
    assert_eq!(c.stats.damaged.load(Ordering::Relaxed), 1);
    // Garbage meta.
    c.get_or_insert(&k, &mut fill_with(b"0123456789")).unwrap();
    fs::write(c.path(&k, "meta"), b"nonsense").unwrap();
    let c = DiskCache::open(t.path(), 1 << 20).unwrap();
    assert!(c.get(&k).is_none());
}

#[test]
fn failed_fill_leaves_nothing() {
    let t = tempfile::tempdir().unwrap();
    let c = DiskCache::open(t.path(), 1 << 20).unwrap();
    let k = Key::of(&[b"k"]);
    let r = c.get_or_insert(&k, &mut |s| {
        s.write_all(b"partial")?;
        Err(CacheError::compute(std::io::Error::other("source changed")))
    });
    assert!(matches!(r, Err(CacheError::Compute(_))));
    let names: Vec<_> = fs::read_dir(c.dir()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(names.iter().all(|n| n.to_string_lossy().ends_with(".lock") || n == TAG_NAME), "{names:?}");
}

#[test]
fn orphaned_temporaries_are_removed() {
    let t = tempfile::tempdir().unwrap();
    let k = Key::of(&[b"k"]);
    let dir = DiskCache::open(t.path(), 1 << 20).unwrap().dir().to_path_buf();
    let orphan = dir.join(format!("{TMP_PREFIX}999999.{}.data", k.hex()));
    fs::write(&orphan, b"half").unwrap();
    let _c = DiskCache::open(t.path(), 1 << 20).unwrap();
    assert!(!orphan.exists());
}

#[test]
fn evicts_least_recently_used_within_the_limit() {
    let t = tempfile::tempdir().unwrap();
    let c = DiskCache::open(t.path(), 25).unwrap();
    let keys: Vec<Key> = (0..4u8).map(|i| Key::of(&[&[i]])).collect();
    for (i, k) in keys.iter().enumerate() {
        c.get_or_insert(k, &mut fill_with(b"0123456789")).unwrap();
        // Distinct last-use times, oldest first.
        let t = SystemTime::now() - Duration::from_secs(100 - i as u64);
        OpenOptions::new().write(true).open(c.path(k, "meta")).unwrap().set_modified(t).unwrap();
    }
    assert!(c.used() <= 25);
    assert!(c.len_of(&keys[3]).is_some(), "newest kept");
    assert!(c.len_of(&keys[0]).is_none(), "oldest evicted");
    assert!(c.stats.evictions.load(Ordering::Relaxed) >= 2);
}

#[cfg(unix)]
#[test]
fn symlinked_entries_and_foreign_dirs_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let c = DiskCache::open(t.path(), 1 << 20).unwrap();
    let k = Key::of(&[b"k"]);
    c.get_or_insert(&k, &mut fill_with(b"real")).unwrap();
    let elsewhere = t.path().join("elsewhere");
    fs::write(&elsewhere, b"evil").unwrap();
    fs::remove_file(c.path(&k, "data")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, c.path(&k, "data")).unwrap();
    let c = DiskCache::open(t.path(), 1 << 20).unwrap();
    assert!(c.get(&k).is_none());
    assert!(fs::symlink_metadata(c.path(&k, "data")).is_err(), "symlink removed");
    // A symlinked cache directory is refused.
    let link = t.path().join("link");
    std::os::unix::fs::symlink(t.path(), &link).unwrap();
    assert!(matches!(DiskCache::open(&link, 1), Err(DiskCacheError::NotPrivate(..))));
}

#[cfg(unix)]
#[test]
fn a_directory_kpackfs_did_not_create_is_left_alone() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let shared = t.path().join("shared");
    fs::create_dir(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
    let hex = "0123456789abcdef0123456789abcdef";
    let foreign = [format!("{TMP_PREFIX}1.{hex}.data"), format!("{hex}.data"), format!("{hex}.meta"), format!("{hex}.lock")];
    for f in &foreign {
        fs::write(shared.join(f), b"theirs").unwrap();
    }
    // A limit of 1 byte: every insert evicts.
    let c = DiskCache::open(&shared, 1).unwrap();
    assert_eq!(c.dir(), shared.join(OWN_SUBDIR));
    for i in 0..3u8 {
        c.get_or_insert(&Key::of(&[&[i]]), &mut fill_with(b"value")).unwrap();
    }
    drop(c);
    let c = DiskCache::open(&shared, 1).unwrap();
    assert_eq!(c.dir(), shared.join(OWN_SUBDIR), "the tagged subdirectory is found again");
    assert_eq!(fs::metadata(&shared).unwrap().permissions().mode() & 0o7777, 0o1777);
    for f in &foreign {
        assert_eq!(fs::read(shared.join(f)).unwrap(), b"theirs", "{f}");
    }
    // A directory kpackfs created is used itself, and found again.
    let mine = t.path().join("mine");
    assert_eq!(DiskCache::open(&mine, 1).unwrap().dir(), mine);
    assert_eq!(DiskCache::open(&mine, 1).unwrap().dir(), mine);
    // An untagged `kpackfs` subdirectory is not taken over either.
    let other = t.path().join("other");
    fs::create_dir_all(other.join(OWN_SUBDIR)).unwrap();
    assert!(matches!(DiskCache::open(&other, 1), Err(DiskCacheError::NotOurs(..))));
}

/// Runs `f` on another thread; a hang fails the test (bounded wait).
fn within<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60)).expect("hung")
}

#[cfg(unix)]
#[test]
fn fifos_at_entry_paths_are_refused_without_blocking() {
    let t = tempfile::tempdir().unwrap();
    let k = Key::of(&[b"k"]);
    let dir = DiskCache::open(t.path(), 1 << 20).unwrap().dir().to_path_buf();
    for ext in ["data", "meta", "lock"] {
        let c = DiskCache::open(t.path(), 1 << 20).unwrap();
        c.get_or_insert(&k, &mut fill_with(b"real")).unwrap();
        let p = c.path(&k, ext);
        fs::remove_file(&p).unwrap();
        let cp = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(cp.as_ptr(), 0o600) }, 0);
        let at = dir.clone();
        let r = within(move || {
            let c = DiskCache::open(&at, 1 << 20).unwrap();
            c.get_or_insert(&k, &mut fill_with(b"real")).map(|d| read_all(&d))
        });
        if ext == "lock" {
            // The entry itself is intact and found without its lock.
            assert_eq!(r.unwrap(), b"real");
            // A miss must take the lock: refused (and removed), so the
            // value is computed without the cache.
            fs::remove_file(c.path(&k, "meta")).unwrap();
            let r = within(move || c.get_or_insert(&k, &mut fill_with(b"real")).map(|d| d.len()));
            assert!(matches!(r, Err(CacheError::Unavailable(_))), "{r:?}");
            assert!(fs::symlink_metadata(&p).is_err(), "the FIFO is removed");
        } else {
            assert_eq!(r.unwrap(), b"real", "{ext}");
            assert!(fs::symlink_metadata(&p).unwrap().is_file(), "{ext}: the FIFO is replaced");
        }
    }
}

#[test]
fn a_lock_held_too_long_is_given_up() {
    let t = tempfile::tempdir().unwrap();
    let mut c = DiskCache::open(t.path(), 1 << 20).unwrap();
    c.lock_wait = Duration::from_millis(50);
    let k = Key::of(&[b"k"]);
    // Another holder of the entry's lock (a separate open file
    // description, as another process's), never letting go.
    let held = c.lock_file(&k.hex()).unwrap();
    held.lock().unwrap();
    let c = Arc::new(c);
    let c2 = c.clone();
    let r = within(move || c2.get_or_insert(&k, &mut fill_with(b"value")).map(|d| d.len()));
    assert!(matches!(r, Err(CacheError::Unavailable(_))), "{r:?}");
    drop(held);
    assert_eq!(read_all(&c.get_or_insert(&k, &mut fill_with(b"value")).unwrap()), b"value");
}

#[test]
fn two_caches_on_one_directory_compute_once() {
    let t = tempfile::tempdir().unwrap();
    let a = Arc::new(DiskCache::open(t.path(), 1 << 20).unwrap());
    let b = Arc::new(DiskCache::open(t.path(), 1 << 20).unwrap());
    let calls = Arc::new(AtomicU64::new(0));
    let k = Key::of(&[b"shared"]);
    let hs: Vec<_> = [a, b]
        .into_iter()
        .map(|c| {
            let calls = calls.clone();
            std::thread::spawn(move || {
                c.get_or_insert(&k, &mut |s| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(100));
                    s.write_all(b"value")?;
                    Ok(())
                })
                .unwrap()
                .len()
            })
        })
        .collect();
    for h in hs {
        assert_eq!(h.join().unwrap(), 5);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// Entries sealed in this boot are served without a checksum pass; one
/// sealed in another boot is read whole once, then sealed again (meta.rs).
#[cfg(target_os = "linux")]
#[test]
fn sealed_entries_are_served_unread_in_their_boot_only() {
    let t = tempfile::tempdir().unwrap();
    let k = Key::of(&[b"k"]);
    let c = DiskCache::open(t.path(), 1 << 20).unwrap();
    assert!(c.boot.is_some(), "no boot id on Linux");
    c.get_or_insert(&k, &mut fill_with(b"0123456789")).unwrap();
    let checked = |c: &DiskCache| c.stats.checked.load(Ordering::Relaxed);
    assert_eq!(checked(&c), 0, "the writer knows what it wrote");
    // A second process in the same boot.
    let c = DiskCache::open(t.path(), 1 << 20).unwrap();
    assert_eq!(read_all(&c.get(&k).unwrap()), b"0123456789");
    assert_eq!(checked(&c), 0, "a sealed entry was read for its checksum");
    // The first process after a reboot checks it, and seals it for the next.
    let mut c = DiskCache::open(t.path(), 1 << 20).unwrap();
    c.boot = Some([7; 16]);
    assert_eq!(read_all(&c.get(&k).unwrap()), b"0123456789");
    assert_eq!(checked(&c), 1);
    let mut c = DiskCache::open(t.path(), 1 << 20).unwrap();
    c.boot = Some([7; 16]);
    assert!(c.get(&k).is_some());
    assert_eq!(checked(&c), 0, "not sealed again after its check");
    // No boot id: nothing is trusted unread.
    let mut c = DiskCache::open(t.path(), 1 << 20).unwrap();
    c.boot = None;
    assert!(c.get(&k).is_some());
    assert_eq!(checked(&c), 1);
}

/// A byte changed in place with the data file's mtime put back (what
/// `touch -r` or `rsync -t` leave): its ctime still tells, and the
/// checksum finds it.
#[cfg(unix)]
#[test]
fn a_sealed_entry_changed_in_place_is_checked_and_rebuilt() {
    use std::os::unix::fs::FileExt;
    let (t, k, c) = one_entry();
    let p = c.path(&k, "data");
    let mtime = fs::metadata(&p).unwrap().modified().unwrap();
    let f = OpenOptions::new().write(true).open(&p).unwrap();
    f.write_all_at(b"X", 3).unwrap();
    f.set_modified(mtime).unwrap();
    drop(f);
    assert_eq!(fs::metadata(&p).unwrap().modified().unwrap(), mtime);
    let c = DiskCache::open(t.path(), 1 << 20).unwrap();
    assert!(c.get(&k).is_none(), "a changed entry was served");
    assert_eq!((c.stats.checked.load(Ordering::Relaxed), c.stats.damaged.load(Ordering::Relaxed)), (1, 1));
    let d = c.get_or_insert(&k, &mut fill_with(b"0123456789")).unwrap();
    assert_eq!(read_all(&d), b"0123456789");
}

/// A seal taken in another boot does not vouch for the data, even when
/// it matches the file as it is now (damage beneath the file system shows
/// in no metadata): the checksum decides.
#[cfg(target_os = "linux")]
#[test]
fn a_seal_of_another_boot_vouches_for_nothing() {
    use std::os::unix::fs::FileExt;
    let (t, k, c) = one_entry();
    let (_, m) = c.meta(&k).unwrap().unwrap();
    let p = c.path(&k, "data");
    OpenOptions::new().write(true).open(&p).unwrap().write_all_at(b"X", 3).unwrap();
    let md = fs::metadata(&p).unwrap();
    // Sealed as the file is now, but in an earlier boot.
    c.write_meta(&k, &Meta { seal: Seal::of(&md, Some([7; 16])), ..m }).unwrap();
    let c = DiskCache::open(t.path(), 1 << 20).unwrap();
    assert!(c.get(&k).is_none(), "a damaged entry was served");
    assert_eq!(c.stats.damaged.load(Ordering::Relaxed), 1);
}

#[test]
fn metas_round_trip_and_a_torn_one_is_a_miss() {
    let t = tempfile::tempdir().unwrap();
    let f = File::create(t.path().join("f")).unwrap();
    let md = f.metadata().unwrap();
    for seal in [None, Seal::of(&md, Some([1; 16]))] {
        let m = Meta { len: 0x1122_3344_5566, crc: 0xdead_beef, seal };
        let b = m.encode();
        assert_eq!(Meta::decode(&b), Some(m));
        for i in 0..b.len() {
            let mut x = b;
            x[i] ^= 0x10;
            assert_eq!(Meta::decode(&x), None, "byte {i} flipped");
        }
        assert_eq!(Meta::decode(&b[..b.len() - 1]), None);
    }
}

/// The meta's layout as docs/caches.md §4.2 gives it: 92 bytes, and a
/// meta that is longer, of another magic or of another version is no meta
/// even when its own checksum is right (a v1 meta from an older kpackfs
/// is a miss, rebuilt once).
#[test]
fn only_a_whole_meta_of_this_layout_is_read() {
    assert_eq!(meta::LEN, 92);
    let m = Meta { len: 10, crc: 7, seal: None };
    let b = m.encode();
    assert_eq!(b.len(), 92);
    // Re-checksummed after an edit, so only the edited field can refuse it.
    let resum = |mut x: Vec<u8>| {
        let n = x.len();
        let c = crc32fast::hash(&x[..n - 4]);
        x[n - 4..].copy_from_slice(&c.to_le_bytes());
        x
    };
    let mut other_magic = b.to_vec();
    other_magic[7] = b'X';
    assert_eq!(Meta::decode(&resum(other_magic)), None);
    let mut v1 = b.to_vec();
    v1[8..12].copy_from_slice(&1u32.to_le_bytes());
    assert_eq!(Meta::decode(&resum(v1)), None);
    // Version 1's own 28-byte layout.
    let mut old = b"KPFSMETA".to_vec();
    old.extend_from_slice(&1u32.to_le_bytes());
    old.extend_from_slice(&10u64.to_le_bytes());
    old.extend_from_slice(&7u32.to_le_bytes());
    old.extend_from_slice(&[0; 4]);
    assert_eq!(Meta::decode(&resum(old)), None);
    // One byte too many, the first 92 intact.
    let mut long = b.to_vec();
    long.push(0);
    assert_eq!(Meta::decode(&long), None);

    // Through the cache: a meta file with a byte appended is a miss.
    let (t, k, c) = one_entry();
    let mut mf = OpenOptions::new().append(true).open(c.path(&k, "meta")).unwrap();
    mf.write_all(b"\0").unwrap();
    drop(mf);
    let c = DiskCache::open(t.path(), 1 << 20).unwrap();
    assert!(c.get(&k).is_none());
}

/// This boot's id, as the kernel prints it (an independent reading: the
/// bytes formatted back into the UUID text).
#[cfg(target_os = "linux")]
#[test]
fn the_boot_id_is_the_kernels() {
    let text = fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let id = meta::boot_id().unwrap();
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let uuid = format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..]);
    assert_eq!(uuid, text.trim());
}

/// Use refreshes a meta's mtime (its last-use time for eviction) when it
/// is more than TOUCH_EVERY old, and only then.
#[test]
fn use_is_recorded_at_most_once_a_minute() {
    let (_dir, k, c) = one_entry();
    let mp = c.path(&k, "meta");
    let set = |ago: u64| {
        let when = SystemTime::now() - Duration::from_secs(ago);
        OpenOptions::new().write(true).open(&mp).unwrap().set_modified(when).unwrap();
        when
    };
    let age = || SystemTime::now().duration_since(fs::metadata(&mp).unwrap().modified().unwrap()).unwrap_or_default();
    let recent = set(TOUCH_EVERY.as_secs() / 2);
    c.get(&k).unwrap();
    assert_eq!(fs::metadata(&mp).unwrap().modified().unwrap(), recent, "touched although recent");
    set(TOUCH_EVERY.as_secs() * 2);
    c.get(&k).unwrap();
    assert!(age() < TOUCH_EVERY / 2, "not touched although old: {:?}", age());
}

/// An entry replaced by another file of the same length while this
/// process holds it verified is looked at again (its inode changed), and
/// found damaged.
#[test]
fn a_replaced_entry_is_verified_again_in_the_same_process() {
    let (t, k, c) = one_entry();
    assert!(c.get(&k).is_some());
    let other = t.path().join("other");
    fs::write(&other, b"0123X56789").unwrap();
    fs::rename(&other, c.path(&k, "data")).unwrap();
    assert!(c.get(&k).is_none(), "a replaced entry was served unverified");
    assert_eq!(c.stats.damaged.load(Ordering::Relaxed), 1);
}

/// After a failed write, entries are not written for the back-off time
/// (each attempt would compute its value only to fail at the end), then
/// are again. The failure: the key's lock path is a directory.
#[test]
fn a_failed_write_pauses_writes_for_the_back_off_only() {
    let t = tempfile::tempdir().unwrap();
    let c = DiskCache::open(t.path(), 1 << 20).unwrap();
    let (bad, good) = (Key::of(&[b"bad"]), Key::of(&[b"good"]));
    fs::create_dir(c.dir().join(format!("{}.lock", bad.hex()))).unwrap();
    let computed = std::cell::Cell::new(0);
    let mut fill = |s: &mut dyn super::super::Sink| {
        computed.set(computed.get() + 1);
        s.write_all(b"abc")?;
        Ok(())
    };
    let r = c.get_or_insert(&bad, &mut fill);
    assert!(matches!(r, Err(CacheError::Unavailable(_))), "{r:?}");
    assert!(matches!(c.get_or_insert(&good, &mut fill), Err(CacheError::Unavailable(_))), "written during the back-off");
    assert_eq!(computed.get(), 0, "computed only to fail");
    // With no back-off, the write after a failure is tried (and works).
    drop(c);
    let mut c = DiskCache::open(t.path(), 1 << 20).unwrap();
    c.backoff = Duration::ZERO;
    assert!(matches!(c.get_or_insert(&bad, &mut fill), Err(CacheError::Unavailable(_))));
    assert_eq!(read_all(&c.get_or_insert(&good, &mut fill).unwrap()), b"abc");
    assert_eq!(computed.get(), 1);
}

/// The directory's size is the sum of its entries' data, the limit the
/// one it was opened with, and no in-flight gate outlives its call.
#[test]
fn size_limit_and_gates_are_as_given() {
    let t = tempfile::tempdir().unwrap();
    let c = DiskCache::open(t.path(), 12345).unwrap();
    assert_eq!(c.limit(), 12345);
    c.get_or_insert(&Key::of(&[b"a"]), &mut fill_with(b"0123456789")).unwrap();
    c.get_or_insert(&Key::of(&[b"b"]), &mut fill_with(b"abcdef")).unwrap();
    assert_eq!(c.used(), 16);
    assert_eq!(c.inflight.len(), 0);
}
