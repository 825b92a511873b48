// Allocator: size classes, chunk carving, registration and thread safety.
#include "memory/allocator.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

using rpc::Failure;
using rpc::Result;
using rpc::detail::Allocation;
using rpc::detail::Allocator;
using rpc::detail::MemReg;

namespace {

constexpr size_t kMiB = size_t{1} << 20;

struct Registration {
  void* base;
  size_t len;
  uint32_t lkey;
};

// Stands in for a transport: hands out increasing lkeys and records every
// registration and deregistration.
struct FakeRegistrar {
  std::vector<Registration> registered;
  std::vector<uint32_t> deregistered;
  bool fail = false;

  std::unique_ptr<Allocator> make_allocator(bool thread_safe = false, size_t large_cache_bytes = 0,
                                            size_t limit_bytes = SIZE_MAX) {
    auto reg = [this](void* base, size_t len) -> Result<MemReg> {
      if (fail) return Failure{"registration refused"};
      const auto lkey = static_cast<uint32_t>(registered.size() + 1);
      registered.push_back({base, len, lkey});
      return MemReg{lkey, nullptr};
    };
    auto dereg = [this](const MemReg& r) { deregistered.push_back(r.lkey); };
    return std::make_unique<Allocator>(reg, dereg, thread_safe, large_cache_bytes, limit_bytes);
  }
};

bool aligned_64(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

bool inside_region(const Allocation& a) {
  return a.region != nullptr && a.buf >= a.region->base &&
         a.buf + a.len <= a.region->base + a.region->len;
}

}  // namespace

TEST_CASE("alloc rounds up to the smallest size class that fits", "[allocator]") {
  FakeRegistrar registrar;
  auto allocator = registrar.make_allocator();

  struct Case {
    size_t request;
    size_t block;
    uint32_t size_class;
  };
  const Case cases[] = {
      {0, 64, 0},  // treated as 1 byte
      {1, 64, 0},
      {64, 64, 0},
      {65, 128, 1},
      {128, 128, 1},
      {129, 256, 2},
      {2 * kMiB, 2 * kMiB, 15},
      {2 * kMiB + 1, 4 * kMiB, 16},
  };
  for (const Case& c : cases) {
    INFO("request " << c.request);
    const Allocation a = allocator->alloc(c.request);
    REQUIRE(a.buf != nullptr);
    CHECK(a.len == c.block);
    CHECK(a.size_class == c.size_class);
    CHECK(inside_region(a));
  }
}

TEST_CASE("a request beyond the largest size class fails without mapping anything", "[allocator]") {
  FakeRegistrar registrar;
  auto allocator = registrar.make_allocator();
  const size_t largest = Allocator::kMinClassBytes << (Allocator::kNumClasses - 1);

  const Allocation a = allocator->alloc(largest + 1);

  CHECK(a.buf == nullptr);
  CHECK(a.region == nullptr);
  CHECK(allocator->num_regions() == 0);
  CHECK(registrar.registered.empty());
}

TEST_CASE("every allocation is 64-byte aligned", "[allocator]") {
  FakeRegistrar registrar;
  auto allocator = registrar.make_allocator();
  for (size_t len : {1, 7, 63, 64, 65, 100, 1000, 4097, 65536, 300000}) {
    for (int i = 0; i < 5; i++) {
      const Allocation a = allocator->alloc(len);
      REQUIRE(a.buf != nullptr);
      CHECK(aligned_64(a.buf));
    }
  }
}

TEST_CASE("blocks of a size class are reused after free", "[allocator]") {
  FakeRegistrar registrar;
  auto allocator = registrar.make_allocator();
  const Allocation first = allocator->alloc(1000);
  REQUIRE(first.buf != nullptr);
  const size_t regions = allocator->num_regions();

  allocator->free(first);
  const Allocation again = allocator->alloc(1024);  // same class as 1000

  CHECK(again.buf == first.buf);
  CHECK(again.region == first.region);
  CHECK(again.size_class == first.size_class);
  CHECK(allocator->num_regions() == regions);
}

TEST_CASE("freeing an empty allocation is a no-op", "[allocator]") {
  FakeRegistrar registrar;
  auto allocator = registrar.make_allocator();
  allocator->free(Allocation{});
  CHECK(allocator->num_regions() == 0);
}

TEST_CASE("a large allocation gets its own registered region", "[allocator]") {
  FakeRegistrar registrar;
  auto allocator = registrar.make_allocator();
  const Allocation small = allocator->alloc(64);
  REQUIRE(small.buf != nullptr);

  const Allocation large = allocator->alloc(9 * kMiB);

  REQUIRE(large.buf != nullptr);
  CHECK(large.len == 16 * kMiB);
  CHECK(aligned_64(large.buf));
  CHECK(allocator->num_regions() == 2);
  REQUIRE(large.region != nullptr);
  CHECK(large.region != small.region);
  CHECK(large.region->base == large.buf);
  CHECK(large.region->len == 16 * kMiB);
  REQUIRE(registrar.registered.size() == 2);
  CHECK(registrar.registered[1].base == large.buf);
  CHECK(registrar.registered[1].len == 16 * kMiB);
  CHECK(large.region->reg.lkey == registrar.registered[1].lkey);
  CHECK(allocator->bytes_reserved() == Allocator::kChunkBytes + 16 * kMiB);

  SECTION("and the region is deregistered and unmapped when the block is freed") {
    const uint32_t large_lkey = large.region->reg.lkey;
    allocator->free(large);
    CHECK(allocator->num_regions() == 1);
    CHECK(allocator->bytes_reserved() == Allocator::kChunkBytes);
    CHECK(registrar.deregistered == std::vector<uint32_t>{large_lkey});
    // and a new large block gets a fresh region
    const Allocation again = allocator->alloc(10 * kMiB);
    REQUIRE(again.buf != nullptr);
    CHECK(allocator->num_regions() == 2);
    CHECK(registrar.registered.size() == 3);
  }
}

TEST_CASE("hundreds of chunk-sized buffers can be allocated", "[allocator]") {
  // A 1 MiB MsgBuffer needs a little more than 1 MiB (packet headers), so
  // it takes a 2 MiB block: one block per chunk, one grow per allocation.
  FakeRegistrar registrar;
  auto allocator = registrar.make_allocator();
  std::vector<Allocation> blocks;
  for (size_t i = 0; i < 200; i++) {
    const Allocation a = allocator->alloc(kMiB + 4096);
    INFO("allocation " << i);
    REQUIRE(a.buf != nullptr);
    blocks.push_back(a);
  }
  CHECK(allocator->num_regions() == 200);
  CHECK(allocator->alloc_failures() == 0);
  CHECK(allocator->last_failure() == rpc::detail::AllocFailure::kNone);
  // Freed, they stay on the free list (chunk-sized blocks are small ones)
  for (const Allocation& a : blocks) allocator->free(a);
  CHECK(allocator->num_regions() == 200);
  for (size_t i = 0; i < 200; i++) CHECK(allocator->alloc(kMiB + 4096).buf != nullptr);
  CHECK(allocator->num_regions() == 200);
}

TEST_CASE("thousands of 100 KiB buffers can be allocated", "[allocator]") {
  FakeRegistrar registrar;
  auto allocator = registrar.make_allocator();
  for (size_t i = 0; i < 2000; i++) {
    const Allocation a = allocator->alloc(100 * 1024 + 512);
    INFO("allocation " << i);
    REQUIRE(a.buf != nullptr);
    CHECK(a.len == 128 * 1024);
  }
  // 16 blocks of 128 KiB per 2 MiB chunk
  CHECK(allocator->num_regions() == 125);
  CHECK(allocator->alloc_failures() == 0);
}

TEST_CASE("large blocks are given back to the system when freed", "[allocator]") {
  // Given the memory a peer made us reserve with 32 requests of 16 MiB
  FakeRegistrar registrar;
  auto allocator = registrar.make_allocator();
  const Allocation small = allocator->alloc(64);
  REQUIRE(small.buf != nullptr);
  std::vector<Allocation> large;
  for (int i = 0; i < 32; i++) {
    large.push_back(allocator->alloc(16 * kMiB));
    REQUIRE(large.back().buf != nullptr);
    std::memset(large.back().buf, i, 4096);  // the memory is really there
  }
  CHECK(allocator->num_regions() == 33);
  CHECK(allocator->bytes_reserved() == Allocator::kChunkBytes + 32 * 16 * kMiB);

  // When they are freed, in any order
  for (size_t i = 0; i < large.size(); i += 2) allocator->free(large[i]);
  for (size_t i = 1; i < large.size(); i += 2) allocator->free(large[i]);

  // Expect every large region deregistered and unmapped, the small one kept
  CHECK(allocator->num_regions() == 1);
  CHECK(allocator->bytes_reserved() == Allocator::kChunkBytes);
  CHECK(registrar.deregistered.size() == 32);
  std::memset(small.buf, 1, small.len);
  allocator->free(small);
  CHECK(allocator->num_regions() == 1);
  CHECK(registrar.deregistered.size() == 32);
  // and the allocator still hands out both kinds
  const Allocation again = allocator->alloc(3 * kMiB);
  REQUIRE(again.buf != nullptr);
  std::memset(again.buf, 2, again.len);
  allocator->free(again);
  CHECK(allocator->num_regions() == 1);
}

TEST_CASE("freed large regions are kept for reuse up to the cache budget, the rest given back",
          "[allocator]") {
  FakeRegistrar registrar;
  auto allocator = registrar.make_allocator(/*thread_safe=*/false, /*large_cache_bytes=*/32 * kMiB);
  // Given four 16 MiB blocks, freed
  std::vector<Allocation> large;
  for (int i = 0; i < 4; i++) large.push_back(allocator->alloc(16 * kMiB));
  for (const Allocation& a : large) REQUIRE(a.buf != nullptr);
  for (const Allocation& a : large) allocator->free(a);
  // Expect two kept (32 MiB), two deregistered and unmapped
  CHECK(allocator->num_regions() == 2);
  CHECK(allocator->bytes_reserved() == 32 * kMiB);
  CHECK(registrar.deregistered.size() == 2);
  // and the kept ones reused, newest first, without a new registration
  const Allocation again = allocator->alloc(9 * kMiB);
  CHECK(again.buf == large[1].buf);
  CHECK(again.region == large[1].region);
  CHECK(registrar.registered.size() == 4);
  // while a block of another size maps a region of its own
  const Allocation other = allocator->alloc(4 * kMiB);
  REQUIRE(other.buf != nullptr);
  CHECK(registrar.registered.size() == 5);
  CHECK(allocator->num_regions() == 3);
}

TEST_CASE("a freed large region displaces cached regions of other sizes, oldest first",
          "[allocator]") {
  FakeRegistrar registrar;
  auto allocator = registrar.make_allocator(/*thread_safe=*/false, /*large_cache_bytes=*/32 * kMiB);
  // Given the cache full of 8 MiB regions (a phase of 4-8 MiB messages)
  std::vector<Allocation> small;
  for (int i = 0; i < 4; i++) small.push_back(allocator->alloc(5 * kMiB));
  for (const Allocation& a : small) REQUIRE(a.buf != nullptr);
  for (const Allocation& a : small) allocator->free(a);
  REQUIRE(allocator->bytes_reserved() == 32 * kMiB);
  // When 16 MiB regions are freed (the application moved to larger messages)
  const Allocation big1 = allocator->alloc(16 * kMiB);
  const Allocation big2 = allocator->alloc(16 * kMiB);
  REQUIRE(big1.buf != nullptr);
  REQUIRE(big2.buf != nullptr);
  allocator->free(big1);
  allocator->free(big2);
  // Expect the two oldest 8 MiB regions, then the other two, given back to
  // make room, and both 16 MiB regions kept
  CHECK(allocator->bytes_reserved() == 32 * kMiB);
  CHECK(registrar.deregistered.size() == 4);
  // and reused without a new registration
  const size_t registrations = registrar.registered.size();
  const Allocation again1 = allocator->alloc(16 * kMiB);
  const Allocation again2 = allocator->alloc(16 * kMiB);
  CHECK(registrar.registered.size() == registrations);
  CHECK(again1.region != again2.region);
  allocator->free(again1);
  allocator->free(again2);
}

TEST_CASE("an allocator maps no more than its limit, cached regions making way first",
          "[allocator]") {
  using rpc::detail::AllocFailure;
  FakeRegistrar registrar;
  auto allocator = registrar.make_allocator(/*thread_safe=*/false, /*large_cache_bytes=*/8 * kMiB,
                                            /*limit_bytes=*/16 * kMiB);
  // Given two 8 MiB blocks, a region each: the limit
  const Allocation a = allocator->alloc(8 * kMiB);
  const Allocation b = allocator->alloc(8 * kMiB);
  REQUIRE(a.buf != nullptr);
  REQUIRE(b.buf != nullptr);
  REQUIRE(allocator->bytes_reserved() == 16 * kMiB);
  // Expect a block that needs another region (even a chunk) refused, saying why
  CHECK(allocator->alloc(64).buf == nullptr);
  CHECK(allocator->last_failure() == AllocFailure::kOverLimit);
  CHECK(allocator->limit_failures() == 1);
  CHECK(allocator->alloc_failures() == 1);
  // When one is freed (kept mapped for reuse: the mapped bytes stay)
  allocator->free(a);
  CHECK(allocator->bytes_reserved() == 16 * kMiB);
  // Expect a block of another size to be served, the cached region given
  // back to make room for its chunk
  const Allocation c = allocator->alloc(64);
  REQUIRE(c.buf != nullptr);
  CHECK(registrar.deregistered.size() == 1);
  CHECK(allocator->bytes_reserved() == 8 * kMiB + Allocator::kChunkBytes);
  // and the chunk's other blocks handed out without mapping more
  const Allocation d = allocator->alloc(64);
  REQUIRE(d.buf != nullptr);
  CHECK(allocator->num_regions() == 2);
  CHECK(allocator->limit_failures() == 1);
  allocator->free(b);
  allocator->free(c);
  allocator->free(d);
}

TEST_CASE("an allocation failure says why it failed", "[allocator]") {
  using rpc::detail::AllocFailure;
  FakeRegistrar registrar;
  auto allocator = registrar.make_allocator();
  CHECK(allocator->last_failure() == AllocFailure::kNone);

  const size_t largest = Allocator::kMinClassBytes << (Allocator::kNumClasses - 1);
  CHECK(allocator->alloc(largest + 1).buf == nullptr);
  CHECK(allocator->last_failure() == AllocFailure::kTooLarge);
  CHECK(allocator->alloc_failures() == 1);

  registrar.fail = true;
  CHECK(allocator->alloc(64).buf == nullptr);
  CHECK(allocator->last_failure() == AllocFailure::kRegistrationFailed);
  CHECK(allocator->alloc(9 * kMiB).buf == nullptr);
  CHECK(allocator->last_failure() == AllocFailure::kRegistrationFailed);
  CHECK(allocator->alloc_failures() == 3);
  CHECK(std::string(allocator->last_failure_text()).find("register") != std::string::npos);

  // A success does not clear the record of the last failure
  registrar.fail = false;
  CHECK(allocator->alloc(64).buf != nullptr);
  CHECK(allocator->alloc_failures() == 3);
  CHECK(allocator->last_failure() == AllocFailure::kRegistrationFailed);
}

TEST_CASE("a thread-safe allocator hands out and gives back large blocks from two threads",
          "[allocator]") {
  FakeRegistrar registrar;
  auto allocator = registrar.make_allocator(/*thread_safe=*/true);
  std::atomic<size_t> failures{0};
  auto worker = [&] {
    for (int i = 0; i < 200; i++) {
      const Allocation a = allocator->alloc(3 * kMiB);
      if (a.buf == nullptr) {
        failures++;
        continue;
      }
      a.buf[0] = 1;
      allocator->free(a);
    }
  };
  std::thread t1(worker);
  std::thread t2(worker);
  t1.join();
  t2.join();
  CHECK(failures == 0);
  CHECK(allocator->num_regions() == 0);
  CHECK(allocator->bytes_reserved() == 0);
}

TEST_CASE("register_fn is called once per chunk, and every region is deregistered", "[allocator]") {
  FakeRegistrar registrar;
  auto allocator = registrar.make_allocator();
  const size_t blocks_per_chunk = Allocator::kChunkBytes / Allocator::kMinClassBytes;

  std::vector<Allocation> blocks;
  for (size_t i = 0; i < blocks_per_chunk; i++) blocks.push_back(allocator->alloc(64));

  // Given a full chunk of 64-byte blocks, all from one registration
  REQUIRE(registrar.registered.size() == 1);
  CHECK(allocator->num_regions() == 1);
  CHECK(allocator->bytes_reserved() == Allocator::kChunkBytes);
  const Registration chunk = registrar.registered[0];
  CHECK(chunk.len == Allocator::kChunkBytes);
  std::set<uint8_t*> distinct;
  for (const Allocation& a : blocks) {
    REQUIRE(a.buf != nullptr);
    CHECK(a.region == blocks[0].region);
    CHECK(a.region->reg.lkey == chunk.lkey);
    CHECK(inside_region(a));
    distinct.insert(a.buf);
  }
  CHECK(distinct.size() == blocks_per_chunk);
  CHECK(blocks[0].region->base == chunk.base);

  // Expect one more block to take a second chunk, and another class its own
  const Allocation next = allocator->alloc(64);
  REQUIRE(next.buf != nullptr);
  CHECK(next.region != blocks[0].region);
  const Allocation other_class = allocator->alloc(4096);
  REQUIRE(other_class.buf != nullptr);
  CHECK(registrar.registered.size() == 3);
  for (const Registration& r : registrar.registered) CHECK(r.len == Allocator::kChunkBytes);

  allocator.reset();
  std::multiset<uint32_t> expected;
  for (const Registration& r : registrar.registered) expected.insert(r.lkey);
  CHECK(std::multiset<uint32_t>(registrar.deregistered.begin(), registrar.deregistered.end()) ==
        expected);
}

TEST_CASE("registration failure returns an empty allocation", "[allocator]") {
  FakeRegistrar registrar;
  registrar.fail = true;
  auto allocator = registrar.make_allocator();

  for (size_t len : {size_t{64}, 9 * kMiB}) {
    const Allocation a = allocator->alloc(len);
    CHECK(a.buf == nullptr);
    CHECK(a.region == nullptr);
    CHECK(a.len == 0);
  }
  CHECK(allocator->num_regions() == 0);
  CHECK(allocator->bytes_reserved() == 0);

  SECTION("and the allocator recovers once registration works again") {
    registrar.fail = false;
    const Allocation a = allocator->alloc(64);
    CHECK(a.buf != nullptr);
    CHECK(allocator->num_regions() == 1);
  }
}

TEST_CASE("writes across a whole block do not corrupt its neighbours", "[allocator]") {
  FakeRegistrar registrar;
  auto allocator = registrar.make_allocator();
  std::vector<Allocation> blocks;
  const size_t sizes[] = {64, 100, 4096, 3000, 65, 1 << 20, 128};
  for (int round = 0; round < 40; round++) {
    for (size_t len : sizes) blocks.push_back(allocator->alloc(len));
  }

  for (size_t i = 0; i < blocks.size(); i++) {
    REQUIRE(blocks[i].buf != nullptr);
    std::memset(blocks[i].buf, static_cast<int>(i % 251) + 1, blocks[i].len);
  }

  for (size_t i = 0; i < blocks.size(); i++) {
    const auto expected = static_cast<uint8_t>(i % 251 + 1);
    const Allocation& a = blocks[i];
    size_t bad = 0;
    for (size_t j = 0; j < a.len; j++) bad += a.buf[j] != expected ? 1 : 0;
    INFO("block " << i << " of " << a.len << " bytes");
    CHECK(bad == 0);
  }
}

TEST_CASE("a thread-safe allocator can be used from two threads at once", "[allocator]") {
  FakeRegistrar registrar;
  auto allocator = registrar.make_allocator(/*thread_safe=*/true);
  std::atomic<size_t> failures{0};
  std::atomic<size_t> corruptions{0};

  // Each thread keeps a few blocks live, stamps them with its id and checks
  // the stamp before freeing: a block handed to both threads shows up.
  auto worker = [&](uint8_t id) {
    std::vector<Allocation> live;
    for (size_t i = 0; i < 20000; i++) {
      const size_t len = size_t{64} << (i % 7);
      const Allocation a = allocator->alloc(len);
      if (a.buf == nullptr) {
        failures++;
        continue;
      }
      std::memset(a.buf, id, a.len);
      live.push_back(a);
      if (live.size() > 8) {
        const Allocation old = live.front();
        live.erase(live.begin());
        if (old.buf[0] != id || old.buf[old.len - 1] != id) corruptions++;
        allocator->free(old);
      }
    }
    for (const Allocation& a : live) allocator->free(a);
  };
  std::thread t1(worker, uint8_t{1});
  std::thread t2(worker, uint8_t{2});
  t1.join();
  t2.join();

  CHECK(failures == 0);
  CHECK(corruptions == 0);
  // Everything was returned: the same blocks come back without growing.
  const size_t regions = allocator->num_regions();
  const Allocation a = allocator->alloc(64);
  CHECK(a.buf != nullptr);
  CHECK(allocator->num_regions() == regions);
}
