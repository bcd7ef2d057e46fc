// The METAGROSS unit as printed (METAGROSS paper section 2, gates="state") on CPU: a nonlinear
// recurrence, fused like the other gated cells (cells_common.h). Every base map reads
// (x_t, h_{t-1}), so per step one GEMM gives the recurrent part of all 3N base pre-activations of
// the tree, and one pointwise pass evaluates the tree from the leaves up:
//
//   P^g_k   = x_proj[t, g, k] + (U h_{t-1})[g, k]                     F^g_k(x_t, h_{t-1})
//   f_k     = sig(P^F_k + alpha_k (m^F_k - P^F_k))                    (2-1; m^F_k = h_{2k+1})
//   o_k     = sig(P^O_k + beta_k  (m^O_k - P^O_k))                    (2-2; m^O_k = h_{2k+2})
//   z_k     = tanh(P^Z_k)                                             (2-3)
//   c_k     = (1 - f_k) h_{t-1} + f_k z_k                             (2-4)
//   h_k     = o_k c_k (+ r_t)                                         (2-5, 2-6)
//
// for the N = 2^L - 1 units of the tree in heap order (unit k's children 2k+1, 2k+2; leaves, the
// units of level L, have f = sig(P^F), o = sig(P^O)). Every unit reads the same h_{t-1}, the
// root's previous output (the children are called on the caller's (x_t, h_{t-1})), and the root's
// h_0 is the new state. alpha_k (m - P) + P is the printed alpha m + (1 - alpha) P, written as the
// level op and the reference write it (the same special values for Inf inputs).
//
// Layouts: x_proj (B, T, 3NH), the base maps level-major as in nn/metagross.py's base_index (per
// level n with s = 2^(n-1) - 1 units before it and k = s + 1 in it: [F of its k units | O | Z]);
// weight_hh (3NH, H) in the same row order; alpha, beta (B, T, I) with I = (N - 1) / 2 internal
// units in heap order; res (B, T, H) the residual term r_t (x_t or W_r x_t), optional.
//
// The forward saves the pre-activations P (B, T, 3NH) when training; backward recomputes the
// tree's activations from P and h_{t-1}, walks it from the root down (each unit has one parent,
// so its output gradient is set once), writes dP into dx_proj[:, t] and adds dP U to the carried
// state gradient with one GEMM per step.

#include "cells_common.h"
#include "recurrences.h"
#include "cells_time.h"

#include <ATen/ATen.h>
#include <torch/csrc/utils/pybind.h>

#include <ATen/ThreadLocalState.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <exception>
#include <memory>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

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
template <typename scalar_t>
inline void tree_forward(const Tree& tr, const scalar_t* __restrict P, const scalar_t* s_row,
                         const scalar_t* alpha, const scalar_t* beta, const scalar_t* r_row,
                         scalar_t* hn, scalar_t* fs, scalar_t* os, scalar_t* zs, scalar_t* cs,
                         int64_t j0, int64_t W) {
  using A = Act<scalar_t>;
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
template <typename scalar_t>
inline void tree_backward(const Tree& tr, const scalar_t* P, const scalar_t* s_row,
                          const scalar_t* al, const scalar_t* be, const scalar_t* r_row,
                          const scalar_t* dh_row, const scalar_t* g_row, scalar_t* d,
                          scalar_t* dr_row, scalar_t* sa, scalar_t* sb, TreeScratch<scalar_t>& sc,
                          int64_t j0, int64_t W) {
  const int64_t H = tr.H, N = tr.N, I = tr.I;
  // the children's outputs hn (residual included) enter d alpha, d beta
  tree_forward<scalar_t>(tr, P, s_row, al, be, r_row, sc.hn.data(), sc.fs.data(), sc.os.data(),
                         sc.zs.data(), sc.cs.data(), j0, W);
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
template <typename scalar_t>
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
    tree_backward<scalar_t>(tr, P + bt * G, s, al + bt * I, be + bt * I,
                            res ? res + bt * H : nullptr,
                            incoming(L, b, t, static_cast<const scalar_t*>(rec), carry, H),
                            gh ? gh + bt * H : nullptr, d, dr ? dr + bt * H : nullptr, sa, sb, sc,
                            j0, W);
    std::memcpy(rec + b * H + j0, sc.ds.data(), sizeof(scalar_t) * static_cast<size_t>(W));
  }
};

// ---------------------------------------------------------------------------------------------
// The hidden units split over the threads (a unidirectional layer on 2+ threads).
//
// The batch split (cells_time.h) gives each thread B / threads rows of every per-step product;
// at a small batch that is few rows against 3NH columns, a shape BLAS runs slowly, or, below
// 2 * kMinRows rows, no split at all. Here each thread takes all B rows and the columns of its
// hidden units [j0, j0 + W) in every one of the 3N maps (forward), or those columns of dh_{t-1}
// (backward), and the tree at those units, which needs no other units' values. The price is one
// barrier per step: step t+1's product reads every thread's h_t, and backward's product of step
// t reads every thread's dP_t. The state is double-buffered, so the one barrier suffices in
// forward; in backward a thread's next rows read only the columns of dh it wrote itself.

// 0: the split is chosen by column_parts; 1: always the batch; 2: the hidden units when there
// are 2+ threads (tests, to run either path at any size). CTRLRNN_METAGROSS_SPLIT=auto, batch or
// hidden sets it when the extension loads; metagross_state_split(mode) at any time.
inline std::atomic<int>& split_mode() {
  static std::atomic<int> mode{[] {
    const char* text = std::getenv("CTRLRNN_METAGROSS_SPLIT");
    const std::string v = text ? text : "";
    if (v.empty() || v == "auto") return 0;
    if (v == "batch") return 1;
    if (v == "hidden") return 2;
    TORCH_WARN("CTRLRNN_METAGROSS_SPLIT=", v, " is not one of auto, batch, hidden; ignored");
    return 0;
  }()};
  return mode;
}

constexpr int64_t kColumnQuantum = 16;  // hidden units per part: a multiple of this

// The automatic choice follows the measured grid in docs/metagross.md: the hidden units split
// when the batch cannot (fewer than 2 * kMinRows rows: the batch split then runs on one thread)
// and every part gets at least 32 units, or when the batch split would give each thread at most
// 8 rows and every part gets at least 128 units. With more rows per thread, or narrower parts,
// the per-step products of the batch split are as fast or faster, and it needs no barrier.
constexpr int64_t kColumnMinWidthAlone = 32;
constexpr int64_t kColumnMaxRows = 8;
constexpr int64_t kColumnMinWidth = 128;

// How many parts the hidden units split into (1: the batch split runs instead).
inline int64_t column_parts(int64_t B, int64_t T, int64_t H) {
#ifdef _OPENMP
  const int mode = split_mode().load();
  const int64_t threads = at::get_num_threads();
  if (mode == 1 || threads < 2 || B <= 0 || T <= 0 || H <= 0 || at::in_parallel_region() ||
      omp_in_parallel()) {
    return 1;
  }
  if (mode == 2) return std::min<int64_t>(threads, (H + kColumnQuantum - 1) / kColumnQuantum);
  if (B < 2 * kMinRows) return std::max<int64_t>(1, std::min(threads, H / kColumnMinWidthAlone));
  if (B / threads <= kColumnMaxRows) {
    return std::max<int64_t>(1, std::min(threads, H / kColumnMinWidth));
  }
  return 1;
#else
  (void)B, (void)T, (void)H;
  return 1;
#endif
}

// Part p of `parts` of the hidden units: [first, first + width).
struct Columns {
  int64_t first, width;
};
inline Columns columns_of(int64_t p, int64_t parts, int64_t H) {
  const int64_t per = ((H + parts - 1) / parts + kColumnQuantum - 1) / kColumnQuantum *
                      kColumnQuantum;
  const int64_t first = std::min(H, p * per);
  return {first, std::min(H, first + per) - first};
}

// Runs body(p) for every part p on `parts` threads, then step(t) for t in order, a barrier after
// each step on every thread; each thread runs its parts' share of every step (step(t, p)).
// An exception stops the work but not the barriers (so no thread waits forever); the first is
// rethrown on the calling thread.
template <typename Setup, typename Step>
void over_columns(int64_t parts, int64_t steps, const Setup& setup, const Step& step) {
#ifdef _OPENMP
  const at::ThreadLocalState state;
  std::atomic<bool> failed{false};
  std::exception_ptr error;
#pragma omp parallel num_threads(static_cast<int>(parts))
  {
    at::ThreadLocalStateGuard guard(state);
    const int64_t team = omp_get_num_threads(), me = omp_get_thread_num();
    auto guarded = [&](const auto& work) {
      if (failed.load(std::memory_order_relaxed)) return;
      try {
        work();
      } catch (...) {
#pragma omp critical(ctrlrnn_metagross_columns)
        {
          if (!error) error = std::current_exception();
        }
        failed.store(true);
      }
    };
    guarded([&] {
      for (int64_t p = me; p < parts; p += team) setup(p);
    });
#pragma omp barrier
    for (int64_t t = 0; t < steps; ++t) {
      guarded([&] {
        for (int64_t p = me; p < parts; p += team) step(t, p);
      });
#pragma omp barrier
    }
  }
  if (error) std::rethrow_exception(error);
#else
  (void)parts, (void)steps, (void)setup, (void)step;
  TORCH_CHECK(false, "metagross_state: the column split needs OpenMP");
#endif
}

// Forward with the hidden units split (see above). h (B, H): h_0 in, the state at each row's
// length out.
template <typename scalar_t>
void forward_columns(const Tree& tr, const Lengths& L, int64_t parts, const at::Tensor& weight_hh,
                     const scalar_t* xp_all, const scalar_t* al_p, const scalar_t* be_p,
                     const scalar_t* res_p, at::Tensor& h, scalar_t* hs_p,
                     const SavedActs& saved, int64_t B, int64_t T) {
  const int64_t H = tr.H, G = tr.G, N = tr.N, I = tr.I, maps = 3 * tr.N;
  const int64_t steps = L.max_len;
  at::Tensor hbuf = at::empty({2, B, H}, h.options());
  hbuf[0].copy_(h);
  scalar_t* hb = hbuf.data_ptr<scalar_t>();
  std::vector<at::Tensor> w(static_cast<size_t>(parts)), rec(w.size());
  std::vector<std::unique_ptr<StepGemm<scalar_t>>> gemm(w.size());
  std::vector<std::vector<scalar_t>> hn(w.size());
  const at::Tensor w3 = weight_hh.view({maps, H, H});
  over_columns(parts, steps, [&](int64_t p) {
    const Columns c = columns_of(p, parts, H);
    const auto i = static_cast<size_t>(p);
    if (c.width == 0) return;
    // the rows of U for these units in every map, map by map: (3N * W, H)
    w[i] = w3.narrow(1, c.first, c.width).reshape({maps * c.width, H}).contiguous();
    rec[i] = at::empty({B, maps * c.width}, h.options());
    gemm[i] = std::make_unique<StepGemm<scalar_t>>(w[i], /*transpose=*/true, B);
    hn[i].resize(static_cast<size_t>(N * c.width));
  }, [&](int64_t t, int64_t p) {
    const Columns c = columns_of(p, parts, H);
    const auto i = static_cast<size_t>(p);
    if (c.width == 0) return;
    const int64_t j0 = c.first, W = c.width, ldr = maps * W;
    const scalar_t* prev = hb + (t & 1) * B * H;
    scalar_t* next = hb + ((t + 1) & 1) * B * H;
    scalar_t* r = rec[i].template data_ptr<scalar_t>();
    if (!gemm[i]->run_raw(prev, H, r, ldr, false)) {
      gemm[i]->run(hbuf[t & 1], rec[i], false);
    }
    for (int64_t b = 0; b < B; ++b) {
      const int64_t bt = b * T + t;
      scalar_t* P = saved.row<scalar_t>(b, bt, G);
      scalar_t* hs = hs_p + bt * H + j0;
      if (t >= L.len[static_cast<size_t>(b)]) {
        for (int64_t m = 0; m < maps; ++m) fill_zero(P + m * H + j0, W);
        fill_zero(hs, W);
        std::memcpy(next + b * H + j0, prev + b * H + j0, sizeof(scalar_t) * size_t(W));
        continue;
      }
      const scalar_t* xp = xp_all + bt * G;
      const scalar_t* rr = r + b * ldr;
      for (int64_t m = 0; m < maps; ++m) {
        scalar_t* __restrict Pm = P + m * H + j0;
        const scalar_t* __restrict xm = xp + m * H + j0;
        const scalar_t* __restrict rm = rr + m * W;
CTRLRNN_SIMD
        for (int64_t j = 0; j < W; ++j) Pm[j] = xm[j] + rm[j];
      }
      tree_forward<scalar_t>(tr, P, prev + b * H, al_p + bt * I, be_p + bt * I,
                             res_p ? res_p + bt * H : nullptr, hn[i].data(), nullptr, nullptr,
                             nullptr, nullptr, j0, W);
      std::memcpy(next + b * H + j0, hn[i].data(), sizeof(scalar_t) * size_t(W));
      std::memcpy(hs, hn[i].data(), sizeof(scalar_t) * size_t(W));
    }
  });
  h.copy_(hbuf[steps & 1]);
  // steps past every row's length (T > the longest row) hold zeros
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = steps; t < T; ++t) {
      fill_zero(hs_p + (b * T + t) * H, H);
      fill_zero(saved.row<scalar_t>(b, b * T + t, G), G);
    }
  }
}

// Backward with the hidden units split (see above): part p writes the columns of its units of
// dx (every map), dres, and of rec (the carried dh_{t-1}), and its share of the sums d alpha,
// d beta into its own slab of da_parts, db_parts (parts, B, T, I), added up by the caller.
template <typename scalar_t>
void backward_columns(const BackwardRows<scalar_t>& rows, int64_t parts,
                      const at::Tensor& weight_hh, const at::Tensor& rec, scalar_t* da_parts,
                      scalar_t* db_parts, int64_t B) {
  const Tree& tr = rows.tr;
  const int64_t H = tr.H, G = tr.G, N = tr.N, I = tr.I, T = rows.T;
  const int64_t steps = rows.L.max_len;
  std::vector<at::Tensor> w(static_cast<size_t>(parts));
  std::vector<std::unique_ptr<StepGemm<scalar_t>>> gemm(w.size());
  std::vector<std::unique_ptr<TreeScratch<scalar_t>>> sc(w.size());
  // steps past every row's length: zeros, before the loop
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = steps; t < T; ++t) {
      const int64_t bt = b * T + t;
      fill_zero(rows.dx + bt * G, G);
      if (rows.dr) fill_zero(rows.dr + bt * H, H);
    }
  }
  // steps + 1 rounds: round k runs the product of step steps - k (k >= 1: its dP complete since
  // the barrier), then the rows of step steps - 1 - k; the last round has step 0's product alone
  over_columns(parts, steps + 1, [&](int64_t p) {
    const Columns c = columns_of(p, parts, H);
    const auto i = static_cast<size_t>(p);
    if (c.width == 0) return;
    w[i] = weight_hh.narrow(1, c.first, c.width).contiguous();  // (3NH, W)
    gemm[i] = std::make_unique<StepGemm<scalar_t>>(w[i], /*transpose=*/false, B);
    sc[i] = std::make_unique<TreeScratch<scalar_t>>(N, c.width);
  }, [&](int64_t k, int64_t p) {
    const Columns c = columns_of(p, parts, H);
    const auto i = static_cast<size_t>(p);
    if (c.width == 0) return;
    const int64_t j0 = c.first, W = c.width;
    const int64_t t_prod = steps - k;  // its dP is complete
    if (k > 0) {
      const scalar_t* a = rows.dx + t_prod * G;
      if (!gemm[i]->run_raw(a, T * G, rows.rec + j0, H, true)) {
        const at::Tensor dx = at::from_blob(rows.dx, {B, T, G}, rec.options());
        gemm[i]->run(dx.select(1, t_prod), rec.narrow(1, j0, W), true);
      }
    }
    const int64_t t = steps - 1 - k;  // the rows of this step
    if (t < 0) return;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t bt = b * T + t;
      rows.row(b, t, j0, W, da_parts + (p * B * T + bt) * I, db_parts + (p * B * T + bt) * I,
               *sc[i]);
    }
  });
}

void check_inputs(const at::Tensor& x_proj, const at::Tensor& weight_hh, const at::Tensor& alpha,
                  const at::Tensor& beta, const at::Tensor& res, const Tree& tr) {
  const int64_t B = x_proj.size(0), T = x_proj.size(1);
  TORCH_CHECK(alpha.dim() == 3 && alpha.size(0) == B && alpha.size(1) == T &&
                  alpha.size(2) == tr.I,
              "metagross_state: alpha must be (", B, ", ", T, ", ", tr.I, "), got ", alpha.sizes());
  TORCH_CHECK(beta.sizes() == alpha.sizes(), "metagross_state: beta must be shaped as alpha");
  TORCH_CHECK(alpha.scalar_type() == x_proj.scalar_type() &&
                  beta.scalar_type() == x_proj.scalar_type(),
              "metagross_state: alpha, beta dtype must match x_proj");
  if (res.defined()) {
    TORCH_CHECK(res.dim() == 3 && res.size(0) == B && res.size(1) == T && res.size(2) == tr.H,
                "metagross_state: res must be (", B, ", ", T, ", ", tr.H, "), got ", res.sizes());
    TORCH_CHECK(res.scalar_type() == x_proj.scalar_type(),
                "metagross_state: res dtype must match x_proj");
  }
  TORCH_CHECK(weight_hh.size(0) == tr.G, "metagross_state: weight_hh must be (", tr.G, ", ",
              tr.H, ")");
}

Tree tree_of(const at::Tensor& x_proj, const at::Tensor& weight_hh) {
  TORCH_CHECK(x_proj.dim() == 3 && weight_hh.dim() == 2,
              "metagross_state: x_proj must be (B, T, 3NH) and weight_hh (3NH, H)");
  const int64_t H = weight_hh.size(1);
  TORCH_CHECK(H > 0 && x_proj.size(2) % (3 * H) == 0,
              "metagross_state: x_proj's last dimension must be 3*N*H");
  const int64_t N = x_proj.size(2) / (3 * H);
  TORCH_CHECK(N >= 1 && ((N + 1) & N) == 0, "metagross_state: N = 2^L - 1 units expected, got ",
              N);
  return Tree(N, H);
}

std::vector<at::Tensor> metagross_state_forward(const at::Tensor& x_proj_in,
                                                const at::Tensor& weight_hh_in,
                                                const at::Tensor& alpha_in,
                                                const at::Tensor& beta_in,
                                                const c10::optional<at::Tensor>& res_in,
                                                const at::Tensor& h0_in,
                                                const c10::optional<at::Tensor>& lengths,
                                                bool save) {
  const Tree tr = tree_of(x_proj_in, weight_hh_in);
  check_common(x_proj_in, weight_hh_in, 3 * tr.N, 3 * tr.N, "metagross_state");
  const at::Tensor x_proj = x_proj_in.contiguous();
  const at::Tensor weight_hh = weight_hh_in.contiguous();
  const at::Tensor alpha = alpha_in.contiguous(), beta = beta_in.contiguous();
  const at::Tensor res = opt_contig(res_in);
  check_inputs(x_proj, weight_hh, alpha, beta, res, tr);
  const int64_t B = x_proj.size(0), T = x_proj.size(1), H = tr.H, G = tr.G, N = tr.N, I = tr.I;
  check_state(h0_in, B, H, x_proj, "h0");
  const Lengths L = read_lengths(lengths, B, T);

  at::Tensor h = h0_in.contiguous().clone();
  at::Tensor h_seq = ctrlrnn::pooled_empty({B, T, H}, x_proj.options());
  const SavedActs saved(save, B, T, G, x_proj.options());
  at::Tensor rec = at::zeros({B, G}, x_proj.options());

  const int64_t parts = column_parts(B, T, H);
  AT_DISPATCH_FLOATING_TYPES(x_proj.scalar_type(), "metagross_state_forward", [&] {
    const scalar_t* xp_all = x_proj.data_ptr<scalar_t>();
    const scalar_t* al_p = alpha.data_ptr<scalar_t>();
    const scalar_t* be_p = beta.data_ptr<scalar_t>();
    const scalar_t* res_p = res.defined() ? res.data_ptr<scalar_t>() : nullptr;
    if (parts > 1) {
      forward_columns<scalar_t>(tr, L, parts, weight_hh, xp_all, al_p, be_p, res_p, h,
                                h_seq.data_ptr<scalar_t>(), saved, B, T);
      return;
    }
    const scalar_t* rec_p = rec.data_ptr<scalar_t>();
    scalar_t* h_p = h.data_ptr<scalar_t>();
    scalar_t* hs_p = h_seq.data_ptr<scalar_t>();
    forward_in_time<scalar_t>(L, B, T, weight_hh, h, rec,
        [&](int64_t b0, int64_t b1, const auto& run) {
      std::vector<scalar_t> hn(static_cast<size_t>(N * H));
      run([&](int64_t b, int64_t t, int64_t bt, bool valid) {
        scalar_t* __restrict hs = hs_p + bt * H;
        scalar_t* __restrict P = saved.row<scalar_t>(b, bt, G);
        if (!valid) {
          fill_zero(hs, H);
          fill_zero(P, G);
          return;
        }
        const scalar_t* __restrict xp = xp_all + bt * G;
        const scalar_t* __restrict rr = rec_p + b * G;
CTRLRNN_SIMD
        for (int64_t g = 0; g < G; ++g) P[g] = xp[g] + rr[g];
        scalar_t* hb = h_p + b * H;
        tree_forward<scalar_t>(tr, P, hb, al_p + bt * I, be_p + bt * I,
                               res_p ? res_p + bt * H : nullptr, hn.data(), nullptr, nullptr,
                               nullptr, nullptr, 0, H);
        std::memcpy(hb, hn.data(), sizeof(scalar_t) * static_cast<size_t>(H));
        std::memcpy(hs, hn.data(), sizeof(scalar_t) * static_cast<size_t>(H));
      });
    });
  });
  return {h_seq, h, saved.acts};
}

// Returns {dx_proj (B,T,3NH), dweight_hh (3NH,H), dalpha (B,T,I), dbeta (B,T,I), dres (B,T,H)
// (empty without res), dh0 (B,H)}. `acts` is the forward's saved P.
std::vector<at::Tensor> metagross_state_backward(
    const c10::optional<at::Tensor>& grad_h_seq, const c10::optional<at::Tensor>& grad_h_last,
    const at::Tensor& weight_hh_in, const at::Tensor& alpha_in, const at::Tensor& beta_in,
    const c10::optional<at::Tensor>& res_in, const at::Tensor& h0_in, const at::Tensor& h_seq_in, const at::Tensor& acts_in,
    const c10::optional<at::Tensor>& lengths) {
  const at::Tensor weight_hh = weight_hh_in.contiguous();
  const at::Tensor alpha = alpha_in.contiguous(), beta = beta_in.contiguous();
  const at::Tensor h0 = h0_in.contiguous(), h_seq = h_seq_in.contiguous();
  const at::Tensor acts = acts_in.contiguous();
  const at::Tensor res = opt_contig(res_in);
  const bool has_res = res.defined();
  const Tree tr = tree_of(acts, weight_hh);
  const int64_t B = h_seq.size(0), T = h_seq.size(1), H = tr.H, G = tr.G, N = tr.N, I = tr.I;
  TORCH_CHECK(acts.size(0) == B && acts.size(1) == T, "metagross_state: saved activations "
              "missing (the forward ran without save)");
  const Lengths L = read_lengths(lengths, B, T);
  const at::Tensor gh = opt_contig(grad_h_seq), ghl = opt_contig(grad_h_last);

  const auto opts = h_seq.options();
  at::Tensor dx = ctrlrnn::pooled_empty({B, T, G}, opts);
  at::Tensor dalpha = at::empty({B, T, I}, opts), dbeta = at::empty({B, T, I}, opts);
  at::Tensor dres = has_res ? at::empty({B, T, H}, opts) : at::empty({0}, opts);
  at::Tensor carry_h = ghl.defined() ? ghl.clone() : at::zeros({B, H}, opts);
  at::Tensor rec = at::zeros({B, H}, opts);

  const int64_t parts = column_parts(B, T, H);
  AT_DISPATCH_FLOATING_TYPES(h_seq.scalar_type(), "metagross_state_backward", [&] {
    const scalar_t* gh_p = gh.defined() ? gh.data_ptr<scalar_t>() : nullptr;
    const scalar_t* P_all = acts.data_ptr<scalar_t>();
    const scalar_t* al_p = alpha.data_ptr<scalar_t>();
    const scalar_t* be_p = beta.data_ptr<scalar_t>();
    const scalar_t* hs_p = h_seq.data_ptr<scalar_t>();
    const scalar_t* h0_p = h0.data_ptr<scalar_t>();
    scalar_t* rec_p = rec.data_ptr<scalar_t>();
    const scalar_t* ch_p = carry_h.data_ptr<scalar_t>();
    scalar_t* dx_p = dx.data_ptr<scalar_t>();
    scalar_t* da_p = dalpha.data_ptr<scalar_t>();
    scalar_t* db_p = dbeta.data_ptr<scalar_t>();
    scalar_t* dr_p = has_res ? dres.data_ptr<scalar_t>() : nullptr;
    const scalar_t* res_p = has_res ? res.data_ptr<scalar_t>() : nullptr;
    const BackwardRows<scalar_t> rows{tr, L, T, gh_p, P_all, al_p, be_p, hs_p, h0_p, res_p,
                                      ch_p, rec_p, dx_p, dr_p};
    if (parts > 1) {
      at::Tensor da_parts = at::zeros({parts, B, T, I}, opts);
      at::Tensor db_parts = at::zeros({parts, B, T, I}, opts);
      backward_columns<scalar_t>(rows, parts, weight_hh, rec, da_parts.data_ptr<scalar_t>(),
                                 db_parts.data_ptr<scalar_t>(), B);
      at::sum_out(dalpha, da_parts, {0});
      at::sum_out(dbeta, db_parts, {0});
      return;
    }
    backward_in_time<scalar_t>(L, B, T, weight_hh, rec, true,
        [&](int64_t b0, int64_t b1, const auto& run) {
      TreeScratch<scalar_t> sc(N, H);
      run([&](int64_t b, int64_t t, int64_t bt, bool) {
        rows.row(b, t, 0, H, da_p + bt * I, db_p + bt * I, sc);
      });
    }, dx, dx.size(2));
  });
  at::Tensor dh0 = initial_state_grad(L, rec, carry_h);
  at::Tensor dW = ctrlrnn::gemm::mm(dx.view({B * T, G}).t(), shifted_states(h0, h_seq).view({B * T, H}));
  return {dx, dW, dalpha, dbeta, dres, dh0};
}

}  // namespace

void bind_metagross_state(pybind11::module_& m) {
  m.def("metagross_state_forward", &Recurrences<&metagross_state_forward, 1, 0, 6>::run,
        "METAGROSS (section 2 as printed) forward -> h_seq, h_last, saved pre-activations");
  m.def("metagross_state_backward", &Recurrences<&metagross_state_backward, 2, 7, 9>::run,
        "METAGROSS (section 2 as printed) backward -> dx_proj, dweight_hh, dalpha, dbeta, dres, "
        "dh0");
  m.def("metagross_state_split", [](int mode) {
    TORCH_CHECK(mode >= 0 && mode <= 2, "metagross_state_split: mode must be 0 (auto), 1 (the "
                "batch) or 2 (the hidden units), got ", mode);
    return split_mode().exchange(mode);
  }, "how METAGROSS as printed splits its work over the threads: 0 auto, 1 the batch, 2 the "
     "hidden units (with 2+ threads); returns the previous mode");
  m.def("metagross_state_parts", &column_parts,
        "the parts the hidden units of a (B, T, H) call split into (1: the batch split)");
}

}  // namespace ctrlrnn::cells
