// See cpu_weights.h.
#include "common/runtime/cpu_weights.h"

#include <vector>

#include "kernels/cpu/ops.h"

namespace scd {

CpuMatrix::CpuMatrix(const float* w, const float* bias, int n, int k)
    : f32_(w), bias_(bias), n_(n), k_(k) {}

CpuMatrix::CpuMatrix(cpu::Q8Matrix w, const float* bias)
    : q8_(std::make_shared<const cpu::Q8Matrix>(std::move(w))),
      bias_(bias),
      n_(q8_->rows),
      k_(q8_->cols) {}

void CpuMatrix::Apply(const float* x, float* y, int rows) const {
  if (q8_ != nullptr) {
    cpu::Q8Linear(x, *q8_, bias_, y, rows);
  } else {
    cpu::Linear(x, f32_, bias_, y, rows, n_, k_);
  }
}

void CpuMatrix::ApplyMany(const CpuMatrix* const* ms, float* const* ys, int count, const float* x,
                          int rows) {
  cpu::Q8Product products[cpu::kQ8MaxProducts];
  bool int8 = count <= cpu::kQ8MaxProducts;
  for (int i = 0; i < count && int8; ++i) {
    int8 = ms[i]->q8_ != nullptr;
    if (int8) products[i] = cpu::Q8Product{ms[i]->q8_.get(), ms[i]->bias_, ys[i]};
  }
  if (int8) return cpu::Q8LinearMany(x, products, count, rows);
  for (int i = 0; i < count; ++i) ms[i]->Apply(x, ys[i], rows);
}

size_t CpuMatrix::bytes() const {
  const size_t bias = bias_ != nullptr ? sizeof(float) * static_cast<size_t>(n_) : 0;
  if (q8_ != nullptr) return q8_->bytes() + bias;
  return sizeof(float) * static_cast<size_t>(n_) * static_cast<size_t>(k_) + bias;
}

namespace {

const float* OrNull(const WeightBuffer& b) { return b.empty() ? nullptr : b.data(); }

// Where the int8 matrices go: one store for them all, each at the next 64-byte offset.
struct Int8Store {
  std::shared_ptr<cpu::AlignedArray<int8_t>> store;
  size_t offset = 0;
};

// One matrix of the model in `dtype`; an int8 conversion (into `int8`'s store) releases the
// F32 pages it read.
CpuMatrix Prepare(const WeightBuffer& w, const WeightBuffer* bias, int n, int k, WeightDtype dtype,
                  Int8Store& int8) {
  const float* b = bias != nullptr ? OrNull(*bias) : nullptr;
  if (dtype == WeightDtype::kF32) return CpuMatrix(w.data(), b, n, k);
  CpuMatrix m(cpu::QuantizeQ8(w.data(), n, k, int8.store, int8.offset), b);
  int8.offset += cpu::Q8MatrixBytes(n, k);
  w.ReleasePages();
  return m;
}

// A matrix of the model, [n, k], and the CpuMatrix it becomes.
struct Source {
  const WeightBuffer* w;
  const WeightBuffer* bias;  // null: none
  int n, k;
  CpuMatrix* slot;
};

}  // namespace

CpuWeights PrepareCpuWeights(const Model& model, WeightDtype dtype) {
  const ModelConfig& c = model.config;
  const ModelWeights& mw = model.weights;
  const int d = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), ffn = c.intermediate_size;
  CpuWeights out;
  out.dtype = dtype;
  out.layers.resize(mw.layers.size());
  // Every matrix in the order a decode step reads them, so that int8 ones lie in one stream.
  std::vector<Source> sources;
  size_t norms = mw.final_norm.size();
  for (size_t l = 0; l < mw.layers.size(); ++l) {
    const LayerWeights& lw = mw.layers[l];
    CpuLayerMatrices& m = out.layers[l];
    sources.insert(sources.end(), {{&lw.wq, &lw.bq, qd, d, &m.q},
                                   {&lw.wk, &lw.bk, kvd, d, &m.k},
                                   {&lw.wv, &lw.bv, kvd, d, &m.v},
                                   {&lw.wo, nullptr, d, qd, &m.o},
                                   {&lw.w_gate, nullptr, ffn, d, &m.gate},
                                   {&lw.w_up, nullptr, ffn, d, &m.up},
                                   {&lw.w_down, nullptr, d, ffn, &m.down}});
    norms += lw.attn_norm.size() + lw.ffn_norm.size();
  }
  sources.push_back({&mw.output_matrix(), nullptr, c.vocab_size, d, &out.output});
  Int8Store int8;
  if (dtype == WeightDtype::kInt8) {
    size_t all = 0;
    for (const Source& s : sources) all += cpu::Q8MatrixBytes(s.n, s.k);
    int8.store = std::make_shared<cpu::AlignedArray<int8_t>>(all, /*huge_pages=*/true);
  }
  for (const Source& s : sources) {
    *s.slot = Prepare(*s.w, s.bias, s.n, s.k, dtype, int8);
    out.bytes += s.slot->bytes();
  }
  out.bytes += sizeof(float) * norms;
  out.streamed = out.bytes;
  // The embedding table is read a row per token; with an untied int8 output it is read only
  // there. A tied table held F32 is the output matrix itself, counted once.
  if (!mw.lm_head.empty() || dtype != WeightDtype::kF32) {
    out.bytes += sizeof(float) * mw.embed.size();
  }
  return out;
}

}  // namespace scd
