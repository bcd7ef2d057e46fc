// The backward of the fused cell steps (cell_steps.cpp) at a small batch on CPU, one op per
// step: the steps' own arithmetic differentiated by hand, then the products with the weights as
// matrix-vector products and outer products on the weights as they are stored. They serve the
// short calls that record a graph (a training step of a few tokens at batch 1 to 4), where the
// whole-sequence path's fixed cost per call is many times the step's arithmetic. Each op's
// readable twin is the autograd of reference.py in ops/cell_steps, which the tests hold it to.
//
// * rcrn_cell_step_backward: RCRN paper eq 1-16 with LSTM cells (the forward is rcrn_cell_step
//   with save, which keeps the three cells' activated gates);
// * metagross_step_backward: METAGROSS paper eq 2-1..2-6 with a linear base and token depth
//   gates, and the same as printed (section 2, gates from h_{t-1}); the forward is
//   metagross_cell_step or metagross_printed_step with `saved`;
// * caslstm_step_backward: CAS-LSTM paper eq 1-6 (the first layer) or 7-13 and 17 (above it);
//   the forward is caslstm_cell_step with `saved`;
// * carnn_step_backward: CARNN paper eq 3 (nCARNN), 5 (iCARNN) or 6 (sCARNN); the forward is
//   carnn_cell_step with `saved`;
// * qrnn_step_backward: QRNN paper eq 1-5 (f-, fo- or ifo-pooling of one causal window); the
//   forward is qrnn_cell_step with `saved`.

#include <ATen/ATen.h>
#include <torch/library.h>

#include "../cell_steps/step_math.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

using namespace ctrlrnn::cell_steps;

// The value of an optional gradient at row r (H values), or the zeros.
template <typename T>
inline const T* grad_row(const c10::optional<at::Tensor>& g, int64_t r, int64_t H,
                         const T* zeros) {
  return is_given(g) ? g->data_ptr<T>() + r * H : zeros;
}

// One LSTM cell's gate gradients at one row (RCRN eq 1-6, 10-14 differentiated; gate rows
// [i | f | g | o], `a` the activated gates): from dh and dc of the new state, with c' and the
// previous c, writes the pre-activation gradients dG (4H) and the previous c's gradient.
template <typename M, typename T>
inline void lstm_row_backward(const T* a, const T* c_new, const T* c_prev, const T* dh_in,
                              const T* dc_in, int64_t H, T* dG, T* dc_prev) {
  const T *ig = a, *fg = a + H, *gg = a + 2 * H, *og = a + 3 * H;
  for (int64_t i = 0; i < H; ++i) {
    const T tc = M::tanh(c_new[i]);
    const T dc = dc_in[i] + dh_in[i] * og[i] * (T(1) - tc * tc);
    dG[i] = dc * gg[i] * ig[i] * (T(1) - ig[i]);
    dG[H + i] = dc * c_prev[i] * fg[i] * (T(1) - fg[i]);
    dG[2 * H + i] = dc * ig[i] * (T(1) - gg[i] * gg[i]);
    dG[3 * H + i] = dh_in[i] * tc * og[i] * (T(1) - og[i]);
    dc_prev[i] = dc * fg[i];
  }
}

// RCRN's listener (eq 15-16) at one row, backward: from the gradients g4 of h4 and gc4 of the new
// c4, with the new h1, h2, h3, c4 and the previous c4, writes the extra gradients of the three
// cells' new h (extra: dh1 | dh2 | dh3, 3H) and the previous c4's.
template <typename M, typename T>
inline void listener_row_backward(const T* g4, const T* gc4, const T* h1n, const T* h2n,
                                  const T* h3n, const T* c4n, const T* c4, int64_t H,
                                  bool sigmoid_gate, T* extra, T* dc4) {
  T *dh1x = extra, *dh2x = extra + H, *dh3x = extra + 2 * H;
  for (int64_t i = 0; i < H; ++i) {
    const T gate = sigmoid_gate ? M::sigmoid(h2n[i]) : h2n[i];  // eq 16: h4 = gate c4
    const T dc4n = gc4[i] + g4[i] * gate;
    const T dgate = g4[i] * c4n[i];
    dh2x[i] = sigmoid_gate ? dgate * gate * (T(1) - gate) : dgate;
    const T s1 = M::sigmoid(h1n[i]);  // eq 15: c4 = s1 c4_prev + (1 - s1) h3
    dc4[i] = dc4n * s1;
    dh3x[i] = dc4n * (T(1) - s1);
    dh1x[i] = dc4n * (c4[i] - h3n[i]) * s1 * (T(1) - s1);
  }
}

// RCRN (eq 1-16), LSTM cells, backward of one step. grads: of (h4, h1, c1, h2, c2, h3, c3, c4)
// new, each (B, H) or none; x (B, D); states, weights as rcrn_cell_step's; new_states the step's
// (h1, c1, h2, c2, h3, c3, c4); acts its saved gates (B, 3, 4H). Returns dx, the seven states'
// gradients, the six weights' (weight_ih, weight_hh per cell) and the three cells' bias
// gradients (the same for bias_ih and bias_hh, which add).
std::vector<at::Tensor> rcrn_cell_step_backward(
    const c10::List<c10::optional<at::Tensor>>& grads, const at::Tensor& x,
    at::TensorList states, at::TensorList stored_weights, at::TensorList new_states,
    const at::Tensor& acts, bool sigmoid_gate) {
  const std::vector<at::Tensor> weights = contiguous_all(stored_weights);  // (as the forward)
  TORCH_CHECK(grads.size() == 8 && states.size() == 7 && stored_weights.size() == 6 &&
                  new_states.size() == 7,
              "rcrn_cell_step_backward: expected 8 gradients, 7 states, 6 weights and 7 new "
              "states");
  TORCH_CHECK(x.dim() == 2, "rcrn_cell_step_backward: expected x (B, D)");
  check_operand(x, x, "x");
  const int64_t B = x.size(0), D = x.size(1), H = states[0].size(-1);
  std::vector<c10::optional<at::Tensor>> g(grads.begin(), grads.end());
  for (auto& t : g) {
    if (is_given(t)) {
      t = t->contiguous();
      check_operand(*t, x, "grad");
      TORCH_CHECK(t->dim() == 2 && t->size(0) == B && t->size(1) == H,
                  "rcrn_cell_step_backward: gradient shape");
    }
  }
  for (const auto& s : states) check_operand(s, x, "state");
  for (const auto& s : new_states) check_operand(s, x, "new state");
  for (const auto& w : weights) check_operand(w, x, "weight");
  check_operand(acts, x, "acts");
  TORCH_CHECK(acts.dim() == 3 && acts.size(0) == B && acts.size(1) == 3 && acts.size(2) == 4 * H,
              "rcrn_cell_step_backward: acts must be (B, 3, 4H)");
  const auto opts = x.options();
  at::Tensor dx = at::zeros({B, D}, opts);
  std::vector<at::Tensor> dstates;
  for (int i = 0; i < 7; ++i) dstates.push_back(at::empty({B, H}, opts));
  std::vector<at::Tensor> dweights;
  for (int j = 0; j < 3; ++j) {
    dweights.push_back(at::empty({4 * H, D}, opts));
    dweights.push_back(at::empty({4 * H, H}, opts));
  }
  std::vector<at::Tensor> dbias;
  for (int j = 0; j < 3; ++j) dbias.push_back(at::zeros({4 * H}, opts));
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "rcrn_cell_step_backward", [&] {
    using T = scalar_t;
    with_activations<T>([&](auto m) {
      using M = decltype(m);
      T* work = scratch<T>(4 * H + 4 * H + 2 * H);
      T *dG = work, *extra = work + 4 * H, *dh = work + 8 * H;  // extra: dh1', dh2', dh3'...
      const std::vector<T> zeros(static_cast<size_t>(H), T(0));
      auto row = [&](const at::Tensor& t, int64_t r) { return t.data_ptr<T>() + r * H; };
      if (B == 0) {
        for (auto& w : dweights) w.zero_();
      }
      for (int64_t r = 0; r < B; ++r) {
        listener_row_backward<M, T>(grad_row<T>(g[0], r, H, zeros.data()),
                                    grad_row<T>(g[7], r, H, zeros.data()),
                                    row(new_states[0], r), row(new_states[2], r),
                                    row(new_states[4], r), row(new_states[6], r),
                                    row(states[6], r), H, sigmoid_gate, extra,
                                    row(dstates[6], r));
        const T* xr = x.data_ptr<T>() + r * D;
        for (int64_t j = 0; j < 3; ++j) {  // eq 1-6, 10-14, each cell
          const T* gh = grad_row<T>(g[1 + 2 * j], r, H, zeros.data());
          const T* gc = grad_row<T>(g[2 + 2 * j], r, H, zeros.data());
          for (int64_t i = 0; i < H; ++i) dh[i] = gh[i] + extra[j * H + i];
          const T* a = acts.data_ptr<T>() + (r * 3 + j) * 4 * H;
          lstm_row_backward<M, T>(a, row(new_states[2 * j + 1], r), row(states[2 * j + 1], r),
                                  dh, gc, H, dG, row(dstates[2 * j + 1], r));
          const at::Tensor &w_ih = weights[2 * j], &w_hh = weights[2 * j + 1];
          gemv_transposed<T>(w_ih.data_ptr<T>(), dG, 4 * H, D, dx.data_ptr<T>() + r * D, true);
          gemv_transposed<T>(w_hh.data_ptr<T>(), dG, 4 * H, H, row(dstates[2 * j], r), false);
          outer<T>(dG, xr, 4 * H, D, dweights[2 * j].data_ptr<T>(), r > 0);
          outer<T>(dG, row(states[2 * j], r), 4 * H, H, dweights[2 * j + 1].data_ptr<T>(),
                   r > 0);
          T* db = dbias[j].data_ptr<T>();
          for (int64_t n = 0; n < 4 * H; ++n) db[n] += dG[n];
        }
      }
    });
  });
  std::vector<at::Tensor> out{dx};
  out.insert(out.end(), dstates.begin(), dstates.end());
  out.insert(out.end(), dweights.begin(), dweights.end());
  out.insert(out.end(), dbias.begin(), dbias.end());
  return out;
}

// ---------------------------------------------------------------------------------------------
// METAGROSS (eq 2-1..2-6, a linear base and token depth gates), backward of one step at one row,
// the root first. `keep` is the row the forward saved (metagross_saved_width: the maps y without
// their bias, the depth gates g, every unit's output); `prev` the units' previous states (N*H) or,
// as printed, the root's h_{t-1} (H, `shared`); `dout` (N*H) holds the root's output gradient
// and receives the children's; `dlast` the gradient of the units' new states, or null. Writes
// the maps' gradient dy (3NH), the depth gates' logits' gradient dlogit (2I), the previous
// states' (N*H, or H accumulated as printed) and adds the residual's to dres (or null).
template <typename M, typename T>
void metagross_row_backward(const T* keep, const T* bias, const T* prev, bool shared,
                            const T* dlast, int64_t N, int64_t I, int64_t depth, int64_t H,
                            bool h_form, T* dout, T* dy, T* dlogit, T* dprev, T* dres) {
  const T *y = keep, *g = keep + 3 * N * H, *outs = g + 2 * I;
  std::fill(dlogit, dlogit + 2 * I, T(0));
  for (int64_t level = 1; level <= depth; ++level) {
    const int64_t s = (int64_t(1) << (level - 1)) - 1, k = s + 1, below = 2 * s + 1;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t u = s + j;
      const T *mf = outs + (below + 2 * j) * H, *mo = outs + (below + 2 * j + 1) * H;
      for (int64_t i = 0; i < H; ++i) {
        const int64_t cf = 3 * H * s + j * H + i, co = cf + k * H, cz = co + k * H;
        const T pf0 = y[cf] + (bias ? bias[cf] : T(0)), po0 = y[co] + (bias ? bias[co] : T(0));
        const T pz = y[cz] + (bias ? bias[cz] : T(0));
        const bool mixed = level < depth;
        const T pf = mixed ? pf0 + g[u] * (mf[i] - pf0) : pf0;  // eq 2-1
        const T po = mixed ? po0 + g[I + u] * (mo[i] - po0) : po0;  // eq 2-2
        const T f = M::sigmoid(pf), o = M::sigmoid(po), z = M::tanh(pz);
        const T p = shared ? prev[i] : prev[u * H + i];
        const T dl = dlast ? dlast[u * H + i] : T(0), dh = dout[u * H + i];
        T df, d_o, dz, dp;
        if (h_form) {  // h = o (1 - f) p + o f z (+ x): eq 2-4..2-6
          const T dc = dh + dl;
          d_o = dc * ((T(1) - f) * p + f * z);
          df = dc * o * (z - p);
          dz = dc * o * f;
          dp = dc * o * (T(1) - f);
          if (dres) dres[i] += dc;
        } else {  // c = (1 - f) p + f z, h = o c (+ x)
          const T c = (T(1) - f) * p + f * z, dc = dl + dh * o;
          d_o = dh * c;
          df = dc * (z - p);
          dz = dc * f;
          dp = dc * (T(1) - f);
          if (dres) dres[i] += dh;
        }
        if (shared) {
          dprev[i] += dp;
        } else {
          dprev[u * H + i] = dp;
        }
        const T dpf = df * f * (T(1) - f), dpo = d_o * o * (T(1) - o);
        dy[cz] = dz * (T(1) - z * z);
        if (mixed) {
          dy[cf] = dpf * (T(1) - g[u]);
          dy[co] = dpo * (T(1) - g[I + u]);
          dout[(below + 2 * j) * H + i] = dpf * g[u];
          dout[(below + 2 * j + 1) * H + i] = dpo * g[I + u];
          dlogit[u] += dpf * (mf[i] - pf0);
          dlogit[I + u] += dpo * (mo[i] - po0);
        } else {
          dy[cf] = dpf;
          dy[co] = dpo;
        }
      }
    }
  }
  for (int64_t n = 0; n < 2 * I; ++n) dlogit[n] *= g[n] * (T(1) - g[n]);  // the gates' sigmoid
}

// METAGROSS, backward of one step (metagross_cell_step, or metagross_printed_step where weight_hh
// is given: the previous state is then the root's h (B, H)). grad_h (B, H) and grad_last (B, N*H)
// the gradients of the step's results, or none; saved what the forward kept with `saved`.
// Returns dx, the previous state's gradient, dweight, dbias, dweight_hh, ddepth_weight and
// ddepth_bias (empty where the parameter is absent).
std::vector<at::Tensor> metagross_step_backward(
    const c10::optional<at::Tensor>& grad_h, const c10::optional<at::Tensor>& grad_last,
    const at::Tensor& x, const at::Tensor& state, const at::Tensor& weight,
    const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& weight_hh,
    const c10::optional<at::Tensor>& depth_weight, const at::Tensor& saved, int64_t depth,
    bool h_form, bool residual) {
  TORCH_CHECK(x.dim() == 2 && state.dim() == 2 && depth >= 1 && depth < 16,
              "metagross_step_backward: expected x (B, D), state 2-D, depth >= 1");
  const bool printed = is_given(weight_hh);
  const bool gated = is_given(depth_weight);
  const int64_t B = x.size(0), D = x.size(1), N = (int64_t(1) << depth) - 1;
  const int64_t I = (int64_t(1) << (depth - 1)) - 1;
  const int64_t H = printed ? state.size(1) : state.size(1) / N;
  for (auto [t, name] : {std::pair{&x, "x"}, {&state, "state"}, {&weight, "weight"},
                         {&saved, "saved"}}) {
    check_operand(*t, x, name);
  }
  check_optional(bias, x, "bias");
  check_optional(weight_hh, x, "weight_hh");
  check_optional(depth_weight, x, "depth_weight");
  TORCH_CHECK(saved.dim() == 2 && saved.size(0) == B &&
                  saved.size(1) == metagross_saved_width(N, I, H) &&
                  weight.size(0) == 3 * N * H && weight.size(1) == D && (!residual || D == H),
              "metagross_step_backward: shapes disagree");
  const auto opts = x.options();
  const at::Tensor gh = grad_or_zeros(grad_h, {B, H}, opts);
  const at::Tensor gl = is_given(grad_last) ? grad_last->contiguous() : at::Tensor();
  at::Tensor dx = at::empty({B, D}, opts), dstate = at::zeros_like(state);
  at::Tensor dweight = at::zeros_like(weight), dbias = at::zeros({3 * N * H}, opts);
  at::Tensor dweight_hh = printed ? at::zeros_like(*weight_hh) : at::empty({0}, opts);
  at::Tensor ddw = gated ? at::zeros_like(*depth_weight) : at::empty({0}, opts);
  at::Tensor ddb = at::zeros({2 * I}, opts);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "metagross_step_backward", [&] {
    using T = scalar_t;
    with_activations<T>([&](auto m) {
      using M = decltype(m);
      T* work = scratch<T>(N * H + 3 * N * H + 2 * I + H);
      T *dout = work, *dy = dout + N * H, *dlogit = dy + 3 * N * H, *dres = dlogit + 2 * I;
      for (int64_t r = 0; r < B; ++r) {
        const T* xr = x.data_ptr<T>() + r * D;
        const T* sr = state.data_ptr<T>() + r * state.size(1);
        T* dsr = dstate.data_ptr<T>() + r * state.size(1);
        std::fill(dout, dout + N * H, T(0));
        std::copy(gh.data_ptr<T>() + r * H, gh.data_ptr<T>() + (r + 1) * H, dout);
        std::fill(dres, dres + H, T(0));
        metagross_row_backward<M, T>(saved.data_ptr<T>() + r * saved.size(1),
                                     data_or_null<T>(bias), sr, printed,
                                     gl.defined() ? gl.data_ptr<T>() + r * N * H : nullptr, N,
                                     I, depth, H, h_form, dout, dy, dlogit, dsr,
                                     residual ? dres : nullptr);
        T* dxr = dx.data_ptr<T>() + r * D;
        if (residual) {
          std::copy(dres, dres + H, dxr);  // (D == H)
        } else {
          std::fill(dxr, dxr + D, T(0));
        }
        gemv_transposed<T>(weight.data_ptr<T>(), dy, 3 * N * H, D, dxr, true);
        outer<T>(dy, xr, 3 * N * H, D, dweight.data_ptr<T>(), true);
        T* db = dbias.data_ptr<T>();
        for (int64_t n = 0; n < 3 * N * H; ++n) db[n] += dy[n];
        if (printed) {  // U h_{t-1} in every map: its products' gradients
          gemv_transposed<T>(weight_hh->data_ptr<T>(), dy, 3 * N * H, H, dsr, true);
          outer<T>(dy, sr, 3 * N * H, H, dweight_hh.data_ptr<T>(), true);
        }
        if (gated) {
          gemv_transposed<T>(depth_weight->data_ptr<T>(), dlogit, 2 * I, D, dxr, true);
          outer<T>(dlogit, xr, 2 * I, D, ddw.data_ptr<T>(), true);
        }
        T* ddbp = ddb.data_ptr<T>();
        for (int64_t n = 0; n < 2 * I; ++n) ddbp[n] += dlogit[n];
      }
    });
  });
  return {dx, dstate, dweight, dbias, dweight_hh, ddw, ddb};
}

// ---------------------------------------------------------------------------------------------
// CAS-LSTM (eq 1-6, or 7-13 and 17), backward of one step at one row: from dh and dc of the new
// state (dh_in, dc_in), the activated gates `a` (G*H: i, f, c~, o, and g above the first layer)
// and the new cell, writes the pre-activation gradients dp (G*H) and the previous c's; above
// the first layer also the lower cell's (dlow), and adds eq 12's lambda's (dlam, mode 2) and
// the peepholes' (dpeep, eq 17).
template <typename M, typename T>
void caslstm_row_backward(const T* a, const T* c_prev, const T* low, const T* c_new,
                          const T* dh_in, const T* dc_in, int64_t H, int64_t lambda_mode,
                          T lambda_value, const T* lam, const T* peep, T* dp, T* dc_prev,
                          T* dlow, T* dlam, T* dpeep) {
  const T *ig = a, *fg = a + H, *ct = a + 2 * H, *og = a + 3 * H, *gg = a + 4 * H;
  for (int64_t i = 0; i < H; ++i) {
    const T tc = M::tanh(c_new[i]);
    const T dc = dc_in[i] + dh_in[i] * og[i] * (T(1) - tc * tc);  // eq 6, 13
    const T l = !low || lambda_mode == 0 ? T(1) : (lam ? lam[i] : lambda_value);
    const T sf = !low || lambda_mode == 0 ? T(1) : T(1) - l;
    dp[i] = dc * ct[i] * ig[i] * (T(1) - ig[i]);  // eq 5, 12: c' = i c~ + sf f c (+ l g low)
    dp[H + i] = dc * sf * c_prev[i] * fg[i] * (T(1) - fg[i]);
    dp[2 * H + i] = dc * ig[i] * (T(1) - ct[i] * ct[i]);
    dp[3 * H + i] = dh_in[i] * tc * og[i] * (T(1) - og[i]);
    dc_prev[i] = dc * sf * fg[i];
    if (!low) continue;
    const T dpg = dc * l * low[i] * gg[i] * (T(1) - gg[i]);
    dp[4 * H + i] = dpg;
    dlow[i] = dc * l * gg[i];
    if (dlam) dlam[i] += dc * (gg[i] * low[i] - fg[i] * c_prev[i]);
    if (peep) {  // eq 17: g reads both cells through its peepholes
      dc_prev[i] += dpg * peep[i];
      dlow[i] += dpg * peep[H + i];
      dpeep[i] += dpg * c_prev[i];
      dpeep[H + i] += dpg * low[i];
    }
  }
}

// CAS-LSTM, backward of one step (caslstm_cell_step with `saved`, its operands as there). grad_h
// and grad_c the gradients of the new h and c, or none. Returns dx, dh, dc, dlower_c, dweight_ih,
// dweight_hh, dbias (always: the caller keeps it where the step had a bias), dlambda_vec and
// dpeephole (empty where absent).
std::vector<at::Tensor> caslstm_step_backward(
    const c10::optional<at::Tensor>& grad_h, const c10::optional<at::Tensor>& grad_c,
    const at::Tensor& x, const at::Tensor& h, const at::Tensor& c,
    const c10::optional<at::Tensor>& lower_c, const at::Tensor& weight_ih,
    const at::Tensor& weight_hh, const c10::optional<at::Tensor>& lambda_vec,
    double lambda_value, int64_t lambda_mode, const c10::optional<at::Tensor>& peephole,
    const at::Tensor& c_new, const at::Tensor& saved) {
  for (auto [t, name] : {std::pair{&x, "x"}, {&h, "h"}, {&c, "c"}, {&weight_ih, "weight_ih"},
                         {&weight_hh, "weight_hh"}, {&c_new, "c_new"}, {&saved, "saved"}}) {
    check_operand(*t, x, name);
  }
  check_optional(lower_c, x, "lower_c");
  check_optional(lambda_vec, x, "lambda_vec");
  check_optional(peephole, x, "peephole");
  const bool vertical = is_given(lower_c);
  const bool peep = is_given(peephole);
  const bool vec = lambda_mode == 2 && is_given(lambda_vec);
  const int64_t B = x.size(0), D = x.size(1), H = h.size(1);
  const int64_t G = vertical ? 5 : 4, G_hh = peep ? 4 : G;
  TORCH_CHECK(x.dim() == 2 && saved.dim() == 2 && saved.size(0) == B && saved.size(1) == G * H &&
                  weight_ih.size(0) == G * H && weight_hh.size(0) == G_hh * H &&
                  (lambda_mode != 2 || vec),
              "caslstm_step_backward: shapes disagree");
  const auto opts = x.options();
  const at::Tensor gh = grad_or_zeros(grad_h, {B, H}, opts);
  const at::Tensor gc = grad_or_zeros(grad_c, {B, H}, opts);
  at::Tensor dx = at::zeros({B, D}, opts), dh = at::empty({B, H}, opts);
  at::Tensor dc = at::empty({B, H}, opts);
  at::Tensor dlow = vertical ? at::empty({B, H}, opts) : at::empty({0}, opts);
  at::Tensor dw_ih = at::zeros_like(weight_ih), dw_hh = at::zeros_like(weight_hh);
  at::Tensor dbias = at::zeros({G * H}, opts);
  at::Tensor dlam = vec ? at::zeros_like(*lambda_vec) : at::empty({0}, opts);
  at::Tensor dpeep = peep ? at::zeros_like(*peephole) : at::empty({0}, opts);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "caslstm_step_backward", [&] {
    using T = scalar_t;
    with_activations<T>([&](auto m) {
      using M = decltype(m);
      T* dp = scratch<T>(G * H);
      for (int64_t r = 0; r < B; ++r) {
        const T *xr = x.data_ptr<T>() + r * D, *hr = h.data_ptr<T>() + r * H;
        caslstm_row_backward<M, T>(
            saved.data_ptr<T>() + r * G * H, c.data_ptr<T>() + r * H,
            vertical ? lower_c->data_ptr<T>() + r * H : nullptr, c_new.data_ptr<T>() + r * H,
            gh.data_ptr<T>() + r * H, gc.data_ptr<T>() + r * H, H, lambda_mode,
            static_cast<T>(lambda_value), vec ? lambda_vec->data_ptr<T>() : nullptr,
            peep ? peephole->data_ptr<T>() : nullptr, dp, dc.data_ptr<T>() + r * H,
            vertical ? dlow.data_ptr<T>() + r * H : nullptr, vec ? dlam.data_ptr<T>() : nullptr,
            peep ? dpeep.data_ptr<T>() : nullptr);
        gemv_transposed<T>(weight_ih.data_ptr<T>(), dp, G * H, D, dx.data_ptr<T>() + r * D,
                           true);
        gemv_transposed<T>(weight_hh.data_ptr<T>(), dp, G_hh * H, H, dh.data_ptr<T>() + r * H,
                           false);
        outer<T>(dp, xr, G * H, D, dw_ih.data_ptr<T>(), true);
        outer<T>(dp, hr, G_hh * H, H, dw_hh.data_ptr<T>(), true);
        T* db = dbias.data_ptr<T>();
        for (int64_t n = 0; n < G * H; ++n) db[n] += dp[n];
      }
    });
  });
  return {dx, dh, dc, dlow, dw_ih, dw_hh, dbias, dlam, dpeep};
}

// ---------------------------------------------------------------------------------------------
// CARNN (eq 3, 5, 6), backward of one step (carnn_cell_step with `saved`, its operands as there;
// saved holds g_u, g_f and, with three gate blocks, ebar). grad_h the gradient of h', or none.
// Returns dx, dh, dweight_ih, dbias_ih (always: the caller keeps it where the step had a bias),
// dcontext, dweight_ch and dweight_hh (empty where absent).
//   h' = g_u (g_f ebar) + (1 - g_u) h,  g = sigmoid(W^e x + b + W^c c + W^h h),  ebar = W_e x + b_e
std::vector<at::Tensor> carnn_step_backward(
    const c10::optional<at::Tensor>& grad_h, const at::Tensor& x, const at::Tensor& h,
    const at::Tensor& weight_ih, const c10::optional<at::Tensor>& context,
    const c10::optional<at::Tensor>& weight_ch, const c10::optional<at::Tensor>& weight_hh,
    const at::Tensor& saved) {
  for (auto [t, name] : {std::pair{&x, "x"}, {&h, "h"}, {&weight_ih, "weight_ih"},
                         {&saved, "saved"}}) {
    check_operand(*t, x, name);
  }
  check_optional(context, x, "context");
  check_optional(weight_ch, x, "weight_ch");
  check_optional(weight_hh, x, "weight_hh");
  const bool has_ctx = is_given(context);
  const bool has_hh = is_given(weight_hh);
  const int64_t B = x.size(0), D = x.size(1), H = h.size(1), G = weight_ih.size(0) / H;
  const int64_t C = has_ctx ? context->size(1) : 0;
  TORCH_CHECK(x.dim() == 2 && saved.dim() == 2 && saved.size(0) == B &&
                  saved.size(1) == G * H && (G == 2 || G == 3) && (G == 3 || D == H),
              "carnn_step_backward: shapes disagree");
  const auto opts = x.options();
  const at::Tensor gh = grad_or_zeros(grad_h, {B, H}, opts);
  at::Tensor dx = at::zeros({B, D}, opts), dh = at::empty({B, H}, opts);
  at::Tensor dw_ih = at::zeros_like(weight_ih), dbias = at::zeros({G * H}, opts);
  at::Tensor dctx = has_ctx ? at::zeros_like(*context) : at::empty({0}, opts);
  at::Tensor dw_ch = has_ctx ? at::zeros_like(*weight_ch) : at::empty({0}, opts);
  at::Tensor dw_hh = has_hh ? at::zeros_like(*weight_hh) : at::empty({0}, opts);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "carnn_step_backward", [&] {
    using T = scalar_t;
    T* dp = scratch<T>(G * H);
    for (int64_t r = 0; r < B; ++r) {
      const T *xr = x.data_ptr<T>() + r * D, *hr = h.data_ptr<T>() + r * H;
      const T* a = saved.data_ptr<T>() + r * G * H;
      const T *u = a, *f = a + H, *g = gh.data_ptr<T>() + r * H;
      T *dxr = dx.data_ptr<T>() + r * D, *dhr = dh.data_ptr<T>() + r * H;
      for (int64_t i = 0; i < H; ++i) {
        const T e = G == 2 ? xr[i] : a[2 * H + i];
        const T du = g[i] * (f[i] * e - hr[i]), df = g[i] * u[i] * e;
        dp[i] = du * u[i] * (T(1) - u[i]);
        dp[H + i] = df * f[i] * (T(1) - f[i]);
        const T de = g[i] * u[i] * f[i];
        if (G == 3) {
          dp[2 * H + i] = de;
        } else {
          dxr[i] += de;  // sCARNN: ebar is x itself (eq 6)
        }
        dhr[i] = g[i] * (T(1) - u[i]);
      }
      gemv_transposed<T>(weight_ih.data_ptr<T>(), dp, G * H, D, dxr, true);
      outer<T>(dp, xr, G * H, D, dw_ih.data_ptr<T>(), true);
      T* db = dbias.data_ptr<T>();
      for (int64_t n = 0; n < G * H; ++n) db[n] += dp[n];
      if (has_ctx) {
        const T* cr = context->data_ptr<T>() + r * C;
        gemv_transposed<T>(weight_ch->data_ptr<T>(), dp, 2 * H, C, dctx.data_ptr<T>() + r * C,
                           true);
        outer<T>(dp, cr, 2 * H, C, dw_ch.data_ptr<T>(), true);
      }
      if (has_hh) {  // nCARNN (eq 3): the gates read h too
        gemv_transposed<T>(weight_hh->data_ptr<T>(), dp, 2 * H, H, dhr, true);
        outer<T>(dp, hr, 2 * H, H, dw_hh.data_ptr<T>(), true);
      }
    }
  });
  return {dx, dh, dw_ih, dbias, dctx, dw_ch, dw_hh};
}

// ---------------------------------------------------------------------------------------------
// QRNN (eq 1-5), backward of one step (qrnn_cell_step with `saved`: the activated gates [z | f |
// o | i]). grad_h, grad_c and grad_history the gradients of h, the new c and the new history
// (the window's last k-1 inputs), or none. Returns dx, dc, dhistory, dweight and dbias.
std::vector<at::Tensor> qrnn_step_backward(
    const c10::optional<at::Tensor>& grad_h, const c10::optional<at::Tensor>& grad_c,
    const c10::optional<at::Tensor>& grad_history, const at::Tensor& x, const at::Tensor& c,
    const at::Tensor& history, const at::Tensor& weight, int64_t mode, const at::Tensor& c_new,
    const at::Tensor& saved) {
  for (auto [t, name] : {std::pair{&x, "x"}, {&c, "c"}, {&history, "history"},
                         {&weight, "weight"}, {&c_new, "c_new"}, {&saved, "saved"}}) {
    check_operand(*t, x, name);
  }
  const int64_t B = x.size(0), D = x.size(1), H = c.size(1), k = history.size(1) + 1;
  const int64_t G = mode == 0 ? 2 : (mode == 1 ? 3 : 4);
  TORCH_CHECK(mode >= 0 && mode <= 2 && saved.dim() == 2 && saved.size(0) == B &&
                  saved.size(1) == G * H && weight.size(0) == G * H && weight.size(1) == k * D,
              "qrnn_step_backward: shapes disagree");
  const auto opts = x.options();
  const at::Tensor gh = grad_or_zeros(grad_h, {B, H}, opts);
  const at::Tensor gc = grad_or_zeros(grad_c, {B, H}, opts);
  const at::Tensor ghist = grad_or_zeros(grad_history, {B, k - 1, D}, opts);
  at::Tensor dc = at::empty({B, H}, opts), dwindow = at::zeros({B, k * D}, opts);
  at::Tensor dweight = at::zeros_like(weight), dbias = at::zeros({G * H}, opts);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "qrnn_step_backward", [&] {
    using T = scalar_t;
    T* dp = scratch<T>(G * H);
    for (int64_t b = 0; b < B; ++b) {
      const T* a = saved.data_ptr<T>() + b * G * H;
      const T *z = a, *f = a + H, *o = a + 2 * H, *in = a + 3 * H;
      const T *cp = c.data_ptr<T>() + b * H, *cn = c_new.data_ptr<T>() + b * H;
      const T *dh = gh.data_ptr<T>() + b * H, *dcn = gc.data_ptr<T>() + b * H;
      T* dcp = dc.data_ptr<T>() + b * H;
      for (int64_t i = 0; i < H; ++i) {  // eq 3-5: h = c (f) or o c (fo, ifo)
        const T d = dcn[i] + (mode == 0 ? dh[i] : dh[i] * o[i]);
        const T df = mode == 2 ? d * cp[i] : d * (cp[i] - z[i]);
        const T dz = mode == 2 ? d * in[i] : d * (T(1) - f[i]);
        dp[i] = dz * (T(1) - z[i] * z[i]);
        dp[H + i] = df * f[i] * (T(1) - f[i]);
        if (mode > 0) dp[2 * H + i] = dh[i] * cn[i] * o[i] * (T(1) - o[i]);
        if (mode == 2) dp[3 * H + i] = d * z[i] * in[i] * (T(1) - in[i]);
        dcp[i] = d * f[i];
      }
      T* dwin = dwindow.data_ptr<T>() + b * k * D;
      gemv_transposed<T>(weight.data_ptr<T>(), dp, G * H, k * D, dwin, true);
      for (int64_t j = 0; j < k; ++j) {  // eq 1-2: tap j of the window [history, x]
        const T* row = j + 1 < k ? history.data_ptr<T>() + (b * (k - 1) + j) * D
                                 : x.data_ptr<T>() + b * D;
        T* dw = dweight.data_ptr<T>() + j * D;
        for (int64_t n = 0; n < G * H; ++n) {
          T* __restrict dwn = dw + n * k * D;
          for (int64_t e = 0; e < D; ++e) dwn[e] += dp[n] * row[e];
        }
        if (j > 0) {  // the new history holds window[1:]: its gradient adds to taps 1..k-1
          const T* gn = ghist.data_ptr<T>() + (b * (k - 1) + j - 1) * D;
          for (int64_t e = 0; e < D; ++e) dwin[j * D + e] += gn[e];
        }
      }
      T* db = dbias.data_ptr<T>();
      for (int64_t n = 0; n < G * H; ++n) db[n] += dp[n];
    }
  });
  at::Tensor dhistory = dwindow.view({B, k, D}).narrow(1, 0, k - 1).contiguous();
  at::Tensor dx = dwindow.view({B, k, D}).select(1, k - 1).contiguous();
  return {dx, dc, dhistory, dweight, dbias};
}

}  // namespace

namespace ctrlrnn {

void register_cell_step_grads(torch::Library& m) {
  // RCRN eq 1-16 with LSTM cells: returns dx, the 7 states', the 6 weights' and the 3 cells'
  // bias gradients
  m.def("rcrn_cell_step_backward(Tensor?[] grads, Tensor x, Tensor[] states, Tensor[] weights, "
        "Tensor[] new_states, Tensor acts, bool sigmoid_gate) -> Tensor[]",
        &rcrn_cell_step_backward);
  // METAGROSS eq 2-1..2-6 (linear base, token depth gates; as printed with weight_hh): returns
  // dx, dstate, dweight, dbias, dweight_hh, ddepth_weight, ddepth_bias
  m.def("metagross_step_backward(Tensor? grad_h, Tensor? grad_last, Tensor x, Tensor state, "
        "Tensor weight, Tensor? bias, Tensor? weight_hh, Tensor? depth_weight, Tensor saved, "
        "int depth, bool h_form, bool residual) -> Tensor[]", &metagross_step_backward);
  // CAS-LSTM eq 1-6, or 7-13 and 17: returns dx, dh, dc, dlower_c, dweight_ih, dweight_hh,
  // dbias, dlambda_vec, dpeephole
  m.def("caslstm_step_backward(Tensor? grad_h, Tensor? grad_c, Tensor x, Tensor h, Tensor c, "
        "Tensor? lower_c, Tensor weight_ih, Tensor weight_hh, Tensor? lambda_vec, "
        "float lambda_value, int lambda_mode, Tensor? peephole, Tensor c_new, Tensor saved) -> "
        "Tensor[]", &caslstm_step_backward);
  // CARNN eq 3, 5, 6: returns dx, dh, dweight_ih, dbias_ih, dcontext, dweight_ch, dweight_hh
  m.def("carnn_step_backward(Tensor? grad_h, Tensor x, Tensor h, Tensor weight_ih, "
        "Tensor? context, Tensor? weight_ch, Tensor? weight_hh, Tensor saved) -> Tensor[]",
        &carnn_step_backward);
  // QRNN eq 1-5: returns dx, dc, dhistory, dweight, dbias
  m.def("qrnn_step_backward(Tensor? grad_h, Tensor? grad_c, Tensor? grad_history, Tensor x, "
        "Tensor c, Tensor history, Tensor weight, int mode, Tensor c_new, Tensor saved) -> "
        "Tensor[]", &qrnn_step_backward);
}

}  // namespace ctrlrnn
