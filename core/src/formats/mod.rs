//! The file formats, beneath everything else: parsing and encoding only,
//! no policy. Nothing here imports `plan`, `view`, the tools or the
//! adapters; every format speaks in the base vocabulary of [`crate::io`]
//! (positioned reads) and [`crate::layout`] (a file as extents).
//!
//! - [`target`]: AMDGPU target IDs and their compatibility rules.
//! - [`bundle`]: clang offload bundles and their compressed form (CCOB).
//! - [`wrapper`], [`marker`], [`msgpack`]: the HIP fat-binary wrapper, the
//!   `.rocm_kpack_ref` marker and the MessagePack subset both use.
//! - [`kpack`]: `.kpack` archives (read, and written as layouts).
//! - [`host`]: the host-binary interface ([`host::HostFile`]) and its facade
//!   over [`elf`] and [`pe`], the two formats implementing it.

pub mod bundle;
pub mod elf;
pub mod host;
pub mod kpack;
pub mod marker;
pub(crate) mod msgpack;
pub mod pe;
pub mod target;
pub(crate) mod traits;
pub mod wrapper;
