# The library's INT8 GEMM (cuBLASLt through torch._int_mm: int8 x int8 -> int32, B column-major) at 8192^3 and
# 16384^3: CUDA events, median of 10 after 3 warm-ups. The ceiling that rung 24 (ozaki)'s INT8 GEMM is measured
# against (benchmarks/NOTES.md, "The INT8 GEMM against cuBLASLt's").
#     python3 benchmarks/harness/int8_library.py OUT.json
import torch, statistics, json, sys
res = {}
for s in (8192, 16384):
    a = torch.randint(-128, 127, (s, s), dtype=torch.int8, device="cuda")
    b = torch.randint(-128, 127, (s, s), dtype=torch.int8, device="cuda").t()
    for _ in range(3): torch._int_mm(a, b)
    ts = []
    for _ in range(10):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); torch._int_mm(a, b); e1.record(); e1.synchronize(); ts.append(e0.elapsed_time(e1))
    ms = statistics.median(ts)
    res[s] = ms
    print(f"int8 {s}^3: {ms:.3f} ms, {2*s**3/ms/1e9:.1f} TOPS", flush=True)
json.dump(res, open(sys.argv[1], "w"))
