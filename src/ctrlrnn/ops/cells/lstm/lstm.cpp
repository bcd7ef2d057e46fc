// The LSTM cell on CPU, one of the fused gated cells of the extension `cells`
// (cells_common.h: the recipe they share and their helpers).
//
// LSTM (CAS-LSTM eq 1-6; RCRN eq 1-6 / 10-14). Gate order i, f, g(=c~), o as torch.nn.LSTM.
//   c_t = f c_{t-1} + i g,  h_t = o tanh(c_t)
// acts (B, T, 4H) saves the activated gates.

#include "cells_common.h"
#include "recurrences.h"
#include "cells_time.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace ctrlrnn::cells {
namespace {

std::vector<at::Tensor> lstm_forward(const at::Tensor& x_proj_in, const at::Tensor& weight_hh_in,
                                     const at::Tensor& h0_in, const at::Tensor& c0_in,
                                     const c10::optional<at::Tensor>& lengths, bool save) {
  check_common(x_proj_in, weight_hh_in, 4, 4, "lstm");
  const at::Tensor x_proj = x_proj_in.contiguous();
  const at::Tensor weight_hh = weight_hh_in.contiguous();
  const int64_t B = x_proj.size(0), T = x_proj.size(1), H = weight_hh.size(1), G = 4 * H;
  check_state(h0_in, B, H, x_proj, "h0");
  check_state(c0_in, B, H, x_proj, "c0");
  const Lengths L = read_lengths(lengths, B, T);

  at::Tensor h = h0_in.contiguous().clone();
  at::Tensor c = c0_in.contiguous().clone();
  at::Tensor h_seq = ctrlrnn::runtime::empty({B, T, H}, x_proj.options());
  at::Tensor c_seq = ctrlrnn::runtime::empty({B, T, H}, x_proj.options());
  const SavedActs saved(save, B, T, G, x_proj.options());
  at::Tensor rec = at::zeros({B, G}, x_proj.options());

  AT_DISPATCH_FLOATING_TYPES(x_proj.scalar_type(), "lstm_forward", [&] {
    with_math<scalar_t, Act<scalar_t>>([&](auto math) {
      using A = decltype(math);
      const scalar_t* xp_all = x_proj.data_ptr<scalar_t>();
      const scalar_t* rec_p = rec.data_ptr<scalar_t>();
      scalar_t* h_p = h.data_ptr<scalar_t>();
      scalar_t* c_p = c.data_ptr<scalar_t>();
      scalar_t* hs_p = h_seq.data_ptr<scalar_t>();
      scalar_t* cs_p = c_seq.data_ptr<scalar_t>();
      forward_in_time<scalar_t>(L, B, T, weight_hh, h, rec,
          [&](int64_t b0, int64_t b1, const auto& run) {
        run([&](int64_t b, int64_t t, int64_t bt, bool valid) {
          scalar_t* __restrict hs = hs_p + bt * H;
          scalar_t* __restrict cs = cs_p + bt * H;
          scalar_t* __restrict a = saved.row<scalar_t>(b, bt, G);
          if (!valid) {
            fill_zero(hs, H);
            fill_zero(cs, H);
            fill_zero(a, G);
            return;
          }
          const scalar_t* __restrict xp = xp_all + bt * G;
          const scalar_t* __restrict r = rec_p + b * G;
          scalar_t* __restrict hb = h_p + b * H;
          scalar_t* __restrict cb = c_p + b * H;
CTRLRNN_SIMD
          for (int64_t j = 0; j < H; ++j) {
            const scalar_t ig = A::sigmoid(xp[j] + r[j]);
            const scalar_t fg = A::sigmoid(xp[H + j] + r[H + j]);
            const scalar_t gg = A::tanh(xp[2 * H + j] + r[2 * H + j]);
            const scalar_t og = A::sigmoid(xp[3 * H + j] + r[3 * H + j]);
            const scalar_t cn = fg * cb[j] + ig * gg;
            const scalar_t hn = og * A::tanh(cn);
            a[j] = ig;
            a[H + j] = fg;
            a[2 * H + j] = gg;
            a[3 * H + j] = og;
            cb[j] = cn;
            hb[j] = hn;
            cs[j] = cn;
            hs[j] = hn;
          }
        });
      });
    });
  });
  return {h_seq, c_seq, h, c, saved.acts};
}

// Returns {dx_proj (B,T,4H), dweight_hh (4H,H), dh0 (B,H), dc0 (B,H)}.
std::vector<at::Tensor> lstm_backward(const c10::optional<at::Tensor>& grad_h_seq,
                                      const c10::optional<at::Tensor>& grad_c_seq,
                                      const c10::optional<at::Tensor>& grad_h_last,
                                      const c10::optional<at::Tensor>& grad_c_last,
                                      const at::Tensor& weight_hh_in, const at::Tensor& h0_in,
                                      const at::Tensor& c0_in, const at::Tensor& h_seq_in,
                                      const at::Tensor& c_seq_in, const at::Tensor& acts_in,
                                      const c10::optional<at::Tensor>& lengths) {
  const at::Tensor weight_hh = weight_hh_in.contiguous();
  const at::Tensor h0 = h0_in.contiguous(), c0 = c0_in.contiguous();
  const at::Tensor h_seq = h_seq_in.contiguous(), c_seq = c_seq_in.contiguous();
  const at::Tensor acts = acts_in.contiguous();
  const int64_t B = h_seq.size(0), T = h_seq.size(1), H = h_seq.size(2), G = 4 * H;
  const Lengths L = read_lengths(lengths, B, T);
  const at::Tensor gh = opt_contig(grad_h_seq), gc = opt_contig(grad_c_seq);
  const at::Tensor ghl = opt_contig(grad_h_last), gcl = opt_contig(grad_c_last);

  const auto opts = h_seq.options();
  at::Tensor dx = ctrlrnn::runtime::empty({B, T, G}, opts);
  at::Tensor carry_h = ghl.defined() ? ghl.clone() : at::zeros({B, H}, opts);
  at::Tensor carry_c = gcl.defined() ? gcl.clone() : at::zeros({B, H}, opts);
  at::Tensor rec = at::zeros({B, H}, opts);
  const at::Tensor zeros_h = at::zeros({H}, opts);

  AT_DISPATCH_FLOATING_TYPES(h_seq.scalar_type(), "lstm_backward", [&] {
    with_math<scalar_t, Act<scalar_t>>([&](auto math) {
      using A = decltype(math);
      const scalar_t* z = zeros_h.data_ptr<scalar_t>();
      const scalar_t* a_p = acts.data_ptr<scalar_t>();
      const scalar_t* cs_p = c_seq.data_ptr<scalar_t>();
      const scalar_t* c0_p = c0.data_ptr<scalar_t>();
      const scalar_t* rec_p = rec.data_ptr<scalar_t>();
      const scalar_t* ch_p = carry_h.data_ptr<scalar_t>();
      scalar_t* cc_p = carry_c.data_ptr<scalar_t>();
      scalar_t* dx_p = dx.data_ptr<scalar_t>();
      backward_in_time<scalar_t>(L, B, T, weight_hh, rec, false,
          [&](int64_t b0, int64_t b1, const auto& run) {
        run([&](int64_t b, int64_t t, int64_t bt, bool valid) {
          scalar_t* __restrict d = dx_p + bt * G;
          if (!valid) {
            fill_zero(d, G);
            return;
          }
          const scalar_t* __restrict dh_in = incoming(L, b, t, rec_p, ch_p, H);
          const scalar_t* __restrict ghs = row_or<scalar_t>(gh, bt * H, z);
          const scalar_t* __restrict gcs = row_or<scalar_t>(gc, bt * H, z);
          const scalar_t* __restrict a = a_p + bt * G;
          const scalar_t* __restrict cs = cs_p + bt * H;
          const scalar_t* __restrict cp = t > 0 ? cs_p + (bt - 1) * H : c0_p + b * H;
          scalar_t* __restrict dcb = cc_p + b * H;
CTRLRNN_SIMD
          for (int64_t j = 0; j < H; ++j) {
            const scalar_t ig = a[j], fg = a[H + j], gg = a[2 * H + j], og = a[3 * H + j];
            const scalar_t tc = A::tanh(cs[j]);
            const scalar_t dh = dh_in[j] + ghs[j];
            const scalar_t dc = dcb[j] + gcs[j] + dh * og * (scalar_t(1) - tc * tc);
            d[j] = dc * gg * ig * (scalar_t(1) - ig);
            d[H + j] = dc * cp[j] * fg * (scalar_t(1) - fg);
            d[2 * H + j] = dc * ig * (scalar_t(1) - gg * gg);
            d[3 * H + j] = dh * tc * og * (scalar_t(1) - og);
            dcb[j] = dc * fg;
          }
        });
      }, dx, G);
    });
  });
  at::Tensor dh0 = initial_state_grad(L, rec, carry_h);
  at::Tensor dW = ctrlrnn::runtime::mm(dx.view({B * T, G}).t(), shifted_states(h0, h_seq).view({B * T, H}));
  return {dx, dW, dh0, carry_c};
}

}  // namespace

void register_lstm(torch::Library& m) {
  // LSTM forward -> h_seq, c_seq, h_last, c_last, acts
  m.def("lstm_forward(Tensor x_proj, Tensor weight_hh, Tensor h0, Tensor c0, Tensor? lengths, "
        "bool save) -> Tensor[]", &Recurrences<&lstm_forward, 1, 0, 4>::run);
  // LSTM backward -> dx_proj, dweight_hh, dh0, dc0
  m.def("lstm_backward(Tensor? grad_h_seq, Tensor? grad_c_seq, Tensor? grad_h_last, "
        "Tensor? grad_c_last, Tensor weight_hh, Tensor h0, Tensor c0, Tensor h_seq, "
        "Tensor c_seq, Tensor acts, Tensor? lengths) -> Tensor[]",
        &Recurrences<&lstm_backward, 4, 7, 10>::run);
}

}  // namespace ctrlrnn::cells
