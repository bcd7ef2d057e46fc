// The Python bindings of the CPU runtime that every extension carries: the output cache
// (output_pool.h), the GEMM paths (gemm_path.h), the cached linear layers (cached_linear.h), the
// streaming-store threshold and the thread counts (kernel_common.h), and `configure`.
//
// The runtime's state is one per process: each piece is a function-local static of an inline
// function, which GCC exports as a unique symbol, so every extension binds the same instance.

#include <ATen/ATen.h>
#include <torch/csrc/utils/pybind.h>

#include "cached_linear.h"
#include "gemm_path.h"
#include "kernel_common.h"
#include "output_pool.h"

#include <atomic>
#include <cstdint>
#include <optional>
#include <vector>

namespace ctrlrnn {

// Whether configure has run in this process (shared by every extension, as the state it sets).
inline std::atomic<bool>& runtime_configured() {
  static std::atomic<bool> done{false};
  return done;
}

// Hands the runtime its settings (ctrlrnn.settings reads and checks them): the streaming-store
// threshold in bytes (None: follow the cache), whether large cached blocks go on huge pages, and
// the output cache's limit in MiB. Only the first call of a process applies them, so loading a
// second extension does not undo a setter called in between. Returns whether this call applied.
inline bool configure(std::optional<int64_t> streaming_bytes, bool huge_pages,
                      int64_t output_cache_mb) {
  if (runtime_configured().exchange(true)) return false;
  kernels::set_streaming_threshold(streaming_bytes.value_or(kernels::kThresholdAuto));
  OutputPool::huge_pages_ref().store(huge_pages);
  OutputPool::instance().set_limit(output_cache_mb <= 0 ? 0 : output_cache_mb << 20);
  return true;
}

void bind_runtime(pybind11::module_& m) {
  namespace py = pybind11;
  m.def("configure", &configure, py::arg("streaming_bytes"), py::arg("huge_pages"),
        py::arg("output_cache_mb"),
        "hand the runtime its settings (the first call of a process applies them)");
  m.def("num_threads", &kernels::num_threads, "at::get_num_threads() as seen by this extension");
  m.def("parallel_threads", &kernels::openmp_threads_in_region,
        "how many threads at::parallel_for really uses in this extension");
  m.def("streaming_threshold", &kernels::streaming_threshold,
        "bytes written from which the kernels use streaming stores");
  m.def("set_streaming_threshold", &kernels::set_streaming_threshold,
        "set that threshold in bytes (negative: never stream)");
  m.def("output_cache_stats", [] { return OutputPool::instance().stats(); },
        "[held bytes, limit bytes, fresh allocations, reuses] of this extension's output cache");
  m.def("output_cache_release", [] { return OutputPool::instance().release(); },
        "free every cached block; returns the bytes freed");
  m.def("output_cache_huge_pages", [] { return OutputPool::huge_pages(); },
        "whether blocks of 2 MiB or more are 2 MiB-aligned and advised onto huge pages "
        "(CTRLRNN_HUGE_PAGES=0 turns it off)");
  m.def("output_cache_set_limit", [](int64_t bytes) { OutputPool::instance().set_limit(bytes); },
        "cap on the bytes of free blocks held (0 disables the cache)");
  m.def("pooled_empty", [](const std::vector<int64_t>& sizes, const at::Tensor& like) {
    TORCH_CHECK(like.device().is_cpu(), "pooled_empty: like must be a CPU tensor");
    return pooled_empty(sizes, like.options());
  }, "an uninitialised tensor of these sizes with like's dtype and device, from the cache when "
     "large (a whole METAGROSS tree's gradient block, written by several kernels)");
  m.def("cached_linear", &cached_linear,
        "(x (..., D), weight (N, D), bias (N,) or None) -> x W^T + b in a cached output block");
  m.def("cached_linear_grouped", &cached_linear_grouped,
        "(x (..., D), weight (N, D), bias (N,) or None, groups) -> x W^T + b as (groups, ..., "
        "N / groups) in a cached output block");
  m.def("cached_linear_stacked", &cached_linear_stacked,
        "(x (G, rows, D), weight (R, N, D), bias (R, N) or None) -> (R, rows, N), out[r] = "
        "x[r / (R / G)] W_r^T + b_r, in a cached output block");
  gemm::bind(m);
}

}  // namespace ctrlrnn
