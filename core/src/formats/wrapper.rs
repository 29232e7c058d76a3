//! The 24-byte HIP fat binary wrapper (`__CudaFatBinaryWrapper`, FORMATS.md
//! §2): magic, version, pointer to the device code (or, once kpack'd, to
//! the marker), and `reserved1` whose low half carries the wrapper index.

use crate::io::LeBytes;

pub const WRAPPER_SIZE: u64 = 24;
/// `HIPF` as a little-endian u32 (bytes `46 50 49 48`).
pub const MAGIC_HIPF: u32 = 0x4849_5046;
/// `HIPK` as a little-endian u32 (bytes `48 49 50 4B`).
pub const MAGIC_HIPK: u32 = 0x4B50_4948;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrapperKind {
    Fat,
    Kpacked,
    Other(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wrapper {
    pub magic: u32,
    pub version: u32,
    pub binary: u64,
    pub reserved1: u64,
}

impl Wrapper {
    pub fn parse(b: &[u8]) -> Option<Wrapper> {
        Some(Wrapper { magic: b.u32_at(0)?, version: b.u32_at(4)?, binary: b.u64_at(8)?, reserved1: b.u64_at(16)? })
    }

    pub fn kind(&self) -> WrapperKind {
        match self.magic {
            MAGIC_HIPF => WrapperKind::Fat,
            MAGIC_HIPK => WrapperKind::Kpacked,
            m => WrapperKind::Other(m),
        }
    }

    /// The code-object index the runtime passes to the loader.
    pub fn co_index(&self) -> u32 {
        self.reserved1 as u32
    }

    pub fn to_bytes(&self) -> [u8; 24] {
        let mut b = [0u8; 24];
        b[0..4].copy_from_slice(&self.magic.to_le_bytes());
        b[4..8].copy_from_slice(&self.version.to_le_bytes());
        b[8..16].copy_from_slice(&self.binary.to_le_bytes());
        b[16..24].copy_from_slice(&self.reserved1.to_le_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn magic_bytes() {
        assert_eq!(&MAGIC_HIPF.to_le_bytes(), b"FPIH");
        assert_eq!(&MAGIC_HIPK.to_le_bytes(), b"HIPK");
        let w = Wrapper { magic: MAGIC_HIPK, version: 1, binary: 0x9000, reserved1: 3 };
        assert_eq!(Wrapper::parse(&w.to_bytes()), Some(w));
        assert_eq!(w.co_index(), 3);
        assert_eq!(Wrapper::parse(&[0u8; 23]), None);
    }
}
