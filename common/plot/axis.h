// Axis scales and tick placement. Linear ticks follow Heckbert's "nice numbers" (Graphics
// Gems, 1990): the step is 1, 2 or 5 times a power of ten, chosen so that about
// `target_count` ticks cover the range. Log axes put labelled ticks at powers of ten, with
// unlabelled minor ticks at 2..9 times each power; a range shorter than a decade falls back to
// linear-style nice ticks so the axis is never left without labels.
#ifndef SCD_COMMON_PLOT_AXIS_H_
#define SCD_COMMON_PLOT_AXIS_H_

#include <string>
#include <vector>

namespace scd::plot {

enum class AxisScale { kLinear, kLog10 };

struct Tick {
  double value = 0;
  std::string label;  // empty for minor ticks
  bool major = true;
};

// The nice step for covering [lo, hi] with about `target_count` ticks.
double NiceStep(double lo, double hi, int target_count);

// Major ticks at the multiples of NiceStep inside [lo, hi], labelled with just enough
// decimals to tell neighbours apart.
std::vector<Tick> LinearTicks(double lo, double hi, int target_count);

// Ticks for a log10 axis over [lo, hi]; requires 0 < lo < hi.
std::vector<Tick> LogTicks(double lo, double hi, int target_count);

// Label for `value` on an axis whose ticks are `step` apart: fixed decimals for moderate
// magnitudes, mantissa-exponent ("2.5e6") for very large or very small ones.
std::string FormatTickValue(double value, double step);

// Maps a data value to [0, 1] along an axis spanning [lo, hi] under `scale`.
double AxisFraction(double value, double lo, double hi, AxisScale scale);

}  // namespace scd::plot

#endif  // SCD_COMMON_PLOT_AXIS_H_
