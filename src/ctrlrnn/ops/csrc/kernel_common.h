// ctrlrnn: helpers shared by the elementwise-recurrence kernels (the linear scan, QRNN pooling,
// the RCRN listener, the convolution windows, the METAGROSS level): work splitting, lengths, an
// in-kernel bias and the recurrences' parallel loop, which flushes subnormal numbers. Everything
// here is inline; the only state is the MXCSR setting FlushSubnormals saves for its scope. What
// the runtime serves (outputs, stores, activations) is in runtime/runtime.h.

#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <c10/util/Optional.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
#include <xmmintrin.h>
#define CTRLRNN_HAS_MXCSR 1
#endif

namespace ctrlrnn::kernels {

// ----------------------------------------------------------------------------------------------
// Subnormal numbers
//
// A diagonal recurrence's reverse pass multiplies its carried gradient by a gate below 1 at
// every step, and nothing mixes it with larger values (no recurrent matrix): over a long
// sequence whose gradient enters at its end (a classifier reading the last step of a 784-pixel
// image) the carry decays below float32's smallest normal number (about 1.2e-38) and stays
// there, where x86 cores compute each operation tens of times slower. For its scope,
// FlushSubnormals sets the calling thread's MXCSR flush-to-zero and denormals-are-zero bits, as
// GPUs and torch.set_flush_denormal(True) do, and restores the thread's bits after: results
// change only where a value would have been subnormal (below 1.2e-38 in float32, 2.2e-308 in
// float64). Elsewhere than x86 it does nothing. Each work chunk of parallel_recurrence holds
// one (threads do not share MXCSR).
class FlushSubnormals {
 public:
#ifdef CTRLRNN_HAS_MXCSR
  FlushSubnormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFlushBits); }
  ~FlushSubnormals() { _mm_setcsr(saved_); }
#else
  FlushSubnormals() {}  // user-provided: no unused-variable warning where it does nothing
#endif
  FlushSubnormals(const FlushSubnormals&) = delete;
  FlushSubnormals& operator=(const FlushSubnormals&) = delete;

 private:
#ifdef CTRLRNN_HAS_MXCSR
  static constexpr unsigned kFlushBits = 0x8040;  // FTZ (bit 15) and DAZ (bit 6)
  unsigned saved_;
#endif
};

// at::parallel_for for a recurrence's work items: each chunk runs body(begin, end) with
// subnormals flushed on its own thread.
template <typename Body>
inline void parallel_recurrence(int64_t begin, int64_t end, int64_t grain, const Body& body) {
  at::parallel_for(begin, end, grain, [&](int64_t chunk_begin, int64_t chunk_end) {
    const FlushSubnormals flush;
    body(chunk_begin, chunk_end);
  });
}

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
