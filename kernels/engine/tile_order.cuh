/*
 * engine/tile_order.cuh: the order in which blocks (or a persistent block's
 * work items) take the output tiles, rung 4's lesson in the engine's own copy:
 * item `id` walks the tiles in groups of `group` tile rows, column by column
 * inside a group (the last group may have fewer rows), so that blocks running
 * at once share rows of A and columns of B in L2. Used by the Hopper pipeline
 * (engine/pipeline.cuh) and the walked SIMT configuration
 * (engine/tile2d_walked.cu).
 */
#ifndef FASTSGEMM_ENGINE_TILE_ORDER
#define FASTSGEMM_ENGINE_TILE_ORDER

namespace fsg {
namespace engine {

struct TileCoord {
    int row, col;
};

template <typename Int>
__host__ __device__ inline TileCoord grouped_tile(Int id, Int tiles_m, Int tiles_n, Int group) {
    const Int per_group = group * tiles_n, first = id / per_group * group;
    const Int rows = tiles_m - first < group ? tiles_m - first : group;
    return {(int)(first + id % per_group % rows), (int)(id % per_group / rows)};
}

}  // namespace engine
}  // namespace fsg

#endif /* FASTSGEMM_ENGINE_TILE_ORDER */
