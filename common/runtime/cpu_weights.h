// CpuWeights: the weight matrices as the CPU backend multiplies by them. F32 matrices are read
// in place from the model (a mapped checkpoint's pages: no copy, no fused duplicates); int8
// ones are converted once, here, into blocks of 32 with a scale each (kernels/cpu/q8_linear.h),
// and the F32 pages they came from are released. Norms and the embedding table are always
// read from the model as F32.
#ifndef SCD_COMMON_RUNTIME_CPU_WEIGHTS_H_
#define SCD_COMMON_RUNTIME_CPU_WEIGHTS_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "common/model/weights.h"
#include "common/runtime/backend.h"
#include "kernels/cpu/q8_linear.h"

namespace scd {

// y[rows, n] = x[rows, k] · Wᵀ (+ bias) for one projection W [n, k].
class CpuMatrix {
 public:
  CpuMatrix() = default;
  // F32: `w` [n, k] and `bias` [n] (may be null) are read in place and must outlive the matrix
  // (they are the model's).
  CpuMatrix(const float* w, const float* bias, int n, int k);
  // int8: `w` converted; `bias` as above.
  CpuMatrix(cpu::Q8Matrix w, const float* bias);

  void Apply(const float* x, float* y, int rows) const;
  // ms[i]->Apply(x, ys[i], rows) for i < count, the same bits; int8 matrices of one input run
  // as one job (cpu::Q8LinearMany).
  static void ApplyMany(const CpuMatrix* const* ms, float* const* ys, int count, const float* x,
                        int rows);
  int n() const { return n_; }
  int k() const { return k_; }
  size_t bytes() const;  // what Apply streams per call, bias included

 private:
  const float* f32_ = nullptr;
  std::shared_ptr<const cpu::Q8Matrix> q8_;
  const float* bias_ = nullptr;
  int n_ = 0, k_ = 0;
};

struct CpuLayerMatrices {
  CpuMatrix q, k, v, o, gate, up, down;
};

struct CpuWeights {
  WeightDtype dtype = WeightDtype::kF32;
  std::vector<CpuLayerMatrices> layers;
  CpuMatrix output;  // lm_head, or the tied embedding table
  size_t bytes = 0;  // every matrix as held, plus the F32 norms and embedding table
  // What a decode step reads: every matrix as held and the norms; of an embedding table that is
  // not the output matrix, one row per token, not counted.
  size_t streamed = 0;
};

// Prepares `model`'s matrices in `dtype`; the model must outlive the result. int8 matrices
// share one allocation on transparent huge pages (cpu::MapHugePages): a decode step streams
// them all, and on 4 KB pages each page would cost it a TLB miss.
CpuWeights PrepareCpuWeights(const Model& model, WeightDtype dtype);

}  // namespace scd

#endif  // SCD_COMMON_RUNTIME_CPU_WEIGHTS_H_
