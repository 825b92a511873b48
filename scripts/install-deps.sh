#!/usr/bin/env bash
# Installs every system package librpc needs to build, test and run its demos
# on a fresh Debian 12 machine. Run as root, or as a user with sudo.
set -euo pipefail

packages=(
  build-essential meson ninja-build pkg-config
  libfmt-dev libasio-dev catch2 libcli11-dev nlohmann-json3-dev
  libibverbs-dev rdma-core perftest libfabric-dev
  clang libclang-rt-14-dev iproute2 python3
)

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo_cmd=(sudo)
  else
    echo "install-deps.sh: must run as root or with sudo available" >&2
    exit 1
  fi
fi

missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps.sh: all packages present"
  exit 0
fi
echo "install-deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
