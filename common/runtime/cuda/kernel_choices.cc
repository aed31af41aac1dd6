// See kernel_choices.h.
#include "common/runtime/cuda/kernel_choices.h"

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/base/status_macros.h"
#include "kernels/cuda/launch_checks.h"

namespace scd::cuda {

// The names' order is the enums'.
static_assert(static_cast<int>(AttentionImpl::kTensorCoreMma) == 3 &&
              static_cast<int>(DecodeImpl::kVectorized) == 2 &&
              kSmallBatchMaxRows == kCudaSmallBatchRowsLimit);

absl::StatusOr<KernelChoices> KernelChoicesFrom(const CudaKernelOptions& options) {
  auto index = [](std::string_view what, absl::Span<const std::string_view> names,
                  const std::string& name) -> absl::StatusOr<int> {
    std::string expected;
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == name) return static_cast<int>(i);
      expected += (i == 0 ? "" : ", ") + std::string(names[i]);
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unknown ", std::string(what), " '", name, "' (expected ", expected, ")"));
  };
  KernelChoices choices;
  SCD_ASSIGN_OR_RETURN(
      const int prefill,
      index("prefill attention kernel", kCudaPrefillAttentionNames, options.prefill_attention));
  SCD_ASSIGN_OR_RETURN(const int decode, index("decode attention kernel", kCudaDecodeAttentionNames,
                                               options.decode_attention));
  choices.prefill_attention = static_cast<AttentionImpl>(prefill);
  choices.decode_attention = static_cast<DecodeImpl>(decode);
  choices.small_batch_max_rows = options.small_batch_max_rows;
  return choices;
}

absl::Status CheckKernelChoices(const ModelConfig& c, const KernelChoices& choices) {
  if (!launch_checks::PrefillSupports(choices.prefill_attention, c.head_dim)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prefill attention '",
        std::string(kCudaPrefillAttentionNames[static_cast<int>(choices.prefill_attention)]),
        "' cannot run head_dim ", c.head_dim, " (the tensor-core kernels take 64 or 128)"));
  }
  if (choices.decode_attention == DecodeImpl::kVectorized &&
      !launch_checks::VectorizedAttentionSupports(c.num_heads / c.num_kv_heads, c.head_dim)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "decode attention 'vectorized' cannot run a GQA group of ", c.num_heads / c.num_kv_heads,
        " with head_dim ", c.head_dim, " (it takes groups 1, 2, 4, 8 and head_dim 8 * 2^i)"));
  }
  return absl::OkStatus();
}

std::string DescribeKernelChoices(const ModelConfig& c, const KernelChoices& choices) {
  const absl::StatusOr<bool> tensor_cores = launch_checks::PrefillTensorCores(
      nullptr, nullptr, c.num_heads, c.num_kv_heads, c.head_dim, choices.prefill_attention);
  const absl::StatusOr<bool> vectorized = launch_checks::TakesVectorized(
      "DecodeAttention", c.num_heads, c.num_kv_heads, c.head_dim, choices.decode_attention);
  const bool mma = choices.prefill_attention == AttentionImpl::kTensorCoreMma;
  const char* prefill = tensor_cores.value_or(false) ? (mma ? "mma" : "wmma") : "generic";
  const char* decode = vectorized.value_or(false) ? "vectorized" : "generic";
  auto automatic = [](bool is_auto) { return is_auto ? " (auto)" : ""; };
  const int rows = choices.small_batch_max_rows;
  return absl::StrCat(
      "prefill attention ", prefill, automatic(choices.prefill_attention == AttentionImpl::kAuto),
      ", decode attention ", decode, automatic(choices.decode_attention == DecodeImpl::kAuto), ", ",
      rows == 0 ? std::string("projections cuBLAS")
                : absl::StrCat("projections of up to ", rows, rows == 1 ? " row" : " rows",
                               " as a weight stream, larger ones cuBLAS"));
}

}  // namespace scd::cuda
