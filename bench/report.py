#!/usr/bin/env python3
"""Turns bench/run.sh's raw samples into the results table and RESULTS.md.

Every figure is a ratio against a baseline measured in the same run (the
medians of the samples of both). Times: ratio = kpackfs / baseline (below 1
is faster). Throughputs: ratio = kpackfs / baseline (above 1 is faster).
"""
import argparse
import os
import statistics
from collections import OrderedDict


def load(path):
    raw = OrderedDict()
    with open(path) as f:
        for line in f:
            k, _, v = line.rstrip("\n").partition("\t")
            if not k or v == "":
                continue
            raw.setdefault(k, []).append(float(v))
    return raw


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--raw", required=True)
    ap.add_argument("--meta", required=True)
    ap.add_argument("--commands", required=True)
    ap.add_argument("--analysis")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    raw = load(a.raw)
    meta = dict(l.rstrip("\n").split("=", 1) for l in open(a.meta) if "=" in l)
    smoke = meta.get("mode") == "smoke"

    def med(k):
        v = raw.get(k)
        return statistics.median(v) if v else None

    def one(k):
        v = raw.get(k)
        return v[-1] if v else None

    rows = []  # (fig, measure, kpackfs, baseline-name, baseline, ratio, target, met)

    def fmt(x, unit):
        if x is None:
            return "n/a"
        if unit == "ms":
            return f"{x:.2f} ms" if x < 100 else f"{x:.0f} ms"
        if unit == "us":
            return f"{x:.1f} µs" if x < 1000 else f"{x / 1000:.2f} ms"
        if unit == "MB/s":
            return f"{x:.0f} MB/s"
        if unit == "s":
            return f"{x:.3f} s" if x < 10 else f"{x:.1f} s"
        if unit == "MB":
            return f"{x:.1f} MB"
        return f"{x:g} {unit}".strip()

    def row(fig, measure, kval, unit, bname, bval, target="—", met=None, ratio=None):
        if ratio is None and kval is not None and bval not in (None, 0):
            ratio = kval / bval
        rows.append((fig, measure, fmt(kval, unit), bname, fmt(bval, unit) if bname else "", ratio, target, met))

    def ok(cond):
        return None if cond is None else ("met" if cond else "**MISSED**")

    # 1. mount time
    k, p = med("f1.kpackfs.usable_us"), med("f1.plainfs.usable_us")
    k = k and k / 1000
    p = p and p / 1000
    row("1", "mount → first stat inside (median)", k, "ms", "plainfs", p, "≤ 50 ms", ok(k is not None and k <= 50))

    # 2. first stat / first byte
    for c in ("cold", "warm"):
        for what, label in (("stat", "first stat"), ("firstbyte", "first byte (open+read 1 B)")):
            kk = med(f"f2.{c}.{what}.kpackfs.us")
            kk = kk and kk / 1000
            for b in ("plainfs", "direct"):
                bb = med(f"f2.{c}.{what}.{b}.us")
                bb = bb and bb / 1000
                tgt, met = "—", None
                if what == "stat" and b == "plainfs":
                    tgt, met = "≤ 20 ms", ok(kk is not None and kk <= 20)
                row("2", f"{label} of transformed lib, page cache {c}", kk, "ms", b + " (fat file)", bb, tgt, met)

    # 3. sequential reads
    for c in ("cold", "warm"):
        for it, label in (("transformed", "transformed lib"), ("archive", "archive"), ("data", "unchanged data file")):
            kk = med(f"f3.{c}.{it}.kpackfs.mbps")
            for b in ("plainfs", "direct"):
                bb = med(f"f3.{c}.{it}.{b}.mbps")
                tgt, met = "—", None
                r = kk / bb if kk and bb else None
                # Issue 23's targets: a cold transformed library >= 0.9x
                # plainfs; a cold archive against its own source ranges read
                # with readahead (below); a warm archive >= 0.9x direct —
                # judged on the default mount (below): this one has no
                # cache directory, so its warm reads are the FUSE page
                # cache's (kernel-bound, small folios).
                if it == "transformed" and c == "cold" and b == "plainfs":
                    tgt, met = "≥ 0.90", ok(r is not None and r >= 0.90)
                if it == "data" and b == "direct":
                    tgt, met = "≥ 0.90", ok(r is not None and r >= 0.90)
                what = f"seq. read {label}, {c}" + (", --cache-dir none" if c == "warm" and it != "data" else "")
                row("3", what, kk, "MB/s", b, bb, tgt, met)
            kd = med(f"f3.{c}.{it}.default.mbps")
            bd = med(f"f3.{c}.{it}.direct.mbps")
            if kd is not None and bd and it in ("transformed", "archive"):
                t = 0.90 if it == "archive" else 0.80
                row("3", f"seq. read {label}, {c}, default mount (copied at the 2nd open)", kd, "MB/s", "direct", bd, f"≥ {t:.2f}", ok(kd / bd >= t))
            km = med(f"f3.{c}.{it}.materialized.mbps")
            if km is not None and bd:
                r = km / bd
                tgt, met = ("≥ 0.80", ok(r >= 0.80)) if it in ("transformed", "archive") else ("—", None)
                row("3", f"seq. read {label}, {c}, mount --materialize", km, "MB/s", "direct", bd, tgt, met)
            if c == "cold" and it == "archive":
                for key, bl in (("direct_ranges_ahead0", "direct, the archive's own source ranges"),
                                ("direct_ranges_ahead1", "same + fadvise(WILLNEED) of the next range")):
                    bb = med(f"f3.cold.archive.{key}.mbps")
                    if bb is not None:
                        tgt, met = "—", None
                        if key == "direct_ranges_ahead1":
                            tgt, met = "≥ 0.90", ok(kk is not None and kk / bb >= 0.90)
                        row("3", f"seq. read {label}, {c}", kk, "MB/s", bl, bb, tgt, met)

    # 4. fio
    for mode in ("direct", "buffered"):
        for pc in ("p50", "p99"):
            kk = med(f"f4.{mode}.kpackfs.{pc}_us")
            for b in ("source", "plainfs"):
                bb = med(f"f4.{mode}.{b}.{pc}_us")
                label = "direct=1" if mode == "direct" else "buffered, warm"
                row("4", f"4 KiB randread {pc}, {label}", kk, "us", b + (" (fat file)" if b == "plainfs" else " file"), bb)

    # 5. dlopen
    for what, label in (("dlopen", "dlopen (stub records nothing)"), ("resolve", "dlopen + code-object resolution")):
        kk, bb = med(f"f5.{what}.kpackfs.us"), med(f"f5.{what}.original.us")
        row("5", f"{label}, warm (median)", kk and kk / 1000, "ms", "original on local disk", bb and bb / 1000)

    # 6. bake
    for c in ("cold", "warm"):
        s, mb = med(f"f6.bake.{c}.secs"), med(f"f6.bake.{c}.rss_mb")
        cp = med(f"f6.cp.{c}.secs")
        # The reference tool is not run here: its figures are quoted (from
        # the project's earlier measurement), so they are labelled so and
        # never judged "met" against this run.
        row("6", f"bake wall, page cache {c}", s, "s", "reference tool (quoted, not this run)", 237.0)
        row("6", f"bake wall, page cache {c}", s, "s", "cp of the same input", cp)
        row("6", f"bake peak RSS, page cache {c}", mb, "MB", "reference tool (quoted, not this run)", 3.9 * 1024)

    # 7. peak RSS
    for tree in ("uncompressed", "ccob"):
        for cs, cache_mb in (("default", 256), ("16M", 16)):
            kb = med(f"f7.{tree}.{cs}.vmhwm_kb")
            mb = kb and kb / 1024
            lim = 64 + cache_mb
            row("7", f"daemon VmHWM, {tree} source, cache {cs}", mb, "MB", "limit 64 MB + cache", lim,
                f"≤ {lim} MB", ok(mb is not None and mb <= lim))
    for cs, label in (("16M-1thread", "cache 16M, --threads 1 (diagnostic)"),
                      ("16M-mmapthreshold", "cache 16M, MALLOC_MMAP_THRESHOLD_=131072 (diagnostic)")):
        kb = med(f"f7.ccob.{cs}.vmhwm_kb")
        if kb is not None:
            row("7", f"daemon VmHWM, ccob source, {label}", kb / 1024, "MB", "limit 64 MB + cache", 80)

    # 8. CCOB
    for phase, label, tgt in (("cold", "archive first read, cold", None),
                              ("warm_pagecache", "archive warm read (kernel page cache)", 1.10),
                              ("warm_daemon", "archive warm read through the daemon (O_DIRECT)", 1.10)):
        u = med(f"f8.{phase}.uncompressed.secs")
        for v, vl in (("ccob", "CCOB, cache 256M"), ("ccob2g", "CCOB, cache 2G")):
            kk = med(f"f8.{phase}.{v}.secs")
            if kk is None:
                continue
            r = kk / u if kk and u else None
            met = ok(r is not None and r <= tgt) if tgt else None
            row("8", f"{label}: {vl}", kk, "s", "uncompressed source", u, "≤ 1.10" if tgt else "—", met)
    su, sc = one("f8.size.uncompressed"), one("f8.size.ccob")
    same = one("f8.identical")
    rows.append(("8", "archive size CCOB vs uncompressed", f"{sc:.0f} B" if sc else "n/a", "uncompressed",
                 f"{su:.0f} B" if su else "n/a", (sc / su) if sc and su else None, "equal",
                 ok(sc == su and sc is not None) + ("" if same else " (bytes differ!)")))

    # 9. CCOB source, --archive-compression auto, cache directory
    za, fr, ht = one("f9.size.auto"), one("f9.frames.zstd3_bytes"), one("f9.size.header_and_toc")
    if za is not None:
        base = fr + ht if fr is not None and ht is not None else None
        r = za / base if base else None
        rows.append(("9", f"auto archive bytes ({one('f9.frames.objects'):.0f} code objects)", f"{za:.0f} B",
                     "sum of zstd -3 frames + header + TOC", f"{base:.0f} B" if base else "n/a", r, "≤ 1.05",
                     ok(r is not None and r <= 1.05)))
        nb = one("f9.size.none")
        rows.append(("9", "auto archive bytes", f"{za:.0f} B", "none archive of the same objects",
                     f"{nb:.0f} B" if nb else "n/a", za / nb if nb else None, "—", None))
        same = one("f9.resolve_identical")
        rows.append(("9", "both loaders resolve the auto archive to the original's code objects",
                     f"{one('f9.resolve.code_objects') or 0:.0f} objects", "", "", None, "identical",
                     ok(same == 1)))
        dec, comp = med("f9.baseline.decode.secs"), med("f9.baseline.compress.secs")
        st = med("f9.cold.stat.us")
        base = dec + comp if dec is not None and comp is not None else None
        st_s = st / 1e6 if st is not None else None
        row("9", "archive first stat, cold cache dir", st_s, "s", "one decode (bake none) + zstd -3 of the objects",
            base, "≤ 1.5", ok(st_s is not None and base and st_s / base <= 1.5))
        ws = med("f9.warm.stat.us")
        row("9", "archive first stat after a fresh mount, warm cache dir", ws and ws / 1000, "ms", "", None,
            "≤ 20 ms", ok(ws is not None and ws <= 20000))
        wcs = med("f9.warmcold.stat.us")
        row("9", "same, page cache dropped first", wcs and wcs / 1000, "ms", "", None, "≤ 20 ms",
            ok(wcs is not None and wcs <= 20000))
        for key, label, bkey in (("f9.warm.read.mbps", "archive first read, warm cache dir (page cache warm)",
                                  "f9.plain.warm.mbps"),
                                 ("f9.warmcold.read.mbps", "archive first read, warm cache dir, page cache cold",
                                  "f9.plain.cold.mbps"),
                                 ("f9.cold.read.mbps", "archive first read right after the cold first stat",
                                  "f9.plain.warm.mbps")):
            kv, bv = med(key), med(bkey)
            tgt = "≥ 0.80" if key != "f9.cold.read.mbps" else "—"
            row("9", label, kv, "MB/s", "plain file of the same size, direct", bv, tgt,
                ok(kv is not None and bv and kv / bv >= 0.8) if tgt != "—" else None)
        for key, label in (("f9.slim.src_auto", "plain source"), ("f9.slim.ccob_none", "CCOB source, archives none"),
                           ("f9.slim.ccob_auto", "CCOB source, archives auto")):
            v = one(key)
            if v is not None:
                rows.append(("9", f"view / source bytes (library + archive, du), {label}", f"{v:.3f}",
                             "source library", "1", v, "—", None))
        for key, label in (("f9.cold.vmhwm_kb", "cold cache dir"), ("f9.warm.vmhwm_kb", "warm cache dir")):
            kb = med(key)
            row("9", f"daemon VmHWM, CCOB source, auto, {label}", kb and kb / 1024, "MB", "limit 64 MB + cache",
                320, "≤ 320 MB", ok(kb is not None and kb / 1024 <= 320))

    # 10. process start (bench/start.sh): one process dlopen()s the library
    # through the test HIP runtime, which resolves its code objects.
    for c in ("cold", "warm"):
        fat = med(f"f10.{c}.fat.us")
        for v, label in (("view", "view (cache dir from a previous mount)"), ("view-nocache", "view, --cache-dir none"),
                         ("baked", "baked tree")):
            kk = med(f"f10.{c}.{v}.us")
            if kk is None:
                continue
            tgt, met = "—", None
            if v == "view" and c == "cold":
                tgt, met = "≤ 1.20", ok(fat is not None and kk / fat <= 1.20)
            row("10", f"process start (dlopen + resolve), {label}, page cache {c}", kk / 1000, "ms",
                "fat original on local disk", fat and fat / 1000, tgt, met)
    same = one("f10.identical")
    if same is not None:
        rows.append(("10", "view and baked tree resolve to the fat original's code objects, every call OK",
                     f"{one('f10.code_objects') or 0:.0f} objects", "", "", None, "identical",
                     ok(same == 1 and one("f10.not_ok") == 0)))

    # 11. large tree walks (bench/tree.sh). The targets compare with plainfs
    # over the same source (issue 23's baseline: the daemon's cost over a
    # plain passthrough of what it serves). The view hides the other
    # architectures' files, so plainfs over a tree of exactly the entries
    # the view shows (plainfs-same) is shown too, as the stricter reference.
    nf, nd = one("f11.source.files"), one("f11.source.dirs")
    walks = (("readdir", "`find -type f` (readdir only)"), ("stat", "`find -type f -printf %s` (readdir + stat)"))
    for c in ("cold", "warm"):
        for kind, label in walks:
            p = med(f"f11.{c}.{kind}.plainfs.secs")
            for v, vl, tgt in (("kpackfs", "--cache-dir none", {"readdir": 1.2, "stat": 1.3}.get(kind)),
                               ("kpackfs-colddir", "empty cache dir", None),
                               ("kpackfs-warmdir", "warm cache dir after a remount", 1.1 if kind == "stat" else None)):
                kk = med(f"f11.{c}.{kind}.{v}.secs")
                if kk is None:
                    continue
                tgt = tgt if c == "cold" else None
                met = ok(p is not None and kk / p <= tgt) if tgt else None
                row("11", f"walk of a {nf or 0:.0f}-file / {nd or 0:.0f}-dir install tree, {label}, {vl}, page cache {c}",
                    kk, "s", "plainfs over the whole source", p, f"≤ {tgt:.2f}" if tgt else "—", met)
            kk = med(f"f11.{c}.{kind}.kpackfs.secs")
            for b, bl in (("plainfs-same", "plainfs over the entries the view shows"), ("direct", "direct (the whole source)")):
                bb = med(f"f11.{c}.{kind}.{b}.secs")
                if kk is not None and bb is not None:
                    row("11", f"same walk, {label}, --cache-dir none, page cache {c}", kk, "s", bl, bb)

    fp, pr = med("f11.cold.first_pages.secs"), med("f11.cold.readdir.plainfs.secs")
    if fp is not None:
        row("11", "first page of every source file, 16 threads, page cache cold (bench/tools/first_pages.c: "
            "the least an exact listing reads)", fp, "s", "plainfs, `find -type f` cold, whole source", pr)

    # ---- output
    def ratio_s(r, t="—"):
        # 3 decimals where a target decides, so rounding never hides why.
        return "" if r is None else (f"{r:.2f}" if t == "—" else f"{r:.3f}")

    hdr = "| # | measure | kpackfs | baseline | baseline value | ratio | target | status |\n|---|---|---|---|---|---|---|---|\n"
    table = hdr + "".join(
        f"| {f} | {m} | {k} | {bn} | {bv} | {ratio_s(r, t)} | {t} | {met or ''} |\n" for f, m, k, bn, bv, r, t, met in rows)
    met_rows = [r for r in rows if r[7]]
    missed = [r for r in met_rows if "MISSED" in r[7]]
    print(table)
    print(f"targets: {len(met_rows) - len(missed)} met, {len(missed)} missed"
          + (" (smoke mode: figures are not meaningful)" if smoke else ""))

    out = []
    out.append(f"# kpackfs benchmark results{' (SMOKE RUN — tiny inputs, figures not meaningful)' if smoke else ''}\n")
    out.append("Generated by `bash bench/run.sh" + (" --smoke" if smoke else "") + "` (bench/report.py). "
               "Every ratio is kpackfs against a baseline measured in the same run (medians). "
               "For times (ms, s, µs) a ratio below 1 means kpackfs is faster; for throughputs (MB/s) "
               "above 1 means kpackfs is faster. Baselines: `direct` = the source file read from local disk; "
               "`plainfs` = the same source file through `bench/plainfs` (the simplest fuser 0.18 read-only "
               "passthrough: TTL 1 s, no FOPEN_KEEP_CACHE, no kernel passthrough, 4 workers on cloned fds).\n")
    out.append("## Machine\n")
    for k, label in (("date", "date"), ("cpu", "CPU"), ("nproc", "nproc"), ("ram", "RAM"), ("kernel", "kernel"),
                     ("os", "OS"), ("disk", "work-dir filesystem (df: source fstype size used avail)"),
                     ("lsblk", "block devices (lsblk: name size rotational type model)"),
                     ("damon", "kernel proactive reclaim (DAMON)"),
                     ("kpackfs", "kpackfs measured (commit, hash of uncommitted changes to core/ fs-linux/ Cargo.lock)"), ("load", "load average (1, 5, 15 min)")):
        out.append(f"* {label}: {meta.get(k, '?')}")
    out.append(f"* target selection: `{meta.get('arch')}`; main library: `{meta.get('lib')}`")
    busy = [k.split(".f")[1] for k in raw if k.startswith("busy.f")]
    out.append("* background work (fuzzing, tests, compiles) seen while figures ran (sampled every 2 s): "
               + (", ".join(busy) + " — those figures are less reliable" if busy else "none"))
    tot = one("suite.secs")
    if tot:
        out.append(f"* suite wall time: {tot:.0f} s")
    out.append("")
    out.append("## Results\n")
    out.append(table)
    out.append(f"Targets: **{len(met_rows) - len(missed)} met, {len(missed)} missed**.\n")
    if missed:
        out.append("Missed:\n")
        for f, m, k, bn, bv, r, t, met in missed:
            out.append(f"* figure {f}: {m}: {k} vs {bn} {bv} (ratio {ratio_s(r, t)}; target {t})")
        out.append("")
    if a.analysis and not smoke:
        try:
            out.append(open(a.analysis).read().rstrip() + "\n")
        except FileNotFoundError:
            pass
    views = os.path.join(os.path.dirname(os.path.abspath(a.out)), "RESULTS-views.md")
    if not smoke and os.path.exists(views):
        out.append("## Operations: several views, soak (bench/views.sh, run separately; its own ratios)\n")
        out.append(open(views).read().rstrip().replace("### ", "#### ") + "\n")
    split = os.path.join(os.path.dirname(os.path.abspath(a.out)), "RESULTS-split.md")
    if not smoke and os.path.exists(split):
        out.append("## Packagers: split, verify, split-wheel (bench/split.sh, run separately; its own ratios)\n")
        out.append(open(split).read().rstrip().replace("### ", "#### ") + "\n")
    out.append("## Commands\n")
    out.append("Paths: `src` = bench/work/MODE/src (hard links of the Debian libraries, a random data file), "
               "`MNT` = a mountpoint under bench/work/MODE/mnt, `bt` = bench/tools/bt.c (timing helper), "
               "`stub` = tests/hip-stub built as in its README. Cold = `sync; echo 3 > /proc/sys/vm/drop_caches` "
               "right before the measured operation. This is a VM whose host caches the virtual disk: a first read "
               "of a file runs at disk speed (0.46 GB/s measured), later reads after dropping the guest's caches at "
               "~2 GB/s; run.sh therefore reads every input once before measuring and rotates which variant goes "
               "first, so 'cold' = guest page cache empty, host cache warm, the same for every variant.\n")
    out.append("```")
    out.extend(l.rstrip("\n") for l in open(a.commands))
    out.append("```\n")
    out.append("## Raw numbers\n")
    out.append("Every sample, in run order (`key: median | samples`). Units are in the key names "
               "(`us` µs, `mbps` MB/s with MB = 10^6 B, `secs`, `kb` KiB, `mb` MiB, `daemon_cpu_s` = daemon "
               "user+system CPU during the measured operation, `daemon_rchar` = bytes the daemon read by syscalls).\n")
    out.append("```")
    for k, v in raw.items():
        vs = " ".join(f"{x:g}" for x in v)
        out.append(f"{k}: {statistics.median(v):g} | {vs}")
    out.append("```")
    with open(a.out, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
