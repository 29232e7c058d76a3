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
