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
  // Whether the calling thread is one of this pool's (the Rpc checks that
  // alloc_msg_buffer and the like come from its own thread or from these).
  bool on_own_thread() const { return current_pool_ == this; }

 private:
  void run();

  static thread_local const BgThreads* current_pool_;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<BgWork> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace rpc::detail
