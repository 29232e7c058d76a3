//! Locations of shared test data. Missing data is a test failure, never a
//! skip: CI always has `../shared` beside the checkout.
#![allow(dead_code)]

use std::path::PathBuf;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn shared() -> PathBuf {
    let p = std::env::var_os("KPACKFS_SHARED").map(PathBuf::from).unwrap_or_else(|| repo().join("../shared"));
    assert!(p.join("vectors").is_dir(), "shared test vectors not found at {} (set KPACKFS_SHARED)", p.display());
    p
}

pub fn vectors() -> PathBuf {
    shared().join("vectors")
}

pub fn assets() -> PathBuf {
    repo().join("test_assets")
}

pub fn read(p: impl Into<PathBuf>) -> Vec<u8> {
    let p = p.into();
    std::fs::read(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}
