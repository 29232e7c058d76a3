//! Deciding what a source file becomes, for the live view and the offline
//! tools alike: the fat-binary analysis and code-object selection
//! ([`fat`]), and the database-file rules ([`db`]). Planning reads
//! formats and produces layouts; it knows nothing of inodes, handles,
//! caches or the adapters.

pub mod db;
pub mod fat;
