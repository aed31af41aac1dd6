// SHA-256 per FIPS 180-4 §6.2, with an x86 SHA-NI compression path (Intel's "SHA extensions"
// white paper, 2013). The round constants, padding and big-endian length encoding follow the
// standard; the SHA-NI path keeps the state as the (ABEF, CDGH) register pair the
// sha256rnds2 instruction expects. The CPU check is the only platform conditional here.
#include "common/base/sha256.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define SCD_SHA256_X86 1
#endif

namespace scd {
namespace {

constexpr uint32_t kRoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr uint32_t kInitialState[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                       0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

inline uint32_t Rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

inline uint32_t LoadBigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

void CompressPortable(uint32_t state[8], const uint8_t* data, size_t blocks) {
  uint32_t w[64];
  for (; blocks > 0; --blocks, data += 64) {
    for (int t = 0; t < 16; ++t) w[t] = LoadBigEndian32(data + 4 * t);
    for (int t = 16; t < 64; ++t) {
      const uint32_t s0 = Rotr(w[t - 15], 7) ^ Rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
      const uint32_t s1 = Rotr(w[t - 2], 17) ^ Rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
      w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
    uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
    for (int t = 0; t < 64; ++t) {
      const uint32_t s1 = Rotr(e, 6) ^ Rotr(e, 11) ^ Rotr(e, 25);
      const uint32_t ch = (e & f) ^ (~e & g);
      const uint32_t t1 = h + s1 + ch + kRoundConstants[t] + w[t];
      const uint32_t s0 = Rotr(a, 2) ^ Rotr(a, 13) ^ Rotr(a, 22);
      const uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
      const uint32_t t2 = s0 + maj;
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
    state[4] += e;
    state[5] += f;
    state[6] += g;
    state[7] += h;
  }
}

#ifdef SCD_SHA256_X86
bool CpuHasShaExtensions() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool ssse3 = (c >> 9) & 1, sse41 = (c >> 19) & 1;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool sha = (b >> 29) & 1;
  return ssse3 && sse41 && sha;
}

// Message groups W[4j..4j+3] for j >= 4 come from sha256msg1/msg2:
//   W[t] = σ1(W[t-2]) + W[t-7] + σ0(W[t-15]) + W[t-16],
// where alignr picks W[t-7] out of the two previous groups.
__attribute__((target("sha,sse4.1,ssse3"))) void CompressShaNi(uint32_t state[8],
                                                               const uint8_t* data, size_t blocks) {
  const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  __m128i tmp = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&state[0]));
  __m128i state1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&state[4]));
  tmp = _mm_shuffle_epi32(tmp, 0xB1);                // CDAB
  state1 = _mm_shuffle_epi32(state1, 0x1B);          // EFGH
  __m128i state0 = _mm_alignr_epi8(tmp, state1, 8);  // ABEF
  state1 = _mm_blend_epi16(state1, tmp, 0xF0);       // CDGH

  for (; blocks > 0; --blocks, data += 64) {
    const __m128i abef_save = state0;
    const __m128i cdgh_save = state1;
    __m128i w[16];
    for (int j = 0; j < 4; ++j) {
      w[j] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data + 16 * j)),
                              byte_swap);
    }
    for (int j = 4; j < 16; ++j) {
      const __m128i partial = _mm_add_epi32(_mm_sha256msg1_epu32(w[j - 4], w[j - 3]),
                                            _mm_alignr_epi8(w[j - 1], w[j - 2], 4));
      w[j] = _mm_sha256msg2_epu32(partial, w[j - 1]);
    }
    for (int j = 0; j < 16; ++j) {
      __m128i msg = _mm_add_epi32(
          w[j], _mm_loadu_si128(reinterpret_cast<const __m128i*>(&kRoundConstants[4 * j])));
      state1 = _mm_sha256rnds2_epu32(state1, state0, msg);
      msg = _mm_shuffle_epi32(msg, 0x0E);
      state0 = _mm_sha256rnds2_epu32(state0, state1, msg);
    }
    state0 = _mm_add_epi32(state0, abef_save);
    state1 = _mm_add_epi32(state1, cdgh_save);
  }

  tmp = _mm_shuffle_epi32(state0, 0x1B);        // FEBA
  state1 = _mm_shuffle_epi32(state1, 0xB1);     // DCHG
  state0 = _mm_blend_epi16(tmp, state1, 0xF0);  // DCBA
  state1 = _mm_alignr_epi8(state1, tmp, 8);     // ABEF
  _mm_storeu_si128(reinterpret_cast<__m128i*>(&state[0]), state0);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(&state[4]), state1);
}
#else
bool CpuHasShaExtensions() { return false; }
void CompressShaNi(uint32_t state[8], const uint8_t* data, size_t blocks) {
  CompressPortable(state, data, blocks);
}
#endif

}  // namespace

bool Sha256::HardwareAccelerated() {
  static const bool has = CpuHasShaExtensions();
  return has;
}

Sha256::Sha256(Impl impl) : use_hardware_(impl == Impl::kAuto && HardwareAccelerated()) { Reset(); }

void Sha256::Reset() {
  std::memcpy(state_, kInitialState, sizeof(state_));
  total_bytes_ = 0;
  buffered_ = 0;
}

void Sha256::Compress(const uint8_t* blocks, size_t count) {
  if (use_hardware_) {
    CompressShaNi(state_, blocks, count);
  } else {
    CompressPortable(state_, blocks, count);
  }
}

void Sha256::Update(const void* data, size_t size) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  total_bytes_ += size;
  if (buffered_ > 0) {
    const size_t take = std::min(size, sizeof(buffer_) - buffered_);
    std::memcpy(buffer_ + buffered_, p, take);
    buffered_ += take;
    p += take;
    size -= take;
    if (buffered_ < sizeof(buffer_)) return;
    Compress(buffer_, 1);
    buffered_ = 0;
  }
  const size_t whole = size / 64;
  if (whole > 0) Compress(p, whole);
  p += whole * 64;
  size -= whole * 64;
  if (size > 0) std::memcpy(buffer_, p, size);
  buffered_ = size;
}

Sha256::Digest Sha256::Finish() {
  // Padding (FIPS 180-4 §5.1.1): 0x80, zeros to 56 mod 64, then the bit length big-endian.
  const uint64_t bit_length = total_bytes_ * 8;
  uint8_t pad[72] = {0x80};
  const size_t pad_len = (buffered_ < 56) ? 56 - buffered_ : 120 - buffered_;
  for (int i = 0; i < 8; ++i) pad[pad_len + i] = static_cast<uint8_t>(bit_length >> (56 - 8 * i));
  Update(pad, pad_len + 8);
  Digest digest;
  for (int i = 0; i < 8; ++i) {
    digest[4 * i] = static_cast<uint8_t>(state_[i] >> 24);
    digest[4 * i + 1] = static_cast<uint8_t>(state_[i] >> 16);
    digest[4 * i + 2] = static_cast<uint8_t>(state_[i] >> 8);
    digest[4 * i + 3] = static_cast<uint8_t>(state_[i]);
  }
  Reset();
  return digest;
}

Sha256::Digest Sha256::Hash(std::string_view data) {
  Sha256 hasher;
  hasher.Update(data);
  return hasher.Finish();
}

std::string Sha256::ToHex(const Digest& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * kDigestSize, '0');
  for (size_t i = 0; i < kDigestSize; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 15];
  }
  return out;
}

std::string Sha256Hex(std::string_view data) { return Sha256::ToHex(Sha256::Hash(data)); }

}  // namespace scd
