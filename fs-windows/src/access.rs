//! What `ZwCreateFile` requests the read-only view grants.
//!
//! The checks mirror what the Dokan driver does for a volume mounted with
//! `DOKAN_OPTION_WRITE_PROTECT` (which `kpackfs mount` always sets), so the
//! answer is the same whether the driver or the adapter refuses:
//!
//! 1. before looking anything up ([`check_request`]): a disposition that
//!    creates or overwrites (`FILE_SUPERSEDE`, `FILE_CREATE`,
//!    `FILE_OVERWRITE`, `FILE_OVERWRITE_IF`) or `FILE_DELETE_ON_CLOSE` →
//!    `STATUS_MEDIA_WRITE_PROTECTED`; an unknown disposition →
//!    `STATUS_INVALID_PARAMETER`;
//! 2. the path is resolved; a missing object ([`missing`]) is "not found"
//!    for `FILE_OPEN` and write-protected for `FILE_OPEN_IF` (it would be
//!    created);
//! 3. on an existing object ([`check_existing`]): any access right that
//!    could modify it (write/append data, write EA or attributes, delete,
//!    delete child, write DAC/owner, `GENERIC_WRITE`, `GENERIC_ALL`) →
//!    `STATUS_MEDIA_WRITE_PROTECTED`, as a write-protected NTFS volume
//!    answers `CreateFile(GENERIC_WRITE)`; then `FILE_DIRECTORY_FILE` on a
//!    file → `STATUS_NOT_A_DIRECTORY`, `FILE_NON_DIRECTORY_FILE` on a
//!    directory → `STATUS_FILE_IS_A_DIRECTORY`.
//!
//! Reading rights (`FILE_READ_DATA`, `FILE_EXECUTE`, attributes, EA,
//! `READ_CONTROL`, `SYNCHRONIZE`, `MAXIMUM_ALLOWED`) are granted.

use crate::ntstatus::*;

// Access rights (winnt.h).
pub const FILE_READ_DATA: u32 = 0x0001;
pub const FILE_WRITE_DATA: u32 = 0x0002;
pub const FILE_APPEND_DATA: u32 = 0x0004;
pub const FILE_READ_EA: u32 = 0x0008;
pub const FILE_WRITE_EA: u32 = 0x0010;
pub const FILE_EXECUTE: u32 = 0x0020;
pub const FILE_DELETE_CHILD: u32 = 0x0040;
pub const FILE_READ_ATTRIBUTES: u32 = 0x0080;
pub const FILE_WRITE_ATTRIBUTES: u32 = 0x0100;
pub const DELETE: u32 = 0x0001_0000;
pub const READ_CONTROL: u32 = 0x0002_0000;
pub const WRITE_DAC: u32 = 0x0004_0000;
pub const WRITE_OWNER: u32 = 0x0008_0000;
pub const SYNCHRONIZE: u32 = 0x0010_0000;
pub const MAXIMUM_ALLOWED: u32 = 0x0200_0000;
pub const GENERIC_ALL: u32 = 0x1000_0000;
pub const GENERIC_EXECUTE: u32 = 0x2000_0000;
pub const GENERIC_WRITE: u32 = 0x4000_0000;
pub const GENERIC_READ: u32 = 0x8000_0000;

/// Rights that could modify the object or its directory.
pub const WRITE_RIGHTS: u32 = FILE_WRITE_DATA
    | FILE_APPEND_DATA
    | FILE_WRITE_EA
    | FILE_DELETE_CHILD
    | FILE_WRITE_ATTRIBUTES
    | DELETE
    | WRITE_DAC
    | WRITE_OWNER
    | GENERIC_WRITE
    | GENERIC_ALL;

/// Rights that read file data (the handle's file is opened eagerly for
/// these, so errors surface at `CreateFile`).
pub const DATA_RIGHTS: u32 = FILE_READ_DATA | FILE_EXECUTE | GENERIC_READ | GENERIC_EXECUTE | MAXIMUM_ALLOWED;

// Create dispositions (wdm.h).
pub const FILE_SUPERSEDE: u32 = 0;
pub const FILE_OPEN: u32 = 1;
pub const FILE_CREATE: u32 = 2;
pub const FILE_OPEN_IF: u32 = 3;
pub const FILE_OVERWRITE: u32 = 4;
pub const FILE_OVERWRITE_IF: u32 = 5;

// Create options (wdm.h).
pub const FILE_DIRECTORY_FILE: u32 = 0x0000_0001;
pub const FILE_NON_DIRECTORY_FILE: u32 = 0x0000_0040;
pub const FILE_DELETE_ON_CLOSE: u32 = 0x0000_1000;

/// Step 1: refusals that need no lookup.
pub fn check_request(disposition: u32, options: u32) -> Result<(), NtStatus> {
    match disposition {
        FILE_OPEN | FILE_OPEN_IF => {}
        FILE_SUPERSEDE | FILE_CREATE | FILE_OVERWRITE | FILE_OVERWRITE_IF => return Err(READ_ONLY),
        _ => return Err(STATUS_INVALID_PARAMETER),
    }
    if options & FILE_DELETE_ON_CLOSE != 0 {
        return Err(READ_ONLY);
    }
    Ok(())
}

/// Step 2: the answer when the object does not exist (`status` is the
/// walk's "name not found" or "path not found").
pub fn missing(disposition: u32, status: NtStatus) -> NtStatus {
    if disposition == FILE_OPEN_IF && status == STATUS_OBJECT_NAME_NOT_FOUND {
        // The parent exists: this would create the file.
        READ_ONLY
    } else {
        status
    }
}

/// Step 3: checks on an existing object.
pub fn check_existing(desired_access: u32, options: u32, is_dir: bool) -> Result<(), NtStatus> {
    if desired_access & WRITE_RIGHTS != 0 {
        return Err(READ_ONLY);
    }
    if options & FILE_DIRECTORY_FILE != 0 && !is_dir {
        return Err(STATUS_NOT_A_DIRECTORY);
    }
    if options & FILE_NON_DIRECTORY_FILE != 0 && is_dir {
        return Err(STATUS_FILE_IS_A_DIRECTORY);
    }
    Ok(())
}

/// Whether the handle will read file data.
pub fn reads_data(desired_access: u32) -> bool {
    desired_access & DATA_RIGHTS != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modifying_dispositions_are_write_protected() {
        for d in [FILE_SUPERSEDE, FILE_CREATE, FILE_OVERWRITE, FILE_OVERWRITE_IF] {
            assert_eq!(check_request(d, 0), Err(READ_ONLY), "disposition {d}");
        }
        assert_eq!(check_request(FILE_OPEN, 0), Ok(()));
        assert_eq!(check_request(FILE_OPEN_IF, 0), Ok(()));
        assert_eq!(check_request(FILE_OPEN, FILE_DELETE_ON_CLOSE), Err(READ_ONLY));
        assert_eq!(check_request(6, 0), Err(STATUS_INVALID_PARAMETER));
        assert_eq!(check_request(u32::MAX, 0), Err(STATUS_INVALID_PARAMETER));
    }

    #[test]
    fn missing_objects() {
        assert_eq!(missing(FILE_OPEN, STATUS_OBJECT_NAME_NOT_FOUND), STATUS_OBJECT_NAME_NOT_FOUND);
        assert_eq!(missing(FILE_OPEN, STATUS_OBJECT_PATH_NOT_FOUND), STATUS_OBJECT_PATH_NOT_FOUND);
        assert_eq!(missing(FILE_OPEN_IF, STATUS_OBJECT_NAME_NOT_FOUND), READ_ONLY);
        assert_eq!(missing(FILE_OPEN_IF, STATUS_OBJECT_PATH_NOT_FOUND), STATUS_OBJECT_PATH_NOT_FOUND);
        assert_eq!(missing(FILE_OPEN_IF, STATUS_OBJECT_NAME_INVALID), STATUS_OBJECT_NAME_INVALID);
    }

    #[test]
    fn write_rights_are_write_protected() {
        for a in [
            FILE_WRITE_DATA,
            FILE_APPEND_DATA,
            FILE_WRITE_EA,
            FILE_WRITE_ATTRIBUTES,
            FILE_DELETE_CHILD,
            DELETE,
            WRITE_DAC,
            WRITE_OWNER,
            GENERIC_WRITE,
            GENERIC_ALL,
            GENERIC_READ | GENERIC_WRITE,
            // FILE_GENERIC_WRITE as the I/O manager maps GENERIC_WRITE
            0x0012_0116,
            // FILE_ALL_ACCESS
            0x001F_01FF,
        ] {
            assert_eq!(check_existing(a, 0, false), Err(READ_ONLY), "access {a:#x}");
            assert_eq!(check_existing(a, 0, true), Err(READ_ONLY), "access {a:#x} on a directory");
        }
    }

    #[test]
    fn read_rights_are_granted() {
        // FILE_GENERIC_READ, FILE_GENERIC_EXECUTE, what LoadLibrary and
        // directory listings ask for, MAXIMUM_ALLOWED.
        for a in [
            0x0012_0089,
            0x0012_00A0,
            FILE_READ_DATA | FILE_EXECUTE | SYNCHRONIZE,
            FILE_READ_ATTRIBUTES,
            FILE_READ_DATA | SYNCHRONIZE,
            READ_CONTROL | FILE_READ_EA,
            MAXIMUM_ALLOWED,
            GENERIC_READ | GENERIC_EXECUTE,
            0,
        ] {
            assert_eq!(check_existing(a, 0, false), Ok(()), "access {a:#x}");
        }
        assert!(reads_data(GENERIC_READ) && reads_data(FILE_EXECUTE) && reads_data(MAXIMUM_ALLOWED));
        assert!(!reads_data(FILE_READ_ATTRIBUTES | SYNCHRONIZE));
    }

    #[test]
    fn directory_options() {
        assert_eq!(check_existing(FILE_READ_DATA, FILE_DIRECTORY_FILE, false), Err(STATUS_NOT_A_DIRECTORY));
        assert_eq!(check_existing(FILE_READ_DATA, FILE_DIRECTORY_FILE, true), Ok(()));
        assert_eq!(check_existing(FILE_READ_DATA, FILE_NON_DIRECTORY_FILE, true), Err(STATUS_FILE_IS_A_DIRECTORY));
        assert_eq!(check_existing(FILE_READ_DATA, FILE_NON_DIRECTORY_FILE, false), Ok(()));
        // Write access is reported before the type mismatch.
        assert_eq!(check_existing(FILE_WRITE_DATA, FILE_DIRECTORY_FILE, false), Err(READ_ONLY));
    }

    /// The hand-written values equal the Windows SDK's (through winapi).
    #[cfg(windows)]
    #[test]
    fn constants_match_winapi() {
        use winapi::um::winnt as w;
        assert_eq!(FILE_READ_DATA, w::FILE_READ_DATA);
        assert_eq!(FILE_WRITE_DATA, w::FILE_WRITE_DATA);
        assert_eq!(FILE_APPEND_DATA, w::FILE_APPEND_DATA);
        assert_eq!(FILE_READ_EA, w::FILE_READ_EA);
        assert_eq!(FILE_WRITE_EA, w::FILE_WRITE_EA);
        assert_eq!(FILE_EXECUTE, w::FILE_EXECUTE);
        assert_eq!(FILE_DELETE_CHILD, w::FILE_DELETE_CHILD);
        assert_eq!(FILE_READ_ATTRIBUTES, w::FILE_READ_ATTRIBUTES);
        assert_eq!(FILE_WRITE_ATTRIBUTES, w::FILE_WRITE_ATTRIBUTES);
        assert_eq!(DELETE, w::DELETE);
        assert_eq!(READ_CONTROL, w::READ_CONTROL);
        assert_eq!(WRITE_DAC, w::WRITE_DAC);
        assert_eq!(WRITE_OWNER, w::WRITE_OWNER);
        assert_eq!(SYNCHRONIZE, w::SYNCHRONIZE);
        assert_eq!(MAXIMUM_ALLOWED, w::MAXIMUM_ALLOWED);
        assert_eq!(GENERIC_ALL, w::GENERIC_ALL);
        assert_eq!(GENERIC_EXECUTE, w::GENERIC_EXECUTE);
        assert_eq!(GENERIC_WRITE, w::GENERIC_WRITE);
        assert_eq!(GENERIC_READ, w::GENERIC_READ);
        assert_eq!(0x0012_0116, w::FILE_GENERIC_WRITE);
        assert_eq!(0x0012_0089, w::FILE_GENERIC_READ);
        assert_eq!(0x0012_00A0, w::FILE_GENERIC_EXECUTE);
        assert_eq!(0x001F_01FF, w::FILE_ALL_ACCESS);
        use dokan_sys::win32 as d;
        assert_eq!(FILE_SUPERSEDE, d::FILE_SUPERSEDE);
        assert_eq!(FILE_OPEN, d::FILE_OPEN);
        assert_eq!(FILE_CREATE, d::FILE_CREATE);
        assert_eq!(FILE_OPEN_IF, d::FILE_OPEN_IF);
        assert_eq!(FILE_OVERWRITE, d::FILE_OVERWRITE);
        assert_eq!(FILE_OVERWRITE_IF, d::FILE_OVERWRITE_IF);
        assert_eq!(FILE_DIRECTORY_FILE, d::FILE_DIRECTORY_FILE);
        assert_eq!(FILE_NON_DIRECTORY_FILE, d::FILE_NON_DIRECTORY_FILE);
        assert_eq!(FILE_DELETE_ON_CLOSE, d::FILE_DELETE_ON_CLOSE);
    }
}
