//! kpackfs on Linux: the FUSE adapter over `kpackfs_core`'s view, as a
//! library so its filesystem logic is tested without a mount; `main.rs`
//! is the `kpackfs` binary over it.
//!
//! Where to start reading: [`fs`] is the filesystem (handles, passthrough,
//! negative entries, listings, attributes), [`errno`] the errno of every
//! view error, [`fuse`] the protocol glue, [`mount`] the `mount` command
//! (options, detaching, signals), [`watch`] source-change invalidation.

pub mod cli;
#[cfg(target_os = "linux")]
pub mod errno;
#[cfg(target_os = "linux")]
pub mod fs;
#[cfg(target_os = "linux")]
pub mod fuse;
pub mod generate;
#[cfg(target_os = "linux")]
pub mod logging;
#[cfg(target_os = "linux")]
pub mod mount;
#[cfg(target_os = "linux")]
pub mod mounts;
#[cfg(target_os = "linux")]
pub mod watch;
#[cfg(target_os = "linux")]
pub mod watchdog;

#[cfg(all(test, target_os = "linux"))]
mod fs_tests;
