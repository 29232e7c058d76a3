#!/usr/bin/env python3
"""Helpers for build_pe.sh (standard library only).

  pe_assets.py split ELF OUT_PREFIX
      Dump ELF's .hip_fatbin with objcopy (env OBJCOPY), split it into its
      uncompressed bundles (4096-aligned magic; end = max(offset+size) over
      the descriptors; only zero bytes between bundles and after the last)
      and write OUT_PREFIX.section.bin (the whole section),
      OUT_PREFIX.bN.bin (bundle N) and OUT_PREFIX.bN.inc (bundle N as a
      comma-separated C initializer list, 16 bytes a line).  Prints the
      number of bundles.

  pe_assets.py cert IN_PE OUT_PE
      Copy IN_PE, append a fake Authenticode certificate table (one
      WIN_CERTIFICATE, revision 2.0, type PKCS_SIGNED_DATA, whose body is a
      small well-formed DER SEQUENCE that is *not* a signature) at the end of
      the file, point the security data directory (index 4; its
      "VirtualAddress" is a file offset) at it and store a valid PE checksum,
      as a signing tool would.
"""
import os
import struct
import subprocess
import sys

MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
PAGE = 0x1000


def die(msg):
    sys.stderr.write("pe_assets.py: error: %s\n" % msg)
    sys.exit(1)


def bundle_end(data, pos):
    """End (relative to pos) of the uncompressed bundle at data[pos:]."""
    if data[pos:pos + 24] != MAGIC:
        die("no bundle magic at 0x%x" % pos)
    (n,) = struct.unpack_from("<Q", data, pos + 24)
    q, end = pos + 32, 32
    for _ in range(n):
        off, size, idlen = struct.unpack_from("<QQQ", data, q)
        q += 24 + idlen
        end = max(end, off + size, q - pos)
    if pos + end > len(data):
        die("bundle at 0x%x runs past the end of the data" % pos)
    return end


def split(elf, prefix):
    objcopy = os.environ.get("OBJCOPY", "objcopy")
    sec_file = prefix + ".section.bin"
    subprocess.run([objcopy, "-O", "binary", "--only-section=.hip_fatbin",
                    elf, sec_file], check=True)
    with open(sec_file, "rb") as f:
        sec = f.read()
    if not sec:
        die("%s: no .hip_fatbin" % elf)
    pos, n = 0, 0
    while pos < len(sec):
        if sec[pos:pos + 24] == MAGIC:
            if pos % PAGE:
                die("%s: bundle at 0x%x not 4096-aligned" % (elf, pos))
            end = bundle_end(sec, pos)
            blob = sec[pos:pos + end]
            with open("%s.b%d.bin" % (prefix, n), "wb") as f:
                f.write(blob)
            with open("%s.b%d.inc" % (prefix, n), "w") as f:
                for i in range(0, len(blob), 16):
                    f.write(",".join("0x%02x" % b for b in blob[i:i + 16]))
                    f.write(",\n")
            n += 1
            pos += end
            continue
        if sec[pos] != 0:
            die("%s: non-zero byte outside bundles at section offset 0x%x"
                % (elf, pos))
        pos += 1
    if n == 0:
        die("%s: no bundle in .hip_fatbin" % elf)
    print(n)


def pe_checksum(data, csum_off):
    """The PE image checksum (CheckSumMappedFile): 16-bit one's-complement
    style sum of the file with the CheckSum field skipped, plus the length."""
    d = data + (b"\0" if len(data) % 2 else b"")
    s = 0
    for i, (w,) in enumerate(struct.iter_unpack("<H", d)):
        if i * 2 in (csum_off, csum_off + 2):
            continue
        s += w
        s = (s & 0xffff) + (s >> 16)
    s = (s & 0xffff) + (s >> 16)
    return (s + len(data)) & 0xffffffff


def der(tag, body):
    n = len(body)
    if n < 0x80:
        return bytes([tag, n]) + body
    if n < 0x100:
        return bytes([tag, 0x81, n]) + body
    return bytes([tag, 0x82, n >> 8, n & 0xff]) + body


def fake_certificate():
    """WIN_CERTIFICATE whose dwLength is a multiple of 8 (as signtool
    writes it), so the table size equals dwLength."""
    oid_signed_data = bytes.fromhex("06092a864886f70d010702")  # 1.2.840.113549.1.7.2
    text = (b"kpackfs test asset: fake Authenticode certificate table, "
            b"NOT a signature. ")
    while True:
        body = der(0x30, oid_signed_data + der(0xa0, der(0x04, text)))
        length = 8 + len(body)
        if length % 8 == 0:
            break
        text += b"."
    return struct.pack("<IHH", length, 0x0200, 0x0002) + body


def cert(src, dst):
    with open(src, "rb") as f:
        data = bytearray(f.read())
    if data[:2] != b"MZ":
        die("%s: not a PE file" % src)
    (pe,) = struct.unpack_from("<I", data, 0x3c)
    if data[pe:pe + 4] != b"PE\0\0":
        die("%s: no PE signature" % src)
    opt = pe + 24
    if struct.unpack_from("<H", data, opt)[0] != 0x20b:
        die("%s: not PE32+" % src)
    (ndirs,) = struct.unpack_from("<I", data, opt + 108)
    if ndirs < 5:
        die("%s: no security directory slot" % src)
    sec_dir = opt + 112 + 8 * 4
    if struct.unpack_from("<II", data, sec_dir) != (0, 0):
        die("%s: already has a certificate table" % src)
    if len(data) % 8:
        die("%s: file length not 8-aligned" % src)
    table = fake_certificate()
    off = len(data)
    data += table
    struct.pack_into("<II", data, sec_dir, off, len(table))
    csum_off = opt + 64
    struct.pack_into("<I", data, csum_off, 0)
    struct.pack_into("<I", data, csum_off, pe_checksum(bytes(data), csum_off))
    with open(dst, "wb") as f:
        f.write(data)
    print("certificate table at file offset 0x%x, %d bytes" % (off, len(table)))


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "split":
        split(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "cert":
        cert(sys.argv[2], sys.argv[3])
    else:
        die("usage: pe_assets.py split ELF OUT_PREFIX | cert IN_PE OUT_PE")


if __name__ == "__main__":
    main()
