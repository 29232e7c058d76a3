// Shared planner invariants (included by elf_plan.rs and pe_plan.rs).
use kpackfs_core::formats::bundle::ccob::Uncached;
use kpackfs_core::layout::{Layout, Piece};

/// Checks a planned layout against its input: the served length is the sum
/// of the extents (what `stat` reports), source extents lie inside the
/// input, and reading any range works and agrees with the whole.
// `&Vec<u8>`, not `&[u8]`: the layout reads through `dyn ReadAt`, which
// `Vec<u8>` implements and an unsized slice cannot be cast to.
#[allow(clippy::ptr_arg)]
pub fn check_layout(layout: &Layout, input: &Vec<u8>) {
    let mut pos = 0u64;
    for e in layout.extents() {
        assert_eq!(e.start, pos, "extents are contiguous");
        pos += e.len;
        if let Piece::Source { offset } = e.piece {
            assert!(offset + e.len <= input.len() as u64, "source extent outside the input");
        }
    }
    assert_eq!(pos, layout.len(), "stat size equals the extents");
    if layout.len() > 64 << 20 {
        return;
    }
    let whole = layout.materialize(input, &Uncached).expect("materialize a planned layout");
    assert_eq!(whole.len() as u64, layout.len());
    let n = whole.len() as u64;
    for (off, len) in [(0u64, 7usize), (n / 3, 4096), (n.saturating_sub(5), 100), (n + 10, 10)] {
        let mut buf = vec![0u8; len];
        let got = layout.read_at(off, &mut buf, input, &Uncached).expect("read_at");
        let s = (off.min(n)) as usize;
        assert_eq!(&buf[..got], &whole[s..(s + len).min(n as usize)]);
    }
}
