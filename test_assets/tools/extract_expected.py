#!/usr/bin/env python3
"""Oracle extraction for kpackfs test assets (standard library only).

Usage: extract_expected.py ELF OUT_DIR WORK_DIR

For one ELF file this writes
  OUT_DIR/layout.tsv   key<TAB>value lines (values are decimal integers,
                       except wrapper_reloc_N which is a word)
  OUT_DIR/index.tsv    bundle_index, entry_id, arch, size, sha256, relative file
  OUT_DIR/<N>/<arch>.co  code objects unbundled by clang-offload-bundler
Intermediate files (section dump, one file per bundle) go to WORK_DIR.

The section is dumped with `objcopy -O binary --only-section=.hip_fatbin`,
split into bundles (a bundle starts at a 4096-aligned offset with the bundle
magic and ends at max(offset+size) over its descriptor table), and each
non-host entry is unbundled with `clang-offload-bundler --unbundle`.
Every step is cross-checked against this script's own parse of the bytes.

Environment: BUNDLER (path of clang-offload-bundler), OBJCOPY.
"""
import hashlib
import os
import struct
import subprocess
import sys

MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
CCOB = b"CCOB"
PAGE = 0x1000
SHT_RELA, SHT_DYNSYM, SHT_NOBITS, SHT_RELR = 4, 11, 8, 19
R_X86_64_64, R_X86_64_RELATIVE = 1, 8


def die(msg):
    sys.stderr.write("extract_expected.py: error: %s\n" % msg)
    sys.exit(1)


class Elf:
    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            self.data = f.read()
        d = self.data
        if d[:4] != b"\x7fELF" or d[4] != 2 or d[5] != 1:
            die("%s: not an ELF64 little-endian file" % path)
        (self.e_type, self.e_machine) = struct.unpack_from("<HH", d, 16)
        (self.e_phoff, self.e_shoff) = struct.unpack_from("<QQ", d, 32)
        (self.e_phentsize, self.e_phnum, self.e_shentsize, self.e_shnum,
         self.e_shstrndx) = struct.unpack_from("<HHHHH", d, 54)
        self.sections = []
        for i in range(self.e_shnum):
            off = self.e_shoff + i * self.e_shentsize
            (name, typ, flags, addr, offset, size, link, info, align,
             entsize) = struct.unpack_from("<IIQQQQIIQQ", d, off)
            self.sections.append(dict(name_off=name, type=typ, flags=flags,
                                      addr=addr, offset=offset, size=size,
                                      link=link, info=info, align=align,
                                      entsize=entsize, index=i))
        shstr = self.sections[self.e_shstrndx]
        for s in self.sections:
            start = shstr["offset"] + s["name_off"]
            s["name"] = d[start:d.index(b"\0", start)].decode()

    def section(self, name):
        for s in self.sections:
            if s["name"] == name:
                return s
        return None

    def bytes_of(self, s):
        return self.data[s["offset"]:s["offset"] + s["size"]]

    def vaddr_to_off(self, addr):
        for i in range(self.e_phnum):
            (p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz,
             p_memsz, _align) = struct.unpack_from(
                 "<IIQQQQQQ", self.data, self.e_phoff + i * self.e_phentsize)
            if p_type == 1 and p_vaddr <= addr < p_vaddr + p_filesz:
                return p_offset + addr - p_vaddr
        die("%s: address 0x%x not in any PT_LOAD" % (self.path, addr))

    def symbol(self, symtab, idx):
        d = self.data
        ent = symtab["entsize"] or 24
        name, _info, _other, _shndx, value, _size = struct.unpack_from(
            "<IBBHQQ", d, symtab["offset"] + idx * ent)
        strtab = self.sections[symtab["link"]]
        start = strtab["offset"] + name
        return d[start:d.index(b"\0", start)].decode(), value

    def rela_entries(self):
        """(section name, r_offset, type, sym name, sym value, addend)."""
        out = []
        for s in self.sections:
            if s["type"] != SHT_RELA:
                continue
            ent = s["entsize"] or 24
            symtab = self.sections[s["link"]] if s["link"] else None
            for k in range(s["size"] // ent):
                r_off, r_info, r_add = struct.unpack_from(
                    "<QQq", self.data, s["offset"] + k * ent)
                typ, sym = r_info & 0xffffffff, r_info >> 32
                sname, sval = ("", 0)
                if sym and symtab is not None:
                    sname, sval = self.symbol(symtab, sym)
                out.append((s["name"], r_off, typ, sname, sval, r_add))
        return out

    def relr_addresses(self):
        addrs = set()
        for s in self.sections:
            if s["type"] != SHT_RELR:
                continue
            base = None
            for k in range(s["size"] // 8):
                (w,) = struct.unpack_from("<Q", self.data, s["offset"] + 8 * k)
                if w & 1 == 0:
                    addrs.add(w)
                    base = w + 8
                else:
                    if base is None:
                        die("%s: RELR bitmap before address" % self.path)
                    for bit in range(1, 64):
                        if (w >> bit) & 1:
                            addrs.add(base + (bit - 1) * 8)
                    base += 63 * 8
        return addrs


def parse_bundle(sec, pos):
    """Return (end, [(offset, size, id)]) for the bundle at sec[pos:]."""
    if sec[pos:pos + 24] != MAGIC:
        die("no bundle magic at section offset 0x%x" % pos)
    (n,) = struct.unpack_from("<Q", sec, pos + 24)
    q = pos + 32
    entries = []
    end = q
    for _ in range(n):
        off, size, idlen = struct.unpack_from("<QQQ", sec, q)
        eid = sec[q + 24:q + 24 + idlen].decode("ascii")
        q += 24 + idlen
        entries.append((off, size, eid))
        end = max(end, pos + off + size)
    if end > len(sec):
        die("bundle at 0x%x runs past the section end" % pos)
    return end, entries


def split_bundles(sec):
    bundles = []
    pos = 0
    while pos < len(sec):
        if sec[pos:pos + 4] == CCOB:
            die("compressed (CCOB) bundle at 0x%x: not expected here" % pos)
        if sec[pos:pos + 24] == MAGIC:
            if pos % PAGE:
                die("bundle at 0x%x is not 4096-aligned" % pos)
            end, entries = parse_bundle(sec, pos)
            bundles.append((pos, end, entries))
            pos = end
            continue
        if sec[pos] != 0:
            die("unexpected non-zero byte 0x%02x at section offset 0x%x"
                % (sec[pos], pos))
        pos += 1
    return bundles


def arch_of(entry_id):
    return entry_id.rsplit("--", 1)[1]


def main():
    if len(sys.argv) != 4:
        die("usage: extract_expected.py ELF OUT_DIR WORK_DIR")
    elf_path, out_dir, work = sys.argv[1:]
    bundler = os.environ.get("BUNDLER", "clang-offload-bundler")
    objcopy = os.environ.get("OBJCOPY", "objcopy")
    os.makedirs(out_dir, exist_ok=True)
    os.makedirs(work, exist_ok=True)
    elf = Elf(elf_path)
    layout = [("e_type", elf.e_type)]
    fat = elf.section(".hip_fatbin")
    seg = elf.section(".hipFatBinSegment")
    index_lines = []
    if fat is None:
        if seg is not None:
            die("%s: .hipFatBinSegment without .hip_fatbin" % elf_path)
        layout += [("wrappers", 0), ("bundles", 0)]
    else:
        if seg is None or seg["size"] % 24:
            die("%s: missing or malformed .hipFatBinSegment" % elf_path)
        # 1. dump the section with objcopy and check it against the file.
        sec_file = os.path.join(work, "hip_fatbin.bin")
        subprocess.run([objcopy, "-O", "binary", "--only-section=.hip_fatbin",
                        elf_path, sec_file], check=True)
        with open(sec_file, "rb") as f:
            sec = f.read()
        if fat["type"] == SHT_NOBITS or sec != elf.bytes_of(fat):
            die("%s: objcopy dump differs from section bytes" % elf_path)
        # 2. split into bundles.
        bundles = split_bundles(sec)
        # 3. wrappers: magic, pointer target, how the slot is relocated.
        rela = {}
        for (rsec, r_off, typ, sname, sval, add) in elf.rela_entries():
            rela.setdefault(r_off, []).append((rsec, typ, sname, sval, add))
        relr = elf.relr_addresses()
        wrappers = []
        for i in range(seg["size"] // 24):
            w_addr = seg["addr"] + 24 * i
            w_off = elf.vaddr_to_off(w_addr)
            magic, version, ptr, res = struct.unpack_from(
                "<IIQQ", elf.data, w_off)
            if magic != 0x48495046 or version != 1:
                die("%s: wrapper %d has magic 0x%x version %d"
                    % (elf_path, i, magic, version))
            slot = w_addr + 8
            rels = rela.get(slot, [])
            if len(rels) > 1:
                die("%s: several RELA entries for slot 0x%x" % (elf_path, slot))
            if rels:
                (_rsec, typ, sname, sval, add) = rels[0]
                if typ == R_X86_64_RELATIVE:
                    kind, target = "R_X86_64_RELATIVE", add
                elif typ == R_X86_64_64:
                    kind, target = "R_X86_64_64:" + sname, sval + add
                else:
                    die("%s: slot 0x%x has relocation type %d"
                        % (elf_path, slot, typ))
                if slot in relr:
                    die("%s: slot 0x%x in both RELA and RELR" % (elf_path, slot))
            elif slot in relr:
                kind, target = "RELR", ptr
            else:
                kind, target = "none", ptr
            rel = target - fat["addr"]
            starts = [b[0] for b in bundles]
            bidx = starts.index(rel) if rel in starts else -1
            wrappers.append((kind, target, ptr, bidx, res))
        # 4. unbundle every non-host entry with the oracle.
        for n, (start, end, entries) in enumerate(bundles):
            bfile = os.path.join(work, "bundle_%d.bin" % n)
            with open(bfile, "wb") as f:
                f.write(sec[start:end])
            listed = subprocess.run(
                [bundler, "--list", "--type=o", "--input=" + bfile],
                check=True, capture_output=True, text=True).stdout.split()
            if sorted(listed) != sorted(e[2] for e in entries):
                die("bundle %d: bundler lists %r, descriptors say %r"
                    % (n, listed, [e[2] for e in entries]))
            for (off, size, eid) in entries:
                if eid.startswith("host"):
                    if size != 0:
                        die("bundle %d: non-empty host entry" % n)
                    continue
                if "--" not in eid:
                    die("bundle %d: entry id without '--': %s" % (n, eid))
                arch = arch_of(eid)
                rel = "%d/%s.co" % (n, arch.replace(":", "_"))
                dest = os.path.join(out_dir, rel)
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                subprocess.run([bundler, "--unbundle", "--type=o",
                                "--targets=" + eid, "--input=" + bfile,
                                "--output=" + dest], check=True)
                with open(dest, "rb") as f:
                    co = f.read()
                if co != sec[start + off:start + off + size]:
                    die("bundle %d %s: bundler output differs from payload"
                        % (n, eid))
                if co[:4] != b"\x7fELF":
                    die("bundle %d %s: payload is not an ELF code object"
                        % (n, eid))
                os.chmod(dest, 0o644)
                index_lines.append("%d\t%s\t%s\t%d\t%s\t%s" % (
                    n, eid, arch, len(co), hashlib.sha256(co).hexdigest(),
                    rel))
        # 5. layout.
        sv, ss = fat["addr"], fat["size"]
        layout += [
            ("wrappers", len(wrappers)),
            ("bundles", len(bundles)),
        ]
        for n, (start, end, _e) in enumerate(bundles):
            layout.append(("bundle_offset_%d" % n, start))
        for n, (start, end, _e) in enumerate(bundles):
            layout.append(("bundle_size_%d" % n, end - start))
        layout += [
            ("fatbin_sh_addr", sv),
            ("fatbin_sh_size", ss),
            ("fatbin_sh_offset", fat["offset"]),
            ("fatbin_ends_on_page", 1 if (sv + ss) % PAGE == 0 else 0),
            # bytes after the end of the last bundle (1 = the trailing NUL
            # of a non-RDC TU blob; 0 = RDC, the section ends with the bundle)
            ("fatbin_tail_bytes", ss - bundles[-1][1]),
            ("segment_sh_addr", seg["addr"]),
            ("segment_sh_size", seg["size"]),
        ]
        for i, (kind, target, ptr, bidx, _res) in enumerate(wrappers):
            layout += [
                ("wrapper_reloc_%d" % i, kind),
                ("wrapper_target_%d" % i, target),
                ("wrapper_slot_value_%d" % i, ptr),
                ("wrapper_bundle_%d" % i, bidx),
            ]
    with open(os.path.join(out_dir, "layout.tsv"), "w") as f:
        for k, v in layout:
            f.write("%s\t%s\n" % (k, v))
    with open(os.path.join(out_dir, "index.tsv"), "w") as f:
        for line in index_lines:
            f.write(line + "\n")
    for k, v in layout:
        if k in ("wrappers", "bundles") or k.startswith("wrapper_reloc"):
            sys.stdout.write("%s=%s " % (k, v))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
