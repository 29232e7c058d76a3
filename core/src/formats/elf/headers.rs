//! ELF64 little-endian headers as plain values. `object` supplies the
//! on-disk layouts (its `pod` structs) and constants; the planner works on
//! these copies and serializes them back through the same structs.

use object::elf::{FileHeader64, ProgramHeader64, Rela64, SectionHeader64, Sym64};
use object::elf::{ProgramFlags, ProgramType, SectionFlags, SectionType};
use object::pod;
use object::LittleEndian as LE;

pub const EHDR_SIZE: u64 = 64;
pub const PHDR_SIZE: u64 = 56;
pub const SHDR_SIZE: u64 = 64;
pub const RELA_SIZE: u64 = 24;
pub const SYM_SIZE: u64 = 24;

pub const PT_LOAD: u32 = object::elf::PT_LOAD.0;
pub const PT_PHDR: u32 = object::elf::PT_PHDR.0;
pub const PT_INTERP: u32 = object::elf::PT_INTERP.0;
pub const PF_R: u32 = object::elf::PF_R.0;
pub const SHT_NULL: u32 = object::elf::SHT_NULL.0;
pub const SHT_PROGBITS: u32 = object::elf::SHT_PROGBITS.0;
pub const SHT_NOBITS: u32 = object::elf::SHT_NOBITS.0;
pub const SHT_RELA: u32 = object::elf::SHT_RELA.0;
pub const SHT_REL: u32 = object::elf::SHT_REL.0;
pub const SHT_RELR: u32 = object::elf::SHT_RELR.0;
pub const SHF_ALLOC: u64 = object::elf::SHF_ALLOC.0;
pub const ET_EXEC: u16 = object::elf::ET_EXEC.0;
pub const ET_DYN: u16 = object::elf::ET_DYN.0;
pub const EM_X86_64: u16 = object::elf::EM_X86_64.0;
pub const EM_AMDGPU: u16 = object::elf::EM_AMDGPU.0;
/// x86-64 relocation numbers (the only machine the reference handles).
pub const R_X86_64_64: u32 = 1;
pub const R_X86_64_RELATIVE: u32 = 8;

/// The fields of the ELF header the transform reads or rewrites; the other
/// bytes are carried verbatim in `raw`.
#[derive(Debug, Clone)]
pub struct Ehdr {
    pub raw: [u8; 64],
    pub e_type: u16,
    pub e_machine: u16,
    pub phoff: u64,
    pub shoff: u64,
    pub phentsize: u16,
    pub phnum: u16,
    pub shentsize: u16,
    pub shnum: u16,
    pub shstrndx: u16,
}

impl Ehdr {
    /// `None` unless this is an ELF64 little-endian header.
    pub fn parse(b: &[u8]) -> Option<Ehdr> {
        let (h, _) = pod::from_bytes::<FileHeader64<LE>>(b).ok()?;
        if h.e_ident.magic != object::elf::ELFMAG || h.e_ident.class != object::elf::ELFCLASS64 || h.e_ident.data != object::elf::ELFDATA2LSB {
            return None;
        }
        let mut raw = [0u8; 64];
        raw.copy_from_slice(b.get(..64)?);
        Some(Ehdr {
            raw,
            e_type: h.e_type.get(LE).0,
            e_machine: h.e_machine.get(LE).0,
            phoff: h.e_phoff.get(LE),
            shoff: h.e_shoff.get(LE),
            phentsize: h.e_phentsize.get(LE),
            phnum: h.e_phnum.get(LE),
            shentsize: h.e_shentsize.get(LE),
            shnum: h.e_shnum.get(LE),
            shstrndx: h.e_shstrndx.get(LE).0,
        })
    }

    pub fn to_bytes(&self) -> [u8; 64] {
        let mut out = self.raw;
        if let Ok((h, _)) = pod::from_bytes_mut::<FileHeader64<LE>>(&mut out) {
            h.e_phoff.set(LE, self.phoff);
            h.e_shoff.set(LE, self.shoff);
            h.e_phnum.set(LE, self.phnum);
            h.e_shnum.set(LE, self.shnum);
        }
        out
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Phdr {
    pub p_type: u32,
    pub flags: u32,
    pub offset: u64,
    pub vaddr: u64,
    pub paddr: u64,
    pub filesz: u64,
    pub memsz: u64,
    pub align: u64,
}

impl Phdr {
    pub fn parse(b: &[u8]) -> Option<Phdr> {
        let (p, _) = pod::from_bytes::<ProgramHeader64<LE>>(b).ok()?;
        Some(Phdr {
            p_type: p.p_type.get(LE).0,
            flags: p.p_flags.get(LE).0,
            offset: p.p_offset.get(LE),
            vaddr: p.p_vaddr.get(LE),
            paddr: p.p_paddr.get(LE),
            filesz: p.p_filesz.get(LE),
            memsz: p.p_memsz.get(LE),
            align: p.p_align.get(LE),
        })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        let mut b = [0u8; PHDR_SIZE as usize];
        let Ok((p, _)) = pod::from_bytes_mut::<ProgramHeader64<LE>>(&mut b) else { return };
        p.p_type.set(LE, ProgramType(self.p_type));
        p.p_flags.set(LE, ProgramFlags(self.flags));
        p.p_offset.set(LE, self.offset);
        p.p_vaddr.set(LE, self.vaddr);
        p.p_paddr.set(LE, self.paddr);
        p.p_filesz.set(LE, self.filesz);
        p.p_memsz.set(LE, self.memsz);
        p.p_align.set(LE, self.align);
        out.extend_from_slice(&b);
    }

    pub fn is_load(&self) -> bool {
        self.p_type == PT_LOAD
    }

    /// Whether the segment's memory image contains `addr`.
    pub fn contains_vaddr(&self, addr: u64) -> bool {
        addr >= self.vaddr && addr - self.vaddr < self.memsz
    }

    pub fn vend(&self) -> u64 {
        self.vaddr.saturating_add(self.memsz)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Shdr {
    pub name: u32,
    pub sh_type: u32,
    pub flags: u64,
    pub addr: u64,
    pub offset: u64,
    pub size: u64,
    pub link: u32,
    pub info: u32,
    pub addralign: u64,
    pub entsize: u64,
}

impl Shdr {
    pub fn parse(b: &[u8]) -> Option<Shdr> {
        let (s, _) = pod::from_bytes::<SectionHeader64<LE>>(b).ok()?;
        Some(Shdr {
            name: s.sh_name.get(LE),
            sh_type: s.sh_type.get(LE).0,
            flags: s.sh_flags.get(LE).0,
            addr: s.sh_addr.get(LE),
            offset: s.sh_offset.get(LE),
            size: s.sh_size.get(LE),
            link: s.sh_link.get(LE),
            info: s.sh_info.get(LE),
            addralign: s.sh_addralign.get(LE),
            entsize: s.sh_entsize.get(LE),
        })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        let mut b = [0u8; SHDR_SIZE as usize];
        let Ok((s, _)) = pod::from_bytes_mut::<SectionHeader64<LE>>(&mut b) else { return };
        s.sh_name.set(LE, self.name);
        s.sh_type.set(LE, SectionType(self.sh_type));
        s.sh_flags.set(LE, SectionFlags(self.flags));
        s.sh_addr.set(LE, self.addr);
        s.sh_offset.set(LE, self.offset);
        s.sh_size.set(LE, self.size);
        s.sh_link.set(LE, self.link);
        s.sh_info.set(LE, self.info);
        s.sh_addralign.set(LE, self.addralign);
        s.sh_entsize.set(LE, self.entsize);
        out.extend_from_slice(&b);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rela {
    pub offset: u64,
    pub info: u64,
    pub addend: i64,
}

impl Rela {
    pub fn parse(b: &[u8]) -> Option<Rela> {
        let (r, _) = pod::from_bytes::<Rela64<LE>>(b).ok()?;
        Some(Rela { offset: r.r_offset.get(LE), info: r.r_info.get(LE), addend: r.r_addend.get(LE) })
    }

    pub fn to_bytes(self) -> Vec<u8> {
        let mut b = vec![0u8; RELA_SIZE as usize];
        if let Ok((r, _)) = pod::from_bytes_mut::<Rela64<LE>>(&mut b) {
            r.r_offset.set(LE, self.offset);
            r.r_info.set(LE, self.info);
            r.r_addend.set(LE, self.addend);
        }
        b
    }

    pub fn r_type(&self) -> u32 {
        self.info as u32
    }

    pub fn r_sym(&self) -> u32 {
        (self.info >> 32) as u32
    }
}

/// The value and section index of a symbol table entry.
pub fn sym_value(b: &[u8]) -> Option<(u64, u16)> {
    let (s, _) = pod::from_bytes::<Sym64<LE>>(b).ok()?;
    Some((s.st_value.get(LE), s.st_shndx.get(LE).0))
}
