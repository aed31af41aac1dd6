// GpuSekv's decode step of a layer (gpu_sekv_impl.h): the token into the tiers, the resident
// softmax, the zoom-in gate, the zoom-in (host or device) and the merge; and Settle.
#if SCD_HAVE_CUDA
#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/sekv/gpu_sekv_impl.h"

namespace scd::sekv {
namespace {

using cuda::AttentionSegment;
using cuda::Bf16;
using cuda::KvType;
using cuda::StreamHandle;
using gpu_sekv_internal::DeviceLayer;
using gpu_sekv_internal::kResidentSegments;
using gpu_sekv_internal::kZoomCounts;
using gpu_sekv_internal::Upload;

}  // namespace

absl::Status GpuSekv::Impl::Settle(StreamHandle s) {
  SCD_RETURN_IF_ERROR(cuda::SynchronizeStream(s));
  Fold();
  return absl::OkStatus();
}

void GpuSekv::Impl::Fold() {
  if (!device_zoom_) return;
  const int kvd = shape_.kv_dim();
  std::fill(unsettled_.begin(), unsettled_.end(), 0);
  for (int l = 0; l < shape_.num_layers; ++l) {
    if (!append_pending_[l]) continue;
    const float* slot = host_append_.as<float>() + static_cast<size_t>(l) * 2 * kvd;
    cache_.ExternalAppend(l, slot, slot + kvd);
    append_pending_[l] = 0;
  }
  if (counts_copied_) {
    const int64_t* now = host_counts_.as<int64_t>();
    ZoomStats z;
    for (int g = 0; g < shape_.num_kv_heads; ++g) {
      const size_t at = static_cast<size_t>(g) * kZoomCounts;
      z.steps += now[at] - counts_seen_[at];
      z.expanded_spans += now[at + 1] - counts_seen_[at + 1];
      z.expanded_tokens += now[at + 2] - counts_seen_[at + 2];
      z.candidate_tokens += now[at + 3] - counts_seen_[at + 3];
    }
    counts_seen_.assign(now, now + counts_seen_.size());
    cache_.AddZoomStats(z);
    counts_copied_ = false;
  }
}

absl::Status GpuSekv::Impl::UploadResident(int l, int t, int window_rows, const float* lc,
                                           const uint8_t* skip, bool pins, StreamHandle s) {
  const SpanStore& st = cache_.store(l);
  const DeviceLayer& d = layers_[l];
  const int hd = shape_.head_dim, kvd = shape_.kv_dim(), ns = st.num_spans();
  AttentionSegment* table = HostTable(l, t);
  for (int g = 0; g < shape_.num_kv_heads; ++g) {
    AttentionSegment* seg = table + g * kResidentSegments;
    const size_t col = static_cast<size_t>(g) * hd;
    seg[0] = {At(d.anchor_k, col),
              At(d.anchor_v, col),
              nullptr,
              nullptr,
              st.num_anchors(),
              kvd,
              type_,
              0};
    seg[1] = {At(d.summary_k, col),
              At(d.summary_v, col),
              ns > 0 ? lc + static_cast<size_t>(g) * ns : nullptr,
              ns > 0 && skip != nullptr ? skip + static_cast<size_t>(g) * ns : nullptr,
              ns,
              kvd,
              type_,
              0};
    seg[2] = {
        At(d.window_k, col), At(d.window_v, col), nullptr, nullptr, window_rows, kvd, type_, 0};
    seg[3] = AttentionSegment{};
    const int pr = pins ? cache_.pin_rows(l, g) : 0;
    if (pr > 0) {
      const size_t off = static_cast<size_t>(g) * pins_ * hd;
      seg[3] = {At(d.pin_k, off), At(d.pin_v, off), nullptr, nullptr, pr, hd, type_, 0};
    }
  }
  return cuda::CopyToDevice(DeviceTable(l, t), table, sizeof(AttentionSegment) * TableSize(), s);
}

absl::Status GpuSekv::Impl::Attend(int l, const float* q, const float* k, const float* v,
                                   float* out, StreamHandle s) {
  if (l < 0 || l >= shape_.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("GpuSekv: no layer ", l));
  }
  // The device zoom's last step of this layer must be done (its tables are rewritten below)
  // and have reached the host window first.
  if (device_zoom_ && unsettled_[l]) SCD_RETURN_IF_ERROR(Settle(last_stream_));
  last_stream_ = s;
  const int kvd = shape_.kv_dim(), qd = shape_.q_dim();
  const int rows = cache_.store(l).window_rows() + 1;  // the window with this token

  // 1. The token joins the device window; q, k, v go to the host for the planning.
  SCD_RETURN_IF_ERROR(JoinWindow(l, rows, k, v, s));
  if (device_zoom_ && cache_.pins_done(l)) {
    // The host window gets the token at Settle; nothing else comes back.
    float* slot = host_append_.as<float>() + static_cast<size_t>(l) * 2 * kvd;
    SCD_RETURN_IF_ERROR(cuda::CopyToHost(slot, k, sizeof(float) * kvd, s));
    SCD_RETURN_IF_ERROR(cuda::CopyToHost(slot + kvd, v, sizeof(float) * kvd, s));
    append_pending_[l] = 1;
    return ZoomOnDevice(l, rows, q, out, s);
  }
  HostToken token;
  token.q = host_qkv_.as<float>();
  token.k = token.q + qd;
  token.v = token.k + kvd;
  SCD_RETURN_IF_ERROR(cuda::CopyToHost(token.q, q, sizeof(float) * qd, s));
  SCD_RETURN_IF_ERROR(cuda::CopyToHost(token.k, k, sizeof(float) * kvd, s));
  SCD_RETURN_IF_ERROR(cuda::CopyToHost(token.v, v, sizeof(float) * kvd, s));

  // 2. The observation-window anchors, at the layer's first step.
  if (!cache_.pins_done(l)) SCD_RETURN_IF_ERROR(PinAnchors(l, rows, q, &token, s));
  if (device_zoom_) {  // the layer's first step: its pins are chosen, the token appended
    if (!token.appended) SCD_RETURN_IF_ERROR(WaitAndAppend(l, &token, s));
    return ZoomOnDevice(l, rows, q, out, s);
  }

  // 3-4. Gate, selection, the step's summary counts.
  const bool zoom = cache_.zooms(l);
  SCD_RETURN_IF_ERROR(SelectOnHost(l, rows, q, zoom, &token, s));

  // 5. The resident part of the softmax, while the host waits for the rebuilt rows.
  SCD_RETURN_IF_ERROR(Mark(cuda::OpClass::kSekvResident, ResidentSoftmax(l, rows, q, out, s), s));
  if (!zoom) return absl::OkStatus();

  // 6. The expanded rows join the same softmax.
  SCD_RETURN_IF_ERROR(UploadExpandedRows(l, s));
  return MergeExpansion(l, q, out, s);
}

absl::Status GpuSekv::Impl::JoinWindow(int l, int rows, const float* k, const float* v,
                                       StreamHandle s) {
  DeviceLayer& d = layers_[l];
  const int kvd = shape_.kv_dim();
  SCD_RETURN_IF_ERROR(GrowWindow(l, rows, s));
  SCD_RETURN_IF_ERROR(Reserve(ResidentRows(l, rows), s));
  const size_t at = static_cast<size_t>(rows - 1) * kvd;
  if (type_ == KvType::kF32) {
    SCD_RETURN_IF_ERROR(cuda::CopyOnDevice(At(d.window_k, at), k, sizeof(float) * kvd, s));
    return cuda::CopyOnDevice(At(d.window_v, at), v, sizeof(float) * kvd, s);
  }
  SCD_RETURN_IF_ERROR(cuda::F32ToBf16(k, static_cast<Bf16*>(At(d.window_k, at)), kvd, s));
  return cuda::F32ToBf16(v, static_cast<Bf16*>(At(d.window_v, at)), kvd, s);
}

absl::Status GpuSekv::Impl::WaitAndAppend(int l, HostToken* token, StreamHandle s) {
  SCD_RETURN_IF_ERROR(cuda::SynchronizeStream(s));
  if (!token->appended) cache_.ExternalAppend(l, token->k, token->v);
  token->appended = true;
  return absl::OkStatus();
}

absl::Status GpuSekv::Impl::PinAnchors(int l, int rows, const float* q, HostToken* token,
                                       StreamHandle s) {
  DeviceLayer& d = layers_[l];
  const int hd = shape_.head_dim, heads = shape_.num_heads, groups = shape_.num_kv_heads;
  float* lse_host = host_la_.as<float>();
  SCD_RETURN_IF_ERROR(ResidentLse(l, 0, rows, q, /*pins=*/false, s));
  SCD_RETURN_IF_ERROR(cuda::CopyToHost(lse_host, lse_.data(), sizeof(float) * heads, s));
  SCD_RETURN_IF_ERROR(WaitAndAppend(l, token, s));
  SCD_RETURN_IF_ERROR(cache_.ExternalPin(l, token->q, absl::MakeConstSpan(lse_host, heads)));
  if (pins_ <= 0) return absl::OkStatus();
  const size_t pin_elements = static_cast<size_t>(groups) * pins_ * hd;
  SCD_RETURN_IF_ERROR(UploadRows(&d.pin_k, cache_.pin_k(l), pin_elements, "sekv pins", s));
  SCD_RETURN_IF_ERROR(UploadRows(&d.pin_v, cache_.pin_v(l), pin_elements, "sekv pins", s));
  SCD_RETURN_IF_ERROR(UploadCounts(l, s));
  if (device_zoom_ && cache_.zooms(l)) {  // the device zoom skips the pinned tokens
    const int ns = cache_.store(l).num_spans();
    const size_t flags = static_cast<size_t>(groups) * cache_.span_token_offset(ns);
    SCD_RETURN_IF_ERROR(Upload(&d.pinned_flags, cache_.pinned_flags(l), flags, "sekv pins", s));
  }
  return absl::OkStatus();
}

absl::Status GpuSekv::Impl::SelectOnHost(int l, int rows, const float* q, bool zoom,
                                         HostToken* token, StreamHandle s) {
  DeviceLayer& d = layers_[l];
  const int heads = shape_.num_heads, groups = shape_.num_kv_heads;
  const int ns = cache_.store(l).num_spans(), gs = groups * ns;
  float* lse_host = host_la_.as<float>();
  float* alpha_host = lse_host + heads;
  int num_edits = 0;
  SCD_RETURN_IF_ERROR(Mark(cuda::OpClass::kAttention, absl::OkStatus(), s));  // as the device path
  if (zoom) {
    SCD_RETURN_IF_ERROR(Mark(cuda::OpClass::kSekvGate, Gate(l, rows, q, s), s));
    SCD_RETURN_IF_ERROR(cuda::CopyToHost(lse_host, lse_.data(), sizeof(float) * heads, s));
    SCD_RETURN_IF_ERROR(cuda::CopyToHost(alpha_host, alpha_.data(), sizeof(float) * gs, s));
    SCD_RETURN_IF_ERROR(WaitAndAppend(l, token, s));
    SCD_RETURN_IF_ERROR(cache_.ExternalZoom(l, token->q, absl::MakeConstSpan(lse_host, heads),
                                            absl::MakeConstSpan(alpha_host, gs)));
    int32_t* edits = host_edits_.as<int32_t>();
    for (int g = 0; g < groups; ++g) {
      const int* expanded = cache_.expanded(g);
      for (int j = 0; j < ns; ++j) {
        if (expanded[j] == 0) continue;
        edits[2 * num_edits] = g * ns + j;
        edits[2 * num_edits + 1] = expanded[j];
        ++num_edits;
      }
    }
    if (num_edits > 0) {
      SCD_RETURN_IF_ERROR(
          cuda::CopyToDevice(edits_.data(), edits, sizeof(int32_t) * 2 * num_edits, s));
    }
  } else {
    SCD_RETURN_IF_ERROR(WaitAndAppend(l, token, s));
  }
  return Mark(
      cuda::OpClass::kSekvZoom,
      cuda::SekvSummaryStep(d.base_lc.as<float>(), d.remaining.as<int32_t>(), edits_.as<int32_t>(),
                            num_edits, gs, step_lc_.as<float>(), step_skip_.as<uint8_t>(), s),
      s);
}

absl::Status GpuSekv::Impl::UploadExpandedRows(int l, StreamHandle s) {
  DeviceLayer& d = layers_[l];
  const int hd = shape_.head_dim, groups = shape_.num_kv_heads;
  const size_t block_elements = static_cast<size_t>(groups) * budget_ * hd;
  char* row_k = host_rows_.as<char>();
  char* row_v = row_k + elem_ * block_elements;
  auto put = [&](char* dst, const float* src) {
    if (type_ == KvType::kF32) {
      std::memcpy(dst, src, sizeof(float) * hd);
      return;
    }
    Bf16* out = reinterpret_cast<Bf16*>(dst);
    for (int i = 0; i < hd; ++i) out[i] = cuda::FloatToBf16(src[i]);
  };
  AttentionSegment* table = HostTable(l, 3);
  for (int g = 0; g < groups; ++g) {
    const BufferView b = cache_.ExpandedRows(l, g);
    int n = 0;
    for (int i = 0; i < b.rows; ++i) {
      if (!b.active[i]) continue;
      if (n == budget_) {
        return absl::InternalError(
            absl::StrCat("GpuSekv: more than ", budget_, " expanded rows for layer ", l));
      }
      const size_t dst = elem_ * (static_cast<size_t>(g) * budget_ + n) * hd;
      put(row_k + dst, b.k + static_cast<size_t>(i) * hd);
      put(row_v + dst, b.v + static_cast<size_t>(i) * hd);
      ++n;
    }
    const size_t off = static_cast<size_t>(g) * budget_ * hd;
    table[g * kResidentSegments] = {
        At(d.expanded_k, off), At(d.expanded_v, off), nullptr, nullptr, n, hd, type_, 0};
  }
  const size_t block = elem_ * block_elements;
  SCD_RETURN_IF_ERROR(cuda::CopyToDevice(d.expanded_k.data(), row_k, block, s));
  SCD_RETURN_IF_ERROR(cuda::CopyToDevice(d.expanded_v.data(), row_v, block, s));
  for (int g = 0; g < groups; ++g) {
    for (int j = 1; j < kResidentSegments; ++j) table[g * kResidentSegments + j] = {};
  }
  return cuda::CopyToDevice(DeviceTable(l, 3), table, sizeof(AttentionSegment) * TableSize(), s);
}

absl::Status GpuSekv::Impl::ResidentLse(int l, int t, int rows, const float* q, bool pins,
                                        StreamHandle s) {
  SCD_RETURN_IF_ERROR(UploadResident(l, t, rows, layers_[l].base_lc.as<float>(), nullptr, pins, s));
  return cuda::SekvAttention(q, DeviceTable(l, t), kResidentSegments, shape_.num_heads,
                             shape_.num_kv_heads, shape_.head_dim, ResidentRows(l, rows),
                             decode_impl_, nullptr, lse_.as<float>(), workspace_.as<float>(),
                             static_cast<int64_t>(workspace_.size() / sizeof(float)), s);
}

absl::Status GpuSekv::Impl::Gate(int l, int rows, const float* q, StreamHandle s) {
  SCD_RETURN_IF_ERROR(ResidentLse(l, 1, rows, q, /*pins=*/true, s));
  const DeviceLayer& d = layers_[l];
  return cuda::SekvRouteGate(q, d.p_q.as<float>(), d.p_k.as<float>(), route_dim_,
                             d.summary_k.data(), type_, shape_.kv_dim(), d.base_lc.as<float>(),
                             d.remaining.as<int32_t>(), d.gates.as<cuda::RouterGateParams>(),
                             lse_.as<float>(), cache_.store(l).num_spans(), shape_.num_heads,
                             shape_.num_kv_heads, shape_.head_dim, alpha_.as<float>(), s);
}

absl::Status GpuSekv::Impl::ResidentSoftmax(int l, int rows, const float* q, float* out,
                                            StreamHandle s) {
  SCD_RETURN_IF_ERROR(UploadResident(l, 2, rows, step_lc_.as<float>(), step_skip_.as<uint8_t>(),
                                     /*pins=*/true, s));
  return cuda::SekvAttention(q, DeviceTable(l, 2), kResidentSegments, shape_.num_heads,
                             shape_.num_kv_heads, shape_.head_dim, ResidentRows(l, rows),
                             decode_impl_, out, lse_.as<float>(), workspace_.as<float>(),
                             static_cast<int64_t>(workspace_.size() / sizeof(float)), s);
}

absl::Status GpuSekv::Impl::MergeExpansion(int l, const float* q, float* out, StreamHandle s) {
  const int heads = shape_.num_heads, hd = shape_.head_dim;
  SCD_RETURN_IF_ERROR(cuda::SekvAttention(
      q, DeviceTable(l, 3), kResidentSegments, heads, shape_.num_kv_heads, hd, budget_,
      decode_impl_, out_e_.as<float>(), lse_e_.as<float>(), workspace_.as<float>(),
      static_cast<int64_t>(workspace_.size() / sizeof(float)), s));
  return cuda::MergeAttention(out, lse_.as<float>(), out_e_.as<float>(), lse_e_.as<float>(), heads,
                              hd, out, s);
}

absl::Status GpuSekv::Impl::ZoomOnDevice(int l, int rows, const float* q, float* out,
                                         StreamHandle s) {
  unsettled_[l] = 1;
  const SpanStore& st = cache_.store(l);
  DeviceLayer& d = layers_[l];
  const int hd = shape_.head_dim, heads = shape_.num_heads;
  const int groups = shape_.num_kv_heads, ns = st.num_spans();
  const bool zoom = cache_.zooms(l);
  // The window's new row (and at the layer's first step its pins) so far: plain attention.
  SCD_RETURN_IF_ERROR(Mark(cuda::OpClass::kAttention, absl::OkStatus(), s));
  if (zoom) {
    SCD_RETURN_IF_ERROR(Mark(cuda::OpClass::kSekvGate, Gate(l, rows, q, s), s));
    SCD_RETURN_IF_ERROR(Mark(
        cuda::OpClass::kSekvZoom,
        cuda::SekvZoom(
            q, lse_.as<float>(), alpha_.as<float>(), d.tau.as<float>(), d.remaining.as<int32_t>(),
            d.base_lc.as<float>(), d.bases.as<cuda::SpanBasisRef>(),
            pins_ > 0 ? d.pinned_flags.as<uint8_t>() : nullptr, ns, heads, groups, hd, zoom_params_,
            d.expanded_k.data(), d.expanded_v.data(), type_, DeviceTable(l, 3), kResidentSegments,
            step_lc_.as<float>(), step_skip_.as<uint8_t>(), zoom_counts_.as<int64_t>(),
            zoom_ws_.data(), static_cast<int64_t>(zoom_ws_.size()), s),
        s));
  } else {
    SCD_RETURN_IF_ERROR(
        Mark(cuda::OpClass::kSekvZoom,
             cuda::SekvSummaryStep(d.base_lc.as<float>(), d.remaining.as<int32_t>(),
                                   edits_.as<int32_t>(), 0, groups * ns, step_lc_.as<float>(),
                                   step_skip_.as<uint8_t>(), s),
             s));
  }
  // The resident part of the softmax, then the expanded rows merged into it.
  SCD_RETURN_IF_ERROR(Mark(cuda::OpClass::kSekvResident, ResidentSoftmax(l, rows, q, out, s), s));
  if (!zoom) return absl::OkStatus();
  SCD_RETURN_IF_ERROR(MergeExpansion(l, q, out, s));
  if (l != last_zoom_layer_) return absl::OkStatus();
  // The step's last zoom-in: the counts of all of them, for Fold.
  counts_copied_ = true;
  return cuda::CopyToHost(host_counts_.data(), zoom_counts_.data(), zoom_counts_.size(), s);
}

}  // namespace scd::sekv

#endif  // SCD_HAVE_CUDA
