// Registry: named metric families with labels, rendered in the Prometheus text exposition
// format 0.0.4 (https://prometheus.io/docs/instrumenting/exposition_formats/) for `/metrics`.
//
// A family has a name, a help line, a type and fixed label names; each distinct tuple of label
// values is one series, created on first use and kept for the process lifetime (pointers stay
// valid, so hot paths look a series up once and cache it). Names are checked at registration
// against the rules `promtool check metrics` lints (snake_case, counters end in `_total`,
// nothing else does, no `_bucket`/`_count`/`_sum` outside histograms, base units rather than
// `_ms` or `milliseconds`, non-empty help), so whatever a daemon registers passes promtool.
// Thread-safe: registration and series creation take a mutex, updates are atomics
// (metric.h), and Render reads a consistent view of each series.
#ifndef SCD_COMMON_METRICS_REGISTRY_H_
#define SCD_COMMON_METRICS_REGISTRY_H_

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/metrics/metric.h"

namespace scd::metrics {

enum class MetricType { kCounter, kGauge, kHistogram };

// "counter", "gauge" or "histogram", as on a `# TYPE` line.
const char* MetricTypeName(MetricType type);

// Formatting shared by the families (exposed for tests and other exporters).
// A sample value: shortest round-trip decimal, or "+Inf", "-Inf", "NaN".
std::string FormatMetricValue(double value);
// A label value with `\`, `"` and newline escaped.
std::string EscapeLabelValue(const std::string& value);
// A help text with `\` and newline escaped.
std::string EscapeHelp(const std::string& help);

namespace metrics_internal {
// `a="x",b="y"` (no braces) for parallel names and values.
std::string RenderLabelPairs(const std::vector<std::string>& names,
                             const std::vector<std::string>& values);
// Sample lines of one series; `labels` is the RenderLabelPairs text (may be empty).
void AppendSamples(const std::string& name, const std::string& labels, const Counter& metric,
                   std::string* out);
void AppendSamples(const std::string& name, const std::string& labels, const Gauge& metric,
                   std::string* out);
void AppendSamples(const std::string& name, const std::string& labels, const Histogram& metric,
                   std::string* out);
}  // namespace metrics_internal

// What the registry holds; see Family<T> for the typed interface.
class FamilyBase {
 public:
  virtual ~FamilyBase() = default;
  FamilyBase(const FamilyBase&) = delete;
  FamilyBase& operator=(const FamilyBase&) = delete;

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  MetricType type() const { return type_; }
  const std::vector<std::string>& label_names() const { return label_names_; }

  // Appends the `# HELP` and `# TYPE` lines and every series' samples. A family with no series
  // yet renders its header only, which the format allows.
  void Render(std::string* out) const;

 protected:
  FamilyBase(std::string name, std::string help, MetricType type,
             std::vector<std::string> label_names)
      : name_(std::move(name)),
        help_(std::move(help)),
        type_(type),
        label_names_(std::move(label_names)) {}
  virtual void RenderSamples(std::string* out) const = 0;

 private:
  const std::string name_;
  const std::string help_;
  const MetricType type_;
  const std::vector<std::string> label_names_;
};

// A family of one metric type T (Counter, Gauge or Histogram). Created by Registry.
template <typename T>
class Family final : public FamilyBase {
 public:
  // The series for `label_values`, given in the order of label_names(); created on first use.
  // InvalidArgument when the number of values differs from the number of label names.
  absl::StatusOr<T*> WithLabels(const std::vector<std::string>& label_values) {
    if (label_values.size() != label_names().size()) {
      return absl::InvalidArgumentError(absl::StrCat("metric ", name(), " takes ",
                                                     label_names().size(), " label values, got ",
                                                     label_values.size()));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = series_.find(label_values);
    if (it == series_.end()) {
      auto entry = std::make_unique<Series>();
      entry->labels = metrics_internal::RenderLabelPairs(label_names(), label_values);
      entry->metric = NewMetric();
      it = series_.emplace(label_values, std::move(entry)).first;
    }
    return it->second->metric.get();
  }

 private:
  friend class Registry;
  struct Series {
    std::string labels;
    std::unique_ptr<T> metric;
  };

  Family(std::string name, std::string help, MetricType type, std::vector<std::string> label_names,
         std::vector<double> upper_bounds)
      : FamilyBase(std::move(name), std::move(help), type, std::move(label_names)),
        upper_bounds_(std::move(upper_bounds)) {}

  std::unique_ptr<T> NewMetric() const {
    if constexpr (std::is_same_v<T, Histogram>) {
      return std::make_unique<Histogram>(upper_bounds_);
    } else {
      return std::make_unique<T>();
    }
  }

  void RenderSamples(std::string* out) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [values, series] : series_) {
      metrics_internal::AppendSamples(name(), series->labels, *series->metric, out);
    }
  }

  const std::vector<double> upper_bounds_;  // histograms only
  mutable std::mutex mutex_;
  std::map<std::vector<std::string>, std::unique_ptr<Series>> series_;
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Registers a family. InvalidArgument naming the problem for a bad metric or label name, an
  // empty help text, or (histograms) bounds that are empty, unsorted, repeated or not finite;
  // AlreadyExists when the name, or a histogram's `_bucket`/`_sum`/`_count` series name,
  // collides with an existing family.
  absl::StatusOr<CounterFamily*> AddCounterFamily(const std::string& name, const std::string& help,
                                                  std::vector<std::string> label_names);
  absl::StatusOr<GaugeFamily*> AddGaugeFamily(const std::string& name, const std::string& help,
                                              std::vector<std::string> label_names);
  absl::StatusOr<HistogramFamily*> AddHistogramFamily(const std::string& name,
                                                      const std::string& help,
                                                      std::vector<std::string> label_names,
                                                      std::vector<double> upper_bounds);

  // Unlabelled shorthands: the family's one series.
  absl::StatusOr<Counter*> AddCounter(const std::string& name, const std::string& help);
  absl::StatusOr<Gauge*> AddGauge(const std::string& name, const std::string& help);
  absl::StatusOr<Histogram*> AddHistogram(const std::string& name, const std::string& help,
                                          std::vector<double> upper_bounds);

  // The whole exposition, families sorted by name and series by label values, so that equal
  // states render byte-identically.
  std::string Render() const;

 private:
  absl::Status Admit(const std::string& name, const std::string& help, MetricType type,
                     const std::vector<std::string>& label_names);

  mutable std::mutex mutex_;
  std::map<std::string, std::unique_ptr<FamilyBase>> families_;
  std::set<std::string> series_names_;  // every sample name in use, histogram suffixes included
};

// The HTTP Content-Type of Render()'s output.
inline constexpr char kExpositionContentType[] = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace scd::metrics

#endif  // SCD_COMMON_METRICS_REGISTRY_H_
