// Background handler threads: run HandlerMode::kBackground handlers, which
// may block, off the Rpc threads.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "nexus/nexus_impl.h"

namespace rpc::detail {

class BgThreads {
 public:
  explicit BgThreads(size_t num_threads);
  ~BgThreads();  // finishes queued work, then joins

  void submit(const BgWork& work);

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<BgWork> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace rpc::detail
