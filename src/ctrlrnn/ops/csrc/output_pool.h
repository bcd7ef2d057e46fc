// ctrlrnn: a small cache of freed blocks for the large outputs of the compiled kernels.
//
// Why: on Linux, glibc serves blocks larger than its mmap threshold (at most 32 MiB) with a
// fresh mmap and returns them with munmap on free. The first write to each fresh page is a page
// fault and a page clear by the kernel, several times slower than a write into memory already
// mapped. A recurrent layer in a training
// loop allocates the same large outputs every step (the scan's h, its gradients da and db), so
// without a cache every step pays the first-touch cost again. The CUDA caching allocator exists
// for the same reason; PyTorch's CPU allocator has none on desktop builds.
//
// What: `pooled_empty(sizes, options)` returns a tensor whose storage comes from this cache when
// it is at least kMinPooledBytes; when the tensor dies, its block returns to the cache instead of
// the system. Capacities are rounded up to 8 size classes per power of two (a request reuses a
// block of its class; the untouched tail of a fresh block is never paged in). Free blocks are
// bounded: CTRLRNN_OUTPUT_CACHE_MB (default 512; 0 disables the cache) caps the bytes held
// while unused, evicting the oldest first. `ctrlrnn.ops.empty_cache()` frees them all.
//
// The extensions that include this header share one cache: GCC exports the function-local
// static of OutputPool::instance() as a unique symbol, which the dynamic loader binds to one
// instance across the libraries despite RTLD_LOCAL. ctrlrnn/ops/output_cache.py finds out
// which extensions share a pool and reports each pool once.

#pragma once

#include <torch/extension.h>

#include <c10/core/impl/alloc_cpu.h>

#include "gemm_path.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ctrlrnn {

constexpr int64_t kMinPooledBytes = int64_t(1) << 20;

class OutputPool {
 public:
  // Never destroyed: tensors may outlive static destruction at interpreter exit.
  static OutputPool& instance() {
    static OutputPool* pool = new OutputPool();
    return *pool;
  }

  torch::Tensor empty(at::IntArrayRef sizes, const at::TensorOptions& options) {
    int64_t numel = 1;
    for (auto s : sizes) numel *= s;
    const int64_t bytes = numel * static_cast<int64_t>(c10::elementSize(
                                      c10::typeMetaToScalarType(options.dtype())));
    if (limit_ == 0 || bytes < kMinPooledBytes) return torch::empty(sizes, options);
    const int64_t cap = size_class(bytes);
    void* ptr = take(cap);
    if (ptr == nullptr) {
      ptr = c10::alloc_cpu(static_cast<size_t>(cap));
      std::lock_guard<std::mutex> lock(mu_);
      fresh_ += 1;
    }
    return torch::from_blob(
        ptr, sizes, [cap](void* p) { OutputPool::instance().give(p, cap); }, options);
  }

  // Frees every cached block; returns the bytes freed.
  int64_t release() {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t freed = 0;
    for (auto& [cap, blocks] : free_) {
      for (void* p : blocks) c10::free_cpu(p);
      freed += cap * static_cast<int64_t>(blocks.size());
    }
    free_.clear();
    order_.clear();
    held_ = 0;
    return freed;
  }

  // {held bytes, limit bytes, fresh allocations, reuses}
  std::vector<int64_t> stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return {held_, limit_, fresh_, reused_};
  }

  void set_limit(int64_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      limit_ = bytes < 0 ? 0 : bytes;
    }
    trim();
  }

  // Capacity class of a request: rounded up to an eighth of its power of two (>= 4 KiB).
  static int64_t size_class(int64_t bytes) {
    int64_t p = 1;
    while (p < bytes) p <<= 1;
    const int64_t step = std::max<int64_t>(p / 8, 4096);
    return (bytes + step - 1) / step * step;
  }

 private:
  OutputPool() {
    const char* env = std::getenv("CTRLRNN_OUTPUT_CACHE_MB");
    int64_t mb = 512;
    if (env != nullptr && *env != '\0') {
      try {
        mb = std::stoll(env);
      } catch (...) {
        TORCH_WARN("ctrlrnn: CTRLRNN_OUTPUT_CACHE_MB=", env, " is not an integer; using 512");
      }
    }
    limit_ = mb <= 0 ? 0 : mb << 20;
  }

  void* take(int64_t cap) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(cap);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    held_ -= cap;
    for (auto o = order_.begin(); o != order_.end(); ++o) {
      if (o->first == p) {
        order_.erase(o);
        break;
      }
    }
    reused_ += 1;
    return p;
  }

  void give(void* p, int64_t cap) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cap <= limit_) {
        free_[cap].push_back(p);
        order_.emplace_back(p, cap);
        held_ += cap;
        p = nullptr;
      }
    }
    if (p != nullptr) {
      c10::free_cpu(p);
      return;
    }
    trim();
  }

  // Evicts the oldest free blocks until the held bytes fit the limit.
  void trim() {
    std::vector<void*> evicted;
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (!order_.empty() && held_ > limit_) {
        auto [p, cap] = order_.front();
        order_.pop_front();
        auto& blocks = free_[cap];
        for (auto b = blocks.begin(); b != blocks.end(); ++b) {
          if (*b == p) {
            blocks.erase(b);
            break;
          }
        }
        held_ -= cap;
        evicted.push_back(p);
      }
    }
    for (void* p : evicted) c10::free_cpu(p);
  }

  std::mutex mu_;
  std::unordered_map<int64_t, std::vector<void*>> free_;
  std::deque<std::pair<void*, int64_t>> order_;  // free blocks, oldest first
  int64_t held_ = 0;
  std::atomic<int64_t> limit_{0};
  int64_t fresh_ = 0;
  int64_t reused_ = 0;
};

inline torch::Tensor pooled_empty(at::IntArrayRef sizes, const at::TensorOptions& options) {
  return OutputPool::instance().empty(sizes, options);
}

inline torch::Tensor pooled_empty_like(const torch::Tensor& like) {
  return pooled_empty(like.sizes(), like.options());
}

// x W^T + b (into a cached block, as cached_linear below) with weight's N rows taken as
// `groups` consecutive blocks of N / groups, the output laid out group first:
// (groups, ..., N / groups), each group's block contiguous. The input
// projections of independent recurrences that read the same x (a METAGROSS unit's base RNNs)
// arrive so without the permuted copy of a (..., N) output: one GEMM per group, each into its
// slice of one cached output block.
inline torch::Tensor cached_linear_grouped(const torch::Tensor& x, const torch::Tensor& weight,
                                           const c10::optional<torch::Tensor>& bias,
                                           int64_t groups) {
  TORCH_CHECK(x.dim() >= 1 && weight.dim() == 2 && x.size(-1) == weight.size(1) &&
                  x.device().is_cpu() && weight.scalar_type() == x.scalar_type(),
              "cached_linear: expected x (..., D) and weight (N, D) of one dtype on CPU");
  TORCH_CHECK(groups >= 1 && weight.size(0) % groups == 0, "cached_linear_grouped: groups=",
              groups, " must divide the weight's ", weight.size(0), " rows");
  const int64_t n = weight.size(0) / groups;
  auto sizes = x.sizes().vec();
  sizes.back() = n;
  sizes.insert(sizes.begin(), groups);
  // rows counted explicitly: a -1 in view/reshape is ambiguous for empty tensors (N or D = 0)
  int64_t rows = 1;
  for (int64_t i = 0; i + 1 < x.dim(); ++i) rows *= x.size(i);
  auto out = pooled_empty(sizes, x.options());
  const auto x2 = x.reshape({rows, x.size(-1)});
  for (int64_t k = 0; k < groups; ++k) {
    auto out2 = out.select(0, k).view({rows, n});
    if (bias.has_value()) out2.copy_(bias->slice(0, k * n, (k + 1) * n).expand_as(out2));
    gemm::into(out2, x2, weight.slice(0, k * n, (k + 1) * n).t(),
               /*accumulate=*/bias.has_value());
  }
  return out;
}

// x W^T + b, x (..., D), weight (N, D), bias (N,) or None -> (..., N), written into a cached
// block: the GEMM output of a layer's input projection is often the largest tensor of a step
// (a METAGROSS level's pre-activations, a QRNN's gates), above glibc's mmap threshold, so a fresh
// one would page-fault on every first write, every step. The GEMM takes the path gemm_path.h
// chooses for its shape class.
// It is the one-group case of cached_linear_grouped: (1, ..., N) viewed as (..., N).
inline torch::Tensor cached_linear(const torch::Tensor& x, const torch::Tensor& weight,
                                   const c10::optional<torch::Tensor>& bias) {
  return cached_linear_grouped(x, weight, bias, 1).squeeze(0);
}

// Python bindings every extension adds: output_cache_stats, output_cache_release,
// output_cache_set_limit, cached_linear, cached_linear_grouped, and the GEMM path's (gemm_path.h).
inline void bind_output_pool(pybind11::module& m) {
  m.def("output_cache_stats", [] { return OutputPool::instance().stats(); },
        "[held bytes, limit bytes, fresh allocations, reuses] of this extension's output cache");
  m.def("output_cache_release", [] { return OutputPool::instance().release(); },
        "free every cached block; returns the bytes freed");
  m.def("output_cache_set_limit", [](int64_t bytes) { OutputPool::instance().set_limit(bytes); },
        "cap on the bytes of free blocks held (0 disables the cache)");
  m.def("cached_linear", &cached_linear,
        "(x (..., D), weight (N, D), bias (N,) or None) -> x W^T + b in a cached output block");
  m.def("cached_linear_grouped", &cached_linear_grouped,
        "(x (..., D), weight (N, D), bias (N,) or None, groups) -> x W^T + b as (groups, ..., "
        "N / groups) in a cached output block");
  gemm::bind(m);
}

}  // namespace ctrlrnn
