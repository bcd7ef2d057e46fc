// The nCARNN cell on CPU, one of the fused gated cells of the extension `cells`
// (cells_common.h: the recipe they share and their helpers).
//
// nCARNN (CARNN eq 3). x_proj gate order: u, f, e with x_u = W^e_u e_m + b_u,
// x_f = W^e_f e_m + b_f, x_e = ebar_m = W_e e_m + b_e; ctx = [W^c_u c, W^c_f c] (B, 2H) is the
// context projection, broadcast over time; weight_hh = [W^h_u; W^h_f] (2H, H).
//   g^u = sig(x_u + ctx_u + W^h_u h_{m-1}), g^f = sig(x_f + ctx_f + W^h_f h_{m-1}),
//   h_m = g^u (g^f ebar_m) + (1 - g^u) h_{m-1}
// acts (B, T, 2H) saves g^u, g^f.

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

std::vector<at::Tensor> ncarnn_forward(const at::Tensor& x_proj_in, const at::Tensor& weight_hh_in,
                                       const at::Tensor& ctx_in, const at::Tensor& h0_in,
                                       const c10::optional<at::Tensor>& lengths, bool save) {
  check_common(x_proj_in, weight_hh_in, 3, 2, "ncarnn");
  const at::Tensor x_proj = x_proj_in.contiguous();
  const at::Tensor weight_hh = weight_hh_in.contiguous();
  const at::Tensor ctx = ctx_in.contiguous();
  const int64_t B = x_proj.size(0), T = x_proj.size(1), H = weight_hh.size(1), G = 3 * H;
  TORCH_CHECK(ctx.dim() == 2 && ctx.size(0) == B && ctx.size(1) == 2 * H,
              "ncarnn: context_proj must be (", B, ", ", 2 * H, "), got ", ctx.sizes());
  check_state(h0_in, B, H, x_proj, "h0");
  const Lengths L = read_lengths(lengths, B, T);

  at::Tensor h = h0_in.contiguous().clone();
  at::Tensor h_seq = ctrlrnn::runtime::empty({B, T, H}, x_proj.options());
  const SavedActs saved(save, B, T, 2 * H, x_proj.options());
  at::Tensor rec = at::zeros({B, 2 * H}, x_proj.options());

  AT_DISPATCH_FLOATING_TYPES(x_proj.scalar_type(), "ncarnn_forward", [&] {
    with_math<scalar_t, Act<scalar_t>>([&](auto math) {
      using A = decltype(math);
      const scalar_t* xp_all = x_proj.data_ptr<scalar_t>();
      const scalar_t* ctx_p = ctx.data_ptr<scalar_t>();
      const scalar_t* rec_p = rec.data_ptr<scalar_t>();
      scalar_t* h_p = h.data_ptr<scalar_t>();
      scalar_t* hs_p = h_seq.data_ptr<scalar_t>();
      forward_in_time<scalar_t>(L, B, T, weight_hh, h, rec,
          [&](int64_t b0, int64_t b1, const auto& run) {
        run([&](int64_t b, int64_t t, int64_t bt, bool valid) {
          scalar_t* __restrict hs = hs_p + bt * H;
          scalar_t* __restrict a = saved.row<scalar_t>(b, bt, 2 * H);
          if (!valid) {
            fill_zero(hs, H);
            fill_zero(a, 2 * H);
            return;
          }
          const scalar_t* __restrict xp = xp_all + bt * G;
          const scalar_t* __restrict cx = ctx_p + b * 2 * H;
          const scalar_t* __restrict r = rec_p + b * 2 * H;
          scalar_t* __restrict hb = h_p + b * H;
CTRLRNN_SIMD
          for (int64_t j = 0; j < H; ++j) {
            const scalar_t ug = A::sigmoid(xp[j] + cx[j] + r[j]);
            const scalar_t fg = A::sigmoid(xp[H + j] + cx[H + j] + r[H + j]);
            const scalar_t hnew = ug * (fg * xp[2 * H + j]) + (scalar_t(1) - ug) * hb[j];
            a[j] = ug;
            a[H + j] = fg;
            hb[j] = hnew;
            hs[j] = hnew;
          }
        });
      });
    });
  });
  return {h_seq, h, saved.acts};
}

// Returns {dx_proj (B,T,3H), dweight_hh (2H,H), dcontext_proj (B,2H), dh0 (B,H)}.
std::vector<at::Tensor> ncarnn_backward(const c10::optional<at::Tensor>& grad_h_seq,
                                        const c10::optional<at::Tensor>& grad_h_last,
                                        const at::Tensor& x_proj_in, const at::Tensor& weight_hh_in,
                                        const at::Tensor& h0_in, const at::Tensor& h_seq_in,
                                        const at::Tensor& acts_in,
                                        const c10::optional<at::Tensor>& lengths) {
  const at::Tensor x_proj = x_proj_in.contiguous();
  const at::Tensor weight_hh = weight_hh_in.contiguous();
  const at::Tensor h0 = h0_in.contiguous();
  const at::Tensor h_seq = h_seq_in.contiguous();
  const at::Tensor acts = acts_in.contiguous();
  const int64_t B = h_seq.size(0), T = h_seq.size(1), H = h_seq.size(2), G = 3 * H;
  const Lengths L = read_lengths(lengths, B, T);
  const at::Tensor gh = opt_contig(grad_h_seq), ghl = opt_contig(grad_h_last);

  const auto opts = h_seq.options();
  at::Tensor dx = ctrlrnn::runtime::empty({B, T, G}, opts);
  at::Tensor dctx = at::zeros({B, 2 * H}, opts);
  at::Tensor carry_h = ghl.defined() ? ghl.clone() : at::zeros({B, H}, opts);
  at::Tensor rec = at::zeros({B, H}, opts);
  const at::Tensor zeros_h = at::zeros({H}, opts);

  AT_DISPATCH_FLOATING_TYPES(h_seq.scalar_type(), "ncarnn_backward", [&] {
    const scalar_t* z = zeros_h.data_ptr<scalar_t>();
    const scalar_t* xp_all = x_proj.data_ptr<scalar_t>();
    const scalar_t* a_p = acts.data_ptr<scalar_t>();
    const scalar_t* hs_p = h_seq.data_ptr<scalar_t>();
    const scalar_t* h0_p = h0.data_ptr<scalar_t>();
    scalar_t* rec_p = rec.data_ptr<scalar_t>();
    const scalar_t* ch_p = carry_h.data_ptr<scalar_t>();
    scalar_t* dx_p = dx.data_ptr<scalar_t>();
    scalar_t* dctx_p = dctx.data_ptr<scalar_t>();
    backward_in_time<scalar_t>(L, B, T, weight_hh, rec, true,
        [&](int64_t b0, int64_t b1, const auto& run) {
      run([&](int64_t b, int64_t t, int64_t bt, bool valid) {
        scalar_t* __restrict d = dx_p + bt * G;
        if (!valid) {
          fill_zero(d, G);
          return;
        }
        const scalar_t* dh_in = incoming(L, b, t, static_cast<const scalar_t*>(rec_p), ch_p, H);
        scalar_t* out = rec_p + b * H;
        const scalar_t* __restrict ghs = row_or<scalar_t>(gh, bt * H, z);
        const scalar_t* __restrict xp = xp_all + bt * G;
        const scalar_t* __restrict a = a_p + bt * 2 * H;
        const scalar_t* __restrict hp = t > 0 ? hs_p + (bt - 1) * H : h0_p + b * H;
        scalar_t* __restrict dcx = dctx_p + b * 2 * H;
CTRLRNN_SIMD
        for (int64_t j = 0; j < H; ++j) {
          const scalar_t ug = a[j], fg = a[H + j], e = xp[2 * H + j];
          const scalar_t dh = dh_in[j] + ghs[j];
          const scalar_t du = dh * (fg * e - hp[j]) * ug * (scalar_t(1) - ug);
          const scalar_t df = dh * ug * e * fg * (scalar_t(1) - fg);
          d[j] = du;
          d[H + j] = df;
          d[2 * H + j] = dh * ug * fg;
          dcx[j] += du;
          dcx[H + j] += df;
          out[j] = dh * (scalar_t(1) - ug);  // direct path; the GEMM adds dG U below
        }
      });
    }, dx, 2 * H);
  });
  at::Tensor dh0 = initial_state_grad(L, rec, carry_h);
  at::Tensor dW = ctrlrnn::runtime::mm(dx.view({B * T, G}).narrow(1, 0, 2 * H).t(),
                         shifted_states(h0, h_seq).view({B * T, H}));
  return {dx, dW, dctx, dh0};
}

}  // namespace

void register_ncarnn(torch::Library& m) {
  // nCARNN forward -> h_seq, h_last, acts
  m.def("ncarnn_forward(Tensor x_proj, Tensor weight_hh, Tensor ctx, Tensor h0, "
        "Tensor? lengths, bool save) -> Tensor[]", &Recurrences<&ncarnn_forward, 1, 0, 4>::run);
  // nCARNN backward -> dx_proj, dweight_hh, dcontext_proj, dh0
  m.def("ncarnn_backward(Tensor? grad_h_seq, Tensor? grad_h_last, Tensor x_proj, "
        "Tensor weight_hh, Tensor h0, Tensor h_seq, Tensor acts, Tensor? lengths) -> Tensor[]",
        &Recurrences<&ncarnn_backward, 3, 2, 7>::run);
}

}  // namespace ctrlrnn::cells
