// torch's CPU tensors from malloc, aligned by hand, instead of posix_memalign (samplers/allocator.py).
//
// c10's default CPU allocator asks posix_memalign for 64-byte alignment. glibc (2.36, Debian 12)
// serves an aligned request from the arena, under its lock, never from the per-thread cache
// (tcache), so each of the ~28 small buffers a compiled HMC step allocates costs an arena round
// trip. Asking malloc for 64 bytes more and rounding the pointer up keeps tcache's fast path
// for the small sizes a step's buffers have. The pointer malloc returned
// is kept in the 8 bytes before the aligned one; data and context are the same pointer, as in
// c10's allocator, so raw_allocate / raw_deallocate and copy-on-write clones work unchanged.
// Large tensors keep c10's transparent-huge-page behaviour when THP_MEM_ALLOC_ENABLE is set:
// advised MADV_HUGEPAGE from 2 MB. With it set (as ``jobs`` sets it), tensors are page-aligned
// from 64 KB, not only from 2 MB as in c10: the Store writes a run's records to disk from where
// they lie only when they start on a page (O_DIRECT), and a block's divergence flags (1 MB at
// 4096 chains) or its thinned rows (~100-800 KB) were otherwise copied through a staging buffer
// (jobs/store.py). At most a page in 16 is spent on the alignment.

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>

namespace {

constexpr std::size_t kAlignment = 64;  // c10::gAlignment
constexpr std::size_t kHugeFrom = std::size_t{2} << 20;  // c10's gAlloc_threshold_thp
constexpr std::size_t kPageFrom = std::size_t{64} << 10;
bool huge_pages = false;

void release(void* data) {
  if (data != nullptr) {
    std::free(static_cast<void**>(data)[-1]);
  }
}

struct MallocAllocator final : c10::Allocator {
  c10::DataPtr allocate(std::size_t n) override {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (n == 0) {
      return {nullptr, nullptr, &release, cpu};
    }
    const bool huge = huge_pages && n >= kHugeFrom;
    const bool page = huge_pages && n >= kPageFrom;
    const std::size_t alignment = page ? static_cast<std::size_t>(sysconf(_SC_PAGESIZE)) : kAlignment;
    TORCH_CHECK_WITH(
        OutOfMemoryError, n <= SIZE_MAX - alignment, "DefaultCPUAllocator: not enough memory: you tried to allocate ",
        n, " bytes.");
    void* raw = std::malloc(n + alignment);  // malloc's 16-byte alignment leaves >= 16 bytes
    TORCH_CHECK_WITH(
        OutOfMemoryError, raw != nullptr, "DefaultCPUAllocator: not enough memory: you tried to allocate ",
        n, " bytes.");
    const auto address = (reinterpret_cast<std::uintptr_t>(raw) + alignment) & ~(alignment - 1);
    void* data = reinterpret_cast<void*>(address);
    static_cast<void**>(data)[-1] = raw;
    if (huge) {
      madvise(data, n, MADV_HUGEPAGE);  // advice only: a kernel without THP ignores it
    }
    return {data, data, &release, cpu};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &release;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

MallocAllocator malloc_allocator;
c10::Allocator* previous = nullptr;

}  // namespace

// Makes malloc_allocator torch's CPU allocator (on != 0) or restores the one before it; returns
// whether malloc_allocator is now the one in use. Tensors keep the deleter they were made with,
// so switching back and forth frees every tensor correctly.
extern "C" int basin_use_malloc(int on, int thp) {
  if (previous == nullptr) {
    previous = c10::GetCPUAllocator();
  }
  huge_pages = thp != 0;
  c10::SetCPUAllocator(on != 0 ? static_cast<c10::Allocator*>(&malloc_allocator) : previous, 1);
  return c10::GetCPUAllocator() == &malloc_allocator;
}

extern "C" int basin_malloc_active() {
  return c10::GetCPUAllocator() == &malloc_allocator;
}
