//! The memory implementation of the data cache: a byte-bounded LRU with
//! compute-once semantics — any number of concurrent readers of the same
//! missing value (a decoded code object) wait for one decode instead of
//! each decoding it.

use std::collections::VecDeque;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use dashmap::DashMap;
use lru::LruCache;

/// Counters, readable at any time.
#[derive(Debug, Default)]
pub struct CacheStats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub evictions: AtomicU64,
    pub bytes: AtomicU64,
}

type Slot<E> = Arc<OnceLock<Result<Arc<Vec<u8>>, E>>>;

/// A value and its tag (see [`ByteLru::retire`]).
type Tagged = (u64, Arc<Vec<u8>>);

/// Retired tags remembered: far more than the versions replaced while one
/// of their readers is still decoding.
const RETIRED: usize = 1024;

pub struct ByteLru<K: Hash + Eq + Clone, E: Clone> {
    lru: Mutex<LruCache<K, Tagged>>,
    /// Tags retired lately (oldest first, at most [`RETIRED`]): values
    /// with these tags are handed out but not kept. Locked after `lru`.
    retired: Mutex<VecDeque<u64>>,
    inflight: DashMap<K, Slot<E>>,
    limit: u64,
    pub stats: CacheStats,
}

impl<K: Hash + Eq + Clone, E: Clone> ByteLru<K, E> {
    /// A cache holding at most `limit` bytes of values.
    pub fn new(limit: u64) -> Self {
        ByteLru { lru: Mutex::new(LruCache::unbounded()), retired: Mutex::new(VecDeque::new()), inflight: DashMap::new(), limit, stats: CacheStats::default() }
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The cached value of `k`, if any (no counters touched).
    pub fn peek(&self, k: &K) -> Option<Arc<Vec<u8>>> {
        self.lookup(k)
    }

    fn lookup(&self, k: &K) -> Option<Arc<Vec<u8>>> {
        let mut lru = self.lru.lock().unwrap_or_else(|p| p.into_inner());
        lru.get(k).map(|(_, v)| v.clone())
    }

    /// Returns the cached value for `k`, or runs `load` once for all
    /// concurrent callers and caches its result (if it fits).
    pub fn get_or_load(&self, k: &K, load: impl FnOnce() -> Result<Arc<Vec<u8>>, E>) -> Result<Arc<Vec<u8>>, E> {
        self.get_or_load_tagged(k, 0, load)
    }

    /// [`get_or_load`](Self::get_or_load) for a value made from one
    /// version of something (a source file): `tag` names that version, so
    /// its values can be dropped together when it goes away.
    pub fn get_or_load_tagged(&self, k: &K, tag: u64, load: impl FnOnce() -> Result<Arc<Vec<u8>>, E>) -> Result<Arc<Vec<u8>>, E> {
        if let Some(v) = self.lookup(k) {
            self.stats.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(v);
        }
        let slot = self.inflight.entry(k.clone()).or_insert_with(|| Arc::new(OnceLock::new())).clone();
        let mut ran = false;
        let result = slot
            .get_or_init(|| {
                ran = true;
                // Another caller may have finished between our miss and our
                // slot; don't decode twice.
                if let Some(v) = self.lookup(k) {
                    return Ok(v);
                }
                self.stats.misses.fetch_add(1, Ordering::Relaxed);
                load()
            })
            .clone();
        if !ran {
            self.stats.hits.fetch_add(1, Ordering::Relaxed);
        }
        if ran {
            if let Ok(v) = &result {
                self.insert(k.clone(), tag, v.clone());
            }
            self.inflight.remove_if(k, |_, s| Arc::ptr_eq(s, &slot));
        }
        result
    }

    fn insert(&self, k: K, tag: u64, v: Arc<Vec<u8>>) {
        let size = v.len() as u64;
        if size > self.limit {
            return;
        }
        let mut lru = self.lru.lock().unwrap_or_else(|p| p.into_inner());
        if lru.contains(&k) || (tag != 0 && self.retired.lock().unwrap_or_else(|p| p.into_inner()).contains(&tag)) {
            return;
        }
        let mut used = self.stats.bytes.load(Ordering::Relaxed);
        while used + size > self.limit {
            match lru.pop_lru() {
                Some((_, (_, old))) => {
                    used -= old.len() as u64;
                    self.stats.evictions.fetch_add(1, Ordering::Relaxed);
                }
                None => break,
            }
        }
        lru.put(k, (tag, v));
        self.stats.bytes.store(used + size, Ordering::Relaxed);
    }

    /// Drops every value loaded with `tag` (not 0), and keeps none made
    /// with it from now on (they are still handed to their callers) until
    /// [`revive`](Self::revive): a replaced source file's decoded code
    /// objects leave with its plan instead of waiting for the LRU to push
    /// them out, and readers still holding the old file (or decoding from
    /// it as it is replaced) do not bring them back — memory follows the
    /// live versions. The last [`RETIRED`] tags are remembered. Returns how
    /// many values went.
    pub fn retire(&self, tag: u64) -> usize {
        if tag == 0 {
            return 0;
        }
        let mut lru = self.lru.lock().unwrap_or_else(|p| p.into_inner());
        {
            let mut r = self.retired.lock().unwrap_or_else(|p| p.into_inner());
            if !r.contains(&tag) {
                if r.len() >= RETIRED {
                    r.pop_front();
                }
                r.push_back(tag);
            }
        }
        let gone: Vec<K> = lru.iter().filter(|(_, (t, _))| *t == tag).map(|(k, _)| k.clone()).collect();
        let mut freed = 0;
        for k in &gone {
            if let Some((_, v)) = lru.pop(k) {
                freed += v.len() as u64;
            }
        }
        self.stats.bytes.fetch_sub(freed, Ordering::Relaxed);
        self.stats.evictions.fetch_add(gone.len() as u64, Ordering::Relaxed);
        gone.len()
    }

    /// `tag` is live again (a version thought replaced is current after
    /// all): its values are kept again.
    pub fn revive(&self, tag: u64) {
        self.retired.lock().unwrap_or_else(|p| p.into_inner()).retain(|t| *t != tag);
    }

    /// Number of retired tags remembered (at most [`RETIRED`]).
    pub fn retired_len(&self) -> usize {
        self.retired.lock().map(|r| r.len()).unwrap_or(0)
    }

    /// Number of cached values.
    pub fn len(&self) -> usize {
        self.lru.lock().map(|l| l.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn a_retired_tag_drops_its_values_and_keeps_no_more_until_revived() {
        let c: ByteLru<u32, String> = ByteLru::new(1000);
        for i in 0..6u32 {
            c.get_or_load_tagged(&i, u64::from(i % 2) + 7, || Ok(Arc::new(vec![0; 10]))).unwrap();
        }
        c.get_or_load(&99, || Ok(Arc::new(vec![0; 5]))).unwrap();
        assert_eq!(c.retire(8), 3);
        assert_eq!(c.retire(0), 0, "untagged values are the LRU's");
        assert_eq!(c.len(), 4);
        assert_eq!(c.stats.bytes.load(Ordering::Relaxed), 35);
        assert!(c.peek(&1).is_none() && c.peek(&0).is_some() && c.peek(&99).is_some());
        // A late reader of the retired version gets its value, not kept.
        assert_eq!(c.get_or_load_tagged(&1, 8, || Ok(Arc::new(vec![1; 10]))).unwrap().len(), 10);
        assert!(c.peek(&1).is_none());
        c.revive(8);
        c.get_or_load_tagged(&1, 8, || Ok(Arc::new(vec![1; 10]))).unwrap();
        assert!(c.peek(&1).is_some());
        // Only the last RETIRED tags are remembered.
        for t in 100..100 + RETIRED as u64 {
            c.retire(t);
        }
        c.get_or_load_tagged(&200, 100, || Ok(Arc::new(vec![0; 10]))).unwrap();
        assert!(c.peek(&200).is_none());
        c.retire(5000);
        c.get_or_load_tagged(&200, 100, || Ok(Arc::new(vec![0; 10]))).unwrap();
        assert!(c.peek(&200).is_some(), "the oldest retired tag was forgotten");
    }

    #[test]
    fn bounded_and_lru() {
        let c: ByteLru<u32, String> = ByteLru::new(100);
        for i in 0..5u32 {
            c.get_or_load(&i, || Ok(Arc::new(vec![i as u8; 40]))).unwrap();
        }
        assert!(c.stats.bytes.load(Ordering::Relaxed) <= 100);
        assert_eq!(c.len(), 2);
        assert_eq!(c.stats.evictions.load(Ordering::Relaxed), 3);
        // Too big to cache: returned, not kept.
        let big = c.get_or_load(&99, || Ok(Arc::new(vec![0u8; 500]))).unwrap();
        assert_eq!(big.len(), 500);
        assert_eq!(c.len(), 2);
        // Errors are returned and not cached.
        assert!(c.get_or_load(&7, || Err("boom".to_string())).is_err());
        assert_eq!(c.get_or_load(&7, || Ok(Arc::new(vec![1]))).unwrap().len(), 1);
    }

    #[test]
    fn concurrent_loads_compute_once() {
        let c: Arc<ByteLru<u32, String>> = Arc::new(ByteLru::new(1 << 20));
        let calls = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let c = c.clone();
                let calls = calls.clone();
                std::thread::spawn(move || {
                    c.get_or_load(&1, || {
                        calls.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(50));
                        Ok(Arc::new(vec![5u8; 10]))
                    })
                    .unwrap()
                })
            })
            .collect();
        for t in threads {
            assert_eq!(&t.join().unwrap()[..], &[5u8; 10]);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
