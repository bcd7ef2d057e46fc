// The tree of the METAGROSS unit as printed: its layout, and one row's forward and backward
// through the 2^L - 1 units (metagross_state.cpp has the equations). Only metagross_state.cpp
// includes it.

#pragma once

#include "cells_common.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace ctrlrnn::cells {
namespace {

// Offsets (in units of H) of unit `node`'s F, O, Z maps in the level-major layout.
struct NodeMaps {
  int64_t f, o, z;
};

inline NodeMaps node_maps(int64_t node) {
  int64_t level_start = 0;  // s = 2^(n-1) - 1 for the level n holding `node`
  while (2 * level_start + 1 <= node) level_start = 2 * level_start + 1;
  const int64_t k = level_start + 1, j = node - level_start;
  return {3 * level_start + j, 3 * level_start + k + j, 3 * level_start + 2 * k + j};
}

struct Tree {
  int64_t N = 0, I = 0, H = 0, G = 0;
  std::vector<NodeMaps> maps;
  explicit Tree(int64_t nodes, int64_t hidden) : N(nodes), I((nodes - 1) / 2), H(hidden),
                                                 G(3 * nodes * hidden) {
    for (int64_t i = 0; i < N; ++i) maps.push_back(node_maps(i));
  }
};

// The tree at one (b, t), for the hidden units [j0, j0 + W): from pre-activations P (the row's
// 3NH) and the previous state s (the row's H), every unit's output into hn (N*W); with
// fs != nullptr also f, o, z, c (each N*W) for backward. r: the row's residual (H), or null.
// The units of a hidden index never read another index's, so any range is evaluated alone.
template <typename scalar_t, typename A>
inline void tree_forward(const Tree& tr, const scalar_t* __restrict P, const scalar_t* s_row,
                         const scalar_t* alpha, const scalar_t* beta, const scalar_t* r_row,
                         scalar_t* hn, scalar_t* fs, scalar_t* os, scalar_t* zs, scalar_t* cs,
                         int64_t j0, int64_t W) {
  const int64_t H = tr.H;
  const scalar_t* __restrict s = s_row + j0;
  const scalar_t* __restrict r = r_row ? r_row + j0 : nullptr;
  for (int64_t i = tr.N - 1; i >= 0; --i) {  // children (larger indices) before parents
    const NodeMaps& m = tr.maps[static_cast<size_t>(i)];
    const scalar_t* __restrict pf = P + m.f * H + j0;
    const scalar_t* __restrict po = P + m.o * H + j0;
    const scalar_t* __restrict pz = P + m.z * H + j0;
    scalar_t* __restrict out = hn + i * W;
    const bool internal = i < tr.I;
    const scalar_t a = internal ? alpha[i] : scalar_t(0);
    const scalar_t be = internal ? beta[i] : scalar_t(0);
    // leaves: point at their own maps with weight 0 (pf + 0 * (pf - pf) == pf for finite pf;
    // a branch keeps Inf/NaN exactly as the reference has them)
    const scalar_t* __restrict mf = internal ? hn + (2 * i + 1) * W : pf;
    const scalar_t* __restrict mo = internal ? hn + (2 * i + 2) * W : po;
    if (internal) {
CTRLRNN_SIMD
      for (int64_t j = 0; j < W; ++j) {
        const scalar_t f = A::sigmoid(pf[j] + a * (mf[j] - pf[j]));
        const scalar_t o = A::sigmoid(po[j] + be * (mo[j] - po[j]));
        const scalar_t z = A::tanh(pz[j]);
        const scalar_t c = (scalar_t(1) - f) * s[j] + f * z;
        out[j] = o * c + (r ? r[j] : scalar_t(0));
        if (fs) {
          fs[i * W + j] = f;
          os[i * W + j] = o;
          zs[i * W + j] = z;
          cs[i * W + j] = c;
        }
      }
    } else {
CTRLRNN_SIMD
      for (int64_t j = 0; j < W; ++j) {
        const scalar_t f = A::sigmoid(pf[j]);
        const scalar_t o = A::sigmoid(po[j]);
        const scalar_t z = A::tanh(pz[j]);
        const scalar_t c = (scalar_t(1) - f) * s[j] + f * z;
        out[j] = o * c + (r ? r[j] : scalar_t(0));
        if (fs) {
          fs[i * W + j] = f;
          os[i * W + j] = o;
          zs[i * W + j] = z;
          cs[i * W + j] = c;
        }
      }
    }
  }
}

// Scratch of one thread for tree_backward: the tree's outputs and activations and the units'
// output gradients (each N*W), the direct gradient of h_{t-1} (W).
template <typename scalar_t>
struct TreeScratch {
  std::vector<scalar_t> hn, fs, os, zs, cs, dn, ds;
  TreeScratch(int64_t N, int64_t W)
      : hn(static_cast<size_t>(N * W)), fs(hn.size()), os(hn.size()), zs(hn.size()),
        cs(hn.size()), dn(hn.size()), ds(static_cast<size_t>(W)) {}
};

// Backward through the tree at one (b, t), for the hidden units [j0, j0 + W): recomputes the
// activations from P and s_row (h_{t-1}), walks the units from the root down with the root's
// output gradient dh_row + g_row (the carried and the sequence output's; g_row may be null), and
// writes dP into d (the row's 3NH; these units' columns), the residual's gradient into dr (the
// row's H; null without one), the gradient of h_{t-1} through the cells' (1 - f) into sc.ds, and
// the range's part of d alpha_i, d beta_i (sums over the hidden units) into sa[i], sb[i].
template <typename scalar_t, typename A>
inline void tree_backward(const Tree& tr, const scalar_t* P, const scalar_t* s_row,
                          const scalar_t* al, const scalar_t* be, const scalar_t* r_row,
                          const scalar_t* dh_row, const scalar_t* g_row, scalar_t* d,
                          scalar_t* dr_row, scalar_t* sa, scalar_t* sb, TreeScratch<scalar_t>& sc,
                          int64_t j0, int64_t W) {
  const int64_t H = tr.H, N = tr.N, I = tr.I;
  // the children's outputs hn (residual included) enter d alpha, d beta
  tree_forward<scalar_t, A>(tr, P, s_row, al, be, r_row, sc.hn.data(), sc.fs.data(),
                            sc.os.data(), sc.zs.data(), sc.cs.data(), j0, W);
  const scalar_t* s = s_row + j0;
  for (int64_t j = 0; j < W; ++j) {
    sc.dn[static_cast<size_t>(j)] = dh_row[j0 + j] + (g_row ? g_row[j0 + j] : scalar_t(0));
    sc.ds[static_cast<size_t>(j)] = scalar_t(0);
  }
  scalar_t* dr = dr_row ? dr_row + j0 : nullptr;
  if (dr) fill_zero(dr, W);
  for (int64_t i = 0; i < N; ++i) {  // parents before children
    const NodeMaps& m = tr.maps[static_cast<size_t>(i)];
    const bool internal = i < I;
    const scalar_t a = internal ? al[i] : scalar_t(0);
    const scalar_t bb = internal ? be[i] : scalar_t(0);
    const scalar_t* __restrict f_ = sc.fs.data() + i * W;
    const scalar_t* __restrict o_ = sc.os.data() + i * W;
    const scalar_t* __restrict z_ = sc.zs.data() + i * W;
    const scalar_t* __restrict c_ = sc.cs.data() + i * W;
    const scalar_t* __restrict dh = sc.dn.data() + i * W;
    scalar_t* __restrict dsp = sc.ds.data();
    scalar_t* __restrict dpf = d + m.f * H + j0;
    scalar_t* __restrict dpo = d + m.o * H + j0;
    scalar_t* __restrict dpz = d + m.z * H + j0;
    if (internal) {
      const scalar_t* __restrict pf = P + m.f * H + j0;
      const scalar_t* __restrict po = P + m.o * H + j0;
      const scalar_t* __restrict mf = sc.hn.data() + (2 * i + 1) * W;
      const scalar_t* __restrict mo = sc.hn.data() + (2 * i + 2) * W;
      scalar_t* __restrict dmf = sc.dn.data() + (2 * i + 1) * W;
      scalar_t* __restrict dmo = sc.dn.data() + (2 * i + 2) * W;
      scalar_t suma = 0, sumb = 0;
_Pragma("omp simd reduction(+ : suma, sumb)")
      for (int64_t j = 0; j < W; ++j) {
        const scalar_t f = f_[j], o = o_[j], z = z_[j];
        const scalar_t dc = dh[j] * o;
        const scalar_t duf = dc * (z - s[j]) * f * (scalar_t(1) - f);
        const scalar_t duo = dh[j] * c_[j] * o * (scalar_t(1) - o);
        dsp[j] += dc * (scalar_t(1) - f);
        dpz[j] = dc * f * (scalar_t(1) - z * z);
        dpf[j] = duf - duf * a;
        dpo[j] = duo - duo * bb;
        dmf[j] = duf * a;
        dmo[j] = duo * bb;
        suma += duf * (mf[j] - pf[j]);
        sumb += duo * (mo[j] - po[j]);
      }
      sa[i] = suma;
      sb[i] = sumb;
    } else {
CTRLRNN_SIMD
      for (int64_t j = 0; j < W; ++j) {
        const scalar_t f = f_[j], o = o_[j], z = z_[j];
        const scalar_t dc = dh[j] * o;
        dsp[j] += dc * (scalar_t(1) - f);
        dpz[j] = dc * f * (scalar_t(1) - z * z);
        dpf[j] = dc * (z - s[j]) * f * (scalar_t(1) - f);
        dpo[j] = dh[j] * c_[j] * o * (scalar_t(1) - o);
      }
    }
    if (dr) {
CTRLRNN_SIMD
      for (int64_t j = 0; j < W; ++j) dr[j] += dh[j];
    }
  }
}

// What the backward of one call reads and writes, and the step of one row over a range of hidden
// units, for both splits (the batch split's rows take the whole range).
template <typename scalar_t, typename A>
struct BackwardRows {
  const Tree& tr;
  const Lengths& L;
  int64_t T;
  const scalar_t *gh, *P, *al, *be, *hs, *h0, *res, *carry;
  scalar_t *rec, *dx, *dr;

  // Row b at step t, hidden units [j0, j0 + W): its columns of dP (every map) and of d res, the
  // range's part of d alpha, d beta into sa, sb (I each), and its columns of the carried
  // gradient rec (the direct part through the cells' (1 - f); the step's product adds the
  // rest); zeros past the row's length, rec then untouched.
  void row(int64_t b, int64_t t, int64_t j0, int64_t W, scalar_t* sa, scalar_t* sb,
           TreeScratch<scalar_t>& sc) const {
    const int64_t H = tr.H, G = tr.G, I = tr.I, bt = b * T + t;
    scalar_t* d = dx + bt * G;
    if (t >= L.len[static_cast<size_t>(b)]) {
      for (int64_t m = 0; m < 3 * tr.N; ++m) fill_zero(d + m * H + j0, W);
      fill_zero(sa, I);
      fill_zero(sb, I);
      if (dr) fill_zero(dr + bt * H + j0, W);
      return;
    }
    const scalar_t* s = t > 0 ? hs + (bt - 1) * H : h0 + b * H;
    tree_backward<scalar_t, A>(tr, P + bt * G, s, al + bt * I, be + bt * I,
                            res ? res + bt * H : nullptr,
                            incoming(L, b, t, static_cast<const scalar_t*>(rec), carry, H),
                            gh ? gh + bt * H : nullptr, d, dr ? dr + bt * H : nullptr, sa, sb, sc,
                            j0, W);
    std::memcpy(rec + b * H + j0, sc.ds.data(), sizeof(scalar_t) * static_cast<size_t>(W));
  }
};

}  // namespace
}  // namespace ctrlrnn::cells
