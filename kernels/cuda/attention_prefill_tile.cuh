// What the three prefill attention kernels share (attention_prefill.cu, attention_prefill_tc.cu,
// attention_prefill_mma.cu): the queries a block owns and the keys they see. A block owns
// consecutive queries of one head; the query at position p sees key k iff k <= p and
// (window <= 0 or k > p - window), as the CPU twin (cpu::CausalAttention) masks, so the block's
// keys run from its first query's window start to its last query's position. Internal: only .cu
// files include it.
#ifndef SCD_KERNELS_CUDA_ATTENTION_PREFILL_TILE_CUH_
#define SCD_KERNELS_CUDA_ATTENTION_PREFILL_TILE_CUH_

#include "kernels/cuda/device_common.cuh"

namespace scd::cuda::internal {

// A block's queries and the keys any of them sees.
struct PrefillTile {
  int t0;         // first query (token index)
  int rows;       // queries [t0, t0 + rows)
  int first_pos;  // position of query t0
  int key_begin;  // keys [key_begin, key_end)
  int key_end;
};

// The tile of up to `block_rows` queries from token t0 of a prefill of `tokens` queries after
// `start` cached positions.
__device__ __forceinline__ PrefillTile PrefillTileAt(int t0, int block_rows, int tokens, int start,
                                                     int window) {
  PrefillTile tile;
  tile.t0 = t0;
  tile.rows = min(block_rows, tokens - t0);
  tile.first_pos = start + t0;
  tile.key_end = tile.first_pos + tile.rows;  // exclusive
  tile.key_begin = window > 0 ? max(0, tile.first_pos - window + 1) : 0;
  return tile;
}

}  // namespace scd::cuda::internal

#endif  // SCD_KERNELS_CUDA_ATTENTION_PREFILL_TILE_CUH_
