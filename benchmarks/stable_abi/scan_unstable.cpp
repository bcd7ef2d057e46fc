// The same loop as scan_stable.cpp, on ATen and registered with TORCH_LIBRARY (as ctrlrnn's
// kernels are): the other side of the stable-ABI trial of docs/install.md.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

std::vector<at::Tensor> scan_forward(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() == 3 && a.is_contiguous() && b.is_contiguous(),
              "a, b: contiguous (B, T, C)");
  TORCH_CHECK(a.scalar_type() == at::kFloat, "float32 only");
  const int64_t B = a.size(0), T = a.size(1), C = a.size(2);
  at::Tensor out = at::empty_like(a);
  at::Tensor last = at::empty({B, C}, a.options());
  const float* pa = a.const_data_ptr<float>();
  const float* pb = b.const_data_ptr<float>();
  float* po = out.mutable_data_ptr<float>();
  float* pl = last.mutable_data_ptr<float>();
  const int64_t kBlock = 256, nblk = (C + kBlock - 1) / kBlock;
  at::parallel_for(0, B * nblk, 1, [&](int64_t begin, int64_t end) {
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

TORCH_LIBRARY(ctrlrnn_unstable_trial, m) {
  m.def("scan_forward(Tensor a, Tensor b) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(ctrlrnn_unstable_trial, CPU, m) {
  m.impl("scan_forward", &scan_forward);
}
