#!/usr/bin/env bash
# The verbs suite on Soft-RoCE: boots the VM of scripts/rxe-vm.sh and runs
# VERBS_TESTS (the verbs_tests binary) in it against rxe0, plus a short run
# of each benchmark over verbs, and one across two processes. Used by
# `meson test --suite verbs`.
#
#   run_in_rxe_vm.sh VERBS_TESTS BENCH_DIR MODULE_DIR
#
# VERBS_TESTS links the core statically and finds the verbs module through
# LIBRPC_MODULE_DIR=MODULE_DIR (its [any_transport] cases create Rpcs over
# verbs); the benchmarks link librpc.so and find it next to that.
#
# Skips (77) when not root (QEMU's shares of / need it) or when
# LIBRPC_SKIP_RXE_VM=1. Any other failure, including a VM that does not
# boot, fails the test: the transport must not go untested silently.
set -u
usage="usage: run_in_rxe_vm.sh VERBS_TESTS BENCH_DIR MODULE_DIR"
tests=${1:?$usage}
bench=${2:?$usage}
module_dir=${3:?$usage}
here=$(cd "$(dirname "$0")" && pwd -P)
. "$here/../rxe_vm_common.sh" # skips (77) unless root; sets vm, slow
# In the guest: the tests, then each benchmark for a moment (they check
# their own results and exit nonzero on any failed request).
guest_cmd="set -e
LIBRPC_MODULE_DIR='$module_dir' '$tests'
echo '--- benchmarks over verbs (TCG-emulated CPU: the numbers mean nothing)'
'$bench/librpc-latency' \$slow --transport verbs --sizes 32,4K --iters 2000 --warmup 200 --duration 5
'$bench/librpc-small-rpc-tput' \$slow --transport verbs --window 8 --duration 2
'$bench/librpc-large-rpc-tput' \$slow --transport verbs --sizes 64K,1M --duration 2
echo '--- two processes over verbs: a latency server and a client'
'$bench/librpc-latency' \$slow --mode server --server-uri 127.0.0.1:31877 --transport verbs > /tmp/server.log 2>&1 &
server=\$!
# Ready once it prints its banner (after its Rpc exists); under TCG and
# ASan that can take far longer than a fixed sleep.
for _ in \$(seq 600); do
  grep -q 'latency server' /tmp/server.log && break
  kill -0 \$server 2>/dev/null || { cat /tmp/server.log; exit 1; }
  sleep 0.1
done
'$bench/librpc-latency' \$slow --mode client --server-uri 127.0.0.1:31877 --transport verbs --sizes 32,64K,1M --iters 1000 --warmup 100 --duration 5
kill -INT \$server
wait \$server
cat /tmp/server.log"
cd "$here/../.." || exit 1 # the repository: the guest's working directory
# -s: a build directory in /tmp would be hidden by the guest's tmpfs.
exec bash "$vm" -t 900 -s "$tests" -s "$bench" -s "$module_dir" -- env slow="$slow" bash -c "$guest_cmd"
