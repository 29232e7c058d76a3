//! kpackfs-core: the platform-independent engine of kpackfs. It knows
//! bytes and paths only — no FUSE, no Dokan, no command line.
//!
//! Layers, lowest first (README "Architecture"; `.ci/layers.py` checks
//! that no module imports a layer above its own):
//! - base: positioned reads (`io`, crate-private), a file as extents
//!   ([`layout`]), the source tree ([`source`]), staged outputs
//!   ([`staging`]);
//! - [`formats`]: target IDs, offload bundles and CCOB, the HIP wrapper,
//!   the kpack marker, `.kpack` archives, ELF and PE host binaries;
//! - [`plan`]: what a fat binary becomes (transform, code-object
//!   selection, archives) and the database-file rules; beside it the
//!   caches ([`data_cache`]) and this machine's GPUs ([`machine`]);
//! - [`view`]: the per-target view the adapters serve, and [`namespace`]
//!   (one mount's views);
//! - [`tools`] (bake, inspect, resolve, archs, recompress, doctor) and
//!   [`packaging`] (split, verify, recombine, wheels).
//!
//! What the adapters, the command line, the tests and the fuzz targets use
//! is public; the rest is crate-private, so the compiler reports what no
//! one uses.

pub(crate) mod copy;
pub mod data_cache;
pub mod formats;
pub(crate) mod io;
pub mod layout;
pub mod machine;
pub mod namespace;
pub mod packaging;
pub mod plan;
pub mod source;
pub mod staging;
pub mod tools;
pub mod view;
