// Shared by the libFuzzer targets: the peak heap growth of a piece of code, from the sanitizer
// allocator's malloc/free hooks (live bytes and their high-water mark). Without a sanitizer
// allocator the hooks are absent and the growth reads 0.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

extern "C" {
// sanitizer/allocator_interface.h, declared weak so that a build without a sanitizer links.
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void*, size_t),
                                              void (*free_hook)(const volatile void*))
    __attribute__((weak));
size_t __sanitizer_get_allocated_size(const volatile void* p) __attribute__((weak));
}

namespace treeattn::fuzz {

// Atomic: libFuzzer's own threads allocate too (the measured code runs on the fuzz loop's).
inline std::atomic<int64_t> g_live{0};  // bytes allocated since track_heap(), less those freed
inline std::atomic<int64_t> g_peak{0};  // the most g_live has been since the last HeapPeak began

inline void on_malloc(const volatile void*, size_t n) {
  const int64_t live = g_live.fetch_add(static_cast<int64_t>(n)) + static_cast<int64_t>(n);
  if (live > g_peak.load(std::memory_order_relaxed)) g_peak.store(live);
}
inline void on_free(const volatile void* p) {
  if (p != nullptr) g_live.fetch_sub(static_cast<int64_t>(__sanitizer_get_allocated_size(p)));
}

/// Installs the hooks (once, from LLVMFuzzerInitialize).
inline void track_heap() {
  if (__sanitizer_install_malloc_and_free_hooks && __sanitizer_get_allocated_size)
    __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
}

/// Peak heap growth from construction to growth().
class HeapPeak {
 public:
  HeapPeak() : base_(g_live.load()) { g_peak.store(base_); }
  int64_t growth() const { return g_peak - base_; }

 private:
  int64_t base_;
};

}  // namespace treeattn::fuzz
