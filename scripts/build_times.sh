#!/usr/bin/env bash
# build_times.sh [BUILD_DIR] [TOP]: where a build's time went, from ninja's log
# (BUILD_DIR/.ninja_log, default build): the wall time and the CPU time of every step, the TOP
# (default 15) longest steps, and every source compiled more than once (by several targets,
# with the CPU time the extra compiles cost). Meant for a clean build, as CI's: each output's
# last entry counts, timed from the start of the ninja run that built it, so after incremental
# builds the wall time mixes runs. Outputs the build no longer makes (`ninja -t targets all`)
# are left out. Prints Markdown.
set -euo pipefail

build="${1:-build}"
top="${2:-15}"
log="$build/.ninja_log"
[[ -f "$log" ]] || { echo "build_times.sh: no ninja log at $log (build with -G Ninja first)" >&2; exit 1; }

current="$(mktemp)"
trap 'rm -f "$current"' EXIT
ninja -C "$build" -t targets all 2>/dev/null | sed 's/: [a-zA-Z_]*$//' > "$current" || true

python3 - "$log" "$top" "$current" <<'PY'
import collections, re, signal, sys

signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the output quietly

path, top = sys.argv[1], int(sys.argv[2])
current = set(open(sys.argv[3]).read().split("\n")) - {""}
last = {}  # output -> (start ms, end ms): a later line supersedes an earlier one
with open(path) as f:
    header = f.readline()
    if not header.startswith("# ninja log"):
        sys.exit(f"build_times.sh: {path} is not a ninja log")
    for line in f:
        fields = line.rstrip("\n").split("\t")
        if len(fields) != 5:
            sys.exit(f"build_times.sh: malformed line in {path}: {line!r}")
        if not current or fields[3] in current:
            last[fields[3]] = (int(fields[0]), int(fields[1]))
steps = [(s, e, o) for o, (s, e) in last.items()]
if not steps:
    sys.exit(f"build_times.sh: {path} has no steps")

wall = (max(e for _, e, _ in steps) - min(s for s, _, _ in steps)) / 60000
cpu = sum(e - s for s, e, _ in steps) / 60000
objects = [(s, e, o) for s, e, o in steps if o.endswith(".o")]
print(f"| steps | compiles | wall (min) | CPU, all steps (min) | CPU, compiles (min) |")
print(f"|---|---|---|---|---|")
print(f"| {len(steps)} | {len(objects)} | {wall:.1f} | {cpu:.1f} | "
      f"{sum(e - s for s, e, _ in objects) / 60000:.1f} |")

print(f"\nThe {top} longest steps:\n")
print("| seconds | output |")
print("|---|---|")
for s, e, o in sorted(steps, key=lambda r: r[0] - r[1])[:top]:
    print(f"| {(e - s) / 1000:.1f} | `{o}` |")

# An object's source: its path under the target's CMakeFiles/<target>.dir/, with CMake's "__/"
# (one directory up) dropped, e.g. tests/CMakeFiles/t.dir/__/kernels/cuda/x.cc.o -> kernels/cuda/x.cc.
by_source = collections.defaultdict(list)
for s, e, o in objects:
    m = re.match(r"(?:(.*)/)?CMakeFiles/([^/]+)\.dir/(.*)\.o$", o)
    if not m:
        continue
    where, target, rel = m.group(1) or "", m.group(2), m.group(3)
    parts = [p for p in rel.split("/") if p != "__"]
    ups = rel.split("/").count("__")
    base = [p for p in where.split("/") if p][: max(0, len([p for p in where.split("/") if p]) - ups)]
    by_source["/".join(base + parts)].append((target, (e - s) / 1000))
repeats = {src: v for src, v in by_source.items() if len(v) > 1}
extra = sum(sum(sorted(t for _, t in v)[:-1]) for v in repeats.values())
print(f"\nSources compiled more than once: {len(repeats)}, costing {extra / 60:.1f} extra "
      f"CPU minutes\n")
if repeats:
    print("| source | times | extra seconds | targets |")
    print("|---|---|---|---|")
    for src, v in sorted(repeats.items(), key=lambda kv: -sum(sorted(t for _, t in kv[1])[:-1])):
        print(f"| `{src}` | {len(v)} | {sum(sorted(t for _, t in v)[:-1]):.1f} | "
              f"{', '.join(sorted(t for t, _ in v))} |")
PY
