// ZoomRouter: decides which spans to expand at each decode step (SeKV "zoom-in"; docs/METHOD.md
// "SEKV"). Per layer l and KV head g, for a query q of a head in g's group and span S:
//   z_S = <P_q q, P_k k̄_S> + w_size · log|S| + w_share · (ŝ_S − LSE) + b,   α_S = σ(z_S)
// where P_q, P_k [r, head_dim] are the routing projections, ŝ_S = <q, k̄_S>/√d + log|S| is
// the summary's attention logit and LSE the log-sum-exp over every resident entry, so
// ŝ_S − LSE is the log of the share of attention the summary receives. A span is a candidate
// when α_S > τ_{l,g} for any query head of the group; candidates are expanded in order of α
// while their tokens fit the budget.
//
// Calibration (sekv_calibration.h) fits P_q, P_k, w_size, w_share, b and τ per (l, g). The
// uncalibrated default routes on the share alone: w_share = 1, b = −log θ, τ = ½, P = 0, i.e.
// "expand a span whose summary draws more than θ of the attention".
#ifndef SCD_COMMON_SEKV_ZOOM_ROUTER_H_
#define SCD_COMMON_SEKV_ZOOM_ROUTER_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace scd::sekv {

struct RouterGate {
  float w_size = 0, w_share = 1, bias = 0, tau = 0.5f;
};

class ZoomRouter {
 public:
  ZoomRouter() = default;
  // The default router (see above) with share threshold θ.
  static ZoomRouter Default(int num_layers, int num_kv_heads, int head_dim, float share_threshold);

  int num_layers() const { return num_layers_; }
  int num_kv_heads() const { return num_kv_heads_; }
  int head_dim() const { return head_dim_; }
  int route_dim() const { return route_dim_; }

  // [r, head_dim] projections and the gate of (layer, kv head).
  float* p_q(int l, int g) { return p_q_.data() + Offset(l, g); }
  float* p_k(int l, int g) { return p_k_.data() + Offset(l, g); }
  const float* p_q(int l, int g) const { return p_q_.data() + Offset(l, g); }
  const float* p_k(int l, int g) const { return p_k_.data() + Offset(l, g); }
  RouterGate& gate(int l, int g) { return gates_[static_cast<size_t>(l) * num_kv_heads_ + g]; }
  const RouterGate& gate(int l, int g) const {
    return gates_[static_cast<size_t>(l) * num_kv_heads_ + g];
  }

  // Resizes to the given shape with zero projections and default gates.
  void Reset(int num_layers, int num_kv_heads, int head_dim, int route_dim);

  // q_route [head_dim] = P_kᵀ P_q q, so that <P_q q, P_k k̄> = <q_route, k̄>.
  void RouteQuery(int l, int g, const float* q, float* q_route) const;
  // z_S for one span given <q_route, k̄_S>, log|S| and the log-share ŝ_S − LSE.
  float Logit(int l, int g, float bilinear, float log_len, float log_share) const {
    const RouterGate& gt = gate(l, g);
    return bilinear + gt.w_size * log_len + gt.w_share * log_share + gt.bias;
  }

  absl::Status Validate() const;

  // Whole tensors, for the artifact: [L, G, r, head_dim] each, and the gates [L, G].
  std::vector<float>& all_p_q() { return p_q_; }
  std::vector<float>& all_p_k() { return p_k_; }
  const std::vector<float>& all_p_q() const { return p_q_; }
  const std::vector<float>& all_p_k() const { return p_k_; }

 private:
  size_t Offset(int l, int g) const {
    return (static_cast<size_t>(l) * num_kv_heads_ + g) * route_dim_ * head_dim_;
  }
  int num_layers_ = 0, num_kv_heads_ = 0, head_dim_ = 0, route_dim_ = 0;
  std::vector<float> p_q_, p_k_;   // [L, G, r, head_dim]
  std::vector<RouterGate> gates_;  // [L, G]
};

float Sigmoid(float z);

// Picks spans with alpha[s] > tau, highest alpha first (equal alpha: lower index first), while
// the sum of their lengths stays within `budget_tokens` (a span that does not fit is passed
// over for smaller ones). Returns span indices in descending alpha. O(n + k log n) for n
// spans over tau and k looked at: a permissive gate at a long context passes thousands of
// spans per KV head and layer, of which a budget of tens of tokens takes a few.
std::vector<int> SelectSpans(absl::Span<const float> alpha, absl::Span<const int> lengths,
                             float tau, int budget_tokens);

}  // namespace scd::sekv

#endif  // SCD_COMMON_SEKV_ZOOM_ROUTER_H_
