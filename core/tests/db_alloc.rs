//! Classifying a path by the database rules allocates nothing unless a rule
//! matches (then only the answer): listings classify every entry (issue 23).
//! A binary of its own, so its counting allocator sees only this test.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::Path;

use kpackfs_core::plan::db::Rules;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the counter is thread-local.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|a| a.set(a.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations(f: impl FnOnce()) -> u64 {
    let before = ALLOCS.with(Cell::get);
    f();
    ALLOCS.with(Cell::get) - before
}

#[test]
fn classification_allocates_only_for_an_answer() {
    let rules = Rules::with_operator_rules(&["*a*a*a*a*b{arch}".into(), "**/site/**/{arch}/**".into()], &[]).unwrap();
    let generic = [
        "lib/libamdhip64.so.6.2.41133",
        "lib/rocblas/library/TensileLibrary.dat",
        "lib/rocblas/library/TensileManifest.txt",
        "share/miopen/db/readme.txt",
        "lib/python3.12/site-packages/torch/lib/libtorch_hip.so",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    ];
    let tensile = Path::new("lib/rocblas/library/TensileLibrary_gfx90a.co");
    // The first walk on a thread sizes its scratch table (and rules whose
    // literal texts a path lacks never walk, so the match warms it too).
    for p in generic {
        assert_eq!(rules.classify(Path::new(p)), None);
        assert_eq!(rules.classify_dir(Path::new(p)), None);
    }
    assert!(rules.classify(tensile).is_some());
    let n = allocations(|| {
        for _ in 0..100 {
            for p in generic {
                assert_eq!(rules.classify(Path::new(p)), None);
                assert_eq!(rules.classify_dir(Path::new(p)), None);
            }
        }
    });
    assert_eq!(n, 0, "allocations while classifying generic paths");
    // A match allocates its answer (the processor name) and nothing per rule tried.
    let n = allocations(|| assert!(rules.classify(tensile).is_some()));
    assert_eq!(n, 1);
}
