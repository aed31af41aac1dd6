// Registry validation and the text exposition format (see registry.h). The naming rules mirror
// client_golang's promlint, which `promtool check metrics` runs, so that a registration
// mistake fails at start-up with a message instead of in a scrape lint.
#include "common/metrics/registry.h"

#include <charconv>
#include <cmath>
#include <string_view>

#include "absl/strings/str_split.h"

namespace scd::metrics {
namespace {

// promlint discourages these as name components ("_ms", "_sec_", ...): use base units.
constexpr const char* kUnitAbbreviations[] = {"s",  "ms", "us", "ns", "sec", "b", "kb",
                                              "mb", "gb", "tb", "pb", "m",   "h", "d"};
constexpr const char* kUnitPrefixes[] = {"pico", "nano",  "micro", "milli", "centi", "deci",
                                         "deca", "hecto", "kilo",  "kibi",  "mega",  "mebi",
                                         "giga", "gibi",  "tera",  "tebi",  "peta",  "pebi"};
constexpr const char* kBaseUnits[] = {"amperes", "bytes",  "celsius", "grams",   "joules",
                                      "kelvin",  "meters", "metres",  "seconds", "volts"};

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Lower-case snake_case identifier: [a-z_][a-z0-9_]*.
bool IsSnakeIdentifier(std::string_view s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

absl::Status CheckMetricName(const std::string& name, MetricType type) {
  if (!IsSnakeIdentifier(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("metric name '", name, "' must be lower-case snake_case ([a-z_][a-z0-9_]*)"));
  }
  if (name.rfind("__", 0) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metric name '", name, "' must not start with '__' (reserved)"));
  }
  const bool is_counter = type == MetricType::kCounter;
  if (is_counter && !EndsWith(name, "_total")) {
    return absl::InvalidArgumentError(
        absl::StrCat("counter '", name, "' must end in '_total' (Prometheus convention)"));
  }
  if (!is_counter && EndsWith(name, "_total")) {
    return absl::InvalidArgumentError(
        absl::StrCat("metric '", name, "' is not a counter and must not end in '_total'"));
  }
  for (const char* suffix : {"_bucket", "_count", "_sum"}) {
    if (EndsWith(name, suffix)) {
      return absl::InvalidArgumentError(absl::StrCat("metric name '", name, "' must not end in '",
                                                     suffix, "' (reserved for histograms)"));
    }
  }
  const std::string type_name = MetricTypeName(type);
  if (name.find("_" + type_name + "_") != std::string::npos || EndsWith(name, "_" + type_name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("metric name '", name, "' must not contain its type '", type_name, "'"));
  }
  for (const std::string& part : std::vector<std::string>(absl::StrSplit(name, '_'))) {
    for (const char* abbreviation : kUnitAbbreviations) {
      if (part == abbreviation) {
        return absl::InvalidArgumentError(absl::StrCat("metric name '", name,
                                                       "' uses the abbreviated unit '",
                                                       abbreviation, "'; spell out base units"));
      }
    }
  }
  for (const char* unit : kBaseUnits) {
    for (const char* prefix : kUnitPrefixes) {
      const std::string scaled = absl::StrCat(prefix, unit);
      if (name.find(scaled) != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat("metric name '", name, "' uses '", scaled,
                                                       "'; use the base unit '", unit, "'"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckLabelNames(const std::string& metric, const std::vector<std::string>& names,
                             MetricType type) {
  std::set<std::string> seen;
  for (const std::string& label : names) {
    if (!IsSnakeIdentifier(label) || label.rfind("__", 0) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "label name '", label, "' of metric '", metric,
          "' must be lower-case snake_case ([a-z_][a-z0-9_]*) not starting with '__'"));
    }
    if (type == MetricType::kHistogram && label == "le") {
      return absl::InvalidArgumentError(
          absl::StrCat("histogram '", metric, "' must not use the reserved label 'le'"));
    }
    if (!seen.insert(label).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("label name '", label, "' repeats in metric '", metric, "'"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckBounds(const std::string& metric, const std::vector<double>& bounds) {
  if (bounds.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("histogram '", metric, "' needs at least one bucket bound"));
  }
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i])) {
      return absl::InvalidArgumentError(absl::StrCat("histogram '", metric, "' bucket bound ", i,
                                                     " is not finite (+Inf is implicit)"));
    }
    if (i > 0 && !(bounds[i] > bounds[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "histogram '", metric, "' bucket bounds must strictly increase (bound ", i, ")"));
    }
  }
  return absl::OkStatus();
}

std::string JoinLabels(const std::string& labels, const std::string& extra) {
  if (labels.empty()) return extra;
  if (extra.empty()) return labels;
  return absl::StrCat(labels, ",", extra);
}

void AppendLine(const std::string& name, const std::string& labels, const std::string& value,
                std::string* out) {
  out->append(name);
  if (!labels.empty()) absl::StrAppend(out, "{", labels, "}");
  absl::StrAppend(out, " ", value, "\n");
}

}  // namespace

const char* MetricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(const std::string& help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

namespace metrics_internal {

std::string RenderLabelPairs(const std::vector<std::string>& names,
                             const std::vector<std::string>& values) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    if (i > 0) out += ",";
    absl::StrAppend(&out, names[i], "=\"", EscapeLabelValue(values[i]), "\"");
  }
  return out;
}

void AppendSamples(const std::string& name, const std::string& labels, const Counter& metric,
                   std::string* out) {
  AppendLine(name, labels, FormatMetricValue(metric.Value()), out);
}

void AppendSamples(const std::string& name, const std::string& labels, const Gauge& metric,
                   std::string* out) {
  AppendLine(name, labels, FormatMetricValue(metric.Value()), out);
}

void AppendSamples(const std::string& name, const std::string& labels, const Histogram& metric,
                   std::string* out) {
  const Histogram::Snapshot snapshot = metric.Read();
  const std::string bucket_name = name + "_bucket";
  for (size_t i = 0; i <= snapshot.upper_bounds.size(); ++i) {
    const std::string le = i < snapshot.upper_bounds.size()
                               ? FormatMetricValue(snapshot.upper_bounds[i])
                               : std::string("+Inf");
    AppendLine(bucket_name, JoinLabels(labels, absl::StrCat("le=\"", le, "\"")),
               absl::StrCat(snapshot.cumulative_counts[i]), out);
  }
  AppendLine(name + "_sum", labels, FormatMetricValue(snapshot.sum), out);
  AppendLine(name + "_count", labels, absl::StrCat(snapshot.count), out);
}

}  // namespace metrics_internal

void FamilyBase::Render(std::string* out) const {
  absl::StrAppend(out, "# HELP ", name_, " ", EscapeHelp(help_), "\n");
  absl::StrAppend(out, "# TYPE ", name_, " ", MetricTypeName(type_), "\n");
  RenderSamples(out);
}

absl::Status Registry::Admit(const std::string& name, const std::string& help, MetricType type,
                             const std::vector<std::string>& label_names) {
  if (absl::Status s = CheckMetricName(name, type); !s.ok()) return s;
  if (absl::Status s = CheckLabelNames(name, label_names, type); !s.ok()) return s;
  if (help.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("metric '", name, "' needs a help text"));
  }
  std::vector<std::string> sample_names = {name};
  if (type == MetricType::kHistogram) {
    sample_names = {name, name + "_bucket", name + "_sum", name + "_count"};
  }
  for (const std::string& sample : sample_names) {
    if (series_names_.count(sample) > 0) {
      return absl::AlreadyExistsError(
          absl::StrCat("metric '", name, "' collides with an existing metric ('", sample, "')"));
    }
  }
  series_names_.insert(sample_names.begin(), sample_names.end());
  return absl::OkStatus();
}

absl::StatusOr<CounterFamily*> Registry::AddCounterFamily(const std::string& name,
                                                          const std::string& help,
                                                          std::vector<std::string> label_names) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (absl::Status s = Admit(name, help, MetricType::kCounter, label_names); !s.ok()) return s;
  auto* family = new CounterFamily(name, help, MetricType::kCounter, std::move(label_names), {});
  families_[name].reset(family);
  return family;
}

absl::StatusOr<GaugeFamily*> Registry::AddGaugeFamily(const std::string& name,
                                                      const std::string& help,
                                                      std::vector<std::string> label_names) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (absl::Status s = Admit(name, help, MetricType::kGauge, label_names); !s.ok()) return s;
  auto* family = new GaugeFamily(name, help, MetricType::kGauge, std::move(label_names), {});
  families_[name].reset(family);
  return family;
}

absl::StatusOr<HistogramFamily*> Registry::AddHistogramFamily(const std::string& name,
                                                              const std::string& help,
                                                              std::vector<std::string> label_names,
                                                              std::vector<double> upper_bounds) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (absl::Status s = CheckBounds(name, upper_bounds); !s.ok()) return s;
  if (absl::Status s = Admit(name, help, MetricType::kHistogram, label_names); !s.ok()) return s;
  auto* family = new HistogramFamily(name, help, MetricType::kHistogram, std::move(label_names),
                                     std::move(upper_bounds));
  families_[name].reset(family);
  return family;
}

absl::StatusOr<Counter*> Registry::AddCounter(const std::string& name, const std::string& help) {
  absl::StatusOr<CounterFamily*> family = AddCounterFamily(name, help, {});
  if (!family.ok()) return family.status();
  return (*family)->WithLabels({});
}

absl::StatusOr<Gauge*> Registry::AddGauge(const std::string& name, const std::string& help) {
  absl::StatusOr<GaugeFamily*> family = AddGaugeFamily(name, help, {});
  if (!family.ok()) return family.status();
  return (*family)->WithLabels({});
}

absl::StatusOr<Histogram*> Registry::AddHistogram(const std::string& name, const std::string& help,
                                                  std::vector<double> upper_bounds) {
  absl::StatusOr<HistogramFamily*> family =
      AddHistogramFamily(name, help, {}, std::move(upper_bounds));
  if (!family.ok()) return family.status();
  return (*family)->WithLabels({});
}

std::string Registry::Render() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  for (const auto& [name, family] : families_) family->Render(&out);
  return out;
}

}  // namespace scd::metrics
