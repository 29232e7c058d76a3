//! PE/COFF host binaries (FORMATS.md §4). Planned in its own change; until
//! then PE files pass through unchanged.

use crate::host::{HostPlan, NotTransformed};
use crate::io::ReadAt;

pub fn probe(_src: &dyn ReadAt) -> bool {
    false
}

pub fn plan_host(_src: &dyn ReadAt, _marker: &[u8]) -> Result<HostPlan, NotTransformed> {
    Err(NotTransformed::Plain)
}

/// Wrappers of a PE binary for `resolve`: (index, wrapper, file offset of
/// the pointer target, bytes mapped there).
pub fn resolve_wrappers(_src: &dyn ReadAt, path: &std::path::Path) -> Result<Vec<(u32, crate::wrapper::Wrapper, Option<u64>, u64)>, crate::resolve::ResolveError> {
    Err(crate::resolve::ResolveError::Format(path.to_path_buf()))
}

/// `inspect` for PE files.
pub fn inspect(out: &mut String, _src: &dyn ReadAt) -> std::io::Result<()> {
    out.push_str("PE/COFF file\n");
    Ok(())
}

/// File offset and size of the `.hip_fat` section, if any.
pub fn fat_section(_src: &dyn ReadAt) -> Option<(u64, u64)> {
    None
}
