// mw_cost: what exposing one payload for an RDMA READ costs on a verbs
// device with each scheme the bulk security model could use, by size:
//   - per-payload registration: ibv_reg_mr(REMOTE_READ) + ibv_dereg_mr
//     (what the verbs transport does);
//   - a type-2 memory window bound over a registered chunk: IBV_WR_BIND_MW
//     + IBV_WR_LOCAL_INV, each posted on the RC QP and its completion
//     polled (the window is then readable through that QP alone).
// Two RC QPs on the device connected to each other; the peer reads the
// window once bound (it must succeed) and once invalidated (it must fail),
// so the numbers are for a window that really works. Medians over --iters.
//
//   mw_cost [--device NAME] [--gid-index N] [--sizes 64K,1M,8M] [--iters N]
#include <fmt/format.h>
#include <infiniband/verbs.h>

#include "cli.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double us_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

[[noreturn]] void die(const std::string& what) {
  fmt::print(stderr, "mw_cost: {}: {}\n", what, std::strerror(errno));
  std::exit(1);
}

// Polls cq for one completion; its status.
ibv_wc_status wait_one(ibv_cq* cq) {
  ibv_wc wc{};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    const int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) die("ibv_poll_cq");
    if (n == 1) return wc.status;
    if (std::chrono::steady_clock::now() > deadline) die("no completion within 10 s");
  }
}

struct Device {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_gid gid{};
  int gid_index = 0;
  ibv_mtu mtu = IBV_MTU_1024;
};

ibv_qp* make_rc_qp(Device& d) {
  ibv_qp_init_attr qa{};
  qa.send_cq = d.cq;
  qa.recv_cq = d.cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = 16;
  qa.cap.max_recv_wr = 1;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(d.pd, &qa);
  if (qp == nullptr) die("ibv_create_qp");
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_READ;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
    die("RC QP to INIT");
  }
  return qp;
}

void connect_rc(Device& d, ibv_qp* qp, uint32_t remote_qpn) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = d.mtu;
  a.dest_qp_num = remote_qpn;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = d.gid;
  a.ah_attr.grh.sgid_index = static_cast<uint8_t>(d.gid_index);
  a.ah_attr.grh.hop_limit = 1;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
    die("RC QP to RTR");
  }
  a = ibv_qp_attr{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = 0;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
    die("RC QP to RTS");
  }
}

bool post(ibv_qp* qp, ibv_send_wr& wr) {
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad) == 0;
}

// The reader's RDMA READ of len bytes at addr under rkey into dst.
ibv_wc_status read_through(Device& d, ibv_qp* reader, ibv_mr* dst, uint64_t addr, uint32_t rkey,
                           uint32_t len) {
  ibv_sge sge{reinterpret_cast<uint64_t>(dst->addr), len, dst->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = addr;
  wr.wr.rdma.rkey = rkey;
  if (!post(reader, wr)) die("posting an RDMA READ");
  return wait_one(d.cq);
}

}  // namespace

int main(int argc, char** argv) {
  std::string device_name;
  Device d;
  std::vector<size_t> sizes{size_t{64} << 10, size_t{1} << 20, size_t{8} << 20};
  int iters = 200;
  CLI::App app(
      "Times exposing a payload for RDMA READ per transfer: a registration of its own vs a "
      "type-2 memory window bound (and invalidated) on an RC QP",
      "mw_cost");
  app.option_defaults()->always_capture_default();
  app.add_option("--device", device_name, "the RDMA device (default: the first)");
  app.add_option("--gid-index", d.gid_index, "the GID index of port 1")
      ->check(CLI::Range(0, 65535));
  measure::add_sizes_option(app, "--sizes", sizes, "payload sizes, K/M suffixes allowed", 1,
                            size_t{1} << 30)
      ->default_str("64K,1M,8M");
  app.add_option("--iters", iters, "rounds per size")->check(CLI::Range(1, 1 << 30));
  if (const auto status = measure::parse_command_line(app, argc, argv)) return *status;
  int num_devices = 0;
  ibv_device** list = ibv_get_device_list(&num_devices);
  for (int i = 0; list != nullptr && i < num_devices && d.ctx == nullptr; i++) {
    if (device_name.empty() || device_name == ibv_get_device_name(list[i])) {
      d.ctx = ibv_open_device(list[i]);
    }
  }
  if (list != nullptr) ibv_free_device_list(list);
  if (d.ctx == nullptr) die("no RDMA device" + (device_name.empty() ? "" : " " + device_name));
  ibv_device_attr da{};
  if (ibv_query_device(d.ctx, &da) != 0) die("ibv_query_device");
  if ((da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) == 0) {
    fmt::print("mw_cost: {} has no type-2B memory windows\n", ibv_get_device_name(d.ctx->device));
    return 77;
  }
  ibv_port_attr pa{};
  if (ibv_query_port(d.ctx, 1, &pa) != 0) die("ibv_query_port");
  d.mtu = pa.active_mtu;
  if (ibv_query_gid(d.ctx, 1, d.gid_index, &d.gid) != 0) die("ibv_query_gid");
  d.pd = ibv_alloc_pd(d.ctx);
  d.cq = ibv_create_cq(d.ctx, 64, nullptr, nullptr, 0);
  if (d.pd == nullptr || d.cq == nullptr) die("PD or CQ");
  ibv_qp* owner = make_rc_qp(d);   // exposes (binds windows)
  ibv_qp* reader = make_rc_qp(d);  // the peer
  connect_rc(d, owner, reader->qp_num);
  connect_rc(d, reader, owner->qp_num);
  ibv_mw* mw = ibv_alloc_mw(d.pd, IBV_MW_TYPE_2);
  if (mw == nullptr) die("ibv_alloc_mw");

  fmt::print("device {}, {} rounds, medians in microseconds\n", ibv_get_device_name(d.ctx->device),
             iters);
  fmt::print("{:>10} {:>16} {:>14} {:>14} {:>14}\n", "bytes", "reg+dereg (RR)", "bind MW",
             "invalidate", "bind+inval");
  for (size_t size : sizes) {
    std::vector<uint8_t> mem(size, 7);
    std::vector<uint8_t> dst_mem(size, 0);
    // The chunk as the allocator would register it: local access plus the
    // right to bind windows, no remote access of its own.
    ibv_mr* chunk = ibv_reg_mr(d.pd, mem.data(), size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
    ibv_mr* dst = ibv_reg_mr(d.pd, dst_mem.data(), size, IBV_ACCESS_LOCAL_WRITE);
    if (chunk == nullptr || dst == nullptr) die("ibv_reg_mr");
    std::vector<double> reg_us, bind_us, inval_us;
    for (int i = 0; i < iters; i++) {
      auto t0 = std::chrono::steady_clock::now();
      ibv_mr* mr = ibv_reg_mr(d.pd, mem.data(), size, IBV_ACCESS_REMOTE_READ);
      if (mr == nullptr) die("ibv_reg_mr(REMOTE_READ)");
      ibv_dereg_mr(mr);
      reg_us.push_back(us_since(t0));

      ibv_send_wr bind{};
      bind.opcode = IBV_WR_BIND_MW;
      bind.send_flags = IBV_SEND_SIGNALED;
      bind.bind_mw.mw = mw;
      bind.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
      bind.bind_mw.bind_info.mr = chunk;
      bind.bind_mw.bind_info.addr = reinterpret_cast<uint64_t>(mem.data());
      bind.bind_mw.bind_info.length = size;
      bind.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
      t0 = std::chrono::steady_clock::now();
      if (!post(owner, bind)) die("posting IBV_WR_BIND_MW");
      if (const ibv_wc_status s = wait_one(d.cq); s != IBV_WC_SUCCESS) {
        fmt::print(stderr, "mw_cost: bind failed: {}\n", ibv_wc_status_str(s));
        return 1;
      }
      bind_us.push_back(us_since(t0));
      mw->rkey = bind.bind_mw.rkey;
      if (i == 0) {  // the window works: the peer reads it
        if (read_through(d, reader, dst, reinterpret_cast<uint64_t>(mem.data()), mw->rkey,
                         static_cast<uint32_t>(std::min<size_t>(size, 1u << 30))) !=
                IBV_WC_SUCCESS ||
            std::memcmp(dst_mem.data(), mem.data(), size) != 0) {
          fmt::print(stderr, "mw_cost: reading through the bound window failed\n");
          return 1;
        }
      }
      ibv_send_wr inval{};
      inval.opcode = IBV_WR_LOCAL_INV;
      inval.send_flags = IBV_SEND_SIGNALED;
      inval.invalidate_rkey = mw->rkey;
      t0 = std::chrono::steady_clock::now();
      if (!post(owner, inval)) die("posting IBV_WR_LOCAL_INV");
      if (const ibv_wc_status s = wait_one(d.cq); s != IBV_WC_SUCCESS) {
        fmt::print(stderr, "mw_cost: invalidate failed: {}\n", ibv_wc_status_str(s));
        return 1;
      }
      inval_us.push_back(us_since(t0));
    }
    ibv_dereg_mr(dst);
    ibv_dereg_mr(chunk);
    fmt::print("{:>10} {:>16.2f} {:>14.2f} {:>14.2f} {:>14.2f}\n", size, median(reg_us),
               median(bind_us), median(inval_us), median(bind_us) + median(inval_us));
  }
  // An invalidated window refuses the peer (this moves the pair to error,
  // so it comes last).
  std::vector<uint8_t> probe(64, 0);
  ibv_mr* probe_mr = ibv_reg_mr(d.pd, probe.data(), probe.size(), IBV_ACCESS_LOCAL_WRITE);
  std::vector<uint8_t> src(64, 9);
  const ibv_wc_status after =
      read_through(d, reader, probe_mr, reinterpret_cast<uint64_t>(src.data()), mw->rkey, 64);
  fmt::print("a read through the invalidated window: {}\n", ibv_wc_status_str(after));
  ibv_dereg_mr(probe_mr);
  ibv_dealloc_mw(mw);
  ibv_destroy_qp(owner);
  ibv_destroy_qp(reader);
  ibv_destroy_cq(d.cq);
  ibv_dealloc_pd(d.pd);
  ibv_close_device(d.ctx);
  return after == IBV_WC_SUCCESS ? 1 : 0;
}
