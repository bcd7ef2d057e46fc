// Helpers shared by the fused gated cells of the `cells` extension (ops/cells/<cell>/<cell>.cpp,
// made one module by the source ops/registry.py writes): lengths, the batch-slice parallelism and
// the state-gradient bookkeeping of backward through time. Everything is inline. The per-step
// GEMM, the outputs and the activations are the runtime's (runtime/runtime.h).
//
// The recipe every cell follows (lmnt-com/haste). The input projections of all time steps
// arrive precomputed as one tensor x_proj (B, T, G), from one big GEMM done by the caller. Per
// step a cell does one GEMM for the recurrent term U h_{t-1} into a preallocated (B, G_h) buffer
// and one fused pointwise pass. Backward through time mirrors it: per step a pointwise pass
// writes the gate pre-activation gradients dG_t into dx_proj[:, t], then one GEMM adds dG_t U to
// dh_{t-1}. dU = sum_t dG_t^T h_{t-1} is one (G_h, B*T) x (B*T, H) GEMM at the end. Threads
// split the batch and each runs the whole time loop on its slice (over_batch_slices), so there
// is no barrier per step.
//
// Variable lengths: for t >= lengths[b] the state of row b stays unchanged and the outputs are
// zero. In backward the carried state gradient passes through such steps untouched and dG is
// zero.
//
// Tensor layouts (all contiguous, batch-major): x_proj (B, T, G); weight_hh (G_h, H), so that the
// recurrent term is h_{t-1} @ weight_hh^T; states (B, H); sequences (B, T, H).

#pragma once

#include <ATen/ATen.h>

#include "runtime/runtime.h"

#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

// `#pragma` cannot appear inside the AT_DISPATCH macro argument; _Pragma can.
#define CTRLRNN_SIMD _Pragma("omp simd")

namespace ctrlrnn::cells {

// ---------------------------------------------------------------------------------------------
// Shared helpers.
// ---------------------------------------------------------------------------------------------

struct Lengths {
  std::vector<int64_t> len;
  int64_t max_len = 0;
  // Longest sequence among rows [b0, b1): later steps need no GEMM for that slice.
  int64_t max_in(int64_t b0, int64_t b1) const {
    int64_t m = 0;
    for (int64_t b = b0; b < b1; ++b) m = std::max(m, len[b]);
    return m;
  }
};

inline Lengths read_lengths(const c10::optional<at::Tensor>& lengths, int64_t B, int64_t T) {
  Lengths out;
  out.len.assign(static_cast<size_t>(B), T);
  out.max_len = B > 0 ? T : 0;
  if (lengths.has_value() && lengths->defined()) {
    const at::Tensor l = lengths->to(at::kCPU, at::kLong).contiguous();
    TORCH_CHECK(l.dim() == 1 && l.size(0) == B, "lengths: expected shape (", B, ",), got ",
                l.sizes());
    const int64_t* p = l.data_ptr<int64_t>();
    out.max_len = 0;
    for (int64_t b = 0; b < B; ++b) {
      TORCH_CHECK(p[b] >= 0 && p[b] <= T, "lengths: values must lie in [0, ", T, "], got ", p[b]);
      out.len[b] = p[b];
      out.max_len = std::max(out.max_len, p[b]);
    }
  }
  return out;
}

using ctrlrnn::runtime::Act;
using ctrlrnn::runtime::StepGemm;
using ctrlrnn::runtime::with_math;

// Parallelism: the rows of a batch never interact in a recurrence, so each thread takes one
// contiguous slice of the batch and runs the *whole* time loop on it: its own per-step GEMM
// (M = rows in the slice; MKL runs single-threaded inside an OpenMP region by default) followed by
// the pointwise step, with no barrier per time step. Slices have at least kMinRows rows; a batch
// too small for two slices runs on the calling thread, where the per-step GEMM may use MKL's
// threads or, where that measures slower (tiny products), not (the "blas1" path).
constexpr int64_t kMinRows = 4;

template <typename F>
void over_batch_slices(int64_t B, const F& body) {
  if (B <= 0) return;
  const int64_t slices = std::min<int64_t>(at::get_num_threads(), B / kMinRows);
  if (slices < 2 || at::in_parallel_region()) {
    body(int64_t{0}, B);
    return;
  }
  const int64_t per_slice = (B + slices - 1) / slices;
  // Worker threads do not inherit the caller's thread-local state (dispatch keys, grad mode);
  // without it the per-slice GEMMs would go through autograd.
  const at::ThreadLocalState state;
  at::parallel_for(0, B, per_slice, [&](int64_t b0, int64_t b1) {
    at::ThreadLocalStateGuard guard(state);
    body(b0, b1);
  });
}

inline at::Tensor opt_contig(const c10::optional<at::Tensor>& t) {
  if (t.has_value() && t->defined()) return t->contiguous();
  return at::Tensor();
}

template <typename T>
inline const T* row_or(const at::Tensor& t, int64_t offset, const T* fallback) {
  return t.defined() ? t.data_ptr<T>() + offset : fallback;
}

template <typename T>
inline void fill_zero(T* p, int64_t n) {
  std::memset(p, 0, sizeof(T) * static_cast<size_t>(n));
}

// The carried gradient w.r.t. the state h_t of row b entering step t of backward: the GEMM
// result of step t+1 when that step was valid for row b, else the untouched carry (which starts
// as the final-state gradient).
template <typename T>
inline const T* incoming(const Lengths& L, int64_t b, int64_t t, const T* rec, const T* carry,
                         int64_t H) {
  return (t + 1 < L.len[b]) ? rec + b * H : carry + b * H;
}

// Saved activations for backward: (B, T, GA) when training, else (0,) with a per-row scratch so
// the pointwise loops stay branch-free (inference skips the big write and its page faults).
struct SavedActs {
  at::Tensor acts;
  at::Tensor scratch;
  SavedActs(bool save, int64_t B, int64_t T, int64_t GA, const at::TensorOptions& opts)
      : acts(save ? ctrlrnn::runtime::empty({B, T, GA}, opts) : at::empty({0}, opts)),
        scratch(save ? at::Tensor() : at::empty({B, GA}, opts)) {}
  template <typename T>
  T* row(int64_t b, int64_t bt, int64_t GA) const {
    return scratch.defined() ? scratch.data_ptr<T>() + b * GA : acts.data_ptr<T>() + bt * GA;
  }
};

// dh_0 = carried gradient after step 0.
inline at::Tensor initial_state_grad(const Lengths& L, const at::Tensor& rec, const at::Tensor& carry) {
  at::Tensor out = carry.clone();
  const int64_t B = out.size(0);
  for (int64_t b = 0; b < B; ++b) {
    if (L.len[b] > 0) out[b].copy_(rec[b]);
  }
  return out;
}

// h_{t-1} for every step: (B, T, H) with h0 at t = 0 (for dU as one GEMM).
inline at::Tensor shifted_states(const at::Tensor& h0, const at::Tensor& h_seq) {
  const int64_t T = h_seq.size(1);
  if (T == 0) return h_seq.clone();
  if (T == 1) return h0.unsqueeze(1).contiguous();
  return at::cat({h0.unsqueeze(1), h_seq.narrow(1, 0, T - 1)}, 1);
}

inline void check_common(const at::Tensor& x_proj, const at::Tensor& weight_hh, int64_t gates_x,
                  int64_t gates_h, const char* name) {
  TORCH_CHECK(x_proj.dim() == 3, name, ": x_proj must be (B, T, G), got ", x_proj.sizes());
  TORCH_CHECK(weight_hh.dim() == 2, name, ": weight_hh must be 2-D, got ", weight_hh.sizes());
  const int64_t H = weight_hh.size(1);
  TORCH_CHECK(x_proj.size(2) == gates_x * H, name, ": x_proj last dim must be ", gates_x, "*H = ",
              gates_x * H, ", got ", x_proj.size(2));
  TORCH_CHECK(weight_hh.size(0) == gates_h * H, name, ": weight_hh must be (", gates_h * H, ", ",
              H, "), got ", weight_hh.sizes());
  TORCH_CHECK(x_proj.scalar_type() == at::kFloat || x_proj.scalar_type() == at::kDouble, name,
              ": only float32 and float64 are supported, got ", x_proj.scalar_type());
  TORCH_CHECK(weight_hh.scalar_type() == x_proj.scalar_type(), name,
              ": weight_hh dtype must match x_proj");
  TORCH_CHECK(x_proj.device().is_cpu() && weight_hh.device().is_cpu(), name,
              ": CPU tensors expected");
}

inline void check_state(const at::Tensor& s, int64_t B, int64_t H, const at::Tensor& like,
                 const char* what) {
  TORCH_CHECK(s.dim() == 2 && s.size(0) == B && s.size(1) == H, what, ": expected (", B, ", ", H,
              "), got ", s.sizes());
  TORCH_CHECK(s.scalar_type() == like.scalar_type(), what, ": dtype must match x_proj");
}

}  // namespace ctrlrnn::cells
