// Runs N small echo RPCs between a client and a server Rpc driven from one
// thread over udp on 127.0.0.1, one request outstanding, through one of the
// client APIs: a function-pointer continuation with a tag ("fnptr"), a
// lambda continuation ("closure"), or a coroutine awaiting rpc.call
// ("coro"). Meant to run under
// `valgrind --tool=callgrind`, whose instruction counts are exact and
// repeatable: scripts/cpu_cost.sh runs it for two values of N and divides
// the difference of librpc's own instructions by the difference of N,
// which cancels set-up and tear-down. Loopback delivers a datagram inside
// sendmmsg, so every loop iteration does work; there is no idle polling.
#include <librpc/rpc_all.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

constexpr rpc::ReqType kEcho = 1;

struct State {
  rpc::MsgBuffer req;
  rpc::MsgBuffer resp;
  rpc::SessionNum sn = 0;
  long remaining = 0;
  long failed = 0;
};

void echo(rpc::ReqHandle& h) {
  rpc::MsgBuffer& resp = h.pre_resp_buffer();
  std::memcpy(resp.data(), h.request().data(), h.request().size());
  resp.resize(h.request().size());
  h.rpc().enqueue_response(h, resp);
}

void on_done(rpc::Rpc& rpc, const rpc::Completion& c) {
  auto* s = static_cast<State*>(c.tag);
  if (c.errc != rpc::Errc::kOk) s->failed++;
  if (--s->remaining > 0) {
    (void)rpc.enqueue_request(s->sn, kEcho, s->req, s->resp, on_done, s);
  }
}

// The same as a closure: captures two pointers (no allocation).
void send_with_closure(rpc::Rpc& rpc, State& s) {
  (void)rpc.enqueue_request(s.sn, kEcho, s.req, s.resp,
                            [&s](rpc::Rpc& r, const rpc::Completion& c) {
                              if (c.errc != rpc::Errc::kOk) s.failed++;
                              if (--s.remaining > 0) send_with_closure(r, s);
                            });
}

// The same as a coroutine: one frame for the whole run, nothing per call.
rpc::Task<void> send_with_coroutine(rpc::Rpc& rpc, State& s) {
  while (s.remaining > 0) {
    const rpc::CallResult r = co_await rpc.call(s.sn, kEcho, s.req, s.resp);
    if (!r.ok()) s.failed++;
    s.remaining--;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 10000;
  const size_t size = argc > 2 ? static_cast<size_t>(std::atol(argv[2])) : 32;
  const bool offload = argc <= 3 || std::strcmp(argv[3], "off") != 0;  // RpcConfig::udp_offload
  // RpcConfig::congestion_control: its default unless "on" or "off"
  bool cc = rpc::RpcConfig{}.congestion_control;
  if (argc > 4 && std::strcmp(argv[4], "default") != 0) cc = std::strcmp(argv[4], "on") == 0;
  const char* api = argc > 5 ? argv[5] : "fnptr";
  const bool api_ok = std::strcmp(api, "fnptr") == 0 || std::strcmp(api, "closure") == 0 ||
                      std::strcmp(api, "coro") == 0;
  if (n <= 0 || !api_ok) {
    std::fprintf(stderr,
                 "usage: cpu_cost [NUM_RPCS] [SIZE_BYTES] [on|off (udp offload)] "
                 "[on|off|default (congestion control)] [fnptr|closure|coro (client API)]\n");
    return 2;
  }
  rpc::Nexus nexus({.uri = "127.0.0.1:0", .num_bg_threads = 0});
  if (!nexus.register_handler(kEcho, echo)) return 1;
  rpc::Rpc server(nexus, {.rpc_id = 1, .udp_offload = offload, .congestion_control = cc});
  rpc::Rpc client(nexus, {.rpc_id = 0, .udp_offload = offload, .congestion_control = cc});
  auto sn = client.create_session(nexus.uri(), 1);
  if (!sn) {
    std::fprintf(stderr, "cpu_cost: %s\n", sn.error().c_str());
    return 1;
  }
  while (!client.is_connected(*sn)) {
    client.run_event_loop_once();
    server.run_event_loop_once();
  }
  State s;
  s.sn = *sn;
  s.req = client.alloc_msg_buffer(size);
  s.resp = client.alloc_msg_buffer(size);
  std::memset(s.req.data(), 'x', size);
  s.remaining = n;
  if (std::strcmp(api, "closure") == 0) {
    send_with_closure(client, s);
  } else if (std::strcmp(api, "coro") == 0) {
    client.spawn(send_with_coroutine(client, s));
  } else {
    (void)client.enqueue_request(s.sn, kEcho, s.req, s.resp, on_done, &s);
  }
  while (s.remaining > 0) {
    client.run_event_loop_once();
    server.run_event_loop_once();
  }
  std::printf(
      "cpu_cost: %ld RPCs of %zu B via %s, %ld failed, client retransmissions %lu, congestion "
      "control %s\n",
      n, size, api, s.failed, static_cast<unsigned long>(client.stats().retransmissions),
      cc ? "on" : "off");
  return s.failed == 0 ? 0 : 1;
}
