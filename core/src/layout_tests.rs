//! Tests of `layout.rs`: edits against a plain byte buffer, windowed
//! decoding, coalesced source reads.

use super::*;
use proptest::prelude::*;

/// Serves byte `i` of a blob as `i % 251`, recording the largest piece
/// asked for.
struct Synthetic(std::sync::atomic::AtomicU64);

impl Decoder for Synthetic {
    fn object(&self, _src: &dyn ReadAt, _blob: &Encoded, offset: u64, len: u64) -> Result<Arc<Vec<u8>>, LayoutError> {
        self.0.fetch_max(len, std::sync::atomic::Ordering::Relaxed);
        Ok(Arc::new((offset..offset + len).map(|i| (i % 251) as u8).collect()))
    }
}

/// A code object larger than a window is decoded window by window:
/// reads across window and extent edges are right, and no request
/// exceeds a window (a hostile CCOB claiming gigabytes costs a window
/// of memory per read, not its claim).
#[test]
fn large_blobs_are_read_in_windows() {
    let blob = Arc::new(Encoded { at: 0, len: 100, decoded_len: 3 * DECODE_WINDOW + 77, header: Arc::from(&[][..]) });
    let mut l = Layout::new();
    l.push_bytes(vec![7u8; 10]);
    l.push_decoded(blob, 5, 2 * DECODE_WINDOW + 50);
    l.push_bytes(vec![9u8; 10]);
    let store = Synthetic(std::sync::atomic::AtomicU64::new(0));
    let want = |pos: u64| -> u8 {
        let end = 10 + 2 * DECODE_WINDOW + 50;
        if pos < 10 {
            7
        } else if pos < end {
            ((pos - 10 + 5) % 251) as u8
        } else {
            9
        }
    };
    let src: Vec<u8> = Vec::new();
    for (off, len) in [(0u64, 64usize), (DECODE_WINDOW, 4096), (10 + DECODE_WINDOW - 3, 10), (2 * DECODE_WINDOW, (DECODE_WINDOW + 200) as usize), (5, 1 << 20)]
    {
        let mut buf = vec![0u8; len];
        let n = l.read_at(off, &mut buf, &src, &store).unwrap();
        assert_eq!(n as u64, len.min((l.len() - off) as usize) as u64);
        for (k, b) in buf[..n].iter().enumerate() {
            assert_eq!(*b, want(off + k as u64), "byte {}", off + k as u64);
        }
    }
    assert!(store.0.load(std::sync::atomic::Ordering::Relaxed) <= DECODE_WINDOW);
}

fn model_apply(model: &mut Vec<u8>, layout: &mut Layout, op: &(u8, u64, u64, u8)) {
    let (kind, a, b, byte) = *op;
    let len = model.len() as u64;
    match kind % 5 {
        0 => {
            let src_off = a % 1000;
            let n = b % 50;
            model.extend((src_off..src_off + n).map(|i| (i % 251) as u8));
            layout.push_source(src_off, n);
        }
        1 => {
            let n = (b % 20) as usize;
            model.extend(std::iter::repeat_n(byte, n));
            layout.push_bytes(vec![byte; n]);
        }
        2 => {
            model.extend(std::iter::repeat_n(0, (b % 30) as usize));
            layout.push_zeros(b % 30);
        }
        3 if len > 0 => {
            let off = a % len;
            let n = (b % 16).min(len - off) as usize;
            model[off as usize..off as usize + n].fill(byte);
            layout.write_at(off, &vec![byte; n]).unwrap();
        }
        4 if len > 0 => {
            let off = a % len;
            let n = (b % 40).min(len - off);
            model.drain(off as usize..(off + n) as usize);
            layout.delete(off, n).unwrap();
        }
        _ => {}
    }
}

proptest! {
    #[test]
    fn edits_match_a_byte_buffer(ops in proptest::collection::vec((any::<u8>(), any::<u64>(), any::<u64>(), any::<u8>()), 0..60),
                                 reads in proptest::collection::vec((any::<u64>(), 0usize..200), 1..20)) {
        let src: Vec<u8> = (0..2000u32).map(|i| (i % 251) as u8).collect();
        let mut model = Vec::new();
        let mut layout = Layout::new();
        for op in &ops {
            model_apply(&mut model, &mut layout, op);
        }
        prop_assert_eq!(layout.len(), model.len() as u64);
        let mut compacted = layout.clone();
        compacted.compact();
        for l in [&layout, &compacted] {
            prop_assert_eq!(&l.materialize(&src, &NoDecoding).unwrap(), &model);
            for (off, n) in &reads {
                let off = if model.is_empty() { 0 } else { off % (model.len() as u64 + 5) };
                let mut buf = vec![0xAAu8; *n];
                let got = l.read_at(off, &mut buf, &src, &NoDecoding).unwrap();
                let want: &[u8] = model.get(off as usize..).map(|s| &s[..s.len().min(*n)]).unwrap_or(&[]);
                prop_assert_eq!(&buf[..got], want);
            }
        }
    }
}

/// Counts the source reads a layout makes.
struct Counting(Vec<u8>, std::sync::atomic::AtomicUsize);

impl ReadAt for Counting {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.0.read_at(offset, buf)
    }
    fn size(&self) -> io::Result<u64> {
        self.0.size()
    }
}

/// A table whose every entry has a patched field (section headers of a
/// transformed library) is one source read, not one per entry; a piece
/// moved elsewhere, a large owned piece or a blob ends the span. The
/// expected bytes are worked out by hand on a plain buffer.
#[test]
fn patched_tables_are_read_in_one_span() {
    let src = Counting((0..8192u32).map(|i| (i % 251) as u8).collect(), Default::default());
    let reads = || src.1.swap(0, std::sync::atomic::Ordering::Relaxed);
    let mut want: Vec<u8> = src.0[..4096].to_vec();
    let mut l = Layout::new();
    l.push_source(0, 4096);
    for k in 0..64u64 {
        let at = 64 * k + 24;
        l.write_at(at, &[0xEE; 8]).unwrap();
        want[at as usize..at as usize + 8].fill(0xEE);
    }
    l.write_at(4000, &[0; 4]).unwrap();
    l.push_zeros(8);
    l.push_source(4096 + 8, 100); // in step with the first extent after 8 zeros
    l.push_source(100, 50); // out of step: a second read
    l.push_bytes(vec![3u8; 5000]); // too large to read past
    l.push_source(5150, 10); // in step with the one before it
    want[4000..4004].fill(0);
    want.extend([0; 8]);
    want.extend_from_slice(&src.0[4104..4204]);
    want.extend_from_slice(&src.0[100..150]);
    want.extend([3u8; 5000]);
    want.extend_from_slice(&src.0[5150..5160]);
    for (off, len) in [(0usize, want.len()), (10, 4000), (4096, 4200), (25, 7), (4100, 2)] {
        let mut buf = vec![0u8; len];
        let n = l.read_at(off as u64, &mut buf, &src, &NoDecoding).unwrap();
        assert_eq!(&buf[..n], &want[off..(off + len).min(want.len())], "read {off}+{len}");
    }
    reads();
    let mut buf = vec![0u8; want.len()];
    l.read_at(0, &mut buf, &src, &NoDecoding).unwrap();
    assert_eq!(reads(), 3, "one span up to the zeros' neighbour, one out of step, one after the large piece");
    let mut buf = vec![0u8; 30];
    l.read_at(20, &mut buf, &src, &NoDecoding).unwrap();
    assert_eq!(reads(), 1);
}

#[test]
fn short_source_is_an_error() {
    let src = vec![1u8; 10];
    let l = Layout::passthrough(20);
    let mut buf = [0u8; 20];
    assert!(l.read_at(0, &mut buf, &src, &NoDecoding).is_err());
    let mut l = Layout::new();
    l.push_zeros(4);
    assert!(l.write_at(2, &[1, 2, 3]).is_err());
    assert!(l.delete(5, 0).is_err());
}

/// Read-ahead hints cover exactly the source pieces of the asked range,
/// clipped at both ends — including the rest of the piece the reader is
/// in (a transformed library's host code is one piece of 14 MB) — and
/// nothing of owned bytes or zeros. Expected values worked out by hand
/// from the pieces below.
#[test]
fn source_ranges_are_the_clipped_source_pieces_of_a_range() {
    let mut l = Layout::new();
    l.push_bytes(vec![1u8; 64]); //        [0, 64)      owned
    l.push_source(64, 1000); //            [64, 1064)   source 64..
    l.push_zeros(500); //                  [1064, 1564) zeros
    l.push_source(50_000, 300); //         [1564, 1864) source 50000..
    l.push_source(9_000, 100); //          [1864, 1964) source 9000..
    assert_eq!(l.source_ranges(0, 64), vec![]);
    assert_eq!(l.source_ranges(0, 100), vec![(64, 64, 36)]);
    assert_eq!(l.source_ranges(500, 600), vec![(500, 500, 100)]);
    assert_eq!(l.source_ranges(1000, 1600), vec![(1000, 1000, 64), (1564, 50_000, 36)]);
    assert_eq!(l.source_ranges(1064, 1564), vec![]);
    assert_eq!(l.source_ranges(1700, 5000), vec![(1700, 50_136, 164), (1864, 9_000, 100)]);
    assert_eq!(l.source_ranges(1964, 5000), vec![]);
    assert_eq!(l.source_ranges(600, 600), vec![]);
}
