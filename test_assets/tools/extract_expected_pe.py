#!/usr/bin/env python3
"""Oracle extraction for the PE/COFF (Windows) test assets (standard library
only); the PE counterpart of extract_expected.py.

Usage: extract_expected_pe.py PE OUT_DIR WORK_DIR

For one PE32+ file this writes
  OUT_DIR/layout.tsv     key<TAB>value lines (decimal integers, except
                         format, pe_kind and wrapper_reloc_N, which are words)
  OUT_DIR/index.tsv      bundle_index, entry_id, arch, size, sha256, file
                         (same format as for the ELF assets)
  OUT_DIR/<N>/<arch>.co  code objects unbundled by clang-offload-bundler
and WORK_DIR/hip_fat.bin (the first VirtualSize bytes of `.hip_fat`) plus
one WORK_DIR/bundle_<N>.bin per bundle.

Bundle N is cut out of the PE file at the file offset of wrapper N's
pointer target (VA - ImageBase -> RVA -> file offset), its length taken from
its descriptor table; clang-offload-bundler --list/--unbundle run on those
bytes, and each result is checked against the payload bytes.

Checked on the way (any failure is fatal):
  - `.hip_fat` and `.hipFatB` exist; `.hip_fat` is 0x40000040 (read-only
    initialized data), `.hipFatB` 0xC0000040 (read/write initialized data);
  - every wrapper has magic HIPF, version 1, reserved1 0; its pointer slot
    (VirtualAddress(.hipFatB) + 24i + 8) is covered by exactly one base
    relocation, of type IMAGE_REL_BASED_DIR64; the slot value is
    ImageBase + RVA of bundle i (wrapper i -> bundle i, every bundle used);
  - no other base relocation targets a `.hip_fat` address;
  - the section table leaves room for one more section header
    (FORMATS.md §4 step 1);
  - with READOBJ set (path of llvm-readobj), its --file-headers --sections
    --coff-basereloc --coff-imports output agrees with this script's parse
    (image base, alignments, SizeOfHeaders, certificate directory, every
    section header, the set of DIR64 relocations).

Environment: BUNDLER (clang-offload-bundler), READOBJ (optional).
"""
import hashlib
import os
import re
import struct
import subprocess
import sys

MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
PAGE = 0x1000
SECTION_HEADER = 40
REL_ABSOLUTE, REL_DIR64 = 0, 10
REL_NAMES = {0: "ABSOLUTE", 1: "HIGH", 2: "LOW", 3: "HIGHLOW", 4: "HIGHADJ",
             10: "DIR64"}
FAT_CHARS, WRAPPER_CHARS = 0x40000040, 0xC0000040
DIR_SECURITY, DIR_BASERELOC = 4, 5


def die(msg):
    sys.stderr.write("extract_expected_pe.py: error: %s\n" % msg)
    sys.exit(1)


class Pe:
    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            self.data = d = f.read()
        if d[:2] != b"MZ":
            die("%s: no MZ header" % path)
        (self.pe_off,) = struct.unpack_from("<I", d, 0x3c)
        if d[self.pe_off:self.pe_off + 4] != b"PE\0\0":
            die("%s: no PE signature" % path)
        coff = self.pe_off + 4
        (self.machine, nsect, self.timestamp, _symptr, _nsym, opt_size,
         self.characteristics) = struct.unpack_from("<HHIIIHH", d, coff)
        self.opt_off = opt = coff + 20
        if struct.unpack_from("<H", d, opt)[0] != 0x20b:
            die("%s: not PE32+" % path)
        (self.image_base, self.section_alignment,
         self.file_alignment) = struct.unpack_from("<QII", d, opt + 24)
        (self.size_of_image, self.size_of_headers,
         self.checksum) = struct.unpack_from("<III", d, opt + 56)
        (self.subsystem, self.dll_characteristics) = struct.unpack_from(
            "<HH", d, opt + 68)
        (ndirs,) = struct.unpack_from("<I", d, opt + 108)
        self.dirs = [struct.unpack_from("<II", d, opt + 112 + 8 * i)
                     for i in range(ndirs)]
        self.sect_off = opt + opt_size
        self.sections = []
        for i in range(nsect):
            o = self.sect_off + SECTION_HEADER * i
            name = d[o:o + 8].rstrip(b"\0").decode("ascii")
            (vsize, rva, raw_size, raw_ptr, _relptr, _lnptr, _nrel, _nln,
             chars) = struct.unpack_from("<IIIIIIHHI", d, o + 8)
            self.sections.append(dict(name=name, vsize=vsize, rva=rva,
                                      raw_size=raw_size, raw_ptr=raw_ptr,
                                      chars=chars))
        self.table_end = self.sect_off + SECTION_HEADER * nsect

    def section(self, name):
        found = [s for s in self.sections if s["name"] == name]
        if len(found) > 1:
            die("%s: %d sections named %s" % (self.path, len(found), name))
        return found[0] if found else None

    def dir(self, i):
        return self.dirs[i] if i < len(self.dirs) else (0, 0)

    def rva_to_off(self, rva):
        """FORMATS.md §4: first section with VA <= rva < VA+VirtualSize,
        SizeOfRawData > 0 and rva-VA < SizeOfRawData."""
        for s in self.sections:
            if (s["rva"] <= rva < s["rva"] + s["vsize"] and s["raw_size"] > 0
                    and rva - s["rva"] < s["raw_size"]):
                return s["raw_ptr"] + rva - s["rva"]
        die("%s: RVA 0x%x has no file bytes" % (self.path, rva))

    def base_relocs(self):
        """[(rva, type)] of every base relocation entry, ABSOLUTE included."""
        rva, size = self.dir(DIR_BASERELOC)
        out = []
        if size == 0:
            return out
        off = self.rva_to_off(rva)
        end = off + size
        while off < end:
            page, block = struct.unpack_from("<II", self.data, off)
            if block < 8 or off + block > end:
                die("%s: bad base relocation block at 0x%x" % (self.path, off))
            for k in range((block - 8) // 2):
                (e,) = struct.unpack_from("<H", self.data, off + 8 + 2 * k)
                out.append((page + (e & 0xfff), e >> 12))
            off += block
        return out

    def u64_at_rva(self, rva):
        return struct.unpack_from("<Q", self.data, self.rva_to_off(rva))[0]

    def raw_end(self):
        ends = [s["raw_ptr"] + s["raw_size"] for s in self.sections
                if s["raw_size"] > 0]
        return max(ends) if ends else self.size_of_headers


def readobj_check(pe, readobj):
    """Cross-check our parse against llvm-readobj; returns its DIR64 set."""
    out = subprocess.run(
        [readobj, "--file-headers", "--sections", "--coff-basereloc",
         "--coff-imports", pe.path],
        check=True, capture_output=True, text=True).stdout

    def field(name, base=0):
        m = re.search(r"^\s*%s: (\S+)" % name, out, re.M)
        if not m:
            die("llvm-readobj printed no %s" % name)
        return int(m.group(1), base)

    want = [("ImageBase", pe.image_base), ("SectionAlignment",
            pe.section_alignment), ("FileAlignment", pe.file_alignment),
            ("SizeOfHeaders", pe.size_of_headers), ("SectionCount",
            len(pe.sections)), ("SizeOfImage", pe.size_of_image),
            ("CertificateTableRVA", pe.dir(DIR_SECURITY)[0]),
            ("CertificateTableSize", pe.dir(DIR_SECURITY)[1]),
            ("BaseRelocationTableRVA", pe.dir(DIR_BASERELOC)[0]),
            ("BaseRelocationTableSize", pe.dir(DIR_BASERELOC)[1])]
    for name, value in want:
        if field(name) != value:
            die("%s: llvm-readobj %s = %s, we read %s"
                % (pe.path, name, field(name), value))
    secs = []
    for blk in re.findall(r"^\s*Section \{\n(.*?)^\s*\]\n\s*\}", out,
                          re.M | re.S):
        g = lambda k: re.search(r"^\s*%s: (\S+)" % k, blk, re.M).group(1)
        chars = re.search(r"Characteristics \[ \((0x[0-9A-Fa-f]+)\)", blk)
        secs.append(dict(name=g("Name"), vsize=int(g("VirtualSize"), 0),
                         rva=int(g("VirtualAddress"), 0),
                         raw_size=int(g("RawDataSize"), 0),
                         raw_ptr=int(g("PointerToRawData"), 0),
                         chars=int(chars.group(1), 0)))
    if secs != pe.sections:
        die("%s: llvm-readobj section table differs:\n%r\n%r"
            % (pe.path, secs, pe.sections))
    relocs = re.findall(r"Entry \{\s*Type: (\w+)\s*Address: (0x[0-9A-Fa-f]+)",
                        out)
    ours = [(REL_NAMES.get(t, str(t)), r) for (r, t) in pe.base_relocs()]
    theirs = [(t, int(a, 0)) for (t, a) in relocs]
    if theirs != ours:
        die("%s: llvm-readobj base relocations differ:\n%r\n%r"
            % (pe.path, theirs, ours))
    imports = re.findall(r"^\s*Import \{\s*Name: (\S+)", out, re.M)
    return set(a for (t, a) in theirs if t == "DIR64"), imports


def parse_bundle_at(data, pos, limit, what):
    if data[pos:pos + 24] != MAGIC:
        die("%s: no bundle magic" % what)
    (n,) = struct.unpack_from("<Q", data, pos + 24)
    q = pos + 32
    entries, end = [], q
    for _ in range(n):
        off, size, idlen = struct.unpack_from("<QQQ", data, q)
        eid = data[q + 24:q + 24 + idlen].decode("ascii")
        q += 24 + idlen
        entries.append((off, size, eid))
        end = max(end, pos + off + size)
    if end > limit:
        die("%s: bundle runs past its section" % what)
    return end, entries


def split_bundles(sec, what):
    bundles, pos = [], 0
    while pos < len(sec):
        if sec[pos:pos + 4] == b"CCOB":
            die("%s: compressed bundle at 0x%x: not expected here" % (what, pos))
        if sec[pos:pos + 24] == MAGIC:
            if pos % PAGE:
                die("%s: bundle at 0x%x is not 4096-aligned" % (what, pos))
            end, entries = parse_bundle_at(sec, pos, len(sec), what)
            bundles.append((pos, end, entries))
            pos = end
            continue
        if sec[pos] != 0:
            die("%s: non-zero byte 0x%02x at .hip_fat offset 0x%x"
                % (what, sec[pos], pos))
        pos += 1
    return bundles


def main():
    if len(sys.argv) != 4:
        die("usage: extract_expected_pe.py PE OUT_DIR WORK_DIR")
    path, out_dir, work = sys.argv[1:]
    bundler = os.environ.get("BUNDLER", "clang-offload-bundler")
    readobj = os.environ.get("READOBJ")
    os.makedirs(out_dir, exist_ok=True)
    os.makedirs(work, exist_ok=True)
    pe = Pe(path)
    d = pe.data

    fat, seg = pe.section(".hip_fat"), pe.section(".hipFatB")
    if fat is None or seg is None:
        die("%s: .hip_fat or .hipFatB missing" % path)
    if fat["chars"] != FAT_CHARS or seg["chars"] != WRAPPER_CHARS:
        die("%s: characteristics .hip_fat 0x%x, .hipFatB 0x%x"
            % (path, fat["chars"], seg["chars"]))
    slack = pe.size_of_headers - pe.table_end
    if slack < SECTION_HEADER:
        die("%s: header slack %d < 40" % (path, slack))
    if fat["raw_size"] < fat["vsize"] or seg["raw_size"] < seg["vsize"]:
        die("%s: fat or wrapper section not fully backed by file bytes" % path)
    if seg["vsize"] % 24 or seg["vsize"] == 0:
        die("%s: .hipFatB VirtualSize %d" % (path, seg["vsize"]))

    # .hip_fat bytes (the first VirtualSize bytes of its raw data).
    sec = d[fat["raw_ptr"]:fat["raw_ptr"] + fat["vsize"]]
    with open(os.path.join(work, "hip_fat.bin"), "wb") as f:
        f.write(sec)
    bundles = split_bundles(sec, path)
    if not bundles:
        die("%s: no bundle in .hip_fat" % path)

    relocs = pe.base_relocs()
    kinds = {}
    for (r, t) in relocs:
        kinds.setdefault(r, []).append(t)
    dir64 = set(r for (r, t) in relocs if t == REL_DIR64)
    imports = []
    if readobj:
        ro_dir64, imports = readobj_check(pe, readobj)
        if ro_dir64 != dir64:
            die("%s: DIR64 sets differ" % path)
    # No pointer other than the wrappers' may target .hip_fat.
    slots = set(seg["rva"] + 24 * i + 8 for i in range(seg["vsize"] // 24))
    for r in dir64 - slots:
        t = pe.u64_at_rva(r) - pe.image_base
        if fat["rva"] <= t < fat["rva"] + fat["vsize"]:
            die("%s: base relocation at 0x%x targets .hip_fat" % (path, r))

    wrappers = []
    starts = [b[0] for b in bundles]
    for i in range(seg["vsize"] // 24):
        w_rva = seg["rva"] + 24 * i
        magic, version, ptr, res = struct.unpack_from(
            "<IIQQ", d, pe.rva_to_off(w_rva))
        if magic != 0x48495046 or version != 1 or res != 0:
            die("%s: wrapper %d: magic 0x%x version %d reserved1 %d"
                % (path, i, magic, version, res))
        slot = w_rva + 8
        if kinds.get(slot) != [REL_DIR64]:
            die("%s: wrapper %d slot 0x%x relocated by %r, want one DIR64"
                % (path, i, slot, kinds.get(slot)))
        target = ptr - pe.image_base
        rel = target - fat["rva"]
        bidx = starts.index(rel) if rel in starts else -1
        if bidx != i:
            die("%s: wrapper %d points at RVA 0x%x (bundle %d)"
                % (path, i, target, bidx))
        wrappers.append((slot, ptr, target, bidx))
    if len(wrappers) != len(bundles):
        die("%s: %d wrappers, %d bundles" % (path, len(wrappers), len(bundles)))

    index_lines = []
    for n, (slot, ptr, target, _b) in enumerate(wrappers):
        # Cut the bundle out of the file by the wrapper pointer.
        foff = pe.rva_to_off(target)
        what = "%s bundle %d" % (path, n)
        end, entries = parse_bundle_at(
            d, foff, fat["raw_ptr"] + fat["vsize"], what)
        blob = d[foff:end]
        start_in_sec, end_in_sec, sec_entries = bundles[n]
        if blob != sec[start_in_sec:end_in_sec] or entries != sec_entries:
            die("%s: differs from the section scan" % what)
        bfile = os.path.join(work, "bundle_%d.bin" % n)
        with open(bfile, "wb") as f:
            f.write(blob)
        listed = subprocess.run(
            [bundler, "--list", "--type=o", "--input=" + bfile],
            check=True, capture_output=True, text=True).stdout.split()
        if sorted(listed) != sorted(e[2] for e in entries):
            die("%s: bundler lists %r, descriptors say %r"
                % (what, listed, [e[2] for e in entries]))
        for (off, size, eid) in entries:
            if eid.startswith("host"):
                if size != 0:
                    die("%s: non-empty host entry" % what)
                continue
            if "--" not in eid:
                die("%s: entry id without '--': %s" % (what, eid))
            arch = eid.rsplit("--", 1)[1]
            rel = "%d/%s.co" % (n, arch.replace(":", "_"))
            dest = os.path.join(out_dir, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            subprocess.run([bundler, "--unbundle", "--type=o",
                            "--targets=" + eid, "--input=" + bfile,
                            "--output=" + dest], check=True)
            with open(dest, "rb") as f:
                co = f.read()
            if co != blob[off:off + size] or co[:4] != b"\x7fELF":
                die("%s %s: bundler output differs from the payload"
                    % (what, eid))
            os.chmod(dest, 0o644)
            index_lines.append("%d\t%s\t%s\t%d\t%s\t%s" % (
                n, eid, arch, len(co), hashlib.sha256(co).hexdigest(), rel))

    sec_dir = pe.dir(DIR_SECURITY)
    raw_end = pe.raw_end()
    layout = [
        ("format", "PE"),
        ("pe_kind", "dll" if pe.characteristics & 0x2000 else "exe"),
        ("machine", pe.machine),
        ("image_base", pe.image_base),
        ("section_alignment", pe.section_alignment),
        ("file_alignment", pe.file_alignment),
        ("size_of_headers", pe.size_of_headers),
        ("section_table_end", pe.table_end),
        ("header_slack", slack),
        ("number_of_sections", len(pe.sections)),
        ("size_of_image", pe.size_of_image),
        ("checksum", pe.checksum),
        ("file_size", len(d)),
        ("raw_end", raw_end),
        ("overlay_size", len(d) - raw_end),
        ("security_dir_offset", sec_dir[0]),
        ("security_dir_size", sec_dir[1]),
        ("base_relocs", sum(1 for (_r, t) in relocs if t != REL_ABSOLUTE)),
        ("wrappers", len(wrappers)),
        ("bundles", len(bundles)),
    ]
    for n, (start, _end, _e) in enumerate(bundles):
        layout.append(("bundle_offset_%d" % n, start))
    for n, (start, end, _e) in enumerate(bundles):
        layout.append(("bundle_size_%d" % n, end - start))
    layout += [
        ("fat_section_rva", fat["rva"]),
        ("fat_section_raw_offset", fat["raw_ptr"]),
        ("fat_section_virtual_size", fat["vsize"]),
        ("fat_section_raw_size", fat["raw_size"]),
        ("fat_section_characteristics", fat["chars"]),
        ("fat_ends_on_page", 1 if (fat["rva"] + fat["vsize"]) % PAGE == 0 else 0),
        ("fat_tail_bytes", fat["vsize"] - bundles[-1][1]),
        ("wrapper_section_rva", seg["rva"]),
        ("wrapper_section_raw_offset", seg["raw_ptr"]),
        ("wrapper_section_virtual_size", seg["vsize"]),
        ("wrapper_section_raw_size", seg["raw_size"]),
        ("wrapper_section_characteristics", seg["chars"]),
    ]
    for i, (slot, ptr, target, bidx) in enumerate(wrappers):
        layout += [
            ("wrapper_reloc_%d" % i, "DIR64"),
            ("wrapper_slot_rva_%d" % i, slot),
            ("wrapper_slot_value_%d" % i, ptr),
            ("wrapper_target_rva_%d" % i, target),
            ("wrapper_bundle_%d" % i, bidx),
        ]
    with open(os.path.join(out_dir, "layout.tsv"), "w") as f:
        for k, v in layout:
            f.write("%s\t%s\n" % (k, v))
    with open(os.path.join(out_dir, "index.tsv"), "w") as f:
        for line in index_lines:
            f.write(line + "\n")
    sys.stdout.write("wrappers=%d bundles=%d header_slack=%d dir64=%d%s\n" % (
        len(wrappers), len(bundles), slack, len(dir64),
        " imports=" + ",".join(imports) if readobj else ""))


if __name__ == "__main__":
    main()
