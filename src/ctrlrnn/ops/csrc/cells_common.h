// Helpers shared by the fused gated cells of the `cells` extension (ops/cells/<cell>/<cell>.cpp,
// made one module by the source ops/registry.py writes). They cover activations, lengths, the
// per-step GEMM, the batch-slice parallelism and the state-gradient bookkeeping of backward
// through time. Everything is inline.
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

#include "gemm_path.h"
#include "output_pool.h"

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
// Activations. float: a vectorisable exp (Cephes expf polynomial, ~1 ulp) so the pointwise loops
// compile to AVX2/AVX-512 code without -ffast-math; double: libm (used for gradcheck). Both give
// the special values of torch.sigmoid / torch.tanh: sigmoid(+Inf) = 1, sigmoid(-Inf) = 0,
// tanh(+-Inf) = +-1, NaN -> NaN (the compiled cells must put NaN and Inf exactly where the
// references of cells_ref.py do).
// ---------------------------------------------------------------------------------------------

template <typename T>
struct Act;

template <>
struct Act<double> {
  static inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
  static inline double tanh(double x) { return std::tanh(x); }
};

template <>
struct Act<float> {
  // exp(x) for x in [-87, 88] by the polynomial; beyond, std::exp's values: +Inf above
  // ln(FLT_MAX) (+Inf included), 0 below the smallest normal's logarithm (-Inf included;
  // subnormal results flushed), NaN for NaN. The clamp keeps the polynomial's arithmetic finite
  // (NaN clamps to -87: no float-to-int conversion of NaN); the special cases are a final
  // select (a blend in vector code), so the function stays branch-free.
  static inline float exp(float x) {
    float xc = x > -87.0f ? x : -87.0f;  // NaN -> -87
    xc = xc < 88.0f ? xc : 88.0f;
    // n = round(x / ln 2) by the 1.5 * 2^23 trick (std::floor blocks gcc's vectoriser).
    const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof(scale));
    float y = p * scale;
    y = x < -87.3365447504f ? 0.0f : y;                                    // below FLT_MIN
    y = x > 88.7228391117f ? std::numeric_limits<float>::infinity() : y;  // above FLT_MAX
    return x != x ? x : y;                                                 // NaN stays NaN
  }
  static inline float sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }
  static inline float tanh(float x) {
    // 1 - 2 / (exp(2x) + 1) loses relative accuracy near 0; use the odd series there. (+-Inf:
    // exactly +-1 by the first form; NaN fails the comparison and takes that form, NaN too.)
    const float big = 1.0f - 2.0f / (exp(2.0f * x) + 1.0f);
    const float x2 = x * x;
    const float small =
        x * (1.0f + x2 * (-0.333333333333f +
                          x2 * (0.133333333333f + x2 * (-0.053968253968f + x2 * 0.021869488536f))));
    return (x2 < 0.01f) ? small : big;
  }
};

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

// ---------------------------------------------------------------------------------------------
// The per-step GEMM out(M, N) (+)= A(M, K) @ op(W), with the same W at every step, on the path
// gemm_path.h chooses for its shape class (float32; other dtypes use at::mm_out / addmm_).
// The BLAS path: with MKL (torch's default CPU BLAS) W is packed once per batch slice with
// cblas_sgemm_pack and each step calls cblas_sgemm_compute, so MKL does not re-pack the weights
// every step. The MKL symbols are weak: where torch exports no MKL (other BLAS, other platforms)
// they are null and the BLAS path is at::mm_out / addmm_. The oneDNN path: mkldnn_matmul on
// the step's rows (its primitive comes from oneDNN's cache after the first step). The "blas1"
// path is the BLAS path held to the calling thread (gemm_path.h): what a small batch, which runs
// its time loop on the calling thread (over_batch_slices), wants for its tiny per-step products.
// The "tiny" path (M <= gemm::tiny::kMaxRows) is ctrlrnn's own kernel on a contiguous copy of
// op(W) made once per batch slice (gemm_path.h says why and how it uses the threads).
// ---------------------------------------------------------------------------------------------

// MKL's packed GEMM (the weak cblas_sgemm_pack symbols, ctrlrnn::mkl) lives in gemm_path.h.

template <typename scalar_t>
class StepGemm {
 public:
  // op(W) = W^T when transpose (W is (N, K)), else W (W is (K, N)); M rows per call.
  StepGemm(const at::Tensor& W, bool transpose, int64_t M)
      : w_op_(transpose ? W.t() : W), M_(M), K_(w_op_.size(0)), N_(w_op_.size(1)) {
    if constexpr (std::is_same_v<scalar_t, float>) {
      if (mkl::available() && M_ > 0 && K_ > 0 && N_ > 0 && W.is_contiguous() &&
          mkl::fits_int(M_) && mkl::fits_int(K_) && mkl::fits_int(N_)) {
        const size_t bytes = cblas_sgemm_pack_get_size(mkl::kBMatrix, static_cast<int>(M_),
                                                       static_cast<int>(N_), static_cast<int>(K_));
        packed_ = at::empty({static_cast<int64_t>(bytes / sizeof(float)) + 16}, W.options());
        cblas_sgemm_pack(mkl::kRowMajor, mkl::kBMatrix, transpose ? mkl::kTrans : mkl::kNoTrans,
                         static_cast<int>(M_), static_cast<int>(N_), static_cast<int>(K_), 1.0f,
                         W.data_ptr<float>(), static_cast<int>(W.size(1)),
                         packed_.data_ptr<float>());
      }
      if (M_ > 0 && K_ > 0 && N_ > 0) {
        const std::string key = gemm::class_key("step", M_, K_, N_, 'n', gemm::layout(w_op_),
                                                gemm::threads_here());
        const bool tiny = M_ <= gemm::tiny::kMaxRows;
        path_ = gemm::choose(key, [&] {
          if (tiny) w_contig_ = w_op_.contiguous();  // the tiny candidate's operand
          return std::function<void(int)>(
              [this, a = gemm::scratch({M_, K_}, W.options()),
               o = at::empty({M_, N_}, W.options())](int path) {
                if (path == gemm::kOneDnn) {
                  gemm::onednn_into(o, a, w_op_, false);
                } else if (path == gemm::kTiny) {
                  tiny_compute(a.data_ptr<float>(), K_, o.data_ptr<float>(), N_, false);
                } else {
                  gemm::blas_as(path, [&] { run_blas(a, o, false); });
                }
              });
        }, tiny);
        if (path_ == gemm::kOneDnn || path_ == gemm::kTiny) packed_ = at::Tensor();
        // op(W) copied only where the tiny kernel runs (or was just measured)
        if (path_ == gemm::kTiny && !w_contig_.defined()) w_contig_ = w_op_.contiguous();
        if (path_ != gemm::kTiny) w_contig_ = at::Tensor();
      }
    }
  }

  // out = A @ op(W) (accumulate: out += A @ op(W)); A (M, K) and out (M, N) with unit inner
  // stride.
  void run(const at::Tensor& A, const at::Tensor& out, bool accumulate) const {
    if constexpr (std::is_same_v<scalar_t, float>) {
      if (path_ == gemm::kTiny && A.size(0) == M_ && A.stride(1) == 1 && out.stride(1) == 1) {
        tiny_compute(A.data_ptr<float>(), A.stride(0), out.data_ptr<float>(), out.stride(0),
                     accumulate);
        return;
      }
    }
    if (path_ == gemm::kOneDnn && out.is_contiguous()) {
      gemm::onednn_into(out, A, w_op_, accumulate);
      return;
    }
    gemm::blas_as(path_, [&] { run_blas(A, out, accumulate); });
  }

  // out (M rows, leading dimension ldo) (+)= A (M rows, leading dimension lda) @ op(W) on raw
  // pointers, with no tensor views made: only on MKL's packed BLAS path and the tiny path (the
  // ones small batches take, where building two tensor views per step costs as much as the
  // product). Returns false (nothing done) on any other path; the caller then calls run().
  bool run_raw(const scalar_t* A, int64_t lda, scalar_t* out, int64_t ldo,
               bool accumulate) const {
    if constexpr (std::is_same_v<scalar_t, float>) {
      if (path_ == gemm::kTiny) {
        tiny_compute(A, lda, out, ldo, accumulate);
        return true;
      }
      if (!packed_.defined() || path_ == gemm::kOneDnn || !mkl::fits_int(lda) ||
          !mkl::fits_int(ldo)) {
        return false;
      }
      gemm::blas_as(path_, [&] { packed_compute(A, lda, out, ldo, accumulate); });
      return true;
    } else {
      (void)A, (void)lda, (void)out, (void)ldo, (void)accumulate;
      return false;
    }
  }

  // The path this GEMM takes ("blas", "blas1" or "onednn").
  const char* path() const { return gemm::path_name(path_); }

 private:
  void run_blas(const at::Tensor& A, const at::Tensor& out, bool accumulate) const {
    if constexpr (std::is_same_v<scalar_t, float>) {
      if (packed_.defined() && A.size(0) == M_ && A.stride(1) == 1 && out.stride(1) == 1 &&
          mkl::fits_int(A.stride(0)) && mkl::fits_int(out.stride(0))) {
        packed_compute(A.data_ptr<float>(), A.stride(0), out.data_ptr<float>(), out.stride(0),
                       accumulate);
        return;
      }
    }
    gemm::blas_into(out, A, w_op_, accumulate);
  }

  // MKL's packed product on M_ rows: out (+)= A @ op(W), leading dimensions lda and ldo.
  void packed_compute(const float* A, int64_t lda, float* out, int64_t ldo,
                      bool accumulate) const {
    cblas_sgemm_compute(mkl::kRowMajor, mkl::kNoTrans, mkl::kPacked, static_cast<int>(M_),
                        static_cast<int>(N_), static_cast<int>(K_), A, static_cast<int>(lda),
                        packed_.data_ptr<float>(), static_cast<int>(N_),
                        accumulate ? 1.0f : 0.0f, out, static_cast<int>(ldo));
  }

  // The tiny kernel on M_ rows: out (+)= A @ op(W), leading dimensions lda and ldo.
  void tiny_compute(const float* A, int64_t lda, float* out, int64_t ldo, bool accumulate) const {
    gemm::tiny::gemm(A, lda, w_contig_.data_ptr<float>(), M_, K_, N_, out, ldo, accumulate);
  }

  at::Tensor w_op_;
  int64_t M_, K_, N_;
  at::Tensor packed_;
  at::Tensor w_contig_;  // op(W) contiguous, (K, N): the tiny path's operand
  int path_ = gemm::kBlas;
};

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
      : acts(save ? ctrlrnn::pooled_empty({B, T, GA}, opts) : at::empty({0}, opts)),
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
