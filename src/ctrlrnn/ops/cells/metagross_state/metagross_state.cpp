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
#include "metagross_tree.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <ATen/ThreadLocalState.h>

#include <atomic>
#include <exception>
#include <memory>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace ctrlrnn::cells {
namespace {

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
// are 2+ threads (tests use it to run either path at any size). Python hands in
// CTRLRNN_METAGROSS_SPLIT through metagross_state_split when the extension loads.
inline std::atomic<int>& split_mode() {
  static std::atomic<int> mode{0};
  return mode;
}

constexpr int64_t kColumnQuantum = 16;  // hidden units per part: a multiple of this

// The automatic choice. The hidden units split when the batch cannot (fewer than 2 * kMinRows
// rows, so the batch split would run on one thread) and every part gets at least 32 units. They
// also split when the batch split would give each thread at most 8 rows and every part gets at
// least 128 units. With more rows per thread, or narrower parts, the batch split's per-step
// products are as fast and need no barrier.
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
template <typename scalar_t, typename A>
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
      tree_forward<scalar_t, A>(tr, P, prev + b * H, al_p + bt * I, be_p + bt * I,
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
template <typename scalar_t, typename A>
void backward_columns(const BackwardRows<scalar_t, A>& rows, int64_t parts,
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
  at::Tensor h_seq = ctrlrnn::runtime::empty({B, T, H}, x_proj.options());
  const SavedActs saved(save, B, T, G, x_proj.options());
  at::Tensor rec = at::zeros({B, G}, x_proj.options());

  const int64_t parts = column_parts(B, T, H);
  AT_DISPATCH_FLOATING_TYPES(x_proj.scalar_type(), "metagross_state_forward", [&] {
    with_math<scalar_t, Act<scalar_t>>([&](auto math) {
      using A = decltype(math);
      const scalar_t* xp_all = x_proj.data_ptr<scalar_t>();
      const scalar_t* al_p = alpha.data_ptr<scalar_t>();
      const scalar_t* be_p = beta.data_ptr<scalar_t>();
      const scalar_t* res_p = res.defined() ? res.data_ptr<scalar_t>() : nullptr;
      if (parts > 1) {
        forward_columns<scalar_t, A>(tr, L, parts, weight_hh, xp_all, al_p, be_p, res_p, h,
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
          tree_forward<scalar_t, A>(tr, P, hb, al_p + bt * I, be_p + bt * I,
                                    res_p ? res_p + bt * H : nullptr, hn.data(), nullptr,
                                    nullptr, nullptr, nullptr, 0, H);
          std::memcpy(hb, hn.data(), sizeof(scalar_t) * static_cast<size_t>(H));
          std::memcpy(hs, hn.data(), sizeof(scalar_t) * static_cast<size_t>(H));
        });
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
  at::Tensor dx = ctrlrnn::runtime::empty({B, T, G}, opts);
  at::Tensor dalpha = at::empty({B, T, I}, opts), dbeta = at::empty({B, T, I}, opts);
  at::Tensor dres = has_res ? at::empty({B, T, H}, opts) : at::empty({0}, opts);
  at::Tensor carry_h = ghl.defined() ? ghl.clone() : at::zeros({B, H}, opts);
  at::Tensor rec = at::zeros({B, H}, opts);

  const int64_t parts = column_parts(B, T, H);
  AT_DISPATCH_FLOATING_TYPES(h_seq.scalar_type(), "metagross_state_backward", [&] {
    with_math<scalar_t, Act<scalar_t>>([&](auto math) {
      using A = decltype(math);
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
      const BackwardRows<scalar_t, A> rows{tr, L, T, gh_p, P_all, al_p, be_p, hs_p, h0_p, res_p,
                                        ch_p, rec_p, dx_p, dr_p};
      if (parts > 1) {
        at::Tensor da_parts = at::zeros({parts, B, T, I}, opts);
        at::Tensor db_parts = at::zeros({parts, B, T, I}, opts);
        backward_columns<scalar_t, A>(rows, parts, weight_hh, rec, da_parts.data_ptr<scalar_t>(),
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
  });
  at::Tensor dh0 = initial_state_grad(L, rec, carry_h);
  at::Tensor dW = ctrlrnn::runtime::mm(dx.view({B * T, G}).t(), shifted_states(h0, h_seq).view({B * T, H}));
  return {dx, dW, dalpha, dbeta, dres, dh0};
}

}  // namespace

void register_metagross_state(torch::Library& m) {
  // METAGROSS (section 2 as printed) forward -> h_seq, h_last, saved pre-activations
  m.def("metagross_state_forward(Tensor x_proj, Tensor weight_hh, Tensor alpha, Tensor beta, "
        "Tensor? res, Tensor h0, Tensor? lengths, bool save) -> Tensor[]",
        &Recurrences<&metagross_state_forward, 1, 0, 6>::run);
  // METAGROSS (section 2 as printed) backward -> dx_proj, dweight_hh, dalpha, dbeta, dres, dh0
  m.def("metagross_state_backward(Tensor? grad_h_seq, Tensor? grad_h_last, Tensor weight_hh, "
        "Tensor alpha, Tensor beta, Tensor? res, Tensor h0, Tensor h_seq, Tensor acts, "
        "Tensor? lengths) -> Tensor[]", &Recurrences<&metagross_state_backward, 2, 7, 9>::run);
  // how METAGROSS as printed splits its work over the threads: 0 auto, 1 the batch, 2 the
  // hidden units (with 2+ threads); returns the previous mode
  m.def("metagross_state_split(int mode) -> int", [](int64_t mode) -> int64_t {
    TORCH_CHECK(mode >= 0 && mode <= 2, "metagross_state_split: mode must be 0 (auto), 1 (the "
                "batch) or 2 (the hidden units), got ", mode);
    return split_mode().exchange(static_cast<int>(mode));
  });
  // the parts the hidden units of a (B, T, H) call split into (1: the batch split)
  m.def("metagross_state_parts(int B, int T, int H) -> int", &column_parts);
}

}  // namespace ctrlrnn::cells
