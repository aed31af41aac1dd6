// Tick placement and labelling for linear and log10 axes (see axis.h for the rules).
#include "common/plot/axis.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace scd::plot {
namespace {

// Heckbert's nice number: 1, 2, 5 or 10 times a power of ten, nearest `x`.
double NiceNumber(double x) {
  const double exponent = std::floor(std::log10(x));
  const double fraction = x / std::pow(10.0, exponent);
  const double nice = fraction < 1.5 ? 1 : fraction < 3 ? 2 : fraction < 7 ? 5 : 10;
  return nice * std::pow(10.0, exponent);
}

}  // namespace

double NiceStep(double lo, double hi, int target_count) {
  const double span = hi - lo;
  if (!(span > 0) || !std::isfinite(span)) return 1.0;
  const int n = std::max(target_count, 2);
  return NiceNumber(span / (n - 1));
}

std::string FormatTickValue(double value, double step) {
  if (std::abs(value) < std::abs(step) * 1e-9) value = 0;  // no "-0" or "1e-17"
  const double magnitude = std::max(std::abs(value), std::abs(step));
  if (magnitude >= 1e6 || (std::abs(step) < 1e-4 && value != 0)) {
    // Mantissa digits enough to resolve `step` at this exponent.
    const int exponent = static_cast<int>(std::floor(std::log10(magnitude)));
    const int digits = std::clamp(exponent - static_cast<int>(std::floor(std::log10(step))), 0, 6);
    return absl::StrFormat("%.*e", digits, value);
  }
  const int decimals = std::clamp(-static_cast<int>(std::floor(std::log10(step) + 1e-9)), 0, 8);
  return absl::StrFormat("%.*f", decimals, value);
}

std::vector<Tick> LinearTicks(double lo, double hi, int target_count) {
  std::vector<Tick> ticks;
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return ticks;
  const double step = NiceStep(lo, hi, target_count);
  const double first = std::ceil(lo / step - 1e-9);
  const double last = std::floor(hi / step + 1e-9);
  for (double k = first; k <= last; k += 1) {
    const double v = k * step;
    ticks.push_back({v, FormatTickValue(v, step), true});
  }
  return ticks;
}

std::vector<Tick> LogTicks(double lo, double hi, int target_count) {
  std::vector<Tick> ticks;
  if (!(lo > 0) || !(hi > lo) || !std::isfinite(hi)) return ticks;
  const int e0 = static_cast<int>(std::floor(std::log10(lo)));
  const int e1 = static_cast<int>(std::ceil(std::log10(hi)));
  int decades_inside = 0;
  for (int e = e0; e <= e1; ++e) {
    const double v = std::pow(10.0, e);
    if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) ++decades_inside;
  }
  if (decades_inside < 2) {
    // Less than a decade: linear nice ticks still read correctly on a log axis.
    return LinearTicks(lo, hi, target_count);
  }
  // Label every `stride`-th decade so wide ranges stay legible.
  const int stride =
      std::max(1, (decades_inside + std::max(target_count, 2) - 1) / std::max(target_count, 2));
  for (int e = e0; e <= e1; ++e) {
    for (int m = 1; m <= 9; ++m) {
      const double v = m * std::pow(10.0, e);
      if (v < lo * (1 - 1e-9) || v > hi * (1 + 1e-9)) continue;
      Tick t{v, "", m == 1};
      if (m == 1 && (e - e0) % stride == 0) {
        t.label = (e >= -3 && e < 6) ? FormatTickValue(v, std::pow(10.0, std::min(e, 0)))
                                     : absl::StrFormat("1e%d", e);
      }
      ticks.push_back(t);
    }
  }
  return ticks;
}

double AxisFraction(double value, double lo, double hi, AxisScale scale) {
  if (scale == AxisScale::kLog10) {
    return (std::log10(value) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
  }
  return (value - lo) / (hi - lo);
}

}  // namespace scd::plot
