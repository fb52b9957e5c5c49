"""The main loop of each kernel in `cuobjdump -sass` output: how many instructions it holds, and which opcodes.

    cuobjdump -sass file.o > file.sass
    python benchmarks/sass_loops.py file.sass [--kernel NAME_PART] [--against other.sass]

A loop is the span from a backward branch's target to the branch. The main loop of a tensor-core kernel is the
shortest loop that holds a wgmma (HGMMA) or an mma.sync (HMMA); of any other kernel, the shortest loop that
holds an FFMA. For each kernel whose mangled name contains --kernel (all kernels without it) the script prints
that loop's length and its opcode counts; with --against, the same kernel's loop in the other file and the
opcodes whose counts differ. Static code only: a loop's length is the instructions a warp issues an iteration
where no branch inside it is taken, not their stalls; for rung 22 it matched ncu's executed-instruction counts
(benchmarks/NOTES.md, "The exact epilogue's cost, counted by ncu"). A kernel built for several architectures in
one object is counted once (the last).
"""
from __future__ import annotations

import argparse
import collections
import re
import sys

FUNCTION = re.compile(r"Function : (\S+)")
INSTRUCTION = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
BRANCH = re.compile(r"\bBRA(?:\.[A-Z.]+)?\s+(?:\S+\s+)?0x([0-9a-f]+)")  # BRA, BRA.U.ANY, BRA.DIV, ...


def functions(path: str) -> dict[str, list[tuple[int, str]]]:
    """Each function's (address, instruction text) list, in order."""
    found: dict[str, list[tuple[int, str]]] = {}
    current = None
    with open(path) as sass:
        for line in sass:
            named = FUNCTION.search(line)
            if named:
                current = named.group(1)
                found[current] = []
                continue
            instruction = INSTRUCTION.match(line)
            if instruction and current is not None:
                found[current].append((int(instruction.group(1), 16), instruction.group(2)))
    return found


def opcode(text: str) -> str:
    """The opcode with its modifiers, past a predicate guard (@P0, @!UP1)."""
    words = text.split()
    return words[1] if words[0].startswith("@") and len(words) > 1 else words[0]


def main_loop(code: list[tuple[int, str]]) -> list[str] | None:
    """The shortest backward-branch span holding the kernel's math, as instruction texts; None if there is none."""
    index = {address: i for i, (address, _) in enumerate(code)}
    spans = []
    for i, (address, text) in enumerate(code):
        branch = BRANCH.search(text)
        if branch and int(branch.group(1), 16) < address and int(branch.group(1), 16) in index:
            spans.append([t for _, t in code[index[int(branch.group(1), 16)]:i + 1]])
    for marks in (("HGMMA", "HMMA"), ("FFMA",)):
        holding = [span for span in spans if any(opcode(t).split(".")[0] in marks for t in span)]
        if holding:
            return min(holding, key=len)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sass")
    parser.add_argument("--kernel", default="")
    parser.add_argument("--against")
    args = parser.parse_args()
    mine = functions(args.sass)
    other = functions(args.against) if args.against else {}
    shown = 0
    for name, code in mine.items():
        if args.kernel not in name:
            continue
        loop = main_loop(code)
        if loop is None:
            continue
        shown += 1
        counts = collections.Counter(opcode(t) for t in loop)
        print(f"{name}\n  main loop: {len(loop)} instructions")
        if args.against:
            theirs = main_loop(other.get(name, []))
            if theirs is None:
                print("  not in the other file (or no main loop there)")
                continue
            their_counts = collections.Counter(opcode(t) for t in theirs)
            print(f"  the other file's: {len(theirs)} instructions")
            for op in sorted(set(counts) | set(their_counts)):
                if counts[op] != their_counts[op]:
                    print(f"    {op:<20} {counts[op]:>4} here, {their_counts[op]:>4} there")
        else:
            for op, n in counts.most_common():
                print(f"    {op:<20} {n:>4}")
    if shown == 0:
        print(f"no kernel with a main loop matches {args.kernel!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
