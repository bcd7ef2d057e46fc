// ctrlrnn runtime: the per-step GEMM of the recurrent kernels, out (M, N) (+)= A (M, K) @ op(W),
// with the same W at every step.
//
// Tuned (float32): the path gemm_paths.h chooses for the shape class.
// * blas: with MKL, W is packed once per batch slice (cblas_sgemm_pack) and each step calls
//   cblas_sgemm_compute, so MKL does not pack the weights again every step. The MKL symbols are
//   weak; without them, or with packed_gemm off (mode.h), this path is at::mm_out / addmm_.
// * onednn: mkldnn_matmul on the step's rows; its primitive is cached after the first step.
// * blas1: the blas path held to the calling thread, for a small batch's tiny products.
// * tiny: tiny_gemm.h on a contiguous copy of op(W), made once per batch slice.
// Plain (mode.h) and other dtypes: at::mm_out / addmm_ on views of the operands.

#pragma once

#include <ATen/ATen.h>

#include "gemm_paths.h"
#include "mode.h"

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>

namespace ctrlrnn::runtime {

template <typename scalar_t>
class StepGemm {
 public:
  // op(W) = W^T when transpose (W is (N, K)), else W (W is (K, N)); M rows per call.
  StepGemm(const at::Tensor& W, bool transpose, int64_t M)
      : w_op_(transpose ? W.t() : W), M_(M), K_(w_op_.size(0)), N_(w_op_.size(1)) {
    // plain: no packing and no choice, so path_ stays blas and run() calls at::mm_out / addmm_
    if constexpr (std::is_same_v<scalar_t, float>) {
      if (runtime::plain()) return;
      const bool packable = mkl::available() && uses(kPackedGemm) && M_ > 0 && K_ > 0 &&
                            N_ > 0 && W.is_contiguous() && mkl::fits_int(M_) &&
                            mkl::fits_int(K_) && mkl::fits_int(N_);
      if (M_ > 0 && K_ > 0 && N_ > 0) {
        const std::string key = gemm::class_key("step", M_, K_, N_, 'n', gemm::layout(w_op_),
                                                gemm::threads_here());
        const bool tiny = M_ <= gemm::tiny::kMaxRows;
        path_ = gemm::choose(key, [&] {
          if (packable) pack(W, transpose);  // the BLAS candidate's operand
          if (tiny) w_contig_ = w_op_.contiguous();  // the tiny candidate's operand
          return std::function<void(int)>(
              [this, a = gemm::scratch({M_, K_}, W.options()),
               o = at::empty({M_, N_}, W.options())](int path) {
                if (path == gemm::kOneDnn) {
                  gemm::onednn_into(o, a, w_op_, false);
                } else if (path == gemm::kTiny) {
                  tiny_compute(a.data_ptr<float>(), K_, o.data_ptr<float>(), N_, false);
                } else {
                  gemm::blas_as(path, [&] { run_blas(a, o, false); });
                }
              });
        }, tiny);
        // packed only where a BLAS path runs: packing costs far more than a small product,
        // and the other paths never read it
        if (path_ == gemm::kOneDnn || path_ == gemm::kTiny) {
          packed_ = at::Tensor();
        } else if (packable && !packed_.defined()) {
          pack(W, transpose);
        }
        // op(W) copied only where the tiny kernel runs (or was just measured)
        if (path_ == gemm::kTiny && !w_contig_.defined()) w_contig_ = w_op_.contiguous();
        if (path_ != gemm::kTiny) w_contig_ = at::Tensor();
      }
      if (packed_.defined()) count_use(kPackedGemm);
    }
  }

  // out = A @ op(W) (accumulate: out += A @ op(W)); A (M, K) and out (M, N) with unit inner
  // stride.
  void run(const at::Tensor& A, const at::Tensor& out, bool accumulate) const {
    if constexpr (std::is_same_v<scalar_t, float>) {
      if (path_ == gemm::kTiny && A.size(0) == M_ && A.stride(1) == 1 && out.stride(1) == 1) {
        tiny_compute(A.data_ptr<float>(), A.stride(0), out.data_ptr<float>(), out.stride(0),
                     accumulate);
        return;
      }
    }
    if (path_ == gemm::kOneDnn && out.is_contiguous()) {
      gemm::onednn_into(out, A, w_op_, accumulate);
      return;
    }
    gemm::blas_as(path_, [&] { run_blas(A, out, accumulate); });
  }

  // out (M rows, leading dimension ldo) (+)= A (M rows, leading dimension lda) @ op(W) on raw
  // pointers, with no tensor views made: only on MKL's packed BLAS path and the tiny path (the
  // ones small batches take, where building two tensor views per step costs as much as the
  // product). Returns false (nothing done) on any other path; the caller then calls run().
  bool run_raw(const scalar_t* A, int64_t lda, scalar_t* out, int64_t ldo,
               bool accumulate) const {
    if constexpr (std::is_same_v<scalar_t, float>) {
      if (path_ == gemm::kTiny) {
        tiny_compute(A, lda, out, ldo, accumulate);
        return true;
      }
      if (!packed_.defined() || path_ == gemm::kOneDnn || !mkl::fits_int(lda) ||
          !mkl::fits_int(ldo)) {
        return false;
      }
      gemm::blas_as(path_, [&] { packed_compute(A, lda, out, ldo, accumulate); });
      return true;
    } else {
      (void)A, (void)lda, (void)out, (void)ldo, (void)accumulate;
      return false;
    }
  }

  // The path this GEMM takes ("blas", "blas1", "onednn" or "tiny").
  const char* path() const { return gemm::path_name(path_); }

 private:
  // MKL's packed copy of op(W) for M_ rows (packed_compute reads it).
  void pack(const at::Tensor& W, bool transpose) {
    if constexpr (std::is_same_v<scalar_t, float>) {
      const size_t bytes = cblas_sgemm_pack_get_size(mkl::kBMatrix, static_cast<int>(M_),
                                                     static_cast<int>(N_), static_cast<int>(K_));
      packed_ = at::empty({static_cast<int64_t>(bytes / sizeof(float)) + 16}, W.options());
      cblas_sgemm_pack(mkl::kRowMajor, mkl::kBMatrix, transpose ? mkl::kTrans : mkl::kNoTrans,
                       static_cast<int>(M_), static_cast<int>(N_), static_cast<int>(K_), 1.0f,
                       W.data_ptr<float>(), static_cast<int>(W.size(1)),
                       packed_.data_ptr<float>());
    } else {
      (void)W, (void)transpose;
    }
  }

  void run_blas(const at::Tensor& A, const at::Tensor& out, bool accumulate) const {
    if constexpr (std::is_same_v<scalar_t, float>) {
      if (packed_.defined() && A.size(0) == M_ && A.stride(1) == 1 && out.stride(1) == 1 &&
          mkl::fits_int(A.stride(0)) && mkl::fits_int(out.stride(0))) {
        packed_compute(A.data_ptr<float>(), A.stride(0), out.data_ptr<float>(), out.stride(0),
                       accumulate);
        return;
      }
    }
    gemm::blas_into(out, A, w_op_, accumulate);
  }

  // MKL's packed product on M_ rows: out (+)= A @ op(W), leading dimensions lda and ldo.
  void packed_compute(const float* A, int64_t lda, float* out, int64_t ldo,
                      bool accumulate) const {
    cblas_sgemm_compute(mkl::kRowMajor, mkl::kNoTrans, mkl::kPacked, static_cast<int>(M_),
                        static_cast<int>(N_), static_cast<int>(K_), A, static_cast<int>(lda),
                        packed_.data_ptr<float>(), static_cast<int>(N_),
                        accumulate ? 1.0f : 0.0f, out, static_cast<int>(ldo));
  }

  // The tiny kernel on M_ rows: out (+)= A @ op(W), leading dimensions lda and ldo.
  void tiny_compute(const float* A, int64_t lda, float* out, int64_t ldo, bool accumulate) const {
    gemm::tiny::gemm(A, lda, w_contig_.data_ptr<float>(), M_, K_, N_, out, ldo, accumulate);
  }

  at::Tensor w_op_;
  int64_t M_, K_, N_;
  at::Tensor packed_;
  at::Tensor w_contig_;  // op(W) contiguous, (K, N): the tiny path's operand
  int path_ = gemm::kBlas;
};

}  // namespace ctrlrnn::runtime
