//! An entry's meta file (`KEY.meta`): the data file's length and CRC-32,
//! and the seal that lets a later process trust the data file without
//! reading it again.
//!
//! Why a seal: the checksum is what keeps a damaged entry from being
//! served, but reading a whole entry before its first use costs a memory
//! pass per entry and process (1.5 ms for a 27 MB archive in the page
//! cache), and after a reboot a second disk read. Most of what the
//! checksum guards against leaves a trace in the data file's metadata or
//! happens only across a crash:
//!
//! - an edit, truncation or replacement through the file system changes
//!   its inode, length, mtime or ctime (ctime cannot be set by a user; on
//!   Linux ≥ 6.13 a change right after a `stat` gets a distinct,
//!   fine-grained ctime, and the seal is taken by a `stat`);
//! - a torn write needs a crash, and bit rot is found at the first use
//!   after each boot: the seal names the boot it was taken in, and an
//!   entry sealed in another boot is checksummed once, then sealed again.
//!
//! So an entry whose data file still matches its seal, in the boot that
//! sealed it, is served without a checksum pass; anything else is checked.
//! Where there is no boot id or no ctime (Windows), nothing is sealed and
//! every process checks each entry once, as before.

use std::fs;

const MAGIC: &[u8; 8] = b"KPFSMETA";
/// Bumped when the layout or the meaning of entries changes (2: the seal).
const VERSION: u32 = 2;
/// magic, version, length, crc, seal (boot id, dev, ino, mtime s/ns,
/// ctime s/ns), crc of all before it.
pub(super) const LEN: usize = 8 + 4 + 8 + 4 + 16 + 6 * 8 + 4;

/// What identifies one version of a data file in one boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Seal {
    boot: [u8; 16],
    stat: [u64; 6],
}

impl Seal {
    /// The seal of a data file with metadata `md`, in boot `boot`; `None`
    /// where the platform lacks either.
    pub(super) fn of(md: &fs::Metadata, boot: Option<[u8; 16]>) -> Option<Seal> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let stat = [md.dev(), md.ino(), md.mtime() as u64, md.mtime_nsec() as u64, md.ctime() as u64, md.ctime_nsec() as u64];
            boot.map(|boot| Seal { boot, stat })
        }
        #[cfg(not(unix))]
        {
            let _ = (md, boot);
            None
        }
    }
}

/// A decoded meta file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Meta {
    pub len: u64,
    pub crc: u32,
    pub seal: Option<Seal>,
}

impl Meta {
    pub(super) fn encode(&self) -> [u8; LEN] {
        let mut m = [0u8; LEN];
        m[..8].copy_from_slice(MAGIC);
        m[8..12].copy_from_slice(&VERSION.to_le_bytes());
        m[12..20].copy_from_slice(&self.len.to_le_bytes());
        m[20..24].copy_from_slice(&self.crc.to_le_bytes());
        // An all-zero seal stands for none (no boot id is all zeros).
        if let Some(s) = &self.seal {
            m[24..40].copy_from_slice(&s.boot);
            for (i, v) in s.stat.iter().enumerate() {
                m[40 + 8 * i..48 + 8 * i].copy_from_slice(&v.to_le_bytes());
            }
        }
        // A checksum of the meta itself: a torn meta is a miss, not a lie.
        let c = crc32fast::hash(&m[..LEN - 4]);
        m[LEN - 4..].copy_from_slice(&c.to_le_bytes());
        m
    }

    /// `None` for anything but a whole, intact meta of this version.
    pub(super) fn decode(m: &[u8]) -> Option<Meta> {
        if m.len() != LEN || &m[..8] != MAGIC || m[8..12] != VERSION.to_le_bytes() {
            return None;
        }
        let u64_at = |i: usize| m.get(i..i + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
        let u32_at = |i: usize| m.get(i..i + 4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes);
        if crc32fast::hash(&m[..LEN - 4]) != u32_at(LEN - 4)? {
            return None;
        }
        let boot: [u8; 16] = m.get(24..40)?.try_into().ok()?;
        let mut stat = [0u64; 6];
        for (i, v) in stat.iter_mut().enumerate() {
            *v = u64_at(40 + 8 * i)?;
        }
        let seal = (boot != [0; 16]).then_some(Seal { boot, stat });
        Some(Meta { len: u64_at(12)?, crc: u32_at(20)?, seal })
    }

    /// Whether the data file (metadata `md`) is the one this meta sealed,
    /// in this boot (`boot`): then it may be served unread.
    pub(super) fn seals(&self, md: &fs::Metadata, boot: Option<[u8; 16]>) -> bool {
        self.seal.is_some() && Seal::of(md, boot) == self.seal
    }
}

/// This boot's id (Linux: `/proc/sys/kernel/random/boot_id`, a UUID);
/// `None` where there is none, and then no entry is trusted unread.
pub(super) fn boot_id() -> Option<[u8; 16]> {
    let s = fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let hex: Vec<u8> = s.trim().bytes().filter(|b| *b != b'-').collect();
    if hex.len() != 32 {
        return None;
    }
    let mut id = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        id[i] = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    (id != [0; 16]).then_some(id)
}
