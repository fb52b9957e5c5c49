#!/usr/bin/env bash
# compute-sanitizer racecheck at 4095 x 4097 x 4093, one process per CUDA kernel
# (rungs and their configurations), all at once: racecheck slows shared-memory
# traffic so much that one process for every kernel in turn does not finish in
# 10 minutes. Each process gets LIMIT seconds (default 530). Writes one line per
# kernel to $OUT/racecheck-large.txt (or ./racecheck-large.txt).
#   benchmarks/racecheck_large.sh [LIMIT]
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-.} LIMIT=${1:-530}
logs=$(mktemp -d)
export logs
one() {
    local start rc
    start=$(date +%s)
    timeout "$LIMIT" compute-sanitizer --tool racecheck --error-exitcode 99 python3 tests/sanitizer_workload.py \
        --large-only --kernels "$1" >"$logs/$1.txt" 2>&1
    rc=$?
    echo "$1 exit=$rc $(($(date +%s) - start))s | $(grep -o 'RACECHECK SUMMARY.*' "$logs/$1.txt") |" \
         "$(grep -o 'sanitizer workload.*' "$logs/$1.txt")"
    [ "$rc" -eq 0 ] || tail -5 "$logs/$1.txt" | sed "s/^/    $1: /"
}
export -f one
python3 -c "import fastsgemm
print('\n'.join(n for k in fastsgemm.kernels() if k.device == 'cuda' for n in (k.name, *(k.name + ':' + c.name for c in k.configs))))" |
    xargs -P 32 -I{} bash -c 'one "{}"' | tee "$OUT/racecheck-large.txt"
rm -rf "$logs"
