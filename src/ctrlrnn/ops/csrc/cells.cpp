// Fused gated cells on CPU: LSTM, GRU (torch.nn.GRU formulation), CAS-LSTM (upper layers) and
// nCARNN.
//
// Recipe (lmnt-com/haste): the input projections of all time steps arrive precomputed as one
// tensor x_proj (B, T, G) (one big GEMM done by the caller); per step this file does one GEMM for
// the recurrent term U h_{t-1} into a preallocated (B, G_h) buffer and one fused pointwise pass.
// Backward through time mirrors it: per step a pointwise pass writes the gate pre-activation
// gradients dG_t straight into dx_proj[:, t], then one GEMM dh_{t-1} (+)= dG_t U; dU =
// sum_t dG_t^T h_{t-1} is one (G_h, B*T) x (B*T, H) GEMM at the end. Threads split the batch and
// each runs the whole time loop on its slice (see over_batch_slices), so there is no barrier per
// step.
//
// Variable lengths: for t >= lengths[b] the state of row b is left unchanged and the outputs are
// zero; in backward the carried state gradient passes through such steps untouched and dG is zero.
//
// Tensor layouts (all contiguous, batch-major): x_proj (B, T, G); weight_hh (G_h, H) so that the
// recurrent term is h_{t-1} @ weight_hh^T; states (B, H); sequences (B, T, H).

#include <torch/extension.h>

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

namespace {

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

Lengths read_lengths(const c10::optional<at::Tensor>& lengths, int64_t B, int64_t T) {
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
// The per-step GEMM out(M, N) (+)= A(M, K) @ op(W), with the same W at every step.
// float32 with MKL (torch's default CPU BLAS): W is packed once per batch slice with
// cblas_sgemm_pack and each step calls cblas_sgemm_compute, so MKL does not re-pack the weights
// every step (5-20% faster per step on small M). The MKL symbols are weak: where torch exports no
// MKL (other BLAS, other platforms) they are null and every step uses at::mm_out / addmm_.
// ---------------------------------------------------------------------------------------------

extern "C" {
size_t cblas_sgemm_pack_get_size(int identifier, int m, int n, int k) __attribute__((weak));
void cblas_sgemm_pack(int layout, int identifier, int trans, int m, int n, int k, float alpha,
                      const float* src, int ld, float* dest) __attribute__((weak));
void cblas_sgemm_compute(int layout, int transa, int transb, int m, int n, int k, const float* a,
                         int lda, const float* b, int ldb, float beta, float* c, int ldc)
    __attribute__((weak));
}

namespace mkl {
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112, kPacked = 151, kBMatrix = 162;
inline bool available() {
  return cblas_sgemm_pack_get_size != nullptr && cblas_sgemm_pack != nullptr &&
         cblas_sgemm_compute != nullptr;
}
inline bool fits_int(int64_t v) { return v >= 0 && v <= std::numeric_limits<int>::max(); }
}  // namespace mkl

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
    }
  }

  // out = A @ op(W) (accumulate: out += A @ op(W)); A (M, K) and out (M, N) with unit inner
  // stride.
  void run(const at::Tensor& A, const at::Tensor& out, bool accumulate) const {
    if constexpr (std::is_same_v<scalar_t, float>) {
      if (packed_.defined() && A.size(0) == M_ && A.stride(1) == 1 && out.stride(1) == 1 &&
          mkl::fits_int(A.stride(0)) && mkl::fits_int(out.stride(0))) {
        cblas_sgemm_compute(mkl::kRowMajor, mkl::kNoTrans, mkl::kPacked, static_cast<int>(M_),
                            static_cast<int>(N_), static_cast<int>(K_), A.data_ptr<float>(),
                            static_cast<int>(A.stride(0)), packed_.data_ptr<float>(),
                            static_cast<int>(N_), accumulate ? 1.0f : 0.0f,
                            out.data_ptr<float>(), static_cast<int>(out.stride(0)));
        return;
      }
    }
    at::Tensor o = out;
    if (accumulate) {
      o.addmm_(A, w_op_);
    } else {
      at::mm_out(o, A, w_op_);
    }
  }

 private:
  at::Tensor w_op_;
  int64_t M_, K_, N_;
  at::Tensor packed_;
};

// Parallelism: the rows of a batch never interact in a recurrence, so each thread takes one
// contiguous slice of the batch and runs the *whole* time loop on it: its own per-step GEMM
// (M = rows in the slice; MKL runs single-threaded inside an OpenMP region by default) followed by
// the pointwise step, with no barrier per time step. Slices have at least kMinRows rows; a batch
// too small for two slices runs on the calling thread, where the per-step GEMM is free to use
// MKL's threads.
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

at::Tensor opt_contig(const c10::optional<at::Tensor>& t) {
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
at::Tensor initial_state_grad(const Lengths& L, const at::Tensor& rec, const at::Tensor& carry) {
  at::Tensor out = carry.clone();
  const int64_t B = out.size(0);
  for (int64_t b = 0; b < B; ++b) {
    if (L.len[b] > 0) out[b].copy_(rec[b]);
  }
  return out;
}

// h_{t-1} for every step: (B, T, H) with h0 at t = 0 (for dU as one GEMM).
at::Tensor shifted_states(const at::Tensor& h0, const at::Tensor& h_seq) {
  const int64_t T = h_seq.size(1);
  if (T == 0) return h_seq.clone();
  if (T == 1) return h0.unsqueeze(1).contiguous();
  return at::cat({h0.unsqueeze(1), h_seq.narrow(1, 0, T - 1)}, 1);
}

void check_common(const at::Tensor& x_proj, const at::Tensor& weight_hh, int64_t gates_x,
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

void check_state(const at::Tensor& s, int64_t B, int64_t H, const at::Tensor& like,
                 const char* what) {
  TORCH_CHECK(s.dim() == 2 && s.size(0) == B && s.size(1) == H, what, ": expected (", B, ", ", H,
              "), got ", s.sizes());
  TORCH_CHECK(s.scalar_type() == like.scalar_type(), what, ": dtype must match x_proj");
}

// =============================================================================================
// LSTM (CAS-LSTM eq 1-6; RCRN eq 1-6 / 10-14). Gate order i, f, g(=c~), o as torch.nn.LSTM.
//   c_t = f c_{t-1} + i g,  h_t = o tanh(c_t)
// acts (B, T, 4H) saves the activated gates.
// =============================================================================================

std::vector<at::Tensor> lstm_forward(const at::Tensor& x_proj_in, const at::Tensor& weight_hh_in,
                                     const at::Tensor& h0_in, const at::Tensor& c0_in,
                                     const c10::optional<at::Tensor>& lengths, bool save) {
  check_common(x_proj_in, weight_hh_in, 4, 4, "lstm");
  const at::Tensor x_proj = x_proj_in.contiguous();
  const at::Tensor weight_hh = weight_hh_in.contiguous();
  const int64_t B = x_proj.size(0), T = x_proj.size(1), H = weight_hh.size(1), G = 4 * H;
  check_state(h0_in, B, H, x_proj, "h0");
  check_state(c0_in, B, H, x_proj, "c0");
  const Lengths L = read_lengths(lengths, B, T);

  at::Tensor h = h0_in.contiguous().clone();
  at::Tensor c = c0_in.contiguous().clone();
  at::Tensor h_seq = ctrlrnn::pooled_empty({B, T, H}, x_proj.options());
  at::Tensor c_seq = ctrlrnn::pooled_empty({B, T, H}, x_proj.options());
  const SavedActs saved(save, B, T, G, x_proj.options());
  at::Tensor rec = at::zeros({B, G}, x_proj.options());

  AT_DISPATCH_FLOATING_TYPES(x_proj.scalar_type(), "lstm_forward", [&] {
    using A = Act<scalar_t>;
    const scalar_t* xp_all = x_proj.data_ptr<scalar_t>();
    const scalar_t* rec_p = rec.data_ptr<scalar_t>();
    scalar_t* h_p = h.data_ptr<scalar_t>();
    scalar_t* c_p = c.data_ptr<scalar_t>();
    scalar_t* hs_p = h_seq.data_ptr<scalar_t>();
    scalar_t* cs_p = c_seq.data_ptr<scalar_t>();
    over_batch_slices(B, [&](int64_t b0, int64_t b1) {
      at::Tensor rec_s = rec.narrow(0, b0, b1 - b0);
      const at::Tensor h_s = h.narrow(0, b0, b1 - b0);
      const int64_t ml = L.max_in(b0, b1);
      const StepGemm<scalar_t> gemm(weight_hh, /*transpose=*/true, b1 - b0);
      for (int64_t t = 0; t < T; ++t) {
        if (t < ml) gemm.run(h_s, rec_s, false);
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t bt = b * T + t;
          scalar_t* __restrict hs = hs_p + bt * H;
          scalar_t* __restrict cs = cs_p + bt * H;
          scalar_t* __restrict a = saved.row<scalar_t>(b, bt, G);
          if (t >= L.len[b]) {
            fill_zero(hs, H);
            fill_zero(cs, H);
            fill_zero(a, G);
            continue;
          }
          const scalar_t* __restrict xp = xp_all + bt * G;
          const scalar_t* __restrict r = rec_p + b * G;
          scalar_t* __restrict hb = h_p + b * H;
          scalar_t* __restrict cb = c_p + b * H;
CTRLRNN_SIMD
          for (int64_t j = 0; j < H; ++j) {
            const scalar_t ig = A::sigmoid(xp[j] + r[j]);
            const scalar_t fg = A::sigmoid(xp[H + j] + r[H + j]);
            const scalar_t gg = A::tanh(xp[2 * H + j] + r[2 * H + j]);
            const scalar_t og = A::sigmoid(xp[3 * H + j] + r[3 * H + j]);
            const scalar_t cn = fg * cb[j] + ig * gg;
            const scalar_t hn = og * A::tanh(cn);
            a[j] = ig;
            a[H + j] = fg;
            a[2 * H + j] = gg;
            a[3 * H + j] = og;
            cb[j] = cn;
            hb[j] = hn;
            cs[j] = cn;
            hs[j] = hn;
          }
        }
      }
    });
  });
  return {h_seq, c_seq, h, c, saved.acts};
}

// Returns {dx_proj (B,T,4H), dweight_hh (4H,H), dh0 (B,H), dc0 (B,H)}.
std::vector<at::Tensor> lstm_backward(const c10::optional<at::Tensor>& grad_h_seq,
                                      const c10::optional<at::Tensor>& grad_c_seq,
                                      const c10::optional<at::Tensor>& grad_h_last,
                                      const c10::optional<at::Tensor>& grad_c_last,
                                      const at::Tensor& weight_hh_in, const at::Tensor& h0_in,
                                      const at::Tensor& c0_in, const at::Tensor& h_seq_in,
                                      const at::Tensor& c_seq_in, const at::Tensor& acts_in,
                                      const c10::optional<at::Tensor>& lengths) {
  const at::Tensor weight_hh = weight_hh_in.contiguous();
  const at::Tensor h0 = h0_in.contiguous(), c0 = c0_in.contiguous();
  const at::Tensor h_seq = h_seq_in.contiguous(), c_seq = c_seq_in.contiguous();
  const at::Tensor acts = acts_in.contiguous();
  const int64_t B = h_seq.size(0), T = h_seq.size(1), H = h_seq.size(2), G = 4 * H;
  const Lengths L = read_lengths(lengths, B, T);
  const at::Tensor gh = opt_contig(grad_h_seq), gc = opt_contig(grad_c_seq);
  const at::Tensor ghl = opt_contig(grad_h_last), gcl = opt_contig(grad_c_last);

  const auto opts = h_seq.options();
  at::Tensor dx = ctrlrnn::pooled_empty({B, T, G}, opts);
  at::Tensor carry_h = ghl.defined() ? ghl.clone() : at::zeros({B, H}, opts);
  at::Tensor carry_c = gcl.defined() ? gcl.clone() : at::zeros({B, H}, opts);
  at::Tensor rec = at::zeros({B, H}, opts);
  const at::Tensor zeros_h = at::zeros({H}, opts);

  AT_DISPATCH_FLOATING_TYPES(h_seq.scalar_type(), "lstm_backward", [&] {
    const scalar_t* z = zeros_h.data_ptr<scalar_t>();
    const scalar_t* a_p = acts.data_ptr<scalar_t>();
    const scalar_t* cs_p = c_seq.data_ptr<scalar_t>();
    const scalar_t* c0_p = c0.data_ptr<scalar_t>();
    const scalar_t* rec_p = rec.data_ptr<scalar_t>();
    const scalar_t* ch_p = carry_h.data_ptr<scalar_t>();
    scalar_t* cc_p = carry_c.data_ptr<scalar_t>();
    scalar_t* dx_p = dx.data_ptr<scalar_t>();
    over_batch_slices(B, [&](int64_t b0, int64_t b1) {
      at::Tensor rec_s = rec.narrow(0, b0, b1 - b0);
      const int64_t ml = L.max_in(b0, b1);
      const StepGemm<scalar_t> gemm(weight_hh, /*transpose=*/false, b1 - b0);
      for (int64_t t = T - 1; t >= 0; --t) {
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t bt = b * T + t;
          scalar_t* __restrict d = dx_p + bt * G;
          if (t >= L.len[b]) {
            fill_zero(d, G);
            continue;
          }
          const scalar_t* __restrict dh_in = incoming(L, b, t, rec_p, ch_p, H);
          const scalar_t* __restrict ghs = row_or<scalar_t>(gh, bt * H, z);
          const scalar_t* __restrict gcs = row_or<scalar_t>(gc, bt * H, z);
          const scalar_t* __restrict a = a_p + bt * G;
          const scalar_t* __restrict cs = cs_p + bt * H;
          const scalar_t* __restrict cp = t > 0 ? cs_p + (bt - 1) * H : c0_p + b * H;
          scalar_t* __restrict dcb = cc_p + b * H;
CTRLRNN_SIMD
          for (int64_t j = 0; j < H; ++j) {
            const scalar_t ig = a[j], fg = a[H + j], gg = a[2 * H + j], og = a[3 * H + j];
            const scalar_t tc = Act<scalar_t>::tanh(cs[j]);
            const scalar_t dh = dh_in[j] + ghs[j];
            const scalar_t dc = dcb[j] + gcs[j] + dh * og * (scalar_t(1) - tc * tc);
            d[j] = dc * gg * ig * (scalar_t(1) - ig);
            d[H + j] = dc * cp[j] * fg * (scalar_t(1) - fg);
            d[2 * H + j] = dc * ig * (scalar_t(1) - gg * gg);
            d[3 * H + j] = dh * tc * og * (scalar_t(1) - og);
            dcb[j] = dc * fg;
          }
        }
        if (t < ml) gemm.run(dx.select(1, t).narrow(0, b0, b1 - b0), rec_s, false);
      }
    });
  });
  at::Tensor dh0 = initial_state_grad(L, rec, carry_h);
  at::Tensor dW = at::mm(dx.view({B * T, G}).t(), shifted_states(h0, h_seq).view({B * T, H}));
  return {dx, dW, dh0, carry_c};
}

// =============================================================================================
// GRU, torch.nn.GRU formulation (gate order r, z, n; the recurrent bias b_hn sits inside r*(.)):
//   r = sig(x_r + U_r h + b_hr), z = sig(x_z + U_z h + b_hz), n = tanh(x_n + r (U_n h + b_hn)),
//   h_t = (1 - z) n + z h_{t-1}
// acts (B, T, 4H) saves r, z, n and U_n h + b_hn.
// =============================================================================================

std::vector<at::Tensor> gru_forward(const at::Tensor& x_proj_in, const at::Tensor& weight_hh_in,
                                    const at::Tensor& bias_hh_in, const at::Tensor& h0_in,
                                    const c10::optional<at::Tensor>& lengths, bool save) {
  check_common(x_proj_in, weight_hh_in, 3, 3, "gru");
  const at::Tensor x_proj = x_proj_in.contiguous();
  const at::Tensor weight_hh = weight_hh_in.contiguous();
  const at::Tensor bias_hh = bias_hh_in.contiguous();
  const int64_t B = x_proj.size(0), T = x_proj.size(1), H = weight_hh.size(1), G = 3 * H;
  TORCH_CHECK(bias_hh.dim() == 1 && bias_hh.size(0) == G, "gru: bias_hh must be (", G, ",), got ",
              bias_hh.sizes());
  check_state(h0_in, B, H, x_proj, "h0");
  const Lengths L = read_lengths(lengths, B, T);

  at::Tensor h = h0_in.contiguous().clone();
  at::Tensor h_seq = ctrlrnn::pooled_empty({B, T, H}, x_proj.options());
  const SavedActs saved(save, B, T, 4 * H, x_proj.options());
  at::Tensor rec = at::zeros({B, G}, x_proj.options());

  AT_DISPATCH_FLOATING_TYPES(x_proj.scalar_type(), "gru_forward", [&] {
    using A = Act<scalar_t>;
    const scalar_t* xp_all = x_proj.data_ptr<scalar_t>();
    const scalar_t* rec_p = rec.data_ptr<scalar_t>();
    const scalar_t* bh = bias_hh.data_ptr<scalar_t>();
    scalar_t* h_p = h.data_ptr<scalar_t>();
    scalar_t* hs_p = h_seq.data_ptr<scalar_t>();
    over_batch_slices(B, [&](int64_t b0, int64_t b1) {
      at::Tensor rec_s = rec.narrow(0, b0, b1 - b0);
      const at::Tensor h_s = h.narrow(0, b0, b1 - b0);
      const int64_t ml = L.max_in(b0, b1);
      const StepGemm<scalar_t> gemm(weight_hh, /*transpose=*/true, b1 - b0);
      for (int64_t t = 0; t < T; ++t) {
        if (t < ml) gemm.run(h_s, rec_s, false);
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t bt = b * T + t;
          scalar_t* __restrict hs = hs_p + bt * H;
          scalar_t* __restrict a = saved.row<scalar_t>(b, bt, 4 * H);
          if (t >= L.len[b]) {
            fill_zero(hs, H);
            fill_zero(a, 4 * H);
            continue;
          }
          const scalar_t* __restrict xp = xp_all + bt * G;
          const scalar_t* __restrict r = rec_p + b * G;
          scalar_t* __restrict hb = h_p + b * H;
CTRLRNN_SIMD
          for (int64_t j = 0; j < H; ++j) {
            const scalar_t rg = A::sigmoid(xp[j] + r[j] + bh[j]);
            const scalar_t zg = A::sigmoid(xp[H + j] + r[H + j] + bh[H + j]);
            const scalar_t hn = r[2 * H + j] + bh[2 * H + j];
            const scalar_t ng = A::tanh(xp[2 * H + j] + rg * hn);
            const scalar_t hnew = (scalar_t(1) - zg) * ng + zg * hb[j];
            a[j] = rg;
            a[H + j] = zg;
            a[2 * H + j] = ng;
            a[3 * H + j] = hn;
            hb[j] = hnew;
            hs[j] = hnew;
          }
        }
      }
    });
  });
  return {h_seq, h, saved.acts};
}

// Returns {dx_proj (B,T,3H), dweight_hh (3H,H), dbias_hh (3H,), dh0 (B,H)}.
std::vector<at::Tensor> gru_backward(const c10::optional<at::Tensor>& grad_h_seq,
                                     const c10::optional<at::Tensor>& grad_h_last,
                                     const at::Tensor& weight_hh_in, const at::Tensor& h0_in,
                                     const at::Tensor& h_seq_in, const at::Tensor& acts_in,
                                     const c10::optional<at::Tensor>& lengths) {
  const at::Tensor weight_hh = weight_hh_in.contiguous();
  const at::Tensor h0 = h0_in.contiguous();
  const at::Tensor h_seq = h_seq_in.contiguous();
  const at::Tensor acts = acts_in.contiguous();
  const int64_t B = h_seq.size(0), T = h_seq.size(1), H = h_seq.size(2), G = 3 * H;
  const Lengths L = read_lengths(lengths, B, T);
  const at::Tensor gh = opt_contig(grad_h_seq), ghl = opt_contig(grad_h_last);

  const auto opts = h_seq.options();
  at::Tensor dx = ctrlrnn::pooled_empty({B, T, G}, opts);
  at::Tensor drec = ctrlrnn::pooled_empty({B, T, G}, opts);  // gradient of U h + b_hh per step
  at::Tensor carry_h = ghl.defined() ? ghl.clone() : at::zeros({B, H}, opts);
  at::Tensor rec = at::zeros({B, H}, opts);
  const at::Tensor zeros_h = at::zeros({H}, opts);

  AT_DISPATCH_FLOATING_TYPES(h_seq.scalar_type(), "gru_backward", [&] {
    const scalar_t* z = zeros_h.data_ptr<scalar_t>();
    const scalar_t* a_p = acts.data_ptr<scalar_t>();
    const scalar_t* hs_p = h_seq.data_ptr<scalar_t>();
    const scalar_t* h0_p = h0.data_ptr<scalar_t>();
    scalar_t* rec_p = rec.data_ptr<scalar_t>();
    const scalar_t* ch_p = carry_h.data_ptr<scalar_t>();
    scalar_t* dx_p = dx.data_ptr<scalar_t>();
    scalar_t* dr_p = drec.data_ptr<scalar_t>();
    over_batch_slices(B, [&](int64_t b0, int64_t b1) {
      at::Tensor rec_s = rec.narrow(0, b0, b1 - b0);
      const int64_t ml = L.max_in(b0, b1);
      const StepGemm<scalar_t> gemm(weight_hh, /*transpose=*/false, b1 - b0);
      for (int64_t t = T - 1; t >= 0; --t) {
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t bt = b * T + t;
          scalar_t* __restrict d = dx_p + bt * G;
          scalar_t* __restrict dr = dr_p + bt * G;
          if (t >= L.len[b]) {
            fill_zero(d, G);
            fill_zero(dr, G);
            continue;
          }
          // dh_in may alias the output row (both in rec): read before write, element-wise.
          const scalar_t* dh_in = incoming(L, b, t, static_cast<const scalar_t*>(rec_p), ch_p, H);
          scalar_t* out = rec_p + b * H;
          const scalar_t* __restrict ghs = row_or<scalar_t>(gh, bt * H, z);
          const scalar_t* __restrict a = a_p + bt * 4 * H;
          const scalar_t* __restrict hp = t > 0 ? hs_p + (bt - 1) * H : h0_p + b * H;
CTRLRNN_SIMD
          for (int64_t j = 0; j < H; ++j) {
            const scalar_t rg = a[j], zg = a[H + j], ng = a[2 * H + j], hn = a[3 * H + j];
            const scalar_t dh = dh_in[j] + ghs[j];
            const scalar_t dn = dh * (scalar_t(1) - zg) * (scalar_t(1) - ng * ng);
            const scalar_t dz = dh * (hp[j] - ng) * zg * (scalar_t(1) - zg);
            const scalar_t drg = dn * hn * rg * (scalar_t(1) - rg);
            d[j] = drg;
            d[H + j] = dz;
            d[2 * H + j] = dn;
            dr[j] = drg;
            dr[H + j] = dz;
            dr[2 * H + j] = dn * rg;
            out[j] = dh * zg;  // direct path h_t <- z h_{t-1}; the GEMM adds drec U below
          }
        }
        if (t < ml) gemm.run(drec.select(1, t).narrow(0, b0, b1 - b0), rec_s, true);
      }
    });
  });
  at::Tensor dh0 = initial_state_grad(L, rec, carry_h);
  const at::Tensor drec2 = drec.view({B * T, G});
  at::Tensor dW = at::mm(drec2.t(), shifted_states(h0, h_seq).view({B * T, H}));
  at::Tensor db = drec2.sum(0);
  return {dx, dW, db, dh0};
}

// =============================================================================================
// CAS-LSTM, layers l > 1 (eq 7-13), with lambda mixing and the peephole variant (iii), eq 17-18.
// Gate order in x_proj: i, f, c~, o, g (vertical forget gate last).
//   c_t = i c~ + s_f * f c_{t-1} + s_g * g c^{l-1}_t        (eq 12: s_f = 1 - lambda,
//   h_t = o tanh(c_t)                                          s_g = lambda; plain sum: 1, 1)
// Default: g = sig(x_g + U_g h_{t-1}), weight_hh (5H, H).
// Peephole (eq 17): g = sig(x_g + p1 c_{t-1} + p2 c^{l-1}_t), weight_hh (4H, H) (no U_g),
//   peephole = stack(p1, p2) (2, H).
// acts (B, T, 5H) saves i, f, c~, o, g.
// =============================================================================================

template <typename scalar_t, bool PEEP>
void cas_forward_loop(const at::Tensor& x_proj, const at::Tensor& weight_hh,
                      const at::Tensor& lower, const at::Tensor& sf_t, const at::Tensor& sg_t,
                      const at::Tensor& peep, at::Tensor& h, at::Tensor& c, at::Tensor& h_seq,
                      at::Tensor& c_seq, const SavedActs& saved, at::Tensor& rec,
                      const Lengths& L) {
  using A = Act<scalar_t>;
  const int64_t B = x_proj.size(0), T = x_proj.size(1), H = weight_hh.size(1), G = 5 * H;
  const int64_t Gh = weight_hh.size(0);
  const scalar_t* xp_all = x_proj.data_ptr<scalar_t>();
  const scalar_t* low_all = lower.data_ptr<scalar_t>();
  const scalar_t* sf = sf_t.data_ptr<scalar_t>();
  const scalar_t* sg = sg_t.data_ptr<scalar_t>();
  const scalar_t* p1 = PEEP ? peep.data_ptr<scalar_t>() : nullptr;
  const scalar_t* p2 = PEEP ? p1 + H : nullptr;
  const scalar_t* rec_p = rec.data_ptr<scalar_t>();
  scalar_t* h_p = h.data_ptr<scalar_t>();
  scalar_t* c_p = c.data_ptr<scalar_t>();
  scalar_t* hs_p = h_seq.data_ptr<scalar_t>();
  scalar_t* cs_p = c_seq.data_ptr<scalar_t>();
  over_batch_slices(B, [&](int64_t b0, int64_t b1) {
    at::Tensor rec_s = rec.narrow(0, b0, b1 - b0);
    const at::Tensor h_s = h.narrow(0, b0, b1 - b0);
    const int64_t ml = L.max_in(b0, b1);
    const StepGemm<scalar_t> gemm(weight_hh, /*transpose=*/true, b1 - b0);
    for (int64_t t = 0; t < T; ++t) {
      if (t < ml) gemm.run(h_s, rec_s, false);
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t bt = b * T + t;
        scalar_t* __restrict hs = hs_p + bt * H;
        scalar_t* __restrict cs = cs_p + bt * H;
        scalar_t* __restrict a = saved.row<scalar_t>(b, bt, G);
        if (t >= L.len[b]) {
          fill_zero(hs, H);
          fill_zero(cs, H);
          fill_zero(a, G);
          continue;
        }
        const scalar_t* __restrict xp = xp_all + bt * G;
        const scalar_t* __restrict low = low_all + bt * H;
        const scalar_t* __restrict r = rec_p + b * Gh;
        scalar_t* __restrict hb = h_p + b * H;
        scalar_t* __restrict cb = c_p + b * H;
CTRLRNN_SIMD
        for (int64_t j = 0; j < H; ++j) {
          const scalar_t cp = cb[j];
          const scalar_t ig = A::sigmoid(xp[j] + r[j]);
          const scalar_t fg = A::sigmoid(xp[H + j] + r[H + j]);
          const scalar_t cc = A::tanh(xp[2 * H + j] + r[2 * H + j]);
          const scalar_t og = A::sigmoid(xp[3 * H + j] + r[3 * H + j]);
          scalar_t gpre = xp[4 * H + j];
          if constexpr (PEEP) {
            gpre += p1[j] * cp + p2[j] * low[j];
          } else {
            gpre += r[4 * H + j];
          }
          const scalar_t gg = A::sigmoid(gpre);
          const scalar_t cn = ig * cc + sf[j] * fg * cp + sg[j] * gg * low[j];
          const scalar_t hn = og * A::tanh(cn);
          a[j] = ig;
          a[H + j] = fg;
          a[2 * H + j] = cc;
          a[3 * H + j] = og;
          a[4 * H + j] = gg;
          cb[j] = cn;
          hb[j] = hn;
          cs[j] = cn;
          hs[j] = hn;
        }
      }
    }
  });
}

std::vector<at::Tensor> cas_lstm_forward(const at::Tensor& x_proj_in,
                                         const at::Tensor& weight_hh_in,
                                         const at::Tensor& lower_in, const at::Tensor& scale_f_in,
                                         const at::Tensor& scale_g_in,
                                         const c10::optional<at::Tensor>& peephole,
                                         const at::Tensor& h0_in, const at::Tensor& c0_in,
                                         const c10::optional<at::Tensor>& lengths, bool save) {
  const bool peep = peephole.has_value() && peephole->defined();
  check_common(x_proj_in, weight_hh_in, 5, peep ? 4 : 5, "cas_lstm");
  const at::Tensor x_proj = x_proj_in.contiguous();
  const at::Tensor weight_hh = weight_hh_in.contiguous();
  const at::Tensor lower = lower_in.contiguous();
  const at::Tensor sf = scale_f_in.contiguous(), sg = scale_g_in.contiguous();
  const int64_t B = x_proj.size(0), T = x_proj.size(1), H = weight_hh.size(1);
  TORCH_CHECK(lower.dim() == 3 && lower.size(0) == B && lower.size(1) == T && lower.size(2) == H,
              "cas_lstm: lower_c must be (", B, ", ", T, ", ", H, "), got ", lower.sizes());
  TORCH_CHECK(sf.numel() == H && sg.numel() == H, "cas_lstm: scale_f and scale_g must have ", H,
              " elements");
  at::Tensor pp;
  if (peep) {
    pp = peephole->contiguous();
    TORCH_CHECK(pp.dim() == 2 && pp.size(0) == 2 && pp.size(1) == H,
                "cas_lstm: peephole must be (2, ", H, "), got ", pp.sizes());
  }
  check_state(h0_in, B, H, x_proj, "h0");
  check_state(c0_in, B, H, x_proj, "c0");
  const Lengths L = read_lengths(lengths, B, T);

  at::Tensor h = h0_in.contiguous().clone();
  at::Tensor c = c0_in.contiguous().clone();
  at::Tensor h_seq = ctrlrnn::pooled_empty({B, T, H}, x_proj.options());
  at::Tensor c_seq = ctrlrnn::pooled_empty({B, T, H}, x_proj.options());
  const SavedActs saved(save, B, T, 5 * H, x_proj.options());
  at::Tensor rec = at::zeros({B, weight_hh.size(0)}, x_proj.options());
  AT_DISPATCH_FLOATING_TYPES(x_proj.scalar_type(), "cas_lstm_forward", [&] {
    if (peep) {
      cas_forward_loop<scalar_t, true>(x_proj, weight_hh, lower, sf, sg, pp, h, c, h_seq, c_seq,
                                       saved, rec, L);
    } else {
      cas_forward_loop<scalar_t, false>(x_proj, weight_hh, lower, sf, sg, pp, h, c, h_seq, c_seq,
                                        saved, rec, L);
    }
  });
  return {h_seq, c_seq, h, c, saved.acts};
}

template <typename scalar_t, bool PEEP>
void cas_backward_loop(const at::Tensor& gh, const at::Tensor& gc, const at::Tensor& weight_hh,
                       const at::Tensor& lower, const at::Tensor& sf_t, const at::Tensor& sg_t,
                       const at::Tensor& peep, const at::Tensor& c0, const at::Tensor& c_seq,
                       const at::Tensor& acts, at::Tensor& dx, at::Tensor& dlow,
                       at::Tensor& acc, at::Tensor& carry_h, at::Tensor& carry_c,
                       at::Tensor& rec, const at::Tensor& zeros_h, const Lengths& L) {
  using A = Act<scalar_t>;
  const int64_t B = c_seq.size(0), T = c_seq.size(1), H = c_seq.size(2), G = 5 * H;
  const int64_t Gh = weight_hh.size(0);
  const scalar_t* z = zeros_h.data_ptr<scalar_t>();
  const scalar_t* a_p = acts.data_ptr<scalar_t>();
  const scalar_t* cs_p = c_seq.data_ptr<scalar_t>();
  const scalar_t* c0_p = c0.data_ptr<scalar_t>();
  const scalar_t* low_all = lower.data_ptr<scalar_t>();
  const scalar_t* sf = sf_t.data_ptr<scalar_t>();
  const scalar_t* sg = sg_t.data_ptr<scalar_t>();
  const scalar_t* p1 = PEEP ? peep.data_ptr<scalar_t>() : nullptr;
  const scalar_t* p2 = PEEP ? p1 + H : nullptr;
  const scalar_t* rec_p = rec.data_ptr<scalar_t>();
  const scalar_t* ch_p = carry_h.data_ptr<scalar_t>();
  scalar_t* cc_p = carry_c.data_ptr<scalar_t>();
  scalar_t* dx_p = dx.data_ptr<scalar_t>();
  scalar_t* dl_p = dlow.data_ptr<scalar_t>();
  scalar_t* acc_p = acc.data_ptr<scalar_t>();  // (B, 4, H): d s_f, d s_g, d p1, d p2
  over_batch_slices(B, [&](int64_t b0, int64_t b1) {
    at::Tensor rec_s = rec.narrow(0, b0, b1 - b0);
    const int64_t ml = L.max_in(b0, b1);
    const StepGemm<scalar_t> gemm(weight_hh, /*transpose=*/false, b1 - b0);
    for (int64_t t = T - 1; t >= 0; --t) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t bt = b * T + t;
        scalar_t* __restrict d = dx_p + bt * G;
        scalar_t* __restrict dl = dl_p + bt * H;
        if (t >= L.len[b]) {
          fill_zero(d, G);
          fill_zero(dl, H);
          continue;
        }
        const scalar_t* __restrict dh_in = incoming(L, b, t, rec_p, ch_p, H);
        const scalar_t* __restrict ghs = row_or<scalar_t>(gh, bt * H, z);
        const scalar_t* __restrict gcs = row_or<scalar_t>(gc, bt * H, z);
        const scalar_t* __restrict a = a_p + bt * G;
        const scalar_t* __restrict cs = cs_p + bt * H;
        const scalar_t* __restrict cpv = t > 0 ? cs_p + (bt - 1) * H : c0_p + b * H;
        const scalar_t* __restrict low = low_all + bt * H;
        scalar_t* __restrict dcb = cc_p + b * H;
        scalar_t* __restrict acc_sf = acc_p + b * 4 * H;
        scalar_t* __restrict acc_sg = acc_sf + H;
        scalar_t* __restrict acc_p1 = acc_sf + 2 * H;
        scalar_t* __restrict acc_p2 = acc_sf + 3 * H;
CTRLRNN_SIMD
        for (int64_t j = 0; j < H; ++j) {
          const scalar_t ig = a[j], fg = a[H + j], cc = a[2 * H + j], og = a[3 * H + j],
                         gg = a[4 * H + j];
          const scalar_t cp = cpv[j], lw = low[j];
          const scalar_t tc = A::tanh(cs[j]);
          const scalar_t dh = dh_in[j] + ghs[j];
          const scalar_t dc = dcb[j] + gcs[j] + dh * og * (scalar_t(1) - tc * tc);
          const scalar_t dgp = dc * sg[j] * lw * gg * (scalar_t(1) - gg);
          d[j] = dc * cc * ig * (scalar_t(1) - ig);
          d[H + j] = dc * sf[j] * cp * fg * (scalar_t(1) - fg);
          d[2 * H + j] = dc * ig * (scalar_t(1) - cc * cc);
          d[3 * H + j] = dh * tc * og * (scalar_t(1) - og);
          d[4 * H + j] = dgp;
          acc_sf[j] += dc * fg * cp;
          acc_sg[j] += dc * gg * lw;
          scalar_t dcn = dc * sf[j] * fg;
          scalar_t dlw = dc * sg[j] * gg;
          if constexpr (PEEP) {
            dcn += dgp * p1[j];
            dlw += dgp * p2[j];
            acc_p1[j] += dgp * cp;
            acc_p2[j] += dgp * lw;
          }
          dcb[j] = dcn;
          dl[j] = dlw;
        }
      }
      if (t < ml) {
        gemm.run(dx.select(1, t).narrow(0, b0, b1 - b0).narrow(1, 0, Gh), rec_s, false);
      }
    }
  });
}

// Returns {dx_proj (B,T,5H), dweight_hh, dlower_c (B,T,H), dscale_f (H,), dscale_g (H,),
//          dpeephole (2,H) (zeros when no peephole), dh0, dc0}.
std::vector<at::Tensor> cas_lstm_backward(
    const c10::optional<at::Tensor>& grad_h_seq, const c10::optional<at::Tensor>& grad_c_seq,
    const c10::optional<at::Tensor>& grad_h_last, const c10::optional<at::Tensor>& grad_c_last,
    const at::Tensor& weight_hh_in, const at::Tensor& lower_in, const at::Tensor& scale_f_in,
    const at::Tensor& scale_g_in, const c10::optional<at::Tensor>& peephole,
    const at::Tensor& h0_in, const at::Tensor& c0_in, const at::Tensor& h_seq_in,
    const at::Tensor& c_seq_in, const at::Tensor& acts_in,
    const c10::optional<at::Tensor>& lengths) {
  const bool peep = peephole.has_value() && peephole->defined();
  const at::Tensor weight_hh = weight_hh_in.contiguous();
  const at::Tensor lower = lower_in.contiguous();
  const at::Tensor sf = scale_f_in.contiguous(), sg = scale_g_in.contiguous();
  const at::Tensor pp = peep ? peephole->contiguous() : at::Tensor();
  const at::Tensor h0 = h0_in.contiguous(), c0 = c0_in.contiguous();
  const at::Tensor h_seq = h_seq_in.contiguous(), c_seq = c_seq_in.contiguous();
  const at::Tensor acts = acts_in.contiguous();
  const int64_t B = h_seq.size(0), T = h_seq.size(1), H = h_seq.size(2), G = 5 * H;
  const int64_t Gh = weight_hh.size(0);
  const Lengths L = read_lengths(lengths, B, T);
  const at::Tensor gh = opt_contig(grad_h_seq), gc = opt_contig(grad_c_seq);
  const at::Tensor ghl = opt_contig(grad_h_last), gcl = opt_contig(grad_c_last);

  const auto opts = h_seq.options();
  at::Tensor dx = ctrlrnn::pooled_empty({B, T, G}, opts);
  at::Tensor dlow = ctrlrnn::pooled_empty({B, T, H}, opts);
  at::Tensor acc = at::zeros({B, 4, H}, opts);
  at::Tensor carry_h = ghl.defined() ? ghl.clone() : at::zeros({B, H}, opts);
  at::Tensor carry_c = gcl.defined() ? gcl.clone() : at::zeros({B, H}, opts);
  at::Tensor rec = at::zeros({B, H}, opts);
  const at::Tensor zeros_h = at::zeros({H}, opts);

  AT_DISPATCH_FLOATING_TYPES(h_seq.scalar_type(), "cas_lstm_backward", [&] {
    if (peep) {
      cas_backward_loop<scalar_t, true>(gh, gc, weight_hh, lower, sf, sg, pp, c0, c_seq, acts, dx,
                                        dlow, acc, carry_h, carry_c, rec, zeros_h, L);
    } else {
      cas_backward_loop<scalar_t, false>(gh, gc, weight_hh, lower, sf, sg, pp, c0, c_seq, acts,
                                         dx, dlow, acc, carry_h, carry_c, rec, zeros_h, L);
    }
  });
  at::Tensor dh0 = initial_state_grad(L, rec, carry_h);
  at::Tensor dW = at::mm(dx.view({B * T, G}).narrow(1, 0, Gh).t(),
                         shifted_states(h0, h_seq).view({B * T, H}));
  at::Tensor accs = acc.sum(0);  // (4, H)
  at::Tensor dsf = accs[0].reshape(sf.sizes()).clone();
  at::Tensor dsg = accs[1].reshape(sg.sizes()).clone();
  at::Tensor dpp = accs.narrow(0, 2, 2).clone();
  return {dx, dW, dlow, dsf, dsg, dpp, dh0, carry_c};
}

// =============================================================================================
// nCARNN (CARNN eq 3). x_proj gate order: u, f, e with x_u = W^e_u e_m + b_u,
// x_f = W^e_f e_m + b_f, x_e = ebar_m = W_e e_m + b_e; ctx = [W^c_u c, W^c_f c] (B, 2H) is the
// context projection, broadcast over time; weight_hh = [W^h_u; W^h_f] (2H, H).
//   g^u = sig(x_u + ctx_u + W^h_u h_{m-1}), g^f = sig(x_f + ctx_f + W^h_f h_{m-1}),
//   h_m = g^u (g^f ebar_m) + (1 - g^u) h_{m-1}
// acts (B, T, 2H) saves g^u, g^f.
// =============================================================================================

std::vector<at::Tensor> ncarnn_forward(const at::Tensor& x_proj_in, const at::Tensor& weight_hh_in,
                                       const at::Tensor& ctx_in, const at::Tensor& h0_in,
                                       const c10::optional<at::Tensor>& lengths, bool save) {
  check_common(x_proj_in, weight_hh_in, 3, 2, "ncarnn");
  const at::Tensor x_proj = x_proj_in.contiguous();
  const at::Tensor weight_hh = weight_hh_in.contiguous();
  const at::Tensor ctx = ctx_in.contiguous();
  const int64_t B = x_proj.size(0), T = x_proj.size(1), H = weight_hh.size(1), G = 3 * H;
  TORCH_CHECK(ctx.dim() == 2 && ctx.size(0) == B && ctx.size(1) == 2 * H,
              "ncarnn: context_proj must be (", B, ", ", 2 * H, "), got ", ctx.sizes());
  check_state(h0_in, B, H, x_proj, "h0");
  const Lengths L = read_lengths(lengths, B, T);

  at::Tensor h = h0_in.contiguous().clone();
  at::Tensor h_seq = ctrlrnn::pooled_empty({B, T, H}, x_proj.options());
  const SavedActs saved(save, B, T, 2 * H, x_proj.options());
  at::Tensor rec = at::zeros({B, 2 * H}, x_proj.options());

  AT_DISPATCH_FLOATING_TYPES(x_proj.scalar_type(), "ncarnn_forward", [&] {
    using A = Act<scalar_t>;
    const scalar_t* xp_all = x_proj.data_ptr<scalar_t>();
    const scalar_t* ctx_p = ctx.data_ptr<scalar_t>();
    const scalar_t* rec_p = rec.data_ptr<scalar_t>();
    scalar_t* h_p = h.data_ptr<scalar_t>();
    scalar_t* hs_p = h_seq.data_ptr<scalar_t>();
    over_batch_slices(B, [&](int64_t b0, int64_t b1) {
      at::Tensor rec_s = rec.narrow(0, b0, b1 - b0);
      const at::Tensor h_s = h.narrow(0, b0, b1 - b0);
      const int64_t ml = L.max_in(b0, b1);
      const StepGemm<scalar_t> gemm(weight_hh, /*transpose=*/true, b1 - b0);
      for (int64_t t = 0; t < T; ++t) {
        if (t < ml) gemm.run(h_s, rec_s, false);
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t bt = b * T + t;
          scalar_t* __restrict hs = hs_p + bt * H;
          scalar_t* __restrict a = saved.row<scalar_t>(b, bt, 2 * H);
          if (t >= L.len[b]) {
            fill_zero(hs, H);
            fill_zero(a, 2 * H);
            continue;
          }
          const scalar_t* __restrict xp = xp_all + bt * G;
          const scalar_t* __restrict cx = ctx_p + b * 2 * H;
          const scalar_t* __restrict r = rec_p + b * 2 * H;
          scalar_t* __restrict hb = h_p + b * H;
CTRLRNN_SIMD
          for (int64_t j = 0; j < H; ++j) {
            const scalar_t ug = A::sigmoid(xp[j] + cx[j] + r[j]);
            const scalar_t fg = A::sigmoid(xp[H + j] + cx[H + j] + r[H + j]);
            const scalar_t hnew = ug * (fg * xp[2 * H + j]) + (scalar_t(1) - ug) * hb[j];
            a[j] = ug;
            a[H + j] = fg;
            hb[j] = hnew;
            hs[j] = hnew;
          }
        }
      }
    });
  });
  return {h_seq, h, saved.acts};
}

// Returns {dx_proj (B,T,3H), dweight_hh (2H,H), dcontext_proj (B,2H), dh0 (B,H)}.
std::vector<at::Tensor> ncarnn_backward(const c10::optional<at::Tensor>& grad_h_seq,
                                        const c10::optional<at::Tensor>& grad_h_last,
                                        const at::Tensor& x_proj_in, const at::Tensor& weight_hh_in,
                                        const at::Tensor& h0_in, const at::Tensor& h_seq_in,
                                        const at::Tensor& acts_in,
                                        const c10::optional<at::Tensor>& lengths) {
  const at::Tensor x_proj = x_proj_in.contiguous();
  const at::Tensor weight_hh = weight_hh_in.contiguous();
  const at::Tensor h0 = h0_in.contiguous();
  const at::Tensor h_seq = h_seq_in.contiguous();
  const at::Tensor acts = acts_in.contiguous();
  const int64_t B = h_seq.size(0), T = h_seq.size(1), H = h_seq.size(2), G = 3 * H;
  const Lengths L = read_lengths(lengths, B, T);
  const at::Tensor gh = opt_contig(grad_h_seq), ghl = opt_contig(grad_h_last);

  const auto opts = h_seq.options();
  at::Tensor dx = ctrlrnn::pooled_empty({B, T, G}, opts);
  at::Tensor dctx = at::zeros({B, 2 * H}, opts);
  at::Tensor carry_h = ghl.defined() ? ghl.clone() : at::zeros({B, H}, opts);
  at::Tensor rec = at::zeros({B, H}, opts);
  const at::Tensor zeros_h = at::zeros({H}, opts);

  AT_DISPATCH_FLOATING_TYPES(h_seq.scalar_type(), "ncarnn_backward", [&] {
    const scalar_t* z = zeros_h.data_ptr<scalar_t>();
    const scalar_t* xp_all = x_proj.data_ptr<scalar_t>();
    const scalar_t* a_p = acts.data_ptr<scalar_t>();
    const scalar_t* hs_p = h_seq.data_ptr<scalar_t>();
    const scalar_t* h0_p = h0.data_ptr<scalar_t>();
    scalar_t* rec_p = rec.data_ptr<scalar_t>();
    const scalar_t* ch_p = carry_h.data_ptr<scalar_t>();
    scalar_t* dx_p = dx.data_ptr<scalar_t>();
    scalar_t* dctx_p = dctx.data_ptr<scalar_t>();
    over_batch_slices(B, [&](int64_t b0, int64_t b1) {
      at::Tensor rec_s = rec.narrow(0, b0, b1 - b0);
      const int64_t ml = L.max_in(b0, b1);
      const StepGemm<scalar_t> gemm(weight_hh, /*transpose=*/false, b1 - b0);
      for (int64_t t = T - 1; t >= 0; --t) {
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t bt = b * T + t;
          scalar_t* __restrict d = dx_p + bt * G;
          if (t >= L.len[b]) {
            fill_zero(d, G);
            continue;
          }
          const scalar_t* dh_in = incoming(L, b, t, static_cast<const scalar_t*>(rec_p), ch_p, H);
          scalar_t* out = rec_p + b * H;
          const scalar_t* __restrict ghs = row_or<scalar_t>(gh, bt * H, z);
          const scalar_t* __restrict xp = xp_all + bt * G;
          const scalar_t* __restrict a = a_p + bt * 2 * H;
          const scalar_t* __restrict hp = t > 0 ? hs_p + (bt - 1) * H : h0_p + b * H;
          scalar_t* __restrict dcx = dctx_p + b * 2 * H;
CTRLRNN_SIMD
          for (int64_t j = 0; j < H; ++j) {
            const scalar_t ug = a[j], fg = a[H + j], e = xp[2 * H + j];
            const scalar_t dh = dh_in[j] + ghs[j];
            const scalar_t du = dh * (fg * e - hp[j]) * ug * (scalar_t(1) - ug);
            const scalar_t df = dh * ug * e * fg * (scalar_t(1) - fg);
            d[j] = du;
            d[H + j] = df;
            d[2 * H + j] = dh * ug * fg;
            dcx[j] += du;
            dcx[H + j] += df;
            out[j] = dh * (scalar_t(1) - ug);  // direct path; the GEMM adds dG U below
          }
        }
        if (t < ml) {
          gemm.run(dx.select(1, t).narrow(0, b0, b1 - b0).narrow(1, 0, 2 * H), rec_s, true);
        }
      }
    });
  });
  at::Tensor dh0 = initial_state_grad(L, rec, carry_h);
  at::Tensor dW = at::mm(dx.view({B * T, G}).narrow(1, 0, 2 * H).t(),
                         shifted_states(h0, h_seq).view({B * T, H}));
  return {dx, dW, dctx, dh0};
}

int64_t num_threads() { return at::get_num_threads(); }

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "ctrlrnn fused gated cells (LSTM, GRU, CAS-LSTM, nCARNN) on CPU";
  m.def("num_threads", &num_threads, "at::get_num_threads() as seen by this extension");
  ctrlrnn::bind_output_pool(m);
  m.def("mkl_packed_gemm", &mkl::available,
        "whether float32 per-step GEMMs use MKL's packed weights (else at::mm_out)");
  m.def("lstm_forward", &lstm_forward, "LSTM forward -> h_seq, c_seq, h_last, c_last, acts");
  m.def("lstm_backward", &lstm_backward, "LSTM backward -> dx_proj, dweight_hh, dh0, dc0");
  m.def("gru_forward", &gru_forward, "GRU forward -> h_seq, h_last, acts");
  m.def("gru_backward", &gru_backward, "GRU backward -> dx_proj, dweight_hh, dbias_hh, dh0");
  m.def("cas_lstm_forward", &cas_lstm_forward,
        "CAS-LSTM forward -> h_seq, c_seq, h_last, c_last, acts");
  m.def("cas_lstm_backward", &cas_lstm_backward,
        "CAS-LSTM backward -> dx_proj, dweight_hh, dlower_c, dscale_f, dscale_g, dpeephole, dh0, "
        "dc0");
  m.def("ncarnn_forward", &ncarnn_forward, "nCARNN forward -> h_seq, h_last, acts");
  m.def("ncarnn_backward", &ncarnn_backward,
        "nCARNN backward -> dx_proj, dweight_hh, dcontext_proj, dh0");
}
