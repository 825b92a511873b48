#!/usr/bin/env bash
# Installs the system packages librpc needs, from Debian's archive, on a fresh
# Debian 12 machine. This is the one script that installs packages; the
# others that need more call it with a group. Run as root, or as a user with
# sudo. Installs only what is missing; prints what it installs.
#
#   bash scripts/install-deps.sh [GROUP...]
#
# Without a group: building, testing, the demos and the apps (libraft for
# apps/smr, libcuckoo and libmemcached + memcached for apps/kv). Groups:
#   --rxe-vm     what scripts/rxe-vm.sh needs to boot its Soft-RoCE VM
#                (QEMU, busybox, kmod, ibverbs-utils; about 70 MB). The VM
#                script also downloads Debian's stock kernel package once into
#                /var/cache/librpc-rxe-vm (about 400 MB unpacked).
#   --packaging  building the Debian packages (debhelper, lintian, fakeroot
#                and debian/control's Build-Depends) and the CMake consumer
set -euo pipefail

base=(
  build-essential meson ninja-build pkg-config
  libfmt-dev libasio-dev catch2 libcli11-dev nlohmann-json3-dev
  libibverbs-dev rdma-core perftest libfabric-dev
  clang libclang-rt-14-dev clang-format iproute2 python3
  libraft-dev libuv1-dev libcuckoo-dev libmemcached-dev memcached
)
packages=()
[ $# -eq 0 ] && packages=("${base[@]}")
for group in "$@"; do
  case $group in
    --rxe-vm)
      packages+=(qemu-system-x86 busybox-static cpio kmod xz-utils iproute2 libibverbs1
                ibverbs-providers ibverbs-utils) ;;
    --packaging)
      # The packaging tools, and debian/control's Build-Depends (without
      # version constraints: bookworm's versions satisfy them).
      packages+=(build-essential dpkg-dev debhelper fakeroot lintian git cmake)
      mapfile -t -O "${#packages[@]}" packages < <(
        sed -n '/^Build-Depends:/,/^[A-Z][A-Za-z-]*:/p' "$(dirname "$0")/../debian/control" |
          sed -e 's/^Build-Depends://' -e '/^[A-Z][A-Za-z-]*:/d' | tr ',' '\n' |
          sed -e 's/([^)]*)//g' -e 's/\[[^]]*\]//g' -e 's/|.*//' -e 's/[[:space:]]//g' |
          grep -v '^$' | sed 's/^debhelper-compat$/debhelper/') ;;
    *)
      echo "install-deps.sh: unknown group '$group' (--rxe-vm, --packaging)" >&2
      exit 2 ;;
  esac
done

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
echo "install-deps.sh: checking ${#packages[@]} packages${*:+ ($*)}"
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps.sh: all packages present${*:+ ($*)}"
  exit 0
fi
echo "install-deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
