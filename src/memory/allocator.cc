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

// Without reserved hugepages, normal pages aligned to 2 MiB and marked for
// transparent hugepages where the kernel has them (mode "madvise" is the
// common default): fewer TLB misses, and the kernel's page walk for
// one-copy transfers (samehost's process_vm_readv) runs about 2.5x faster
// over them. MAP_FAILED when there is no memory.
void* map_for_transparent_hugepages(size_t len) {
  const int prot = PROT_READ | PROT_WRITE;
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS;
  void* raw = mmap(nullptr, len + kHugepageBytes, prot, flags, -1, 0);
  if (raw == MAP_FAILED) return MAP_FAILED;
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugepageBytes - 1) & ~(uintptr_t{kHugepageBytes} - 1);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = start + len + kHugepageBytes;
  if (end > aligned + len) munmap(reinterpret_cast<void*>(aligned + len), end - (aligned + len));
  void* base = reinterpret_cast<void*>(aligned);
  (void)madvise(base, len, MADV_HUGEPAGE);  // advice: harmless where THP is off
  return base;
}
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

// Blocks of these classes get a region each, given back when freed (beyond
// the large-region cache).
constexpr bool has_own_region(uint32_t size_class) {
  return class_bytes(size_class) > Allocator::kChunkBytes;
}

}  // namespace

const char* to_string(AllocFailure failure) {
  switch (failure) {
    case AllocFailure::kNone:
      return "none";
    case AllocFailure::kTooLarge:
      return "larger than the largest buffer";
    case AllocFailure::kOutOfMemory:
      return "out of memory";
    case AllocFailure::kRegistrationFailed:
      return "the transport refused to register the memory";
    case AllocFailure::kOverLimit:
      return "over the limit on message-buffer memory";
  }
  return "unknown";
}

size_t Allocator::footprint_bytes(size_t len) {
  const size_t block_bytes = class_bytes(class_of(len));
  return has_own_region(class_of(len)) ? round_up(block_bytes, kHugepageBytes) : block_bytes;
}

Allocator::Allocator(RegisterFn reg, DeregisterFn dereg, bool thread_safe, size_t large_cache_bytes,
                     size_t limit_bytes)
    : register_fn_(std::move(reg)),
      deregister_fn_(std::move(dereg)),
      thread_safe_(thread_safe),
      free_lists_(kNumClasses),
      carved_(kNumClasses, 0),
      limit_bytes_(limit_bytes),
      large_cache_limit_bytes_(large_cache_bytes) {}

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
  auto release = [&] {
    if (has_own_region(a.size_class)) {
      free_large(a.region);
      return;
    }
    // Never reallocates, so cannot throw: grow() keeps each free list's
    // capacity at least the number of blocks ever carved for its class.
    free_lists_[a.size_class].emplace_back(a.buf, a.region);
  };
  if (thread_safe_) {
    std::lock_guard<std::mutex> lock(mutex_);
    release();
  } else {
    release();
  }
}

Allocation Allocator::fail(AllocFailure why) noexcept {
  last_failure_.store(why, std::memory_order_relaxed);
  alloc_failures_.fetch_add(1, std::memory_order_relaxed);
  if (why == AllocFailure::kOverLimit) limit_failures_.fetch_add(1, std::memory_order_relaxed);
  return {};
}

Allocation Allocator::alloc_locked(size_t len) noexcept {
  const uint32_t size_class = class_of(len);
  if (size_class >= kNumClasses) return fail(AllocFailure::kTooLarge);
  if (has_own_region(size_class)) return alloc_large(size_class);
  auto& free_list = free_lists_[size_class];
  if (free_list.empty() && !grow(size_class)) return {};  // grow() recorded why
  const auto [buf, region] = free_list.back();
  free_list.pop_back();
  return {buf, class_bytes(size_class), region, size_class};
}

Allocation Allocator::alloc_large(uint32_t size_class) noexcept {
  // A region of its own, given back on free: a peer that made us receive
  // many large messages once must not keep that memory reserved forever.
  const size_t block_bytes = class_bytes(size_class);
  const size_t region_bytes = round_up(block_bytes, kHugepageBytes);
  // Newest first: the region most likely still in the caches and the TLB.
  for (size_t i = large_cache_.size(); i-- > 0;) {
    MemRegion* cached = large_cache_[i];
    if (cached->len != region_bytes) continue;
    large_cache_.erase(large_cache_.begin() + static_cast<ptrdiff_t>(i));
    large_cache_bytes_ -= cached->len;
    return {cached->base, block_bytes, cached, size_class};
  }
  MemRegion* region = map_region(region_bytes);
  if (region == nullptr) return {};  // map_region() recorded why
  return {region->base, block_bytes, region, size_class};
}

void Allocator::free_large(MemRegion* region) noexcept {
  // Regions of other sizes make way, oldest first: what is freed now is
  // what is in use now. Without that, an application that moved from 4 MiB
  // to 8 MiB messages kept the cache full of 4 MiB regions and mapped,
  // registered and faulted in every 8 MiB buffer afresh (8 MiB requests
  // over udp ran at half the goodput after a size sweep).
  for (size_t i = 0; i < large_cache_.size() &&
                     large_cache_bytes_ + region->len > large_cache_limit_bytes_ &&
                     region->len <= large_cache_limit_bytes_;) {
    MemRegion* stale = large_cache_[i];
    if (stale->len == region->len) {
      i++;
      continue;
    }
    large_cache_.erase(large_cache_.begin() + static_cast<ptrdiff_t>(i));
    large_cache_bytes_ -= stale->len;
    unmap_region(stale);
  }
  if (large_cache_bytes_ + region->len <= large_cache_limit_bytes_) {
    try {
      large_cache_.push_back(region);
      large_cache_bytes_ += region->len;
      return;
    } catch (const std::bad_alloc&) {
      // not cached: given back below
    }
  }
  unmap_region(region);
}

bool Allocator::grow(uint32_t size_class) noexcept {
  const size_t block_bytes = class_bytes(size_class);
  // Small blocks share a chunk so that one registration covers thousands of
  // them.
  const size_t num_blocks = kChunkBytes / block_bytes;

  auto& free_list = free_lists_[size_class];
  const size_t needed = carved_[size_class] + num_blocks;
  try {
    // Reserved before mapping so nothing can fail once the region exists,
    // and so free() never has to reallocate. Geometric in what is needed,
    // not in the old capacity (doubling that on every grow asked for 32 GB
    // after 31 grows), so the list stays within 1.5x its blocks.
    if (free_list.capacity() < needed) {
      free_list.reserve(std::max(needed, free_list.capacity() + free_list.capacity() / 2));
    }
  } catch (const std::bad_alloc&) {
    fail(AllocFailure::kOutOfMemory);
    return false;
  }

  MemRegion* region = map_region(kChunkBytes);
  if (region == nullptr) return false;
  carved_[size_class] = needed;
  // Pushed from the end so that alloc() hands the chunk out front to back.
  for (size_t i = num_blocks; i-- > 0;) {
    free_list.emplace_back(region->base + i * block_bytes, region);
  }
  return true;
}

// Whether a region of len bytes fits within the limit, once cached large
// regions (unused) are given back, oldest first, to make room.
bool Allocator::make_room(size_t len) noexcept {
  while (len > limit_bytes_ - std::min(bytes_reserved(), limit_bytes_)) {
    if (large_cache_.empty()) return false;
    MemRegion* oldest = large_cache_.front();
    large_cache_.erase(large_cache_.begin());
    large_cache_bytes_ -= oldest->len;
    unmap_region(oldest);
  }
  return true;
}

MemRegion* Allocator::map_region(size_t len) noexcept {
  if (!make_room(len)) {
    fail(AllocFailure::kOverLimit);
    return nullptr;
  }
  try {
    if (regions_.size() == regions_.capacity()) {
      regions_.reserve(std::max<size_t>(16, 2 * regions_.capacity()));
    }
  } catch (const std::bad_alloc&) {
    fail(AllocFailure::kOutOfMemory);
    return nullptr;
  }
  std::unique_ptr<MemRegion> region(new (std::nothrow) MemRegion());
  if (region == nullptr) {
    fail(AllocFailure::kOutOfMemory);
    return nullptr;
  }

  // Hugepages cut TLB (and NIC translation) misses, but most machines
  // reserve none, so a failure here is normal and not worth reporting.
  const int prot = PROT_READ | PROT_WRITE;
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS;
  void* base = mmap(nullptr, len, prot, flags | MAP_HUGETLB, -1, 0);
  if (base == MAP_FAILED) base = map_for_transparent_hugepages(len);
  if (base == MAP_FAILED) {
    fail(AllocFailure::kOutOfMemory);
    return nullptr;
  }

  Result<MemReg> reg = register_fn_(base, len);
  if (!reg) {
    munmap(base, len);
    fail(AllocFailure::kRegistrationFailed);
    return nullptr;
  }
  region->base = static_cast<uint8_t*>(base);
  region->len = len;
  region->reg = *reg;
  region->index = regions_.size();
  regions_.push_back(region.get());  // capacity reserved above
  bytes_reserved_ += len;
  return region.release();
}

void Allocator::unmap_region(MemRegion* region) noexcept {
  // Swap with the last so removal is O(1) whatever the number of regions.
  MemRegion* last = regions_.back();
  regions_[region->index] = last;
  last->index = region->index;
  regions_.pop_back();
  bytes_reserved_ -= region->len;
  deregister_fn_(region->reg);
  munmap(region->base, region->len);
  delete region;
}

}  // namespace rpc::detail
