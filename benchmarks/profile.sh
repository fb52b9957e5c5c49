#!/usr/bin/env bash
# Nsight Compute on one rung: the figures the ladder teaches with, first the counter
# that proves the rung's idea (benchmarks/evidence.py has one per rung).
#   benchmarks/profile.sh RUNG [MxNxK]      (default 4096x4096x4096)
# Prints achieved FLOP/s (as FMA-pipe utilisation), shared-memory wavefronts
# and bank conflicts, global load efficiency (sectors per request), L1/L2 hit
# rates, DRAM throughput, registers, occupancy and the top warp stall reasons.
# Set NCU_OUT=file to also keep the full report (file.ncu-rep).
set -euo pipefail
rung=${1:?usage: benchmarks/profile.sh RUNG [MxNxK]}
IFS=x read -r m n k <<<"${2:-4096x4096x4096}"
here=$(cd "$(dirname "$0")" && pwd)
metrics=(
  gpu__time_duration.sum
  sm__throughput.avg.pct_of_peak_sustained_elapsed
  sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
  sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active
  smsp__inst_executed.sum
  l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum
  l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum
  l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum
  l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
  l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum
  l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum
  l1tex__t_sector_hit_rate.pct
  lts__t_sector_hit_rate.pct
  dram__throughput.avg.pct_of_peak_sustained_elapsed
  launch__registers_per_thread
  launch__occupancy_limit_registers
  sm__warps_active.avg.pct_of_peak_sustained_active
  sm__cycles_elapsed.avg.per_second
  smsp__issue_active.avg.pct_of_peak_sustained_active
  smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio
  smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio
  smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio
  smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio
  smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio
  smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio
  smsp__average_warps_issue_stalled_wait_per_issue_active.ratio
  smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio
  smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio
)
# The counter that proves the rung's idea (benchmarks/evidence.py measures it on every rung for the README).
python3 "$here/evidence.py" --show "${rung%%:*}"
report=()
[ -n "${NCU_OUT:-}" ] && report=(--export "$NCU_OUT" --force-overwrite)
# The GEMM kernel of the rung's second call (profile_one.py runs it twice; a call may also launch a pack
# pass or a split-K sum, which the name filter leaves out); clocks as the card runs them, not locked.
gemm_kernels=$(cd "$here" && python3 -c "import evidence; print(evidence.GEMM_KERNELS)")  # one filter for both
# The rung's own counter's metrics too, as this ncu names them (evidence.py resolves the alternatives).
own=$(cd "$here" && python3 -c "import evidence, sys; print(evidence.counter_metrics(sys.argv[1]))" "${rung%%:*}")
[ -n "$own" ] && metrics+=(${own//,/ })
ncu --kernel-name "$gemm_kernels" --launch-skip 1 --launch-count 1 --clock-control none "${report[@]}" \
    --metrics "$(IFS=,; echo "${metrics[*]}" | tr ',' '\n' | sort -u | paste -sd,)" --section WarpStateStats \
    python3 "$here/profile_one.py" "$rung" "$m" "$n" "$k"
