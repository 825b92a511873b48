#!/usr/bin/env bash
# Installs the system packages the peer benchmarks in bench/peers/ need on
# Debian 12: gRPC C++ and protobuf (grpc_echo), UCX (ucx_perf.sh) and the
# libfabric tools (fi_pingpong.sh), and the kernel-path tools the comparison
# runs as they come: sockperf (sockperf.sh), iperf3 (iperf3.sh) and qperf
# (qperf.sh). Idempotent: installs only what is
# missing. Run as root, or as a user with sudo. The librpc build itself needs
# scripts/install-deps.sh instead.
set -euo pipefail

packages=(
  pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler  # grpc_echo
  ucx-utils libucx-dev                                                    # ucx_perftest, ucx_info
  libfabric-bin                                                           # fi_pingpong, fi_info
  sockperf iperf3 qperf                                                   # UDP ping-pong, TCP streams
  libmemcached-tools                                                      # memcaslap (kv_vs_memcached.sh)
  iproute2 util-linux coreutils                                           # ss, taskset, timeout
)

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo_cmd=(sudo)
  else
    echo "install-peer-deps.sh: must run as root or with sudo available" >&2
    exit 1
  fi
fi

missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-peer-deps.sh: all packages present"
  exit 0
fi
echo "install-peer-deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
