//! Locations of the test data, all inside the repository. Missing data is a
//! test failure, never a skip: a checkout always carries it.
#![allow(dead_code)]

use std::path::PathBuf;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn assets() -> PathBuf {
    repo().join("test_assets")
}

/// The compatibility vectors (reference-tool goldens and upstream archives,
/// see `test_assets/vectors/README.md`).
pub fn vectors() -> PathBuf {
    let p = assets().join("vectors");
    assert!(p.join("generated-golden").is_dir(), "test vectors not found at {}", p.display());
    p
}

pub fn read(p: impl Into<PathBuf>) -> Vec<u8> {
    let p = p.into();
    std::fs::read(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

/// A zstd frame written with a content checksum, as the same frame without
/// it: the Content_Checksum_flag (bit 2 of the frame header descriptor, the
/// byte after the magic; RFC 8878 3.1.1.1.1) cleared and the 4 checksum
/// bytes at the end dropped. Panics if the frame has no checksum, or if it
/// does not decode (libzstd checks the checksum).
pub fn without_checksum(frame: &[u8]) -> Vec<u8> {
    assert_eq!(frame.get(..4), Some(&[0x28, 0xb5, 0x2f, 0xfd][..]), "not a zstd frame");
    assert!(frame[4] & 0x04 != 0, "frame has no content checksum");
    zstd::stream::decode_all(frame).expect("the frame decodes and its checksum matches");
    let mut v = frame[..frame.len() - 4].to_vec();
    v[4] &= !0x04;
    v
}
