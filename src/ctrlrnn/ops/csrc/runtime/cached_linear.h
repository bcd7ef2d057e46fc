// ctrlrnn runtime: linear layers whose outputs come from runtime::empty, each product by
// runtime::mm_into (tuned: the output cache and the GEMM path of the shape class; plain:
// at::empty and at::mm_out).
//
// This header sits above runtime.h: the allocator and the GEMM chooser do not know each other.

#pragma once

#include <ATen/ATen.h>

#include "runtime.h"

#include <cstdint>
#include <vector>

namespace ctrlrnn {

// x W^T + b (into a cached block, as cached_linear below) with weight's N rows taken as
// `groups` consecutive blocks of N / groups, the output laid out group first:
// (groups, ..., N / groups), each group's block contiguous. The input
// projections of independent recurrences that read the same x (a METAGROSS unit's base RNNs)
// arrive so without the permuted copy of a (..., N) output: one GEMM per group, each into its
// slice of one cached output block.
inline at::Tensor cached_linear_grouped(const at::Tensor& x, const at::Tensor& weight,
                                        const c10::optional<at::Tensor>& bias,
                                        int64_t groups) {
  TORCH_CHECK(x.dim() >= 1 && weight.dim() == 2 && x.size(-1) == weight.size(1) &&
                  x.device().is_cpu() && weight.scalar_type() == x.scalar_type(),
              "cached_linear: expected x (..., D) and weight (N, D) of one dtype on CPU");
  TORCH_CHECK(groups >= 1 && weight.size(0) % groups == 0, "cached_linear_grouped: groups=",
              groups, " must divide the weight's ", weight.size(0), " rows");
  const int64_t n = weight.size(0) / groups;
  auto sizes = x.sizes().vec();
  sizes.back() = n;
  sizes.insert(sizes.begin(), groups);
  // rows counted explicitly: a -1 in view/reshape is ambiguous for empty tensors (N or D = 0)
  int64_t rows = 1;
  for (int64_t i = 0; i + 1 < x.dim(); ++i) rows *= x.size(i);
  auto out = runtime::empty(sizes, x.options());
  const auto x2 = x.reshape({rows, x.size(-1)});
  for (int64_t k = 0; k < groups; ++k) {
    auto out2 = out.select(0, k).view({rows, n});
    if (bias.has_value()) out2.copy_(bias->slice(0, k * n, (k + 1) * n).expand_as(out2));
    runtime::mm_into(out2, x2, weight.slice(0, k * n, (k + 1) * n).t(),
               /*accumulate=*/bias.has_value());
  }
  return out;
}

// x W^T + b, x (..., D), weight (N, D), bias (N,) or None -> (..., N), written into a cached
// block: the GEMM output of a layer's input projection is often the largest tensor of a step
// (a METAGROSS level's pre-activations, a QRNN's gates), above glibc's mmap threshold, so a fresh
// one would page-fault on every first write, every step. The GEMM takes the path gemm_paths.h
// chooses for its shape class.
// It is the one-group case of cached_linear_grouped: (1, ..., N) viewed as (..., N).
inline at::Tensor cached_linear(const at::Tensor& x, const at::Tensor& weight,
                                const c10::optional<at::Tensor>& bias) {
  return cached_linear_grouped(x, weight, bias, 1).squeeze(0);
}

// The input projections of R independent recurrences with their own weights, read by groups:
// x (G, rows, D) holds G inputs, weight (R, N, D) and bias (R, N) or None the recurrences'
// (R a multiple of G), and recurrence r reads x[r / (R / G)] (RCRN's two controllers and
// listener base of one direction read the same input, each direction its own). Returns
// (R, rows, N) in a cached output block, out[r] = x[r / (R / G)] W_r^T + b_r, each product on the
// path gemm_paths.h chooses for its shape class: the stack the cell kernels take (recurrences.h),
// without a copy of any input per reader.
inline at::Tensor cached_linear_stacked(const at::Tensor& x, const at::Tensor& weight,
                                        const c10::optional<at::Tensor>& bias) {
  TORCH_CHECK(x.dim() == 3 && weight.dim() == 3 && x.size(0) >= 1 &&
                  weight.size(0) % x.size(0) == 0 && x.size(2) == weight.size(2),
              "cached_linear_stacked: expected x (G, rows, D) and weight (R, N, D) with G "
              "dividing R, got x ", x.sizes(), " and weight ", weight.sizes());
  TORCH_CHECK(x.device().is_cpu() && weight.device().is_cpu() &&
                  weight.scalar_type() == x.scalar_type(),
              "cached_linear_stacked: x and weight must be CPU tensors of one dtype");
  const int64_t R = weight.size(0), rows = x.size(1), N = weight.size(1);
  const int64_t per = R / x.size(0);
  if (bias.has_value()) {
    TORCH_CHECK(bias->dim() == 2 && bias->size(0) == R && bias->size(1) == N &&
                    bias->scalar_type() == x.scalar_type(),
                "cached_linear_stacked: bias must be (R, N) = (", R, ", ", N, "), got ",
                bias->sizes());
  }
  auto out = runtime::empty({R, rows, N}, x.options());
  for (int64_t r = 0; r < R; ++r) {
    auto o = out.select(0, r);
    if (bias.has_value()) o.copy_(bias->select(0, r).expand_as(o));
    runtime::mm_into(o, x.select(0, r / per), weight.select(0, r).t(),
               /*accumulate=*/bias.has_value());
  }
  return out;
}

}  // namespace ctrlrnn
