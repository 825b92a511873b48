#include "memory/allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <memory>
#include <new>

namespace rpc::detail {
namespace {

constexpr size_t kHugepageBytes = 2u << 20;

static_assert(Allocator::kChunkBytes % kHugepageBytes == 0,
              "chunks must be whole hugepages for MAP_HUGETLB");
static_assert(std::has_single_bit(Allocator::kMinClassBytes) && Allocator::kMinClassBytes >= 64,
              "every block must stay 64-byte aligned");
static_assert((Allocator::kMinClassBytes << (Allocator::kNumClasses - 1)) != 0,
              "the largest class must fit in size_t");

constexpr size_t class_bytes(uint32_t size_class) {
  return Allocator::kMinClassBytes << size_class;
}

// Smallest class whose blocks hold len bytes; kNumClasses when none does.
uint32_t class_of(size_t len) {
  const size_t units = (std::max<size_t>(len, 1) - 1) / Allocator::kMinClassBytes;
  const auto size_class = static_cast<uint32_t>(std::bit_width(units));
  return std::min<uint32_t>(size_class, Allocator::kNumClasses);
}

size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

}  // namespace

Allocator::Allocator(RegisterFn reg, DeregisterFn dereg, bool thread_safe)
    : register_fn_(std::move(reg)),
      deregister_fn_(std::move(dereg)),
      thread_safe_(thread_safe),
      free_lists_(kNumClasses) {}

Allocator::~Allocator() {
  for (MemRegion* region : regions_) {
    deregister_fn_(region->reg);
    munmap(region->base, region->len);
    delete region;
  }
}

Allocation Allocator::alloc(size_t len) noexcept {
  if (!thread_safe_) return alloc_locked(len);
  std::lock_guard<std::mutex> lock(mutex_);
  return alloc_locked(len);
}

void Allocator::free(const Allocation& a) noexcept {
  if (a.buf == nullptr) return;
  // Never reallocates, so cannot throw: grow() keeps each free list's
  // capacity at least the number of blocks ever carved for its class.
  auto push = [&] { free_lists_[a.size_class].emplace_back(a.buf, a.region); };
  if (thread_safe_) {
    std::lock_guard<std::mutex> lock(mutex_);
    push();
  } else {
    push();
  }
}

Allocation Allocator::alloc_locked(size_t len) noexcept {
  const uint32_t size_class = class_of(len);
  if (size_class >= kNumClasses) return {};
  auto& free_list = free_lists_[size_class];
  if (free_list.empty() && !grow(size_class)) return {};
  const auto [buf, region] = free_list.back();
  free_list.pop_back();
  return {buf, class_bytes(size_class), region, size_class};
}

bool Allocator::grow(uint32_t size_class) noexcept {
  const size_t block_bytes = class_bytes(size_class);
  // Small blocks share a chunk so that one registration covers thousands of
  // them; a large block gets a region of its own.
  const size_t region_bytes =
      block_bytes <= kChunkBytes ? kChunkBytes : round_up(block_bytes, kHugepageBytes);
  const size_t num_blocks = region_bytes / block_bytes;

  auto& free_list = free_lists_[size_class];
  try {
    // Reserved before mapping so nothing can fail once the region exists,
    // and so free() never has to reallocate. Doubling keeps it amortised.
    free_list.reserve(std::max(free_list.capacity() + num_blocks, 2 * free_list.capacity()));
  } catch (const std::bad_alloc&) {
    return false;
  }

  MemRegion* region = map_region(region_bytes);
  if (region == nullptr) return false;
  // Pushed from the end so that alloc() hands the chunk out front to back.
  for (size_t i = num_blocks; i-- > 0;) {
    free_list.emplace_back(region->base + i * block_bytes, region);
  }
  return true;
}

MemRegion* Allocator::map_region(size_t len) noexcept {
  try {
    if (regions_.size() == regions_.capacity()) {
      regions_.reserve(std::max<size_t>(16, 2 * regions_.capacity()));
    }
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
  std::unique_ptr<MemRegion> region(new (std::nothrow) MemRegion());
  if (region == nullptr) return nullptr;

  // Hugepages cut TLB (and NIC translation) misses, but most machines
  // reserve none, so a failure here is normal and not worth reporting.
  const int prot = PROT_READ | PROT_WRITE;
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS;
  void* base = mmap(nullptr, len, prot, flags | MAP_HUGETLB, -1, 0);
  region->hugepage = base != MAP_FAILED;
  if (base == MAP_FAILED) base = mmap(nullptr, len, prot, flags, -1, 0);
  if (base == MAP_FAILED) return nullptr;

  Result<MemReg> reg = register_fn_(base, len);
  if (!reg) {
    munmap(base, len);
    return nullptr;
  }
  region->base = static_cast<uint8_t*>(base);
  region->len = len;
  region->reg = *reg;
  regions_.push_back(region.get());  // capacity reserved above
  bytes_reserved_ += len;
  return region.release();
}

}  // namespace rpc::detail
