// The ops of the CPU runtime that every extension carries (runtime.h), registered in the
// extension's TORCH_LIBRARY namespace (no pybind11, so the library needs no Python and is abi3):
// which runtime serves the kernels, the output cache, the GEMM paths, the cached linear layers,
// the streaming-store threshold, the thread counts, and `configure`.
//
// The runtime's state is one per process: each piece is a function-local static of an inline
// function, which GCC exports as a unique symbol, so every extension binds the same instance.

#include <ATen/ATen.h>
#include <torch/library.h>

#include <ATen/Parallel.h>

#include "cached_linear.h"
#include "runtime.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace ctrlrnn {

// Whether configure has run in this process (shared by every extension, as the state it sets).
inline std::atomic<bool>& runtime_configured() {
  static std::atomic<bool> done{false};
  return done;
}

// Hands the runtime its settings (ctrlrnn.settings reads and checks them): the streaming-store
// threshold in bytes (None: follow the cache), whether large cached blocks go on huge pages, the
// output cache's limit in MiB, the runtime ("tuned" or "plain") and the tuned mechanisms
// switched off as a comma list (mode.h; a schema's list of str cannot have a default). Only the
// first call of a process applies them, so loading a second extension does not undo a setter
// called in between. Returns whether this call applied.
inline bool configure(std::optional<int64_t> streaming_bytes, bool huge_pages,
                      int64_t output_cache_mb, const std::string& runtime,
                      const std::string& off) {
  TORCH_CHECK(runtime == "tuned" || runtime == "plain",
              "configure: runtime must be 'tuned' or 'plain', got '", runtime, "'");
  std::vector<std::string> names;
  for (size_t start = 0; start < off.size();) {
    const size_t comma = std::min(off.find(',', start), off.size());
    if (comma > start) names.push_back(off.substr(start, comma - start));
    start = comma + 1;
  }
  const int off_bits = runtime::off_bits(names);
  TORCH_CHECK(off_bits >= 0, "configure: off takes packed_gemm, poly_exp and stacked_outputs, "
              "got '", off, "'");
  if (runtime_configured().exchange(true)) return false;
  runtime::set_kind(runtime);
  runtime::off_ref().store(off_bits);
  runtime::set_streaming_threshold(streaming_bytes.value_or(runtime::kThresholdAuto));
  OutputPool::huge_pages_ref().store(huge_pages);
  OutputPool::instance().set_limit(output_cache_mb <= 0 ? 0 : output_cache_mb << 20);
  return true;
}

void set_runtime(const std::string& name) {
  TORCH_CHECK(runtime::set_kind(name), "set_runtime: expected 'tuned' or 'plain', got '", name,
              "'");
}

void set_runtime_off(const std::vector<std::string>& names) {
  TORCH_CHECK(runtime::set_off(names), "set_runtime_off: expected names among packed_gemm, "
              "poly_exp and stacked_outputs, got ", c10::Join(", ", names));
}

namespace {

using Names = std::vector<std::string>;

// How many threads at::parallel_for really uses here (a second OpenMP runtime can make it 1).
int64_t threads_in_region() {
  std::atomic<int64_t> seen{0};
  at::parallel_for(0, 1024, 1, [&](int64_t, int64_t) { seen.fetch_add(1); });
  return seen.load();
}

// The switchable mechanisms' names and how often each served since the last clear (mode.h).
std::tuple<Names, std::vector<int64_t>> mechanism_uses() {
  std::tuple<Names, std::vector<int64_t>> out;
  for (int m = 0; m < runtime::kMechanisms; ++m) {
    std::get<0>(out).emplace_back(runtime::mechanism_name(m));
    std::get<1>(out).push_back(runtime::use_counts()[m].load());
  }
  return out;
}

// The GEMM table as three lists (shape class, path, BLAS time / oneDNN time).
std::tuple<Names, Names, std::vector<double>> gemm_table() {
  gemm::Table& t = gemm::table();
  std::lock_guard<std::mutex> lock(t.mu);
  std::tuple<Names, Names, std::vector<double>> out;
  for (const auto& [key, p] : t.choice) {
    const auto adv = t.advantage.find(key);
    std::get<0>(out).push_back(key);
    std::get<1>(out).emplace_back(gemm::path_name(p));
    std::get<2>(out).push_back(adv == t.advantage.end() ? 0.0 : adv->second);
  }
  return out;
}

void gemm_table_load(const Names& keys, const Names& paths, const std::vector<double>& adv) {
  TORCH_CHECK(keys.size() == paths.size() && keys.size() == adv.size(),
              "gemm_table_load: keys, paths and advantages must be of one length");
  gemm::Table& t = gemm::table();
  std::lock_guard<std::mutex> lock(t.mu);
  for (size_t i = 0; i < keys.size(); ++i) {
    t.choice[keys[i]] = gemm::path_code(paths[i]);
    t.advantage[keys[i]] = adv[i];
  }
}

std::tuple<Names, Names, std::vector<int64_t>> gemm_uses() {
  gemm::Table& t = gemm::table();
  std::lock_guard<std::mutex> lock(t.mu);
  std::tuple<Names, Names, std::vector<int64_t>> out;
  for (const auto& [key, use] : t.uses) {
    std::get<0>(out).push_back(key);
    std::get<1>(out).emplace_back(gemm::path_name(use.first));
    std::get<2>(out).push_back(static_cast<int64_t>(use.second));
  }
  return out;
}

void gemm_into(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, bool accumulate) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && out.dim() == 2 && a.size(1) == b.size(0) &&
                  out.size(0) == a.size(0) && out.size(1) == b.size(1),
              "gemm_into: expected out (M, N), a (M, K), b (K, N), got ", out.sizes(), ", ",
              a.sizes(), ", ", b.sizes());
  TORCH_CHECK(a.scalar_type() == out.scalar_type() && b.scalar_type() == out.scalar_type() &&
                  out.device().is_cpu() && a.device().is_cpu() && b.device().is_cpu(),
              "gemm_into: out, a and b must be CPU tensors of one dtype");
  TORCH_CHECK(out.size(1) <= 1 || out.stride(1) == 1, "gemm_into: out needs unit inner stride");
  gemm::into(out, a, b, accumulate);
}

void gemm_tiny(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out, bool accumulate) {
  TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat &&
                  out.scalar_type() == at::kFloat && a.dim() == 2 && b.dim() == 2 &&
                  out.dim() == 2 && a.size(1) == b.size(0) && out.size(0) == a.size(0) &&
                  out.size(1) == b.size(1) && a.size(0) <= gemm::tiny::kMaxRows,
              "gemm_tiny: expected float32 a (M <= ", gemm::tiny::kMaxRows,
              ", K), b (K, N), out (M, N)");
  TORCH_CHECK(a.stride(1) == 1 && out.stride(1) == 1,
              "gemm_tiny: a and out need unit inner stride");
  const at::Tensor bc = b.contiguous();
  gemm::tiny::gemm(a.data_ptr<float>(), a.stride(0), bc.data_ptr<float>(), a.size(0), a.size(1),
                   b.size(1), out.data_ptr<float>(), out.stride(0), accumulate);
}

at::Tensor pooled_empty_like_sizes(at::IntArrayRef sizes, const at::Tensor& like) {
  TORCH_CHECK(like.device().is_cpu(), "pooled_empty: like must be a CPU tensor");
  return runtime::empty(sizes, like.options());
}

// The GEMM paths' ops (every extension has them; all share the one table).
void register_gemm(torch::Library& m) {
  // whether float32 per-step GEMMs use MKL's packed weights (else at::mm_out)
  m.def("mkl_packed_gemm() -> bool", [] { return mkl::available(); });
  // whether oneDNN's float32 matmul is reachable through this torch
  m.def("gemm_onednn_usable() -> bool", [] { return gemm::onednn_usable(); });
  // whether BLAS can be held to the calling thread (MKL_Set_Num_Threads_Local)
  m.def("gemm_one_thread_usable() -> bool", [] { return gemm::one_thread_usable(); });
  // -1: choose per shape by measurement; 0: BLAS always; 1: oneDNN always; 2: BLAS on the
  // calling thread alone always; 3: the tiny kernel for every product of a few rows
  m.def("gemm_force(int path) -> ()",
        [](int64_t p) { gemm::forced().store(static_cast<int>(p)); });
  m.def("gemm_forced() -> int", [] { return static_cast<int64_t>(gemm::forced().load()); });
  m.def("gemm_table() -> (str[], str[], float[])", &gemm_table);
  m.def("gemm_table_load(str[] keys, str[] paths, float[] advantages) -> ()", &gemm_table_load);
  m.def("gemm_table_clear() -> ()", [] {
    gemm::Table& t = gemm::table();
    std::lock_guard<std::mutex> lock(t.mu);
    t.choice.clear();
    t.advantage.clear();
  });
  // a @ b on the path chosen for the shape class
  m.def("gemm(Tensor a, Tensor b) -> Tensor", &gemm::mm);
  m.def("gemm_into(Tensor(a!) out, Tensor a, Tensor b, bool accumulate) -> ()", &gemm_into);
  m.def("gemm_tiny(Tensor a, Tensor b, Tensor(a!) out, bool accumulate) -> ()", &gemm_tiny);
  m.def("gemm_uses() -> (str[], str[], int[])", &gemm_uses);
  m.def("gemm_uses_clear() -> ()", [] {
    gemm::Table& t = gemm::table();
    std::lock_guard<std::mutex> lock(t.mu);
    t.uses.clear();
  });
}

}  // namespace

void register_runtime(torch::Library& m) {
  // hand the runtime its settings (the first call of a process applies them)
  m.def("configure(int? streaming_bytes, bool huge_pages, int output_cache_mb, "
        "str runtime='tuned', str off='') -> bool", &configure);
  // the runtime serving the kernels: 'tuned' or 'plain'
  m.def("runtime() -> str", [] { return std::string(runtime::kind_name()); });
  // serve the kernels by the 'tuned' or the 'plain' runtime from the next call on
  m.def("set_runtime(str name) -> ()", &set_runtime);
  // the tuned mechanisms switched off: packed_gemm, poly_exp, stacked_outputs (mode.h)
  m.def("runtime_off() -> str[]", [] { return runtime::off_names(); });
  // switch off exactly these mechanisms from the next call on (the others on)
  m.def("set_runtime_off(str[] names) -> ()", &set_runtime_off);
  // each switchable mechanism's name and how often it served a call
  m.def("mechanism_uses() -> (str[], int[])", &mechanism_uses);
  m.def("mechanism_uses_clear() -> ()", [] {
    for (auto& c : runtime::use_counts()) c.store(0);
  });
  // at::get_num_threads() as seen by this extension
  m.def("num_threads() -> int", [] { return static_cast<int64_t>(at::get_num_threads()); });
  // how many threads at::parallel_for really uses in this extension
  m.def("parallel_threads() -> int", &threads_in_region);
  // bytes written from which the kernels use streaming stores (negative: never stream)
  m.def("streaming_threshold() -> int", &runtime::streaming_threshold);
  m.def("set_streaming_threshold(int bytes) -> ()", &runtime::set_streaming_threshold);
  // [held bytes, limit bytes, fresh allocations, reuses] of the output cache
  m.def("output_cache_stats() -> int[]", [] { return OutputPool::instance().stats(); });
  // free every cached block; returns the bytes freed
  m.def("output_cache_release() -> int", [] { return OutputPool::instance().release(); });
  // whether blocks of 2 MiB or more are 2 MiB-aligned and advised onto huge pages
  m.def("output_cache_huge_pages() -> bool", [] { return OutputPool::huge_pages(); });
  // cap on the bytes of free blocks held (0 disables the cache)
  m.def("output_cache_set_limit(int bytes) -> ()",
        [](int64_t bytes) { OutputPool::instance().set_limit(bytes); });
  // an uninitialised tensor of these sizes with like's dtype and device, from the cache when
  // large (a whole METAGROSS tree's gradient block, written by several kernels)
  m.def("pooled_empty(int[] sizes, Tensor like) -> Tensor", &pooled_empty_like_sizes);
  // (x (..., D), weight (N, D), bias (N,) or None) -> x W^T + b in a cached output block
  m.def("cached_linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor", &cached_linear);
  // the same as (groups, ..., N / groups)
  m.def("cached_linear_grouped(Tensor x, Tensor weight, Tensor? bias, int groups) -> Tensor",
        &cached_linear_grouped);
  // (x (G, rows, D), weight (R, N, D), bias (R, N) or None) -> (R, rows, N),
  // out[r] = x[r / (R / G)] W_r^T + b_r
  m.def("cached_linear_stacked(Tensor x, Tensor weight, Tensor? bias) -> Tensor",
        &cached_linear_stacked);
  register_gemm(m);
}

}  // namespace ctrlrnn
