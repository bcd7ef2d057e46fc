// ctrlrnn: which CPU runtime serves the kernels, tuned or plain.
//
// The tuned runtime is the output cache (pool.h), the GEMM chooser and its paths
// (gemm_paths.h, tiny_gemm.h, step_gemm.h), streaming stores (streaming.h) and the polynomial
// exp (vector_math.h). The plain runtime is torch alone: at::empty, at::mm_out and addmm_, std::exp
// and std::tanh, ordinary stores. Both compute the same results up to float rounding, so the
// kernel tests run under each and a kernel's correctness never rests on the machinery.
//
// One kind per process. The state is a function-local static of an inline function, which GCC
// exports as a unique symbol, so every extension binds the same instance (pool.h says more).
// It is read at each call, so it can be switched between calls without a rebuild.

#pragma once

#include <atomic>
#include <string>

namespace ctrlrnn::runtime {

enum Kind : int { kTuned = 0, kPlain = 1 };

inline std::atomic<int>& kind_ref() {
  static std::atomic<int> kind{kTuned};
  return kind;
}

inline bool plain() { return kind_ref().load(std::memory_order_relaxed) == kPlain; }

inline const char* kind_name() { return plain() ? "plain" : "tuned"; }

// Sets the kind by name ("tuned" or "plain"); returns false, changing nothing, for any other.
inline bool set_kind(const std::string& name) {
  if (name != "tuned" && name != "plain") return false;
  kind_ref().store(name == "plain" ? kPlain : kTuned);
  return true;
}

}  // namespace ctrlrnn::runtime
