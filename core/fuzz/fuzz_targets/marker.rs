//! The marker decoder (runtime semantics) on arbitrary bytes; a decoded
//! marker re-encodes to bytes that decode to the same marker.
#![no_main]
use kpackfs_core::formats::marker::Marker;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = Marker::decode(data) {
        let e = m.encode();
        assert_eq!(Marker::decode(&e).expect("re-decode"), m);
    }
});
