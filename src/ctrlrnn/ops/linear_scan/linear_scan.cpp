// The diagonal linear scan h_t = a_t * h_{t-1} + b_t on CPU, forward and backward.
//
// Layout: batch-first contiguous (B, T, C). Work is split over (batch, block of channels) with
// at::parallel_for. Each work item walks time with its state in registers, in the accumulation
// type (fp32 for fp16/bf16/fp32 inputs, fp64 for fp64). Backward is one reverse pass:
// d = g_t + carry; db_t = d; da_t = d * h_{t-1}; carry = d * a_t; carry at the end is dh_0.
// With lengths, steps t >= length[b] keep the state and output zeros. `reverse` walks each
// sequence from its own last valid step down to 0.

#include <ATen/ATen.h>
#include <torch/library.h>

#include "kernel_common.h"
#include "runtime/runtime.h"

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace {

using namespace ctrlrnn::kernels;  // NOLINT: block_size, grain_for, lengths, ...
using namespace ctrlrnn::runtime;  // NOLINT: store_row, stream_fence, use_streaming_stores

// ----------------------------------------------------------------------------------------------
// linear scan

// One forward step over n channels: h = a * h + b; out = h. With STREAM (float only) the output
// row is written with streaming stores.
template <typename scalar_t, typename acc_t, bool STREAM>
inline void forward_row(const scalar_t* __restrict__ at_, const scalar_t* __restrict__ bt,
                        acc_t* __restrict__ h, scalar_t* __restrict__ ot, int64_t n) {
  int64_t c = 0;
#if defined(__AVX__)
  if constexpr (STREAM && std::is_same_v<scalar_t, float>) {
    for (const int64_t head = peel_to_32(ot, n); c < head; ++c) {
      h[c] = at_[c] * h[c] + bt[c];
      ot[c] = h[c];
    }
    for (; c + 8 <= n; c += 8) {
#if defined(__FMA__)
      const __m256 v = _mm256_fmadd_ps(_mm256_loadu_ps(at_ + c), _mm256_loadu_ps(h + c),
                                       _mm256_loadu_ps(bt + c));
#else
      const __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(at_ + c),
                                                   _mm256_loadu_ps(h + c)),
                                     _mm256_loadu_ps(bt + c));
#endif
      _mm256_storeu_ps(h + c, v);
      _mm256_stream_ps(ot + c, v);
    }
  }
#endif
  for (; c < n; ++c) {
    h[c] = acc_t(at_[c]) * h[c] + acc_t(bt[c]);
    ot[c] = scalar_t(h[c]);
  }
}

// One reverse step over n channels (the module comment's recurrence):
// d = g + carry; db = d; da = d * h_prev; carry = d * a. With STREAM (float only) da and db are
// written with streaming stores.
template <typename scalar_t, typename acc_t, bool STREAM>
inline void backward_row(const scalar_t* __restrict__ gt, const scalar_t* __restrict__ at_,
                         const scalar_t* __restrict__ prev, acc_t* __restrict__ carry,
                         scalar_t* __restrict__ dat, scalar_t* __restrict__ dbt, int64_t n) {
  int64_t c = 0;
#if defined(__AVX__)
  if constexpr (STREAM && std::is_same_v<scalar_t, float>) {
    const int64_t head = peel_to_32(dat, n);
    if (head == peel_to_32(dbt, n)) {  // both rows reach alignment together
      for (; c < head; ++c) {
        const float d = gt[c] + carry[c];
        dbt[c] = d;
        dat[c] = d * prev[c];
        carry[c] = d * at_[c];
      }
      for (; c + 8 <= n; c += 8) {
        const __m256 d = _mm256_add_ps(_mm256_loadu_ps(gt + c), _mm256_loadu_ps(carry + c));
        _mm256_stream_ps(dbt + c, d);
        _mm256_stream_ps(dat + c, _mm256_mul_ps(d, _mm256_loadu_ps(prev + c)));
        _mm256_storeu_ps(carry + c, _mm256_mul_ps(d, _mm256_loadu_ps(at_ + c)));
      }
    }
  }
#endif
  for (; c < n; ++c) {
    const acc_t d = acc_t(gt[c]) + carry[c];
    dbt[c] = scalar_t(d);
    dat[c] = scalar_t(d * acc_t(prev[c]));
    carry[c] = d * acc_t(at_[c]);
  }
}

template <typename scalar_t, bool STREAM>
void scan_forward_kernel(const scalar_t* a, const scalar_t* b, const scalar_t* h0,
                         const int64_t* lengths, scalar_t* out, scalar_t* hlast, int64_t B,
                         int64_t T, int64_t C, bool reverse) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t kBlock = block_size(B, C, T);
  const int64_t nblk = (C + kBlock - 1) / kBlock;
  parallel_recurrence(0, B * nblk, grain_for(T, kBlock), [&](int64_t begin, int64_t end) {
    std::vector<acc_t> h_buf(kBlock);
    acc_t* h = h_buf.data();
    for (int64_t w = begin; w < end; ++w) {
      const int64_t bi = w / nblk, c0 = (w % nblk) * kBlock;
      const int64_t n = std::min(kBlock, C - c0);
      const int64_t L = length_of(lengths, bi, T);
      for (int64_t c = 0; c < n; ++c) h[c] = h0 ? acc_t(h0[bi * C + c0 + c]) : acc_t(0);
      const int64_t base = bi * T * C + c0;
      for (int64_t s = 0; s < L; ++s) {
        const int64_t t = reverse ? L - 1 - s : s;
        const scalar_t* at_ = a + base + t * C;
        const scalar_t* bt = b + base + t * C;
        scalar_t* ot = out + base + t * C;
        forward_row<scalar_t, acc_t, STREAM>(at_, bt, h, ot, n);
      }
      for (int64_t t = L; t < T; ++t) {
        scalar_t* ot = out + base + t * C;
        for (int64_t c = 0; c < n; ++c) ot[c] = scalar_t(0);
      }
      for (int64_t c = 0; c < n; ++c) hlast[bi * C + c0 + c] = scalar_t(h[c]);
    }
    stream_fence(STREAM);
  });
}

template <typename scalar_t, bool STREAM>
void scan_backward_kernel(const scalar_t* g, const scalar_t* glast, const scalar_t* a,
                          const scalar_t* out, const scalar_t* h0, const int64_t* lengths,
                          scalar_t* da, scalar_t* db, scalar_t* dh0, int64_t B, int64_t T,
                          int64_t C, bool reverse) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t kBlock = block_size(B, C, T);
  const int64_t nblk = (C + kBlock - 1) / kBlock;
  parallel_recurrence(0, B * nblk, grain_for(T, kBlock), [&](int64_t begin, int64_t end) {
    std::vector<acc_t> carry_buf(kBlock);
    acc_t* __restrict__ carry = carry_buf.data();
    std::vector<scalar_t> zero_in(kBlock, scalar_t(0));  // stands in for absent inputs
    for (int64_t w = begin; w < end; ++w) {
      const int64_t bi = w / nblk, c0 = (w % nblk) * kBlock;
      const int64_t n = std::min(kBlock, C - c0);
      const int64_t L = length_of(lengths, bi, T);
      const int64_t base = bi * T * C + c0;
      for (int64_t c = 0; c < n; ++c) carry[c] = glast ? acc_t(glast[bi * C + c0 + c]) : acc_t(0);
      for (int64_t s = L - 1; s >= 0; --s) {
        const int64_t t = reverse ? L - 1 - s : s;
        // h_{t-1} in processing order (h0, or zeros, before the first step)
        const scalar_t* __restrict__ prev =
            s > 0 ? out + base + (reverse ? t + 1 : t - 1) * C
                  : (h0 ? h0 + bi * C + c0 : zero_in.data());
        const scalar_t* __restrict__ gt = g ? g + base + t * C : zero_in.data();
        const scalar_t* __restrict__ at_ = a + base + t * C;
        scalar_t* __restrict__ dat = da + base + t * C;
        scalar_t* __restrict__ dbt = db + base + t * C;
        backward_row<scalar_t, acc_t, STREAM>(gt, at_, prev, carry, dat, dbt, n);
      }
      for (int64_t t = L; t < T; ++t) {
        for (int64_t c = 0; c < n; ++c) {
          da[base + t * C + c] = scalar_t(0);
          db[base + t * C + c] = scalar_t(0);
        }
      }
      for (int64_t c = 0; c < n; ++c) dh0[bi * C + c0 + c] = scalar_t(carry[c]);
    }
    stream_fence(STREAM);
  });
}


std::vector<at::Tensor> linear_scan_forward(const at::Tensor& a, const at::Tensor& b,
                                            const c10::optional<at::Tensor>& h0,
                                            const c10::optional<at::Tensor>& lengths,
                                            bool reverse) {
  check_btc(a, "a");
  check_btc(b, "b");
  TORCH_CHECK(a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type(),
              "a and b must have the same shape and dtype");
  const int64_t B = a.size(0), T = a.size(1), C = a.size(2);
  if (h0.has_value()) {
    TORCH_CHECK(h0->is_contiguous() && h0->numel() == B * C &&
                    h0->scalar_type() == a.scalar_type(),
                "h0 must be contiguous (B, C) with the dtype of a");
  }
  const int64_t* lp = lengths_ptr(lengths, B, T);
  auto out = ctrlrnn::runtime::empty_like(a);
  auto hlast = at::empty({B, C}, a.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a.scalar_type(), "linear_scan", [&] {
    auto run = [&](auto stream) {
      scan_forward_kernel<scalar_t, decltype(stream)::value>(
          a.data_ptr<scalar_t>(), b.data_ptr<scalar_t>(),
          h0.has_value() ? h0->data_ptr<scalar_t>() : nullptr, lp, out.data_ptr<scalar_t>(),
          hlast.data_ptr<scalar_t>(), B, T, C, reverse);
    };
    if (use_streaming_stores(out.nbytes())) {
      run(std::true_type{});
    } else {
      run(std::false_type{});
    }
  });
  return {out, hlast};
}

std::vector<at::Tensor> linear_scan_backward(const c10::optional<at::Tensor>& grad_out,
                                             const c10::optional<at::Tensor>& grad_last,
                                             const at::Tensor& a, const at::Tensor& out,
                                             const c10::optional<at::Tensor>& h0,
                                             const c10::optional<at::Tensor>& lengths,
                                             bool reverse) {
  check_btc(a, "a");
  check_btc(out, "out");
  const int64_t B = a.size(0), T = a.size(1), C = a.size(2);
  if (grad_out.has_value()) check_btc(*grad_out, "grad_out");
  if (grad_last.has_value()) {
    TORCH_CHECK(grad_last->is_contiguous() && grad_last->numel() == B * C,
                "grad_last must be contiguous (B, C)");
  }
  const int64_t* lp = lengths_ptr(lengths, B, T);
  auto da = ctrlrnn::runtime::empty_like(a);
  auto db = ctrlrnn::runtime::empty_like(a);
  auto dh0 = at::empty({B, C}, a.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a.scalar_type(), "linear_scan_bwd",
                                  [&] {
    auto run = [&](auto stream) {
      scan_backward_kernel<scalar_t, decltype(stream)::value>(
          grad_out.has_value() ? grad_out->data_ptr<scalar_t>() : nullptr,
          grad_last.has_value() ? grad_last->data_ptr<scalar_t>() : nullptr,
          a.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(),
          h0.has_value() ? h0->data_ptr<scalar_t>() : nullptr, lp, da.data_ptr<scalar_t>(),
          db.data_ptr<scalar_t>(), dh0.data_ptr<scalar_t>(), B, T, C, reverse);
    };
    if (use_streaming_stores(da.nbytes() + db.nbytes())) {
      run(std::true_type{});
    } else {
      run(std::false_type{});
    }
  });
  return {da, db, dh0};
}

}  // namespace

namespace ctrlrnn {

void register_linear_scan(torch::Library& m) {
  m.def("linear_scan_forward(Tensor a, Tensor b, Tensor? h0, Tensor? lengths, bool reverse) "
        "-> Tensor[]", &linear_scan_forward);
  m.def("linear_scan_backward(Tensor? grad_out, Tensor? grad_last, Tensor a, Tensor out, "
        "Tensor? h0, Tensor? lengths, bool reverse) -> Tensor[]", &linear_scan_backward);
}

}  // namespace ctrlrnn
