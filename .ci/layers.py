#!/usr/bin/env python3
"""Checks the layering of kpackfs-core and the adapters (issue 22).

Builds the import graph between modules from `crate::` and `super::`
paths in the sources (use statements and inline paths), at the
granularity of one node per file (a `mod.rs` is its folder), and fails
when:
- there is an import cycle between two nodes that are not parent and
  child (a folder's mod.rs declaring its children is not an import);
- a file under a lower layer imports a higher one (the LAYERS table);
- packaging, resolve or archs import the view.

Run from the repository root: `python3 .ci/layers.py`.
"""
import os
import re
import sys

# Lower number = lower layer. A module may import only modules of its own
# or a lower layer.
LAYERS = {
    "io": 0, "layout": 0, "layout_tests": 0, "source": 0, "staging": 0, "copy": 0,
    "formats": 1,
    "plan": 2, "data_cache": 2, "machine": 2, "machine_tests": 2,
    "view": 3, "namespace": 3,
    "tools": 4, "packaging": 4,
}
FORBIDDEN = [
    ("packaging", "view"), ("tools::resolve", "view"), ("tools::archs", "view"),
]

PATH = re.compile(r"\b(crate|super)((?:::[a-z_][a-z0-9_]*)+)")


def module_of(root, path):
    rel = os.path.relpath(path, root)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return rel


def resolve(parts, nodes):
    """The longest prefix of `parts` that is a node."""
    for n in range(len(parts), 0, -1):
        if tuple(parts[:n]) in nodes:
            return tuple(parts[:n])
    return None


def check(root):
    files = {}
    for d, _, fs in os.walk(root):
        for f in fs:
            if f.endswith(".rs"):
                p = os.path.join(d, f)
                files[tuple(module_of(root, p))] = p
    nodes = set(files)
    edges = {}
    for mod, p in files.items():
        text = open(p, encoding="utf-8").read()
        text = re.sub(r"//[^\n]*", "", text)
        # Unit tests may use anything (a test of the view may build its
        # input with a tool); only the code itself is layered.
        cut = re.search(r"#\[cfg\(test\)\]\s*mod tests\b", text)
        if cut:
            text = text[: cut.start()]
        if p.endswith("_tests.rs"):
            continue
        for m in PATH.finditer(text):
            kind, rest = m.group(1), m.group(2).split("::")[1:]
            if kind == "crate":
                parts = rest
            else:
                base = list(mod)[:-1]
                while rest and rest[0] == "super":
                    rest = rest[1:]
                    base = base[:-1]
                parts = base + rest
            tgt = resolve(parts, nodes)
            if tgt and tgt != mod and not (tgt == mod[: len(tgt)] or mod == tgt[: len(mod)]):
                edges.setdefault(mod, set()).add(tgt)
    return nodes, edges


def sccs(nodes, edges):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def name(m):
    return "::".join(m) or "crate"


def main():
    problems = []
    crates = {"core/src": True, "fs-linux/src": False, "fs-windows/src": False}
    if os.path.isdir("cli/src"):
        crates["cli/src"] = False
    for root, layered in crates.items():
        if not os.path.isdir(root):
            continue
        nodes, edges = check(root)
        for comp in sccs(nodes, edges):
            problems.append(f"{root}: import cycle: " + " <-> ".join(sorted(name(c) for c in comp)))
        if not layered:
            continue
        for a, ts in edges.items():
            for b in ts:
                la, lb = LAYERS.get(a[0]) if a else None, LAYERS.get(b[0]) if b else None
                if la is not None and lb is not None and lb > la:
                    problems.append(f"{root}: {name(a)} (layer {la}) imports {name(b)} (layer {lb})")
                for fa, fb in FORBIDDEN:
                    if name(a).startswith(fa) and name(b).startswith(fb):
                        problems.append(f"{root}: {name(a)} imports {name(b)}")
        unknown = sorted({m[0] for m in nodes if m and m[0] not in LAYERS})
        if unknown:
            problems.append(f"{root}: modules missing from the LAYERS table: {', '.join(unknown)}")
    for p in problems:
        print(p)
    if problems:
        sys.exit(1)
    print("layers: no import cycles, no upward imports")


if __name__ == "__main__":
    main()
