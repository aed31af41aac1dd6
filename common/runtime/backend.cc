// Backend factory: the one place that knows which backends this build has (docs/STYLE.md: `#if`
// only in the backend factory and in CMake). Also the Backend interface's default methods.
#include "common/runtime/backend.h"

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/runtime/cpu_backend.h"
#if SCD_HAVE_CUDA
#include "common/runtime/cuda/cuda_backend.h"
#endif

namespace scd {

absl::Status Backend::DecodeSample(absl::Span<Sequence* const> seqs,
                                   absl::Span<const int32_t> tokens,
                                   absl::Span<const SampleDraw> draws, std::vector<int32_t>* next) {
  if (draws.size() != seqs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("decode batch has ", seqs.size(), " sequences and ", draws.size(), " draws"));
  }
  std::vector<float> logits;
  SCD_RETURN_IF_ERROR(Decode(seqs, tokens, &logits));
  SampleHostRows(logits.data(), model().config.vocab_size, draws, next);
  return absl::OkStatus();
}

void SampleHostRows(const float* logits, int vocab, absl::Span<const SampleDraw> draws,
                    std::vector<int32_t>* next) {
  const size_t v = static_cast<size_t>(vocab);
  next->resize(draws.size());
  std::vector<std::pair<float, int32_t>> scratch;  // one sort buffer for the batch
  for (size_t b = 0; b < draws.size(); ++b) {
    (*next)[b] = SampleWithDraw(absl::MakeConstSpan(logits + b * v, v), draws[b].params,
                                draws[b].canonical, &scratch);
  }
}

bool BackendAvailable(BackendKind kind) {
  switch (kind) {
    case BackendKind::kCpu:
      return true;
    case BackendKind::kCuda:
#if SCD_HAVE_CUDA
      return CudaDeviceCount() > 0;
#else
      return false;
#endif
  }
  return false;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(BackendKind kind,
                                                       std::shared_ptr<const Model> model,
                                                       const BackendOptions& options) {
  switch (kind) {
    case BackendKind::kCpu:
      return CreateCpuBackend(std::move(model), options.weights_dtype);
    case BackendKind::kCuda:
      if (options.weights_dtype != WeightDtype::kF32) {
        return absl::InvalidArgumentError(
            absl::StrCat("weights.dtype ", std::string(WeightDtypeName(options.weights_dtype)),
                         " runs on the CPU backend only; the CUDA backend takes f32"));
      }
#if SCD_HAVE_CUDA
      return CreateCudaBackend(std::move(model), options);
#else
      (void)options;
      return absl::UnavailableError(
          "this build has no CUDA backend (configure with -DSCD_CUDA=ON on a machine with nvcc)");
#endif
  }
  return absl::InvalidArgumentError("unknown backend kind");
}

absl::StatusOr<WeightDtype> ParseWeightDtype(std::string_view name) {
  if (name == "f32") return WeightDtype::kF32;
  if (name == "int8") return WeightDtype::kInt8;
  return absl::InvalidArgumentError(absl::StrCat("unknown weights dtype \"",
                                                 absl::string_view(name.data(), name.size()),
                                                 "\" (choices: f32, int8)"));
}

std::string_view WeightDtypeName(WeightDtype dtype) {
  return dtype == WeightDtype::kInt8 ? "int8" : "f32";
}

absl::StatusOr<BackendKind> ParseBackendKind(std::string_view name) {
  if (name == "cpu") return BackendKind::kCpu;
  if (name == "cuda") return BackendKind::kCuda;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown backend '", std::string(name), "' (expected cpu or cuda)"));
}

}  // namespace scd
