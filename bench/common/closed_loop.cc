// A closed-loop client.
#include "common/closed_loop.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/args.h"
#include "common/handlers.h"

namespace bench {

namespace {

void bump(std::atomic<std::uint64_t>& counter) {
  counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

}  // namespace

ClosedLoop::ClosedLoop(rpc::Rpc& rpc, std::vector<ClientSession> sessions, const Params& params,
                       LoopCounters& counters)
    : rpc_(rpc), sessions_(std::move(sessions)), params_(params), counters_(counters) {
  requests_.resize(sessions_.size() * params_.window);
  for (std::size_t i = 0; i < requests_.size(); ++i) {
    Request& r = requests_[i];
    r.loop = this;
    r.session = sessions_[i / params_.window].num;
    r.req = rpc_.alloc_msg_buffer(params_.req_size);
    r.resp = rpc_.alloc_msg_buffer(params_.resp_size);
    if (!r.req.valid() || !r.resp.valid()) {
      free_buffers();
      throw RunError(
          fmt::format("cannot allocate {} request buffers of {} B and response "
                      "buffers of {} B (largest message: {} B)",
                      requests_.size(), params_.req_size, params_.resp_size, rpc_.max_msg_size()));
    }
    fill_pattern(r.req);
    if (params_.req_type != kEchoType) {  // every other type is told the response size
      set_wanted_resp_size(r.req, static_cast<std::uint32_t>(params_.resp_size));
    }
  }
  if (params_.req_type == kChecksumType && !requests_.empty()) {
    expected_checksum_ = request_checksum(requests_[0].req.data(), requests_[0].req.size());
  }
}

ClosedLoop::~ClosedLoop() {
  if (!finished_) (void)finish(std::chrono::milliseconds(100));
  free_buffers();
}

void ClosedLoop::free_buffers() {
  for (Request& r : requests_) {
    rpc_.free_msg_buffer(r.req);
    rpc_.free_msg_buffer(r.resp);
  }
}

void ClosedLoop::start() {
  for (Request& r : requests_) {
    clear_checksum(r);
    const rpc::Errc rc =
        rpc_.enqueue_request(r.session, params_.req_type, r.req, r.resp, on_response, &r);
    if (rc != rpc::Errc::kOk) {
      throw RunError(fmt::format("enqueue_request: {}", rpc::to_string(rc)));
    }
    ++outstanding_;
  }
}

void ClosedLoop::on_response(rpc::Rpc& rpc, const rpc::Completion& c) {
  Request& r = *static_cast<Request*>(c.tag);
  ClosedLoop& loop = *r.loop;
  if (c.errc == rpc::Errc::kOk && c.resp_size == loop.params_.resp_size && loop.checksum_ok(r)) {
    bump(loop.counters_.completed);
  } else if (c.errc == rpc::Errc::kOk && c.resp_size == loop.params_.resp_size) {
    loop.record_error("response without the request's checksum");
  } else if (c.errc == rpc::Errc::kOk) {
    loop.record_error(
        fmt::format("response of {} B, expected {} B", c.resp_size, loop.params_.resp_size));
  } else if (!(loop.finished_ && c.errc == rpc::Errc::kSessionDestroyed)) {
    loop.record_error(std::string(rpc::to_string(c.errc)));
  }
  if (!loop.stopping_) {
    loop.clear_checksum(r);
    const rpc::Errc rc =
        rpc.enqueue_request(r.session, loop.params_.req_type, r.req, r.resp, on_response, &r);
    if (rc == rpc::Errc::kOk) return;
    loop.record_error(fmt::format("enqueue_request: {}", rpc::to_string(rc)));
  }
  --loop.outstanding_;
}

bool ClosedLoop::checksum_ok(const Request& r) const {
  if (params_.req_type != kChecksumType) return true;
  const std::size_t n = std::min(kChecksumBytes, params_.resp_size);
  return std::memcmp(r.resp.data(), &expected_checksum_, n) == 0;
}

void ClosedLoop::clear_checksum(Request& r) const {
  if (params_.req_type != kChecksumType) return;
  // The complement of the expected bytes, so that even a response shorter
  // than kChecksumBytes must have been written to pass.
  const std::uint64_t wrong = ~expected_checksum_;
  std::memcpy(r.resp.data(), &wrong, std::min(kChecksumBytes, r.resp.max_size()));
}

void ClosedLoop::record_error(std::string what) {
  if (first_error_.empty()) first_error_ = std::move(what);
  bump(counters_.errors);
}

bool ClosedLoop::finish(std::chrono::steady_clock::duration timeout) {
  stopping_ = true;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (outstanding_ != 0 && std::chrono::steady_clock::now() < deadline) {
    rpc_.run_event_loop_once();
  }
  finished_ = true;
  if (outstanding_ == 0) return true;
  // The server stopped answering: take the buffers back from the Rpc.
  for (const ClientSession& s : sessions_) (void)rpc_.destroy_session(s.num);
  return false;
}

}  // namespace bench
