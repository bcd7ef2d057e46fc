// The QRNN convolution's windows (QRNN paper eq 1) as one copy, and their adjoint.
//
// shifted_windows:         out[b, t, j*D:(j+1)*D] = x[b, t + offsets[j], :]  (zeros where
//                          t + offsets[j] is outside [0, S)), for t in [0, steps)
// shifted_windows_adjoint: dx[b, s, :] = sum over j with 0 <= s - offsets[j] < steps of
//                          g[b, s - offsets[j], j*D:(j+1)*D]
//
// The convolution of eq 1 is then one GEMM over the windows (B*steps, k*D) x (k*D, G*H). Built
// from torch ops (a pad, then a concatenation of k slices) the windows cost two passes over the
// output forward, and their gradient k zero-filled slices and k-1 additions backward; these
// kernels write each output once, into an output of the runtime (runtime::empty). Layout:
// contiguous (B, S, D) and (B, steps, k*D).

#include <ATen/ATen.h>
#include <torch/library.h>

#include "kernel_common.h"
#include "runtime/runtime.h"

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

using ctrlrnn::kernels::grain_for;

void check_offsets(const std::vector<int64_t>& offsets) {
  TORCH_CHECK(!offsets.empty(), "shifted_windows: offsets must name at least one tap");
}

template <typename scalar_t>
void windows_kernel(const scalar_t* x, const std::vector<int64_t>& offsets, scalar_t* out,
                    int64_t B, int64_t S, int64_t steps, int64_t D) {
  const int64_t k = static_cast<int64_t>(offsets.size());
  const size_t row_bytes = static_cast<size_t>(D) * sizeof(scalar_t);
  at::parallel_for(0, B * steps, grain_for(1, k * D), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / steps, t = r % steps;
      scalar_t* o = out + r * k * D;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t s = t + offsets[j];
        if (s >= 0 && s < S) {
          std::memcpy(o + j * D, x + (b * S + s) * D, row_bytes);
        } else {
          std::memset(o + j * D, 0, row_bytes);  // all-zero bits: +0 in every floating type
        }
      }
    }
  });
}

template <typename scalar_t>
void adjoint_kernel(const scalar_t* g, const std::vector<int64_t>& offsets, scalar_t* dx,
                    int64_t B, int64_t S, int64_t steps, int64_t D) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t k = static_cast<int64_t>(offsets.size());
  at::parallel_for(0, B * S, grain_for(1, k * D), [&](int64_t begin, int64_t end) {
    std::vector<acc_t> acc(static_cast<size_t>(D));
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / S, s = r % S;
      std::fill(acc.begin(), acc.end(), acc_t(0));
      for (int64_t j = 0; j < k; ++j) {
        const int64_t t = s - offsets[j];
        if (t < 0 || t >= steps) continue;
        const scalar_t* __restrict__ gj = g + ((b * steps + t) * k + j) * D;
        acc_t* __restrict__ a = acc.data();
        for (int64_t d = 0; d < D; ++d) a[d] += acc_t(gj[d]);
      }
      scalar_t* __restrict__ o = dx + r * D;
      const acc_t* __restrict__ a = acc.data();
      for (int64_t d = 0; d < D; ++d) o[d] = scalar_t(a[d]);
    }
  });
}

at::Tensor shifted_windows(const at::Tensor& x, const std::vector<int64_t>& offsets,
                           int64_t steps) {
  TORCH_CHECK(x.dim() == 3 && x.is_contiguous() && x.device().is_cpu(),
              "shifted_windows: x must be a contiguous CPU tensor of shape (B, S, D)");
  TORCH_CHECK(steps >= 0, "shifted_windows: steps must be >= 0, got ", steps);
  check_offsets(offsets);
  const int64_t B = x.size(0), S = x.size(1), D = x.size(2);
  const int64_t k = static_cast<int64_t>(offsets.size());
  auto out = ctrlrnn::runtime::empty({B, steps, k * D}, x.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "shifted_windows",
                                  [&] {
    windows_kernel<scalar_t>(x.data_ptr<scalar_t>(), offsets, out.data_ptr<scalar_t>(), B, S,
                             steps, D);
  });
  return out;
}

at::Tensor shifted_windows_adjoint(const at::Tensor& g, const std::vector<int64_t>& offsets,
                                   int64_t length) {
  check_offsets(offsets);
  const int64_t k = static_cast<int64_t>(offsets.size());
  TORCH_CHECK(g.dim() == 3 && g.is_contiguous() && g.device().is_cpu() && g.size(2) % k == 0,
              "shifted_windows_adjoint: g must be a contiguous CPU tensor of shape "
              "(B, steps, k*D) for k = ", k, " offsets");
  TORCH_CHECK(length >= 0, "shifted_windows_adjoint: length must be >= 0, got ", length);
  const int64_t B = g.size(0), steps = g.size(1), D = g.size(2) / k;
  auto dx = ctrlrnn::runtime::empty({B, length, D}, g.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, g.scalar_type(),
                                  "shifted_windows_adjoint", [&] {
    adjoint_kernel<scalar_t>(g.data_ptr<scalar_t>(), offsets, dx.data_ptr<scalar_t>(), B,
                             length, steps, D);
  });
  return dx;
}

}  // namespace

namespace ctrlrnn {
void register_conv_windows(torch::Library& m) {
  // the QRNN convolution's windows (eq 1) in one copy
  m.def("shifted_windows(Tensor x, int[] offsets, int steps) -> Tensor", &shifted_windows);
  // the gradient of shifted_windows with respect to its input
  m.def("shifted_windows_adjoint(Tensor g, int[] offsets, int length) -> Tensor",
        &shifted_windows_adjoint);
}
}  // namespace ctrlrnn
