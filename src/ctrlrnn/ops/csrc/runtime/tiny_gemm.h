// ctrlrnn runtime, tuned: a register-blocked GEMM for products of a few rows ("tiny").
//
// The per-step products of a small batch have a few rows. MKL picks its code path by CPU vendor;
// on AMD cores it runs these on its generic path, slower than a plain vectorised loop.
// gemm_paths.h offers this kernel as one candidate path and takes it only where it measures
// faster.

#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>

namespace ctrlrnn::gemm {

// The "tiny" path: out (M, N) (+)= A (M, K) @ B (K, N) for a few rows M, B contiguous, by
// blocks of output columns held in vector registers across the whole K loop (each B row read
// once per pair of output rows, each output element written once); a wide enough product called
// with threads to spare splits its columns over them.
namespace tiny {
constexpr int64_t kMaxRows = 8;
#if defined(__AVX512F__)
constexpr int64_t kCols = 64;  // four 16-float registers per output row
#else
constexpr int64_t kCols = 32;
#endif

// R output rows, columns [n0, n0 + width) (B's rows of stride N): W > 0 a constant width
// (kCols, unrolled and vectorised by the compiler), W == 0 the tail, of width w < kCols.
template <int R, int64_t W>
inline void block(const float* __restrict A, int64_t lda, const float* __restrict B, int64_t K,
                  int64_t N, float* __restrict out, int64_t ldo, int64_t n0, int64_t w,
                  bool accumulate) {
  const int64_t width = W > 0 ? W : w;
  float c[R][kCols];
  for (int r = 0; r < R; ++r) {
    for (int64_t j = 0; j < width; ++j) c[r][j] = accumulate ? out[r * ldo + n0 + j] : 0.0f;
  }
  for (int64_t k = 0; k < K; ++k) {
    const float* __restrict b = B + k * N + n0;
    for (int r = 0; r < R; ++r) {
      const float a = A[r * lda + k];
      for (int64_t j = 0; j < width; ++j) c[r][j] += a * b[j];
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int64_t j = 0; j < width; ++j) out[r * ldo + n0 + j] = c[r][j];
  }
}

// Columns [c0, c1) of R output rows.
template <int R>
inline void rows(const float* A, int64_t lda, const float* B, int64_t K, int64_t N, float* out,
                 int64_t ldo, int64_t c0, int64_t c1, bool accumulate) {
  int64_t n0 = c0;
  for (; n0 + kCols <= c1; n0 += kCols) {
    block<R, kCols>(A, lda, B, K, N, out, ldo, n0, kCols, accumulate);
  }
  if (n0 < c1) block<R, 0>(A, lda, B, K, N, out, ldo, n0, c1 - n0, accumulate);
}

// Columns [c0, c1) of out (M, N; row stride ldo) (+)= A (M, K; row stride lda) @ B (K, N,
// contiguous).
inline void gemm_columns(const float* A, int64_t lda, const float* B, int64_t M, int64_t K,
                         int64_t N, float* out, int64_t ldo, int64_t c0, int64_t c1,
                         bool accumulate) {
  int64_t m = 0;
  for (; m + 2 <= M; m += 2) {
    rows<2>(A + m * lda, lda, B, K, N, out + m * ldo, ldo, c0, c1, accumulate);
  }
  if (m < M) rows<1>(A + m * lda, lda, B, K, N, out + m * ldo, ldo, c0, c1, accumulate);
}

// At least this many multiply-adds before a product called outside a parallel region splits
// its columns over the threads: below, waking them costs more than the product.
constexpr int64_t kSplitMacs = int64_t(1) << 16;

// out (M, N; row stride ldo) (+)= A (M, K; row stride lda) @ B (K, N, contiguous). Called
// outside a parallel region with more than one thread and enough work (a batch of one or two
// rows of a wide layer), the column blocks are split over the threads, each thread taking the
// same columns every step, so its part of B stays in its own core's cache.
inline void gemm(const float* A, int64_t lda, const float* B, int64_t M, int64_t K, int64_t N,
                 float* out, int64_t ldo, bool accumulate) {
  const int64_t blocks = (N + kCols - 1) / kCols;
  if (blocks >= 2 && M * K * N >= kSplitMacs && !at::in_parallel_region() &&
      at::get_num_threads() > 1) {
    at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
      gemm_columns(A, lda, B, M, K, N, out, ldo, b0 * kCols, std::min(N, b1 * kCols),
                   accumulate);
    });
    return;
  }
  gemm_columns(A, lda, B, M, K, N, out, ldo, 0, N, accumulate);
}
}  // namespace tiny

}  // namespace ctrlrnn::gemm
