// Mailbox (common/mailbox.h): the queue between the Nexus's threads and an
// Rpc's thread.
#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "common/mailbox.h"

using rpc::detail::Mailbox;

TEST_CASE("a mailbox hands over everything posted, in order, once") {
  Mailbox<int> box;
  CHECK_FALSE(box.pending());
  for (int i = 0; i < 5; i++) CHECK(box.post(i));
  CHECK(box.pending());
  std::vector<int> got{42};  // emptied first
  box.take_all(got);
  CHECK(got == std::vector<int>{0, 1, 2, 3, 4});
  CHECK_FALSE(box.pending());
  box.take_all(got);
  CHECK(got.empty());
}

TEST_CASE("a mailbox caps limited items until they are taken, and never refuses the others") {
  Mailbox<int> box;
  CHECK(box.post(1, true, 2));
  CHECK(box.post(2, true, 2));
  CHECK_FALSE(box.post(3, true, 2));  // two limited items wait already
  CHECK(box.post(4));                 // unlimited: always taken
  std::vector<int> got;
  box.take_all(got);
  CHECK(got == std::vector<int>{1, 2, 4});
  CHECK(box.post(5, true, 2));  // the count starts over once taken
}

TEST_CASE("a mailbox loses nothing between posting threads and its owner") {
  Mailbox<int> box;
  constexpr int kPerThread = 20000;
  std::vector<std::thread> posters;
  for (int t = 0; t < 3; t++) {
    posters.emplace_back([&box, t] {
      for (int i = 0; i < kPerThread; i++) box.post(t * kPerThread + i);
    });
  }
  std::vector<int> got;
  std::vector<int> all;
  std::vector<int> last(3, -1);  // per poster, items arrive in the order posted
  while (all.size() < 3 * kPerThread) {
    if (!box.pending()) continue;
    box.take_all(got);
    for (int v : got) {
      const int t = v / kPerThread;
      CHECK(v > last[t]);
      last[t] = v;
      all.push_back(v);
    }
  }
  for (auto& p : posters) p.join();
  CHECK(all.size() == 3 * kPerThread);
}
