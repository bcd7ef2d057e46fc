// ctrlrnn's CPU runtime: the one header the kernels include for what it serves them.
//
// * an output: empty(sizes, options), empty_like(t);
// * a bulk GEMM: mm_into(out, a, b, accumulate), mm(a, b);
// * a step GEMM: StepGemm<T>(W, transpose, rows), the same W at every step;
// * the activations: with_math<T, Saturating or Act<T>>(f), vector_math.h;
// * both for an elementwise kernel: with_flavour(stream, f), a Flavour type per call;
// * the stores of large outputs: use_streaming_stores(bytes), store_row, emit_row, stream_fence;
// * the outputs of stacked recurrences: StackedBlocks and StackedScope (pool.h).
//
// Two runtimes stand behind it (mode.h), chosen by CTRLRNN_RUNTIME through configure and
// switchable between calls. Tuned: the output cache with huge pages, the measured GEMM paths,
// streaming stores and the polynomial exp. Plain: at::empty, at::mm_out and addmm_, ordinary
// stores, std::exp and std::tanh. CTRLRNN_RUNTIME_OFF switches three tuned mechanisms off one by
// one (mode.h).

#pragma once

#include <ATen/ATen.h>

#include "gemm_paths.h"
#include "mode.h"
#include "pool.h"
#include "step_gemm.h"
#include "streaming.h"
#include "vector_math.h"

#include <cstdint>
#include <type_traits>

namespace ctrlrnn::runtime {

// An uninitialised output. Tuned: a slice of a stacked block inside a StackedScope (unless
// stacked_outputs is off, mode.h), else from the output cache when large. Plain: at::empty.
inline at::Tensor empty(at::IntArrayRef sizes, const at::TensorOptions& options) {
  if (plain()) return at::empty(sizes, options);
  if (uses(kStackedOutputs)) {
    if (StackedScope* scope = StackedScope::current()) return scope->next(sizes, options);
  }
  return OutputPool::instance().empty(sizes, options);
}

inline at::Tensor empty_like(const at::Tensor& like) { return empty(like.sizes(), like.options()); }

// out (M, N) = a (M, K) @ b (K, N), or += with accumulate. out needs unit inner stride.
inline void mm_into(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                    bool accumulate) {
  gemm::into(out, a, b, accumulate);
}

// a (M, K) @ b (K, N) into a new contiguous tensor.
inline at::Tensor mm(const at::Tensor& a, const at::Tensor& b) { return gemm::mm(a, b); }

// A kernel's compile-time share of the runtime: whether it streams its stores (value) and its
// activations (Math).
template <bool STREAM, typename M>
struct Flavour : std::bool_constant<STREAM> {
  using Math = M;
};

// Calls f with Flavour<stream and CAN_STREAM, Math>.
template <typename Math, bool CAN_STREAM, typename F>
inline void with_stores(bool stream, const F& f) {
  if constexpr (CAN_STREAM) {
    if (stream) {
      f(Flavour<true, Math>{});
      return;
    }
  }
  f(Flavour<false, Math>{});
}

// Calls f with the Flavour for this call: plain math and ordinary stores under the plain runtime
// (Acc float), else Tuned math (plain math for float with poly_exp off), streaming where
// `stream` and the kernel allows it (CAN_STREAM).
template <typename Acc, typename Tuned, bool CAN_STREAM, typename F>
inline void with_flavour(bool stream, const F& f) {
  if constexpr (std::is_same_v<Acc, float>) {
    if (plain()) {
      f(Flavour<false, Plain>{});
      return;
    }
    if (!uses(kPolyExp)) {
      with_stores<Plain, CAN_STREAM>(stream, f);
      return;
    }
    count_use(kPolyExp);
  }
  with_stores<Tuned, CAN_STREAM>(stream, f);
}

using ctrlrnn::StackedBlocks;
using ctrlrnn::StackedScope;

}  // namespace ctrlrnn::runtime
