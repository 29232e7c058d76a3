//! The PE planner on arbitrary input, with the same invariants.
#![no_main]
use kpackfs_core::formats::host;
use kpackfs_core::formats::marker::Marker;
use kpackfs_core::formats::pe::{self, PeFile};
use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    let v = data.to_vec();
    let Ok(pe) = PeFile::parse(&v) else { return };
    let _ = pe.classify();
    // What `inspect`, `resolve` and `verify` read of untrusted binaries.
    let mut text = String::new();
    let _ = host::describe(&mut text, &v);
    let _ = host::wrappers(&v);
    let marker = Marker::for_group("fuzz.dll", 0, "bin/fuzz.dll").encode();
    if let Ok(p) = pe::plan(&v, &pe, &marker) {
        common::check_layout(&p.layout, &v);
    }
});
