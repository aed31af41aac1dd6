// See cpu_weights.h.
#include "common/runtime/cpu_weights.h"

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

void CpuMatrix::ApplyMany(const CpuMatrix* const* ms, float* const* ys, int count,
                          const float* x, int rows) {
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

// Where the int8 matrices go: one store for them all, each at the next 64-byte offset, in the
// order Prepare is called (the sizes are summed first, in the same order).
struct Int8Store {
  std::shared_ptr<cpu::AlignedArray<int8_t>> store;
  size_t offset = 0;
};

// One matrix of the model in `dtype`; an int8 conversion (into `int8`'s store) releases the
// F32 pages it read.
CpuMatrix Prepare(const WeightBuffer& w, const WeightBuffer* bias, int n, int k,
                  WeightDtype dtype, Int8Store& int8) {
  const float* b = bias != nullptr ? OrNull(*bias) : nullptr;
  if (dtype == WeightDtype::kF32) return CpuMatrix(w.data(), b, n, k);
  CpuMatrix m(cpu::QuantizeQ8(w.data(), n, k, int8.store, int8.offset), b);
  int8.offset += cpu::Q8MatrixBytes(n, k);
  w.ReleasePages();
  return m;
}

}  // namespace

CpuWeights PrepareCpuWeights(const Model& model, WeightDtype dtype) {
  const ModelConfig& c = model.config;
  const ModelWeights& mw = model.weights;
  const int d = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), ffn = c.intermediate_size;
  CpuWeights out;
  out.dtype = dtype;
  Int8Store int8;
  if (dtype == WeightDtype::kInt8) {
    const size_t layer = cpu::Q8MatrixBytes(qd, d) + 2 * cpu::Q8MatrixBytes(kvd, d) +
                         cpu::Q8MatrixBytes(d, qd) + 2 * cpu::Q8MatrixBytes(ffn, d) +
                         cpu::Q8MatrixBytes(d, ffn);
    const size_t all = layer * mw.layers.size() + cpu::Q8MatrixBytes(c.vocab_size, d);
    int8.store = std::make_shared<cpu::AlignedArray<int8_t>>(all, /*huge_pages=*/true);
  }
  size_t norms = mw.final_norm.size();
  for (const LayerWeights& lw : mw.layers) {
    CpuLayerMatrices m;
    m.q = Prepare(lw.wq, &lw.bq, qd, d, dtype, int8);
    m.k = Prepare(lw.wk, &lw.bk, kvd, d, dtype, int8);
    m.v = Prepare(lw.wv, &lw.bv, kvd, d, dtype, int8);
    m.o = Prepare(lw.wo, nullptr, d, qd, dtype, int8);
    m.gate = Prepare(lw.w_gate, nullptr, ffn, d, dtype, int8);
    m.up = Prepare(lw.w_up, nullptr, ffn, d, dtype, int8);
    m.down = Prepare(lw.w_down, nullptr, d, ffn, dtype, int8);
    for (const CpuMatrix* x : {&m.q, &m.k, &m.v, &m.o, &m.gate, &m.up, &m.down}) {
      out.bytes += x->bytes();
    }
    norms += lw.attn_norm.size() + lw.ffn_norm.size();
    out.layers.push_back(std::move(m));
  }
  out.output = Prepare(mw.output_matrix(), nullptr, c.vocab_size, d, dtype, int8);
  out.bytes += out.output.bytes() + sizeof(float) * norms;
  out.streamed = out.bytes;
  // The embedding table is read a row per token; with an untied int8 output it is read only
  // there. A tied table held F32 is the output matrix itself, counted once.
  if (!mw.lm_head.empty() || dtype != WeightDtype::kF32) {
    out.bytes += sizeof(float) * mw.embed.size();
  }
  return out;
}

}  // namespace scd
