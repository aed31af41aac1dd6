// See rate_ladder.h.
#include "common/scd/rate_ladder.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/scd/artifact.h"

namespace scd {
namespace {

// Rank scales of the ladder, as fractions num/4.
constexpr int kRankQuarters[] = {4, 3, 2, 1};

int Scaled(int rank, int quarters) { return std::max(1, (rank * quarters + 3) / 4); }

}  // namespace

std::vector<Rung> RateLadder(int rank_k, int rank_v, int patch_budget) {
  std::vector<Rung> ladder;
  for (int quarters : kRankQuarters) {
    const Rung ranks{Scaled(rank_k, quarters), Scaled(rank_v, quarters), 0};
    // Small ranks can round to the same rung twice (rank 1 at every scale): keep the first.
    if (!ladder.empty() && ladder.back().rank_k == ranks.rank_k &&
        ladder.back().rank_v == ranks.rank_v) {
      continue;
    }
    for (int k = std::max(patch_budget, 0); k >= 0; --k) {
      ladder.push_back({ranks.rank_k, ranks.rank_v, k});
    }
  }
  return ladder;
}

std::vector<Rung> RateLadder(const ScdArtifact& artifact) {
  return RateLadder(artifact.rank_k, artifact.rank_v, artifact.patch_budget);
}

std::string RungName(const Rung& rung) {
  return absl::StrCat("r", rung.rank_k, "/", rung.rank_v, " k", rung.patch_layers);
}

std::string QualityTableMarkdown(const std::vector<QualityRecord>& records,
                                 const std::vector<Rung>& ladder) {
  double raw = 0;
  for (const QualityRecord& r : records) {
    if (r.mode == "raw") raw = r.bytes_per_token;
  }
  std::string out =
      "| mode | rung | KL | top-1 | bytes/token | of raw |\n|---|---|---|---|---|---|\n";
  for (const QualityRecord& r : records) {
    const bool rung = r.mode == "scd" && static_cast<size_t>(r.rung) < ladder.size();
    absl::StrAppend(&out, "| ", r.mode, " | ",
                    rung ? absl::StrCat(r.rung, " (", RungName(ladder[r.rung]), ")") : "", " | ",
                    absl::StrFormat("%.4f | %.3f | %.1f | ", r.kl, r.top1, r.bytes_per_token),
                    raw > 0 ? absl::StrFormat("%.3f", r.bytes_per_token / raw) : "", " |\n");
  }
  return out;
}

nlohmann::json QualityRecordsToJson(const std::vector<QualityRecord>& records) {
  nlohmann::json j = nlohmann::json::array();
  for (const QualityRecord& r : records) {
    j.push_back({{"mode", r.mode},
                 {"rung", r.rung},
                 {"kl", r.kl},
                 {"top1", r.top1},
                 {"bytes_per_token", r.bytes_per_token}});
  }
  return j;
}

absl::StatusOr<std::vector<QualityRecord>> QualityRecordsFromJson(const nlohmann::json& j) {
  if (!j.is_array()) return absl::InvalidArgumentError("the quality record is not a list");
  std::vector<QualityRecord> records;
  for (size_t i = 0; i < j.size(); ++i) {
    const nlohmann::json& e = j[i];
    auto bad = [&](const char* what) {
      return absl::InvalidArgumentError(absl::StrCat("quality record entry ", i, ": ", what));
    };
    if (!e.is_object() || !e.contains("mode") || !e["mode"].is_string()) return bad("no mode");
    QualityRecord r;
    r.mode = e["mode"].get<std::string>();
    if (!e.contains("rung") || !e["rung"].is_number_integer() || e["rung"].get<int>() < 0) {
      return bad("no rung, or a negative one");
    }
    r.rung = e["rung"].get<int>();
    for (auto [name, out] : {std::pair<const char*, double*>{"kl", &r.kl},
                             {"top1", &r.top1},
                             {"bytes_per_token", &r.bytes_per_token}}) {
      if (!e.contains(name) || !e[name].is_number() || !std::isfinite(e[name].get<double>()) ||
          e[name].get<double>() < 0) {
        return bad(absl::StrCat("no finite, non-negative ", name).c_str());
      }
      *out = e[name].get<double>();
    }
    if (r.top1 > 1) return bad("top1 above 1");
    records.push_back(std::move(r));
  }
  return records;
}

}  // namespace scd
