//! Which opens of synthesized files queue a local copy, and which are
//! served from one ([`CopyPolicy`], `Caches::attach_copy`), counted by the
//! view's own counters; the copy's bytes against the view's.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{CopyPolicy, View, ViewConfig};
use crate::data_cache::DiskCache;
use crate::formats::target::Selection;
use crate::io::ReadAt;
use crate::plan::ArchiveCompression;

const LIB: &str = "libtwo.so";
const ARCHIVE: &str = ".kpack/libtwo.so_gfx90a.kpack";

fn source() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let assets = Path::new(env!("CARGO_MANIFEST_DIR")).join("../test_assets/bin");
    // Written, not copied: a copy keeps the asset's last-write time on
    // Windows, which stands in for the ctime there.
    std::fs::write(d.path().join(LIB), std::fs::read(assets.join(LIB)).unwrap()).unwrap();
    d
}

/// A view over `src` keeping copies per `policy` in `cache`, treating
/// sources as settled at once (the tests' sources were just written; the
/// settle rule has its own test).
fn view(src: &Path, cache: &Path, policy: CopyPolicy) -> View {
    view_settling(src, cache, policy, Duration::ZERO)
}

fn view_settling(src: &Path, cache: &Path, policy: CopyPolicy, settle: Duration) -> View {
    view_of(src, cache, policy, settle, Default::default())
}

fn view_of(src: &Path, cache: &Path, policy: CopyPolicy, settle: Duration, compression: ArchiveCompression) -> View {
    let cfg = ViewConfig {
        source: src.to_path_buf(),
        selection: Selection::parse("gfx90a").unwrap(),
        cache_bytes: 1 << 20,
        naming: Default::default(),
        compression,
        db_rules: Default::default(),
    };
    let disk = Arc::new(DiskCache::open(cache, 1 << 30).unwrap());
    let mut v = View::new(cfg).unwrap();
    Arc::get_mut(&mut v.caches).unwrap().settle = settle;
    v.with_disk_cache(disk, policy).unwrap()
}

/// (copies queued, opens served from a copy) so far.
fn counts(v: &View) -> (u64, u64) {
    let s = v.stats();
    (s.copies_queued, s.copies_used)
}

/// Opens `rel` and reads it whole through the view (not the copy), also
/// saying whether the open came with a local copy, and that copy's bytes.
fn open(v: &View, rel: &str) -> (Vec<u8>, Option<Vec<u8>>) {
    let f = v.open_path(Path::new(rel)).unwrap();
    let mut served = vec![0u8; f.len() as usize];
    assert_eq!(f.read_at(0, &mut served).unwrap(), served.len(), "{rel}: short read");
    let copy = f.passthrough_file().map(|c| {
        let mut b = vec![0u8; f.len() as usize + 1];
        let n = c.read_at(0, &mut b).unwrap();
        b.truncate(n);
        b
    });
    (served, copy)
}

/// Opens `rel` until an open comes with its copy (written in the
/// background).
fn until_copied(v: &View, rel: &str) -> Vec<u8> {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        if let (_, Some(c)) = open(v, rel) {
            return c;
        }
        assert!(Instant::now() < end, "{rel}: no copy written");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_file_opened_again_is_copied_and_later_opens_use_the_copy() {
    let (src, cache) = (source(), tempfile::tempdir().unwrap());
    let v = view(src.path(), cache.path(), CopyPolicy::Reopened);
    for rel in [LIB, ARCHIVE] {
        let (before, _) = counts(&v);
        let (served, copy) = open(&v, rel);
        assert!(copy.is_none());
        assert_eq!(counts(&v).0, before, "{rel}: a file opened once was copied");
        open(&v, rel);
        assert_eq!(counts(&v).0, before + 1, "{rel}: the second open queued no copy");
        assert_eq!(until_copied(&v, rel), served, "{rel}: the copy differs from what the view serves");
        assert_eq!(counts(&v).0, before + 1, "{rel}: copied twice");
    }
    assert!(counts(&v).1 >= 2);
    // A remount (another view over the same cache directory, in this boot
    // and over this mount of the source) uses the copies at once.
    let again = view(src.path(), cache.path(), CopyPolicy::Reopened);
    for rel in [LIB, ARCHIVE] {
        assert!(open(&again, rel).1.is_some(), "{rel}: the copy was not found again");
    }
    assert_eq!(counts(&again), (0, 2));
}

#[test]
fn the_policy_says_which_opens_queue_copies() {
    let src = source();
    // `bake` and Windows' mount: files that cost no decode are never
    // copied; `--materialize`: at the first open.
    for (policy, queued) in [(CopyPolicy::Never, 0), (CopyPolicy::Decoding, 0), (CopyPolicy::All, 2)] {
        let cache = tempfile::tempdir().unwrap();
        let v = view(src.path(), cache.path(), policy);
        for rel in [LIB, ARCHIVE] {
            open(&v, rel);
            open(&v, rel);
        }
        assert_eq!(counts(&v).0, queued, "{policy:?}");
    }
}

#[test]
fn a_changed_source_is_never_served_from_the_old_copy() {
    let (src, cache) = (source(), tempfile::tempdir().unwrap());
    let v = view(src.path(), cache.path(), CopyPolicy::All);
    open(&v, LIB);
    let old = until_copied(&v, LIB);
    // The same length, one letter of the compiler's note in `.comment`
    // changed in place: same inode, new ctime.
    let path = src.path().join(LIB);
    let mut bytes = std::fs::read(&path).unwrap();
    // (The last one: the first ones are in the device code.)
    let at = bytes.windows(13).rposition(|w| w == b"clang version").unwrap();
    bytes[at] = b'C';
    std::fs::write(&path, &bytes).unwrap();
    let (served, copy) = open(&v, LIB);
    assert!(copy.is_none(), "the new version was served from the old version's copy");
    let differ: Vec<usize> = (0..old.len()).filter(|&i| served.get(i) != old.get(i)).collect();
    assert_eq!((served.len(), differ.len()), (old.len(), 1), "not the one-letter change expected");
    assert_eq!(served[differ[0]], b'C');
    assert_eq!(until_copied(&v, LIB), served);
}

#[test]
fn a_source_is_copied_only_once_it_has_settled() {
    use super::cached::settled;
    use crate::source::Time;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let (sec, nsec) = (now.as_secs() as i64, now.subsec_nanos());
    let two = Duration::from_secs(2);
    assert!(settled(Time { sec: sec - 60, nsec: 0 }, two), "changed a minute ago");
    assert!(settled(Time { sec: 0, nsec: 0 }, two));
    assert!(!settled(Time { sec, nsec }, two), "changed just now");
    assert!(!settled(Time { sec: sec + 60, nsec: 0 }, Duration::ZERO), "a ctime ahead of the clock");
    // A source written just now is not copied at its first opens; a reader
    // that keeps opening it gets its copy once it has settled.
    let (src, cache) = (source(), tempfile::tempdir().unwrap());
    let v = view_settling(src.path(), cache.path(), CopyPolicy::All, two);
    let start = Instant::now();
    open(&v, LIB);
    open(&v, LIB);
    if start.elapsed() < Duration::from_secs(1) {
        assert_eq!(counts(&v).0, 0, "a fresh source was queued for copying");
    }
    until_copied(&v, LIB);
    assert_eq!(counts(&v).0, 1);
}

/// An archive of compressed bundles stored as `none` is copied at its first
/// open (its bytes cost a decode); an open that has the copy reads it, not
/// the bundles, wherever the kernel does not serve the copy itself.
#[test]
fn reads_of_an_open_with_a_copy_come_from_the_copy() {
    use crate::formats::bundle::CcobMethod;
    let (plain, src, cache) = (source(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    crate::tools::recompress::recompress(&plain.path().join(LIB), &src.path().join(LIB), 3, CcobMethod::Zstd, 3).unwrap();
    let v = view_of(src.path(), cache.path(), CopyPolicy::Decoding, Duration::ZERO, ArchiveCompression::None);
    let (served, copy) = open(&v, ARCHIVE);
    assert!(copy.is_none());
    assert_eq!(counts(&v).0, 1, "an archive that decodes was not copied at its first open");
    let decodes = v.stats().cache_misses;
    assert!(decodes > 0, "the archive's objects were not decoded");
    assert_eq!(until_copied(&v, ARCHIVE), served);
    // Every object read through the bundles is looked up in the memory
    // cache (a hit, or a miss and a decode); one read from the copy is not.
    let lookups = |v: &View| (v.stats().cache_hits, v.stats().cache_misses);
    let again = v.open_path(Path::new(ARCHIVE)).unwrap();
    let before = lookups(&v);
    let mut b = vec![0u8; served.len()];
    assert_eq!(again.read_at(0, &mut b).unwrap(), b.len());
    assert!(b == served);
    assert_eq!(lookups(&v), before, "read through the bundles although the open had its copy");
}
