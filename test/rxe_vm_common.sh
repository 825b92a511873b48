# Sourced by the test scripts that boot the Soft-RoCE VM of
# scripts/rxe-vm.sh (test/verbs/, test/fabric/). Exits 77 (skipped) when
# not root (QEMU's shares of / need it) or when LIBRPC_SKIP_RXE_VM=1; any
# other failure, including a VM that does not boot, must fail the test.
# Sets `vm` (the script) and `slow`: the guest CPU is emulated (and the
# suite may run under ASan), so the benchmarks' session-management
# timeouts are raised so that slowness is not taken for a dead peer.
if [ "${LIBRPC_SKIP_RXE_VM:-0}" = 1 ]; then
  echo "SKIP: LIBRPC_SKIP_RXE_VM=1"
  exit 77
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "SKIP: the Soft-RoCE VM needs root"
  exit 77
fi
vm=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)/scripts/rxe-vm.sh
# shellcheck disable=SC2034 # used by the scripts that source this one
slow="--sm-timeout-ms 20000 --failure-timeout-ms 20000"
