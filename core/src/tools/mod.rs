//! The offline tools that sit above the planning layer and the view:
//! writing a view to disk ([`bake`]), describing binaries ([`inspect`]),
//! resolving a kpack'd binary's code objects as the runtime would
//! ([`resolve`]), listing the targets of an install ([`archs`]) and
//! recompressing bundles ([`recompress`]). Packaging (split, verify,
//! recombine, wheels) lives beside them in [`crate::packaging`].

pub mod archs;
pub mod bake;
pub mod doctor;
pub mod inspect;
pub mod recompress;
pub mod resolve;
