// The README's minimal program: an echo server and client in one thread.
// Built and run by the integration suite, so the README stays true.
#include <librpc/rpc_all.h>

#include <cstring>

constexpr rpc::ReqType kEcho = 1;

int main() {
  rpc::Nexus nexus({.uri = "127.0.0.1:0"});  // one per process; port 0: any free port
  (void)nexus.register_handler(kEcho, [](rpc::ReqHandle& h) {  // before any Rpc
    auto& resp = h.pre_resp_buffer();                          // one packet's worth, preallocated
    std::memcpy(resp.data(), h.request().data(), h.request().size());
    resp.resize(h.request().size());
    h.rpc().enqueue_response(h, resp);  // now, or later (deferred)
  });

  rpc::Rpc server(nexus, {.rpc_id = 1});  // one per thread; transport "udp"
  rpc::Rpc client(nexus, {.rpc_id = 0});
  auto sn = client.create_session(nexus.uri(), 1);  // connects in the background
  if (!sn) return 1;                                // sn.error() says why

  rpc::MsgBuffer req = client.alloc_msg_buffer(32);  // registered, zero-copy
  rpc::MsgBuffer resp = client.alloc_msg_buffer(32);
  std::memset(req.data(), 'x', req.size());
  int outcome = -1;                           // the Errc, once the continuation ran
  rpc::Errc queued = client.enqueue_request(  // may wait for the session to connect
      *sn, kEcho, req, resp,
      [&outcome](rpc::Rpc&, const rpc::Completion& c) {  // runs on this thread, once
        outcome = static_cast<int>(c.errc);
      });
  if (queued != rpc::Errc::kOk) return 1;
  while (outcome < 0) {
    client.run_event_loop_once();
    server.run_event_loop_once();
  }
  return outcome;  // 0: Errc::kOk
}
