// DecodeAttention: one query (a decode step) against every key of a KV cache.
//
// At a decode step, attention reads each layer's whole K and V once and does two multiply-adds
// per float read, so its time is the time to read them: a few cache lines of a row per head,
// rows num_kv_heads · head_dim floats apart. The loops run key by key over all the heads, so
// that K and V stream front to back (a head at a time would jump a row every head_dim floats
// and leave the hardware prefetcher behind), and the AVX2 variant keeps eight keys' dot
// products in flight at once, where one dot product's chain of dependent adds would stall.
//
// Sums, in the one order every variant follows (so they agree bit for bit):
//   score(h, j) = (0 + l_0 + l_1 + ... + l_7) · scale, lane l_t the fused multiply-adds of
//                 q[i] · k_j[i] over i ≡ t (mod 8), i ascending; a head_dim tail past the last
//                 multiple of 8 fused onto the sum in order;
//   p(h, ·)     = SoftmaxRows of the head's scores;
//   out(h, i)   = fused multiply-adds p(h, j) · v_j[i] onto 0, j ascending.
// They are the sums of the query-at-a-time loops this replaced, so outputs did not change.
#ifndef SCD_KERNELS_CPU_DECODE_ATTENTION_H_
#define SCD_KERNELS_CPU_DECODE_ATTENTION_H_

namespace scd::cpu {

// out[num_heads · head_dim] = softmax(scale · q·Kᵀ) · V over keys [0, keys) of k and v
// ([keys, num_kv_heads · head_dim] each); query head h reads KV head h / (num_heads /
// num_kv_heads). `scores` holds num_heads · keys floats. The AVX2 variant runs when
// ActiveIsa() is not kScalar and head_dim is a multiple of 8; the scalar loops otherwise.
// The KV heads are split between threads: with threads = 0, the compute pool's when the KV
// read is large enough to pay for waking them, else the caller alone; with threads > 0, at
// most that many (tests). The split changes no sum: every thread count gives the same bits.
void DecodeAttention(const float* q, const float* k, const float* v, float* out, int keys,
                     int num_heads, int num_kv_heads, int head_dim, float scale, float* scores,
                     int threads = 0);

}  // namespace scd::cpu

#endif  // SCD_KERNELS_CPU_DECODE_ATTENTION_H_
