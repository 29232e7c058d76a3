//! Deciding what a source file becomes, for the live view and the offline
//! tools alike: the fat-binary analysis ([`binary`]), code-object selection
//! ([`select`]), the archive plan ([`archive`]) and the database-file
//! rules ([`db`]). Planning reads formats and produces layouts; it knows
//! nothing of inodes, handles, caches or the adapters.

mod archive;
mod binary;
pub mod db;
mod select;

pub use archive::{ArchiveCompression, ArchiveNaming, ArchivePlan, Archives, ZSTD_LEVEL};
pub use binary::{FatBinary, Refusal};
pub use select::{best_for, choice_for_key, spirv_needed, Objects};
