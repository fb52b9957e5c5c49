"""Regenerates the tables in the project's documents (DOCUMENTS: README.md, the ladder's README, the benchmarks'
README and docs/) from their sources, never by hand. Each table sits between its markers in whichever documents
hold them, and each must be in one at least:

- the kernel list, from the registry (fastsgemm.kernels());
- the ladder results, from committed benchmark data (benchmarks/results/ladder-h100.json; the counters beside
  them from benchmarks/results/evidence-h100.json);
- what kernel="auto" ran at each shape of that sweep, against the fastest FP32-accurate rung there;
- the error against float64 as K grows, from benchmarks/results/numerics-h200.json, and the FP32-accurate paths'
  errors by input class, from benchmarks/results/numerics-h100.json;
- the batched products against torch.matmul, from benchmarks/results/batched-h100.json (benchmarks/batched.py);
- how much each rung's file differs from the one before, from the rung files themselves (kernels/ladder/);
- the SIMT rungs on the H200, each against the rung before it, from benchmarks/results/ladder-h200.json;
- fastsgemm.torch.Linear against torch.nn.Linear, from benchmarks/results/torch-layer-h100.json
  (benchmarks/torch_layer.py).

    python benchmarks/readme_tables.py          # rewrite the documents in place
    python benchmarks/readme_tables.py --check  # exit 1 if one is stale
"""
import argparse
import json
import sys
from pathlib import Path

import fastsgemm
from fastsgemm.bench import auto_verdicts

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCUMENTS = [README, ROOT / "kernels" / "ladder" / "README.md", ROOT / "benchmarks" / "README.md",
             ROOT / "docs" / "guide.md", ROOT / "docs" / "guarantees.md"]
RESULTS = ROOT / "benchmarks" / "results" / "ladder-h100.json"


def kernel_table():
    lines = ["| rung | name | device | the idea |", "|---:|---|---|---|"]
    for k in fastsgemm.kernels():
        rung = "-" if k.rung is None else str(k.rung)
        device = "host" if k.device == "cpu" else "CUDA"
        lines.append(f"| {rung} | `{k.name}` | {device} | {k.idea} |")
    configs = [(f"{k.name}:{c.name}", c.shape, "" if c.source == k.source else f" (`{c.source}`)")
               for k in fastsgemm.kernels() for c in k.configs]
    if configs:
        lines += ["", "Other configurations, for `kernel=` and the tuning behind `auto` (in the rung's file, or in the "
                  "engine's where named):", ""]
        lines += [f"- `{name}`: {shape}{where}" for name, shape, where in configs]
    return "\n".join(lines)


def compact(value):
    """A counter's value in a few digits: 4.29 G, 134 M, 0.24, 92.1."""
    if value is None:
        return "-"
    for scale, unit in ((1e9, " G"), (1e6, " M"), (1e3, " k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


def evidence_cells(path=RESULTS.parent / "evidence-h100.json"):
    """kernel -> (what the counter counts, 'before -> this rung'), from one of benchmarks/evidence.py's committed
    runs."""
    if not path.exists():
        return {}
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import evidence  # noqa: E402: benchmarks/evidence.py, next to this script

    data = json.loads(path.read_text())
    values = {r["kernel"]: r["metrics"] for r in data["rows"]}
    cells = {}
    ladder = [k.name for k in fastsgemm.kernels() if k.rung is not None and k.device == "cuda"]
    for name, ev in data["meta"]["evidence"].items():
        if name not in values:
            continue
        before = evidence.against(name)
        # A rung added after the committed run has no counters: read against the nearest earlier rung that has them.
        while before is not None and before not in values and ladder.index(before) > 0:
            before = ladder[ladder.index(before) - 1]
        after = compact(evidence.value_of(ev["counter"], values[name]))
        was = compact(evidence.value_of(ev["counter"], values[before])) if before in values else None
        cells[name] = (ev["what"], f"{was} (`{before}`) -> {after}" if was else after)
    return cells


def merged_rows_note(meta, rows, ratio):
    """The sentence that names the rows merged into a sweep from runs of their own (meta["merged_rows"]), among the
    rows shown: their `ratio` to cuBLAS is to the cuBLAS of that run, not to the table's cuBLAS row. Empty where
    none is shown."""
    merged = []
    for m in meta.get("merged_rows", []):
        names = [k for k in m["kernels"] if any(r["kernel"] == k for r in rows)]
        if not names:
            continue
        timing = {(r["repeats"], r["warmup"]) for r in rows if r["kernel"] in names}
        how = "".join(f"; median of {n} after {w} warm-ups" for n, w in sorted(timing)
                      if (n, w) != (meta["repeats"], meta["warmup"]))
        merged.append(f"{', '.join(f'`{k}`' for k in names)} (`{m['source']}`{how})")
    if not merged:
        return []
    return ["", f"Rows from runs of their own on the same GPU kind, each one's {ratio} taken against cuBLAS timed in "
                "that run: " + "; ".join(merged) + "."]


def ladder_table(path=RESULTS, shape=(4096, 4096, 4096)):
    if not path.exists():
        return "(no committed benchmark data yet)"
    data = json.loads(path.read_text())
    meta, rows = data["meta"], data["rows"]
    picked = [r for r in rows if (r["M"], r["N"], r["K"]) == shape and "skipped" not in r and r["kernel"] != "auto"]
    if not picked:
        return f"(the committed data has no {shape[0]}x{shape[1]}x{shape[2]} rows)"
    order = {k.name: i for i, k in enumerate(fastsgemm.kernels())}
    picked.sort(key=lambda r: order.get(r["kernel"], len(order)))
    device = meta["device"]
    lines = [
        f"{device['name']}, {shape[0]}x{shape[1]}x{shape[2]}, median of {meta['repeats']} CUDA-event timings "
        f"after {meta['warmup']} warm-ups, random inputs (`benchmarks/results/{path.name}`, whose metadata names the "
        f"commit):",
        "",
        "| kernel | GFLOP/s | % of cuBLAS | SM clock (MHz) | % of FP32 peak at that clock | the counter its idea moves "
        "| before -> this rung |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    evidence = evidence_cells()
    for r in picked:
        peak = f"{100 * r['gflops'] / r['peak_gflops_at_clock']:.1f}" if r.get("peak_gflops_at_clock") else "-"
        what, change = evidence.get(r["kernel"], ("", ""))
        lines.append(f"| `{r['kernel']}` | {r['gflops']:,.0f} | {100 * r['ratio_to_cublas']:.1f} | "
                     f"{r.get('sm_clock_mhz') or '-'} | {peak} | {what} | {change} |")
    shown = {r["kernel"] for r in picked}
    lines += merged_rows_note(meta, picked, "% of cuBLAS")
    absent = [k.name for k in fastsgemm.kernels() if k.rung is not None and k.device == "cuda" and k.name not in shown]
    if absent:
        lines += ["", "Rungs added after this sweep, with no row here (their H200 figures and counters are in "
                      "`kernels/ladder/README.md`): " + ", ".join(f"`{k}`" for k in absent) + "."]
    if evidence:
        data = json.loads((RESULTS.parent / "evidence-h100.json").read_text())
        which = data["meta"].get("profiled", "the fifth launch of the run: each rung's second call, except for tf32 "
                                 "and tf32x3, whose calls also launch a pack pass: their first call's GEMM")
        lines += ["", f"The counters: Nsight Compute on the H100 at 4096^3 on {which} (`python benchmarks/evidence.py`, "
                  "`benchmarks/results/evidence-h100.json`); `benchmarks/profile.sh RUNG` names a rung's counter and "
                  "prints it with the rest of its profile."]
        import evidence as counters  # noqa: E402: benchmarks/evidence.py (evidence_cells put benchmarks/ on the path)
        rungs = {k.name for k in fastsgemm.kernels() if k.rung is not None}
        for name in (r["kernel"] for r in picked if r["kernel"] in rungs and r["kernel"] not in evidence):
            why = counters.NO_COUNTER.get(name, "not profiled in this run (`benchmarks/evidence.py` has no counter for it)")
            lines[-1] += f" No counter for `{name}`: {why}."
    return "\n".join(lines)


def auto_table(path=RESULTS):
    if not path.exists():
        return "(no committed benchmark data yet)"
    data = json.loads(path.read_text())
    verdicts = auto_verdicts(data["rows"])
    if not verdicts:
        return "(the committed data has no kernel=\"auto\" rows)"
    lines = [
        f"{data['meta']['device']['name']}, the same sweep: what `auto` ran, "
        "against the fastest FP32-accurate rung timed at that shape (TF32 rungs excluded).",
        "",
        "| shape | `auto` ran | GFLOP/s | fastest FP32 rung in the sweep | GFLOP/s | auto / fastest |",
        "|---|---|---:|---|---:|---:|",
    ]
    for v in verdicts:
        lines.append(f"| {v['shape']} | `{v['picked']}` | {v['auto_gflops']:,.0f} | `{v['fastest']}` | "
                     f"{v['fastest_gflops']:,.0f} | {v['ratio']:.3f} |")
    return "\n".join(lines)


def numerics_table(path=RESULTS.parent / "numerics-h200.json"):
    if not path.exists():
        return "(no committed numerics data yet)"
    rows = json.loads(path.read_text())["rows"]
    ks = sorted({r["K"] for r in rows})
    error = {(r["kernel"], r["K"]): r["rel_error"] for r in rows}
    # The SIMT ladder rungs give the same bits (same summation order); cpu may differ in the last place.
    ladder = [k.name for k in fastsgemm.kernels()
              if k.rung is not None and not k.tensor_cores and (k.name, ks[0]) in error]
    others = [name for k in fastsgemm.kernels() if k.name not in ladder and k.name != "cublas" and k.device == "cuda"
              for name in (k.name, *(f"{k.name}:{c.name}" for c in k.configs)) if (name, ks[0]) in error]
    header = [f"ladder rungs (`{ladder[0]}` and the rest)", "cuBLAS FP32", "ratio", *(f"`{n}`" for n in others)]
    lines = ["| K | " + " | ".join(header) + " |", "|---:|" + "---:|" * len(header)]
    for k in ks:
        worst = max(error[(n, k)] for n in ladder if (n, k) in error)
        cells = [f"{worst:.2e}", f"{error[('cublas', k)]:.2e}", f"{worst / error[('cublas', k)]:.1f}",
                 *(f"{error[(n, k)]:.2e}" if (n, k) in error else "-" for n in others)]
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def numerics_classes_table(path=RESULTS.parent / "numerics-h100.json"):
    """The FP32-accurate paths by input class (benchmarks/numerics.py's INPUT_CLASSES): each error against float64
    as a Frobenius ratio and against |A| |B|; for the Inf and NaN class, whether they fall where numpy.matmul's do."""
    rows = json.loads(path.read_text()).get("classes") if path.exists() else None
    if not rows:
        return "(no committed data by input class yet)"
    kernels = list(dict.fromkeys(r["kernel"] for r in rows))
    cells = {(r["class"], r["kernel"]): r for r in rows}
    lines = ["| input | " + " | ".join("cuBLAS FP32" if k == "cublas" else f"`{k}`" for k in kernels) + " |",
             "|---|" + "---:|" * len(kernels)]
    for name in dict.fromkeys(r["class"] for r in rows):
        row = []
        for kernel in kernels:
            r = cells.get((name, kernel))
            if r is None:
                row.append("-")
            elif "nonfinite_as_numpy" in r:
                row.append(f"{'as numpy' if r['nonfinite_as_numpy'] else 'NOT as numpy'}; {r['finite_vs_abs_product']:.1e}")
            else:
                row.append(f"{r['rel_error']:.1e} / {r['vs_abs_product']:.1e}")
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    return "\n".join(lines)


# Kernels renamed when the ladder was restructured (f5aa000): data measured before it names them the old way.
RENAMED = {"tf32x3:mma.sync": "tf32x3_mma", "tf32:mma.sync": "tf32_mma", "warptile": "warptile:waves",
           "warptile:128x256x16": "warptile", "doublebuffer": "regbuffer", "tile2d": "tile2d:walked"}
RENAMED_AT = "f5aa000"


def per_call_table(path=RESULTS.parent / "overhead-h100.json"):
    """Per-call wall time at the small sizes (python -m fastsgemm.bench --overhead), fastsgemm beside the framework's
    own matmul on the same operands in the same run."""
    data = json.loads(path.read_text())
    meta, rows = data["meta"], data["rows"]
    # The per-call data predates the restructure when its kernel names are the old ones; they are shown renamed.
    renamed = any(r.get("picked") in RENAMED and r["picked"] not in fastsgemm.KERNELS for r in rows)
    note = f"; kernel names as renamed at {RENAMED_AT}" if renamed else ""
    name = (lambda picked: RENAMED.get(picked, picked)) if renamed else (lambda picked: picked)
    lines = [f"{meta['device']['name']}: wall clock over {rows[0]['calls']} calls in a "
             f"loop with one synchronize at the end, median of {rows[0]['rounds']} loops, microseconds per call "
             f"(`{path.relative_to(ROOT).as_posix()}`{note}).", "",
             "| M=N=K | operands | `out=` | fastsgemm `auto` | kernel it ran | its GPU time | framework matmul | "
             "auto / matmul | `cublas` rung |",
             "|---:|---|---|---:|---|---:|---:|---:|---:|"]
    def find(m, operands, out, path_name):
        return next((r for r in rows if (r["M"], r["operands"], r["out"], r["path"]) == (m, operands, out, path_name)),
                    None)
    for m in sorted({r["M"] for r in rows}):
        for operands in ("torch", "cupy", "fastsgemm"):
            for out in (True, False):
                auto = find(m, operands, out, "fastsgemm auto")
                if auto is None:
                    continue
                matmul = find(m, operands, out, f"{operands}.matmul")
                cublas = find(m, operands, out, "fastsgemm cublas")
                framework = f"{matmul['us_per_call']:.1f}" if matmul else "-"
                ratio = f"{auto['us_per_call'] / matmul['us_per_call']:.2f}" if matmul else "-"
                lines.append(f"| {m} | {operands if operands != 'fastsgemm' else 'DeviceArray'} | {'yes' if out else 'no'} "
                             f"| {auto['us_per_call']:.1f} | `{name(auto['picked'])}` | {auto['kernel_gpu_us']:.1f} | "
                             f"{framework} | {ratio} | {cublas['us_per_call']:.1f} |")
    return "\n".join(lines)


def batched_table(path=RESULTS.parent / "batched-h100.json"):
    """Each stack: auto's and the fastest kernel's ratio to torch.matmul in the same run, from benchmarks/batched.py."""
    if not path.exists():
        return "(no committed batched data yet)"
    data = json.loads(path.read_text())
    meta, cases = data["meta"], {}
    for row in data["rows"]:
        cases.setdefault(row["case"], []).append(row)
    lines = [f"{meta['device']}, time per call: CUDA events around a loop of "
             f"{meta['calls']} calls, median of {meta['rounds']} rounds (the methods in a new order each), "
             f"after a warm-up of {meta['warmup_seconds']} s each (`benchmarks/results/{path.name}`):", "",
             "| stack | `auto` | fastest kernel | `torch.matmul` | streaming floor |", "|---|---:|---:|---:|---:|"]

    def duration(ms):
        return f"{ms * 1e3:.0f} us" if ms < 1 else f"{ms:.2f} ms"

    for case, rows in cases.items():
        torch_row = next(r for r in rows if r["method"] == "torch.matmul")
        auto = next(r for r in rows if r["method"] == "fastsgemm auto")
        best = max((r for r in rows if r["method"].startswith("fastsgemm ") and r is not auto),
                   key=lambda r: r["ratio_to_torch"])
        # torch.add on the same operands: the same bytes read and written, no products (runs before 2026-11-27 lack it)
        floor = next((r for r in rows if r["method"] == "torch.add (the same bytes)"), None)
        floor_time = f"{duration(floor['ms'])} ({floor['ratio_to_torch']:.2f}x)" if floor else "-"
        lines.append(f"| {case} | {auto['ratio_to_torch']:.2f}x ({duration(auto['ms'])}) | "
                     f"{best['ratio_to_torch']:.2f}x (`{best['method'].removeprefix('fastsgemm ')}`) | "
                     f"{duration(torch_row['ms'])} | {floor_time} |")
    return "\n".join(lines)


def torch_table(path=RESULTS.parent / "torch-layer-h100.json"):
    """fastsgemm.torch.Linear against torch.nn.Linear, per call and per step, eager and compiled, from
    benchmarks/torch_layer.py."""
    data = json.loads(path.read_text())
    meta = data["meta"]
    lines = [f"{meta['device']}, torch {meta['torch']}, TF32 off: wall clock over a loop with one synchronize at the "
             f"end, median of {meta['rounds']} rounds with torch and fastsgemm alternated "
             f"(`benchmarks/results/{path.name}`, `python benchmarks/torch_layer.py`). The ratio is torch's time over "
             "fastsgemm's: above 1, fastsgemm is faster. The control is torch's own products inside a Python "
             "`torch.autograd.Function`, as fastsgemm's eager backward is one.", "",
             "| case | measured | torch | fastsgemm | ratio | control |", "|---|---|---:|---:|---:|---:|"]

    def duration(us):
        return f"{us:.1f} us" if us < 1000 else f"{us / 1000:.2f} ms"

    for row in data["rows"]:
        times = row["us"]
        control = next((v for k, v in times.items() if k not in ("torch", "fastsgemm")), None)
        control_cell = f"{times['torch'] / control:.2f}x" if control else "-"
        lines.append(f"| {row['case']} | {row['kind']} | {duration(times['torch'])} | {duration(times['fastsgemm'])} | "
                     f"{row['ratio']:.2f}x | {control_cell} |")
    return "\n".join(lines)


def simt_table(path=RESULTS.parent / "ladder-h200.json", shapes=((4096, 4096, 4096), (8192, 8192, 8192))):
    """The SIMT lessons (every rung before the first tensor-core one) on the H200, each against the rung before it:
    TFLOP/s and the ratio to cuBLAS FP32 timed in the same run, from the committed sweep and the runs merged into
    it (meta["merged_rows"])."""
    if not path.exists():
        return "(no committed H200 ladder data yet)"
    data = json.loads(path.read_text())
    kernels = [k for k in fastsgemm.kernels() if k.rung is not None and k.device == "cuda"]
    first_tc = next(i for i, k in enumerate(kernels) if "HMMA" in k.sass or "HGMMA" in k.sass)
    simt = [k.name for k in kernels[:first_tc]]
    rows = {(r["kernel"], r["M"], r["N"], r["K"]): r for r in data["rows"] if "skipped" not in r}
    counters = evidence_cells(RESULTS.parent / "evidence-h200-simt.json")
    head = " | ".join(f"{m}x{n}x{k} TFLOP/s | x cuBLAS | x the rung before" for m, n, k in shapes)
    head += " | the counter its idea moves (4096^3) | before -> this rung"
    lines = [f"{data['meta']['device']['name']}, median of CUDA-event timings, random inputs "
             f"(`benchmarks/results/{path.name}` and the runs its metadata merges in):", "",
             f"| rung | kernel | {head} |", "|---:|---|" + "---:|---:|---:|" * len(shapes) + "---|---|"]
    number = {k.name: k.rung for k in kernels}
    for i, name in enumerate(simt):
        cells = []
        for m, n, k in shapes:
            r = rows.get((name, m, n, k))
            before = rows.get((simt[i - 1], m, n, k)) if i else None
            if r is None:
                cells += ["-", "-", "-"]
                continue
            step = f"{r['gflops'] / before['gflops']:.3f}" if before else "-"
            cells += [f"{r['gflops'] / 1000:.1f}", f"{r['ratio_to_cublas']:.3f}", step]
        cells += list(counters.get(name, ("", "")))
        lines.append(f"| {number[name]} | `{name}` | " + " | ".join(cells) + " |")
    lines += merged_rows_note(data["meta"], [r for r in rows.values() if r["kernel"] in simt and
                                             (r["M"], r["N"], r["K"]) in shapes], "x cuBLAS")
    if counters:
        lines += ["", "The counters: Nsight Compute on the H200 at 4096^3 on each rung's GEMM kernel in its second call "
                      "(`python benchmarks/evidence.py --kernels ...`, `benchmarks/results/evidence-h200-simt.json`)."]
    return "\n".join(lines)


def diff_lines(old, new):
    """The lines `diff old new` marks (< or >): `diff a b | grep -c '^[<>]'`."""
    import subprocess
    done = subprocess.run(["diff", str(old), str(new)], capture_output=True, text=True)
    if done.returncode > 1:
        raise SystemExit(f"diff {old} {new} failed: {done.stderr.strip()}")
    return sum(line.startswith(("<", ">")) for line in done.stdout.splitlines())


def diffs_table(ladder=ROOT / "kernels" / "ladder"):
    """Each rung's file against the one before: lines changed, and whether it includes another rung's file."""
    files = sorted(ladder.glob("[0-9][0-9]_*.cu"))
    lines = ["| rungs | files | lines `diff` marks | includes a rung |", "|---|---|---:|---|"]
    for old, new in zip(files, files[1:]):
        includes = '#include "ladder/' in new.read_text()
        lines.append(f"| {old.name[:2]} -> {new.name[:2]} | `{old.name}` -> `{new.name}` | {diff_lines(old, new)} | "
                     f"{'yes' if includes else 'no'} |")
    return "\n".join(lines)


def markers(name):
    return f"<!-- {name}:start (generated by benchmarks/readme_tables.py) -->", f"<!-- {name}:end -->"


def replace_block(text, name, body):
    """text with every block between `name`'s markers made `body`."""
    start, end = markers(name)
    pieces = text.split(start)
    for i in range(1, len(pieces)):
        if end not in pieces[i]:
            raise SystemExit(f"a {name} start marker without its end marker")
        pieces[i] = f"\n{body}\n{end}" + pieces[i].split(end, 1)[1]
    return start.join(pieces)


BLOCKS = {"kernels": kernel_table, "ladder": ladder_table, "auto": auto_table, "per-call": per_call_table,
          "batched": batched_table, "numerics-classes": numerics_classes_table, "numerics": numerics_table,
          "diffs": diffs_table, "torch": torch_table, "simt": simt_table}


def render(text):
    """text with every table it holds regenerated."""
    for name, table in BLOCKS.items():
        if markers(name)[0] in text:
            text = replace_block(text, name, table())
    return text


def render_all():
    """{document: (current text, regenerated text)}; SystemExit where a table is in no document."""
    texts = {path: path.read_text() for path in DOCUMENTS}
    missing = [name for name in BLOCKS if not any(markers(name)[0] in text for text in texts.values())]
    if missing:
        raise SystemExit(f"no document holds the markers of: {', '.join(missing)}")
    return {path: (text, render(text)) for path, text in texts.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only report whether the documents are current")
    args = parser.parse_args(argv)
    stale = [path for path, (current, fresh) in render_all().items() if fresh != current]
    if args.check:
        for path in stale:
            print(f"{path.relative_to(ROOT)} is stale: run python benchmarks/readme_tables.py", file=sys.stderr)
        return 1 if stale else 0
    for path, (current, fresh) in render_all().items():
        if fresh != current:
            path.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
