// The arithmetic the fused cell steps share (cell_steps.cpp): matrix-vector products on weights
// as they are stored, a per-thread scratch buffer, the activations over gate blocks, and the
// operand checks. Included by cell_steps.cpp and, for their backward, cell_step_grads.cpp.

#pragma once

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>

#include "runtime/runtime.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace ctrlrnn::cell_steps {

// The accumulator lanes of a dot product: independent sums the compiler keeps in vector
// registers, so no reassociation is needed to vectorise the loop.
constexpr int64_t kLanes = 16;

// out[n] (+)= sum_k w[n * ldw + k] * x[k] for n < N, one row at a time: the remainder rows of
// gemv below, and its whole work where the compiler has no vector shuffles.
template <typename T>
inline void gemv_rows(const T* __restrict w, int64_t ldw, const T* __restrict x, int64_t N,
                      int64_t K, T* __restrict out, bool accumulate) {
  const int64_t main = K - K % kLanes;
  for (int64_t n = 0; n < N; ++n) {
    const T* __restrict row = w + n * ldw;
    T acc[kLanes] = {};
    for (int64_t k = 0; k < main; k += kLanes) {
      for (int64_t j = 0; j < kLanes; ++j) acc[j] += row[k + j] * x[k + j];
    }
    T sum = 0;
    for (int64_t j = 0; j < kLanes; ++j) sum += acc[j];
    for (int64_t k = main; k < K; ++k) sum += row[k] * x[k];
    out[n] = accumulate ? out[n] + sum : sum;
  }
}

#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
#define CTRLRNN_ROW_BLOCKS 1
// A block of L rows at once, L the lanes of a 32-byte vector: row i's products accumulate in
// its own vector (L independent chains), and one transposing reduction sums all L vectors
// across their lanes at once, lane r of the result holding row r's sum. Row by row, each row's
// sum would end in a reduction of its own. `order` feeds the rows in the bit-reversed order
// that the halving shuffles undo.
template <typename T>
struct RowBlock;

template <>
struct RowBlock<float> {
  typedef float V __attribute__((vector_size(32)));
  typedef float Unaligned __attribute__((vector_size(32), aligned(4)));
  static constexpr int L = 8;
  static constexpr int order[L] = {0, 4, 2, 6, 1, 5, 3, 7};
  static V halves(V a, V b) {  // [a's halves summed | b's halves summed]
    return __builtin_shufflevector(a, b, 0, 1, 2, 3, 8, 9, 10, 11) +
           __builtin_shufflevector(a, b, 4, 5, 6, 7, 12, 13, 14, 15);
  }
  static V quarters(V a, V b) {
    return __builtin_shufflevector(a, b, 0, 1, 8, 9, 4, 5, 12, 13) +
           __builtin_shufflevector(a, b, 2, 3, 10, 11, 6, 7, 14, 15);
  }
  static V eighths(V a, V b) {
    return __builtin_shufflevector(a, b, 0, 8, 2, 10, 4, 12, 6, 14) +
           __builtin_shufflevector(a, b, 1, 9, 3, 11, 5, 13, 7, 15);
  }
  static V reduce(const V* v) {
    return eighths(quarters(halves(v[0], v[1]), halves(v[2], v[3])),
                   quarters(halves(v[4], v[5]), halves(v[6], v[7])));
  }
};

template <>
struct RowBlock<double> {
  typedef double V __attribute__((vector_size(32)));
  typedef double Unaligned __attribute__((vector_size(32), aligned(8)));
  static constexpr int L = 4;
  static constexpr int order[L] = {0, 2, 1, 3};
  static V halves(V a, V b) {
    return __builtin_shufflevector(a, b, 0, 1, 4, 5) + __builtin_shufflevector(a, b, 2, 3, 6, 7);
  }
  static V quarters(V a, V b) {
    return __builtin_shufflevector(a, b, 0, 4, 2, 6) + __builtin_shufflevector(a, b, 1, 5, 3, 7);
  }
  static V reduce(const V* v) { return quarters(halves(v[0], v[1]), halves(v[2], v[3])); }
};
#endif

// out[n] (+)= sum_k w[n * ldw + k] * x[k] for n < N: rows of a row-major weight against one
// vector, the weight read once, in its stored layout.
template <typename T>
inline void gemv(const T* __restrict w, int64_t ldw, const T* __restrict x, int64_t N, int64_t K,
                 T* __restrict out, bool accumulate) {
  int64_t n = 0;
#ifdef CTRLRNN_ROW_BLOCKS
  using Block = RowBlock<T>;
  using V = typename Block::V;
  using U = typename Block::Unaligned;
  constexpr int L = Block::L;
  const int64_t main = K - K % L;
  for (; n + L <= N; n += L) {
    V acc[L];
    for (int i = 0; i < L; ++i) acc[i] = V{};
    for (int64_t k = 0; k < main; k += L) {
      const V xk = *reinterpret_cast<const U*>(x + k);
      for (int i = 0; i < L; ++i) {
        acc[i] += *reinterpret_cast<const U*>(w + (n + Block::order[i]) * ldw + k) * xk;
      }
    }
    V sum = Block::reduce(acc);
    for (int r = 0; r < L && main < K; ++r) {
      for (int64_t k = main; k < K; ++k) sum[r] += w[(n + r) * ldw + k] * x[k];
    }
    if (accumulate) sum += *reinterpret_cast<const U*>(out + n);
    *reinterpret_cast<U*>(out + n) = sum;
  }
#endif
  gemv_rows<T>(w + n * ldw, ldw, x, N - n, K, out + n, accumulate);
}

// dx[k] (+)= sum_n g[n] w[n * K + k] for k < K: a stored (N, K) weight's transpose against one
// vector, the weight read row by row.
template <typename T>
inline void gemv_transposed(const T* __restrict w, const T* __restrict g, int64_t N, int64_t K,
                            T* __restrict dx, bool accumulate) {
  if (!accumulate) std::fill(dx, dx + K, T(0));
  for (int64_t n = 0; n < N; ++n) {
    const T gn = g[n];
    const T* __restrict row = w + n * K;
    for (int64_t k = 0; k < K; ++k) dx[k] += gn * row[k];
  }
}

// dw[n * K + k] (+)= g[n] v[k]: one row's outer product into a stored (N, K) weight's gradient.
template <typename T>
inline void outer(const T* __restrict g, const T* __restrict v, int64_t N, int64_t K,
                  T* __restrict dw, bool accumulate) {
  for (int64_t n = 0; n < N; ++n) {
    const T gn = g[n];
    T* __restrict row = dw + n * K;
    if (accumulate) {
      for (int64_t k = 0; k < K; ++k) row[k] += gn * v[k];
    } else {
      for (int64_t k = 0; k < K; ++k) row[k] = gn * v[k];
    }
  }
}

// A scratch buffer of n values for this thread, kept between calls: a step's intermediate
// products are a few hundred values, which an allocation per call would cost more than.
template <typename T>
inline T* scratch(int64_t n) {
  thread_local std::vector<T> buffer;
  if (static_cast<int64_t>(buffer.size()) < n) buffer.resize(n);
  return buffer.data();
}

// The activations of a step: the runtime's polynomial ones for float (std::exp and std::tanh
// under the plain runtime or with poly_exp off, and for double), runtime/vector_math.h. They are
// inline and branch-free, so the loops below vectorise; the C library's are a call per value.
template <typename T, typename F>
inline void with_activations(const F& f) {
  ctrlrnn::runtime::with_math<T, ctrlrnn::runtime::Act<T>>(f);
}

// v[n] = sigmoid(v[n] (+ b[n])) for n < N; b may be null.
template <typename M, typename T>
inline void sigmoid_rows(T* __restrict v, const T* __restrict b, int64_t N) {
  if (b) {
    for (int64_t n = 0; n < N; ++n) v[n] = M::sigmoid(v[n] + b[n]);
  } else {
    for (int64_t n = 0; n < N; ++n) v[n] = M::sigmoid(v[n]);
  }
}

// v[n] = tanh(v[n] (+ b[n])) for n < N; b may be null.
template <typename M, typename T>
inline void tanh_rows(T* __restrict v, const T* __restrict b, int64_t N) {
  if (b) {
    for (int64_t n = 0; n < N; ++n) v[n] = M::tanh(v[n] + b[n]);
  } else {
    for (int64_t n = 0; n < N; ++n) v[n] = M::tanh(v[n]);
  }
}

// The bias of gate block `gate` (H values), or null.
template <typename T>
inline const T* block_of(const T* bias, int64_t gate, int64_t H) {
  return bias ? bias + gate * H : nullptr;
}

// Whether an optional tensor was passed (None and an undefined tensor are both absent).
inline bool is_given(const c10::optional<at::Tensor>& t) {
  return t.has_value() && t->defined();
}

// The tensor's data, or nullptr for an absent optional one.
template <typename T>
inline const T* data_or_null(const c10::optional<at::Tensor>& t) {
  return is_given(t) ? t->data_ptr<T>() : nullptr;
}

// An output's gradient as a backward reads it: contiguous, or zeros of `sizes` where autograd
// passed none (nothing downstream read that output).
inline at::Tensor grad_or_zeros(const c10::optional<at::Tensor>& g, at::IntArrayRef sizes,
                                const at::TensorOptions& opts) {
  return is_given(g) ? g->contiguous() : at::zeros(sizes, opts);
}

// The values a METAGROSS step keeps a row for its backward (cell_steps.cpp, metagross_rows):
// the N units' three maps without their bias (3NH), the I internal units' depth gates [alpha |
// beta] (2I) and every unit's output (NH).
inline int64_t metagross_saved_width(int64_t N, int64_t I, int64_t H) {
  return 3 * N * H + 2 * I + N * H;
}

// Fails loudly on what the fast path does not serve: the Python side routes every other call
// to the composite step, so reaching here with any of these is a caller's bug.
inline void check_operand(const at::Tensor& t, const at::Tensor& like, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), name, ": expected a CPU tensor");
  TORCH_CHECK(t.scalar_type() == like.scalar_type(), name, ": expected dtype ",
              like.scalar_type(), ", got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), name, ": expected a contiguous tensor");
}

inline void check_optional(const c10::optional<at::Tensor>& t, const at::Tensor& like,
                    const char* name) {
  if (is_given(t)) check_operand(*t, like, name);
}

// A step's output of `sizes`, of like's dtype, on the CPU: made by the CPU allocator directly, as
// at::empty's CPU kernel makes it, without at::empty's dispatch, which costs more than a small
// step's arithmetic.
inline at::Tensor step_output(at::IntArrayRef sizes, const at::Tensor& like) {
  return at::Tensor(at::detail::empty_cpu(sizes, like.scalar_type()));
}

// Each tensor of `ts` contiguous (the same tensor where it already is).
inline std::vector<at::Tensor> contiguous_all(at::TensorList ts) {
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  for (const auto& t : ts) out.push_back(t.contiguous());
  return out;
}

// An optional output buffer of `width` values a row (B rows), contiguous, of x's dtype.
inline void check_saved(const c10::optional<at::Tensor>& saved, const at::Tensor& x, int64_t B,
                        int64_t width) {
  if (!is_given(saved)) return;
  check_operand(*saved, x, "saved");
  TORCH_CHECK(saved->dim() == 2 && saved->size(0) == B && saved->size(1) == width,
              "saved: expected (", B, ", ", width, "), got ", saved->sizes());
}

template <typename T>
inline T* saved_data(const c10::optional<at::Tensor>& saved) {
  return is_given(saved) ? saved->data_ptr<T>() : nullptr;
}

}  // namespace ctrlrnn::cell_steps
