// See zoom_router.h.
#include "common/sekv/zoom_router.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace scd::sekv {

float Sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

void ZoomRouter::Reset(int num_layers, int num_kv_heads, int head_dim, int route_dim) {
  num_layers_ = num_layers;
  num_kv_heads_ = num_kv_heads;
  head_dim_ = head_dim;
  route_dim_ = route_dim;
  const size_t n = static_cast<size_t>(num_layers) * num_kv_heads * route_dim * head_dim;
  p_q_.assign(n, 0.0f);
  p_k_.assign(n, 0.0f);
  gates_.assign(static_cast<size_t>(num_layers) * num_kv_heads, RouterGate{});
}

ZoomRouter ZoomRouter::Default(int num_layers, int num_kv_heads, int head_dim,
                               float share_threshold) {
  ZoomRouter r;
  r.Reset(num_layers, num_kv_heads, head_dim, 1);
  for (RouterGate& g : r.gates_) {
    g.w_size = 0;
    g.w_share = 1;
    g.bias = -std::log(std::max(share_threshold, 1e-6f));
    g.tau = 0.5f;
  }
  return r;
}

void ZoomRouter::RouteQuery(int l, int g, const float* q, float* q_route) const {
  const float* pq = p_q(l, g);
  const float* pk = p_k(l, g);
  std::fill(q_route, q_route + head_dim_, 0.0f);
  for (int i = 0; i < route_dim_; ++i) {
    float z = 0;
    for (int c = 0; c < head_dim_; ++c) z += pq[static_cast<size_t>(i) * head_dim_ + c] * q[c];
    for (int c = 0; c < head_dim_; ++c)
      q_route[c] += z * pk[static_cast<size_t>(i) * head_dim_ + c];
  }
}

absl::Status ZoomRouter::Validate() const {
  if (num_layers_ <= 0 || num_kv_heads_ <= 0 || head_dim_ <= 0 || route_dim_ <= 0) {
    return absl::InvalidArgumentError("zoom router has an empty shape");
  }
  for (float x : p_q_) {
    if (!std::isfinite(x)) return absl::InvalidArgumentError("zoom router P_q is not finite");
  }
  for (float x : p_k_) {
    if (!std::isfinite(x)) return absl::InvalidArgumentError("zoom router P_k is not finite");
  }
  for (const RouterGate& g : gates_) {
    if (!std::isfinite(g.w_size) || !std::isfinite(g.w_share) || !std::isfinite(g.bias) ||
        !(g.tau >= 0 && g.tau <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("zoom router gate is invalid (tau ", g.tau, ")"));
    }
  }
  return absl::OkStatus();
}

std::vector<int> SelectSpans(absl::Span<const float> alpha, absl::Span<const int> lengths,
                             float tau, int budget_tokens) {
  // The candidates come off a heap in the order of a stable sort by descending alpha, so only
  // those looked at are ordered; the walk ends once the budget left is below the shortest
  // candidate, since then nothing else fits.
  std::vector<int> heap;
  int shortest = std::numeric_limits<int>::max();
  for (int s = 0; s < static_cast<int>(alpha.size()); ++s) {
    if (alpha[s] > tau) {
      heap.push_back(s);
      shortest = std::min(shortest, lengths[s]);
    }
  }
  auto after = [&](int a, int b) {  // a comes after b
    return alpha[a] < alpha[b] || (alpha[a] == alpha[b] && a > b);
  };
  std::make_heap(heap.begin(), heap.end(), after);
  std::vector<int> chosen;
  int used = 0;
  while (!heap.empty() && budget_tokens - used >= shortest) {
    std::pop_heap(heap.begin(), heap.end(), after);
    const int s = heap.back();
    heap.pop_back();
    if (used + lengths[s] > budget_tokens) continue;
    used += lengths[s];
    chosen.push_back(s);
  }
  return chosen;
}

}  // namespace scd::sekv
