// QRNN f-, fo- and ifo-pooling (QRNN paper eq 3-5) with zoneout (eq 6) on CPU, fused with the
// gate activations of eq 1-2: the kernels read raw pre-activations.
//
// Layout and threading follow linear_scan.cpp: batch-first contiguous (B, T, G*H), work split
// over (batch, block of channels), time walked with the state in registers.

#include <ATen/ATen.h>
#include <torch/library.h>

#include "kernel_common.h"
#include "runtime/runtime.h"

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace {

using namespace ctrlrnn::kernels;  // NOLINT: block_size, grain_for, lengths, ...
using namespace ctrlrnn::runtime;  // NOLINT: store_row, stream_fence, use_streaming_stores

// ----------------------------------------------------------------------------------------------
// QRNN pooling. gates: (B, T, G*H) raw pre-activations laid out [Z | F | O | I]:
//   mode 0 = f   (G=2): c_t = f c_{t-1} + (1-f) z,  h_t = c_t             (eq 3)
//   mode 1 = fo  (G=3): c_t = f c_{t-1} + (1-f) z,  h_t = o c_t           (eq 4)
//   mode 2 = ifo (G=4): c_t = f c_{t-1} + i z,      h_t = o c_t           (eq 5)
// with z = tanh(Z), f = sigmoid(F), o = sigmoid(O), i = sigmoid(I) (eq 1-2). Zoneout (eq 6):
// 1 - f is replaced by k (1 - f), where k is a 0/1 keep mask (B, T, H) in training or the
// constant keep probability 1 - p in evaluation (its expectation).
// bias (G*H,), optional: the convolution's bias b of eq 1-2, added to the pre-activations as
// they are read (the layer's GEMM then writes W x alone, with no pass filling its output with
// the bias), its gradient summed as the pre-activations' gradient is written; zeros stand in
// for an absent one.

inline int64_t gates_of(int64_t mode) { return mode == 0 ? 2 : (mode == 1 ? 3 : 4); }

// z, f, o, i of one step over n channels (eq 1-2) from the step's pre-activations gt and the
// bias row bt (both at the block's first channel, gate g at + g H), one simple loop each so
// that they vectorise. M: the runtime's activations (vector_math.h).
template <int MODE, typename M, typename scalar_t, typename acc_t>
inline void qrnn_activations(const scalar_t* __restrict__ gt, const scalar_t* __restrict__ bt,
                             int64_t H, int64_t n, acc_t* __restrict__ za,
                             acc_t* __restrict__ fa, acc_t* __restrict__ oa,
                             acc_t* __restrict__ ia) {
  for (int64_t j = 0; j < n; ++j) za[j] = M::tanh(acc_t(gt[j]) + acc_t(bt[j]));
  for (int64_t j = 0; j < n; ++j) fa[j] = M::sigmoid(acc_t(gt[H + j]) + acc_t(bt[H + j]));
  if constexpr (MODE != 0) {
    for (int64_t j = 0; j < n; ++j) {
      oa[j] = M::sigmoid(acc_t(gt[2 * H + j]) + acc_t(bt[2 * H + j]));
    }
  }
  if constexpr (MODE == 2) {
    for (int64_t j = 0; j < n; ++j) {
      ia[j] = M::sigmoid(acc_t(gt[3 * H + j]) + acc_t(bt[3 * H + j]));
    }
  }
}

template <typename scalar_t, int MODE, bool KEEP, bool STREAM, typename M>
void qrnn_forward_kernel(const scalar_t* gates, const scalar_t* bias, const scalar_t* c0,
                         const scalar_t* keep, double keep_scale, const int64_t* lengths,
                         scalar_t* hout, scalar_t* cout, scalar_t* clast, int64_t B, int64_t T,
                         int64_t H) {
  // MODE and KEEP are compile-time so that the inner loop over channels has no branches and
  // vectorises.
  using acc_t = at::opmath_type<scalar_t>;
  constexpr int64_t G = MODE == 0 ? 2 : (MODE == 1 ? 3 : 4);
  const int64_t kBlock = block_size(B, H, T);
  const int64_t nblk = (H + kBlock - 1) / kBlock;
  const acc_t ks = acc_t(keep_scale);
  parallel_recurrence(0, B * nblk, grain_for(T, kBlock), [&](int64_t begin, int64_t end) {
    // state, then the activations of one step: z, f, o (or 1), i, k, then the step's h (c is
    // written from the state)
    std::vector<acc_t> buf(7 * kBlock);
    acc_t* __restrict__ c = buf.data();
    acc_t* __restrict__ za = c + kBlock;
    acc_t* __restrict__ fa = za + kBlock;
    acc_t* __restrict__ oa = fa + kBlock;
    acc_t* __restrict__ ia = oa + kBlock;
    acc_t* __restrict__ ka = ia + kBlock;
    acc_t* __restrict__ hb = ka + kBlock;
    for (int64_t w = begin; w < end; ++w) {
      const int64_t bi = w / nblk, h0i = (w % nblk) * kBlock;
      const int64_t n = std::min(kBlock, H - h0i);
      const int64_t L = length_of(lengths, bi, T);
      for (int64_t j = 0; j < n; ++j) c[j] = c0 ? acc_t(c0[bi * H + h0i + j]) : acc_t(0);
      for (int64_t j = 0; j < n; ++j) ka[j] = ks;
      for (int64_t t = 0; t < L; ++t) {
        const scalar_t* __restrict__ gt = gates + (bi * T + t) * G * H + h0i;
        scalar_t* __restrict__ ht = hout + (bi * T + t) * H + h0i;
        scalar_t* __restrict__ ct = cout + (bi * T + t) * H + h0i;
        // activations (eq 1-2), one simple loop each so that they vectorise
        qrnn_activations<MODE, M>(gt, bias + h0i, H, n, za, fa, oa, ia);
        if constexpr (KEEP) {
          const scalar_t* __restrict__ kt = keep + (bi * T + t) * H + h0i;
          for (int64_t j = 0; j < n; ++j) ka[j] = acc_t(kt[j]) * ks;
        }
        // pooling (eq 3-5) with zoneout (eq 6)
        for (int64_t j = 0; j < n; ++j) {
          const acc_t omf = ka[j] * (acc_t(1) - fa[j]);  // zoneout-ed (1 - f)
          const acc_t inp = MODE == 2 ? ia[j] * za[j] : omf * za[j];
          const acc_t cj = (acc_t(1) - omf) * c[j] + inp;
          c[j] = cj;
          hb[j] = MODE == 0 ? cj : oa[j] * cj;
        }
        store_row<STREAM>(ct, c, n);
        store_row<STREAM>(ht, hb, n);
      }
      for (int64_t t = L; t < T; ++t) {
        for (int64_t j = 0; j < n; ++j) {
          hout[(bi * T + t) * H + h0i + j] = scalar_t(0);
          cout[(bi * T + t) * H + h0i + j] = scalar_t(0);
        }
      }
      for (int64_t j = 0; j < n; ++j) clast[bi * H + h0i + j] = scalar_t(c[j]);
    }
    stream_fence(STREAM);
  });
}

// Calls fn(mode, keep, flavour) with the mode and flags as compile-time constants
// (std::integral_constant<int, MODE>, std::bool_constant<KEEP>) and the runtime's Flavour
// (runtime.h: streaming stores as its value, the activations as its Math). Streaming stores are
// float's only (store_row): other types never stream.
template <typename scalar_t, typename Fn>
void dispatch_pooling(int64_t mode, bool keep, bool stream, Fn&& fn) {
  const auto with_mode = [&](auto m) {
    const auto with_keep = [&](auto k) {
      with_flavour<at::opmath_type<scalar_t>, Saturating, std::is_same_v<scalar_t, float>>(
          stream, [&](auto st) { fn(m, k, st); });
    };
    keep ? with_keep(std::true_type{}) : with_keep(std::false_type{});
  };
  if (mode == 0) {
    with_mode(std::integral_constant<int, 0>{});
  } else if (mode == 1) {
    with_mode(std::integral_constant<int, 1>{});
  } else {
    with_mode(std::integral_constant<int, 2>{});
  }
}

// One step of the pooling's backward over n channels: the gate gradients of step t and the
// carried cell gradient (eq 3-5 and 6 differentiated). A function of its own so that the
// compiler sees restrict-qualified parameters: inlined into the kernel's loops, the channel loop
// did not vectorise (GCC 12 kept it scalar for the aliasing of the locals).
// The gate gradients go to `dgt`, gate g's n values at dgt + g * stride: the output row itself,
// or a buffer that the caller then streams out.
template <typename scalar_t, int MODE, typename out_t>
__attribute__((noinline)) void qrnn_backward_step(
    int64_t n, int64_t stride, out_t* __restrict__ dgt,
    const scalar_t* __restrict__ ct, const scalar_t* __restrict__ cp,
    const scalar_t* __restrict__ ght, const scalar_t* __restrict__ gct,
    at::opmath_type<scalar_t>* __restrict__ carry, const at::opmath_type<scalar_t>* __restrict__ za,
    const at::opmath_type<scalar_t>* __restrict__ fa,
    const at::opmath_type<scalar_t>* __restrict__ oa,
    const at::opmath_type<scalar_t>* __restrict__ ia,
    const at::opmath_type<scalar_t>* __restrict__ ka) {
  using acc_t = at::opmath_type<scalar_t>;
  for (int64_t j = 0; j < n; ++j) {
    const acc_t z = za[j], f = fa[j], k = ka[j];
    const acc_t omf = k * (acc_t(1) - f);
    const acc_t c = acc_t(ct[j]);
    const acc_t cprev = acc_t(cp[j]);
    const acc_t dh = acc_t(ght[j]);
    acc_t dc = carry[j] + acc_t(gct[j]);
    if constexpr (MODE == 0) {
      dc += dh;
    } else {
      const acc_t o = oa[j];
      dgt[2 * stride + j] = out_t(dh * c * o * (acc_t(1) - o));
      dc += dh * o;
    }
    acc_t dz, df;
    if constexpr (MODE == 2) {
      // c = (1 - omf) c_prev + i z;   omf = k (1 - f)  ->  d f = k * dc * c_prev
      const acc_t i = ia[j];
      dgt[3 * stride + j] = out_t(dc * z * i * (acc_t(1) - i));
      dz = dc * i;
      df = k * dc * cprev;
    } else {
      // c = c_prev + omf (z - c_prev)  ->  d omf = dc (z - c_prev), d f = -k d omf
      dz = dc * omf;
      df = -k * dc * (z - cprev);
    }
    dgt[j] = out_t(dz * (acc_t(1) - z * z));
    dgt[stride + j] = out_t(df * f * (acc_t(1) - f));
    carry[j] = dc * (acc_t(1) - omf);
  }
}

// db_part: (B, G*H) each batch row's sums over its steps of dgates (the bias gradient's terms),
// or null when no bias gradient is wanted.
template <typename scalar_t, int MODE, bool KEEP, bool STREAM, typename M>
void qrnn_backward_kernel(const scalar_t* gh, const scalar_t* gc, const scalar_t* gclast,
                          const scalar_t* gates, const scalar_t* bias, const scalar_t* cseq,
                          const scalar_t* c0, const scalar_t* keep, double keep_scale,
                          const int64_t* lengths, scalar_t* dgates, scalar_t* dc0,
                          at::opmath_type<scalar_t>* db_part, int64_t B, int64_t T, int64_t H) {
  using acc_t = at::opmath_type<scalar_t>;
  constexpr int64_t G = MODE == 0 ? 2 : (MODE == 1 ? 3 : 4);
  const int64_t kBlock = block_size(B, H, T);
  const int64_t nblk = (H + kBlock - 1) / kBlock;
  const acc_t ks = acc_t(keep_scale);
  parallel_recurrence(0, B * nblk, grain_for(T, kBlock), [&](int64_t begin, int64_t end) {
    // carry, then the activations of one step: z, f, o, i, k
    std::vector<acc_t> buf(6 * kBlock, acc_t(0));
    acc_t* __restrict__ carry = buf.data();
    acc_t* __restrict__ za = carry + kBlock;
    acc_t* __restrict__ fa = za + kBlock;
    acc_t* __restrict__ oa = fa + kBlock;
    acc_t* __restrict__ ia = oa + kBlock;
    acc_t* __restrict__ ka = ia + kBlock;
    std::vector<scalar_t> zero_in(kBlock, scalar_t(0));  // stands in for absent inputs
    std::vector<acc_t> out_buf(STREAM ? G * kBlock : 0);  // a step's gradients, to stream out
    std::vector<acc_t> dbias(db_part ? G * kBlock : 0);   // the bias's sums over steps
    for (int64_t w = begin; w < end; ++w) {
      const int64_t bi = w / nblk, h0i = (w % nblk) * kBlock;
      const int64_t n = std::min(kBlock, H - h0i);
      const int64_t L = length_of(lengths, bi, T);
      for (int64_t j = 0; j < n; ++j) carry[j] = gclast ? acc_t(gclast[bi * H + h0i + j]) : 0;
      for (int64_t j = 0; j < n; ++j) ka[j] = ks;
      std::fill(dbias.begin(), dbias.end(), acc_t(0));
      for (int64_t t = L - 1; t >= 0; --t) {
        const int64_t row = bi * T + t;
        const scalar_t* __restrict__ gt = gates + row * G * H + h0i;
        scalar_t* __restrict__ dgt = dgates + row * G * H + h0i;
        const scalar_t* __restrict__ ct = cseq + row * H + h0i;
        const scalar_t* __restrict__ cp =
            t > 0 ? cseq + (row - 1) * H + h0i : (c0 ? c0 + bi * H + h0i : zero_in.data());
        const scalar_t* __restrict__ ght = gh ? gh + row * H + h0i : zero_in.data();
        const scalar_t* __restrict__ gct = gc ? gc + row * H + h0i : zero_in.data();
        qrnn_activations<MODE, M>(gt, bias + h0i, H, n, za, fa, oa, ia);
        if constexpr (KEEP) {
          const scalar_t* __restrict__ kt = keep + row * H + h0i;
          for (int64_t j = 0; j < n; ++j) ka[j] = acc_t(kt[j]) * ks;
        }
        if constexpr (STREAM) {
          acc_t* ob = out_buf.data();
          qrnn_backward_step<scalar_t, MODE>(n, n, ob, ct, cp, ght, gct, carry, za, fa, oa, ia, ka);
          for (int64_t g = 0; g < G; ++g) store_row<true>(dgt + g * H, ob + g * n, n);
          if (db_part) {
            for (int64_t g = 0; g < G; ++g) {
              accumulate_row(dbias.data() + g * kBlock, ob + g * n, n);
            }
          }
        } else {
          qrnn_backward_step<scalar_t, MODE>(n, H, dgt, ct, cp, ght, gct, carry, za, fa, oa, ia, ka);
          if (db_part) {
            for (int64_t g = 0; g < G; ++g) {
              accumulate_row(dbias.data() + g * kBlock, dgt + g * H, n);
            }
          }
        }
      }
      for (int64_t t = L; t < T; ++t) {
        scalar_t* dgt = dgates + (bi * T + t) * G * H + h0i;
        for (int64_t g = 0; g < G; ++g) {
          for (int64_t j = 0; j < n; ++j) dgt[g * H + j] = scalar_t(0);
        }
      }
      for (int64_t j = 0; j < n; ++j) dc0[bi * H + h0i + j] = scalar_t(carry[j]);
      if (db_part) {
        for (int64_t g = 0; g < G; ++g) {
          acc_t* d = db_part + bi * G * H + g * H + h0i;
          for (int64_t j = 0; j < n; ++j) d[j] = dbias[g * kBlock + j];
        }
      }
    }
    stream_fence(STREAM);
  });
}

void check_bias(const c10::optional<at::Tensor>& bias, const at::Tensor& gates,
                int64_t n) {
  if (!bias.has_value()) return;
  TORCH_CHECK(bias->is_contiguous() && bias->device().is_cpu() && bias->numel() == n &&
                  bias->scalar_type() == gates.scalar_type(),
              "bias must be a contiguous CPU tensor of shape (G*H,) = (", n,
              ",) with the dtype of gates");
}

std::vector<at::Tensor> qrnn_pooling_forward(const at::Tensor& gates,
                                             const c10::optional<at::Tensor>& c0,
                                             const c10::optional<at::Tensor>& keep,
                                             double keep_scale,
                                             const c10::optional<at::Tensor>& lengths,
                                             int64_t mode,
                                             const c10::optional<at::Tensor>& bias) {
  check_btc(gates, "gates");
  TORCH_CHECK(mode >= 0 && mode <= 2, "mode must be 0 (f), 1 (fo) or 2 (ifo)");
  const int64_t G = gates_of(mode);
  const int64_t B = gates.size(0), T = gates.size(1);
  TORCH_CHECK(gates.size(2) % G == 0, "gates last dimension must be a multiple of ", G);
  const int64_t H = gates.size(2) / G;
  check_bias(bias, gates, G * H);
  if (c0.has_value()) {
    TORCH_CHECK(c0->is_contiguous() && c0->numel() == B * H &&
                    c0->scalar_type() == gates.scalar_type(),
                "c0 must be contiguous (B, H) with the dtype of gates");
  }
  if (keep.has_value()) {
    check_btc(*keep, "keep");
    TORCH_CHECK(keep->numel() == B * T * H && keep->scalar_type() == gates.scalar_type(),
                "keep must be (B, T, H) with the dtype of gates");
  }
  const int64_t* lp = lengths_ptr(lengths, B, T);
  auto h = ctrlrnn::runtime::empty({B, T, H}, gates.options());
  auto c = ctrlrnn::runtime::empty({B, T, H}, gates.options());
  auto clast = at::empty({B, H}, gates.options());
  // h and c written: streaming stores from the threshold (float only, see store_row)
  const bool stream = use_streaming_stores(2 * h.numel() * h.element_size());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, gates.scalar_type(), "qrnn_pool", [&] {
    std::vector<scalar_t> zeros;
    const scalar_t* bp = bias_or_zeros(bias, zeros, G * H);
    dispatch_pooling<scalar_t>(mode, keep.has_value(), stream, [&](auto m, auto k, auto st) {
      qrnn_forward_kernel<scalar_t, decltype(m)::value, decltype(k)::value, decltype(st)::value,
                          typename decltype(st)::Math>(
          gates.data_ptr<scalar_t>(), bp, c0.has_value() ? c0->data_ptr<scalar_t>() : nullptr,
          keep.has_value() ? keep->data_ptr<scalar_t>() : nullptr, keep_scale, lp,
          h.data_ptr<scalar_t>(), c.data_ptr<scalar_t>(), clast.data_ptr<scalar_t>(), B, T, H);
    });
  });
  return {h, c, clast};
}

std::vector<at::Tensor> qrnn_pooling_backward(
    const c10::optional<at::Tensor>& grad_h, const c10::optional<at::Tensor>& grad_c,
    const c10::optional<at::Tensor>& grad_clast, const at::Tensor& gates,
    const at::Tensor& cseq, const c10::optional<at::Tensor>& c0,
    const c10::optional<at::Tensor>& keep, double keep_scale,
    const c10::optional<at::Tensor>& lengths, int64_t mode,
    const c10::optional<at::Tensor>& bias) {
  check_btc(gates, "gates");
  check_btc(cseq, "c");
  const int64_t B = gates.size(0), T = gates.size(1), H = cseq.size(2);
  const int64_t G = gates_of(mode);
  check_bias(bias, gates, G * H);
  if (grad_h.has_value()) check_btc(*grad_h, "grad_h");
  if (grad_c.has_value()) check_btc(*grad_c, "grad_c");
  const int64_t* lp = lengths_ptr(lengths, B, T);
  auto dgates = ctrlrnn::runtime::empty_like(gates);
  auto dc0 = at::empty({B, H}, gates.options());
  auto dbias = bias.has_value() ? at::empty({G * H}, gates.options())
                                : at::empty({0}, gates.options());
  const bool stream = use_streaming_stores(dgates.numel() * dgates.element_size());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, gates.scalar_type(), "qrnn_pool_bwd",
                                  [&] {
    using acc_t = at::opmath_type<scalar_t>;
    std::vector<scalar_t> zeros;
    const scalar_t* bp = bias_or_zeros(bias, zeros, G * H);
    std::vector<acc_t> db_part(bias.has_value() ? B * G * H : 0, acc_t(0));
    dispatch_pooling<scalar_t>(mode, keep.has_value(), stream, [&](auto m, auto kp, auto st) {
      qrnn_backward_kernel<scalar_t, decltype(m)::value, decltype(kp)::value,
                           decltype(st)::value, typename decltype(st)::Math>(
          grad_h.has_value() ? grad_h->data_ptr<scalar_t>() : nullptr,
          grad_c.has_value() ? grad_c->data_ptr<scalar_t>() : nullptr,
          grad_clast.has_value() ? grad_clast->data_ptr<scalar_t>() : nullptr,
          gates.data_ptr<scalar_t>(), bp, cseq.data_ptr<scalar_t>(),
          c0.has_value() ? c0->data_ptr<scalar_t>() : nullptr,
          keep.has_value() ? keep->data_ptr<scalar_t>() : nullptr, keep_scale, lp,
          dgates.data_ptr<scalar_t>(), dc0.data_ptr<scalar_t>(),
          bias.has_value() ? db_part.data() : nullptr, B, T, H);
    });
    if (bias.has_value()) {  // d bias: the batch rows' sums over steps, in a fixed order
      sum_rows_into(dbias.data_ptr<scalar_t>(), db_part.data(), B, G * H);
    }
  });
  return {dgates, dc0, dbias};
}

}  // namespace

namespace ctrlrnn {

void register_qrnn_pooling(torch::Library& m) {
  // bias last and optional, as in the custom op's schema (a call without it has no bias)
  m.def("qrnn_pooling_forward(Tensor gates, Tensor? c0, Tensor? keep, float keep_scale, "
        "Tensor? lengths, int mode, Tensor? bias=None) -> Tensor[]", &qrnn_pooling_forward);
  m.def("qrnn_pooling_backward(Tensor? grad_h, Tensor? grad_c, Tensor? grad_last, "
        "Tensor gates, Tensor c_seq, Tensor? c0, Tensor? keep, float keep_scale, "
        "Tensor? lengths, int mode, Tensor? bias=None) -> Tensor[]", &qrnn_pooling_backward);
}

}  // namespace ctrlrnn
