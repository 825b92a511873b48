// Main of the verbs suite: the [verbs] transport tests plus every engine
// test tagged [any_transport], run over the verbs transport. Exits 77
// (skipped) on a machine without an RDMA port that is up; scripts/rxe-vm.sh
// runs the suite on Soft-RoCE inside a VM.
#include <infiniband/verbs.h>

#include <cstdio>
#include <cstdlib>

#include "catch_run.h"

namespace {

bool have_active_rdma_port() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return false;
  bool found = false;
  for (int i = 0; i < n && !found; i++) {
    ibv_context* ctx = ibv_open_device(list[i]);
    if (ctx == nullptr) continue;
    ibv_port_attr pa{};
    found = ibv_query_port(ctx, 1, &pa) == 0 && pa.state == IBV_PORT_ACTIVE;
    ibv_close_device(ctx);
  }
  ibv_free_device_list(list);
  return found;
}

}  // namespace

int main(int argc, char** argv) {
  if (!have_active_rdma_port()) {
    std::puts("SKIP: no RDMA device with an active port 1 (Soft-RoCE: bash scripts/rxe-vm.sh)");
    return 77;
  }
  setenv("LIBRPC_TEST_TRANSPORT", "verbs", 1);
  return rpc::test::run_catch_session(argc, argv, "[verbs],[any_transport]");
}
