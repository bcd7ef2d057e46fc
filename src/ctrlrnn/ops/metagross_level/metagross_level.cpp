// One METAGROSS tree level on CPU, gates and scan in one pass (the extension `metagross`).
//
// For the k units of one level (METAGROSS paper section 2) and every (batch, step, unit, channel),
// with (pf, po, pz) = P + bias, the base maps F^F, F^O, F^Z = W x_t + b of section 2.2 (the
// level's GEMM writes W x_t; the bias is added here, and its gradient summed here, so that no
// pass over the GEMM's output puts it in or sums it out):
//
//   f = sig(pf + alpha (cf - pf))      eq 2-1: alpha M^F + (1 - alpha) F^F  (f = sig(pf) at leaves)
//   o = sig(po + beta  (co - po))      eq 2-2: beta  M^O + (1 - beta)  F^O  (o = sig(po) at leaves)
//   z = tanh(pz)                       eq 2-3
//   "h" form (as printed, eq 2-4..2-6):  s_t = o (1 - f) s_{t-1} + o f z (+ x_t),  out_t = s_t
//   "c" form (c_{t-1} carried):          s_t = (1 - f) s_{t-1} + f z,  out_t = o s_t (+ x_t)
//
// i.e. the diagonal linear scan s_t = a_t s_{t-1} + b_t with a, b made
// from the gates on the fly: a, b, o, f, z never reach memory. Forward writes out (the "h" form's
// out is its state), the "c" form's state sequence c (saved for backward) and the final state.
// Backward is one reverse pass over time that recomputes f, o, z from the inputs and runs the
// scan's reverse recurrence with the gate gradients:
//
//   d = g_t + carry (h form; g_t o + carry for c);  ga = d s_{t-1};  gb = d;  carry = d a_t
//
// started from the gradient of the final state; carry at the end is the gradient of s_0.
//
// Layouts (batch-first): P (B, T, 3, k, H) with any batch and step strides (the root level's
// P is a column slice of a wider GEMM output), child (B, T, k, 2, H) = the level below's output
// (B, T, 2k*H), alpha and beta (B, T, k), res (B, T, H) shared by the k units, s0 (B, k*H),
// out and c (B, T, k*H). A work item is (batch, block of channels) over all k units, so the
// residual gradient (a sum over units) is local; the depth-gate gradients (sums over channels)
// are summed per block, then over blocks in a fixed order: no atomics, deterministic results.
// With lengths: steps t >= length[b] leave the state unchanged and write zeros (outputs and
// gradients alike). Accumulation in fp32 for fp16/bf16/fp32, fp64 for fp64. Large outputs come
// from the runtime (runtime::empty) and, for float, are written with streaming stores.
//
// The per-row arithmetic (gates, scan step, their gradients) is in metagross_rows.h.

#include <ATen/ATen.h>
#include <torch/library.h>

#include "kernel_common.h"
#include "metagross_rows.h"
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
using ctrlrnn::runtime::stream_fence;
using ctrlrnn::runtime::use_streaming_stores;
using namespace ctrlrnn::metagross_rows;  // NOLINT: Level, forward_row, backward_row, ...

template <typename scalar_t, bool HFORM, bool CHILD, bool RES, typename M>
void level_forward_kernel(const Level<scalar_t>& g, scalar_t* out, scalar_t* cseq,
                          scalar_t* last, bool stream) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t B = g.B, T = g.T, k = g.k, H = g.H, kH = k * H;
  const int64_t kBlock = block_size(B, H, T * k);
  const int64_t nblk = (H + kBlock - 1) / kBlock;
  parallel_recurrence(0, B * nblk, grain_for(T, k * kBlock), [&](int64_t begin, int64_t end) {
    const int64_t ld = scratch_stride<acc_t>(kBlock);
    // the k units' states, then their activations at one step: f, o, z; the c form's output
    std::vector<acc_t> buf((4 * k + 1) * ld);
    acc_t* __restrict__ state = buf.data();
    acc_t* __restrict__ fa = state + k * ld;
    acc_t* __restrict__ oa = fa + k * ld;
    acc_t* __restrict__ za = oa + k * ld;
    acc_t* __restrict__ ho = za + k * ld;
    for (int64_t w = begin; w < end; ++w) {
      const int64_t bi = w / nblk, h0 = (w % nblk) * kBlock;
      const int64_t n = std::min(kBlock, H - h0);
      const int64_t len = length_of(g.lengths, bi, T);
      for (int64_t u = 0; u < k; ++u) {
        acc_t* s = state + u * ld;
        const scalar_t* s0 = g.s0 ? g.s0 + bi * kH + u * H + h0 : nullptr;
        for (int64_t j = 0; j < n; ++j) s[j] = s0 ? acc_t(s0[j]) : acc_t(0);
      }
      for (int64_t t = 0; t < len; ++t) {
        const int64_t row = bi * T + t;
        const scalar_t* pt = g.P + bi * g.sPB + t * g.sPT + h0;
        const scalar_t* rt = RES ? g.res + row * H + h0 : nullptr;
        step_activations<M, CHILD>(pt, g.bias + h0, CHILD ? g.child + row * 2 * kH + h0 : nullptr,
                                CHILD ? g.alpha + row * k : nullptr,
                                CHILD ? g.beta + row * k : nullptr, k, H, n, ld, fa, oa, za);
        for (int64_t u = 0; u < k; ++u) {
          acc_t* s = state + u * ld;
          forward_row<HFORM, RES>(fa + u * ld, oa + u * ld, za + u * ld, rt, s, ho, n);
          emit_row(out + row * kH + u * H + h0, HFORM ? s : ho, n, stream);
          if constexpr (!HFORM) emit_row(cseq + row * kH + u * H + h0, s, n, stream);
        }
      }
      for (int64_t t = len; t < T; ++t) {
        for (int64_t u = 0; u < k; ++u) {
          scalar_t* ot = out + (bi * T + t) * kH + u * H + h0;
          for (int64_t j = 0; j < n; ++j) ot[j] = scalar_t(0);
          if constexpr (!HFORM) {
            scalar_t* ct = cseq + (bi * T + t) * kH + u * H + h0;
            for (int64_t j = 0; j < n; ++j) ct[j] = scalar_t(0);
          }
        }
      }
      for (int64_t u = 0; u < k; ++u) {
        for (int64_t j = 0; j < n; ++j) {
          last[bi * kH + u * H + h0 + j] = scalar_t(state[u * ld + j]);
        }
      }
    }
    stream_fence(stream);
  });
}

// The inputs of unit u's backward row at step t of batch row bi, channels from h0 (zeros stand
// in for an absent output gradient or initial state).
template <typename scalar_t, bool CHILD>
BackRow<scalar_t> back_row(const Level<scalar_t>& g, const scalar_t* gout, const scalar_t* saved,
                           const scalar_t* zero, const scalar_t* pt, int64_t bi, int64_t t,
                           int64_t u, int64_t h0) {
  const int64_t k = g.k, H = g.H, kH = k * H, row = bi * g.T + t;
  const int64_t off = u * H + h0;  // this unit's channels in a (k*H) row
  BackRow<scalar_t> r;
  r.g = gout ? gout + row * kH + off : zero;
  r.prev = t > 0 ? saved + (row - 1) * kH + off : (g.s0 ? g.s0 + bi * kH + off : zero);
  r.cur = saved + row * kH + off;
  r.pf = pt + u * H;
  r.po = r.pf + kH;
  r.bf = g.bias + off;
  r.bo = r.bf + kH;
  r.cf = CHILD ? g.child + (row * k + u) * 2 * H + h0 : nullptr;
  r.co = CHILD ? r.cf + H : nullptr;
  return r;
}

// The gradients of the steps t >= len of batch row bi, past its length, are zero. dres is left
// alone when it accumulates over levels.
template <typename scalar_t, bool CHILD, bool RES>
void zero_padded_steps(const Level<scalar_t>& g, int64_t bi, int64_t len, int64_t h0,
                       int64_t n, scalar_t* dP, scalar_t* dchild, at::opmath_type<scalar_t>* part,
                       scalar_t* dres, int64_t sdB, int64_t sdT, bool dres_acc) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t T = g.T, k = g.k, H = g.H, kH = k * H;
  for (int64_t t = len; t < T; ++t) {
    const int64_t row = bi * T + t;
    for (int64_t q = 0; q < 3 * k; ++q) {
      scalar_t* d = dP + bi * sdB + t * sdT + q * H + h0;
      for (int64_t j = 0; j < n; ++j) d[j] = scalar_t(0);
    }
    if constexpr (CHILD) {
      for (int64_t q = 0; q < 2 * k; ++q) {
        scalar_t* d = dchild + row * 2 * kH + q * H + h0;
        for (int64_t j = 0; j < n; ++j) d[j] = scalar_t(0);
      }
      for (int64_t q = 0; q < 2 * k; ++q) part[t * k * 2 + q] = acc_t(0);
    }
    if constexpr (RES) {
      if (!dres_acc) {
        for (int64_t j = 0; j < n; ++j) dres[row * H + h0 + j] = scalar_t(0);
      }
    }
  }
}

// A work item's results once its reverse pass ends. The carries are the gradient of s_0. dbias,
// when not null, holds the block's bias-gradient sums, row q = g k + u of (3, k, H).
template <typename scalar_t>
void store_block_sums(const Level<scalar_t>& g, int64_t bi, int64_t h0, int64_t n, int64_t ld,
                      const at::opmath_type<scalar_t>* carries, scalar_t* ds0,
                      const at::opmath_type<scalar_t>* dbias,
                      at::opmath_type<scalar_t>* db_part) {
  const int64_t k = g.k, H = g.H, kH = k * H;
  for (int64_t u = 0; u < k; ++u) {
    for (int64_t j = 0; j < n; ++j) {
      ds0[bi * kH + u * H + h0 + j] = scalar_t(carries[u * ld + j]);
    }
  }
  if (dbias == nullptr) return;
  for (int64_t q = 0; q < 3 * k; ++q) {
    at::opmath_type<scalar_t>* d = db_part + bi * 3 * kH + q * H + h0;
    for (int64_t j = 0; j < n; ++j) d[j] = dbias[q * ld + j];
  }
}

// dab_part: (nblk, B, T, k, 2) partial sums over each block's channels of d alpha, d beta.
// db_part: (B, 3, k, H) each batch row's sum over its steps of dP (the bias gradient's terms),
// or null when the bias gradient is not wanted. dP: packed (3, k, H) rows at batch and step
// strides sdB, sdT (a column slice of a whole tree's gradient block, or its own tensor).
// dres_acc: add this level's residual gradient to what dres holds (the residual feeds every
// level of a tree), rather than overwrite it.
template <typename scalar_t, bool HFORM, bool CHILD, bool RES, typename M>
void level_backward_kernel(const Level<scalar_t>& g, const scalar_t* gout, const scalar_t* glast,
                           const scalar_t* saved, scalar_t* dP, scalar_t* dchild,
                           at::opmath_type<scalar_t>* dab_part,
                           at::opmath_type<scalar_t>* db_part, scalar_t* dres, scalar_t* ds0,
                           int64_t kBlock, bool stream, int64_t sdB, int64_t sdT,
                           bool dres_acc) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t B = g.B, T = g.T, k = g.k, H = g.H, kH = k * H;
  const int64_t nblk = (H + kBlock - 1) / kBlock;
  parallel_recurrence(0, B * nblk, grain_for(T, k * kBlock), [&](int64_t begin, int64_t end) {
    const int64_t ld = scratch_stride<acc_t>(kBlock);
    // the k units' carries and their f, o, z at one step, then the residual gradient and the
    // scratch output rows of one unit (BackOut)
    std::vector<acc_t> buf((4 * k + 8 + (db_part ? 3 * k : 0)) * ld, acc_t(0));
    acc_t* __restrict__ carries = buf.data();
    acc_t* __restrict__ fa = carries + k * ld;
    acc_t* __restrict__ oa = fa + k * ld;
    acc_t* __restrict__ za = oa + k * ld;
    acc_t* __restrict__ dr = za + k * ld;
    acc_t* const rows = dr + ld;
    acc_t* const dbias = rows + 7 * ld;  // 3k rows: the F, O, Z rows' sums over steps
    const BackOut<acc_t> o{rows, rows + ld, rows + 2 * ld, rows + 3 * ld, rows + 4 * ld,
                           rows + 5 * ld, rows + 6 * ld};
    std::vector<scalar_t> zero_in(kBlock, scalar_t(0));  // stands in for absent inputs
    for (int64_t w = begin; w < end; ++w) {
      const int64_t bi = w / nblk, blk = w % nblk, h0 = blk * kBlock;
      const int64_t n = std::min(kBlock, H - h0);
      const int64_t len = length_of(g.lengths, bi, T);
      acc_t* part = dab_part + (blk * B + bi) * T * k * 2;
      for (int64_t u = 0; u < k; ++u) {
        acc_t* c = carries + u * ld;
        const scalar_t* gl = glast ? glast + bi * kH + u * H + h0 : nullptr;
        for (int64_t j = 0; j < n; ++j) c[j] = gl ? acc_t(gl[j]) : acc_t(0);
      }
      if (db_part) std::fill(dbias, dbias + 3 * k * ld, acc_t(0));
      for (int64_t t = len - 1; t >= 0; --t) {
        const int64_t row = bi * T + t;
        const scalar_t* pt = g.P + bi * g.sPB + t * g.sPT + h0;
        if constexpr (RES) {
          for (int64_t j = 0; j < n; ++j) dr[j] = acc_t(0);
        }
        step_activations<M, CHILD>(pt, g.bias + h0, CHILD ? g.child + row * 2 * kH + h0 : nullptr,
                                CHILD ? g.alpha + row * k : nullptr,
                                CHILD ? g.beta + row * k : nullptr, k, H, n, ld, fa, oa, za);
        for (int64_t u = 0; u < k; ++u) {
          const int64_t off = u * H + h0;  // this unit's channels in a (k*H) row
          const BackRow<scalar_t> r = back_row<scalar_t, CHILD>(g, gout, saved, zero_in.data(), pt,
                                                                bi, t, u, h0);
          const acc_t al = CHILD ? acc_t(g.alpha[row * k + u]) : acc_t(0);
          const acc_t be = CHILD ? acc_t(g.beta[row * k + u]) : acc_t(0);
          backward_row<HFORM, CHILD, RES>(r, o, fa + u * ld, oa + u * ld, za + u * ld, al, be,
                                          carries + u * ld, dr, n);
          scalar_t* dpf = dP + bi * sdB + t * sdT + off;
          emit_row(dpf, o.dpf, n, stream);
          emit_row(dpf + kH, o.dpo, n, stream);
          emit_row(dpf + 2 * kH, o.dpz, n, stream);
          if (db_part) {
            accumulate_row(dbias + u * ld, o.dpf, n);
            accumulate_row(dbias + (k + u) * ld, o.dpo, n);
            accumulate_row(dbias + (2 * k + u) * ld, o.dpz, n);
          }
          if constexpr (CHILD) {
            scalar_t* dcf = dchild + (row * k + u) * 2 * H + h0;
            emit_row(dcf, o.dcf, n, stream);
            emit_row(dcf + H, o.dco, n, stream);
            part[(t * k + u) * 2] = sum_lanes(o.ta, n);
            part[(t * k + u) * 2 + 1] = sum_lanes(o.tb, n);
          }
        }
        if constexpr (RES) {
          scalar_t* dt = dres + row * H + h0;
          if (dres_acc) {
            for (int64_t j = 0; j < n; ++j) dr[j] += acc_t(dt[j]);
          }
          emit_row(dt, dr, n, stream);
        }
      }
      zero_padded_steps<scalar_t, CHILD, RES>(g, bi, len, h0, n, dP, dchild, part, dres, sdB,
                                              sdT, dres_acc);
      store_block_sums(g, bi, h0, n, ld, carries, ds0, db_part ? dbias : nullptr, db_part);
    }
    stream_fence(stream);
  });
}

// ----------------------------------------------------------------------------------------------
// argument checks and dispatch

using OptTensor = c10::optional<at::Tensor>;

template <typename scalar_t>
const scalar_t* ptr_or_null(const OptTensor& x) {
  return x.has_value() ? x->data_ptr<scalar_t>() : nullptr;
}


void check_input(const OptTensor& x, const at::Tensor& P, int64_t numel, const char* name,
                 const char* shape) {
  if (!x.has_value()) return;
  TORCH_CHECK(x->is_contiguous() && x->device().is_cpu() && x->numel() == numel &&
                  x->scalar_type() == P.scalar_type(),
              name, " must be a contiguous CPU tensor of shape ", shape, " with the dtype of P");
}

struct Dims {
  int64_t B, T, k, H;
};

// Checks P (B, T, 3, k, H) (unit-stride channels, gate and unit strides of a packed row; any
// batch and step strides) and the optional inputs; returns the dimensions.
Dims check_level(const at::Tensor& P, const OptTensor& child, const OptTensor& alpha,
                 const OptTensor& beta, const OptTensor& s0) {
  TORCH_CHECK(P.dim() == 5 && P.size(2) == 3 && P.device().is_cpu(),
              "P must be a CPU tensor of shape (B, T, 3, k, H)");
  const Dims d{P.size(0), P.size(1), P.size(3), P.size(4)};
  TORCH_CHECK((d.H <= 1 || P.stride(4) == 1) && (d.k <= 1 || P.stride(3) == d.H) &&
                  P.stride(2) == d.k * d.H,
              "P must have packed (3, k, H) rows (strides (k*H, H, 1) of its last three dims)");
  TORCH_CHECK(child.has_value() == alpha.has_value() && child.has_value() == beta.has_value(),
              "child, alpha and beta must be given together");
  const int64_t BT = d.B * d.T;
  check_input(child, P, BT * d.k * 2 * d.H, "child", "(B, T, k, 2, H)");
  check_input(alpha, P, BT * d.k, "alpha", "(B, T, k, 1)");
  check_input(beta, P, BT * d.k, "beta", "(B, T, k, 1)");
  check_input(s0, P, d.B * d.k * d.H, "s0", "(B, k*H)");
  return d;
}

// bias: the (3, k, H) biases, never null (zeros stand in for an absent bias).
template <typename scalar_t>
Level<scalar_t> level_of(const at::Tensor& P, const Dims& d, const scalar_t* bias,
                         const OptTensor& child, const OptTensor& alpha, const OptTensor& beta,
                         const OptTensor& res, const OptTensor& s0, const int64_t* lengths) {
  return Level<scalar_t>{P.data_ptr<scalar_t>(), P.stride(0), P.stride(1), bias,
                         ptr_or_null<scalar_t>(child), ptr_or_null<scalar_t>(alpha),
                         ptr_or_null<scalar_t>(beta), ptr_or_null<scalar_t>(res),
                         ptr_or_null<scalar_t>(s0), lengths, d.B, d.T, d.k, d.H};
}

// Calls fn(HFORM, CHILD, RES, math) with the runtime flags as std::bool_constant values and the
// runtime's activations for acc_t (vector_math.h).
template <typename acc_t, typename Fn>
void dispatch_flags(bool h_form, bool child, bool res, Fn&& fn) {
  ctrlrnn::runtime::with_math<acc_t, ctrlrnn::runtime::Saturating>([&](auto m) {
    auto with_res = [&](auto h, auto c) {
      res ? fn(h, c, std::true_type{}, m) : fn(h, c, std::false_type{}, m);
    };
    auto with_child = [&](auto h) {
      child ? with_res(h, std::true_type{}) : with_res(h, std::false_type{});
    };
    h_form ? with_child(std::true_type{}) : with_child(std::false_type{});
  });
}

// bias: the base maps' biases (3*k*H,) in P's row layout, added to P inside the kernel (the
// level's GEMM then writes x W^T alone, with no pass to put the bias in its output), or None.
// -> [out (B, T, k*H), c (B, T, k*H) for the c form else empty, last state (B, k*H)]
std::vector<at::Tensor> metagross_level_forward(const at::Tensor& P, const OptTensor& child,
                                                const OptTensor& alpha, const OptTensor& beta,
                                                const OptTensor& res, const OptTensor& s0,
                                                const OptTensor& lengths, bool h_form,
                                                const OptTensor& bias) {
  const Dims d = check_level(P, child, alpha, beta, s0);
  check_input(res, P, d.B * d.T * d.H, "res", "(B, T, 1, H)");
  check_input(bias, P, 3 * d.k * d.H, "bias", "(3*k*H,)");
  const int64_t* lp = lengths_ptr(lengths, d.B, d.T);
  const int64_t kH = d.k * d.H;
  auto out = ctrlrnn::runtime::empty({d.B, d.T, kH}, P.options());
  auto cseq = h_form ? at::empty({0}, P.options())
                     : ctrlrnn::runtime::empty({d.B, d.T, kH}, P.options());
  auto last = at::empty({d.B, kH}, P.options());
  const bool stream = use_streaming_stores(out.nbytes() + cseq.nbytes());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, P.scalar_type(), "metagross_level",
                                  [&] {
    std::vector<scalar_t> zeros;
    const auto lv = level_of<scalar_t>(P, d, bias_or_zeros(bias, zeros, 3 * kH), child, alpha,
                                       beta, res, s0, lp);
    dispatch_flags<at::opmath_type<scalar_t>>(h_form, child.has_value(), res.has_value(),
                                              [&](auto hf, auto ch, auto rs, auto m) {
      level_forward_kernel<scalar_t, decltype(hf)::value, decltype(ch)::value,
                           decltype(rs)::value, decltype(m)>(
          lv, out.data_ptr<scalar_t>(), h_form ? nullptr : cseq.data_ptr<scalar_t>(),
          last.data_ptr<scalar_t>(), stream);
    });
  });
  return {out, cseq, last};
}

// saved: the state sequence (out for the h form, c for the c form). dP_out: where to write dP,
// (B, T, 3, k, H) with packed rows and any batch and step strides (a column slice of the block
// of a whole tree's gradients, which one GEMM then multiplies), or None for a fresh tensor.
// dres_in: a (B, T, 1, H) tensor that this level's residual gradient is added into (and which
// is returned as dres), or None for a fresh one.
// -> [dP (B, T, 3, k, H), dchild (B, T, k, 2, H) or empty, dalpha, dbeta (B, T, k, 1) or empty,
//     dres (B, T, 1, H) or empty, ds0 (B, k*H), dbias (3*k*H,) or empty (no bias)]
std::vector<at::Tensor> metagross_level_backward(
    const OptTensor& grad_out, const OptTensor& grad_last, const at::Tensor& P,
    const OptTensor& child, const OptTensor& alpha, const OptTensor& beta, const OptTensor& s0,
    const OptTensor& lengths, const at::Tensor& saved, bool h_form, bool has_res,
    const OptTensor& bias, const OptTensor& dP_out, const OptTensor& dres_in) {
  const Dims d = check_level(P, child, alpha, beta, s0);
  const int64_t kH = d.k * d.H, BT = d.B * d.T;
  check_input(bias, P, 3 * kH, "bias", "(3*k*H,)");
  check_input(saved, P, BT * kH, "saved", "(B, T, k*H)");
  check_input(grad_out, P, BT * kH, "grad_out", "(B, T, k*H)");
  check_input(grad_last, P, d.B * kH, "grad_last", "(B, k*H)");
  const int64_t* lp = lengths_ptr(lengths, d.B, d.T);
  const auto opts = P.options();
  at::Tensor dP;
  if (dP_out.has_value()) {
    dP = *dP_out;
    TORCH_CHECK(dP.dim() == 5 && dP.size(0) == d.B && dP.size(1) == d.T && dP.size(2) == 3 &&
                    dP.size(3) == d.k && dP.size(4) == d.H && dP.device().is_cpu() &&
                    dP.scalar_type() == P.scalar_type(),
                "dP_out must be a CPU tensor of P's shape (B, T, 3, k, H) and dtype");
    TORCH_CHECK((d.H <= 1 || dP.stride(4) == 1) && (d.k <= 1 || dP.stride(3) == d.H) &&
                    dP.stride(2) == kH,
                "dP_out must have packed (3, k, H) rows (strides (k*H, H, 1) of its last three "
                "dims)");
  } else {
    dP = ctrlrnn::runtime::empty({d.B, d.T, 3, d.k, d.H}, opts);
  }
  auto dchild = child.has_value() ? ctrlrnn::runtime::empty(child->sizes(), opts)
                                  : at::empty({0}, opts);
  auto dalpha = alpha.has_value() ? at::empty(alpha->sizes(), opts) : at::empty({0}, opts);
  auto dbeta = beta.has_value() ? at::empty(beta->sizes(), opts) : at::empty({0}, opts);
  TORCH_CHECK(!dres_in.has_value() || has_res, "dres_in is given for a level without a residual");
  check_input(dres_in, P, BT * d.H, "dres_in", "(B, T, 1, H)");
  auto dres = dres_in.has_value()
                  ? *dres_in
                  : (has_res ? ctrlrnn::runtime::empty({d.B, d.T, 1, d.H}, opts)
                             : at::empty({0}, opts));
  auto ds0 = at::empty({d.B, kH}, opts);
  auto dbias = bias.has_value() ? at::empty({3 * kH}, opts) : at::empty({0}, opts);
  const int64_t kBlock = block_size(d.B, d.H, d.T * d.k);
  const int64_t nblk = (d.H + kBlock - 1) / kBlock;
  const bool stream =
      use_streaming_stores(BT * 3 * kH * P.element_size() + dchild.nbytes() + dres.nbytes());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, P.scalar_type(),
                                  "metagross_level_bwd", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    std::vector<scalar_t> zeros;
    const auto lv = level_of<scalar_t>(P, d, bias_or_zeros(bias, zeros, 3 * kH), child, alpha,
                                       beta, OptTensor(), s0, lp);
    std::vector<acc_t> dab_part(child.has_value() ? nblk * BT * d.k * 2 : 0);
    std::vector<acc_t> db_part(bias.has_value() ? d.B * 3 * kH : 0, acc_t(0));
    dispatch_flags<acc_t>(h_form, child.has_value(), has_res,
                          [&](auto hf, auto ch, auto rs, auto m) {
      level_backward_kernel<scalar_t, decltype(hf)::value, decltype(ch)::value,
                            decltype(rs)::value, decltype(m)>(
          lv, ptr_or_null<scalar_t>(grad_out), ptr_or_null<scalar_t>(grad_last),
          saved.data_ptr<scalar_t>(), dP.data_ptr<scalar_t>(),
          child.has_value() ? dchild.data_ptr<scalar_t>() : nullptr, dab_part.data(),
          bias.has_value() ? db_part.data() : nullptr,
          has_res ? dres.data_ptr<scalar_t>() : nullptr, ds0.data_ptr<scalar_t>(), kBlock,
          stream, dP.stride(0), dP.stride(1), dres_in.has_value());
    });
    if (child.has_value()) {  // d alpha, d beta: the blocks' partial sums in a fixed order
      scalar_t* da = dalpha.data_ptr<scalar_t>();
      scalar_t* db = dbeta.data_ptr<scalar_t>();
      const int64_t m = BT * d.k;
      for (int64_t i = 0; i < m; ++i) {
        acc_t sa = 0, sb = 0;
        for (int64_t blk = 0; blk < nblk; ++blk) {
          sa += dab_part[(blk * m + i) * 2];
          sb += dab_part[(blk * m + i) * 2 + 1];
        }
        da[i] = scalar_t(sa);
        db[i] = scalar_t(sb);
      }
    }
    if (bias.has_value()) {  // d bias: the batch rows' sums over steps, in a fixed order
      sum_rows_into(dbias.data_ptr<scalar_t>(), db_part.data(), d.B, 3 * kH);
    }
  });
  return {dP, dchild, dalpha, dbeta, dres, ds0, dbias};
}

}  // namespace

namespace ctrlrnn {

void register_metagross_level(torch::Library& m) {
  // bias last and optional, as in the custom op's schema (a call without it has no bias)
  // -> [out, c (c form), last state]
  m.def("forward(Tensor P, Tensor? child, Tensor? alpha, Tensor? beta, Tensor? res, Tensor? s0, "
        "Tensor? lengths, bool h_form, Tensor? bias=None) -> Tensor[]", &metagross_level_forward);
  // -> [dP, dchild, dalpha, dbeta, dres, ds0, dbias]
  m.def("backward(Tensor? grad_out, Tensor? grad_last, Tensor P, Tensor? child, Tensor? alpha, "
        "Tensor? beta, Tensor? s0, Tensor? lengths, Tensor saved, bool h_form, bool has_res, "
        "Tensor? bias=None, Tensor? dP_out=None, Tensor? dres_in=None) -> Tensor[]",
        &metagross_level_backward);
}

}  // namespace ctrlrnn
