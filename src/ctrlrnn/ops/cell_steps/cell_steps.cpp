// One step of a cell at a small batch on CPU, the whole step in one op: the input (and
// recurrent) products as matrix-vector products on the weights as they are stored, then the
// gates and the state update. These ops serve the cells' steps where no autograd graph is
// recorded (decoding one token at a time), where a step's dozen tensor ops cost far more than
// its arithmetic. Each op's readable twin is in reference.py beside this file.
//
// * qrnn_cell_step: QRNN paper eq 1-5 (the window's convolution as one product, then f-, fo- or
//   ifo-pooling);
// * rcrn_cell_step: RCRN paper eq 1-16 with LSTM controllers and base (three LSTM cells, then
//   the listener's eq 15-16);
// * carnn_cell_step: CARNN paper eq 3 (nCARNN), 5 (iCARNN) or 6 (sCARNN);
// * metagross_cell_step: METAGROSS paper eq 2-1..2-6 with a linear base and token depth gates;
//   metagross_printed_step: the same as printed (gates from h_{t-1});
// * caslstm_cell_step: CAS-LSTM paper eq 1-6 (the first layer) or 7-13 and 17 (above it).

#include <ATen/ATen.h>
#include <torch/library.h>

#include "runtime/runtime.h"
#include "step_math.h"

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

using namespace ctrlrnn::cell_steps;

// ---------------------------------------------------------------------------------------------
// QRNN (eq 1-5). x (B, D); c (B, H); history (B, k-1, D), oldest first; weight (G*H, k*D), the
// taps oldest first; bias (G*H,) or none; mode 0 = f, 1 = fo, 2 = ifo (G = 2, 3, 4). The window
// [history, x] is never concatenated: tap j's columns of the weight meet its row directly.
template <typename M, typename T>
void qrnn_rows(const at::Tensor& x, const at::Tensor& c, const at::Tensor& history,
               const at::Tensor& weight, const T* bias, int64_t mode, const at::Tensor& h,
               const at::Tensor& c_new, const at::Tensor& next, T* keep) {
  const int64_t B = x.size(0), D = x.size(1), H = c.size(1), k = history.size(1) + 1;
  const int64_t G = weight.size(0) / H, ldw = weight.size(1);
  const T* w = weight.data_ptr<T>();
  T* const work = scratch<T>(G * H);
  for (int64_t b = 0; b < B; ++b) {
    T* g = keep ? keep + b * G * H : work;  // the activated gates, kept for the backward
    for (int64_t j = 0; j < k; ++j) {  // eq 1-2: tap j of the window
      const T* row = j + 1 < k ? history.data_ptr<T>() + (b * (k - 1) + j) * D
                               : x.data_ptr<T>() + b * D;
      gemv<T>(w + j * D, ldw, row, G * H, D, g, j > 0);
    }
    tanh_rows<M>(g, block_of(bias, 0, H), H);  // z
    sigmoid_rows<M>(g + H, block_of(bias, 1, H), (G - 1) * H);  // f, then o and i
    const T *z = g, *f = g + H, *o = g + 2 * H, *in = g + 3 * H;
    const T* cp = c.data_ptr<T>() + b * H;
    T* hp = h.data_ptr<T>() + b * H;
    T* cn = c_new.data_ptr<T>() + b * H;
    for (int64_t i = 0; i < H; ++i) {  // eq 3-5
      const T cell = mode == 2 ? f[i] * cp[i] + in[i] * z[i] : f[i] * cp[i] + (T(1) - f[i]) * z[i];
      cn[i] = cell;
      hp[i] = mode == 0 ? cell : o[i] * cell;
    }
    if (k > 1) {  // the new history: the window's last k-1 inputs, x last
      T* nx = next.data_ptr<T>() + b * (k - 1) * D;
      std::copy_n(history.data_ptr<T>() + (b * (k - 1) + 1) * D, (k - 2) * D, nx);
      std::copy_n(x.data_ptr<T>() + b * D, D, nx + (k - 2) * D);
    }
  }
}

std::vector<at::Tensor> qrnn_cell_step(const at::Tensor& x, const at::Tensor& c,
                                       const at::Tensor& history, const at::Tensor& weight,
                                       const c10::optional<at::Tensor>& bias, int64_t mode,
                                       const c10::optional<at::Tensor>& saved) {
  TORCH_CHECK(mode >= 0 && mode <= 2, "qrnn_cell_step: mode must be 0, 1 or 2, got ", mode);
  TORCH_CHECK(x.dim() == 2 && c.dim() == 2 && history.dim() == 3 && weight.dim() == 2,
              "qrnn_cell_step: expected x (B, D), c (B, H), history (B, k-1, D), weight 2-D");
  for (auto [t, name] : {std::pair{&c, "c"}, {&history, "history"}, {&weight, "weight"}}) {
    check_operand(*t, x, name);
  }
  check_operand(x, x, "x");
  check_optional(bias, x, "bias");
  const int64_t B = x.size(0), D = x.size(1), H = c.size(1), k = history.size(1) + 1;
  const int64_t G = mode == 0 ? 2 : (mode == 1 ? 3 : 4);
  TORCH_CHECK(c.size(0) == B && history.size(0) == B && history.size(2) == D &&
                  weight.size(0) == G * H && weight.size(1) == k * D,
              "qrnn_cell_step: shapes disagree");
  check_saved(saved, x, B, G * H);
  auto h = step_output({B, H}, x);
  auto c_new = step_output({B, H}, x);
  auto next = step_output({B, k - 1, D}, x);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "qrnn_cell_step", [&] {
    using T = scalar_t;
    with_activations<T>([&](auto m) {
      qrnn_rows<decltype(m), T>(x, c, history, weight, data_or_null<T>(bias), mode, h, c_new,
                                next, saved_data<T>(saved));
    });
  });
  return {h, c_new, next};
}

// ---------------------------------------------------------------------------------------------
// One LSTM cell (RCRN eq 1-6, 10-14 in torch's layout: gate rows [i | f | g | o]) at batch row b:
// gates = W_ih x + b_ih + W_hh h + b_hh, c' = f c + i g, h' = o tanh(c').
template <typename M, typename T>
void lstm_row(const T* x, int64_t D, const T* h, const T* c, int64_t H, const at::Tensor& w_ih,
              const at::Tensor& w_hh, const T* b_ih, const T* b_hh, T* gates, T* h_new,
              T* c_new) {
  gemv<T>(w_ih.data_ptr<T>(), D, x, 4 * H, D, gates, false);
  gemv<T>(w_hh.data_ptr<T>(), H, h, 4 * H, H, gates, true);
  for (const T* b : {b_ih, b_hh}) {
    if (b) {
      for (int64_t n = 0; n < 4 * H; ++n) gates[n] += b[n];
    }
  }
  sigmoid_rows<M>(gates, static_cast<const T*>(nullptr), 2 * H);  // i, f
  tanh_rows<M>(gates + 2 * H, static_cast<const T*>(nullptr), H);  // g
  sigmoid_rows<M>(gates + 3 * H, static_cast<const T*>(nullptr), H);  // o
  const T *in = gates, *f = gates + H, *g = gates + 2 * H, *o = gates + 3 * H;
  for (int64_t i = 0; i < H; ++i) c_new[i] = f[i] * c[i] + in[i] * g[i];
  for (int64_t i = 0; i < H; ++i) h_new[i] = o[i] * M::tanh(c_new[i]);
}

// RCRN (eq 1-16), LSTM cells, at one batch row: from x and the seven states (h1, c1, h2, c2, h3,
// c3, c4), writes h4 and the seven new states to next[0..7]; each cell's activated gates go to
// gates + j * 4H (when kept for the backward) or the scratch `work`.
template <typename M, typename T>
void rcrn_row(const T* x, int64_t D, int64_t H, T* const* state,
              const std::vector<at::Tensor>& weights,
              const std::vector<c10::optional<at::Tensor>>& biases, bool sigmoid_gate, T* gates,
              T* work, T* const* next) {
  for (int64_t j = 0; j < 3; ++j) {  // eq 1-6 (controllers), 10-14 (listener's base)
    lstm_row<M, T>(x, D, state[2 * j], state[2 * j + 1], H, weights[2 * j], weights[2 * j + 1],
                   data_or_null<T>(biases[2 * j]), data_or_null<T>(biases[2 * j + 1]),
                   gates ? gates + j * 4 * H : work, next[1 + 2 * j], next[2 + 2 * j]);
  }
  const T *h1 = next[1], *h2 = next[3], *h3 = next[5], *c4 = state[6];
  T *c4n = next[7], *h4 = next[0];
  for (int64_t i = 0; i < H; ++i) {
    const T f = M::sigmoid(h1[i]);
    c4n[i] = h3[i] + f * (c4[i] - h3[i]);  // eq 15
  }
  if (sigmoid_gate) {
    for (int64_t i = 0; i < H; ++i) h4[i] = M::sigmoid(h2[i]) * c4n[i];  // eq 16
  } else {
    for (int64_t i = 0; i < H; ++i) h4[i] = h2[i] * c4n[i];  // eq 16 as printed
  }
}

// RCRN (eq 1-16), LSTM cells. states: h1, c1, h2, c2, h3, c3, c4, each (B, H); weights: per RNN
// (controller 1, controller 2, listener) weight_ih (4H, D), weight_hh (4H, H), bias_ih, bias_hh
// (4H,) or none. Returns h4 and the seven new states; with `save`, also the three cells'
// activated gates (B, 3, 4H), which the step's backward reads (cell_step_grads.cpp). With x
// (T, B, D) (no `save`), T steps in one call, each from the states of the one before: h4 is
// then (T, B, H), the states those after the last step.
// The weights may be strided (the Python side checks only their type): they are made contiguous
// here, a no-op for stored parameters.
std::vector<at::Tensor> rcrn_cell_step(const at::Tensor& x, at::TensorList states,
                                       at::TensorList stored_weights,
                                       const c10::List<c10::optional<at::Tensor>>& biases,
                                       bool sigmoid_gate, bool save) {
  TORCH_CHECK(states.size() == 7 && stored_weights.size() == 6 && biases.size() == 6,
              "rcrn_cell_step: expected 7 states, 6 weights and 6 biases");
  const std::vector<at::Tensor> weights = contiguous_all(stored_weights);
  TORCH_CHECK(x.dim() == 2 || (x.dim() == 3 && !save),
              "rcrn_cell_step: expected x (B, D), or (T, B, D) without save");
  check_operand(x, x, "x");
  const bool many = x.dim() == 3;  // several steps in one call, each from the one before
  const int64_t n_steps = many ? x.size(0) : 1, B = x.size(-2), D = x.size(-1);
  const int64_t H = states[0].size(-1);
  for (const auto& s : states) {
    check_operand(s, x, "state");
    TORCH_CHECK(s.dim() == 2 && s.size(0) == B && s.size(1) == H, "rcrn_cell_step: state shape");
  }
  for (size_t j = 0; j < 3; ++j) {
    check_operand(weights[2 * j], x, "weight_ih");
    check_operand(weights[2 * j + 1], x, "weight_hh");
    TORCH_CHECK(weights[2 * j].size(0) == 4 * H && weights[2 * j].size(1) == D &&
                    weights[2 * j + 1].size(0) == 4 * H && weights[2 * j + 1].size(1) == H,
                "rcrn_cell_step: weight shapes");
  }
  std::vector<c10::optional<at::Tensor>> b(biases.begin(), biases.end());
  for (auto& t : b) {
    if (is_given(t)) t = t->contiguous();
    check_optional(t, x, "bias");
  }
  std::vector<at::Tensor> out;
  out.push_back(many ? step_output({n_steps, B, H}, x) : step_output({B, H}, x));
  for (int i = 1; i < 8; ++i) out.push_back(step_output({B, H}, x));
  if (save) out.push_back(step_output({B, 3, 4 * H}, x));
  if (n_steps == 0) {  // no step: the states as they came
    for (size_t k = 0; k < 7; ++k) out[k + 1].copy_(states[k]);
  }
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "rcrn_cell_step", [&] {
    using T = scalar_t;
    with_activations<T>([&](auto m) {
      using M = decltype(m);
      T* const work = scratch<T>(4 * H);
      auto ptr = [&](const at::Tensor& t, int64_t row) { return t.data_ptr<T>() + row * H; };
      // after the first step, the states are the outputs, updated in place (each value is read
      // before its own write: a cell's products read the whole state first)
      for (int64_t t = 0; t < n_steps; ++t) {
        auto in = [&](size_t k) -> const at::Tensor& { return t == 0 ? states[k] : out[k + 1]; };
        for (int64_t r = 0; r < B; ++r) {
          T* const state[7] = {ptr(in(0), r), ptr(in(1), r), ptr(in(2), r), ptr(in(3), r),
                               ptr(in(4), r), ptr(in(5), r), ptr(in(6), r)};
          T* const next[8] = {ptr(out[0], t * B + r), ptr(out[1], r), ptr(out[2], r),
                              ptr(out[3], r), ptr(out[4], r), ptr(out[5], r), ptr(out[6], r),
                              ptr(out[7], r)};
          T* gates = save ? out[8].data_ptr<T>() + r * 3 * 4 * H : nullptr;
          rcrn_row<M, T>(x.data_ptr<T>() + (t * B + r) * D, D, H, state, weights, b,
                         sigmoid_gate, gates, work, next);
        }
      }
    });
  });
  return out;
}

// ---------------------------------------------------------------------------------------------
// CARNN (eq 3, 5, 6). x (B, D); h (B, H); weight_ih (G*H, D) rows [u | f | ebar] (G = 3, or 2
// for sCARNN, whose ebar is x itself); bias_ih (G*H,) or none; context (B, C) with weight_ch
// (2H, C), or both none; weight_hh (2H, H) (nCARNN) or none.
//   g_u, g_f = sigmoid(W^e x + b + W^c c + W^h h),  h' = g_u (g_f ebar) + (1 - g_u) h
at::Tensor carnn_cell_step(const at::Tensor& x, const at::Tensor& h, const at::Tensor& weight_ih,
                           const c10::optional<at::Tensor>& bias_ih,
                           const c10::optional<at::Tensor>& context,
                           const c10::optional<at::Tensor>& weight_ch,
                           const c10::optional<at::Tensor>& weight_hh,
                           const c10::optional<at::Tensor>& saved) {
  TORCH_CHECK(x.dim() == 2 && h.dim() == 2 && weight_ih.dim() == 2,
              "carnn_cell_step: expected x (B, D), h (B, H), weight_ih 2-D");
  check_operand(x, x, "x");
  check_operand(h, x, "h");
  check_operand(weight_ih, x, "weight_ih");
  check_optional(bias_ih, x, "bias_ih");
  check_optional(context, x, "context");
  check_optional(weight_ch, x, "weight_ch");
  check_optional(weight_hh, x, "weight_hh");
  const int64_t B = x.size(0), D = x.size(1), H = h.size(1), G = weight_ih.size(0) / H;
  const bool has_ctx = is_given(context);
  const bool has_hh = is_given(weight_hh);
  TORCH_CHECK(has_ctx == is_given(weight_ch),
              "carnn_cell_step: context and weight_ch go together");
  TORCH_CHECK((G == 2 || G == 3) && weight_ih.size(0) == G * H && weight_ih.size(1) == D &&
                  h.size(0) == B && (G == 3 || D == H),
              "carnn_cell_step: shapes disagree");
  check_saved(saved, x, B, G * H);
  auto out = step_output({B, H}, x);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "carnn_cell_step", [&] {
    using T = scalar_t;
    with_activations<T>([&](auto m) {
      using M = decltype(m);
      T* const work = scratch<T>(G * H);
      T* const keep = saved_data<T>(saved);
      const T* bias = data_or_null<T>(bias_ih);
      for (int64_t r = 0; r < B; ++r) {
        const T *xr = x.data_ptr<T>() + r * D, *hr = h.data_ptr<T>() + r * H;
        T* p = keep ? keep + r * G * H : work;  // g_u, g_f (and ebar), kept for the backward
        gemv<T>(weight_ih.data_ptr<T>(), D, xr, G * H, D, p, false);
        if (has_ctx) {
          const int64_t C = context->size(1);
          gemv<T>(weight_ch->data_ptr<T>(), C, context->data_ptr<T>() + r * C, 2 * H, C, p, true);
        }
        if (has_hh) gemv<T>(weight_hh->data_ptr<T>(), H, hr, 2 * H, H, p, true);
        T* o = out.data_ptr<T>() + r * H;
        sigmoid_rows<M>(p, bias, 2 * H);  // g_u, g_f
        const T *u = p, *f = p + H, *eb = block_of(bias, 2, H);
        for (int64_t i = 0; i < H; ++i) {
          const T e = G == 2 ? xr[i] : p[2 * H + i] + (eb ? eb[i] : T(0));
          o[i] = u[i] * (f[i] * e) + (T(1) - u[i]) * hr[i];
          if (G == 3) p[2 * H + i] = e;
        }
      }
    });
  });
  return out;
}

// ---------------------------------------------------------------------------------------------
// METAGROSS (paper eq 2-1..2-6, gates from x_t of section 2.2), a linear base and token depth
// gates. x (B, D); state (B, N*H), every unit's carried state in heap order; weight (3NH, D), the
// base maps level-major (each level [F | O | Z] of its units, ops/metagross_level/layout.py);
// depth_weight (2I, D) rows [alpha | beta] of the I internal units, or none at depth 1; the
// residual x itself (D == H) or none. Levels run from the leaves up:
//   f = sig(pf + alpha (m^F - pf)), o = sig(po + beta (m^O - po)), z = tanh(pz)
//   "h" form: h_t = o (1 - f) h_{t-1} + o f z (+ x)
//   "c" form: c_t = (1 - f) c_{t-1} + f z,  h_t = o c_t (+ x)
// with m^F, m^O the outputs of the unit's two children (none at the leaves). As printed (section
// 2, gates from h_{t-1}): every unit's previous state is the root's h_{t-1} (`shared`, else
// null), the "c" form, and the units' states are not kept (`last` null). `outs` (N*H, or null)
// keeps every unit's output for the step's backward.
template <typename M, typename T>
void metagross_row(const T* x, const T* state, const T* shared, const T* y, const T* bias,
                   const T* gates, int64_t I, int64_t depth, int64_t H, bool h_form,
                   bool residual, T* last, T* out, T* below, T* outs) {
  for (int64_t level = depth; level >= 1; --level) {
    const int64_t s = (int64_t(1) << (level - 1)) - 1, k = s + 1;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t u = s + j;
      for (int64_t i = 0; i < H; ++i) {
        auto pre = [&](int64_t g) {
          const int64_t col = 3 * H * s + (g * k + j) * H + i;
          return y[col] + (bias ? bias[col] : T(0));
        };
        T pf = pre(0), po = pre(1);
        if (level < depth) {  // eq 2-1, 2-2: the children's outputs mixed in
          pf += gates[u] * (below[(2 * j) * H + i] - pf);
          po += gates[I + u] * (below[(2 * j + 1) * H + i] - po);
        }
        const T f = M::sigmoid(pf), o = M::sigmoid(po), z = M::tanh(pre(2));
        const T prev = shared ? shared[i] : state[u * H + i], res = residual ? x[i] : T(0);
        const T carried = h_form ? o * (T(1) - f) * prev + o * f * z + res
                                 : (T(1) - f) * prev + f * z;
        if (last) last[u * H + i] = carried;
        out[j * H + i] = h_form ? carried : o * carried + res;
        if (outs) outs[u * H + i] = out[j * H + i];
      }
    }
    std::copy(out, out + k * H, below);  // this level's outputs feed the level above
  }
}

// Every batch row of a METAGROSS step: the base maps W x_t + b (+ U h_{t-1} as printed:
// weight_hh given), the depth gates, then the tree (metagross_row) from the units' states `state`
// (N*H a row) or, as printed, the root's h_{t-1} `shared` (H a row); the units' new states go to
// `last` (null as printed) and the root's output to `h_out`. `saved` (or null) keeps, a row of
// metagross_saved_width values each, the maps without their bias, the depth gates and every
// unit's output (step_math.h), which the step's backward reads.
template <typename T>
void metagross_rows(const at::Tensor& x, const T* state, const T* shared,
                    const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                    const at::Tensor* weight_hh, const c10::optional<at::Tensor>& depth_weight,
                    const c10::optional<at::Tensor>& depth_bias, int64_t depth, int64_t H,
                    bool h_form, bool residual, T* last, T* h_out, T* saved) {
  const int64_t B = x.size(0), D = x.size(1), N = (int64_t(1) << depth) - 1;
  const int64_t I = (int64_t(1) << (depth - 1)) - 1, leaves = (N + 1) / 2;
  const bool gated = is_given(depth_weight);
  with_activations<T>([&](auto m) {
    using M = decltype(m);
    // the base maps, the depth gates' logits and two levels' outputs
    T* yp = scratch<T>(3 * N * H + 2 * I + 2 * leaves * H);
    T *gates = yp + 3 * N * H, *out = gates + 2 * I;
    const T* db = data_or_null<T>(depth_bias);
    for (int64_t r = 0; r < B; ++r) {
      const T* xr = x.data_ptr<T>() + r * D;
      const T* hr = shared ? shared + r * H : nullptr;
      gemv<T>(weight.data_ptr<T>(), D, xr, 3 * N * H, D, yp, false);  // W x_t
      if (weight_hh) gemv<T>(weight_hh->data_ptr<T>(), H, hr, 3 * N * H, H, yp, true);  // + U h
      if (gated) gemv<T>(depth_weight->data_ptr<T>(), D, xr, 2 * I, D, gates, false);
      sigmoid_rows<M>(gates, db, 2 * I);  // the depth gates alpha, beta
      T* keep = saved ? saved + r * metagross_saved_width(N, I, H) : nullptr;
      if (keep) {  // W x_t (+ U h), the depth gates: the backward reads them
        std::copy(yp, yp + 3 * N * H, keep);
        std::copy(gates, gates + 2 * I, keep + 3 * N * H);
      }
      metagross_row<M, T>(xr, state ? state + r * N * H : nullptr, hr, yp,
                          data_or_null<T>(bias), gates, I, depth, H, h_form, residual,
                          last ? last + r * N * H : nullptr, out, out + leaves * H,
                          keep ? keep + 3 * N * H + 2 * I : nullptr);
      std::copy(out, out + H, h_out + r * H);  // the root's output
    }
  });
}

std::vector<at::Tensor> metagross_cell_step(const at::Tensor& x, const at::Tensor& state,
                                            const at::Tensor& weight,
                                            const c10::optional<at::Tensor>& bias,
                                            const c10::optional<at::Tensor>& depth_weight,
                                            const c10::optional<at::Tensor>& depth_bias,
                                            int64_t depth, bool h_form, bool residual,
                                            const c10::optional<at::Tensor>& saved) {
  TORCH_CHECK(x.dim() == 2 && state.dim() == 2 && weight.dim() == 2 && depth >= 1 && depth < 16,
              "metagross_cell_step: expected x (B, D), state (B, N*H), weight 2-D, depth >= 1");
  check_operand(x, x, "x");
  check_operand(state, x, "state");
  check_operand(weight, x, "weight");
  check_optional(bias, x, "bias");
  check_optional(depth_weight, x, "depth_weight");
  check_optional(depth_bias, x, "depth_bias");
  const int64_t B = x.size(0), D = x.size(1), N = (int64_t(1) << depth) - 1;
  const int64_t I = (int64_t(1) << (depth - 1)) - 1, H = state.size(1) / N;
  const bool gated = is_given(depth_weight);
  TORCH_CHECK(state.size(0) == B && state.size(1) == N * H && weight.size(0) == 3 * N * H &&
                  weight.size(1) == D && (!residual || D == H) && (I == 0 || gated) &&
                  (!gated || (depth_weight->size(0) == 2 * I && depth_weight->size(1) == D)),
              "metagross_cell_step: shapes disagree");
  check_saved(saved, x, B, metagross_saved_width(N, I, H));
  auto h = step_output({B, H}, x);
  auto last = step_output({B, N * H}, x);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "metagross_cell_step", [&] {
    metagross_rows<scalar_t>(x, state.data_ptr<scalar_t>(), nullptr, weight, bias, nullptr,
                             depth_weight, depth_bias, depth, H, h_form, residual,
                             last.data_ptr<scalar_t>(), h.data_ptr<scalar_t>(),
                             saved_data<scalar_t>(saved));
  });
  return {h, last};
}

// METAGROSS as printed (section 2: every base map reads x_t and h_{t-1}), a linear base and token
// depth gates: the maps are W x_t + b + U h_{t-1}, with weight_hh (3NH, H) the U of every map in
// the rows of weight; h (B, H) is the root's h_{t-1}, the whole carried state. Returns h_t.
at::Tensor metagross_printed_step(const at::Tensor& x, const at::Tensor& h,
                                  const at::Tensor& weight, const c10::optional<at::Tensor>& bias,
                                  const at::Tensor& weight_hh,
                                  const c10::optional<at::Tensor>& depth_weight,
                                  const c10::optional<at::Tensor>& depth_bias, int64_t depth,
                                  bool residual, const c10::optional<at::Tensor>& saved) {
  TORCH_CHECK(x.dim() == 2 && h.dim() == 2 && weight.dim() == 2 && weight_hh.dim() == 2 &&
                  depth >= 1 && depth < 16,
              "metagross_printed_step: expected x (B, D), h (B, H), 2-D weights, depth >= 1");
  for (auto [t, name] : {std::pair{&x, "x"}, {&h, "h"}, {&weight, "weight"},
                         {&weight_hh, "weight_hh"}}) {
    check_operand(*t, x, name);
  }
  check_optional(bias, x, "bias");
  check_optional(depth_weight, x, "depth_weight");
  check_optional(depth_bias, x, "depth_bias");
  const int64_t B = x.size(0), D = x.size(1), H = h.size(1), N = (int64_t(1) << depth) - 1;
  const int64_t I = (int64_t(1) << (depth - 1)) - 1;
  const bool gated = is_given(depth_weight);
  TORCH_CHECK(h.size(0) == B && weight.size(0) == 3 * N * H && weight.size(1) == D &&
                  weight_hh.size(0) == 3 * N * H && weight_hh.size(1) == H &&
                  (!residual || D == H) && (I == 0 || gated) &&
                  (!gated || (depth_weight->size(0) == 2 * I && depth_weight->size(1) == D)),
              "metagross_printed_step: shapes disagree");
  check_saved(saved, x, B, metagross_saved_width(N, I, H));
  auto h_new = step_output({B, H}, x);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "metagross_printed_step", [&] {
    metagross_rows<scalar_t>(x, nullptr, h.data_ptr<scalar_t>(), weight, bias, &weight_hh,
                             depth_weight, depth_bias, depth, H, false, residual, nullptr,
                             h_new.data_ptr<scalar_t>(), saved_data<scalar_t>(saved));
  });
  return h_new;
}

// ---------------------------------------------------------------------------------------------
// CAS-LSTM: eq 1-6 for the first layer, eq 7-13 (variant (iii)'s eq 17 with peepholes) above it.
// x (B, D); h, c (B, H); lower_c (B, H), the lower layer's cell c^{l-1}_t, or none for the first
// layer (a plain LSTM, G = 4); weight_ih (G*H, D) rows [i | f | c~ | o (| g)], G = 5 above the
// first layer; weight_hh (G*H, H), or (4H, H) with peephole (2, H) = [p_g1; p_g2]; bias (G*H,) or
// none. lambda_mode 0: c' = i c~ + f c + g c^{l-1} (eq 18's plain sum); 1: lambda is
// lambda_value; 2: lambda is lambda_vec (H,); then c' = i c~ + (1 - lambda) f c + lambda g c^{l-1}.
//   g = sigmoid(x_g + U_g h), or sigmoid(x_g + p_g1 c + p_g2 c^{l-1}) (eq 9, 17);  h' = o tanh(c')
std::vector<at::Tensor> caslstm_cell_step(const at::Tensor& x, const at::Tensor& h,
                                          const at::Tensor& c,
                                          const c10::optional<at::Tensor>& lower_c,
                                          const at::Tensor& weight_ih,
                                          const at::Tensor& weight_hh,
                                          const c10::optional<at::Tensor>& bias,
                                          const c10::optional<at::Tensor>& lambda_vec,
                                          double lambda_value, int64_t lambda_mode,
                                          const c10::optional<at::Tensor>& peephole,
                                          const c10::optional<at::Tensor>& saved) {
  TORCH_CHECK(x.dim() == 2 && h.dim() == 2 && c.dim() == 2 && weight_ih.dim() == 2 &&
                  weight_hh.dim() == 2,
              "caslstm_cell_step: expected x (B, D), h and c (B, H), 2-D weights");
  TORCH_CHECK(lambda_mode >= 0 && lambda_mode <= 2,
              "caslstm_cell_step: lambda_mode must be 0, 1 or 2, got ", lambda_mode);
  check_operand(x, x, "x");
  check_operand(h, x, "h");
  check_operand(c, x, "c");
  check_operand(weight_ih, x, "weight_ih");
  check_operand(weight_hh, x, "weight_hh");
  check_optional(lower_c, x, "lower_c");
  check_optional(bias, x, "bias");
  check_optional(lambda_vec, x, "lambda_vec");
  check_optional(peephole, x, "peephole");
  const int64_t B = x.size(0), D = x.size(1), H = h.size(1);
  const bool vertical = is_given(lower_c);
  const bool peep = is_given(peephole);
  const int64_t G = vertical ? 5 : 4, G_hh = peep ? 4 : G;
  TORCH_CHECK(h.size(0) == B && c.size(0) == B && c.size(1) == H &&
                  weight_ih.size(0) == G * H && weight_ih.size(1) == D &&
                  weight_hh.size(0) == G_hh * H && weight_hh.size(1) == H &&
                  (!vertical || (lower_c->size(0) == B && lower_c->size(1) == H)) &&
                  (!peep || (vertical && peephole->numel() == 2 * H)) &&
                  (lambda_mode != 2 || (is_given(lambda_vec) &&
                                        lambda_vec->numel() == H)),
              "caslstm_cell_step: shapes disagree");
  check_saved(saved, x, B, G * H);
  auto h_new = step_output({B, H}, x);
  auto c_new = step_output({B, H}, x);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "caslstm_cell_step", [&] {
    using T = scalar_t;
    with_activations<T>([&](auto m) {
      using M = decltype(m);
      T* const work = scratch<T>(G * H);
      T* const keep = saved_data<T>(saved);
      const T* bp = data_or_null<T>(bias);
      const T* lam = lambda_mode == 2 ? lambda_vec->data_ptr<T>() : nullptr;
      const T* pp = peep ? peephole->data_ptr<T>() : nullptr;
      for (int64_t r = 0; r < B; ++r) {
        const T *xr = x.data_ptr<T>() + r * D, *hr = h.data_ptr<T>() + r * H;
        const T* cr = c.data_ptr<T>() + r * H;
        const T* low = vertical ? lower_c->data_ptr<T>() + r * H : nullptr;
        T* p = keep ? keep + r * G * H : work;  // the activated gates, kept for the backward
        gemv<T>(weight_ih.data_ptr<T>(), D, xr, G * H, D, p, false);
        if (bp) {
          for (int64_t n = 0; n < G * H; ++n) p[n] += bp[n];  // x_proj = W x + b
        }
        gemv<T>(weight_hh.data_ptr<T>(), H, hr, G_hh * H, H, p, true);  // + U h
        if (pp) {  // eq 17: the vertical gate reads both cells through its peepholes
          for (int64_t i = 0; i < H; ++i) {
            p[4 * H + i] = p[4 * H + i] + pp[i] * cr[i] + pp[H + i] * low[i];
          }
        }
        sigmoid_rows<M>(p, static_cast<const T*>(nullptr), 2 * H);  // i, f (eq 1-2, 7-8)
        tanh_rows<M>(p + 2 * H, static_cast<const T*>(nullptr), H);  // c~ (eq 3, 10)
        sigmoid_rows<M>(p + 3 * H, static_cast<const T*>(nullptr), (G - 3) * H);  // o, g (4, 9, 11)
        const T *in = p, *f = p + H, *ct = p + 2 * H, *o = p + 3 * H, *g = p + 4 * H;
        T *ho = h_new.data_ptr<T>() + r * H, *co = c_new.data_ptr<T>() + r * H;
        if (!vertical) {
          for (int64_t i = 0; i < H; ++i) co[i] = in[i] * ct[i] + f[i] * cr[i];  // eq 5
        } else {
          for (int64_t i = 0; i < H; ++i) {  // eq 12
            const T l = lambda_mode == 0 ? T(1) : (lam ? lam[i] : T(lambda_value));
            const T sf = lambda_mode == 0 ? T(1) : T(1) - l;
            co[i] = in[i] * ct[i] + sf * f[i] * cr[i] + l * g[i] * low[i];
          }
        }
        for (int64_t i = 0; i < H; ++i) ho[i] = o[i] * M::tanh(co[i]);  // eq 6, 13
      }
    });
  });
  return {h_new, c_new};
}

}  // namespace

namespace ctrlrnn {

void register_cell_steps(torch::Library& m) {
  // QRNN eq 1-5: returns h, c and the new history
  // (`saved` (B, G*H) receives the activated gates)
  m.def("qrnn_cell_step(Tensor x, Tensor c, Tensor history, Tensor weight, Tensor? bias, "
        "int mode, Tensor(a!)? saved=None) -> Tensor[]", &qrnn_cell_step);
  // RCRN eq 1-16 with LSTM cells: returns h4 and (h1, c1, h2, c2, h3, c3, c4)
  // (with save: and the activated gates (B, 3, 4H) of the three cells; x (T, B, D): T steps)
  m.def("rcrn_cell_step(Tensor x, Tensor[] states, Tensor[] weights, Tensor?[] biases, "
        "bool sigmoid_gate, bool save=False) -> Tensor[]", &rcrn_cell_step);
  // CARNN eq 3, 5, 6: returns h'; `saved` (B, G*H) receives g_u, g_f (and ebar)
  m.def("carnn_cell_step(Tensor x, Tensor h, Tensor weight_ih, Tensor? bias_ih, "
        "Tensor? context, Tensor? weight_ch, Tensor? weight_hh, Tensor(a!)? saved=None) -> "
        "Tensor", &carnn_cell_step);
  // METAGROSS eq 2-1..2-6 (linear base, token depth gates): returns h and every unit's state;
  // `saved` (B, metagross_saved_width) receives what the step's backward reads
  m.def("metagross_cell_step(Tensor x, Tensor state, Tensor weight, Tensor? bias, "
        "Tensor? depth_weight, Tensor? depth_bias, int depth, bool h_form, bool residual, "
        "Tensor(a!)? saved=None) -> Tensor[]", &metagross_cell_step);
  // METAGROSS as printed (gates from h_{t-1}; linear base, token depth gates): returns h
  m.def("metagross_printed_step(Tensor x, Tensor h, Tensor weight, Tensor? bias, "
        "Tensor weight_hh, Tensor? depth_weight, Tensor? depth_bias, int depth, "
        "bool residual, Tensor(a!)? saved=None) -> Tensor", &metagross_printed_step);
  // CAS-LSTM eq 1-6 (no lower_c) or 7-13 and 17: returns h and c; `saved` (B, G*H) receives
  // the activated gates
  m.def("caslstm_cell_step(Tensor x, Tensor h, Tensor c, Tensor? lower_c, Tensor weight_ih, "
        "Tensor weight_hh, Tensor? bias, Tensor? lambda_vec, float lambda_value, "
        "int lambda_mode, Tensor? peephole, Tensor(a!)? saved=None) -> Tensor[]",
        &caslstm_cell_step);
}

}  // namespace ctrlrnn
