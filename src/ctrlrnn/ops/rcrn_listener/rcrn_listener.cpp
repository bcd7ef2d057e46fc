// The RCRN listener, eq 15-16 of the RCRN paper, in one pass over time (part of the extension
// `scan`):
//
//   a_t  = sigmoid(h1_t)                        (the forget-gate controller, eq 1-6)
//   c4_t = a_t * c4_{t-1} + (1 - a_t) * h3_t    (eq 15; h3 is the listener base, eq 10-14)
//   h4_t = gate(h2_t) * c4_t                    (eq 16; gate = sigmoid, the text, or identity)
//
// over all channels of (B, T, C) inputs at once: channels [0, split) run forward in time,
// channels [split, C) each sequence backwards from its own last valid step (the backward
// direction of a bidirectional layer, its inputs in forward time). Steps t >= lengths[b] output
// zeros and leave the state unchanged. The inputs may be strided (torch's LSTM gives its
// batch-first outputs as transposed views): only the channel stride must be 1; the gradients
// are written with the inputs' strides, the outputs batch-first contiguous.
//
// Backward, one reverse pass in processing order from the final-state gradient:
//   dc = g * gate(h2) + carry;  dh2 = g * c4 * gate'(h2);  dh1 = dc (c4_prev - h3) a (1 - a);
//   dh3 = dc (1 - a);  carry = dc a;  carry at the end is dc0.

#include <ATen/ATen.h>
#include <torch/library.h>

#include "kernel_common.h"
#include "runtime/runtime.h"

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace ctrlrnn {
namespace {

using namespace ctrlrnn::kernels;  // NOLINT: block_size, grain_for, lengths

// A (B, T, C) view with unit channel stride: the row of (b, t) starts at b * sb + t * st.
template <typename T>
struct Rows {
  T* p;
  int64_t sb, st;
  T* at(int64_t b, int64_t t) const { return p + b * sb + t * st; }
};

template <typename T>
Rows<T> rows_of(const at::Tensor& x) {
  return {x.data_ptr<std::remove_const_t<T>>(), x.stride(0), x.stride(1)};
}

template <typename T>
Rows<T> rows_or_null(const c10::optional<at::Tensor>& x) {
  return x.has_value() ? rows_of<T>(*x) : Rows<T>{nullptr, 0, 0};
}

// An uninitialised tensor of x's shape from the runtime, time-major (a transposed view) when
// x is, batch-first contiguous otherwise: the gradient of an input in the input's layout.
at::Tensor pooled_like(const at::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  if (B > 1 && T > 1 && x.stride(1) == B * C && x.stride(0) == C) {
    return ctrlrnn::runtime::empty({T, B, C}, x.options()).transpose(0, 1);
  }
  return ctrlrnn::runtime::empty({B, T, C}, x.options());
}

void check_input(const at::Tensor& x, const at::Tensor& like, const char* name) {
  TORCH_CHECK(x.dim() == 3 && x.device().is_cpu() && x.sizes() == like.sizes() &&
                  x.scalar_type() == like.scalar_type() &&
                  (x.numel() == 0 || x.size(2) <= 1 || x.stride(2) == 1),
              name, " must be a CPU tensor of shape (B, T, C) with the dtype of h1 and "
              "unit channel stride");
}


// The work items: for every batch row, the blocks of channels of each direction's segment
// ([0, split) forward, [split, C) reverse), so that no block mixes the two directions.
struct Blocks {
  int64_t C, split, blk, n_fw, n_bw;
  Blocks(int64_t B, int64_t C_, int64_t split_) : C(C_), split(split_) {
    blk = block_size(B, C);
    n_fw = (split + blk - 1) / blk;
    n_bw = (C - split + blk - 1) / blk;
  }
  int64_t per_row() const { return n_fw + n_bw; }
  // batch row, first channel, channel count and direction of work item w
  void item(int64_t w, int64_t& b, int64_t& c0, int64_t& n, bool& reverse) const {
    b = w / per_row();
    const int64_t k = w % per_row();
    reverse = k >= n_fw;
    const int64_t lo = reverse ? split : 0, hi = reverse ? C : split;
    c0 = lo + (reverse ? k - n_fw : k) * blk;
    n = std::min(blk, hi - c0);
  }
};

// GATE: the output gate is sigmoid (else the identity), a compile-time constant so that the
// loops over channels have no branches and vectorise. M: the runtime's activations
// (vector_math.h). Each step computes its activations in simple loops, then the recurrence.
template <typename scalar_t, bool GATE, typename M>
void listener_forward_kernel(Rows<const scalar_t> h1, Rows<const scalar_t> h2,
                             Rows<const scalar_t> h3, const scalar_t* c0, const int64_t* lengths,
                             scalar_t* out, scalar_t* cseq, scalar_t* clast, int64_t B, int64_t T,
                             const Blocks& blocks) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t C = blocks.C, items = B * blocks.per_row(), blk = blocks.blk;
  parallel_recurrence(0, items, grain_for(T, blk), [&](int64_t begin, int64_t end) {
    std::vector<acc_t> buf(3 * blk);  // the state, then the step's a and gate
    acc_t* __restrict__ c = buf.data();
    acc_t* __restrict__ av = c + blk;
    acc_t* __restrict__ gv = av + blk;
    for (int64_t w = begin; w < end; ++w) {
      int64_t b, ch, n;
      bool reverse;
      blocks.item(w, b, ch, n, reverse);
      const int64_t L = length_of(lengths, b, T);
      for (int64_t j = 0; j < n; ++j) c[j] = c0 ? acc_t(c0[b * C + ch + j]) : acc_t(0);
      for (int64_t s = 0; s < L; ++s) {
        const int64_t t = reverse ? L - 1 - s : s;
        const scalar_t* __restrict__ x1 = h1.at(b, t) + ch;
        const scalar_t* __restrict__ x2 = h2.at(b, t) + ch;
        const scalar_t* __restrict__ x3 = h3.at(b, t) + ch;
        scalar_t* __restrict__ o = out + (b * T + t) * C + ch;
        scalar_t* __restrict__ cs = cseq + (b * T + t) * C + ch;
        for (int64_t j = 0; j < n; ++j) av[j] = M::sigmoid(acc_t(x1[j]));
        for (int64_t j = 0; j < n; ++j) gv[j] = GATE ? M::sigmoid(acc_t(x2[j])) : acc_t(x2[j]);
        for (int64_t j = 0; j < n; ++j) {
          const acc_t z = acc_t(x3[j]);
          const acc_t cj = av[j] * c[j] + (z - av[j] * z);  // eq 15, as the reference writes it
          c[j] = cj;
          cs[j] = scalar_t(cj);
          o[j] = scalar_t(gv[j] * cj);  // eq 16
        }
      }
      for (int64_t t = L; t < T; ++t) {
        std::fill_n(out + (b * T + t) * C + ch, n, scalar_t(0));
        std::fill_n(cseq + (b * T + t) * C + ch, n, scalar_t(0));
      }
      for (int64_t j = 0; j < n; ++j) clast[b * C + ch + j] = scalar_t(c[j]);
    }
  });
}

template <typename scalar_t, bool GATE, typename M>
void listener_backward_kernel(Rows<const scalar_t> gout, const scalar_t* gclast,
                              Rows<const scalar_t> h1, Rows<const scalar_t> h2,
                              Rows<const scalar_t> h3, const scalar_t* cseq, const scalar_t* c0,
                              const int64_t* lengths, Rows<scalar_t> d1, Rows<scalar_t> d2,
                              Rows<scalar_t> d3, scalar_t* dc0, int64_t B, int64_t T,
                              const Blocks& blocks) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t C = blocks.C, items = B * blocks.per_row(), blk = blocks.blk;
  parallel_recurrence(0, items, grain_for(T, blk), [&](int64_t begin, int64_t end) {
    std::vector<acc_t> buf(4 * blk);  // the carry, then the step's a, gate and gate'
    acc_t* __restrict__ carry = buf.data();
    acc_t* __restrict__ av = carry + blk;
    acc_t* __restrict__ gv = av + blk;
    acc_t* __restrict__ dgv = gv + blk;
    const std::vector<scalar_t> zeros(blk, scalar_t(0));  // stands in for absent inputs
    for (int64_t w = begin; w < end; ++w) {
      int64_t b, ch, n;
      bool reverse;
      blocks.item(w, b, ch, n, reverse);
      const int64_t L = length_of(lengths, b, T);
      for (int64_t j = 0; j < n; ++j) carry[j] = gclast ? acc_t(gclast[b * C + ch + j]) : acc_t(0);
      for (int64_t s = L - 1; s >= 0; --s) {
        const int64_t t = reverse ? L - 1 - s : s;
        const int64_t t_prev = reverse ? t + 1 : t - 1;  // the previous step in processing order
        const scalar_t* __restrict__ prev =
            s > 0 ? cseq + (b * T + t_prev) * C + ch : (c0 ? c0 + b * C + ch : zeros.data());
        const scalar_t* __restrict__ g = gout.p ? gout.at(b, t) + ch : zeros.data();
        const scalar_t* __restrict__ x1 = h1.at(b, t) + ch;
        const scalar_t* __restrict__ x2 = h2.at(b, t) + ch;
        const scalar_t* __restrict__ x3 = h3.at(b, t) + ch;
        const scalar_t* __restrict__ cs = cseq + (b * T + t) * C + ch;
        scalar_t* __restrict__ o1 = d1.at(b, t) + ch;
        scalar_t* __restrict__ o2 = d2.at(b, t) + ch;
        scalar_t* __restrict__ o3 = d3.at(b, t) + ch;
        for (int64_t j = 0; j < n; ++j) av[j] = M::sigmoid(acc_t(x1[j]));
        for (int64_t j = 0; j < n; ++j) {
          const acc_t x = acc_t(x2[j]);
          const acc_t gate = GATE ? M::sigmoid(x) : x;
          gv[j] = gate;
          dgv[j] = GATE ? gate * (acc_t(1) - gate) : acc_t(1);
        }
        for (int64_t j = 0; j < n; ++j) {
          const acc_t gj = acc_t(g[j]);
          const acc_t a = av[j];
          const acc_t dc = gj * gv[j] + carry[j];
          o2[j] = scalar_t(gj * acc_t(cs[j]) * dgv[j]);
          o1[j] = scalar_t(dc * (acc_t(prev[j]) - acc_t(x3[j])) * a * (acc_t(1) - a));
          o3[j] = scalar_t(dc * (acc_t(1) - a));
          carry[j] = dc * a;
        }
      }
      for (int64_t t = L; t < T; ++t) {
        std::fill_n(d1.at(b, t) + ch, n, scalar_t(0));
        std::fill_n(d2.at(b, t) + ch, n, scalar_t(0));
        std::fill_n(d3.at(b, t) + ch, n, scalar_t(0));
      }
      for (int64_t j = 0; j < n; ++j) dc0[b * C + ch + j] = scalar_t(carry[j]);
    }
  });
}

// Calls fn(std::integral_constant<bool, sigmoid_gate>{}, math) with the runtime's activations
// for acc_t (vector_math.h).
template <typename acc_t, typename Fn>
void with_gate(bool sigmoid_gate, Fn&& fn) {
  ctrlrnn::runtime::with_math<acc_t, ctrlrnn::runtime::Saturating>([&](auto math) {
    if (sigmoid_gate) {
      fn(std::true_type{}, math);
    } else {
      fn(std::false_type{}, math);
    }
  });
}

void check_state(const c10::optional<at::Tensor>& x, const at::Tensor& like, int64_t B,
                 int64_t C, const char* name) {
  if (!x.has_value()) return;
  TORCH_CHECK(x->is_contiguous() && x->numel() == B * C && x->scalar_type() == like.scalar_type(),
              name, " must be contiguous (B, C) with the dtype of h1");
}

// Returns {h4 (B, T, C), c4 (B, T, C), c4_last (B, C)}.
std::vector<at::Tensor> rcrn_listener_forward(const at::Tensor& h1, const at::Tensor& h2,
                                              const at::Tensor& h3,
                                              const c10::optional<at::Tensor>& c0,
                                              const c10::optional<at::Tensor>& lengths,
                                              int64_t split, bool sigmoid_gate) {
  check_input(h1, h1, "h1");
  check_input(h2, h1, "h2");
  check_input(h3, h1, "h3");
  const int64_t B = h1.size(0), T = h1.size(1), C = h1.size(2);
  TORCH_CHECK(split >= 0 && split <= C, "split must lie in [0, C]");
  check_state(c0, h1, B, C, "c0");
  const int64_t* lp = lengths_ptr(lengths, B, T);
  auto out = ctrlrnn::runtime::empty({B, T, C}, h1.options());
  auto cseq = ctrlrnn::runtime::empty({B, T, C}, h1.options());
  auto clast = at::empty({B, C}, h1.options());
  if (B == 0 || C == 0) return {out, cseq, clast};
  const Blocks blocks(B, C, split);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, h1.scalar_type(), "rcrn_listener", [&] {
    with_gate<at::opmath_type<scalar_t>>(sigmoid_gate, [&](auto gate, auto math) {
      listener_forward_kernel<scalar_t, decltype(gate)::value, decltype(math)>(
          rows_of<const scalar_t>(h1), rows_of<const scalar_t>(h2), rows_of<const scalar_t>(h3),
          c0.has_value() ? c0->data_ptr<scalar_t>() : nullptr, lp, out.data_ptr<scalar_t>(),
          cseq.data_ptr<scalar_t>(), clast.data_ptr<scalar_t>(), B, T, blocks);
    });
  });
  return {out, cseq, clast};
}

// Returns {dh1, dh2, dh3 (the strides of h1, h2, h3), dc0 (B, C)}.
std::vector<at::Tensor> rcrn_listener_backward(
    const c10::optional<at::Tensor>& grad_out, const c10::optional<at::Tensor>& grad_last,
    const at::Tensor& h1, const at::Tensor& h2, const at::Tensor& h3,
    const at::Tensor& cseq, const c10::optional<at::Tensor>& c0,
    const c10::optional<at::Tensor>& lengths, int64_t split, bool sigmoid_gate) {
  check_input(h1, h1, "h1");
  check_input(h2, h1, "h2");
  check_input(h3, h1, "h3");
  TORCH_CHECK(cseq.is_contiguous() && cseq.sizes() == h1.sizes(), "c4 must be contiguous (B, T, C)");
  if (grad_out.has_value()) check_input(*grad_out, h1, "grad_out");
  const int64_t B = h1.size(0), T = h1.size(1), C = h1.size(2);
  TORCH_CHECK(split >= 0 && split <= C, "split must lie in [0, C]");
  check_state(c0, h1, B, C, "c0");
  check_state(grad_last, h1, B, C, "grad_last");
  const int64_t* lp = lengths_ptr(lengths, B, T);
  auto d1 = pooled_like(h1), d2 = pooled_like(h2), d3 = pooled_like(h3);
  auto dc0 = at::empty({B, C}, h1.options());
  if (B == 0 || C == 0) return {d1, d2, d3, dc0};
  const Blocks blocks(B, C, split);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, h1.scalar_type(), "rcrn_listener_bwd",
                                  [&] {
    with_gate<at::opmath_type<scalar_t>>(sigmoid_gate, [&](auto gate, auto math) {
      listener_backward_kernel<scalar_t, decltype(gate)::value, decltype(math)>(
          rows_or_null<const scalar_t>(grad_out),
          grad_last.has_value() ? grad_last->data_ptr<scalar_t>() : nullptr,
          rows_of<const scalar_t>(h1), rows_of<const scalar_t>(h2), rows_of<const scalar_t>(h3),
          cseq.data_ptr<scalar_t>(), c0.has_value() ? c0->data_ptr<scalar_t>() : nullptr, lp,
          rows_of<scalar_t>(d1), rows_of<scalar_t>(d2), rows_of<scalar_t>(d3),
          dc0.data_ptr<scalar_t>(), B, T, blocks);
    });
  });
  return {d1, d2, d3, dc0};
}

}  // namespace

void register_rcrn_listener(torch::Library& m) {
  // RCRN listener (eq 15-16) -> h4, c4, c4_last
  m.def("rcrn_listener_forward(Tensor h1, Tensor h2, Tensor h3, Tensor? c0, Tensor? lengths, "
        "int split, bool sigmoid_gate) -> Tensor[]", &rcrn_listener_forward);
  // RCRN listener backward -> dh1, dh2, dh3, dc0
  m.def("rcrn_listener_backward(Tensor? grad_out, Tensor? grad_last, Tensor h1, Tensor h2, "
        "Tensor h3, Tensor c_seq, Tensor? c0, Tensor? lengths, int split, bool sigmoid_gate) "
        "-> Tensor[]", &rcrn_listener_backward);
}

}  // namespace ctrlrnn
