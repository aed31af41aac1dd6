// The codec: one interface for SCD and every baseline, so that all comparisons run through
// the same pipeline (docs/METHOD.md).
//   ProducerCodec::Encode  — producer prefill states → Payload (then SerializePayload)
//   ConsumerCodec::Rebuild — Payload → the consumer's KV cache in a backend Sequence
// Modes (CodecMode): oracle (ids only; the consumer prefills), raw (F16 pre-RoPE K/V), quant8
// and quant4 (KIVI), recompute (DroidSpeak: raw KV outside one block plus the residual
// entering it; the consumer recomputes the block), scd-reuse (REUSE codes everywhere) and scd
// (REUSE + PATCH on the artifact's selected layers). Surprisal travels with every mode but
// oracle, for SEKV.
#ifndef SCD_COMMON_SCD_CODEC_H_
#define SCD_COMMON_SCD_CODEC_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/runtime/backend.h"
#include "common/scd/artifact.h"
#include "common/scd/wire_format.h"

namespace scd {

struct CodecOptions {
  int kivi_group = 32;  // KIVI group size (tokens for keys, channels for values)
  // Producer side, for ablations: patch these layers instead of the rung's.
  std::optional<std::vector<int>> patch_layers;
  // Producer side: the rate ladder's rung (rate_ladder.h) of scd and scd-reuse payloads when
  // Encode names none; 0 is the artifact's own operating point.
  int rung = 0;
  // Consumer side: on a CUDA backend (in a CUDA build), scd and scd-reuse payloads are rebuilt
  // on the GPU (gpu_rebuild.h); false decodes on the host and uploads K/V through AppendKv.
  bool gpu_rebuild = true;
  // Consumer side, rebuilds on the host: a payload longer than a block is rebuilt a block of
  // rows at a time (PayloadRows, in its row granularity) through one set of F32 buffers,
  // instead of every row's F32 K/V at once. That bounds the rebuild's memory, and saves the
  // page faults of fresh buffers, which cost more than the decode itself on a 4 KB-page host.
  // 0 sizes the block so that its K/V of every layer takes about kCpuRebuildBlockBytes (at
  // least kCpuRebuildMinBlockRows rows, so that the decode GEMMs stay wide); buffers of at
  // most that size stay with the rebuilding thread for its next rebuild. Recompute
  // payloads are rebuilt whole: their block's recompute is a prefill, faster on all its rows
  // at once. Blocks or whole, the cache holds the same rows (bit for bit where the decode is
  // per row; the decode GEMMs may round differently by blocking).
  int cpu_block_rows = 0;
};

inline constexpr size_t kCpuRebuildBlockBytes = size_t{8} << 20;
inline constexpr size_t kCpuRebuildMinBlockRows = 64;

class GpuRebuild;

// The prefill hooks a mode needs from the producer.
PrefillOptions ProducerPrefillOptions(CodecMode mode);

// Whether payloads of `mode` need the pair's calibration artifact (recompute, scd-reuse, scd).
bool CodecModeNeedsArtifact(CodecMode mode);

class ProducerCodec {
 public:
  // `artifact` may be null for oracle/raw/quant modes; recompute and scd modes need it.
  // Fails when the artifact was calibrated for another producer.
  static absl::StatusOr<std::unique_ptr<ProducerCodec>> Create(
      std::shared_ptr<const Model> producer, std::string consumer_digest,
      std::shared_ptr<const ScdArtifact> artifact, CodecOptions options = {});

  // Encodes the states of `tokens` (from a producer Prefill with ProducerPrefillOptions)
  // placed at `start_position` of the consumer's sequence; scd and scd-reuse payloads at
  // `rung` of the artifact's rate ladder (CodecOptions::rung when not given). INVALID_ARGUMENT
  // for a rung the ladder lacks, or a rung with another mode.
  absl::StatusOr<Payload> Encode(CodecMode mode, absl::Span<const int32_t> tokens,
                                 const PrefillResult& states, int start_position = 0,
                                 std::optional<int> rung = std::nullopt) const;

  // What `mode`'s payloads carry in their header: the pair digest, or, for scd and scd-reuse
  // codes on a shared basis (the artifact's basis_id), the basis digest (MakeBasisDigest),
  // the same for every consumer on that basis.
  PairDigest pair_digest(CodecMode mode) const;
  bool on_basis() const { return artifact_ != nullptr && !artifact_->basis_id.empty(); }

  // On a shared basis: the payloads serve every one of `sections` (artifacts of other
  // consumers on the same basis; this codec's own always): an scd payload at rung i patches
  // the union of the sections' first k'_i patch layers and carries REUSE codes of every layer
  // that some section does not patch, so that each consumer rebuilds from the payload
  // exactly what a payload of its own would give it. FAILED_PRECONDITION for a section on
  // another basis, or with another rate ladder (a rung must mean the same ranks and patch
  // budget to all).
  absl::Status ServeSections(const std::vector<const ScdArtifact*>& sections);
  // What serving several sections adds to a payload of `mode` at `rung`, in bytes per context
  // token, over a payload of this consumer's own layout (the patches and REUSE codes only
  // other sections need); 0 with one section, or for other modes.
  double SharedExtraBytesPerToken(CodecMode mode, int rung) const;

 private:
  ProducerCodec() = default;
  std::shared_ptr<const Model> producer_;
  std::string consumer_digest_;
  std::shared_ptr<const ScdArtifact> artifact_;
  std::vector<Rung> ladder_;  // the artifact's rate ladder; empty without one
  // On a shared basis: the patch order of every section served (ServeSections), own first.
  std::vector<std::vector<int>> section_orders_;
  CodecOptions options_;
};

struct RebuildStats {
  double decode_seconds = 0;  // codes → K/V (dequantise, REUSE decode, PATCH align + project)
  double append_seconds = 0;  // K/V → cache (RoPE) or the consumer's own compute
};

class ConsumerCodec {
 public:
  // Fails when the artifact was calibrated for another consumer. `producer_digest` is the
  // producer the consumer accepts payloads from (the artifact's when one is given).
  static absl::StatusOr<std::unique_ptr<ConsumerCodec>> Create(
      std::shared_ptr<const Model> consumer, std::string producer_digest,
      std::shared_ptr<const ScdArtifact> artifact, CodecOptions options = {});

  // Whether `p` may go into `seq`: made for this pair (or, flagged on a shared basis, encoded
  // on this consumer's artifact section's basis), the consumer's layer count, starting at
  // seq.length(), holding tokens. What Rebuild checks first; an oracle payload then needs only
  // its tokens prefilled (the decode engine does that in chunks). A payload on a shared basis
  // may carry a layer both as a PATCH code and as REUSE codes (ProducerCodec::ServeSections):
  // the consumer patches it when its section patches it at the payload's rung, and decodes its
  // REUSE codes otherwise. A layer carried one way only is rebuilt that way.
  absl::Status Check(const Payload& p, const Sequence& seq) const;

  // Appends the payload's positions to `seq` (whose length must equal start_position).
  // Rejects payloads made for another pair, or whose blocks do not match this pair's shapes.
  absl::Status Rebuild(const Payload& payload, Backend& backend, Sequence& seq,
                       RebuildStats* stats = nullptr) const;

  // The rows per block of `payload`'s rebuild on the host (CodecOptions::cpu_block_rows, in
  // its row granularity): its row count when it is rebuilt whole.
  size_t HostBlockRows(const Payload& payload) const;

  // Takes the device memory that rebuilds of payload chunks of up to `rows` tokens will use on
  // `backend` now (the GPU rebuild's decoders, aligners and buffers, gpu_rebuild.h), so that
  // serving allocates none of it; nothing where payloads are rebuilt on the host (no CUDA
  // backend, no artifact, gpu_rebuild off). RESOURCE_EXHAUSTED when the device has no room.
  absl::Status ReserveRebuild(const Backend& backend, int rows);
  // The device and pinned host memory the rebuilds hold now (0 on the host path).
  WorkspaceBytes RebuildWorkspace() const;

 private:
  ConsumerCodec() = default;
  std::shared_ptr<const Model> consumer_;
  std::string producer_digest_;
  std::shared_ptr<const ScdArtifact> artifact_;
  std::vector<Rung> ladder_;  // the artifact's rate ladder; empty without one
  // A host rebuild's buffers (codec.cc), reused from block to block.
  struct HostBuffers;
  // The rows per block by default: about kCpuRebuildBlockBytes of F32 K/V.
  size_t DefaultBlockRows() const;
  absl::Status CheckBasis(const Payload& p, const Sequence& seq) const;
  absl::Status CheckShape(const Payload& p, const Sequence& seq) const;
  // The layers this consumer's section patches in a payload of `mode` at `rung`.
  std::vector<int> OwnPatchLayers(CodecMode mode, const Rung& rung) const;
  // Whether `p`'s blocks are those of this consumer's own layout (always off a shared basis).
  bool OwnLayout(const Payload& p) const;
  // Rebuilds `p` whole on the host through `buffers`.
  absl::Status RebuildOnHost(const Payload& p, Backend& backend, Sequence& seq, RebuildStats& st,
                             HostBuffers& buffers) const;

  CodecOptions options_;
  std::shared_ptr<GpuRebuild> gpu_;  // with options_.gpu_rebuild and an artifact
};

}  // namespace scd

#endif  // SCD_COMMON_SCD_CODEC_H_
