// The README's minimal program again, with the handler and the client
// written as coroutines. Built and run by the integration suite.
#include <librpc/rpc_all.h>

#include <chrono>
#include <cstring>

constexpr rpc::ReqType kEcho = 1;

rpc::Task<void> echo(rpc::ReqHandle& h) {  // may co_await calls to other servers first
  auto& resp = h.pre_resp_buffer();
  std::memcpy(resp.data(), h.request().data(), h.request().size());
  resp.resize(h.request().size());
  h.rpc().enqueue_response(h, resp);
  co_return;
}

rpc::Task<void> client_main(rpc::Rpc& rpc, rpc::SessionNum sn, int& outcome) {
  rpc::OwnedBuffer req(rpc, 32), resp(rpc, 32);  // freed when the coroutine ends
  std::memset(req.data(), 'x', req.size());
  rpc::CallResult r = co_await rpc.call(sn, kEcho, req, resp, {.timeout = std::chrono::seconds(5)});
  outcome = static_cast<int>(r.errc);  // r.resp_size bytes are in resp
}

int main() {
  rpc::Nexus nexus({.uri = "127.0.0.1:0"});
  (void)nexus.register_handler(kEcho, echo);  // a coroutine handler: returns rpc::Task<void>
  rpc::Rpc server(nexus, {.rpc_id = 1});
  rpc::Rpc client(nexus, {.rpc_id = 0});
  auto sn = client.create_session(nexus.uri(), 1);
  if (!sn) return 1;

  int outcome = -1;
  client.spawn(client_main(client, *sn, outcome));  // runs until its first co_await
  while (outcome < 0) {
    client.run_event_loop_once();
    server.run_event_loop_once();
  }
  return outcome;  // 0: Errc::kOk
}
