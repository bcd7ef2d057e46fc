// The loops over time every fused gated cell of the `cells` extension runs (cells_common.h has the
// recipe): the batch split into slices, one per thread, each running the whole time loop
// (over_batch_slices, so no barrier per step); per step one GEMM with the recurrent matrix U for
// the slice's rows that are still running, and the cell's pointwise work row by row. A cell
// supplies only that pointwise work, as `slice(b0, b1, run)`: called once per slice of rows
// [b0, b1) (its scratch buffers live there), it calls `run(row)`, which runs the loop over time
// calling `row(b, t, bt, valid)` for every row b of the slice at every step t (bt = b * T + t),
// `valid` false past the row's length (the row then writes its zeros).

#pragma once

#include "cells_common.h"

namespace ctrlrnn::cells {

// Forward: per step, rec = h_{t-1} U^T (rec (B, G_h), h (B, H) the running state, updated in
// place by the rows), then the rows.
template <typename scalar_t, typename Slice>
void forward_in_time(const Lengths& L, int64_t B, int64_t T, const at::Tensor& weight_hh,
                     const at::Tensor& h, at::Tensor& rec, const Slice& slice) {
  over_batch_slices(B, [&](int64_t b0, int64_t b1) {
    at::Tensor rec_s = rec.narrow(0, b0, b1 - b0);
    const at::Tensor h_s = h.narrow(0, b0, b1 - b0);
    const int64_t ml = L.max_in(b0, b1);
    const StepGemm<scalar_t> gemm(weight_hh, /*transpose=*/true, b1 - b0);
    slice(b0, b1, [&](const auto& row) {
      for (int64_t t = 0; t < T; ++t) {
        if (t < ml) gemm.run(h_s, rec_s, false);
        for (int64_t b = b0; b < b1; ++b) row(b, t, b * T + t, t < L.len[b]);
      }
    });
  });
}

// Backward, from the last step to the first: the rows (which read the recurrent part of
// dh_t from rec, see incoming()), then rec (+)= dG_t U with dG_t (B, G_h) the first G_h columns
// of step t of dG_all (B, T, >= G_h, contiguous): the gradient of the step's GEMM output the
// rows just wrote (`accumulate`: add to rec). On MKL's packed path the product reads dG_t in
// place through pointers; elsewhere through a view of it.
template <typename scalar_t, typename Slice>
void backward_in_time(const Lengths& L, int64_t B, int64_t T, const at::Tensor& weight_hh,
                      at::Tensor& rec, bool accumulate, const Slice& slice,
                      const at::Tensor& dG_all, int64_t G_h) {
  TORCH_CHECK(dG_all.is_contiguous() && dG_all.dim() == 3 && dG_all.size(2) >= G_h,
              "backward_in_time: dG_all must be a contiguous (B, T, >= G_h) tensor");
  const int64_t width = dG_all.size(2);
  over_batch_slices(B, [&](int64_t b0, int64_t b1) {
    at::Tensor rec_s = rec.narrow(0, b0, b1 - b0);
    const int64_t ml = L.max_in(b0, b1);
    const StepGemm<scalar_t> gemm(weight_hh, /*transpose=*/false, b1 - b0);
    scalar_t* rec_p = rec_s.data_ptr<scalar_t>();
    const int64_t ld_rec = rec_s.stride(0);
    const scalar_t* dg_p = dG_all.data_ptr<scalar_t>();
    slice(b0, b1, [&](const auto& row) {
      for (int64_t t = T - 1; t >= 0; --t) {
        for (int64_t b = b0; b < b1; ++b) row(b, t, b * T + t, t < L.len[b]);
        if (t >= ml) continue;
        const scalar_t* a = dg_p + (b0 * T + t) * width;
        if (!gemm.run_raw(a, T * width, rec_p, ld_rec, accumulate)) {
          gemm.run(dG_all.select(1, t).narrow(1, 0, G_h).narrow(0, b0, b1 - b0), rec_s,
                   accumulate);
        }
      }
    });
  });
}

}  // namespace ctrlrnn::cells
