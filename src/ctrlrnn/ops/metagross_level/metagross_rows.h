// The per-row arithmetic of the METAGROSS level kernels (metagross_level.cpp): the gates and the
// scan step of one unit over a block of channels, forward and backward, in registers and
// L1-resident scratch rows. Only metagross_level.cpp includes it.

#pragma once

#include <ATen/ATen.h>

#include "kernel_common.h"
#include "runtime/runtime.h"

#include <ATen/OpMathType.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace ctrlrnn::metagross_rows {

using namespace ctrlrnn::kernels;  // NOLINT: block_size, grain_for, lengths, ...

// Sum of n values with 16 independent partial sums (a plain loop of += would not vectorise
// without -ffast-math); the order is fixed, so the result is reproducible.
template <typename acc_t>
inline acc_t sum_lanes(const acc_t* __restrict__ x, int64_t n) {
  constexpr int64_t W = 16;
  acc_t lanes[W] = {};
  int64_t j = 0;
  for (; j + W <= n; j += W) {
    for (int64_t l = 0; l < W; ++l) lanes[l] += x[j + l];
  }
  acc_t total = 0;
  for (; j < n; ++j) total += x[j];
  for (int64_t l = 0; l < W; ++l) total += lanes[l];
  return total;
}

// Spacing of the per-thread scratch rows: at least n elements, an odd number of 64-byte lines,
// so that no two rows share their offset within a 4 KiB page (loads that follow a store at the
// same page offset wait for it on x86: "4K aliasing").
template <typename acc_t>
inline int64_t scratch_stride(int64_t n) {
  constexpr int64_t kLine = 64 / sizeof(acc_t);
  const int64_t lines = (n + kLine - 1) / kLine;
  return (lines | 1) * kLine;
}

// Streaming stores (runtime/streaming.h): the kernels compute each output row into a small
// scratch row (L1-resident) and emit it with emit_row, for float outputs past the streaming
// threshold by streaming stores. Their reader (the GEMMs of the level's projection backward or
// the next level) comes after other large traffic and would not find them in cache anyway.
using ctrlrnn::runtime::emit_row;

// ----------------------------------------------------------------------------------------------
// One level's inputs.

template <typename scalar_t>
struct Level {
  const scalar_t* P;  // (B, T, 3, k, H): (b, t, g, u, h) at b*sPB + t*sPT + g*kH + u*H + h
  int64_t sPB, sPT;
  const scalar_t* bias;    // (3, k, H): the base maps' biases b^g_u (zeros when absent)
  const scalar_t* child;   // (B, T, k, 2, H) or null at the leaves
  const scalar_t* alpha;   // (B, T, k) or null
  const scalar_t* beta;    // (B, T, k) or null
  const scalar_t* res;     // (B, T, H) or null
  const scalar_t* s0;      // (B, k*H) or null (zeros)
  const int64_t* lengths;  // (B,) or null (all T)
  int64_t B, T, k, H;
};

// sig(p + w (c - p)) over n channels, p = the GEMM's x W^T plus the bias (eq 2-1, 2-2; sig(p)
// without the child's c).
template <typename M, bool CHILD, typename scalar_t, typename acc_t>
inline void sigmoid_row(const scalar_t* __restrict__ p, const scalar_t* __restrict__ bias,
                        const scalar_t* __restrict__ c, acc_t w, int64_t n,
                        acc_t* __restrict__ y) {
  for (int64_t j = 0; j < n; ++j) {
    acc_t q = acc_t(p[j]) + acc_t(bias[j]);
    if constexpr (CHILD) q += w * (acc_t(c[j]) - q);
    y[j] = M::sigmoid(q);
  }
}

// f, o, z of the k units at one step (eq 2-1..2-3) in the accumulation type, into k rows of ld
// each of fa, oa, za. P's rows are read in memory order, the F rows of all units, then the O
// rows, then the Z rows, so that a step reads one contiguous stretch (the hardware prefetchers
// lose track of a stream that jumps back and forth); one simple loop each so that they
// vectorise. pt: the step's P row at the block's first channel; bt: the bias row (the layout of
// P's rows) at that channel; ct: the children's row.
template <typename M, bool CHILD, typename scalar_t, typename acc_t>
inline void step_activations(const scalar_t* pt, const scalar_t* bt, const scalar_t* ct,
                             const scalar_t* alpha, const scalar_t* beta, int64_t k, int64_t H,
                             int64_t n, int64_t ld, acc_t* fa, acc_t* oa, acc_t* za) {
  const int64_t kH = k * H;
  for (int64_t u = 0; u < k; ++u) {
    sigmoid_row<M, CHILD>(pt + u * H, bt + u * H, CHILD ? ct + 2 * u * H : nullptr,
                          CHILD ? acc_t(alpha[u]) : acc_t(0), n, fa + u * ld);  // eq 2-1
  }
  for (int64_t u = 0; u < k; ++u) {
    sigmoid_row<M, CHILD>(pt + kH + u * H, bt + kH + u * H,
                          CHILD ? ct + (2 * u + 1) * H : nullptr,
                          CHILD ? acc_t(beta[u]) : acc_t(0), n, oa + u * ld);  // eq 2-2
  }
  for (int64_t u = 0; u < k; ++u) {
    const scalar_t* __restrict__ pz = pt + 2 * kH + u * H;
    const scalar_t* __restrict__ bz = bt + 2 * kH + u * H;
    acc_t* __restrict__ z = za + u * ld;
    for (int64_t j = 0; j < n; ++j) z[j] = M::tanh(acc_t(pz[j]) + acc_t(bz[j]));  // eq 2-3
  }
}

// ----------------------------------------------------------------------------------------------
// forward

// One step of one unit over n channels: the scan step with a, b from the gates (module comment).
// s: the state, updated in place (the h form's output); ho: the c form's output o c (+ x).
template <bool HFORM, bool RES, typename scalar_t, typename acc_t>
inline void forward_row(const acc_t* __restrict__ fa, const acc_t* __restrict__ oa,
                        const acc_t* __restrict__ za, const scalar_t* __restrict__ rt,
                        acc_t* __restrict__ s, acc_t* __restrict__ ho, int64_t n) {
#pragma GCC ivdep
  for (int64_t j = 0; j < n; ++j) {
    const acc_t f = fa[j], o = oa[j], z = za[j];
    if constexpr (HFORM) {
      // eq 2-4..2-6 with h_{t-1} the unit's previous output: a = o (1 - f), b = o f z (+ x)
      acc_t b = o * f * z;
      if constexpr (RES) b += acc_t(rt[j]);
      s[j] = o * (acc_t(1) - f) * s[j] + b;
    } else {
      // c_t = (1 - f) c_{t-1} + f z;  h_t = o c_t (+ x)
      const acc_t v = (acc_t(1) - f) * s[j] + f * z;
      s[j] = v;
      acc_t h = o * v;
      if constexpr (RES) h += acc_t(rt[j]);
      ho[j] = h;
    }
  }
}

// ----------------------------------------------------------------------------------------------
// backward

// Input rows of one unit at one step, for backward_row.
template <typename scalar_t>
struct BackRow {
  const scalar_t* g;     // grad of out_t
  const scalar_t* prev;  // s_{t-1}
  const scalar_t* cur;   // s_t (c form)
  const scalar_t* pf;    // F^F, F^O without their biases (for the depth-gate gradients)
  const scalar_t* po;
  const scalar_t* bf;    // the biases of F^F, F^O
  const scalar_t* bo;
  const scalar_t* cf;    // children
  const scalar_t* co;
};

// Scratch output rows of one unit at one step (L1-resident, emitted by emit_row): the gradients
// of F^F, F^O, F^Z, M^F, M^O and the per-channel terms of d alpha, d beta.
template <typename acc_t>
struct BackOut {
  acc_t* dpf;
  acc_t* dpo;
  acc_t* dpz;
  acc_t* dcf;
  acc_t* dco;
  acc_t* ta;
  acc_t* tb;
};

// One reverse step of one unit over n channels: the scan's reverse recurrence (module comment)
// and the gradients of eq 2-1..2-3 into the scratch rows `out`; adds to the residual gradient
// dr.
template <bool HFORM, bool CHILD, bool RES, typename scalar_t, typename acc_t>
inline void backward_row(const BackRow<scalar_t>& r, const BackOut<acc_t>& out,
                         const acc_t* __restrict__ fa, const acc_t* __restrict__ oa,
                         const acc_t* __restrict__ za, acc_t al, acc_t be,
                         acc_t* __restrict__ carry, acc_t* __restrict__ dr, int64_t n) {
  const scalar_t* __restrict__ gt = r.g;
  const scalar_t* __restrict__ prev = r.prev;
  const scalar_t* __restrict__ cur = r.cur;
  const scalar_t* __restrict__ pf = r.pf;
  const scalar_t* __restrict__ po = r.po;
  const scalar_t* __restrict__ bf = r.bf;
  const scalar_t* __restrict__ bo = r.bo;
  const scalar_t* __restrict__ cf = r.cf;
  const scalar_t* __restrict__ co = r.co;
  acc_t* __restrict__ dpf = out.dpf;
  acc_t* __restrict__ dpo = out.dpo;
  acc_t* __restrict__ dpz = out.dpz;
  acc_t* __restrict__ dcf = out.dcf;
  acc_t* __restrict__ dco = out.dco;
  acc_t* __restrict__ ta = out.ta;
  acc_t* __restrict__ tb = out.tb;
  // The rows never overlap. Without ivdep GCC wants more run-time alias checks than it allows
  // (--param vect-max-version-for-alias-checks) for the ~20 streams and leaves the loop scalar.
#pragma GCC ivdep
  for (int64_t j = 0; j < n; ++j) {
    const acc_t f = fa[j], o = oa[j], z = za[j];
    const acc_t g = acc_t(gt[j]);
    acc_t gf, go, gz;
    if constexpr (HFORM) {
      // s = a s_prev + b, a = o (1 - f), b = o f z (+ x), out = s
      const acc_t d = g + carry[j];
      const acc_t ga = d * acc_t(prev[j]);
      carry[j] = d * (o * (acc_t(1) - f));
      go = ga * (acc_t(1) - f) + d * f * z;
      gf = o * (d * z - ga);
      gz = d * o * f;
      if constexpr (RES) dr[j] += d;
    } else {
      // s = a s_prev + b, a = 1 - f, b = f z, out = o s (+ x)
      const acc_t d = g * o + carry[j];
      const acc_t ga = d * acc_t(prev[j]);
      carry[j] = d * (acc_t(1) - f);
      go = g * acc_t(cur[j]);
      gf = d * z - ga;
      gz = d * f;
      if constexpr (RES) dr[j] += g;
    }
    const acc_t gsf = gf * f * (acc_t(1) - f);  // through the sigmoid of eq 2-1
    const acc_t gso = go * o * (acc_t(1) - o);  // eq 2-2
    dpz[j] = gz * (acc_t(1) - z * z);  // eq 2-3
    if constexpr (CHILD) {
      // d/dp of p + w (c - p) (eq 2-1, 2-2 as the forward computes them) summed as the
      // reference's autograd sums it, g - g w: equal to g (1 - w) for finite g, and NaN (not
      // +-Inf) for an infinite g, as in the reference
      dpf[j] = gsf - gsf * al;
      dpo[j] = gso - gso * be;
      dcf[j] = gsf * al;
      dco[j] = gso * be;
      ta[j] = gsf * (acc_t(cf[j]) - (acc_t(pf[j]) + acc_t(bf[j])));
      tb[j] = gso * (acc_t(co[j]) - (acc_t(po[j]) + acc_t(bo[j])));
    } else {
      dpf[j] = gsf;
      dpo[j] = gso;
    }
  }
}

}  // namespace ctrlrnn::metagross_rows
