//! The ELF planner on arbitrary input: any accepted file yields a layout
//! that satisfies the serving invariants; anything else is a clean error.
#![no_main]
use kpackfs_core::formats::elf::{self, ElfFile};
use kpackfs_core::formats::host;
use kpackfs_core::formats::marker::Marker;
use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    let v = data.to_vec();
    let Ok(f) = ElfFile::parse(&v) else { return };
    let _ = f.classify();
    // What `inspect`, `resolve` and `verify` read of untrusted binaries.
    let mut text = String::new();
    let _ = host::describe(&mut text, &v);
    let _ = host::wrappers(&v);
    let marker = Marker::for_group("fuzz.so", 0, "lib/fuzz.so").encode();
    if let Ok(p) = elf::plan(&v, &f, &marker) {
        common::check_layout(&p.layout, &v);
        for w in &p.wrappers {
            if let Some(o) = w.fatbin_offset(&p.fatbin) {
                assert!(o < p.fatbin.size);
            }
        }
    }
});
