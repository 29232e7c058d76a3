//! The Dokan adapter: translates Dokan callbacks into [`View`] calls (via
//! the path [`Walker`]) and view errors into NTSTATUS
//! ([`ntstatus::from_view_error`]). No format logic lives here.
//!
//! * `create_file` opens existing files and directories for reading only;
//!   the access rules are in [`crate::access`]. A handle keeps the node it
//!   resolved to; file data is opened once per handle ([`OpenFile`]).
//! * `read_file` is positional: Dokan calls it from several threads at once
//!   on one handle, so it reads with [`OpenFile::read_at`] at the offset of
//!   the request, never through a cursor.
//! * Every modifying callback answers [`READ_ONLY`]
//!   (`STATUS_MEDIA_WRITE_PROTECTED`), as the Dokan driver itself does for
//!   a volume mounted write-protected, which `kpackfs mount` always asks for.
//! * No alternate data streams: `name:stream` is "not found"; `FindStreams`
//!   lists only `::$DATA`.

use std::sync::{Arc, OnceLock};

use dokan::{
    CreateFileInfo, DiskSpaceInfo, FileInfo, FileSystemHandler, FileTimeOperation, FillDataError, FillDataResult, FindData, FindStreamData, OperationInfo,
    OperationResult, VolumeInfo, IO_SECURITY_CONTEXT,
};
use widestring::{U16CStr, U16CString};
use winapi::um::winnt::{ACCESS_MASK, PSECURITY_DESCRIPTOR};

use kpackfs_core::view::{OpenFile, View};

use crate::access;
use crate::info;
use crate::names::{self, Stream};
use crate::ntstatus::{self, *};
use crate::walk::{Node, Resolved, Walker};

/// What an open handle refers to (the dokan crate boxes it).
#[allow(clippy::large_enum_variant)]
pub enum Context {
    Dir(Resolved),
    File {
        node: Node,
        /// The served bytes, opened at `CreateFile` for handles that read
        /// data, else on the first read.
        data: OnceLock<OpenFile>,
    },
}

impl Context {
    fn node(&self) -> &Node {
        match self {
            Context::Dir(r) => &r.node,
            Context::File { node, .. } => node,
        }
    }
}

/// The file system handler over one view.
pub struct KpackDokan {
    view: Arc<View>,
    walker: Walker,
    label: String,
    serial: u32,
}

fn wide(s: &str) -> U16CString {
    // Names come from `names::windows_visible` (no NUL): cannot fail.
    U16CString::from_str(s).unwrap_or_default()
}

fn find_data(name: &str, node: &Node) -> FindData {
    let a = &node.attr;
    FindData {
        attributes: info::attributes(a.kind),
        creation_time: info::system_time(a.ctime),
        last_access_time: info::system_time(a.atime),
        last_write_time: info::system_time(a.mtime),
        file_size: if node.is_dir() { 0 } else { a.size },
        file_name: wide(name),
    }
}

/// `fill_find_data` results: a name Windows cannot take is skipped, a full
/// buffer ends the listing.
fn filled(r: FillDataResult) -> OperationResult<()> {
    match r {
        Ok(()) | Err(FillDataError::NameTooLong) => Ok(()),
        Err(FillDataError::BufferFull) => Err(STATUS_BUFFER_OVERFLOW),
    }
}

fn read_only<T>(what: &str, file_name: &U16CStr) -> OperationResult<T> {
    log::debug!("{what} {}: {}", file_name.to_string_lossy(), ntstatus::name(READ_ONLY));
    Err(READ_ONLY)
}

impl KpackDokan {
    pub fn new(view: Arc<View>, case_sensitive: bool) -> KpackDokan {
        let cfg = view.config();
        let label = info::volume_label(&cfg.selection.to_string());
        let serial = info::volume_serial(&cfg.source);
        KpackDokan { walker: Walker::new(view.clone(), case_sensitive), view, label, serial }
    }

    fn open_data<'a>(&self, node: &Node, data: &'a OnceLock<OpenFile>) -> Result<&'a OpenFile, NtStatus> {
        if let Some(f) = data.get() {
            return Ok(f);
        }
        let f = self.view.open_path(&node.path).map_err(|e| {
            log::warn!("{}: open: {e}", node.path.display());
            from_view_error(&e)
        })?;
        // Another thread may have opened it meanwhile: either is fine.
        Ok(data.get_or_init(|| f))
    }

    fn create(&self, file_name: &U16CStr, desired_access: u32, disposition: u32, options: u32) -> Result<CreateFileInfo<Context>, NtStatus> {
        access::check_request(disposition, options)?;
        let name = String::from_utf16(file_name.as_slice()).map_err(|_| STATUS_OBJECT_NAME_INVALID)?;
        let path = names::parse(&name)?;
        let resolved = self.walker.resolve(&path.components).map_err(|s| access::missing(disposition, s))?;
        if let Stream::Alternate(_) = path.stream {
            return Err(access::missing(disposition, STATUS_OBJECT_NAME_NOT_FOUND));
        }
        let is_dir = resolved.node.is_dir();
        access::check_existing(desired_access, options, is_dir)?;
        let context = if is_dir {
            Context::Dir(resolved)
        } else {
            let data = OnceLock::new();
            if access::reads_data(desired_access) {
                self.open_data(&resolved.node, &data)?;
            }
            Context::File { node: resolved.node, data }
        };
        Ok(CreateFileInfo { context, is_dir, new_file_created: false })
    }
}

impl<'c, 'h: 'c> FileSystemHandler<'c, 'h> for KpackDokan {
    type Context = Context;

    fn create_file(
        &'h self,
        file_name: &U16CStr,
        _security_context: &IO_SECURITY_CONTEXT,
        desired_access: ACCESS_MASK,
        _file_attributes: u32,
        _share_access: u32,
        create_disposition: u32,
        create_options: u32,
        _info: &mut OperationInfo<'c, 'h, Self>,
    ) -> OperationResult<CreateFileInfo<Self::Context>> {
        let r = self.create(file_name, desired_access, create_disposition, create_options);
        if let Err(s) = &r {
            log::trace!(
                "create {} access {desired_access:#x} disposition {create_disposition} options {create_options:#x}: {}",
                file_name.to_string_lossy(),
                ntstatus::name(*s)
            );
        }
        r
    }

    fn cleanup(&'h self, _file_name: &U16CStr, _info: &OperationInfo<'c, 'h, Self>, _context: &'c Self::Context) {
        // Nothing to do: nothing is ever deleted on close (refused at open).
    }

    fn close_file(&'h self, _file_name: &U16CStr, _info: &OperationInfo<'c, 'h, Self>, _context: &'c Self::Context) {
        // The context (and its open file) is dropped by the dokan crate.
    }

    fn read_file(
        &'h self,
        _file_name: &U16CStr,
        offset: i64,
        buffer: &mut [u8],
        _info: &OperationInfo<'c, 'h, Self>,
        context: &'c Self::Context,
    ) -> OperationResult<u32> {
        let Context::File { node, data } = context else { return Err(STATUS_INVALID_DEVICE_REQUEST) };
        let offset = u64::try_from(offset).map_err(|_| STATUS_INVALID_PARAMETER)?;
        let f = self.open_data(node, data)?;
        match f.read_at(offset, buffer) {
            // `buffer` is at most u32::MAX long (Dokan's length is a DWORD).
            Ok(n) => Ok(n as u32),
            Err(e) => {
                log::warn!("{}: read {} bytes at {offset}: {e}", node.path.display(), buffer.len());
                Err(from_view_error(&e))
            }
        }
    }

    fn get_file_information(&'h self, _file_name: &U16CStr, _info: &OperationInfo<'c, 'h, Self>, context: &'c Self::Context) -> OperationResult<FileInfo> {
        let node = context.node();
        let a = match context {
            // What this handle reads, even if the source changed since.
            Context::File { data, .. } if data.get().is_some() => data.get().map(|f| f.attr().clone()).unwrap_or_else(|| node.attr.clone()),
            _ => match self.view.getattr(node.attr.ino) {
                // The source file was replaced: describe the current one.
                Err(kpackfs_core::view::Error::StaleInode(_)) => self.view.getattr_path(&node.path),
                r => r,
            }
            .map_err(|e| from_view_error(&e))?,
        };
        let size = if context.node().is_dir() { 0 } else { a.size };
        Ok(FileInfo {
            attributes: info::attributes(a.kind),
            creation_time: info::system_time(a.ctime),
            last_access_time: info::system_time(a.atime),
            last_write_time: info::system_time(a.mtime),
            file_size: size,
            number_of_links: a.nlink.clamp(1, u64::from(u32::MAX)) as u32,
            file_index: a.ino,
        })
    }

    fn find_files(
        &'h self,
        _file_name: &U16CStr,
        mut fill_find_data: impl FnMut(&FindData) -> FillDataResult,
        _info: &OperationInfo<'c, 'h, Self>,
        context: &'c Self::Context,
    ) -> OperationResult<()> {
        let Context::Dir(dir) = context else { return Err(STATUS_NOT_A_DIRECTORY) };
        for (name, node) in self.walker.list(dir)? {
            filled(fill_find_data(&find_data(&name, &node)))?;
        }
        Ok(())
    }

    fn find_files_with_pattern(
        &'h self,
        _file_name: &U16CStr,
        pattern: &U16CStr,
        mut fill_find_data: impl FnMut(&FindData) -> FillDataResult,
        _info: &OperationInfo<'c, 'h, Self>,
        context: &'c Self::Context,
    ) -> OperationResult<()> {
        let Context::Dir(dir) = context else { return Err(STATUS_NOT_A_DIRECTORY) };
        let pattern = String::from_utf16(pattern.as_slice()).map_err(|_| STATUS_OBJECT_NAME_INVALID)?;
        if names::has_wildcards(&pattern) || pattern.is_empty() {
            // Dokan lists with `find_files` and matches the pattern itself.
            return Err(STATUS_NOT_IMPLEMENTED);
        }
        // One exact (case-insensitive) name: look it up instead of listing.
        match self.walker.find(dir, &pattern) {
            Ok((name, node)) => filled(fill_find_data(&find_data(&name, &node))),
            Err(s) if s == STATUS_OBJECT_NAME_NOT_FOUND || s == STATUS_OBJECT_PATH_NOT_FOUND => Ok(()),
            Err(s) => Err(s),
        }
    }

    fn find_streams(
        &'h self,
        _file_name: &U16CStr,
        mut fill_find_stream_data: impl FnMut(&FindStreamData) -> FillDataResult,
        _info: &OperationInfo<'c, 'h, Self>,
        context: &'c Self::Context,
    ) -> OperationResult<()> {
        if let Context::File { node, data } = context {
            let size = data.get().map_or(node.attr.size, OpenFile::len);
            let s = FindStreamData { size: i64::try_from(size).unwrap_or(i64::MAX), name: wide("::$DATA") };
            filled(fill_find_stream_data(&s))?;
        }
        Ok(())
    }

    fn get_disk_free_space(&'h self, _info: &OperationInfo<'c, 'h, Self>) -> OperationResult<DiskSpaceInfo> {
        let s = self.view.statfs().map_err(|e| from_view_error(&e))?;
        // Nothing can be written: no free space (as a CD reports).
        Ok(DiskSpaceInfo { byte_count: s.blocks.saturating_mul(s.block_size), free_byte_count: 0, available_byte_count: 0 })
    }

    fn get_volume_information(&'h self, _info: &OperationInfo<'c, 'h, Self>) -> OperationResult<VolumeInfo> {
        Ok(VolumeInfo {
            name: wide(&self.label),
            serial_number: self.serial,
            max_component_length: names::MAX_COMPONENT as u32,
            fs_flags: info::volume_flags(self.walker.case_sensitive()),
            // Windows enables features (and UAC elevation of programs on
            // the volume) by file system name; Dokan recommends "NTFS".
            fs_name: wide("NTFS"),
        })
    }

    fn mounted(&'h self, mount_point: &U16CStr, _info: &OperationInfo<'c, 'h, Self>) -> OperationResult<()> {
        log::info!("mounted at {}", mount_point.to_string_lossy());
        Ok(())
    }

    fn unmounted(&'h self, _info: &OperationInfo<'c, 'h, Self>) -> OperationResult<()> {
        log::info!("unmounted; counters:\n{}", self.view.stats());
        Ok(())
    }

    // Read-only: every modifying callback answers STATUS_MEDIA_WRITE_PROTECTED.

    fn write_file(
        &'h self,
        file_name: &U16CStr,
        _offset: i64,
        _buffer: &[u8],
        _info: &OperationInfo<'c, 'h, Self>,
        _context: &'c Self::Context,
    ) -> OperationResult<u32> {
        read_only("write", file_name)
    }

    fn flush_file_buffers(&'h self, file_name: &U16CStr, _info: &OperationInfo<'c, 'h, Self>, _context: &'c Self::Context) -> OperationResult<()> {
        read_only("flush", file_name)
    }

    fn set_file_attributes(
        &'h self,
        file_name: &U16CStr,
        _attributes: u32,
        _info: &OperationInfo<'c, 'h, Self>,
        _context: &'c Self::Context,
    ) -> OperationResult<()> {
        read_only("set attributes", file_name)
    }

    fn set_file_time(
        &'h self,
        file_name: &U16CStr,
        _creation_time: FileTimeOperation,
        _last_access_time: FileTimeOperation,
        _last_write_time: FileTimeOperation,
        _info: &OperationInfo<'c, 'h, Self>,
        _context: &'c Self::Context,
    ) -> OperationResult<()> {
        read_only("set times", file_name)
    }

    fn delete_file(&'h self, file_name: &U16CStr, _info: &OperationInfo<'c, 'h, Self>, _context: &'c Self::Context) -> OperationResult<()> {
        read_only("delete", file_name)
    }

    fn delete_directory(&'h self, file_name: &U16CStr, _info: &OperationInfo<'c, 'h, Self>, _context: &'c Self::Context) -> OperationResult<()> {
        read_only("delete directory", file_name)
    }

    fn move_file(
        &'h self,
        file_name: &U16CStr,
        _new_file_name: &U16CStr,
        _replace_if_existing: bool,
        _info: &OperationInfo<'c, 'h, Self>,
        _context: &'c Self::Context,
    ) -> OperationResult<()> {
        read_only("move", file_name)
    }

    fn set_end_of_file(&'h self, file_name: &U16CStr, _offset: i64, _info: &OperationInfo<'c, 'h, Self>, _context: &'c Self::Context) -> OperationResult<()> {
        read_only("set end of file", file_name)
    }

    fn set_allocation_size(
        &'h self,
        file_name: &U16CStr,
        _alloc_size: i64,
        _info: &OperationInfo<'c, 'h, Self>,
        _context: &'c Self::Context,
    ) -> OperationResult<()> {
        read_only("set allocation size", file_name)
    }

    fn set_file_security(
        &'h self,
        file_name: &U16CStr,
        _security_information: u32,
        _security_descriptor: PSECURITY_DESCRIPTOR,
        _buffer_length: u32,
        _info: &OperationInfo<'c, 'h, Self>,
        _context: &'c Self::Context,
    ) -> OperationResult<()> {
        read_only("set security", file_name)
    }
}

#[cfg(test)]
#[path = "dokan_fs_tests.rs"]
mod tests;
