// The stable-ABI trial of docs/install.md: the linear scan's forward (h_t = a_t h_{t-1} + b_t,
// float32, (B, T, C) contiguous, no lengths, no h0), built against the LibTorch stable ABI
// (torch/csrc/stable, torch >= 2.10) and registered with STABLE_TORCH_LIBRARY. Not part of the
// package: benchmarks/stable_abi/run.py compiles it and compares it with the same loop
// registered with TORCH_LIBRARY (scan_unstable.cpp) and with ctrlrnn's own kernel.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

using torch::stable::Tensor;

std::vector<Tensor> scan_forward(Tensor a, Tensor b) {
  STD_TORCH_CHECK(a.dim() == 3 && a.is_contiguous() && b.is_contiguous(),
                  "a, b: contiguous (B, T, C)");
  STD_TORCH_CHECK(a.scalar_type() == torch::headeronly::ScalarType::Float, "float32 only");
  const int64_t B = a.size(0), T = a.size(1), C = a.size(2);
  Tensor out = torch::stable::empty_like(a);
  Tensor last = torch::stable::new_empty(a, {B, C});
  const float* pa = a.const_data_ptr<float>();
  const float* pb = b.const_data_ptr<float>();
  float* po = out.mutable_data_ptr<float>();
  float* pl = last.mutable_data_ptr<float>();
  const int64_t kBlock = 256, nblk = (C + kBlock - 1) / kBlock;
  torch::stable::parallel_for(0, B * nblk, 1, [&](int64_t begin, int64_t end) {
    float h[kBlock];
    for (int64_t w = begin; w < end; ++w) {
      const int64_t bi = w / nblk, c0 = (w % nblk) * kBlock, n = std::min(kBlock, C - c0);
      std::fill(h, h + n, 0.0f);
      for (int64_t t = 0; t < T; ++t) {
        const int64_t off = (bi * T + t) * C + c0;
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) po[off + c] = h[c] = pa[off + c] * h[c] + pb[off + c];
      }
      std::copy(h, h + n, pl + bi * C + c0);
    }
  });
  return {out, last};
}

}  // namespace

STABLE_TORCH_LIBRARY(ctrlrnn_stable_trial, m) {
  m.def("scan_forward(Tensor a, Tensor b) -> Tensor[]");
}

STABLE_TORCH_LIBRARY_IMPL(ctrlrnn_stable_trial, CPU, m) {
  m.impl("scan_forward", TORCH_BOX(&scan_forward));
}
