//! `.kpack` archives from arbitrary bytes: opening and extracting every
//! TOC entry never panics, and `none` blobs come back at their stated size.
#![no_main]
use kpackfs_core::formats::kpack::{Archive, Scheme};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let v = data.to_vec();
    if let Ok(a) = Archive::open(&v) {
        for (key, archs) in a.toc.toc.iter().take(16) {
            for (arch, e) in archs.iter().take(4) {
                if e.original_size > 1 << 24 {
                    continue;
                }
                if let Ok(k) = a.get_kernel(&v, key, arch) {
                    if let Scheme::None { blobs } = &a.toc.scheme {
                        assert_eq!(Some(k.len() as u64), blobs.get(e.ordinal as usize).map(|b| b.1));
                    }
                }
            }
        }
    }
});
