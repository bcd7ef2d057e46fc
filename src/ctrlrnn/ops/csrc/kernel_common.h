// ctrlrnn: helpers shared by the elementwise-recurrence kernels (the linear scan, QRNN pooling,
// the RCRN listener, the convolution windows, the METAGROSS level).
// They cover work splitting, branch-free activations and streaming stores.
//
// Everything here is inline. The one piece of state, the streaming-store threshold, is a
// function-local static, so every extension of the process shares it (output_pool.h says how).

#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <c10/util/Optional.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <unistd.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace ctrlrnn::kernels {

// ----------------------------------------------------------------------------------------------
// Work splitting

// Work items per thread chunk hold at least this many elements (grain_for).
constexpr int64_t kMinElementsPerTask = 1 << 15;

// Channels per work item. Whole rows when the batch alone gives every thread several items
// (each thread then streams contiguous memory), or when the whole call is one task's work
// (B * C * per_channel elements at most kMinElementsPerTask, per_channel = the steps times the
// units each channel of a batch row carries; 0: not known): grain_for runs it on one thread,
// where whole rows make the fewest loop trips per step, and blocks would only add per-step
// overhead. Otherwise rows split into enough blocks of a multiple of 16 channels.
// An empty batch (B <= 0) has no work items; it gets whole rows too (and no division by B).
inline int64_t block_size(int64_t B, int64_t C, int64_t per_channel = 0) {
  const int64_t want = 4 * std::max<int64_t>(1, at::get_num_threads());
  if (B <= 0 || B >= want) return std::max<int64_t>(C, 1);
  if (per_channel > 0 && B * C * per_channel <= kMinElementsPerTask) {
    return std::max<int64_t>(C, 1);
  }
  const int64_t parts = (want + B - 1) / B;
  const int64_t blk = (C + parts - 1) / parts;
  return std::max<int64_t>(16, (blk + 15) / 16 * 16);
}

// Work items per thread chunk: small problems run on one thread (waking a second thread costs
// more than a few thousand elements of work, and much more on a loaded machine).
inline int64_t grain_for(int64_t T, int64_t elements_per_step) {
  return std::max<int64_t>(1, kMinElementsPerTask / std::max<int64_t>(1, T * elements_per_step));
}

inline int64_t length_of(const int64_t* lengths, int64_t b, int64_t T) {
  return lengths ? lengths[b] : T;
}

// The lengths of a batch of B sequences of T steps, checked (a contiguous int64 CPU tensor
// (B,) of values in [0, T]), or nullptr when absent (every sequence has T steps).
inline const int64_t* lengths_ptr(const c10::optional<at::Tensor>& lengths, int64_t B,
                                  int64_t T) {
  if (!lengths.has_value()) return nullptr;
  const auto& l = *lengths;
  TORCH_CHECK(l.dim() == 1 && l.size(0) == B && l.scalar_type() == at::kLong &&
                  l.is_contiguous() && l.device().is_cpu(),
              "lengths must be a contiguous int64 CPU tensor of shape (B,)");
  const int64_t* p = l.data_ptr<int64_t>();
  for (int64_t i = 0; i < B; ++i) {
    TORCH_CHECK(p[i] >= 0 && p[i] <= T, "lengths must lie in [0, T]");
  }
  return p;
}

// A (B, T, C) argument must be contiguous and on the CPU: the kernels index it directly.
inline void check_btc(const at::Tensor& x, const char* name) {
  TORCH_CHECK(x.dim() == 3 && x.is_contiguous() && x.device().is_cpu(), name,
              " must be a contiguous CPU tensor of shape (B, T, C)");
}

inline int64_t num_threads() { return at::get_num_threads(); }

// How many threads at::parallel_for really uses here (a second OpenMP runtime can make it 1).
inline int64_t openmp_threads_in_region() {
  std::atomic<int64_t> seen{0};
  at::parallel_for(0, 1024, 1, [&](int64_t, int64_t) { seen.fetch_add(1); });
  return seen.load();
}

// ----------------------------------------------------------------------------------------------
// Activations

// exp for the activations below, float, without branches so that the compiler vectorises the
// loops that call it. Cody-Waite range reduction, degree-6 polynomial; max relative error ~2 ulp
// on [-87, 88]. The argument is clamped to [kExpLo, kExpHi] first, which keeps the arithmetic
// finite and saturates both ends: at kExpHi and above (+Inf included) the scale 2^n is
// 2^128 = +Inf, so the result is +Inf; at kExpLo and below (-Inf included) it is FLT_MIN (not 0:
// sigmoid and tanh read exp only through 1 + exp, where FLT_MIN and 0 round alike). NaN is
// clamped to a finite value; the activations restore it with one final select. No selects for
// the two ends (the clamp does their work): each select was one more vector instruction per
// element in the loops these bound.
inline float exp_saturating(float x) {
  // ln(FLT_MAX): round(x / ln 2) is 128 from ~88.376 up, so everything above overflows to +Inf
  constexpr float kExpHi = 88.7228391117f;
  constexpr float kExpLo = -87.3365447504f;  // exp(kExpLo) = FLT_MIN, the smallest normal
  const float xc = std::min(kExpHi, std::max(kExpLo, x));
  const float n = std::floor(xc * 1.44269504088896341f + 0.5f);
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;  // n = 128: the bits of +Inf
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}
inline double exp_saturating(double x) { return std::exp(x); }

// sigmoid(x) = 1 / (1 + exp(-x)), as torch.sigmoid at the special values: sigmoid(+Inf) = 1,
// sigmoid(-Inf) = 0, sigmoid(NaN) = NaN.
template <typename T>
inline T sigmoid(T x) {
  const T y = T(1) / (T(1) + exp_saturating(-x));
  return x != x ? x : y;  // NaN stays NaN
}
template <typename T>
inline T tanh_(T x) {
  // tanh(x) = 1 - 2 / (exp(2x) + 1): saturates correctly at both ends (tanh(+-Inf) = +-1,
  // exactly); NaN stays NaN.
  const T y = T(1) - T(2) / (exp_saturating(T(2) * x) + T(1));
  return x != x ? x : y;
}
inline double tanh_(double x) { return std::tanh(x); }

// ----------------------------------------------------------------------------------------------
// Streaming (non-temporal) stores. An ordinary store to a line not in cache first reads the line
// (read-for-ownership), so writing N bytes moves 2N. A streaming store writes whole lines, skips
// that read and leaves the caches' contents in place. It pays when the output would not be in
// cache for its reader anyway, that is when a kernel writes more than a fair share of the
// last-level cache. By default that share is a quarter of the cache, and at most 4 MiB per
// thread. The per-thread bound exists because in a virtual machine sysfs reports the whole
// socket's cache, which other guests share. CTRLRNN_STREAMING_BYTES (handed in by configure)
// sets the threshold in bytes; negative means never stream.

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

// The threshold set by configure (ctrlrnn.settings' CTRLRNN_STREAMING_BYTES) or
// set_streaming_threshold, or kThresholdAuto. One per process, shared by every extension.
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

// ----------------------------------------------------------------------------------------------
// A bias added inside a kernel (the QRNN pooling's and the METAGROSS level's): the GEMM before it
// then writes x W^T alone, with no pass filling its output with the bias

// acc[0:n] += x[0:n] in acc's type (a bias gradient's running sums).
template <typename acc_t, typename src_t>
inline void accumulate_row(acc_t* __restrict__ acc, const src_t* __restrict__ x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) acc[j] += acc_t(x[j]);
}

// out[0:n] = the sum over `rows` rows of `parts` (row r at parts + r * n), added row after row
// in a fixed order (reproducible): a bias's gradient from the per-batch-row partial sums that
// the parallel kernels leave.
template <typename scalar_t, typename acc_t>
inline void sum_rows_into(scalar_t* __restrict__ out, const acc_t* __restrict__ parts,
                          int64_t rows, int64_t n) {
  std::vector<acc_t> total(static_cast<size_t>(n), acc_t(0));
  for (int64_t r = 0; r < rows; ++r) accumulate_row(total.data(), parts + r * n, n);
  for (int64_t i = 0; i < n; ++i) out[i] = scalar_t(total[i]);
}

// The bias's n values, or zeros in its place when it is absent (the kernels always add one).
template <typename scalar_t>
const scalar_t* bias_or_zeros(const c10::optional<at::Tensor>& bias, std::vector<scalar_t>& zeros,
                              int64_t n) {
  if (bias.has_value()) return bias->data_ptr<scalar_t>();
  zeros.assign(static_cast<size_t>(n), scalar_t(0));
  return zeros.data();
}

}  // namespace ctrlrnn::kernels
