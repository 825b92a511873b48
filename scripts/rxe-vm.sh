#!/usr/bin/env bash
# Runs a command inside a throw-away QEMU VM that has a real kernel RDMA
# stack: Soft-RoCE (rdma_rxe) on a dummy netdev, device rxe0. For machines
# without an RDMA NIC (and kernels without rdma_rxe): the verbs transport
# and its tests then run against real libibverbs and a real kernel driver.
#
#   bash scripts/rxe-vm.sh [-t SECS] [-m MB] [-c CPUS] [-o DIR] [-n] [-s PATH]... -- CMD [ARGS...]
#
#   -t SECS  time limit of the command in the guest (default 900)
#   -m MB    guest memory (default 2048)
#   -c CPUS  guest vCPUs (default: host CPUs, at most 4)
#   -o DIR   keep the logs (console, output, dmesg, rc) in DIR
#   -n       no apt-get: use what is installed and cached
#   -s PATH  the command needs the host's PATH (repeatable; see below)
#
# Needs root (QEMU's 9p shares of /). Installs what is missing from Debian's
# archive with `scripts/install-deps.sh --rxe-vm` (qemu, busybox, kmod, rdma
# providers; about 70 MB) and downloads Debian's stock kernel package once,
# kept unpacked in $RXE_VM_CACHE (default /var/cache/librpc-rxe-vm; about
# 400 MB); it says so on stderr when it does either. The host's own kernel
# and /boot are not touched. -n installs and downloads nothing.
#
# The guest mounts the host's root file system read-only over virtio-9p, so
# every host binary and library runs in it unchanged; the repository (the
# current directory) is shared read-write at the same path and is the
# command's working directory. /tmp, /var/tmp, /dev/shm and /run are the
# guest's own tmpfs, which hide the host's files there, except those the
# command needs: every -s PATH and every argument of CMD that names an
# existing file (a path inside an argument, as in bash -c '...', needs -s)
# that lies there, or whose symlink target does, is shared read-write at
# the same path, together with the rest of its entry in that directory
# (-s /tmp/b/test/t shares /tmp/b; the guest's own files in /tmp stay in
# its tmpfs). The guest has no network card: nothing it sends leaves the
# VM. In the guest the command sees RXE_IN_VM=1 and RXE_DEV=rxe0 (GID
# index 0: the link-local RoCEv2 GID), and the host's
# ASAN/UBSAN/LSAN/TSAN_OPTIONS.
#
# Exit code: the command's; 124 if it timed out in the guest; 125 if the VM
# did not boot or no exit code came back; 126 if the RDMA setup in the
# guest failed; 2 on bad usage. Without hardware virtualisation QEMU
# emulates the CPU (TCG): a boot takes about a minute and code runs ~10x
# slower than on the host.
set -euo pipefail

CMD_TIMEOUT=900
MEM_MB=2048
NCPU=$(nproc)
[ "$NCPU" -gt 4 ] && NCPU=4
KEEP=
USE_APT=1
CACHE=${RXE_VM_CACHE:-/var/cache/librpc-rxe-vm}
WORKDIR=$(pwd -P)
NEEDED=() # -s PATH

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}
while getopts ":t:m:c:o:s:nh" opt; do
  case $opt in
    t) CMD_TIMEOUT=$OPTARG ;;
    m) MEM_MB=$OPTARG ;;
    c) NCPU=$OPTARG ;;
    o) KEEP=$OPTARG ;;
    n) USE_APT= ;;
    s) NEEDED+=("$OPTARG") ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
[ $# -ge 1 ] || usage
[ "$(id -u)" -eq 0 ] || { echo "rxe-vm: needs root" >&2; exit 2; }
[ "$WORKDIR" != / ] || { echo "rxe-vm: run it from the repository, not /" >&2; exit 2; }

say() { echo "[rxe-vm $(date +%T)] $*" >&2; }

# ------------------------------------------------------------ host paths under tmpfs
# The guest mounts its own tmpfs over these (its root is the host's, read-only).
TMPFS_MOUNTS=(/tmp /var/tmp /dev/shm /run)
# Lines for the guest's init, `m TAG MOUNT_POINT` (share the host's mount
# point as TAG) and `d|f|l PATH` (bind that directory or file, or copy that
# symlink, from the share to the same path).
SHARE_LINES=()
declare -A MOUNTED=() SHARED=()
share_entry() { # share_entry PATH: share PATH (a host path, absolute) if under a tmpfs
  local p=$1 m rel top kind
  for m in "${TMPFS_MOUNTS[@]}"; do
    case $p in
      "$m") top=$m ;; # only with -s: the host's whole directory replaces the tmpfs
      "$m"/*)
        rel=${p#"$m"/}
        top=$m/${rel%%/*}
        ;;
      *) continue ;;
    esac
    case $top in /run/vm | /run/kernel)
      echo "rxe-vm: cannot share $p: $top is the VM's own in the guest; move it elsewhere" >&2
      exit 2
      ;;
    esac
    [ -e "$top" ] || [ -L "$top" ] || return 0
    [ -n "${SHARED[$top]:-}" ] && return 0
    if [ -z "${MOUNTED[$m]:-}" ]; then
      MOUNTED[$m]=1
      SHARE_LINES+=("m host${m//\//_} $m")
    fi
    if [ -L "$top" ]; then kind=l; elif [ -d "$top" ]; then kind=d; else kind=f; fi
    SHARED[$top]=$kind
    SHARE_LINES+=("$kind $top")
    return 0
  done
}
need_path() { # need_path PATH: the path as written, then with symlinks resolved
  case $1 in *$'\n'*)
    echo "rxe-vm: cannot share a path with a newline: $1" >&2
    exit 2
    ;;
  esac
  share_entry "$(realpath -ms -- "$1")"
  share_entry "$(realpath -m -- "$1")"
}
for p in "${NEEDED[@]}"; do
  [ -e "$p" ] || { echo "rxe-vm: -s $p: no such file or directory" >&2; exit 2; }
  need_path "$p"
done
for p in "$@"; do
  # A mount point itself (`ls /tmp`) means the guest's; -s /tmp shares it.
  case $p in /tmp | /tmp/ | /var/tmp | /var/tmp/ | /dev/shm | /dev/shm/ | /run | /run/) continue ;; esac
  if [ -e "$p" ]; then need_path "$p"; fi
done
if [ ${#SHARE_LINES[@]} -gt 0 ]; then
  say "shared over the guest's tmpfs: $(printf '%s\n' "${SHARE_LINES[@]}" | sed -n 's/^[dfl] //p' | paste -sd' ')"
fi
START=$(date +%s)

# ------------------------------------------------------------ host packages
# The guest uses the host's userspace: the verbs provider for rxe
# (ibverbs-providers), and the tools the guest setup calls. The package list
# lives in install-deps.sh (--rxe-vm), which installs only what is missing.
if [ -n "$USE_APT" ]; then
  say "host packages for the VM: scripts/install-deps.sh --rxe-vm (-n to skip)"
  bash "$(dirname "$0")/install-deps.sh" --rxe-vm >&2
fi
command -v qemu-system-x86_64 >/dev/null || { echo "rxe-vm: qemu-system-x86_64 missing" >&2; exit 125; }

# ------------------------------------------------------------ guest kernel
# Debian's stock kernel has rdma_rxe as a module; the host's may not.
mkdir -p "$CACHE"
exec 8>"$CACHE/lock"
flock 8
KPKG=
if [ -n "$USE_APT" ]; then
  KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null |
    awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
fi
[ -n "$KPKG" ] || KPKG=$(ls -1d "$CACHE"/linux-image-*-amd64 2>/dev/null | sort -V | tail -1 | xargs -r basename)
[ -n "$KPKG" ] || { say "no kernel package known (apt-cache failed and nothing cached)"; exit 125; }
KVER=${KPKG#linux-image-}
KROOT=$CACHE/$KPKG
if [ ! -e "$KROOT/.ready" ]; then
  say "downloading Debian's kernel package $KPKG once, into $CACHE (RXE_VM_CACHE)"
  rm -rf "$KROOT" "$CACHE/download"
  mkdir -p "$CACHE/download"
  chown _apt "$CACHE/download" 2>/dev/null || true
  (cd "$CACHE/download" && apt-get download -qq "$KPKG")
  dpkg-deb -x "$CACHE"/download/"$KPKG"_*.deb "$KROOT"
  depmod -b "$KROOT" "$KVER"
  rm -rf "$CACHE/download"
  touch "$KROOT/.ready"
fi
KMODS=$KROOT/lib/modules/$KVER

# ------------------------------------------------------------ initramfs
# Just enough to mount the host's root over 9p: busybox and the virtio/9p
# modules. rdma_rxe and the rest load later from $KROOT through that root.
GUEST_INIT=$(
  cat <<'EOF_INIT'
#!/bin/busybox sh
# PID 1 of the librpc rxe VM: mount the shares, chroot into the host's root.
/bin/busybox mkdir -p /proc /sys /dev /root /out
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
fatal() { echo "rxe-vm init: $*" >/dev/console; sync; reboot -f; }
while read -r ko; do insmod "/modules/$ko" || echo "rxe-vm init: insmod $ko failed" >/dev/console; done </modules/order
O9=trans=virtio,version=9p2000.L,msize=262144
mount -t 9p -o $O9,cache=none out /out || fatal "cannot mount the output share"
. /out/env.sh
R=/root
mount -t 9p -o $O9,ro,cache=loose hostroot $R || fatal "cannot mount the host root"
mount -t proc proc $R/proc
mount -t sysfs sysfs $R/sys
mount -t devtmpfs devtmpfs $R/dev
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts devpts $R/dev/pts
mount -t tmpfs -o mode=1777 tmpfs $R/dev/shm
mount -t tmpfs -o mode=1777 tmpfs $R/tmp
mount -t tmpfs -o mode=1777 tmpfs $R/var/tmp
mount -t tmpfs -o mode=755 tmpfs $R/run
mkdir -p $R/run/vm $R/run/kernel
mount --bind /out $R/run/vm
mount -t 9p -o $O9,ro,cache=loose kernel $R/run/kernel || fatal "cannot mount the kernel share"
# Host paths under the tmpfs mounts above that the command needs (/out/shares).
while read -r kind p; do
  case $kind in
    m) mkdir -p "/host${p#* }" && mount -t 9p -o $O9,cache=none "${p%% *}" "/host${p#* }" || fatal "cannot mount the share of ${p#* }" ;;
    d) mkdir -p "$R$p" && mount --bind "/host$p" "$R$p" || fatal "cannot share $p" ;;
    f) touch "$R$p" && mount --bind "/host$p" "$R$p" || fatal "cannot share $p" ;;
    l) ln -sfn "$(readlink "/host$p")" "$R$p" || fatal "cannot copy the symlink $p" ;;
  esac
done </out/shares
mkdir -p $R$WORKDIR 2>/dev/null # exists unless under a tmpfs (/tmp)
mount -t 9p -o $O9,cache=none work $R$WORKDIR || fatal "cannot mount $WORKDIR"
printf '#!/bin/sh\nexec chroot /root /sbin/modprobe -d /run/kernel "$@"\n' >/bin/vm-modprobe
chmod 755 /bin/vm-modprobe
echo /bin/vm-modprobe >/proc/sys/kernel/modprobe
hostname librpc-rxe
chroot $R /bin/bash /run/vm/guest.sh </dev/null >/dev/console 2>&1
sync
umount $R$WORKDIR 2>/dev/null
umount $R/run/vm 2>/dev/null
umount /out 2>/dev/null
sync
reboot -f
EOF_INIT
)
# The module files with their dependencies first, decompressed.
module_paths() {
  local m line dep
  for m in "$@"; do
    line=$(grep -E "(^|/)$m\.ko(\.xz|\.zst|\.gz)?:" "$KMODS/modules.dep" || true)
    [ -n "$line" ] || continue # built into the kernel
    for dep in $(echo "${line#*:}" | tr ' ' '\n' | tac); do echo "$dep"; done
    echo "${line%%:*}"
  done | awk '!seen[$0]++'
}
INITRD=$CACHE/initrd-$KVER-$(printf '%s' "$GUEST_INIT" | md5sum | cut -c1-10).cpio.gz
if [ ! -s "$INITRD" ]; then
  say "building the initramfs"
  IR=$(mktemp -d)
  mkdir -p "$IR/bin" "$IR/modules"
  cp /bin/busybox "$IR/bin/busybox"
  printf '%s\n' "$GUEST_INIT" >"$IR/init"
  chmod 755 "$IR/init"
  : >"$IR/modules/order"
  for ko in $(module_paths virtio_pci 9pnet_virtio 9p); do
    name=$(basename "$ko")
    name=${name%.xz}
    name=${name%.zst}
    name=${name%.gz}
    case $ko in
      *.xz) xz -dc "$KMODS/$ko" >"$IR/modules/$name" ;;
      *.zst) zstd -qdc "$KMODS/$ko" >"$IR/modules/$name" ;;
      *.gz) gzip -dc "$KMODS/$ko" >"$IR/modules/$name" ;;
      *) cp "$KMODS/$ko" "$IR/modules/$name" ;;
    esac
    echo "$name" >>"$IR/modules/order"
  done
  (cd "$IR" && find . | cpio -o -H newc --quiet | gzip -1) >"$INITRD.tmp"
  mv "$INITRD.tmp" "$INITRD"
  rm -rf "$IR"
fi
flock -u 8
exec 8>&-

# ------------------------------------------------------------ run directory
if [ -n "$KEEP" ]; then
  mkdir -p "$KEEP"
  OUT=$(cd "$KEEP" && pwd -P)
  rm -f "$OUT"/rc "$OUT"/output.log "$OUT"/console.log "$OUT"/dmesg.log "$OUT"/shares
else
  OUT=$(mktemp -d /tmp/librpc-rxe-vm.XXXXXX)
fi
QEMU_PID=
finish() {
  local rc=$?
  if [ -n "$QEMU_PID" ] && kill -0 "$QEMU_PID" 2>/dev/null; then
    kill "$QEMU_PID" 2>/dev/null || true
    sleep 1
    kill -9 "$QEMU_PID" 2>/dev/null || true
  fi
  [ -z "$KEEP" ] && rm -rf "$OUT"
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM

printf 'WORKDIR=%q\nCMD_TIMEOUT=%q\n' "$WORKDIR" "$CMD_TIMEOUT" >"$OUT/env.sh"
printf '%s\n' "${SHARE_LINES[@]}" >"$OUT/shares"
# Sanitizer settings reach the command (CI runs the suite under ASan).
for v in ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS TSAN_OPTIONS; do
  [ -n "${!v:-}" ] && printf 'export %s=%q\n' "$v" "${!v}" >>"$OUT/env.sh"
done
{
  printf 'cd -- %q || exit 126\nexec' "$WORKDIR"
  printf ' %q' "$@"
  echo
} >"$OUT/cmd.sh"
cat >"$OUT/guest.sh" <<'EOF_GUEST'
#!/bin/bash
# In the guest, chrooted into the host's root: RDMA setup, then the command.
. /run/vm/env.sh
V=/run/vm
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/tmp LANG=C.UTF-8 RXE_IN_VM=1 RXE_DEV=rxe0
modprobe() { /sbin/modprobe -d /run/kernel "$@"; }
ulimit -l unlimited
ulimit -c 0
rdma_setup() {
  set -e
  ip link set lo up
  modprobe dummy numdummies=0
  ip link add dummy0 type dummy
  ip link set dummy0 up
  modprobe rdma_rxe
  modprobe ib_uverbs
  rdma link add rxe0 type rxe netdev dummy0
  # The GID table fills in asynchronously after the link is added.
  local gid=/sys/class/infiniband/rxe0/ports/1/gids/0
  for _ in $(seq 100); do
    [ -e $gid ] && [ "$(cat $gid)" != 0000:0000:0000:0000:0000:0000:0000:0000 ] && break
    sleep 0.1
  done
  echo "rxe0: GID[0] $(cat $gid), port $(cat /sys/class/infiniband/rxe0/ports/1/state)"
  ibv_devices
}
echo "=== rxe-vm: kernel $(uname -r), $(nproc) vCPUs"
# In a subshell, outside any `if`: its set -e stops at the first failing
# step and does not leak into the rest of this script.
(rdma_setup) >$V/setup.log 2>&1
setup_rc=$?
if [ "$setup_rc" -ne 0 ]; then
  cat $V/setup.log
  echo "=== rxe-vm: RDMA setup failed"
  dmesg >$V/dmesg.log 2>&1
  echo 126 >$V/rc
  exit 0
fi
cat $V/setup.log
echo "=== rxe-vm: ready after $(cut -d' ' -f1 /proc/uptime) s; running the command"
timeout -k 10 "$CMD_TIMEOUT" bash $V/cmd.sh >$V/output.log 2>&1 &
pid=$!
tail -s 0.2 -n +1 -f --pid=$pid $V/output.log &
wait $pid
rc=$?
sleep 0.3
echo "=== rxe-vm: command exit code $rc"
dmesg >$V/dmesg.log 2>&1
echo "$rc" >$V/rc.tmp && mv $V/rc.tmp $V/rc
sync
EOF_GUEST

# ------------------------------------------------------------ boot
if [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo; then
  ACCEL=(-accel kvm -cpu host)
  MODE=kvm
else
  # No hardware virtualisation: emulate. The CPU model must offer what the
  # host's binaries were compiled for (x86-64 baseline plus SSE4.2).
  ACCEL=(-accel tcg,thread=multi,tb-size=256 -cpu qemu64,+ssse3,+sse4.1,+sse4.2,+popcnt,+cx16)
  MODE=tcg
fi
say "booting ($MODE, $NCPU vCPUs, $MEM_MB MiB, kernel $KVER)"
SHARE=security_model=none,multidevs=remap
HOST_SHARES=()
for line in "${SHARE_LINES[@]}"; do
  read -r kind tag mp <<<"$line"
  [ "$kind" = m ] && HOST_SHARES+=(-virtfs "local,path=$mp,mount_tag=$tag,$SHARE")
done
: >"$OUT/console.log"
qemu-system-x86_64 "${ACCEL[@]}" -m "$MEM_MB" -smp "$NCPU" -machine q35 \
  -nodefaults -no-user-config -display none -no-reboot -nic none \
  -serial "file:$OUT/console.log" \
  -kernel "$KROOT/boot/vmlinuz-$KVER" -initrd "$INITRD" \
  -append "console=ttyS0 panic=-1 quiet loglevel=4 mitigations=off" \
  -virtfs "local,path=/,mount_tag=hostroot,readonly=on,$SHARE" \
  -virtfs "local,path=$WORKDIR,mount_tag=work,$SHARE" \
  -virtfs "local,path=$OUT,mount_tag=out,$SHARE" \
  -virtfs "local,path=$KROOT,mount_tag=kernel,readonly=on,$SHARE" \
  "${HOST_SHARES[@]}" \
  </dev/null >"$OUT/qemu.log" 2>&1 &
QEMU_PID=$!
tail -n +1 -F --pid="$QEMU_PID" "$OUT/console.log" 2>/dev/null &
deadline=$(($(date +%s) + CMD_TIMEOUT + 300))
while kill -0 "$QEMU_PID" 2>/dev/null; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    say "the VM did not finish in time; stopping it"
    kill "$QEMU_PID" 2>/dev/null || true
    break
  fi
  sleep 0.5
done
wait "$QEMU_PID" 2>/dev/null || true
QEMU_PID=
if [ -s "$OUT/rc" ]; then
  rc=$(cat "$OUT/rc")
else
  say "no exit code came back from the guest; last console lines:"
  tail -n 30 "$OUT/console.log" >&2 || true
  cat "$OUT/qemu.log" >&2 || true
  rc=125
fi
say "done in $(($(date +%s) - START)) s, exit code $rc${KEEP:+, logs in $OUT}"
exit "$rc"
