#!/usr/bin/env bash
# The fabric transport over libfabric's verbs;ofi_rxm on Soft-RoCE: a real
# RDMA provider with EFA's memory-registration modes (FI_MR_LOCAL,
# FI_MR_VIRT_ADDR, FI_MR_ALLOCATED, FI_MR_PROV_KEY). Boots the VM of
# scripts/rxe-vm.sh and runs in it:
#   1. latency before the RDMA netdev has an IPv4 address: it must fail
#      with the transport's error, not crash in libfabric;
#   2. FABRIC_TESTS over verbs;ofi_rxm (every [fabric] case that is not
#      about tcp or shm), including bulk by fi_read with provider keys;
#   3. INTEGRATION_TESTS' [any_transport] cases over verbs;ofi_rxm (they
#      crashed in fi_close until the transport asked rxm for a shared
#      receive context: docs/transports.md);
#   4. a latency server and client as two processes (32 B, 64 KiB, 1 MiB;
#      5 s each).
# FI_UNIVERSE_SIZE is left unset: the transport's own default is under test.
# Used by `meson test --suite verbs`.
#
#   run_in_rxe_vm.sh FABRIC_TESTS INTEGRATION_TESTS BENCH_DIR MODULE_DIR
#
# The test suites link the core statically, so they find the transport
# modules through LIBRPC_MODULE_DIR=MODULE_DIR; the benchmarks link
# librpc.so and find them on the default path, next to it.
#
# Skips (77) when not root (QEMU's shares of / need it) or when
# LIBRPC_SKIP_RXE_VM=1. Any other failure, including a VM that does not
# boot or a provider missing in it, fails the test.
set -u
usage="usage: run_in_rxe_vm.sh FABRIC_TESTS INTEGRATION_TESTS BENCH_DIR MODULE_DIR"
fabric_tests=${1:?$usage}
integration_tests=${2:?$usage}
bench=${3:?$usage}
module_dir=${4:?$usage}
here=$(cd "$(dirname "$0")" && pwd -P)
. "$here/../rxe_vm_common.sh" # skips (77) unless root; sets vm, slow
guest_cmd="set -e
unset FI_UNIVERSE_SIZE
export LIBRPC_MODULE_DIR='$module_dir'  # the test suites; the benchmarks are told to forget it
export LIBRPC_TEST_FABRIC_PROVIDER='verbs;ofi_rxm'
ndev=\$(cat /sys/class/infiniband/\$RXE_DEV/ports/1/gid_attrs/ndevs/0)
echo \"--- [\$SECONDS s] verbs;ofi_rxm before \$ndev has an IPv4 address: a clean error\"
if env -u LIBRPC_MODULE_DIR '$bench/librpc-latency' \$slow --transport fabric --fabric-provider \"\$LIBRPC_TEST_FABRIC_PROVIDER\" \
    --sizes 32 --iters 10 --warmup 0 --duration 2 > /tmp/noip.log 2>&1; then
  cat /tmp/noip.log; echo 'FAIL: latency ran without an address'; exit 1
fi
cat /tmp/noip.log
grep -q 'peers cannot connect to' /tmp/noip.log
ip addr add 10.77.0.1/24 dev \"\$ndev\"
echo \"--- [\$SECONDS s] fabric_tests over verbs;ofi_rxm (\$ndev: 10.77.0.1)\"
'$fabric_tests'
echo \"--- [\$SECONDS s] with libfabric's registration cache on, exposures would share the region's\"
echo '    read-write registration: the transport must refuse bulk'
FI_MR_CACHE_MAX_COUNT=1024 '$fabric_tests' '[mr_cache]'
echo \"--- [\$SECONDS s] [any_transport] integration cases over verbs;ofi_rxm\"
LIBRPC_TEST_TRANSPORT=fabric '$integration_tests' '[any_transport]'
echo \"--- [\$SECONDS s] two processes over verbs;ofi_rxm\"
env -u LIBRPC_MODULE_DIR bash '$here/two_processes.sh' '$bench' \"\$LIBRPC_TEST_FABRIC_PROVIDER\" 31890 \$slow
echo \"--- [\$SECONDS s] done\""
cd "$here/../.." || exit 1 # the repository: the guest's working directory
# -s: a build directory in /tmp would be hidden by the guest's tmpfs.
exec bash "$vm" -t 600 -s "$fabric_tests" -s "$integration_tests" -s "$bench" -s "$module_dir" \
  -- env slow="$slow" bash -c "$guest_cmd"
