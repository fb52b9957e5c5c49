// For grid_order.sh: blockIdx remapped so that blocks walk the output in groups of GROUP_ROWS block
// rows, column by column inside a group (fsg::grouped_tile, common.cuh). A bijection on any grid.
#ifndef FASTSGEMM_GROUPED_ORDER_CUH
#define FASTSGEMM_GROUPED_ORDER_CUH

#include "common.cuh"

__device__ __forceinline__ uint3 grouped_block_idx() {
    const fsg::TileCoord tile =
        fsg::grouped_tile<unsigned>(blockIdx.y * gridDim.x + blockIdx.x, gridDim.y, gridDim.x, GROUP_ROWS);
    return make_uint3(tile.col, tile.row, blockIdx.z);
}

#endif
