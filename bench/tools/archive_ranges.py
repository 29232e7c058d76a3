#!/usr/bin/env python3
"""Prints the source byte ranges ("offset size" per line, ascending) that a
kpackfs archive for TARGET is made of: the TARGET entry of every
uncompressed offload bundle of FAT's .hip_fatbin (bundle locations from
`kpackfs inspect`). bench/run.sh replays them with `bt read-ranges` as the
"direct read of the archive's own source ranges" baseline.

usage: archive_ranges.py KPACKFS FAT TARGET
"""
import re
import struct
import subprocess
import sys

kpackfs, fat, target = sys.argv[1:4]
out = subprocess.run([kpackfs, "inspect", fat], capture_output=True, text=True, check=True).stdout
m = re.search(r"^\.hip_fatbin: \d+ bytes at file offset (0x[0-9a-f]+)", out, re.M)
if not m:
    sys.exit(f"{fat}: no .hip_fatbin in `kpackfs inspect` output")
base = int(m.group(1), 16)
bundles = sorted({int(x, 16) for x in re.findall(r"^\s+\[\d+\] offset (0x[0-9a-f]+): uncompressed bundle", out, re.M)})
ranges = []
with open(fat, "rb") as f:
    for b in bundles:
        f.seek(base + b)
        if f.read(24) != b"__CLANG_OFFLOAD_BUNDLE__":
            sys.exit(f"{fat}: no bundle magic at {base + b:#x}")
        (n,) = struct.unpack("<Q", f.read(8))
        for _ in range(n):
            off, size, tlen = struct.unpack("<QQQ", f.read(24))
            triple = f.read(tlen).decode()
            if triple.endswith("--" + target) and size:
                ranges.append((base + b + off, size))
for off, size in sorted(ranges):
    print(off, size)
