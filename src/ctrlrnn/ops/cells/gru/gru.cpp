// The GRU cell on CPU, one of the fused gated cells of the extension `cells`
// (cells_common.h: the recipe they share and their helpers).
//
// GRU, torch.nn.GRU formulation (gate order r, z, n; the recurrent bias b_hn sits inside r*(.)):
//   r = sig(x_r + U_r h + b_hr), z = sig(x_z + U_z h + b_hz), n = tanh(x_n + r (U_n h + b_hn)),
//   h_t = (1 - z) n + z h_{t-1}
// acts (B, T, 4H) saves r, z, n and U_n h + b_hn.

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

std::vector<at::Tensor> gru_forward(const at::Tensor& x_proj_in, const at::Tensor& weight_hh_in,
                                    const at::Tensor& bias_hh_in, const at::Tensor& h0_in,
                                    const c10::optional<at::Tensor>& lengths, bool save) {
  check_common(x_proj_in, weight_hh_in, 3, 3, "gru");
  const at::Tensor x_proj = x_proj_in.contiguous();
  const at::Tensor weight_hh = weight_hh_in.contiguous();
  const at::Tensor bias_hh = bias_hh_in.contiguous();
  const int64_t B = x_proj.size(0), T = x_proj.size(1), H = weight_hh.size(1), G = 3 * H;
  TORCH_CHECK(bias_hh.dim() == 1 && bias_hh.size(0) == G, "gru: bias_hh must be (", G, ",), got ",
              bias_hh.sizes());
  check_state(h0_in, B, H, x_proj, "h0");
  const Lengths L = read_lengths(lengths, B, T);

  at::Tensor h = h0_in.contiguous().clone();
  at::Tensor h_seq = ctrlrnn::runtime::empty({B, T, H}, x_proj.options());
  const SavedActs saved(save, B, T, 4 * H, x_proj.options());
  at::Tensor rec = at::zeros({B, G}, x_proj.options());

  AT_DISPATCH_FLOATING_TYPES(x_proj.scalar_type(), "gru_forward", [&] {
    with_math<scalar_t, Act<scalar_t>>([&](auto math) {
      using A = decltype(math);
      const scalar_t* xp_all = x_proj.data_ptr<scalar_t>();
      const scalar_t* rec_p = rec.data_ptr<scalar_t>();
      const scalar_t* bh = bias_hh.data_ptr<scalar_t>();
      scalar_t* h_p = h.data_ptr<scalar_t>();
      scalar_t* hs_p = h_seq.data_ptr<scalar_t>();
      forward_in_time<scalar_t>(L, B, T, weight_hh, h, rec,
          [&](int64_t b0, int64_t b1, const auto& run) {
        run([&](int64_t b, int64_t t, int64_t bt, bool valid) {
          scalar_t* __restrict hs = hs_p + bt * H;
          scalar_t* __restrict a = saved.row<scalar_t>(b, bt, 4 * H);
          if (!valid) {
            fill_zero(hs, H);
            fill_zero(a, 4 * H);
            return;
          }
          const scalar_t* __restrict xp = xp_all + bt * G;
          const scalar_t* __restrict r = rec_p + b * G;
          scalar_t* __restrict hb = h_p + b * H;
CTRLRNN_SIMD
          for (int64_t j = 0; j < H; ++j) {
            const scalar_t rg = A::sigmoid(xp[j] + r[j] + bh[j]);
            const scalar_t zg = A::sigmoid(xp[H + j] + r[H + j] + bh[H + j]);
            const scalar_t hn = r[2 * H + j] + bh[2 * H + j];
            const scalar_t ng = A::tanh(xp[2 * H + j] + rg * hn);
            const scalar_t hnew = (scalar_t(1) - zg) * ng + zg * hb[j];
            a[j] = rg;
            a[H + j] = zg;
            a[2 * H + j] = ng;
            a[3 * H + j] = hn;
            hb[j] = hnew;
            hs[j] = hnew;
          }
        });
      });
    });
  });
  return {h_seq, h, saved.acts};
}

// Returns {dx_proj (B,T,3H), dweight_hh (3H,H), dbias_hh (3H,), dh0 (B,H)}.
std::vector<at::Tensor> gru_backward(const c10::optional<at::Tensor>& grad_h_seq,
                                     const c10::optional<at::Tensor>& grad_h_last,
                                     const at::Tensor& weight_hh_in, const at::Tensor& h0_in,
                                     const at::Tensor& h_seq_in, const at::Tensor& acts_in,
                                     const c10::optional<at::Tensor>& lengths) {
  const at::Tensor weight_hh = weight_hh_in.contiguous();
  const at::Tensor h0 = h0_in.contiguous();
  const at::Tensor h_seq = h_seq_in.contiguous();
  const at::Tensor acts = acts_in.contiguous();
  const int64_t B = h_seq.size(0), T = h_seq.size(1), H = h_seq.size(2), G = 3 * H;
  const Lengths L = read_lengths(lengths, B, T);
  const at::Tensor gh = opt_contig(grad_h_seq), ghl = opt_contig(grad_h_last);

  const auto opts = h_seq.options();
  at::Tensor dx = ctrlrnn::runtime::empty({B, T, G}, opts);
  at::Tensor drec = ctrlrnn::runtime::empty({B, T, G}, opts);  // gradient of U h + b_hh per step
  at::Tensor carry_h = ghl.defined() ? ghl.clone() : at::zeros({B, H}, opts);
  at::Tensor rec = at::zeros({B, H}, opts);
  const at::Tensor zeros_h = at::zeros({H}, opts);

  AT_DISPATCH_FLOATING_TYPES(h_seq.scalar_type(), "gru_backward", [&] {
    const scalar_t* z = zeros_h.data_ptr<scalar_t>();
    const scalar_t* a_p = acts.data_ptr<scalar_t>();
    const scalar_t* hs_p = h_seq.data_ptr<scalar_t>();
    const scalar_t* h0_p = h0.data_ptr<scalar_t>();
    scalar_t* rec_p = rec.data_ptr<scalar_t>();
    const scalar_t* ch_p = carry_h.data_ptr<scalar_t>();
    scalar_t* dx_p = dx.data_ptr<scalar_t>();
    scalar_t* dr_p = drec.data_ptr<scalar_t>();
    backward_in_time<scalar_t>(L, B, T, weight_hh, rec, true,
        [&](int64_t b0, int64_t b1, const auto& run) {
      run([&](int64_t b, int64_t t, int64_t bt, bool valid) {
        scalar_t* __restrict d = dx_p + bt * G;
        scalar_t* __restrict dr = dr_p + bt * G;
        if (!valid) {
          fill_zero(d, G);
          fill_zero(dr, G);
          return;
        }
        // dh_in may alias the output row (both in rec): read before write, element-wise.
        const scalar_t* dh_in = incoming(L, b, t, static_cast<const scalar_t*>(rec_p), ch_p, H);
        scalar_t* out = rec_p + b * H;
        const scalar_t* __restrict ghs = row_or<scalar_t>(gh, bt * H, z);
        const scalar_t* __restrict a = a_p + bt * 4 * H;
        const scalar_t* __restrict hp = t > 0 ? hs_p + (bt - 1) * H : h0_p + b * H;
CTRLRNN_SIMD
        for (int64_t j = 0; j < H; ++j) {
          const scalar_t rg = a[j], zg = a[H + j], ng = a[2 * H + j], hn = a[3 * H + j];
          const scalar_t dh = dh_in[j] + ghs[j];
          const scalar_t dn = dh * (scalar_t(1) - zg) * (scalar_t(1) - ng * ng);
          const scalar_t dz = dh * (hp[j] - ng) * zg * (scalar_t(1) - zg);
          const scalar_t drg = dn * hn * rg * (scalar_t(1) - rg);
          d[j] = drg;
          d[H + j] = dz;
          d[2 * H + j] = dn;
          dr[j] = drg;
          dr[H + j] = dz;
          dr[2 * H + j] = dn * rg;
          out[j] = dh * zg;  // direct path h_t <- z h_{t-1}; the GEMM adds drec U below
        }
      });
    }, drec, drec.size(2));
  });
  at::Tensor dh0 = initial_state_grad(L, rec, carry_h);
  const at::Tensor drec2 = drec.view({B * T, G});
  at::Tensor dW = ctrlrnn::runtime::mm(drec2.t(), shifted_states(h0, h_seq).view({B * T, H}));
  at::Tensor db = drec2.sum(0);
  return {dx, dW, db, dh0};
}

}  // namespace

void register_gru(torch::Library& m) {
  // GRU forward -> h_seq, h_last, acts
  m.def("gru_forward(Tensor x_proj, Tensor weight_hh, Tensor bias_hh, Tensor h0, "
        "Tensor? lengths, bool save) -> Tensor[]", &Recurrences<&gru_forward, 1, 0, 4>::run);
  // GRU backward -> dx_proj, dweight_hh, dbias_hh, dh0
  m.def("gru_backward(Tensor? grad_h_seq, Tensor? grad_h_last, Tensor weight_hh, Tensor h0, "
        "Tensor h_seq, Tensor acts, Tensor? lengths) -> Tensor[]",
        &Recurrences<&gru_backward, 2, 4, 6>::run);
}

}  // namespace ctrlrnn::cells
