//! kpackfs-core: the platform-independent engine of kpackfs.
//!
//! It knows bytes and paths only — no FUSE, no Dokan. The adapters call the
//! [`view::View`]; everything format-specific lives here:
//! offload bundles and CCOB ([`bundle`]), target IDs ([`target`]), the HIP
//! wrapper ([`wrapper`]), the kpack marker ([`marker`]), `.kpack` archives
//! ([`kpack`]), the ELF and PE planners ([`elf`], [`coff`]) that express the
//! reference kpack transform as a lazy [`layout::Layout`], database file
//! rules ([`db`]), the caches ([`data_cache`]), this machine's GPUs ([`machine`]), and the offline paths ([`bake`], [`inspect`], [`resolve`]).

pub mod archs;
pub mod bake;
pub mod bundle;
#[cfg(feature = "cli")]
pub mod cli;
pub mod coff;
pub mod copy;
pub mod data_cache;
pub mod db;
pub mod demo;
pub mod doctor;
pub mod elf;
pub mod host;
pub mod inspect;
pub mod io;
pub mod kpack;
pub mod layout;
pub mod machine;
pub mod marker;
pub mod msgpack;
pub mod recompress;
pub mod resolve;
pub mod source;
pub mod split;
pub mod staging;
pub mod target;
pub mod view;
pub mod views;
pub mod wrapper;
