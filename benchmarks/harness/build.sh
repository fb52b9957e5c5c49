#!/bin/bash
# Builds benchmarks/harness/harness from the kernels (run from the repository root; nvcc on PATH).
set -e
O=/tmp/fastsgemm-harness-obj; mkdir -p $O
F="-O3 -std=c++17 -lineinfo -I kernels -Xcompiler -fPIC"
nvcc $F -gencode=arch=compute_90a,code=sm_90a -c kernels/ladder/20_tf32x3.cu -o $O/15.o -Xptxas -v 2> $O/15.ptxas &
nvcc $F -gencode=arch=compute_90a,code=sm_90a -c kernels/ladder/19_tf32.cu -o $O/14.o &
nvcc $F -gencode=arch=compute_90a,code=sm_90a -c kernels/ladder/21_tf32x3_regs.cu -o $O/16.o -Xptxas -v 2> $O/16.ptxas &
nvcc $F -gencode=arch=compute_90a,code=sm_90a -c kernels/engine/tf32x3_direct.cu -o $O/15d.o &
nvcc $F -gencode=arch=compute_90a,code=sm_90a -c kernels/engine/tf32x3_128x64.cu -o $O/15w.o &
nvcc $F -gencode=arch=compute_90a,code=sm_90a -c kernels/engine/tf32x3_regs_4steps.cu -o $O/16s.o &
nvcc $F -gencode=arch=compute_90a,code=sm_90a -c kernels/engine/tf32x3_regs_direct.cu -o $O/16d.o &
nvcc $F -gencode=arch=compute_90,code=sm_90 -c kernels/ladder/18_tf32x3_mma.cu -o $O/13.o &
nvcc $F -gencode=arch=compute_90,code=sm_90 -c kernels/ladder/17_tf32_mma.cu -o $O/12.o &
nvcc $F -gencode=arch=compute_90,code=sm_90 -c benchmarks/harness/harness.cu -o $O/bb.o &
gcc -O2 -I kernels -I /usr/local/cuda/include -c kernels/support/workspace_pool.c -o $O/wp.o
gcc -O2 -I kernels -I /usr/local/cuda/include -c kernels/support/device_memory.c -o $O/dm.o
for job in $(jobs -p); do wait "$job"; done  # any compile that failed stops the build
nvcc -o benchmarks/harness/harness $O/*.o -lcublas
