#!/usr/bin/env bash
# container_check.sh: builds the two images of deploy/docker and runs them the way
# deploy/compose.yaml does, with podman (no Docker engine, no registry). It
#   1. checks its prerequisites (podman, runc, catatonit, aardvark-dns, curl, jq; debootstrap
#      when the base image is missing; root, or a rootless podman set-up),
#   2. makes the base image when `debian:bookworm` is missing: debootstrap --variant=minbase
#      from the mirror apt already uses, imported and tagged debian:bookworm and
#      debian:bookworm-slim (the Dockerfiles' two bases; minbase stands in for both),
#   3. builds scd-serve/prefill and scd-serve/decode with `podman build --format docker` (the
#      OCI format would drop HEALTHCHECK) from a snapshot of the repository root, the context
#      compose gives them,
#   4. runs one prefill daemon and two decode replicas with compose's flags (init, read-only
#      root, tmpfs /tmp, no capabilities, no-new-privileges, the configs of deploy/configs,
#      models and artifacts mounted read-only, the secrets as command-line overrides) on a
#      private podman network whose DNS resolves the service names the configs dial; only the
#      prefill daemon's 8000 is published, on 127.0.0.1,
#   5. checks: /ready turns 200 within a deadline; a chat completion answers with content and
#      usage (and 401 without the API key); `podman healthcheck run` passes on all three; each
#      `podman stop -t 45` ends in exit code 0 after the daemon logged shutdown_signal and its
#      prefill_stopped / decode_stopped event (common/daemon/daemon_main.cc,
#      prefill_server/prefill_daemon.cc, decode_server/decode_daemon.cc),
# then prints a summary and exits 1 if any check failed. On exit it removes its containers,
# its network, its temporary files, and every image the run created unless --keep-images is
# given (kept images make the next run's builds warm).
#
# It runs by hand, as root, not in CI (.ci/run): a cold run takes about 18 minutes on 2 busy
# cores (docs/RESULTS.md, "Containers").
#   apt-get install podman runc catatonit aardvark-dns debootstrap curl jq
#   scripts/container_check.sh [--keep-images] [--summary FILE] [--logs DIR] [--port N]
# Environment: SCD_MODELS, SCD_ARTIFACTS (as in compose: host directories of the models and
# artifacts, relative to deploy/; defaults ../shared/models and configs/calibration of the
# repository), SCD_DEBIAN_MIRROR (the mirror debootstrap uses; default: apt's bookworm one).
#
# Host quirks it handles:
# - runc, not crun, through a temporary CONTAINERS_CONF, with default_ulimits capped at what
#   can be set: podman sets nofile and nproc for every container (1048576 by default), and
#   where root lacks CAP_SYS_RESOURCE the runtime cannot raise a limit above the hard one it
#   inherits. nofile is capped at `ulimit -Hn`; nproc at `ulimit -Hu` and at 32768, since
#   podman lowers its own RLIMIT_NPROC to 32768 when it starts.
# - cgroup_manager "cgroupfs": systemd is not PID 1 everywhere (and cgroups may be v1 or
#   hybrid), so podman cannot ask systemd for a scope.
# - For the same reason podman cannot schedule periodic health checks (systemd timers): the
#   containers run with --health-interval disable and this script runs each check itself.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PROG=container_check.sh
usage() {
  cat <<EOF
usage: scripts/$PROG [--keep-images] [--summary FILE] [--logs DIR] [--port N]
  --keep-images   leave the images this run built (base, scd-serve/prefill, scd-serve/decode)
  --summary FILE  also write the summary as Markdown to FILE
  --logs DIR      keep the build and container logs in DIR (default: a temporary directory)
  --port N        host port published for the prefill daemon's 8000 (default 8000)
EOF
}

KEEP_IMAGES=0
SUMMARY_MD=""
LOGS_KEEP=""
PORT=8000
while [[ $# -gt 0 ]]; do
  case "$1" in
    --keep-images) KEEP_IMAGES=1 ;;
    --summary) [[ $# -ge 2 ]] || { usage >&2; exit 2; }; SUMMARY_MD=$2; shift ;;
    --logs) [[ $# -ge 2 ]] || { usage >&2; exit 2; }; LOGS_KEEP=$2; shift ;;
    --port) [[ $# -ge 2 && $2 =~ ^[0-9]+$ ]] || { usage >&2; exit 2; }; PORT=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "$PROG: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
[[ -z "$SUMMARY_MD" ]] || SUMMARY_MD=$(realpath -m "$SUMMARY_MD")

step() { echo "==> $*"; }
die() { echo "$PROG: $*" >&2; exit 1; }
now_ms() { date +%s%3N; }
seconds_since() { awk -v a="$1" -v b="$(now_ms)" 'BEGIN { printf "%.1f", (b - a) / 1000 }'; }

# ---- 1. prerequisites
step "prerequisites"
missing=()
for tool in podman runc curl jq; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
first_existing() { local p; for p in "$@"; do [[ -x "$p" ]] && { echo "$p"; return 0; }; done; return 1; }
first_existing /usr/libexec/podman/catatonit /usr/lib/podman/catatonit /usr/bin/catatonit \
  >/dev/null || missing+=(catatonit)
first_existing /usr/libexec/podman/aardvark-dns /usr/lib/podman/aardvark-dns \
  /usr/bin/aardvark-dns >/dev/null || missing+=(aardvark-dns)
if [[ ${#missing[@]} -gt 0 ]]; then
  die "missing: ${missing[*]}; install them with: apt-get install ${missing[*]}"
fi
if [[ $EUID -ne 0 ]]; then
  # Rootless podman needs a subordinate id range and the setuid id mappers.
  if ! command -v newuidmap >/dev/null || ! grep -q "^$(id -un):" /etc/subuid 2>/dev/null; then
    die "not root and no rootless podman set-up: run as root, or install uidmap and give $(id -un) a range in /etc/subuid and /etc/subgid"
  fi
fi
for flag in avx2 fma f16c; do
  grep -qw "$flag" /proc/cpuinfo || die "the images' kernels need $flag, which this CPU lacks"
done
resolve_mount() {  # compose resolves relative host paths against deploy/
  local path=$1
  [[ "$path" = /* ]] || path="$ROOT/deploy/$path"
  realpath -e "$path" 2>/dev/null
}
MODELS=$(resolve_mount "${SCD_MODELS:-../../shared/models}") ||
  die "models directory ${SCD_MODELS:-../shared/models} not found (set SCD_MODELS)"
ARTIFACTS=$(resolve_mount "${SCD_ARTIFACTS:-../configs/calibration}") ||
  die "artifacts directory ${SCD_ARTIFACTS:-configs/calibration} not found (set SCD_ARTIFACTS)"
if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
  die "port $PORT is in use on this host; pick another with --port"
fi

WORK=$(mktemp -d /var/tmp/scd-container-check.XXXXXX) || die "cannot make a temporary directory"
LOGS=${LOGS_KEEP:-$WORK/logs}
mkdir -p "$LOGS" || die "cannot make $LOGS"
LOGS=$(realpath "$LOGS")
export CONTAINERS_CONF=$WORK/containers.conf
nofile=$(ulimit -Hn)
nprocs=$(ulimit -Hu)
[[ "$nofile" == unlimited ]] && nofile=1048576
[[ "$nprocs" == unlimited || "$nprocs" -gt 32768 ]] && nprocs=32768
cat > "$CONTAINERS_CONF" <<EOF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nprocs:$nprocs"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF

TAG=scdcheck-$$
NET=$TAG
# Compose's image names; a run that keeps nothing tags its images for itself alone, so that
# the :latest ones of an earlier run stay as they were.
IMAGE_TAG=latest
[[ $KEEP_IMAGES -eq 1 ]] || IMAGE_TAG=$TAG
PREFILL_IMAGE=scd-serve/prefill:$IMAGE_TAG
DECODE_IMAGE=scd-serve/decode:$IMAGE_TAG
NET_MADE=0
CONTAINERS=()
mapfile -t IMAGES_BEFORE < <(podman images -a --no-trunc --format '{{.ID}}' 2>/dev/null)

cleanup() {
  local rc=$? c id _
  trap - EXIT
  set +e
  for c in "${CONTAINERS[@]}"; do podman rm -f -t 0 "$c" >/dev/null 2>&1; done
  [[ $NET_MADE -eq 1 ]] && podman network rm -f "$NET" >/dev/null 2>&1
  if [[ $KEEP_IMAGES -eq 0 ]]; then
    for id in "$PREFILL_IMAGE" "$DECODE_IMAGE"; do podman untag "$id" "$id" >/dev/null 2>&1; done
    # Every image that appeared during the run (the base, the two images, the build cache),
    # children before parents: a few passes remove them in whatever order they are listed.
    local -A before=()
    for id in "${IMAGES_BEFORE[@]}"; do before[$id]=1; done
    local new=()
    while read -r id; do [[ -n "$id" && -z "${before[$id]:-}" ]] && new+=("$id"); done \
      < <(podman images -a --no-trunc --format '{{.ID}}' 2>/dev/null)
    for _ in 1 2 3 4 5 6 7 8; do
      [[ ${#new[@]} -eq 0 ]] && break
      local left=()
      for id in "${new[@]}"; do podman rmi -f "$id" >/dev/null 2>&1 || left+=("$id"); done
      new=("${left[@]}")
    done
    [[ ${#new[@]} -eq 0 ]] || echo "$PROG: could not remove images: ${new[*]}" >&2
  fi
  # An interrupted debootstrap can leave /proc or /sys mounted in its target.
  awk -v w="$WORK/" 'index($2, w) == 1 { print $2 }' /proc/mounts | sort -r |
    xargs -r -n 1 umount -l 2>/dev/null
  rm -rf --one-file-system "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Results: one row a check, printed and optionally written as Markdown at the end.
NAMES=()
RESULTS=()
DETAILS=()
record() {  # NAME PASS|FAIL DETAIL
  NAMES+=("$1"); RESULTS+=("$2"); DETAILS+=("$3")
  printf '    %s  %s: %s\n' "$2" "$1" "$3"
}
FIGURES=()  # "name|value" rows of the summary's figures
figure() { FIGURES+=("$1|$2"); }

# ---- 2. base image
apt_mirror() {
  local f
  {
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
      [[ -r "$f" ]] || continue
      # deb [options] URI SUITE COMPONENTS...
      awk '$1 == "deb" { sub(/\[[^]]*\]/, ""); if ($3 == "bookworm") { print $2; exit } }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
      [[ -r "$f" ]] || continue
      # deb822 stanzas: Types, URIs, Suites, Enabled.
      awk 'BEGIN { RS = ""; FS = "\n" }
        { types = uris = suites = ""; enabled = "yes"
          for (i = 1; i <= NF; i++) {
            if ($i ~ /^#/ || index($i, ":") == 0) continue
            k = index($i, ":"); key = tolower(substr($i, 1, k - 1)); val = substr($i, k + 1)
            gsub(/^[ \t]+|[ \t]+$/, "", val)
            if (key == "types") types = val; else if (key == "uris") uris = val
            else if (key == "suites") suites = val; else if (key == "enabled") enabled = tolower(val)
          }
          if ((" " types " ") ~ / deb / && (" " suites " ") ~ / bookworm / && enabled != "no") {
            split(uris, u, " "); print u[1]; exit
          } }' "$f"
    done
  } | head -n 1
}

BASE_SECONDS=""
if podman image exists debian:bookworm; then
  step "base image: debian:bookworm exists, skipped"
  figure "base image" "present, not rebuilt"
else
  [[ $EUID -eq 0 ]] || die "debian:bookworm is missing and debootstrap needs root to make it"
  command -v debootstrap >/dev/null ||
    die "debian:bookworm is missing and debootstrap is not installed: apt-get install debootstrap"
  mirror=${SCD_DEBIAN_MIRROR:-$(apt_mirror)}
  mirror=${mirror:-http://deb.debian.org/debian}
  step "base image: debootstrap --variant=minbase bookworm from $mirror (log: $LOGS/debootstrap.log)"
  t0=$SECONDS
  debootstrap --variant=minbase bookworm "$WORK/rootfs" "$mirror" > "$LOGS/debootstrap.log" 2>&1 ||
    { tail -n 20 "$LOGS/debootstrap.log" >&2; die "debootstrap failed"; }
  # Package lists and downloaded .debs are not part of an image (the Dockerfiles run apt-get
  # update themselves).
  find "$WORK/rootfs/var/lib/apt/lists" "$WORK/rootfs/var/cache/apt" -type f -delete
  step "base image: importing as debian:bookworm"
  tar -C "$WORK/rootfs" -c . |
    podman import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'CMD ["bash"]' - debian:bookworm > "$LOGS/import.log" 2>&1 ||
    { cat "$LOGS/import.log" >&2; die "podman import failed"; }
  rm -rf "$WORK/rootfs"
  BASE_SECONDS=$((SECONDS - t0))
  figure "base image" "debootstrap + import: ${BASE_SECONDS} s"
fi
if ! podman image exists debian:bookworm-slim; then
  podman tag debian:bookworm debian:bookworm-slim || die "cannot tag debian:bookworm-slim"
fi

# ---- 3. the two images
# The context is a snapshot of the repository root (less what the .dockerignore files leave
# out), so that both images build from the same sources even while the tree is edited: the
# shared build stage is then built once and cached for the second image.
step "build context: snapshot of $ROOT"
CONTEXT=$WORK/context
mkdir -p "$CONTEXT" || die "cannot make $CONTEXT"
# tar exits 1 when a file changed while it was read: the snapshot then holds one version of it.
tar -C "$ROOT" --exclude=./.git --exclude='./build*' --exclude=node_modules \
  --warning=no-file-changed -cf - . | tar -C "$CONTEXT" -xf -
status=("${PIPESTATUS[@]}")
[[ ${status[0]} -le 1 && ${status[1]} -eq 0 ]] || die "cannot snapshot $ROOT into $CONTEXT"
build_image() {  # SERVICE DOCKERFILE TAG
  local log="$LOGS/build-$1.log" t0=$SECONDS rc size
  step "build $3 from deploy/docker/$2 (log: $log)"
  # --pull=never: the bases are the local images above; no registry is asked.
  podman build --format docker --pull=never -f "$CONTEXT/deploy/docker/$2" \
    --ignorefile "$CONTEXT/deploy/docker/$2.dockerignore" -t "$3" "$CONTEXT" 2>&1 |
    tee "$log" | awk '
      /^(\[[0-9]+\/[0-9]+\] )?STEP [0-9]+\/[0-9]+: / { print "    " substr($0, 1, 96); fflush(); next }
      /^\[[0-9]+\/[0-9]+\] (Building|Linking)/ {  # ninja, inside the build stage: every 20th
        split(substr($1, 2), f, "/")
        if (f[1] % 20 == 0 || f[1] == f[2] + 0) { print "      ninja " f[1] "/" f[2] + 0; fflush() }
      }'
  rc=${PIPESTATUS[0]}
  if [[ $rc -ne 0 ]]; then
    tail -n 30 "$log" >&2
    die "podman build of $3 failed (exit $rc)"
  fi
  size=$(podman image inspect --format '{{.Size}}' "$3")
  figure "image $3" "built in $((SECONDS - t0)) s, $((size / 1000000)) MB"
  echo "    built in $((SECONDS - t0)) s, $((size / 1000000)) MB"
}
build_image prefill Dockerfile.prefill "$PREFILL_IMAGE"
build_image decode Dockerfile.decode "$DECODE_IMAGE"

# ---- 4. the three daemons
# A private network: netavark's DNS (aardvark-dns) resolves the aliases, which are compose's
# service names (the configs dial prefill:7000, decode-babi-qa:7101, ...).
step "network $NET"
podman network create "$NET" >/dev/null || die "cannot create network $NET"
NET_MADE=1
[[ $(podman network inspect --format '{{.DNSEnabled}}' "$NET") == true ]] ||
  die "network $NET has no DNS (netavark with aardvark-dns is needed)"

rand_hex() { od -An -tx1 -N32 /dev/urandom | tr -d ' \n'; }
CLUSTER_TOKEN=$(rand_hex)
API_KEY=$(rand_hex)
# Compose's flags (deploy/compose.yaml; keep the two in step). Not taken over: `restart`
# (a crash must fail the check, not be retried) and the health-check interval (see the header).
run_service() {  # SERVICE IMAGE CONFIG_MOUNT HEALTH_PORT HEALTH_PATH [podman args...] -- [daemon args...]
  local service=$1 image=$2 config=$3 hport=$4 hpath=$5
  shift 5
  local podman_args=() daemon_args=()
  while [[ $# -gt 0 && "$1" != -- ]]; do podman_args+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  daemon_args=("$@")
  local name=$TAG-$service
  CONTAINERS+=("$name")
  podman run --detach --name "$name" --network "$NET" --network-alias "$service" \
    --init --read-only --tmpfs /tmp --cap-drop ALL --security-opt no-new-privileges:true \
    --stop-signal SIGTERM --stop-timeout 45 \
    --health-cmd "[\"/opt/scd/bin/scd-healthcheck\", \"$hport\", \"$hpath\"]" \
    --health-interval disable --health-timeout 3s --health-retries 3 --health-start-period 60s \
    -v "$config:ro" -v "$MODELS:/srv/scd/models:ro" -v "$ARTIFACTS:/srv/scd/artifacts:ro" \
    "${podman_args[@]}" "$image" "${daemon_args[@]}" >/dev/null 2>"$LOGS/run-$service.log" ||
    { cat "$LOGS/run-$service.log" >&2; die "podman run of $service failed"; }
}
running() { [[ $(podman inspect --format '{{.State.Running}}' "$1" 2>/dev/null) == true ]]; }
# poll_until SECONDS CMD...: runs CMD until it succeeds or SECONDS pass; fails at once when
# one of the containers has exited.
poll_until() {
  local deadline=$((SECONDS + $1)) c
  shift
  while ((SECONDS < deadline)); do
    "$@" && return 0
    for c in "${CONTAINERS[@]}"; do
      if ! running "$c"; then
        echo "    $c exited; its log:" >&2
        podman logs "$c" 2>&1 | tail -n 20 | sed 's/^/      /' >&2
        return 1
      fi
    done
    sleep 0.5
  done
  return 1
}
healthy() { podman healthcheck run "$1" >/dev/null 2>&1; }
http_code() { curl -s -o /dev/null -m 5 -w '%{http_code}' "$@"; }
ready() { [[ $(http_code "http://127.0.0.1:$PORT/ready") == 200 ]]; }

step "run prefill (publishes 127.0.0.1:$PORT -> 8000)"
T_START=$(now_ms)
run_service prefill "$PREFILL_IMAGE" "$ROOT/deploy/configs/prefill.yaml:/etc/scd/prefill.yaml" \
  8000 /health -p "127.0.0.1:$PORT:8000" --expose 7000 -- \
  "--control_plane.cluster_token='$CLUSTER_TOKEN'" "--http.api_key='$API_KEY'"
# Compose starts the decode daemons once the prefill daemon is healthy (depends_on).
step "wait for prefill to be healthy"
poll_until 120 healthy "$TAG-prefill" || die "prefill did not turn healthy within 120 s"
for replica in decode-babi-qa:7101:7201:7301 decode-babi-qa-2:7102:7202:7302; do
  IFS=: read -r service grpc data http <<<"$replica"
  step "run $service"
  run_service "$service" "$DECODE_IMAGE" \
    "$ROOT/deploy/configs/$service.yaml:/etc/scd/decode.yaml" "$http" /ready \
    --expose "$grpc" --expose "$data" --expose "$http" -- \
    "--control_plane.cluster_token='$CLUSTER_TOKEN'"
done

# ---- 5. checks
step "checks"
READY_DEADLINE=180
if poll_until "$READY_DEADLINE" ready; then
  READY_SECONDS=$(seconds_since "$T_START")
  record "/ready" PASS "200 after $READY_SECONDS s (from the prefill container's start)"
  figure "time to /ready" "$READY_SECONDS s"
else
  record "/ready" FAIL "not 200 within $READY_DEADLINE s"
fi

REQUEST='{"model": "stories260K-babi-qa", "max_tokens": 24, "temperature": 0,
  "messages": [{"role": "user", "content": "Mary moved to the bathroom. John went to the hallway. Q: Where is Mary? A:"}]}'
URL=http://127.0.0.1:$PORT/v1/chat/completions
response=$(curl -s -m 60 -w '\n%{http_code}' -H "Authorization: Bearer $API_KEY" \
  -H 'Content-Type: application/json' -d "$REQUEST" "$URL")
code=${response##*$'\n'}
body=${response%$'\n'*}
content=$(jq -r '.choices[0].message.content // ""' <<<"$body" 2>/dev/null)
usage=$(jq -c '.usage // empty' <<<"$body" 2>/dev/null)
if [[ $code == 200 && -n "$content" && -n "$usage" ]]; then
  record "chat completion" PASS "$(jq -r '"\(.prompt_tokens) prompt + \(.completion_tokens) completion tokens"' <<<"$usage"): $(tr '\n' ' ' <<<"$content" | cut -c1-60)"
else
  record "chat completion" FAIL "HTTP $code: $(cut -c1-200 <<<"$body")"
fi
code=$(http_code -H 'Content-Type: application/json' -d "$REQUEST" "$URL")
if [[ $code == 401 ]]; then
  record "API key enforced" PASS "401 without the key"
else
  record "API key enforced" FAIL "HTTP $code without the key"
fi

for c in "${CONTAINERS[@]}"; do
  service=${c#"$TAG-"}
  if poll_until 60 healthy "$c"; then
    record "healthcheck $service" PASS "podman healthcheck run: healthy"
  else
    record "healthcheck $service" FAIL "podman healthcheck run: $(podman healthcheck run "$c" 2>&1 | tail -n 1)"
  fi
done

# The prefill daemon first: it drains while the decode daemons that serve it still run (the
# systemd units order it the same way).
for c in "${CONTAINERS[@]}"; do
  service=${c#"$TAG-"}
  stopped_event=decode_stopped
  [[ $service == prefill ]] && stopped_event=prefill_stopped
  t0=$(now_ms)
  podman stop -t 45 "$c" >/dev/null 2>&1
  stop_rc=$?
  took=$(seconds_since "$t0")
  exit_code=$(podman inspect --format '{{.State.ExitCode}}' "$c" 2>/dev/null)
  podman logs "$c" > "$LOGS/$service.log" 2>&1
  events=""
  grep -q '"event":"shutdown_signal"' "$LOGS/$service.log" && events="shutdown_signal"
  grep -q "\"event\":\"$stopped_event\"" "$LOGS/$service.log" && events="$events $stopped_event"
  if [[ $stop_rc -eq 0 && $exit_code == 0 && $events == "shutdown_signal $stopped_event" ]]; then
    record "drain $service" PASS "stopped in $took s, exit code 0, logged $events"
  else
    record "drain $service" FAIL "stop exit $stop_rc, exit code $exit_code after $took s, logged: ${events:-nothing}"
  fi
done

# ---- summary
failed=0
for r in "${RESULTS[@]}"; do [[ $r == PASS ]] || failed=$((failed + 1)); done
verdict="PASS (${#RESULTS[@]} checks)"
[[ $failed -eq 0 ]] || verdict="FAIL ($failed of ${#RESULTS[@]} checks failed)"
host="$(nproc) cores, $(podman --version), $(runc --version | head -n 1), $(podman info --format '{{.Host.CgroupsVersion}}' 2>/dev/null) cgroups"
echo
step "summary"
for row in "${FIGURES[@]}"; do printf '    %-28s %s\n' "${row%%|*}" "${row#*|}"; done
for i in "${!NAMES[@]}"; do printf '    %s  %-26s %s\n' "${RESULTS[$i]}" "${NAMES[$i]}" "${DETAILS[$i]}"; done
echo "    host: $host"
echo "    result: $verdict"
if [[ -n "$LOGS_KEEP" ]]; then
  echo "    logs: $LOGS"
elif [[ $failed -ne 0 ]]; then
  for c in "${CONTAINERS[@]}"; do
    echo "    last lines of ${c#"$TAG-"} (--logs DIR keeps the whole logs):"
    tail -n 15 "$LOGS/${c#"$TAG-"}.log" 2>/dev/null | sed 's/^/      /'
  done
fi
if [[ -n "$SUMMARY_MD" ]]; then
  {
    echo "# scripts/container_check.sh"
    echo
    echo "Host: $host. Result: $verdict."
    echo
    echo "| Figure | Value |"
    echo "|---|---|"
    for row in "${FIGURES[@]}"; do echo "| ${row%%|*} | ${row#*|} |"; done
    echo
    echo "| Check | Result | Detail |"
    echo "|---|---|---|"
    for i in "${!NAMES[@]}"; do echo "| ${NAMES[$i]} | ${RESULTS[$i]} | ${DETAILS[$i]//|/\\|} |"; done
  } > "$SUMMARY_MD" || echo "$PROG: cannot write $SUMMARY_MD" >&2
fi
[[ $failed -eq 0 ]]
