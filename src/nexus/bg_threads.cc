#include "nexus/bg_threads.h"

#include "nexus/nexus_impl.h"
#include "nexus/rpc_endpoint.h"

namespace rpc::detail {

BgThreads::BgThreads(size_t num_threads) {
  for (size_t i = 0; i < num_threads; i++) threads_.emplace_back([this] { run(); });
}

BgThreads::~BgThreads() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void BgThreads::submit(const BgWork& work) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(work);
  }
  cv_.notify_one();
}

void BgThreads::run() {
  for (;;) {
    BgWork work;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      work = queue_.front();
      queue_.pop_front();
    }
    work.rpc->run_background_handler(*work.entry, *work.handle, work.run);
  }
}

}  // namespace rpc::detail
