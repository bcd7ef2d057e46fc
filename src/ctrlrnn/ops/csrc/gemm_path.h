// ctrlrnn: the GEMM path, chosen per shape by measurement.
//
// torch's CPU build carries two GEMM libraries: its BLAS (MKL on x86 builds: `at::mm`, and the
// packed `cblas_sgemm_compute` of cells_common.h) and oneDNN, which torch uses for its own
// nn.LSTM and for reduced-precision matmuls. Which one is faster for float32 depends on the CPU
// generation and the shape (oneDNN's JIT kernels win on large and mid-sized products on recent
// AVX-512 cores; BLAS wins on tiny products, where oneDNN's per-call set-up dominates). So the
// path is not assumed: the first GEMM of a shape class times both paths on scratch operands of
// that class's layout and remembers the faster one. ctrlrnn/ops/gemm_path.py persists the table
// beside the kernel build (keyed by the CPU, torch version and build) and forces a path with
// CTRLRNN_GEMM=blas|onednn.
//
// oneDNN is reached through `at::native::mkldnn_matmul`, which libtorch_cpu exports (the oneDNN
// C API itself is not exported). It is declared weak: where torch lacks it (builds without
// oneDNN) or refuses float32 (torch versions whose mkldnn_matmul takes bf16/fp16 only), the
// probe below fails once and every GEMM takes the BLAS path.
//
// A third path is BLAS on the calling thread alone ("blas1"): outside a parallel region torch lets
// MKL thread every product, and on tiny products (the per-step GEMMs of small recurrences: a
// few rows of a narrow layer) waking the other threads can cost several times the product
// itself. It is offered where the caller has more than one thread and torch exports MKL's
// per-thread setting (MKL_Set_Num_Threads_Local), and taken only where it measures faster.
//
// A fourth path, for the per-step products of a few rows only ("tiny": M <= tiny::kMaxRows), is
// ctrlrnn's own register-blocked kernel (tiny::gemm below), on the calling thread (a wide product
// with threads to spare splits its columns over them). MKL picks its
// code path by CPU vendor: on AMD cores it takes its generic one ("def") for these products, which
// there runs several times slower than a plain vectorised loop. It is a candidate like the others,
// and taken only where it measures faster.
//
// Only float32 has a choice: bfloat16 / float16 `at::mm` already goes to oneDNN inside torch,
// float64 has BLAS only.
//
// One table per process: like OutputPool::instance(), the function-local static of table() is a
// unique symbol, shared by every extension that includes this header.

#pragma once

#include <ATen/ATen.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace at::native {
TORCH_API void mkldnn_matmul(const at::Tensor& mat1, const at::Tensor& mat2,
                             const at::Tensor& result, float beta, float alpha)
    __attribute__((weak));
}  // namespace at::native

extern "C" {
// MKL's thread count for the calling thread only (0: back to the global setting); returns the
// previous local value. Weak: absent where torch's BLAS is not MKL.
int MKL_Set_Num_Threads_Local(int nt) __attribute__((weak));
}

// MKL's packed GEMM, which the cells' per-step products use for float32 (cells_common.h).
// Weak: absent where torch's BLAS is not MKL.
extern "C" {
size_t cblas_sgemm_pack_get_size(int identifier, int m, int n, int k) __attribute__((weak));
void cblas_sgemm_pack(int layout, int identifier, int trans, int m, int n, int k, float alpha,
                      const float* src, int ld, float* dest) __attribute__((weak));
void cblas_sgemm_compute(int layout, int transa, int transb, int m, int n, int k, const float* a,
                         int lda, const float* b, int ldb, float beta, float* c, int ldc)
    __attribute__((weak));
}

namespace ctrlrnn::mkl {

// CBLAS constants of the packed calls.
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112, kPacked = 151, kBMatrix = 162;

// Whether MKL's packed GEMM is reachable (torch's BLAS is MKL and exports it).
inline bool available() {
  return cblas_sgemm_pack_get_size != nullptr && cblas_sgemm_pack != nullptr &&
         cblas_sgemm_compute != nullptr;
}

// Whether a dimension fits the int the CBLAS interface takes.
inline bool fits_int(int64_t v) { return v >= 0 && v <= std::numeric_limits<int>::max(); }

}  // namespace ctrlrnn::mkl

namespace ctrlrnn::gemm {

enum Path : int { kBlas = 0, kOneDnn = 1, kBlasOne = 2, kTiny = 3 };
constexpr int kPaths = 4;

inline const char* path_name(int p) {
  return p == kOneDnn ? "onednn" : p == kBlasOne ? "blas1" : p == kTiny ? "tiny" : "blas";
}

inline int path_code(const std::string& name) {
  return name == "onednn" ? kOneDnn : name == "blas1" ? kBlasOne : name == "tiny" ? kTiny : kBlas;
}

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

// Whether the BLAS path can be held to the calling thread (MKL_Set_Num_Threads_Local exists).
inline bool one_thread_usable() { return MKL_Set_Num_Threads_Local != nullptr; }

// MKL on the calling thread alone while it lives (the kBlasOne path).
class OneThread {
 public:
  OneThread() : prev_(one_thread_usable() ? MKL_Set_Num_Threads_Local(1) : -1) {}
  ~OneThread() {
    if (prev_ >= 0) MKL_Set_Num_Threads_Local(prev_);
  }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int prev_;
};

// Runs f() as `path` runs a BLAS product: on one thread for kBlasOne, else as torch set MKL.
template <typename F>
inline void blas_as(int path, const F& f) {
  if (path == kBlasOne) {
    const OneThread one;
    f();
  } else {
    f();
  }
}

// -1: choose by measurement; kBlas / kOneDnn / kBlasOne: forced (CTRLRNN_GEMM, set from Python).
inline std::atomic<int>& forced() {
  static std::atomic<int> f{-1};
  return f;
}

// out = a @ b (accumulate: out += a @ b) on oneDNN. a and b contiguous or exact transposes.
inline void onednn_into(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                        bool accumulate) {
  at::native::mkldnn_matmul(a, b, out, accumulate ? 1.0f : 0.0f, 1.0f);
}

// Whether this torch's mkldnn_matmul exists and computes a float32 product exactly (probed once).
inline bool onednn_usable() {
  static const bool ok = [] {
    if (&at::native::mkldnn_matmul == nullptr) return false;
    try {
      const auto opts = at::TensorOptions().dtype(at::kFloat);
      const at::Tensor a = at::arange(6, opts).view({2, 3});
      const at::Tensor b = at::arange(12, opts).view({3, 4}).sub(5.0);
      at::Tensor o = at::full({2, 4}, 7.0, opts);
      onednn_into(o, a, b, /*accumulate=*/true);
      return at::equal(o, at::mm(a, b).add(7.0));
    } catch (const std::exception&) {
      return false;
    }
  }();
  return ok;
}

struct Table {
  std::mutex mu;
  std::map<std::string, int> choice;       // shape class -> path
  std::map<std::string, double> advantage;  // shape class -> blas time / oneDNN time
  std::map<std::string, std::pair<int, int64_t>> uses;  // shape class -> (path, calls)
};

inline Table& table() {
  static Table t;
  return t;
}

// Shape classes: each dimension rounded up to a power of two (below 8: exact).
inline int64_t bucket(int64_t v) {
  if (v < 8) return v;
  int64_t p = 8;
  while (p < v) p <<= 1;
  return p;
}

// 'n' contiguous, 't' an exact transpose, 's' anything else (copied by oneDNN's wrapper).
inline char layout(const at::Tensor& t) {
  if (t.is_contiguous()) return 'n';
  if (t.dim() == 2 && t.t().is_contiguous()) return 't';
  return 's';
}

inline int threads_here() { return at::in_parallel_region() ? 1 : at::get_num_threads(); }

inline std::string class_key(const char* kind, int64_t M, int64_t K, int64_t N, char la, char lb,
                             int threads) {
  return std::string(kind) + " M" + std::to_string(bucket(M)) + " K" + std::to_string(bucket(K)) +
         " N" + std::to_string(bucket(N)) + " " + la + lb + " t" + std::to_string(threads);
}

// Seconds per call of run(path), the best of three rounds of at least ~0.5 ms each, the two
// paths interleaved so that a burst of load hits both.
inline double seconds_per_call(const std::function<void(int)>& run, int path, int reps) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) run(path);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

// Times the candidate paths (oneDNN where usable; BLAS on one thread where the caller has more
// than one and MKL allows it; the tiny kernel where the caller offers it) against BLAS as torch
// threads it, and returns the fastest: another path only where it is clearly faster (3%), since
// on a tie BLAS has the steadier per-call cost.
inline int measure(const std::function<void(int)>& run, bool onednn, bool one_thread, bool tiny,
                   double* advantage) {
  std::vector<int> paths{kBlas};
  if (onednn) paths.push_back(kOneDnn);
  if (one_thread) paths.push_back(kBlasOne);
  if (tiny) paths.push_back(kTiny);
  for (int p : paths) run(p);
  int reps = 1;
  for (;;) {  // calibrate: enough calls for ~0.5 ms on the BLAS path
    const double s = seconds_per_call(run, kBlas, reps);
    if (s * reps >= 5e-4 || reps >= 256) break;
    reps *= 2;
  }
  double best[kPaths] = {1e30, 1e30, 1e30, 1e30};
  for (int round = 0; round < 3; ++round) {
    for (int p : paths) best[p] = std::min(best[p], seconds_per_call(run, p, reps));
  }
  *advantage = onednn ? best[kBlas] / best[kOneDnn] : 0.0;
  int choice = kBlas;
  for (int p : paths) {
    if (best[p] * 1.03 < best[choice]) choice = p;
  }
  return choice;
}

// The path for shape class `key`. The first time the class is seen (in this process or the
// persisted table), `prepare()` returns a function performing one representative GEMM of the
// class on scratch operands, on the path it is given, and the candidate paths are timed. `tiny`:
// whether the caller can run the class on the tiny kernel (kTiny).
inline int choose(const std::string& key,
                  const std::function<std::function<void(int)>()>& prepare, bool tiny = false) {
  const int f = forced().load();
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  const auto note = [&](int p) {  // which path each class took since gemm_uses_clear()
    auto& use = t.uses[key];
    use.first = p;
    use.second += 1;
    return p;
  };
  if (f == kBlas) return note(kBlas);
  if (f == kOneDnn && onednn_usable()) return note(kOneDnn);
  if (f == kBlasOne) return note(one_thread_usable() ? kBlasOne : kBlas);
  if (f == kTiny) return note(tiny ? kTiny : kBlas);
  const bool one_thread = one_thread_usable() && threads_here() > 1;
  const auto it = t.choice.find(key);
  if (it != t.choice.end()) {
    // a persisted choice this process cannot take falls back to BLAS
    const int p = it->second;
    const bool cannot = (p == kOneDnn && !onednn_usable()) || (p == kBlasOne && !one_thread) ||
                        (p == kTiny && !tiny);
    return note(cannot ? kBlas : p);
  }
  if (!onednn_usable() && !one_thread && !tiny) return note(kBlas);
  double adv = 0.0;
  const int p = measure(prepare(), onednn_usable(), one_thread, tiny, &adv);
  t.choice[key] = p;
  t.advantage[key] = adv;
  return note(p);
}

// A scratch tensor of sizes `sizes`, filled with a constant. Not random: drawing from torch's
// generator here would shift the random stream of the caller's run (its dropout masks) by
// whether this process had measured the class yet, and a GEMM's time does not depend on the
// values of normal floats.
inline at::Tensor scratch(at::IntArrayRef sizes, const at::TensorOptions& opts) {
  return at::full(sizes, 0.5, opts);
}

// A scratch tensor of t's sizes and layout (scratch()).
inline at::Tensor scratch_like(const at::Tensor& t) {
  const auto opts = t.options();
  if (layout(t) == 't') return scratch({t.size(1), t.size(0)}, opts).t();
  return scratch(t.sizes(), opts);
}

inline void blas_into(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                      bool accumulate) {
  at::Tensor o = out;
  if (accumulate) {
    o.addmm_(a, b);
  } else {
    at::mm_out(o, a, b);
  }
}

// out (M, N) = a (M, K) @ b (K, N) (accumulate: +=), on the path chosen for this shape class.
// out must have unit inner stride.
inline void into(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                 bool accumulate) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  if (a.scalar_type() != at::kFloat || M == 0 || K == 0 || N == 0 || !out.is_contiguous()) {
    blas_into(out, a, b, accumulate);
    return;
  }
  const char la = layout(a), lb = layout(b);
  const std::string key = class_key("bulk", M, K, N, la, lb, threads_here());
  const int p = choose(key, [&] {
    return std::function<void(int)>(
        [sa = scratch_like(a), sb = scratch_like(b),
         so = at::empty(out.sizes(), out.options())](int path) {
          if (path == kOneDnn) {
            onednn_into(so, sa, sb, false);
          } else {
            blas_as(path, [&] { blas_into(so, sa, sb, false); });
          }
        });
  });
  if (p == kOneDnn) {
    onednn_into(out, a, b, accumulate);
  } else {
    blas_as(p, [&] { blas_into(out, a, b, accumulate); });
  }
}

// a (M, K) @ b (K, N) into a new contiguous tensor.
inline at::Tensor mm(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor out = at::empty({a.size(0), b.size(1)}, a.options());
  into(out, a, b, false);
  return out;
}

}  // namespace ctrlrnn::gemm
