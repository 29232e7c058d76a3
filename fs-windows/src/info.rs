//! How view attributes look to Windows: file attributes, times, volume
//! information.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kpackfs_core::source::Time;
use kpackfs_core::view::NodeType;

pub const FILE_ATTRIBUTE_READONLY: u32 = 0x0000_0001;
pub const FILE_ATTRIBUTE_DIRECTORY: u32 = 0x0000_0010;

pub const FILE_CASE_SENSITIVE_SEARCH: u32 = 0x0000_0001;
pub const FILE_CASE_PRESERVED_NAMES: u32 = 0x0000_0002;
pub const FILE_UNICODE_ON_DISK: u32 = 0x0000_0004;
pub const FILE_READ_ONLY_VOLUME: u32 = 0x0008_0000;

/// Seconds from 1601-01-01 (the FILETIME epoch) to 1970-01-01.
const FILETIME_EPOCH_OFFSET: u64 = 11_644_473_600;

/// File attributes: directories are `FILE_ATTRIBUTE_DIRECTORY`; files are
/// `FILE_ATTRIBUTE_READONLY`, like files on a CD or a read-only volume
/// (directories do not get it: Explorer reads it as "customized folder").
/// Symlinks never reach here: the adapter presents what they resolve to.
pub fn attributes(kind: NodeType) -> u32 {
    match kind {
        NodeType::Dir => FILE_ATTRIBUTE_DIRECTORY,
        NodeType::File | NodeType::Symlink => FILE_ATTRIBUTE_READONLY,
    }
}

/// A view time as `SystemTime`, clamped to what a FILETIME can hold
/// (not before 1601).
pub fn system_time(t: Time) -> SystemTime {
    let nanos = Duration::from_nanos(u64::from(t.nsec.min(999_999_999)));
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::from_secs(t.sec as u64) + nanos
    } else {
        let back = t.sec.unsigned_abs().min(FILETIME_EPOCH_OFFSET);
        UNIX_EPOCH - Duration::from_secs(back) + if back == FILETIME_EPOCH_OFFSET { Duration::ZERO } else { nanos }
    }
}

/// File system flags: a read-only, case-preserving Unicode volume;
/// case-sensitive search only with `--case-sensitive`.
pub fn volume_flags(case_sensitive: bool) -> u32 {
    let mut f = FILE_CASE_PRESERVED_NAMES | FILE_UNICODE_ON_DISK | FILE_READ_ONLY_VOLUME;
    if case_sensitive {
        f |= FILE_CASE_SENSITIVE_SEARCH;
    }
    f
}

/// Volume label: `kpackfs <selection>`, cut to the 32 characters a label
/// may have.
pub fn volume_label(selection: &str) -> String {
    let mut s = format!("kpackfs {selection}");
    if s.chars().count() > 32 {
        s = s.chars().take(31).collect::<String>() + "…";
    }
    s
}

/// A volume serial number that is stable for a source (FNV-1a of its path).
pub fn volume_serial(source: &Path) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in source.to_string_lossy().bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_and_flags() {
        assert_eq!(attributes(NodeType::Dir), FILE_ATTRIBUTE_DIRECTORY);
        assert_eq!(attributes(NodeType::File), FILE_ATTRIBUTE_READONLY);
        let f = volume_flags(false);
        assert!(f & FILE_READ_ONLY_VOLUME != 0 && f & FILE_CASE_PRESERVED_NAMES != 0);
        assert_eq!(f & FILE_CASE_SENSITIVE_SEARCH, 0);
        assert_ne!(volume_flags(true) & FILE_CASE_SENSITIVE_SEARCH, 0);
    }

    #[test]
    fn times() {
        assert_eq!(system_time(Time { sec: 0, nsec: 0 }), UNIX_EPOCH);
        assert_eq!(system_time(Time { sec: 1_700_000_000, nsec: 5 }), UNIX_EPOCH + Duration::new(1_700_000_000, 5));
        assert_eq!(system_time(Time { sec: -10, nsec: 0 }), UNIX_EPOCH - Duration::from_secs(10));
        // Before 1601: clamped to the FILETIME epoch.
        let min = UNIX_EPOCH - Duration::from_secs(FILETIME_EPOCH_OFFSET);
        assert_eq!(system_time(Time { sec: i64::MIN, nsec: 999 }), min);
        assert_eq!(system_time(Time { sec: -(FILETIME_EPOCH_OFFSET as i64) - 1, nsec: 0 }), min);
    }

    #[test]
    fn labels() {
        assert_eq!(volume_label("gfx90a:xnack-"), "kpackfs gfx90a:xnack-");
        let long = volume_label("gfx90a,gfx942,gfx1030,gfx1100,gfx1201");
        assert_eq!(long.chars().count(), 32);
        assert!(long.starts_with("kpackfs gfx90a,gfx942"));
        assert_eq!(volume_serial(Path::new("C:\\rocm")), volume_serial(Path::new("C:\\rocm")));
        assert_ne!(volume_serial(Path::new("C:\\rocm")), volume_serial(Path::new("C:\\rocm2")));
    }

    #[cfg(windows)]
    #[test]
    fn constants_match_winapi() {
        use winapi::um::winnt as w;
        assert_eq!(FILE_ATTRIBUTE_READONLY, w::FILE_ATTRIBUTE_READONLY);
        assert_eq!(FILE_ATTRIBUTE_DIRECTORY, w::FILE_ATTRIBUTE_DIRECTORY);
        assert_eq!(FILE_CASE_SENSITIVE_SEARCH, w::FILE_CASE_SENSITIVE_SEARCH);
        assert_eq!(FILE_CASE_PRESERVED_NAMES, w::FILE_CASE_PRESERVED_NAMES);
        assert_eq!(FILE_UNICODE_ON_DISK, w::FILE_UNICODE_ON_DISK);
        assert_eq!(FILE_READ_ONLY_VOLUME, w::FILE_READ_ONLY_VOLUME);
    }
}
