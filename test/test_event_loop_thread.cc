// EventLoopThread (librpc/event_loop_thread.h): work submitted from many
// threads runs once each, on the loop's thread; requests sent from it
// complete there; stop() runs what was accepted and refuses the rest.
// Run under TSan in CI (the integration suite).
#include <atomic>
#include <catch2/catch.hpp>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#include "librpc/rpc_all.h"
#include "test_util.h"

using namespace rpc;
using namespace rpc::test;
using namespace std::chrono_literals;

namespace {

TEST_CASE("work submitted from many threads runs once each, on the loop's thread") {
  Nexus nexus{NexusConfig{.uri = "127.0.0.1:0"}};
  EventLoopThread loop(nexus, RpcConfig{.rpc_id = 1});
  std::thread::id loop_thread;
  REQUIRE(loop.run_and_wait([&](Rpc&) { loop_thread = std::this_thread::get_id(); }));
  CHECK(loop_thread != std::this_thread::get_id());

  constexpr int kThreads = 8;
  constexpr int kPerThread = 2000;
  uint64_t sum = 0;  // touched by the loop's thread only
  std::atomic<int> wrong_thread{0};
  std::atomic<int> refused{0};
  std::vector<std::thread> submitters;
  for (int t = 0; t < kThreads; t++) {
    submitters.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; i++) {
        // (Catch's assertions are not for other threads: count instead.)
        if (!loop.submit([&, value = t * kPerThread + i](Rpc&) {
              sum += static_cast<uint64_t>(value);
              if (std::this_thread::get_id() != loop_thread) wrong_thread++;
            })) {
          refused++;
        }
      }
    });
  }
  for (auto& th : submitters) th.join();
  uint64_t seen = 0;
  REQUIRE(loop.run_and_wait([&](Rpc&) { seen = sum; }));
  const uint64_t n = kThreads * kPerThread;
  CHECK(seen == n * (n - 1) / 2);
  CHECK(wrong_thread == 0);
  CHECK(refused == 0);
}

TEST_CASE("requests sent from submitted work complete on the loop's thread") {
  Nexus nexus{NexusConfig{.uri = "127.0.0.1:0"}};
  REQUIRE(nexus.register_handler(kEcho, echo_into_response));
  EventLoopThread server(nexus, RpcConfig{.rpc_id = 1});
  EventLoopThread client(nexus, RpcConfig{.rpc_id = 2});
  SessionNum sn = kInvalidSessionNum;
  REQUIRE(client.run_and_wait([&](Rpc& rpc) {
    auto s = rpc.connect(nexus.uri(), 1, 5000ms);
    if (s) sn = *s;
  }));
  REQUIRE(sn != kInvalidSessionNum);
  // Several application threads each ask for one echo and wait for it.
  std::vector<std::thread> callers;
  std::atomic<int> good{0};
  for (int t = 0; t < 4; t++) {
    callers.emplace_back([&, t] {
      std::promise<bool> answered;
      auto result = answered.get_future();
      const bool queued = client.submit([&, t](Rpc& rpc) {
        MsgBuffer req = rpc.alloc_msg_buffer(100);
        fill_pattern(req, static_cast<uint64_t>(t));
        // The buffers live until the continuation: kept in a heap block it frees.
        struct Bufs {
          MsgBuffer req, resp;
        };
        auto* bufs = new Bufs{req, rpc.alloc_msg_buffer(100)};
        const Errc e = rpc.enqueue_request(
            sn, kEcho, bufs->req, bufs->resp, [&answered, bufs, t](Rpc& r, const Completion& c) {
              answered.set_value(c.errc == Errc::kOk &&
                                 check_pattern(bufs->resp, 100, static_cast<uint64_t>(t)));
              r.free_msg_buffer(bufs->req);
              r.free_msg_buffer(bufs->resp);
              delete bufs;
            });
        if (e != Errc::kOk) answered.set_value(false);
      });
      if (queued && result.get()) good++;
    });
  }
  for (auto& th : callers) th.join();
  CHECK(good == 4);
}

TEST_CASE("stop runs the work already accepted, then refuses more") {
  Nexus nexus{NexusConfig{.uri = "127.0.0.1:0"}};
  auto loop = std::make_unique<EventLoopThread>(nexus, RpcConfig{.rpc_id = 1});
  std::atomic<int> ran{0};
  for (int i = 0; i < 100; i++) REQUIRE(loop->submit([&](Rpc&) { ran++; }));
  loop->stop();
  CHECK(ran == 100);
  CHECK_FALSE(loop->submit([&](Rpc&) { ran++; }));
  CHECK_FALSE(loop->run_and_wait([&](Rpc&) { ran++; }));
  loop->stop();  // idempotent
  CHECK(ran == 100);
}

TEST_CASE("submitted work that throws is counted, and the loop carries on") {
  Nexus nexus{NexusConfig{.uri = "127.0.0.1:0"}};
  EventLoopThread loop(nexus, RpcConfig{.rpc_id = 1});
  REQUIRE(loop.submit([](Rpc&) { throw std::runtime_error("work failed"); }));
  int after = 0;
  REQUIRE(loop.run_and_wait([&](Rpc&) { after = 1; }));
  CHECK(after == 1);
  CHECK(loop.work_exceptions() == 1);
}

TEST_CASE("an EventLoopThread whose Rpc cannot be created throws from its constructor") {
  Nexus nexus{NexusConfig{.uri = "127.0.0.1:0"}};
  EventLoopThread first(nexus, RpcConfig{.rpc_id = 1});
  CHECK_THROWS_AS(EventLoopThread(nexus, RpcConfig{.rpc_id = 1}), Error);
}

}  // namespace
