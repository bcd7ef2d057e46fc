// The Python bindings of the CPU runtime that every extension carries (runtime.h): which runtime
// serves the kernels, the output cache, the GEMM paths, the cached linear layers, the
// streaming-store threshold, the thread counts, and `configure`.
//
// The runtime's state is one per process: each piece is a function-local static of an inline
// function, which GCC exports as a unique symbol, so every extension binds the same instance.

#include <ATen/ATen.h>
#include <torch/csrc/utils/pybind.h>

#include "cached_linear.h"
#include "kernel_common.h"
#include "runtime.h"

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ctrlrnn::gemm {

inline pybind11::dict dump() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  pybind11::dict d;
  for (const auto& [key, p] : t.choice) {
    const auto adv = t.advantage.find(key);
    d[pybind11::str(key)] =
        pybind11::make_tuple(path_name(p), adv == t.advantage.end() ? 0.0 : adv->second);
  }
  return d;
}

inline void load(const pybind11::dict& d) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  for (const auto& item : d) {
    const auto key = item.first.cast<std::string>();
    const auto value = item.second.cast<std::pair<std::string, double>>();
    t.choice[key] = path_code(value.first);
    t.advantage[key] = value.second;
  }
}

// Python bindings every extension adds (all share the one table).
inline void bind(pybind11::module& m) {
  m.def("mkl_packed_gemm", &ctrlrnn::mkl::available,
        "whether float32 per-step GEMMs use MKL's packed weights (else at::mm_out)");
  m.def("gemm_onednn_usable", &onednn_usable,
        "whether oneDNN's float32 matmul is reachable through this torch");
  m.def("gemm_one_thread_usable", &one_thread_usable,
        "whether BLAS can be held to the calling thread (MKL_Set_Num_Threads_Local)");
  m.def("gemm_force", [](int p) { forced().store(p); },
        "-1: choose per shape by measurement; 0: BLAS always; 1: oneDNN always; 2: BLAS on "
        "the calling thread alone always; 3: the tiny kernel for every product of a few rows "
        "(BLAS elsewhere)");
  m.def("gemm_forced", [] { return forced().load(); }, "the forced path (-1: none)");
  m.def("gemm_table", &dump, "shape class -> (path, BLAS time / oneDNN time)");
  m.def("gemm_table_load", &load, "add measured choices (as gemm_table returns them)");
  m.def("gemm_table_clear", [] {
    Table& t = table();
    std::lock_guard<std::mutex> lock(t.mu);
    t.choice.clear();
    t.advantage.clear();
  }, "forget every choice (the next GEMM of each class measures again)");
  m.def("gemm", &mm, "(a (M, K), b (K, N)) -> a @ b on the path chosen for the shape class");
  m.def("gemm_into", [](const at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                        bool accumulate) {
    TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && out.dim() == 2 && a.size(1) == b.size(0) &&
                    out.size(0) == a.size(0) && out.size(1) == b.size(1),
                "gemm_into: expected out (M, N), a (M, K), b (K, N), got ", out.sizes(), ", ",
                a.sizes(), ", ", b.sizes());
    TORCH_CHECK(a.scalar_type() == out.scalar_type() && b.scalar_type() == out.scalar_type() &&
                    out.device().is_cpu() && a.device().is_cpu() && b.device().is_cpu(),
                "gemm_into: out, a and b must be CPU tensors of one dtype");
    TORCH_CHECK(out.size(1) <= 1 || out.stride(1) == 1, "gemm_into: out needs unit inner stride");
    into(out, a, b, accumulate);
  }, "out (+)= a @ b (accumulate: +=) on the path chosen for the shape class, in place");
  m.def("gemm_tiny", [](const at::Tensor& a, const at::Tensor& b, at::Tensor out, bool accumulate) {
    TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat &&
                    out.scalar_type() == at::kFloat && a.dim() == 2 && b.dim() == 2 &&
                    out.dim() == 2 && a.size(1) == b.size(0) && out.size(0) == a.size(0) &&
                    out.size(1) == b.size(1) && a.size(0) <= tiny::kMaxRows,
                "gemm_tiny: expected float32 a (M <= ", tiny::kMaxRows, ", K), b (K, N), out (M, N)");
    TORCH_CHECK(a.stride(1) == 1 && out.stride(1) == 1, "gemm_tiny: a and out need unit inner stride");
    const at::Tensor bc = b.contiguous();
    tiny::gemm(a.data_ptr<float>(), a.stride(0), bc.data_ptr<float>(), a.size(0), a.size(1),
               b.size(1), out.data_ptr<float>(), out.stride(0), accumulate);
  }, "out (+)= a @ b on the tiny kernel (a of at most 8 rows; out and a rows of unit stride)");
  m.def("gemm_uses", [] {
    Table& t = table();
    std::lock_guard<std::mutex> lock(t.mu);
    pybind11::dict d;
    for (const auto& [key, use] : t.uses) {
      d[pybind11::str(key)] = pybind11::make_tuple(path_name(use.first), use.second);
    }
    return d;
  }, "shape class -> (path, calls) of the GEMMs run since gemm_uses_clear()");
  m.def("gemm_uses_clear", [] {
    Table& t = table();
    std::lock_guard<std::mutex> lock(t.mu);
    t.uses.clear();
  }, "start counting gemm_uses afresh");
}

}  // namespace ctrlrnn::gemm

namespace ctrlrnn {

// Whether configure has run in this process (shared by every extension, as the state it sets).
inline std::atomic<bool>& runtime_configured() {
  static std::atomic<bool> done{false};
  return done;
}

// Hands the runtime its settings (ctrlrnn.settings reads and checks them): the streaming-store
// threshold in bytes (None: follow the cache), whether large cached blocks go on huge pages, the
// output cache's limit in MiB, and the runtime ("tuned" or "plain"). Only the first call of a
// process applies them, so loading a second extension does not undo a setter called in between.
// Returns whether this call applied.
inline bool configure(std::optional<int64_t> streaming_bytes, bool huge_pages,
                      int64_t output_cache_mb, const std::string& runtime) {
  TORCH_CHECK(runtime == "tuned" || runtime == "plain",
              "configure: runtime must be 'tuned' or 'plain', got '", runtime, "'");
  if (runtime_configured().exchange(true)) return false;
  runtime::set_kind(runtime);
  runtime::set_streaming_threshold(streaming_bytes.value_or(runtime::kThresholdAuto));
  OutputPool::huge_pages_ref().store(huge_pages);
  OutputPool::instance().set_limit(output_cache_mb <= 0 ? 0 : output_cache_mb << 20);
  return true;
}

void bind_runtime(pybind11::module_& m) {
  namespace py = pybind11;
  m.def("configure", &configure, py::arg("streaming_bytes"), py::arg("huge_pages"),
        py::arg("output_cache_mb"), py::arg("runtime") = "tuned",
        "hand the runtime its settings (the first call of a process applies them)");
  m.def("runtime", [] { return std::string(runtime::kind_name()); },
        "the runtime serving the kernels: 'tuned' or 'plain'");
  m.def("set_runtime", [](const std::string& name) {
    TORCH_CHECK(runtime::set_kind(name), "set_runtime: expected 'tuned' or 'plain', got '", name,
                "'");
  }, "serve the kernels by the 'tuned' or the 'plain' runtime from the next call on");
  m.def("num_threads", &kernels::num_threads, "at::get_num_threads() as seen by this extension");
  m.def("parallel_threads", &kernels::openmp_threads_in_region,
        "how many threads at::parallel_for really uses in this extension");
  m.def("streaming_threshold", &runtime::streaming_threshold,
        "bytes written from which the kernels use streaming stores");
  m.def("set_streaming_threshold", &runtime::set_streaming_threshold,
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
    return runtime::empty(sizes, like.options());
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
