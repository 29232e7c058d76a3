//! Work on one listing's entries spread over a few threads.
//!
//! A cold listing of a large directory waits on the disk once per entry
//! (an inode to stat, a first page to probe). One thread keeps only a few
//! of those waits in flight, and the syscalls around them (most of the
//! cost once the disk has answered) run on one core. Thousands of entries
//! are common in real installs (kernel libraries, databases), so a listing
//! splits them into chunks and hands them to scoped threads; small
//! directories stay on the calling thread.

use std::ops::Range;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Threads one listing uses at most.
pub(super) const THREADS: usize = 4;

/// `f` applied to each chunk of `0..n` (chunks of `size` items), on up to
/// [`THREADS`] threads; each chunk's range with its result, in chunk
/// order, `None` for a chunk whose work panicked (the caller treats its
/// items as unanswered).
pub(super) fn chunked<T: Send>(n: usize, size: usize, f: impl Fn(Range<usize>) -> T + Sync) -> Vec<(Range<usize>, Option<T>)> {
    let size = size.max(1);
    let ranges: Vec<Range<usize>> = (0..n).step_by(size).map(|s| s..(s + size).min(n)).collect();
    let threads = THREADS.min(ranges.len());
    let run = |r: Range<usize>| std::panic::catch_unwind(AssertUnwindSafe(|| f(r))).ok();
    if threads <= 1 {
        return ranges.into_iter().map(|r| (r.clone(), run(r))).collect();
    }
    let next = AtomicUsize::new(0);
    let work = || {
        let mut out = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(r) = ranges.get(i) else { break };
            // A panic is a bug; it costs this chunk's answers, not the
            // other chunks this thread would have taken.
            if let Some(t) = run(r.clone()) {
                out.push((i, t));
            }
        }
        out
    };
    let mut results: Vec<Option<T>> = std::iter::repeat_with(|| None).take(ranges.len()).collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads).map(|_| s.spawn(work)).collect();
        for h in handles {
            for (i, t) in h.join().unwrap_or_default() {
                results[i] = Some(t);
            }
        }
    });
    ranges.into_iter().zip(results).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_once_in_order() {
        for (n, size) in [(0, 4), (1, 4), (4, 4), (5, 4), (1000, 7), (1000, 1000), (3, 0)] {
            let got: Vec<usize> = chunked(n, size, |r| r.collect::<Vec<_>>())
                .into_iter()
                .flat_map(|(r, c)| {
                    assert_eq!(c.as_ref(), Some(&r.clone().collect::<Vec<_>>()));
                    c.unwrap()
                })
                .collect();
            assert_eq!(got, (0..n).collect::<Vec<_>>(), "n={n} size={size}");
        }
    }

    #[test]
    fn a_panicking_chunk_is_none_and_the_rest_arrive() {
        let got = chunked(40, 4, |r| {
            assert!(r.start != 8, "chunk 2 fails");
            r.len()
        });
        assert_eq!(got.len(), 10);
        assert_eq!(got[2], (8..12, None));
        assert_eq!(got.iter().filter_map(|(_, c)| *c).sum::<usize>(), 36);
    }
}
