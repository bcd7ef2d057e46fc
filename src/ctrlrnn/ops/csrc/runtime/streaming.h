// ctrlrnn runtime, tuned: streaming (non-temporal) stores for the kernels' large outputs.
//
// An ordinary store to a line not in cache first reads the line (read-for-ownership), so writing
// N bytes moves 2N. A streaming store writes whole lines, skips that read and leaves the caches
// alone. It pays when the output would not be in cache for its reader anyway: when a kernel writes
// more than a fair share of the last-level cache. By default that share is a quarter of the
// cache, at most 4 MiB per thread. The per-thread bound is there because in a virtual machine
// sysfs reports the whole socket's cache, which other guests share. CTRLRNN_STREAMING_BYTES
// (handed in by configure) sets the threshold in bytes; negative means never stream.
// Under the plain runtime (mode.h) use_streaming_stores is false: ordinary stores only.

#pragma once

#include <ATen/Parallel.h>

#include "mode.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <fstream>
#include <limits>
#include <string>
#include <type_traits>

#include <unistd.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace ctrlrnn::runtime {

// The last-level cache of the cores this process runs on. sysfs first: on a CPU of several core
// complexes (an AMD EPYC) glibc's sysconf reports the sum over all of them, many times the cache
// one core can use, which is one complex's.
inline int64_t last_level_cache_bytes() {
  static const int64_t bytes = [] {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index3/size");
    std::string text;
    if (f >> text && !text.empty()) {
      int64_t scale = 1;
      const char unit = text.back();
      if (unit == 'K') scale = int64_t(1) << 10;
      if (unit == 'M') scale = int64_t(1) << 20;
      try {
        const int64_t v = std::stoll(scale == 1 ? text : text.substr(0, text.size() - 1));
        if (v > 0) return v * scale;
      } catch (...) {
      }
    }
#ifdef _SC_LEVEL3_CACHE_SIZE
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0) return int64_t(l3);
#endif
    return int64_t(32) << 20;
  }();
  return bytes;
}

// The most of the last-level cache one thread is taken to have to itself (see above).
constexpr int64_t kCachePerThread = int64_t(4) << 20;

// Stands for "not set": the threshold follows the cache and the thread count.
constexpr int64_t kThresholdAuto = std::numeric_limits<int64_t>::min();

// The threshold set by configure (CTRLRNN_STREAMING_BYTES) or set_streaming_threshold, or
// kThresholdAuto. One per process, shared by every extension.
inline std::atomic<int64_t>& streaming_threshold_ref() {
  static std::atomic<int64_t> threshold{kThresholdAuto};
  return threshold;
}

// Bytes written from which a kernel uses streaming stores; negative: never.
inline int64_t streaming_threshold() {
  const int64_t set = streaming_threshold_ref().load();
  if (set != kThresholdAuto) return set;
  const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
  return std::min(last_level_cache_bytes() / 4, kCachePerThread * threads);
}

inline void set_streaming_threshold(int64_t bytes) { streaming_threshold_ref().store(bytes); }

inline bool use_streaming_stores(int64_t bytes_written) {
#if defined(__AVX__)
  if (plain()) return false;
  const int64_t t = streaming_threshold();
  return t >= 0 && bytes_written >= t;
#else
  (void)bytes_written;
  return false;
#endif
}

// Orders this thread's streaming stores before what follows (they are weakly ordered).
inline void stream_fence(bool stream = true) {
#if defined(__AVX__)
  if (stream) _mm_sfence();
#else
  (void)stream;
#endif
}

// Elements to write one by one before `p` reaches a 32-byte boundary (n when it never does).
inline int64_t peel_to_32(const float* p, int64_t n) {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  if (addr % sizeof(float) != 0) return n;
  return std::min<int64_t>(n, int64_t((32 - addr % 32) % 32 / sizeof(float)));
}


// Writes n accumulation-type values to `dst` in its type: with STREAM, for float, by streaming
// stores from the first 32-byte boundary (the kernels that call it pass STREAM from
// use_streaming_stores, and end their work with stream_fence).
template <bool STREAM, typename scalar_t, typename acc_t>
inline void store_row(scalar_t* __restrict__ dst, const acc_t* __restrict__ src, int64_t n) {
  int64_t j = 0;
#if defined(__AVX__)
  if constexpr (STREAM && std::is_same_v<scalar_t, float> && std::is_same_v<acc_t, float>) {
    for (const int64_t head = peel_to_32(dst, n); j < head; ++j) dst[j] = src[j];
    for (; j + 8 <= n; j += 8) _mm256_stream_ps(dst + j, _mm256_loadu_ps(src + j));
  }
#endif
  for (; j < n; ++j) dst[j] = scalar_t(src[j]);
}

// dst[0:n] = src[0:n] converted to scalar_t; with `stream` (float only), by streaming stores
// (store_row with the choice made at run time).
template <typename scalar_t, typename acc_t>
inline void emit_row(scalar_t* __restrict__ dst, const acc_t* __restrict__ src, int64_t n,
                     bool stream) {
  if (stream) {
    store_row<true>(dst, src, n);
  } else {
    store_row<false>(dst, src, n);
  }
}

}  // namespace ctrlrnn::runtime
