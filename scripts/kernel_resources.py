#!/usr/bin/env python3
# kernel_resources.py OUT_DIR SRC_DIR: the analysis half of kernel_resources.sh. Reads the
# ptxas --resource-usage output the script gathered (OUT_DIR/ptxas.log, each .cu's part headed
# "### <file>.cu"), matches each kernel with the block its launcher asks for in SRC_DIR/*.cu,
# and writes OUT_DIR/kernel_resources.md and .json. Exits 1 when a launch cannot fit.
import glob, json, math, os, re, subprocess, sys

out, src_dir = sys.argv[1], sys.argv[2]
log = open(os.path.join(out, "ptxas.log")).read().splitlines()

# ptxas: "Compiling entry function '<mangled>' for 'sm_80'", then "Function properties for
# <mangled>" / "N bytes stack frame, N bytes spill stores, N bytes spill loads", then
# "Used N registers, used N barriers, N bytes smem, ...".
entries, cur, cu = [], None, None
for line in log:
    if line.startswith("### "):
        cu = line[4:].strip()
        continue
    m = re.search(r"Compiling entry function '([^']+)' for '(sm_\d+)'", line)
    if m:
        cur = {"file": cu, "mangled": m.group(1), "arch": m.group(2), "registers": None,
               "static_smem": 0, "stack": 0, "spill_stores": 0, "spill_loads": 0}
        entries.append(cur)
        continue
    if cur is None:
        continue
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
    if m:
        cur["stack"], cur["spill_stores"], cur["spill_loads"] = map(int, m.groups())
        continue
    m = re.search(r"Used (\d+) registers", line)
    if m:
        cur["registers"] = int(m.group(1))
        s = re.search(r"(\d+) bytes smem", line)
        cur["static_smem"] = int(s.group(1)) if s else 0
if not entries:
    sys.exit("kernel_resources.sh: ptxas reported no kernel (see ptxas.log)")
missing = [e["mangled"] for e in entries if e["registers"] is None]
if missing:
    sys.exit(f"kernel_resources.sh: no register count for {missing}")

names = subprocess.run(["c++filt"], input="\n".join(e["mangled"] for e in entries),
                       capture_output=True, text=True, check=True).stdout.splitlines()
def short_name(full):
    """`void ns::(anonymous namespace)::K<64>(float*, int)` -> `K<64>`; long template
    arguments (cub's policies) -> `K<…>`."""
    s = full.replace("(anonymous namespace)", "")
    if s.startswith("void "):
        s = s[len("void "):]
    depth, cut = 0, 0
    for i, ch in enumerate(s):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            s = s[:i]
            break
        elif s.startswith("::", i) and depth == 0:
            cut = i + 2
    name = s[cut:]
    if "<" in name and len(name) > 40:
        name = name[:name.index("<")] + "<…>"
    return name

for e, full in zip(entries, names):
    e["demangled"] = full
    e["kernel"] = short_name(full)

# Launch block sizes from the sources: `Name<<<grid, block, ...>>>` and `Name<T><<<...>>>`,
# with `constexpr int kX = N` (possibly several on one line) resolved in the same file or in
# the folder's device headers (*.cuh, e.g. attention_split.cuh's kVecThreads), a namespace
# qualifier (`internal::kX`) dropped.
def split_top(s):
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch in "(<[{":
            depth += 1
        elif ch in ")>]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip()); cur = ""
        else:
            cur += ch
    parts.append(cur.strip())
    return parts

def constants(text):
    found = {}
    for decl in re.findall(r"constexpr int ([^;]+);", text):
        for part in decl.split(","):
            m = re.match(r"\s*(\w+)\s*=\s*(\w+)\s*$", part)
            if m:
                found[m.group(1)] = m.group(2)
    return found

header_consts = {}
for path in sorted(glob.glob(os.path.join(src_dir, "*.cuh"))):
    header_consts.update(constants(open(path).read()))

launch, bounds = {}, {}
for path in glob.glob(os.path.join(src_dir, "*.cu")):
    text = open(path).read()
    consts = dict(header_consts)
    consts.update(constants(text))
    def value(expr):
        expr = expr.split("::")[-1]
        seen = 0
        while expr in consts and seen < 8:
            expr, seen = consts[expr], seen + 1
        return int(expr) if expr.isdigit() else expr
    for m in re.finditer(r"(\w+)(?:<[^<>]*>)?\s*<<<(.*?)>>>", text, re.S):
        cfg = split_top(" ".join(m.group(2).split()))
        launch.setdefault(m.group(1), set()).add(value(cfg[1]) if len(cfg) > 1 else "?")
    for m in re.finditer(r"__launch_bounds__\((\w+)\)\s*(?:\n\s*)?(\w+)\s*\(", text):
        bounds[m.group(2)] = value(m.group(1))

def alloc_regs_per_warp(regs):  # sm_80/sm_90: registers are allocated per warp, 256 at a time
    return math.ceil(max(regs, 1) * 32 / 256) * 256

problems = []
for e in entries:
    base = e["kernel"].split("<")[0]
    blocks = sorted(launch.get(base, {"?"}), key=str)
    e["launch_threads"] = blocks
    e["launch_bound"] = bounds.get(base)
    per_warp = alloc_regs_per_warp(e["registers"])
    e["max_threads_by_registers"] = min(1024, (65536 // per_warp) * 32)
    numeric = [b for b in blocks if isinstance(b, int)]
    for b in numeric:
        if b > e["max_threads_by_registers"]:
            problems.append(f"{e['kernel']} ({e['arch']}): launched with {b} threads, its "
                            f"{e['registers']} registers allow {e['max_threads_by_registers']}")
    if e["static_smem"] > 48 * 1024:
        problems.append(f"{e['kernel']} ({e['arch']}): {e['static_smem']} bytes of static shared memory")
    if numeric:
        b = max(numeric)
        warps = math.ceil(b / 32)
        by_regs = 65536 // (per_warp * warps)
        smem_per_sm = 164 * 1024 if e["arch"] == "sm_80" else 228 * 1024
        by_smem = smem_per_sm // (e["static_smem"] + 1024)  # the runtime reserves 1 KB a block
        by_threads = 2048 // (warps * 32)
        blocks_per_sm = max(0, min(by_regs, by_smem, by_threads, 32))
        e["occupancy"] = min(1.0, blocks_per_sm * warps / 64)
    else:
        e["occupancy"] = None

entries.sort(key=lambda e: (e["file"], e["kernel"], e["arch"]))
json.dump({"kernels": entries, "problems": problems}, open(os.path.join(out, "kernel_resources.json"), "w"), indent=1)

def fmt_threads(e):
    return ", ".join(str(b) for b in e["launch_threads"])

rows = ["| file | kernel | arch | registers | static smem (B) | stack (B) | spills st/ld (B) | "
        "threads at launch | `__launch_bounds__` | largest block its registers allow | occupancy |",
        "|---|---|---|---|---|---|---|---|---|---|---|"]
for e in entries:
    occ = "n/a" if e["occupancy"] is None else f"{e['occupancy']:.0%}"
    spills = f"{e['spill_stores']}/{e['spill_loads']}"
    if e["spill_stores"] or e["spill_loads"]:
        spills = f"**{spills}**"
    rows.append(f"| {e['file']} | `{e['kernel']}` | {e['arch']} | {e['registers']} | "
                f"{e['static_smem']} | {e['stack']} | {spills} | {fmt_threads(e)} | "
                f"{e['launch_bound'] or '-'} | {e['max_threads_by_registers']} | {occ} |")
spilling = sorted({f"{e['kernel']} ({e['arch']})" for e in entries if e["spill_stores"] or e["spill_loads"]})
with open(os.path.join(out, "kernel_resources.md"), "w") as f:
    f.write("\n".join(rows) + "\n\n")
    f.write(f"{len(entries)} kernel builds; spilling: {', '.join(spilling) or 'none'}; "
            f"problems: {'; '.join(problems) or 'none'}\n")
print("\n".join(rows))
print(f"\n{len(entries)} kernel builds; spilling: {', '.join(spilling) or 'none'}")
if problems:
    print("kernel_resources.sh: FAILED:\n  " + "\n  ".join(problems))
    sys.exit(1)
print("kernel_resources.sh: every launcher's block fits its kernel's registers")
