#!/usr/bin/env python3
"""The baseline of figure 9: what one target's code objects take as level-3
zstd frames, computed without kpackfs.

    python3 bench/tools/frames.py FAT_LIBRARY TARGET

Finds the `.hip_fatbin` section with readelf, walks the uncompressed clang
offload bundles in it (magic, entry count, then offset/size/id per entry),
takes from each bundle the entry for TARGET (the exact `hipv4-amdgcn-amd-
amdhsa--TARGET` id, else the same processor without feature flags, the
entry the runtime would also accept), and compresses each code object with
the zstd command-line tool at level 3 without a checksum (what upstream's
`zstd-per-kernel` stores). Prints `objects=N raw_bytes=B zstd3_bytes=B`.

Independent of kpackfs on purpose: the figure compares kpackfs's archive
against this, so it must not share its parser or its compressor.
"""
import mmap
import struct
import subprocess
import sys

MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"


def fatbin_range(path):
    out = subprocess.run(["readelf", "-W", "-S", path], check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        f = line.replace("[", " ").replace("]", " ").split()
        if ".hip_fatbin" in f:
            i = f.index(".hip_fatbin")
            # name type address offset size ...
            return int(f[i + 3], 16), int(f[i + 4], 16)
    sys.exit(f"{path}: no .hip_fatbin section")


def entries(buf, at):
    (n,) = struct.unpack_from("<Q", buf, at + len(MAGIC))
    p = at + len(MAGIC) + 8
    for _ in range(n):
        off, size, idlen = struct.unpack_from("<QQQ", buf, p)
        p += 24
        ident = bytes(buf[p:p + idlen]).decode()
        p += idlen
        yield ident, at + off, size


def main():
    path, target = sys.argv[1], sys.argv[2]
    base = target.split(":")[0]
    sec_off, sec_size = fatbin_range(path)
    n = raw = z = 0
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        at = m.find(MAGIC, sec_off, sec_off + sec_size)
        while at >= 0:
            best = None
            for ident, off, size in entries(m, at):
                if not ident.startswith("hip"):
                    continue
                t = ident.split("--", 1)[-1]
                if t == target:
                    best = (off, size)
                elif t == base and best is None:
                    best = (off, size)
            if best:
                off, size = best
                obj = m[off:off + size]
                c = subprocess.run(["zstd", "-3", "--no-check", "-q", "-c"], input=obj, check=True,
                                   capture_output=True).stdout
                n += 1
                raw += size
                z += len(c)
            at = m.find(MAGIC, at + len(MAGIC), sec_off + sec_size)
    print(f"objects={n} raw_bytes={raw} zstd3_bytes={z}")


if __name__ == "__main__":
    main()
