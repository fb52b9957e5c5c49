"""The counter that proves each rung's idea, measured with Nsight Compute on every rung and the rung
before it, for the README's ladder table.

    python benchmarks/evidence.py                      # every rung at 4096^3, writes the JSON below
    python benchmarks/evidence.py --out path.json --size 2048x2048x2048
    python benchmarks/evidence.py --show tile2d        # print the counter a rung is judged by
    python benchmarks/evidence.py --kernels tile2d transposed --out path.json   # some rungs only

Each rung names one counter (EVIDENCE below): what its idea changes, and why that change is the idea
(fewer sectors per global request for coalescing, fewer bank conflicts for the padded layout, ...).
The run profiles each rung's GEMM kernel in its second call (benchmarks/profile_one.py runs it twice)
and keeps every counter for every rung, so a rung's counter can be read beside the rung before it.
Needs ncu (Nsight Compute) and a GPU; writes benchmarks/results/evidence-h100.json by default.
"""
import argparse
import csv
import io
import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import fastsgemm

HERE = Path(__file__).resolve().parent

# rung -> (counter, what it counts, what the idea should do to it). A counter may be a sum of metrics ("a+b") or a
# ratio ("a/b"); where metric names differ between GPUs and ncu versions, alternatives are listed with "|" and the
# first one this ncu knows is used.
EVIDENCE = {
    "naive": ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum/l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
              "32-byte sectors per global load request", "the baseline: a warp's loads touch 32 rows of A"),
    "coalesced": ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum/l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
                  "32-byte sectors per global load request", "falls: a warp reads consecutive addresses"),
    "smem": ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "global load requests",
             "falls: each element fetched once per tile, reused 32 times from shared memory"),
    "grouped": ("lts__t_sector_hit_rate.pct", "L2 hit rate (%)",
                "rises: the blocks resident together share their tiles of A and B"),
    "tile1d": ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "shared-memory load wavefronts",
               "falls: a B value loaded once serves 8 results"),
    "tile2d": ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "shared-memory load wavefronts",
               "falls: 16 fragment loads serve 64 FMAs"),
    "transposed": ("smsp__inst_executed_op_shared_ld.sum", "shared-memory load instructions",
                   "falls: a fragment of four floats comes in one LDS.128, A's as B's"),
    "widestore": ("l1tex__t_requests_pipe_lsu_mem_global_op_st.sum", "global store requests",
                  "falls: one 128-bit store writes four results"),
    "vectorized": ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "global load requests",
                   "falls: one 128-bit load brings four floats"),
    "bankfree": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum+"
                 "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
                 "shared-memory bank conflicts (loads and stores)", "falls: split fragments and padded rows"),
    "twostage": ("smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
                 "warps stalled at a barrier, per issue", "falls: one barrier per tile, its loads in flight"),
    "doublebuffer": ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum", "shared-memory store wavefronts",
                     "halves: B's tiles land by cp.async, not through registers and STS (ncu counts cp.async's "
                     "requests among the global loads, so those do not move)"),
    "bigtile": ("smsp__inst_executed.sum", "instructions executed",
                "falls: 128 of a k-step's 134 instructions are FMAs, where 64 of 68 were"),
    "regbuffer": ("smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio",
                  "warps waiting on shared-memory results, per issue",
                  "falls: the next step's fragments load during this step's FMAs"),
    "warptile": ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "shared-memory load wavefronts",
                 "a warp's fragments cover a square region: no change where shared memory is not the limit"),
    "tf32_mma": ("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", "FFMA thread instructions",
                 "falls to nearly none: the tensor cores do the multiplies (HMMA)"),
    "tf32x3_mma": ("smsp__inst_executed_pipe_tensor_op_hmma.sum|sm__inst_executed_pipe_tensor_op_hmma.sum|"
                   "smsp__inst_executed_pipe_tensor.sum", "HMMA (mma.sync) instructions",
                   "triples against tf32_mma: three products per k-step"),
    "tf32": ("sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active|"
             "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active", "tensor pipe busy (%)",
             "rises against tf32_mma: wgmma reads shared memory itself and keeps the tensor cores fed"),
    "tf32x3": ("smsp__inst_executed_pipe_tensor_op_gmma.sum|sm__inst_executed_pipe_tensor_op_gmma.sum|"
               "smsp__inst_executed_pipe_tensor.sum", "HGMMA (wgmma) instructions",
               "triples against tf32: three products per k-step"),
    "tf32x3_regs": ("dram__bytes_read.sum", "bytes the GEMM kernel reads from DRAM",
                    "falls against tf32x3: A arrives raw (4 bytes an element), not packed as hi and lo (8)"),
    "ozaki": ("smsp__inst_executed_pipe_tensor_op_gmma.sum|sm__inst_executed_pipe_tensor_op_gmma.sum|"
              "smsp__inst_executed_pipe_tensor.sum", "wgmma instructions",
              "falls against tf32x3_regs: an INT8 wgmma takes 32 of k where a TF32 one takes 8, so eight moduli "
              "need fewer instructions than three TF32 products"),
    "tf32x3_inplace": ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum", "shared-memory store wavefronts",
                       "rises against tf32x3_regs: producer warps write each landed tile's hi and lo back into "
                       "shared memory, the split a pack pass did before the GEMM"),
    "reuse": ("smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio",
              "warps stalled on dispatch, per issue",
              "falls against regbuffer: more FFMA operands come from the reuse cache, fewer register-bank reads"),
}
# The rung a rung's counter is read against: the one before it on the ladder, except tf32, the first wgmma rung,
# which is read against tf32_mma, the mma.sync rung of the same math (the rung before it is tf32x3_mma), and
# tf32x3_inplace, read against tf32x3_regs, whose split in registers it keeps for one operand (the rung before it
# is ozaki, other math).
AGAINST = {"tf32": "tf32_mma", "tf32x3_inplace": "tf32x3_regs"}
# Rungs with no counter, and why (the README's ladder table says so under the table).
NO_COUNTER = {"tf32_tma": "its idea (the copy engine rounds to TF32, so no pack pass) removes a kernel from the "
                          "call and leaves the GEMM kernel's counters as tf32's"}


def against(name):
    """The rung `name`'s counter is compared with (None for the first rung)."""
    ladder = [k.name for k in fastsgemm.kernels() if k.rung is not None and k.device == "cuda"]
    if name in AGAINST:
        return AGAINST[name]
    i = ladder.index(name)
    return ladder[i - 1] if i > 0 else None


# Besides each rung's own counter, always collected so that any rung can be read beside any other.
ALSO = ["gpu__time_duration.sum", "smsp__inst_executed.sum", "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"]


# The ladder's GEMM kernels, by name: every rung's is <rung>_sgemm_kernel, mma_sgemm_kernel, wgmma_* or, for ozaki,
# gemm_kernel (its other passes are scale_, slice_, reconstruct_ and fix_columns_kernel).
GEMM_KERNELS = "regex:gemm_kernel|wgmma_"


def metrics_of(counter):
    return [part for chunk in counter.split("/") for part in chunk.split("+")]


def resolve(counter, known):
    """The counter with each "|" list of alternatives cut to the first metric ncu knows (or to its first)."""
    def pick(alternatives):
        names = alternatives.split("|")
        return next((n for n in names if n.split(".")[0] in known), names[0])
    return "/".join("+".join(pick(part) for part in chunk.split("+")) for chunk in counter.split("/"))


def value_of(counter, values):
    """A counter's value from {metric: value}: metrics summed with '+', one divided by another with '/'."""
    def total(chunk):
        parts = [values.get(m) for m in chunk.split("+")]
        return None if any(p is None for p in parts) else sum(parts)
    if "/" in counter:
        top, bottom = (total(c) for c in counter.split("/"))
        return None if top is None or not bottom else top / bottom
    return total(counter)


def available_metrics():
    """The metric names this GPU's ncu knows (base names, without .sum/.pct suffixes' variants)."""
    done = subprocess.run(["ncu", "--query-metrics"], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"ncu --query-metrics failed:\n{done.stderr}")
    return {line.split()[0] for line in done.stdout.splitlines() if line and not line.startswith(("-", "Device"))}


def profile(rung, metrics, size):
    m, n, k = size
    # Only the GEMM kernels (not the fills, the pack pass or a split-K sum), and of those the second call's.
    command = ["ncu", "--kernel-name", GEMM_KERNELS, "--launch-skip", "1", "--launch-count", "1",
               "--clock-control", "none", "--csv",
               "--metrics", ",".join(metrics), sys.executable, str(HERE / "profile_one.py"), rung, str(m), str(n),
               str(k)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ncu on {rung} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    text = done.stdout[done.stdout.index('"ID"'):]
    values = {}
    for row in csv.DictReader(io.StringIO(text)):
        try:
            values[row["Metric Name"]] = float(row["Metric Value"].replace(",", ""))
        except ValueError:
            pass
    return values


def counter_metrics(rung):
    """The metrics of `rung`'s counter as this GPU's ncu names them, comma-separated (empty for none)."""
    if rung not in EVIDENCE:
        return ""
    return ",".join(metrics_of(resolve(EVIDENCE[rung][0], available_metrics())))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "evidence-h100.json")
    parser.add_argument("--size", default="4096x4096x4096")
    parser.add_argument("--show", metavar="RUNG", help="print the counter RUNG is judged by, and exit")
    parser.add_argument("--kernels", nargs="+", metavar="RUNG", help="these rungs only (default: every rung)")
    args = parser.parse_args(argv)
    if args.show:
        if args.show in NO_COUNTER:
            print(f"{args.show}: no rung counter: {NO_COUNTER[args.show]}")
            return
        if args.show not in EVIDENCE:
            print(f"{args.show}: no rung counter (the rungs: {', '.join(EVIDENCE)})")
            return
        counter, what, expect = EVIDENCE[args.show]
        print(f"{args.show}: {what} ({counter.replace('|', ' or ')}): {expect}")
        return
    size = tuple(int(x) for x in args.size.split("x"))
    known = available_metrics()
    counters = {name: resolve(counter, known) for name, (counter, _, _) in EVIDENCE.items()}
    wanted = sorted({m for counter in counters.values() for m in metrics_of(counter)} | set(ALSO))
    missing = [m for m in wanted if m.split(".")[0] not in known]
    metrics = [m for m in wanted if m not in missing]
    rows = []
    for k in fastsgemm.kernels():
        if k.name not in EVIDENCE or (args.kernels and k.name not in args.kernels):
            continue
        values = profile(k.name, metrics, size)
        rows.append({"kernel": k.name, "rung": k.rung, "metrics": values})
        print(k.name, counters[k.name], value_of(counters[k.name], values), flush=True)
    from fastsgemm.bench import git_commit  # $FASTSGEMM_GIT_COMMIT where the tree's .git is older than it
    meta = {"profiled": "each rung's GEMM kernel in its second call", "git_commit": git_commit() or None, "device": fastsgemm.device_info()["name"], "size": list(size),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "missing_metrics": missing,
            "evidence": {name: {"counter": counters[name], "what": w, "expect": e}
                         for name, (_, w, e) in EVIDENCE.items()}}
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(f"wrote {args.out}" + (f"; metrics this ncu does not know: {missing}" if missing else ""))


if __name__ == "__main__":
    main()
