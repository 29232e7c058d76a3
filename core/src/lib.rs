//! kpackfs-core: the platform-independent engine of kpackfs.
//!
//! It knows bytes and paths only — no FUSE, no Dokan. The adapters call the
//! [`view::View`]; everything format-specific lives here:
//! offload bundles and CCOB ([`bundle`]), target IDs ([`target`]), the HIP
//! wrapper ([`wrapper`]), the kpack marker ([`marker`]), `.kpack` archives
//! ([`kpack`]), the ELF and PE planners ([`elf`], [`coff`]) that express the
//! reference kpack transform as a lazy [`layout::Layout`], database file
//! rules ([`db`]), the caches ([`data_cache`]), this machine's GPUs ([`machine`]), and the offline paths ([`bake`], [`inspect`], [`resolve`]).

pub mod copy;
pub mod data_cache;
pub mod formats;
pub mod io;
pub mod layout;
pub mod machine;
pub mod namespace;
pub mod packaging;
pub mod plan;
pub mod source;
pub mod staging;
pub mod tools;
pub mod view;
