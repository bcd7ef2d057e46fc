// The extension `cells`: the fused gated cells on CPU, one file each (lstm.cpp, gru.cpp,
// cas_lstm.cpp, ncarnn.cpp, metagross_state.cpp: the METAGROSS unit as printed), their helpers
// in cells_common.h and their loops over time in cells_time.h; this file binds them into one
// module.
//
// Recipe (lmnt-com/haste): the input projections of all time steps arrive precomputed as one
// tensor x_proj (B, T, G) (one big GEMM done by the caller); per step a cell does one GEMM for
// the recurrent term U h_{t-1} into a preallocated (B, G_h) buffer and one fused pointwise pass.
// Backward through time mirrors it: per step a pointwise pass writes the gate pre-activation
// gradients dG_t straight into dx_proj[:, t], then one GEMM dh_{t-1} (+)= dG_t U; dU =
// sum_t dG_t^T h_{t-1} is one (G_h, B*T) x (B*T, H) GEMM at the end. Threads split the batch and
// each runs the whole time loop on its slice (see over_batch_slices), so there is no barrier per
// step.
//
// Variable lengths: for t >= lengths[b] the state of row b is left unchanged and the outputs are
// zero; in backward the carried state gradient passes through such steps untouched and dG is zero.
//
// Tensor layouts (all contiguous, batch-major): x_proj (B, T, G); weight_hh (G_h, H) so that the
// recurrent term is h_{t-1} @ weight_hh^T; states (B, H); sequences (B, T, H).

#include "cells_common.h"

#include <ATen/ATen.h>
#include <torch/csrc/utils/pybind.h>

namespace {

using namespace ctrlrnn::cells;

int64_t num_threads() { return at::get_num_threads(); }

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "ctrlrnn fused gated cells (LSTM, GRU, CAS-LSTM, nCARNN, METAGROSS as printed) on CPU";
  m.def("num_threads", &num_threads, "at::get_num_threads() as seen by this extension");
  ctrlrnn::bind_output_pool(m);
  // The ops take stacked recurrences and run them concurrently (recurrences.h); the Python
  // side stacks independent recurrences only for a module that says so.
  m.attr("runs_recurrences_concurrently") = true;
  m.def("mkl_packed_gemm", &mkl::available,
        "whether float32 per-step GEMMs use MKL's packed weights (else at::mm_out)");
  ctrlrnn::cells::bind_lstm(m);
  ctrlrnn::cells::bind_gru(m);
  ctrlrnn::cells::bind_cas_lstm(m);
  ctrlrnn::cells::bind_ncarnn(m);
  ctrlrnn::cells::bind_metagross_state(m);
}
