#!/usr/bin/env bash
# Makes a fresh Debian bookworm machine ready to build and test SCD-Serve, then configures and
# builds in Release into build/ (or $BUILD_DIR).
#   - installs every build and test dependency with apt (apt-get update first);
#   - CUDA is not installed here: CMake uses the toolkit in /usr/local/cuda when present
#     (SCD_CUDA=AUTO) and builds CPU-only otherwise. Force with SCD_CUDA=ON or SCD_CUDA=OFF.
# Environment: BUILD_DIR (default build), SCD_CUDA (default AUTO), JOBS (default nproc),
# SCD_SKIP_APT=1 to skip the package step (e.g. offline, with the packages already present).
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
SCD_CUDA="${SCD_CUDA:-AUTO}"
JOBS="${JOBS:-$(nproc)}"

# Build tools, then the libraries the CMake build finds (in CMakeLists.txt order), then what
# later parts link (gRPC control plane, UCX transport, HTTP API).
PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates curl
  libabsl-dev nlohmann-json3-dev catch2 libopenblas-dev
  libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc
  libucx-dev
  libcpp-httplib-dev libboost-dev libssl-dev zlib1g-dev libbrotli-dev libpng-dev
  prometheus
  clang-14 libclang-rt-14-dev  # libFuzzer + sanitizer runtimes for scripts/fuzz.sh
  iproute2 nftables  # test_netfaults: `ip netns`, veth, `tc` (tbf) and random loss (no netem here)
)
# What the tests need but the build does not (so not in the images' build stage): etcd, which
# the cluster registry's tests start themselves on loopback (test_rpc, test_cluster), and
# clang-format 14, which scripts/test.sh checks every C++ and CUDA file with.
TEST_TOOLS=(etcd-server etcd-client clang-format-14)

step() { printf '\n==> %s\n' "$*"; }
run() { printf '+'; printf ' %q' "$@"; printf '\n'; "$@"; }

if [[ "${SCD_SKIP_APT:-0}" == 1 ]]; then
  step "skipping apt (SCD_SKIP_APT=1)"
else
  SUDO=()
  if [[ "$(id -u)" != 0 ]]; then
    if ! command -v sudo >/dev/null; then
      echo "setup.sh: not root and sudo is not installed; run as root" >&2
      exit 1
    fi
    SUDO=(sudo)
  fi
  step "installing $((${#PACKAGES[@]} + ${#TEST_TOOLS[@]})) packages with apt"
  run "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
  run "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${PACKAGES[@]}" "${TEST_TOOLS[@]}"
fi

# The official `openai` npm client, for the HTTP API test (Node 20 ships with the machine;
# the lock file pins the version, and nothing is fetched at test time).
if command -v npm >/dev/null; then
  step "installing the openai npm client for tests/http/openai_client"
  (cd tests/http/openai_client && run npm ci --no-audit --no-fund)
else
  step "npm not found: the openai-client test will be skipped"
fi
# kubernetes-models and yaml, pinned the same way, for test_deploy_k8s (the Kubernetes schemas
# of deploy/k8s). That test also needs kubectl with kustomize v5, which Debian does not ship:
# without it the test is skipped.
if command -v npm >/dev/null; then
  step "installing kubernetes-models for tests/deploy/k8s"
  (cd tests/deploy/k8s && run npm ci --no-audit --no-fund)
else
  step "npm not found: the deploy/k8s test will be skipped"
fi

step "configuring ${BUILD_DIR}/ (Release, SCD_CUDA=${SCD_CUDA})"
run cmake -S . -B "${BUILD_DIR}" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSCD_CUDA="${SCD_CUDA}"

step "building with ${JOBS} jobs"
run cmake --build "${BUILD_DIR}" -j"${JOBS}"

step "done: executables are in ${BUILD_DIR}/bin, run scripts/test.sh to test"
