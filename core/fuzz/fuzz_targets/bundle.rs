//! Offload bundles and CCOB envelopes from arbitrary bytes: scanning,
//! listing code objects and reading them must never panic, hang or
//! allocate beyond the input's bounds (decoded sizes are capped).
#![no_main]
use kpackfs_core::formats::bundle;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let v = data.to_vec();
    let len = v.len() as u64;
    if let Ok(chunks) = bundle::scan_fatbin(&v, 0, len) {
        for (i, c) in chunks.iter().enumerate() {
            assert!(c.at() < len && c.at() + c.len() <= len, "chunk outside the input");
            if let Ok(objs) = bundle::chunk_objects(&v, c, i) {
                for o in objs.iter().take(8) {
                    if o.location.len() <= 1 << 24 {
                        if let Ok(b) = bundle::read_object(&v, &o.location) {
                            assert_eq!(b.len() as u64, o.location.len());
                        }
                    }
                }
            }
        }
    }
    let _ = bundle::parse_bundle(&v, 0, len);
});
