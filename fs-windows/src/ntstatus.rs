//! NTSTATUS values the adapter answers with, and the one place where view
//! errors become NTSTATUS ([`from_view_error`]).
//!
//! The constants are spelled out here (not taken from `winapi`) so the
//! mapping compiles and is unit-tested on every platform; on Windows a test
//! checks them against `winapi`'s.
//!
//! **Read-only status.** Every request that would modify the volume gets
//! [`READ_ONLY`] = `STATUS_MEDIA_WRITE_PROTECTED` (Win32
//! `ERROR_WRITE_PROTECT`, "The media is write protected"), the status a
//! write-protected NTFS volume and the Dokan driver itself (mounted with
//! `DOKAN_OPTION_WRITE_PROTECT`) use — never `STATUS_ACCESS_DENIED`, which
//! would suggest that other credentials could succeed.

use std::io;

use kpackfs_core::view;

pub type NtStatus = i32;

const fn nt(v: u32) -> NtStatus {
    v as i32
}

pub const STATUS_SUCCESS: NtStatus = 0;
pub const STATUS_BUFFER_OVERFLOW: NtStatus = nt(0x8000_0005);
pub const STATUS_NOT_IMPLEMENTED: NtStatus = nt(0xC000_0002);
pub const STATUS_INVALID_PARAMETER: NtStatus = nt(0xC000_000D);
pub const STATUS_INVALID_DEVICE_REQUEST: NtStatus = nt(0xC000_0010);
pub const STATUS_END_OF_FILE: NtStatus = nt(0xC000_0011);
pub const STATUS_ACCESS_DENIED: NtStatus = nt(0xC000_0022);
pub const STATUS_OBJECT_NAME_INVALID: NtStatus = nt(0xC000_0033);
pub const STATUS_OBJECT_NAME_NOT_FOUND: NtStatus = nt(0xC000_0034);
pub const STATUS_OBJECT_NAME_COLLISION: NtStatus = nt(0xC000_0035);
pub const STATUS_OBJECT_PATH_NOT_FOUND: NtStatus = nt(0xC000_003A);
pub const STATUS_SHARING_VIOLATION: NtStatus = nt(0xC000_0043);
pub const STATUS_FILE_INVALID: NtStatus = nt(0xC000_0098);
pub const STATUS_MEDIA_WRITE_PROTECTED: NtStatus = nt(0xC000_00A2);
pub const STATUS_FILE_IS_A_DIRECTORY: NtStatus = nt(0xC000_00BA);
pub const STATUS_NOT_A_DIRECTORY: NtStatus = nt(0xC000_0103);
pub const STATUS_IO_DEVICE_ERROR: NtStatus = nt(0xC000_0185);

/// The answer to every modifying request (see the module docs).
pub const READ_ONLY: NtStatus = STATUS_MEDIA_WRITE_PROTECTED;

/// Maps a view error to the NTSTATUS reported for the object it concerns
/// (the last component of a path; a missing *intermediate* component is
/// `STATUS_OBJECT_PATH_NOT_FOUND`, decided by the path walk, see
/// [`crate::walk`]).
///
/// | view error | NTSTATUS |
/// |---|---|
/// | `NotFound`, `NotSymlink`, `Refused` (a path crossing a source symlink, a special file, a data stream), source `NotFound` | `STATUS_OBJECT_NAME_NOT_FOUND` |
/// | `NotDir` | `STATUS_NOT_A_DIRECTORY` |
/// | `IsDir` | `STATUS_FILE_IS_A_DIRECTORY` |
/// | `InvalidName`, `NameTooLong` | `STATUS_OBJECT_NAME_INVALID` |
/// | `StaleInode`, `Changed` (the source file changed under an open handle) | `STATUS_FILE_INVALID` |
/// | source `PermissionDenied` | `STATUS_ACCESS_DENIED` |
/// | source sharing violation (Windows error 32) | `STATUS_SHARING_VIOLATION` |
/// | any other source I/O error, `Layout`, `Cache` | `STATUS_IO_DEVICE_ERROR` |
pub fn from_view_error(e: &view::Error) -> NtStatus {
    use view::Error as E;
    match e {
        E::NotFound | E::NotSymlink | E::Refused(_) => STATUS_OBJECT_NAME_NOT_FOUND,
        E::NotDir => STATUS_NOT_A_DIRECTORY,
        E::IsDir => STATUS_FILE_IS_A_DIRECTORY,
        E::InvalidName | E::NameTooLong => STATUS_OBJECT_NAME_INVALID,
        E::StaleInode(_) | E::Changed(_) => STATUS_FILE_INVALID,
        E::Layout(_) | E::Cache(_) => STATUS_IO_DEVICE_ERROR,
        E::Io(io) => from_io_error(io),
    }
}

/// Source I/O errors (see [`from_view_error`]).
pub fn from_io_error(e: &io::Error) -> NtStatus {
    // Windows error codes of the source file system that have a precise
    // NTSTATUS (on other platforms raw codes are errno values: not used).
    #[cfg(windows)]
    match e.raw_os_error() {
        Some(32) => return STATUS_SHARING_VIOLATION,    // ERROR_SHARING_VIOLATION
        Some(3) => return STATUS_OBJECT_PATH_NOT_FOUND, // ERROR_PATH_NOT_FOUND
        _ => {}
    }
    match e.kind() {
        io::ErrorKind::NotFound => STATUS_OBJECT_NAME_NOT_FOUND,
        io::ErrorKind::NotADirectory => STATUS_OBJECT_PATH_NOT_FOUND,
        io::ErrorKind::PermissionDenied => STATUS_ACCESS_DENIED,
        _ => STATUS_IO_DEVICE_ERROR,
    }
}

/// Turns "not found" into "path not found", for errors about an
/// intermediate component of a path.
pub fn as_path_error(s: NtStatus) -> NtStatus {
    match s {
        STATUS_OBJECT_NAME_NOT_FOUND | STATUS_NOT_A_DIRECTORY => STATUS_OBJECT_PATH_NOT_FOUND,
        s => s,
    }
}

/// Name of a status, for logs.
pub fn name(s: NtStatus) -> &'static str {
    match s {
        STATUS_SUCCESS => "STATUS_SUCCESS",
        STATUS_BUFFER_OVERFLOW => "STATUS_BUFFER_OVERFLOW",
        STATUS_NOT_IMPLEMENTED => "STATUS_NOT_IMPLEMENTED",
        STATUS_INVALID_PARAMETER => "STATUS_INVALID_PARAMETER",
        STATUS_INVALID_DEVICE_REQUEST => "STATUS_INVALID_DEVICE_REQUEST",
        STATUS_END_OF_FILE => "STATUS_END_OF_FILE",
        STATUS_ACCESS_DENIED => "STATUS_ACCESS_DENIED",
        STATUS_OBJECT_NAME_INVALID => "STATUS_OBJECT_NAME_INVALID",
        STATUS_OBJECT_NAME_NOT_FOUND => "STATUS_OBJECT_NAME_NOT_FOUND",
        STATUS_OBJECT_NAME_COLLISION => "STATUS_OBJECT_NAME_COLLISION",
        STATUS_OBJECT_PATH_NOT_FOUND => "STATUS_OBJECT_PATH_NOT_FOUND",
        STATUS_SHARING_VIOLATION => "STATUS_SHARING_VIOLATION",
        STATUS_FILE_INVALID => "STATUS_FILE_INVALID",
        STATUS_MEDIA_WRITE_PROTECTED => "STATUS_MEDIA_WRITE_PROTECTED",
        STATUS_FILE_IS_A_DIRECTORY => "STATUS_FILE_IS_A_DIRECTORY",
        STATUS_NOT_A_DIRECTORY => "STATUS_NOT_A_DIRECTORY",
        STATUS_IO_DEVICE_ERROR => "STATUS_IO_DEVICE_ERROR",
        _ => "NTSTATUS",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kpackfs_core::source::Refusal;
    use kpackfs_core::view::Error as E;

    #[test]
    fn view_errors_map_to_one_status_each() {
        assert_eq!(from_view_error(&E::NotFound), STATUS_OBJECT_NAME_NOT_FOUND);
        assert_eq!(from_view_error(&E::NotDir), STATUS_NOT_A_DIRECTORY);
        assert_eq!(from_view_error(&E::IsDir), STATUS_FILE_IS_A_DIRECTORY);
        assert_eq!(from_view_error(&E::NotSymlink), STATUS_OBJECT_NAME_NOT_FOUND);
        assert_eq!(from_view_error(&E::InvalidName), STATUS_OBJECT_NAME_INVALID);
        assert_eq!(from_view_error(&E::NameTooLong), STATUS_OBJECT_NAME_INVALID);
        assert_eq!(from_view_error(&E::StaleInode(7)), STATUS_FILE_INVALID);
        assert_eq!(from_view_error(&E::Changed("lib/x.so".into())), STATUS_FILE_INVALID);
        let io = |k| E::Io(io::Error::new(k, "x"));
        assert_eq!(from_view_error(&io(io::ErrorKind::NotFound)), STATUS_OBJECT_NAME_NOT_FOUND);
        for r in [Refusal::NotRegularFile, Refusal::CrossesSymlink, Refusal::DataStream, Refusal::OutsideSource("C:\\x".into())] {
            assert_eq!(from_view_error(&E::Refused(r)), STATUS_OBJECT_NAME_NOT_FOUND);
        }
        // A caller's own InvalidInput is no refused name.
        assert_eq!(from_view_error(&io(io::ErrorKind::InvalidInput)), STATUS_IO_DEVICE_ERROR);
        assert_eq!(from_view_error(&io(io::ErrorKind::PermissionDenied)), STATUS_ACCESS_DENIED);
        assert_eq!(from_view_error(&io(io::ErrorKind::UnexpectedEof)), STATUS_IO_DEVICE_ERROR);
        assert_eq!(from_view_error(&io(io::ErrorKind::Other)), STATUS_IO_DEVICE_ERROR);
    }

    #[test]
    fn path_errors() {
        assert_eq!(as_path_error(STATUS_OBJECT_NAME_NOT_FOUND), STATUS_OBJECT_PATH_NOT_FOUND);
        assert_eq!(as_path_error(STATUS_NOT_A_DIRECTORY), STATUS_OBJECT_PATH_NOT_FOUND);
        assert_eq!(as_path_error(STATUS_ACCESS_DENIED), STATUS_ACCESS_DENIED);
        assert_eq!(as_path_error(STATUS_IO_DEVICE_ERROR), STATUS_IO_DEVICE_ERROR);
    }

    #[test]
    fn statuses_are_errors_and_named() {
        for s in [
            STATUS_NOT_IMPLEMENTED,
            STATUS_INVALID_PARAMETER,
            STATUS_ACCESS_DENIED,
            STATUS_OBJECT_NAME_INVALID,
            STATUS_OBJECT_NAME_NOT_FOUND,
            STATUS_OBJECT_PATH_NOT_FOUND,
            STATUS_FILE_INVALID,
            READ_ONLY,
            STATUS_FILE_IS_A_DIRECTORY,
            STATUS_NOT_A_DIRECTORY,
            STATUS_IO_DEVICE_ERROR,
        ] {
            assert!(s < 0, "{s:#x} is not an error severity");
            assert_ne!(name(s), "NTSTATUS");
        }
    }

    /// The hand-written values equal the Windows SDK's (through winapi).
    #[cfg(windows)]
    #[test]
    fn constants_match_winapi() {
        use winapi::shared::ntstatus as w;
        assert_eq!(STATUS_BUFFER_OVERFLOW, w::STATUS_BUFFER_OVERFLOW);
        assert_eq!(STATUS_NOT_IMPLEMENTED, w::STATUS_NOT_IMPLEMENTED);
        assert_eq!(STATUS_INVALID_PARAMETER, w::STATUS_INVALID_PARAMETER);
        assert_eq!(STATUS_INVALID_DEVICE_REQUEST, w::STATUS_INVALID_DEVICE_REQUEST);
        assert_eq!(STATUS_END_OF_FILE, w::STATUS_END_OF_FILE);
        assert_eq!(STATUS_ACCESS_DENIED, w::STATUS_ACCESS_DENIED);
        assert_eq!(STATUS_OBJECT_NAME_INVALID, w::STATUS_OBJECT_NAME_INVALID);
        assert_eq!(STATUS_OBJECT_NAME_NOT_FOUND, w::STATUS_OBJECT_NAME_NOT_FOUND);
        assert_eq!(STATUS_OBJECT_NAME_COLLISION, w::STATUS_OBJECT_NAME_COLLISION);
        assert_eq!(STATUS_OBJECT_PATH_NOT_FOUND, w::STATUS_OBJECT_PATH_NOT_FOUND);
        assert_eq!(STATUS_SHARING_VIOLATION, w::STATUS_SHARING_VIOLATION);
        assert_eq!(STATUS_FILE_INVALID, w::STATUS_FILE_INVALID);
        assert_eq!(STATUS_MEDIA_WRITE_PROTECTED, w::STATUS_MEDIA_WRITE_PROTECTED);
        assert_eq!(STATUS_FILE_IS_A_DIRECTORY, w::STATUS_FILE_IS_A_DIRECTORY);
        assert_eq!(STATUS_NOT_A_DIRECTORY, w::STATUS_NOT_A_DIRECTORY);
        assert_eq!(STATUS_IO_DEVICE_ERROR, w::STATUS_IO_DEVICE_ERROR);
    }

    /// Windows-specific source errors keep their meaning.
    #[cfg(windows)]
    #[test]
    fn windows_source_errors() {
        assert_eq!(from_io_error(&io::Error::from_raw_os_error(32)), STATUS_SHARING_VIOLATION);
        assert_eq!(from_io_error(&io::Error::from_raw_os_error(2)), STATUS_OBJECT_NAME_NOT_FOUND);
        assert_eq!(from_io_error(&io::Error::from_raw_os_error(3)), STATUS_OBJECT_PATH_NOT_FOUND);
        assert_eq!(from_io_error(&io::Error::from_raw_os_error(5)), STATUS_ACCESS_DENIED);
    }
}
