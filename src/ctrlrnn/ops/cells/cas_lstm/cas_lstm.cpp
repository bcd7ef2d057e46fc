// The CAS-LSTM cell on CPU, one of the fused gated cells of the extension `cells`
// (cells_common.h: the recipe they share and their helpers).
//
// CAS-LSTM, layers l > 1 (eq 7-13), with lambda mixing and the peephole variant (iii), eq 17-18.
// Gate order in x_proj: i, f, c~, o, g (vertical forget gate last).
//   c_t = i c~ + s_f * f c_{t-1} + s_g * g c^{l-1}_t        (eq 12: s_f = 1 - lambda,
//   h_t = o tanh(c_t)                                          s_g = lambda; plain sum: 1, 1)
// Default: g = sig(x_g + U_g h_{t-1}), weight_hh (5H, H).
// Peephole (eq 17): g = sig(x_g + p1 c_{t-1} + p2 c^{l-1}_t), weight_hh (4H, H) (no U_g),
//   peephole = stack(p1, p2) (2, H).
// acts (B, T, 5H) saves i, f, c~, o, g.

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

template <typename scalar_t, bool PEEP, typename A>
void cas_forward_loop(const at::Tensor& x_proj, const at::Tensor& weight_hh,
                      const at::Tensor& lower, const at::Tensor& sf_t, const at::Tensor& sg_t,
                      const at::Tensor& peep, at::Tensor& h, at::Tensor& c, at::Tensor& h_seq,
                      at::Tensor& c_seq, const SavedActs& saved, at::Tensor& rec,
                      const Lengths& L) {
  const int64_t B = x_proj.size(0), T = x_proj.size(1), H = weight_hh.size(1), G = 5 * H;
  const int64_t Gh = weight_hh.size(0);
  const scalar_t* xp_all = x_proj.data_ptr<scalar_t>();
  const scalar_t* low_all = lower.data_ptr<scalar_t>();
  const scalar_t* sf = sf_t.data_ptr<scalar_t>();
  const scalar_t* sg = sg_t.data_ptr<scalar_t>();
  const scalar_t* p1 = PEEP ? peep.data_ptr<scalar_t>() : nullptr;
  const scalar_t* p2 = PEEP ? p1 + H : nullptr;
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
      const scalar_t* __restrict low = low_all + bt * H;
      const scalar_t* __restrict r = rec_p + b * Gh;
      scalar_t* __restrict hb = h_p + b * H;
      scalar_t* __restrict cb = c_p + b * H;
CTRLRNN_SIMD
      for (int64_t j = 0; j < H; ++j) {
        const scalar_t cp = cb[j];
        const scalar_t ig = A::sigmoid(xp[j] + r[j]);
        const scalar_t fg = A::sigmoid(xp[H + j] + r[H + j]);
        const scalar_t cc = A::tanh(xp[2 * H + j] + r[2 * H + j]);
        const scalar_t og = A::sigmoid(xp[3 * H + j] + r[3 * H + j]);
        scalar_t gpre = xp[4 * H + j];
        if constexpr (PEEP) {
          gpre += p1[j] * cp + p2[j] * low[j];
        } else {
          gpre += r[4 * H + j];
        }
        const scalar_t gg = A::sigmoid(gpre);
        const scalar_t cn = ig * cc + sf[j] * fg * cp + sg[j] * gg * low[j];
        const scalar_t hn = og * A::tanh(cn);
        a[j] = ig;
        a[H + j] = fg;
        a[2 * H + j] = cc;
        a[3 * H + j] = og;
        a[4 * H + j] = gg;
        cb[j] = cn;
        hb[j] = hn;
        cs[j] = cn;
        hs[j] = hn;
      }
    });
  });
}

std::vector<at::Tensor> cas_lstm_forward(const at::Tensor& x_proj_in,
                                         const at::Tensor& weight_hh_in,
                                         const at::Tensor& lower_in, const at::Tensor& scale_f_in,
                                         const at::Tensor& scale_g_in,
                                         const c10::optional<at::Tensor>& peephole,
                                         const at::Tensor& h0_in, const at::Tensor& c0_in,
                                         const c10::optional<at::Tensor>& lengths, bool save) {
  const bool peep = peephole.has_value() && peephole->defined();
  check_common(x_proj_in, weight_hh_in, 5, peep ? 4 : 5, "cas_lstm");
  const at::Tensor x_proj = x_proj_in.contiguous();
  const at::Tensor weight_hh = weight_hh_in.contiguous();
  const at::Tensor lower = lower_in.contiguous();
  const at::Tensor sf = scale_f_in.contiguous(), sg = scale_g_in.contiguous();
  const int64_t B = x_proj.size(0), T = x_proj.size(1), H = weight_hh.size(1);
  TORCH_CHECK(lower.dim() == 3 && lower.size(0) == B && lower.size(1) == T && lower.size(2) == H,
              "cas_lstm: lower_c must be (", B, ", ", T, ", ", H, "), got ", lower.sizes());
  TORCH_CHECK(sf.numel() == H && sg.numel() == H, "cas_lstm: scale_f and scale_g must have ", H,
              " elements");
  at::Tensor pp;
  if (peep) {
    pp = peephole->contiguous();
    TORCH_CHECK(pp.dim() == 2 && pp.size(0) == 2 && pp.size(1) == H,
                "cas_lstm: peephole must be (2, ", H, "), got ", pp.sizes());
  }
  check_state(h0_in, B, H, x_proj, "h0");
  check_state(c0_in, B, H, x_proj, "c0");
  const Lengths L = read_lengths(lengths, B, T);

  at::Tensor h = h0_in.contiguous().clone();
  at::Tensor c = c0_in.contiguous().clone();
  at::Tensor h_seq = ctrlrnn::runtime::empty({B, T, H}, x_proj.options());
  at::Tensor c_seq = ctrlrnn::runtime::empty({B, T, H}, x_proj.options());
  const SavedActs saved(save, B, T, 5 * H, x_proj.options());
  at::Tensor rec = at::zeros({B, weight_hh.size(0)}, x_proj.options());
  AT_DISPATCH_FLOATING_TYPES(x_proj.scalar_type(), "cas_lstm_forward", [&] {
    with_math<scalar_t, Act<scalar_t>>([&](auto math) {
      using A = decltype(math);
      if (peep) {
        cas_forward_loop<scalar_t, true, A>(x_proj, weight_hh, lower, sf, sg, pp, h, c, h_seq,
                                            c_seq, saved, rec, L);
      } else {
        cas_forward_loop<scalar_t, false, A>(x_proj, weight_hh, lower, sf, sg, pp, h, c, h_seq,
                                             c_seq, saved, rec, L);
      }
    });
  });
  return {h_seq, c_seq, h, c, saved.acts};
}

template <typename scalar_t, bool PEEP, typename A>
void cas_backward_loop(const at::Tensor& gh, const at::Tensor& gc, const at::Tensor& weight_hh,
                       const at::Tensor& lower, const at::Tensor& sf_t, const at::Tensor& sg_t,
                       const at::Tensor& peep, const at::Tensor& c0, const at::Tensor& c_seq,
                       const at::Tensor& acts, at::Tensor& dx, at::Tensor& dlow,
                       at::Tensor& acc, at::Tensor& carry_h, at::Tensor& carry_c,
                       at::Tensor& rec, const at::Tensor& zeros_h, const Lengths& L) {
  const int64_t B = c_seq.size(0), T = c_seq.size(1), H = c_seq.size(2), G = 5 * H;
  const int64_t Gh = weight_hh.size(0);
  const scalar_t* z = zeros_h.data_ptr<scalar_t>();
  const scalar_t* a_p = acts.data_ptr<scalar_t>();
  const scalar_t* cs_p = c_seq.data_ptr<scalar_t>();
  const scalar_t* c0_p = c0.data_ptr<scalar_t>();
  const scalar_t* low_all = lower.data_ptr<scalar_t>();
  const scalar_t* sf = sf_t.data_ptr<scalar_t>();
  const scalar_t* sg = sg_t.data_ptr<scalar_t>();
  const scalar_t* p1 = PEEP ? peep.data_ptr<scalar_t>() : nullptr;
  const scalar_t* p2 = PEEP ? p1 + H : nullptr;
  const scalar_t* rec_p = rec.data_ptr<scalar_t>();
  const scalar_t* ch_p = carry_h.data_ptr<scalar_t>();
  scalar_t* cc_p = carry_c.data_ptr<scalar_t>();
  scalar_t* dx_p = dx.data_ptr<scalar_t>();
  scalar_t* dl_p = dlow.data_ptr<scalar_t>();
  scalar_t* acc_p = acc.data_ptr<scalar_t>();  // (B, 4, H): d s_f, d s_g, d p1, d p2
  backward_in_time<scalar_t>(L, B, T, weight_hh, rec, false,
      [&](int64_t b0, int64_t b1, const auto& run) {
    run([&](int64_t b, int64_t t, int64_t bt, bool valid) {
      scalar_t* __restrict d = dx_p + bt * G;
      scalar_t* __restrict dl = dl_p + bt * H;
      if (!valid) {
        fill_zero(d, G);
        fill_zero(dl, H);
        return;
      }
      const scalar_t* __restrict dh_in = incoming(L, b, t, rec_p, ch_p, H);
      const scalar_t* __restrict ghs = row_or<scalar_t>(gh, bt * H, z);
      const scalar_t* __restrict gcs = row_or<scalar_t>(gc, bt * H, z);
      const scalar_t* __restrict a = a_p + bt * G;
      const scalar_t* __restrict cs = cs_p + bt * H;
      const scalar_t* __restrict cpv = t > 0 ? cs_p + (bt - 1) * H : c0_p + b * H;
      const scalar_t* __restrict low = low_all + bt * H;
      scalar_t* __restrict dcb = cc_p + b * H;
      scalar_t* __restrict acc_sf = acc_p + b * 4 * H;
      scalar_t* __restrict acc_sg = acc_sf + H;
      scalar_t* __restrict acc_p1 = acc_sf + 2 * H;
      scalar_t* __restrict acc_p2 = acc_sf + 3 * H;
CTRLRNN_SIMD
      for (int64_t j = 0; j < H; ++j) {
        const scalar_t ig = a[j], fg = a[H + j], cc = a[2 * H + j], og = a[3 * H + j],
                       gg = a[4 * H + j];
        const scalar_t cp = cpv[j], lw = low[j];
        const scalar_t tc = A::tanh(cs[j]);
        const scalar_t dh = dh_in[j] + ghs[j];
        const scalar_t dc = dcb[j] + gcs[j] + dh * og * (scalar_t(1) - tc * tc);
        const scalar_t dgp = dc * sg[j] * lw * gg * (scalar_t(1) - gg);
        d[j] = dc * cc * ig * (scalar_t(1) - ig);
        d[H + j] = dc * sf[j] * cp * fg * (scalar_t(1) - fg);
        d[2 * H + j] = dc * ig * (scalar_t(1) - cc * cc);
        d[3 * H + j] = dh * tc * og * (scalar_t(1) - og);
        d[4 * H + j] = dgp;
        acc_sf[j] += dc * fg * cp;
        acc_sg[j] += dc * gg * lw;
        scalar_t dcn = dc * sf[j] * fg;
        scalar_t dlw = dc * sg[j] * gg;
        if constexpr (PEEP) {
          dcn += dgp * p1[j];
          dlw += dgp * p2[j];
          acc_p1[j] += dgp * cp;
          acc_p2[j] += dgp * lw;
        }
        dcb[j] = dcn;
        dl[j] = dlw;
      }
    });
  }, dx, Gh);
}

// Returns {dx_proj (B,T,5H), dweight_hh, dlower_c (B,T,H), dscale_f (H,), dscale_g (H,),
//          dpeephole (2,H) (zeros when no peephole), dh0, dc0}.
std::vector<at::Tensor> cas_lstm_backward(
    const c10::optional<at::Tensor>& grad_h_seq, const c10::optional<at::Tensor>& grad_c_seq,
    const c10::optional<at::Tensor>& grad_h_last, const c10::optional<at::Tensor>& grad_c_last,
    const at::Tensor& weight_hh_in, const at::Tensor& lower_in, const at::Tensor& scale_f_in,
    const at::Tensor& scale_g_in, const c10::optional<at::Tensor>& peephole,
    const at::Tensor& h0_in, const at::Tensor& c0_in, const at::Tensor& h_seq_in,
    const at::Tensor& c_seq_in, const at::Tensor& acts_in,
    const c10::optional<at::Tensor>& lengths) {
  const bool peep = peephole.has_value() && peephole->defined();
  const at::Tensor weight_hh = weight_hh_in.contiguous();
  const at::Tensor lower = lower_in.contiguous();
  const at::Tensor sf = scale_f_in.contiguous(), sg = scale_g_in.contiguous();
  const at::Tensor pp = peep ? peephole->contiguous() : at::Tensor();
  const at::Tensor h0 = h0_in.contiguous(), c0 = c0_in.contiguous();
  const at::Tensor h_seq = h_seq_in.contiguous(), c_seq = c_seq_in.contiguous();
  const at::Tensor acts = acts_in.contiguous();
  const int64_t B = h_seq.size(0), T = h_seq.size(1), H = h_seq.size(2), G = 5 * H;
  const int64_t Gh = weight_hh.size(0);
  const Lengths L = read_lengths(lengths, B, T);
  const at::Tensor gh = opt_contig(grad_h_seq), gc = opt_contig(grad_c_seq);
  const at::Tensor ghl = opt_contig(grad_h_last), gcl = opt_contig(grad_c_last);

  const auto opts = h_seq.options();
  at::Tensor dx = ctrlrnn::runtime::empty({B, T, G}, opts);
  at::Tensor dlow = ctrlrnn::runtime::empty({B, T, H}, opts);
  at::Tensor acc = at::zeros({B, 4, H}, opts);
  at::Tensor carry_h = ghl.defined() ? ghl.clone() : at::zeros({B, H}, opts);
  at::Tensor carry_c = gcl.defined() ? gcl.clone() : at::zeros({B, H}, opts);
  at::Tensor rec = at::zeros({B, H}, opts);
  const at::Tensor zeros_h = at::zeros({H}, opts);

  AT_DISPATCH_FLOATING_TYPES(h_seq.scalar_type(), "cas_lstm_backward", [&] {
    with_math<scalar_t, Act<scalar_t>>([&](auto math) {
      using A = decltype(math);
      if (peep) {
        cas_backward_loop<scalar_t, true, A>(gh, gc, weight_hh, lower, sf, sg, pp, c0, c_seq, acts,
                                             dx, dlow, acc, carry_h, carry_c, rec, zeros_h, L);
      } else {
        cas_backward_loop<scalar_t, false, A>(gh, gc, weight_hh, lower, sf, sg, pp, c0, c_seq,
                                              acts, dx, dlow, acc, carry_h, carry_c, rec,
                                              zeros_h, L);
      }
    });
  });
  at::Tensor dh0 = initial_state_grad(L, rec, carry_h);
  at::Tensor dW = ctrlrnn::runtime::mm(dx.view({B * T, G}).narrow(1, 0, Gh).t(),
                         shifted_states(h0, h_seq).view({B * T, H}));
  at::Tensor accs = acc.sum(0);  // (4, H)
  at::Tensor dsf = accs[0].reshape(sf.sizes()).clone();
  at::Tensor dsg = accs[1].reshape(sg.sizes()).clone();
  at::Tensor dpp = accs.narrow(0, 2, 2).clone();
  return {dx, dW, dlow, dsf, dsg, dpp, dh0, carry_c};
}

}  // namespace

void register_cas_lstm(torch::Library& m) {
  // CAS-LSTM forward -> h_seq, c_seq, h_last, c_last, acts
  m.def("cas_lstm_forward(Tensor x_proj, Tensor weight_hh, Tensor lower, Tensor scale_f, "
        "Tensor scale_g, Tensor? peephole, Tensor h0, Tensor c0, Tensor? lengths, bool save) "
        "-> Tensor[]", &Recurrences<&cas_lstm_forward, 1, 0, 8>::run);
  // CAS-LSTM backward -> dx_proj, dweight_hh, dlower_c, dscale_f, dscale_g, dpeephole, dh0, dc0
  m.def("cas_lstm_backward(Tensor? grad_h_seq, Tensor? grad_c_seq, Tensor? grad_h_last, "
        "Tensor? grad_c_last, Tensor weight_hh, Tensor lower, Tensor scale_f, Tensor scale_g, "
        "Tensor? peephole, Tensor h0, Tensor c0, Tensor h_seq, Tensor c_seq, Tensor acts, "
        "Tensor? lengths) -> Tensor[]", &Recurrences<&cas_lstm_backward, 4, 11, 14>::run);
}

}  // namespace ctrlrnn::cells
