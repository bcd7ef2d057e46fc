// The backward of the fused cell steps (cell_steps.cpp) at a small batch on CPU, one op per
// step: the steps' own arithmetic differentiated by hand, then the products with the weights as
// matrix-vector products and outer products on the weights as they are stored. They serve the
// short calls that record a graph (a training step of a few tokens at batch 1 to 4), where the
// whole-sequence path's fixed cost per call is many times the step's arithmetic. Each op's
// readable twin is the autograd of reference.py in ops/cell_steps, which the tests hold it to.
//
// * rcrn_cell_step_backward: RCRN paper eq 1-16 with LSTM cells (the forward is rcrn_cell_step
//   with save, which keeps the three cells' activated gates).

#include <ATen/ATen.h>
#include <torch/library.h>

#include "../cell_steps/step_math.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

using namespace ctrlrnn::cell_steps;

// dx[k] (+)= sum_n g[n] w[n * K + k] for k < K: a stored (N, K) weight's transpose against one
// vector, the weight read row by row.
template <typename T>
inline void gemv_transposed(const T* __restrict w, const T* __restrict g, int64_t N, int64_t K,
                            T* __restrict dx, bool accumulate) {
  if (!accumulate) std::fill(dx, dx + K, T(0));
  for (int64_t n = 0; n < N; ++n) {
    const T gn = g[n];
    const T* __restrict row = w + n * K;
    for (int64_t k = 0; k < K; ++k) dx[k] += gn * row[k];
  }
}

// dw[n * K + k] (+)= g[n] v[k]: one row's outer product into a stored (N, K) weight's gradient.
template <typename T>
inline void outer(const T* __restrict g, const T* __restrict v, int64_t N, int64_t K,
                  T* __restrict dw, bool accumulate) {
  for (int64_t n = 0; n < N; ++n) {
    const T gn = g[n];
    T* __restrict row = dw + n * K;
    if (accumulate) {
      for (int64_t k = 0; k < K; ++k) row[k] += gn * v[k];
    } else {
      for (int64_t k = 0; k < K; ++k) row[k] = gn * v[k];
    }
  }
}

// The value of an optional gradient at row r (H values), or the zeros.
template <typename T>
inline const T* grad_row(const c10::optional<at::Tensor>& g, int64_t r, int64_t H,
                         const T* zeros) {
  return g.has_value() && g->defined() ? g->data_ptr<T>() + r * H : zeros;
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

// RCRN (eq 1-16), LSTM cells, backward of one step. grads: of (h4, h1, c1, h2, c2, h3, c3, c4)
// new, each (B, H) or none; x (B, D); states, weights as rcrn_cell_step's; new_states the step's
// (h1, c1, h2, c2, h3, c3, c4); acts its saved gates (B, 3, 4H). Returns dx, the seven states'
// gradients, the six weights' (weight_ih, weight_hh per cell) and the three cells' bias
// gradients (the same for bias_ih and bias_hh, which add).
std::vector<at::Tensor> rcrn_cell_step_backward(
    const c10::List<c10::optional<at::Tensor>>& grads, const at::Tensor& x,
    at::TensorList states, at::TensorList weights, at::TensorList new_states,
    const at::Tensor& acts, bool sigmoid_gate) {
  TORCH_CHECK(grads.size() == 8 && states.size() == 7 && weights.size() == 6 &&
                  new_states.size() == 7,
              "rcrn_cell_step_backward: expected 8 gradients, 7 states, 6 weights and 7 new "
              "states");
  TORCH_CHECK(x.dim() == 2, "rcrn_cell_step_backward: expected x (B, D)");
  check_operand(x, x, "x");
  const int64_t B = x.size(0), D = x.size(1), H = states[0].size(-1);
  std::vector<c10::optional<at::Tensor>> g(grads.begin(), grads.end());
  for (auto& t : g) {
    if (t.has_value() && t->defined()) {
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
        // eq 16, 15: the listener's output and cell
        const T* g4 = grad_row<T>(g[0], r, H, zeros.data());
        const T* gc4 = grad_row<T>(g[7], r, H, zeros.data());
        const T *h1n = row(new_states[0], r), *h2n = row(new_states[2], r);
        const T *h3n = row(new_states[4], r), *c4n = row(new_states[6], r);
        const T* c4 = row(states[6], r);
        T *dh1x = extra, *dh2x = extra + H, *dh3x = extra + 2 * H;
        T* dc4 = row(dstates[6], r);
        for (int64_t i = 0; i < H; ++i) {
          const T gate = sigmoid_gate ? M::sigmoid(h2n[i]) : h2n[i];
          const T dc4n = gc4[i] + g4[i] * gate;
          const T dgate = g4[i] * c4n[i];
          dh2x[i] = sigmoid_gate ? dgate * gate * (T(1) - gate) : dgate;
          const T s1 = M::sigmoid(h1n[i]);
          dc4[i] = dc4n * s1;
          dh3x[i] = dc4n * (T(1) - s1);
          dh1x[i] = dc4n * (c4[i] - h3n[i]) * s1 * (T(1) - s1);
        }
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

}  // namespace

namespace ctrlrnn {

void register_cell_step_grads(torch::Library& m) {
  // RCRN eq 1-16 with LSTM cells: returns dx, the 7 states', the 6 weights' and the 3 cells'
  // bias gradients
  m.def("rcrn_cell_step_backward(Tensor?[] grads, Tensor x, Tensor[] states, Tensor[] weights, "
        "Tensor[] new_states, Tensor acts, bool sigmoid_gate) -> Tensor[]",
        &rcrn_cell_step_backward);
}

}  // namespace ctrlrnn
