//! The errno each view error is answered with: the Linux edge of the
//! error vocabulary (fs-windows' `ntstatus.rs` is the other). The view says
//! what happened; only this table knows the numbers.
//!
//! | view error | errno |
//! |---|---|
//! | `NotFound`, a source refusal (a symlink on the way, a special file), source `NotFound`, `ELOOP`, `EXDEV` | `ENOENT` |
//! | `NotDir`, source `ENOTDIR` | `ENOTDIR` |
//! | `IsDir` | `EISDIR` |
//! | `NotSymlink`, `InvalidName` | `EINVAL` |
//! | `NameTooLong` | `ENAMETOOLONG` |
//! | `StaleInode` | `ESTALE` |
//! | source `PermissionDenied` | `EACCES` |
//! | `Changed`, `Layout`, `Cache`, any other source error | `EIO` |

use std::io;

use fuser::Errno;
use kpackfs_core::view::Error;

/// The errno reported for `e`.
pub fn errno(e: &Error) -> Errno {
    Errno::from_i32(raw(e))
}

/// The errno value reported for `e`.
pub fn raw(e: &Error) -> i32 {
    match e {
        Error::NotFound | Error::Refused(_) => libc::ENOENT,
        Error::NotDir => libc::ENOTDIR,
        Error::IsDir => libc::EISDIR,
        Error::NotSymlink | Error::InvalidName => libc::EINVAL,
        Error::NameTooLong => libc::ENAMETOOLONG,
        Error::StaleInode(_) => libc::ESTALE,
        Error::Changed(_) | Error::Layout(_) | Error::Cache(_) => libc::EIO,
        Error::Io(e) => source_errno(e),
    }
}

/// Source I/O errors: the OS's own code where the reader must see it.
fn source_errno(e: &io::Error) -> i32 {
    match e.kind() {
        io::ErrorKind::NotFound => libc::ENOENT,
        io::ErrorKind::PermissionDenied => libc::EACCES,
        _ => match e.raw_os_error() {
            // A symlink met by the component walk (`O_NOFOLLOW`), or a
            // mount crossed: the name is not served.
            Some(libc::ELOOP) | Some(libc::EXDEV) => libc::ENOENT,
            Some(libc::ENOTDIR) => libc::ENOTDIR,
            _ => libc::EIO,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kpackfs_core::layout::LayoutError;
    use kpackfs_core::source::Refusal;

    /// A hand-written table (the module docs'), one row per view error.
    #[test]
    fn every_view_error_has_its_errno() {
        let io = |k| Error::Io(io::Error::new(k, "x"));
        let os = |n| Error::Io(io::Error::from_raw_os_error(n));
        let table: Vec<(Error, i32)> = vec![
            (Error::NotFound, libc::ENOENT),
            (Error::NotDir, libc::ENOTDIR),
            (Error::IsDir, libc::EISDIR),
            (Error::NotSymlink, libc::EINVAL),
            (Error::InvalidName, libc::EINVAL),
            (Error::NameTooLong, libc::ENAMETOOLONG),
            (Error::StaleInode(7), libc::ESTALE),
            (Error::Changed("lib/x.so".into()), libc::EIO),
            (Error::Cache(kpackfs_core::data_cache::CacheError::Unavailable("x".into())), libc::EIO),
            (Error::Layout(LayoutError::ShortDecode { at: 0 }), libc::EIO),
            (Error::Layout(LayoutError::decode(0, io::Error::other("x"))), libc::EIO),
            (Error::Refused(Refusal::NotRegularFile), libc::ENOENT),
            (Error::Refused(Refusal::CrossesSymlink), libc::ENOENT),
            (Error::Refused(Refusal::InvalidName), libc::ENOENT),
            (io(io::ErrorKind::NotFound), libc::ENOENT),
            (io(io::ErrorKind::PermissionDenied), libc::EACCES),
            (io(io::ErrorKind::UnexpectedEof), libc::EIO),
            // A caller's own InvalidInput is no refusal of a name.
            (io(io::ErrorKind::InvalidInput), libc::EIO),
            (os(libc::ENOENT), libc::ENOENT),
            (os(libc::EACCES), libc::EACCES),
            (os(libc::ELOOP), libc::ENOENT),
            (os(libc::EXDEV), libc::ENOENT),
            (os(libc::ENOTDIR), libc::ENOTDIR),
            // An OS EINVAL is the OS's failure, not a refused name.
            (os(libc::EINVAL), libc::EIO),
            (os(libc::EIO), libc::EIO),
        ];
        for (e, want) in table {
            assert_eq!(raw(&e), want, "{e:?}");
        }
    }
}
