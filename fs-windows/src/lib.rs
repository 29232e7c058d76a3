//! kpackfs on Windows: the Dokan adapter and the `kpackfs.exe` CLI.
//!
//! The adapter translates Dokan callbacks into [`kpackfs_core::view::View`]
//! calls and view errors into NTSTATUS; it holds no format logic. The parts
//! that do not need Dokan — path parsing ([`names`]), the path walk with
//! case-insensitive lookups and symlink resolution ([`walk`]), the
//! NTSTATUS mapping ([`ntstatus`]), the read-only access rules
//! ([`access`]), attributes ([`info`]) and the CLI ([`cli`], [`app`]) —
//! build and are unit-tested on every platform (on Linux natively, and as
//! Windows code under wine). The Dokan handler ([`dokan_fs`]) and the mount
//! loop (`mount`) exist on Windows only.
//!
//! See `fs-windows/README.md` for semantics and limitations.

pub mod access;
pub mod app;
pub mod cli;
pub mod info;
pub mod names;
pub mod ntstatus;
pub mod walk;

#[cfg(windows)]
pub mod dokan_fs;
#[cfg(windows)]
mod mount;
