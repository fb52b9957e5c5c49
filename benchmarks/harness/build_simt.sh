#!/bin/bash
# Builds benchmarks/harness/simt_variants (run from the repository root; nvcc on PATH).
set -e
O=/tmp/fastsgemm-simt-obj; mkdir -p $O
F="-O3 -std=c++17 -lineinfo -I kernels -I csrc -Xcompiler -fPIC -gencode=arch=compute_90a,code=sm_90a"
nvcc $F -c kernels/ladder/14_regbuffer.cu -o $O/r10.o &
nvcc $F -c benchmarks/harness/simt_variants.cu -o $O/variants.o -Xptxas -v 2> $O/variants.ptxas &
for job in $(jobs -p); do wait "$job"; done  # any compile that failed stops the build
nvcc -o benchmarks/harness/simt_variants $O/*.o -lcublas
