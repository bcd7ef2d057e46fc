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
// Huge pages: a block of 2 MiB or more is aligned to 2 MiB and advised MADV_HUGEPAGE (Linux), so
// that where transparent huge pages are in "madvise" mode (a common default) the kernels' large
// outputs sit on 2 MiB pages. These outputs are streamed through once per step by kernels that
// run at memory bandwidth; with 4 KiB pages every few rows of a (B, T, N) block is a new page and
// a TLB miss (README's performance section has what it gives). CTRLRNN_HUGE_PAGES=0 turns the
// advice off
// (plain blocks from torch's CPU allocator); under THP "never" it is a no-op, under "always"
// the pages were huge already.
//
// The extensions that include this header share one cache: GCC exports the function-local
// static of OutputPool::instance() as a unique symbol, which the dynamic loader binds to one
// instance across the libraries despite RTLD_LOCAL. ctrlrnn/ops/output_cache.py finds out
// which extensions share a pool and reports each pool once.

#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/utils/pybind.h>

#include <c10/core/impl/alloc_cpu.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

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

  at::Tensor empty(at::IntArrayRef sizes, const at::TensorOptions& options) {
    int64_t numel = 1;
    for (auto s : sizes) numel *= s;
    const int64_t bytes = numel * static_cast<int64_t>(c10::elementSize(
                                      c10::typeMetaToScalarType(options.dtype())));
    if (limit_ == 0 || bytes < kMinPooledBytes) return at::empty(sizes, options);
    const int64_t cap = size_class(bytes);
    void* ptr = take(cap);
    if (ptr == nullptr) {
      ptr = alloc_block(cap);
      std::lock_guard<std::mutex> lock(mu_);
      fresh_ += 1;
    }
    return at::from_blob(
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

  // Whether large blocks are advised onto huge pages (CTRLRNN_HUGE_PAGES, default on).
  static bool huge_pages() {
    static const bool on = [] {
      const char* e = std::getenv("CTRLRNN_HUGE_PAGES");
      return e == nullptr || std::string(e) != "0";
    }();
    return on;
  }

  // A fresh block of cap bytes: 2 MiB-aligned and advised onto huge pages when it is that large
  // (header comment), else torch's CPU allocation. Either is released with c10::free_cpu (free).
  static void* alloc_block(int64_t cap) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    constexpr int64_t kHugePage = int64_t(2) << 20;
    if (huge_pages() && cap >= kHugePage) {
      void* p = nullptr;
      if (posix_memalign(&p, static_cast<size_t>(kHugePage), static_cast<size_t>(cap)) == 0) {
        madvise(p, static_cast<size_t>(cap), MADV_HUGEPAGE);  // advice: failure is harmless
        return p;
      }
    }
#endif
    return c10::alloc_cpu(static_cast<size_t>(cap));
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

// The outputs of independent recurrences run in one call (recurrences.h) without a stacking
// copy. Every recurrence runs the same code on tensors of the same sizes, so it makes the same
// sequence of pooled_empty requests; the call returns each output stacked on a leading dimension
// R. While recurrence r runs on a thread (a StackedScope there), that thread's k-th request is
// served by slice r of the k-th block of shape (R, sizes...), made by whichever recurrence asks
// first; afterwards an output that is slice r of one block in every recurrence r is that block,
// with nothing copied. For the largest tensors of a bidirectional layer (sequences, saved
// activations, input gradients) the copy it replaces was a read and a write of each of them.
// A request whose sizes or options differ from its block's gets a block of its own (the output
// is then stacked by copying, as before).
class StackedBlocks {
 public:
  explicit StackedBlocks(int64_t R) : R_(R) {}

  at::Tensor slice(size_t index, int64_t r, at::IntArrayRef sizes,
                   const at::TensorOptions& options) {
    std::lock_guard<std::mutex> lock(mu_);
    if (index == blocks_.size()) {
      std::vector<int64_t> stacked(sizes.begin(), sizes.end());
      stacked.insert(stacked.begin(), R_);
      blocks_.push_back(OutputPool::instance().empty(stacked, options));
      given_.push_back(false);
    }
    if (index < blocks_.size()) {
      const at::Tensor& block = blocks_[index];
      if (block.sizes().slice(1) == sizes && block.dtype() == options.dtype() &&
          block.device() == options.device()) {
        return block.select(0, r);
      }
    }
    return OutputPool::instance().empty(sizes, options);
  }

  // The block whose slices 0..R-1 `parts` are, exactly and each in its place, handed out once
  // (a second output on the same block would alias the first); else an undefined tensor.
  at::Tensor whole(const std::vector<at::Tensor>& parts) {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<int64_t>(parts.size()) != R_ || !parts[0].defined()) return {};
    for (size_t k = 0; k < blocks_.size(); ++k) {
      const at::Tensor& block = blocks_[k];
      if (given_[k] || block.numel() == 0 || block.data_ptr() != parts[0].data_ptr()) continue;
      for (int64_t r = 0; r < R_; ++r) {
        const at::Tensor& p = parts[static_cast<size_t>(r)];
        const at::Tensor s = block.select(0, r);
        if (!p.defined() || p.data_ptr() != s.data_ptr() || p.sizes() != s.sizes() ||
            p.strides() != s.strides() || p.dtype() != s.dtype() ||
            !p.storage().is_alias_of(s.storage())) {
          return {};
        }
      }
      given_[k] = true;
      return block;
    }
    return {};
  }

 private:
  std::mutex mu_;
  int64_t R_;
  std::vector<at::Tensor> blocks_;
  std::vector<bool> given_;
};

// While alive, this thread's pooled_empty requests are recurrence r's (StackedBlocks above).
class StackedScope {
 public:
  StackedScope(StackedBlocks* blocks, int64_t r) : prev_(current()), blocks_(blocks), r_(r) {
    current() = this;
  }
  ~StackedScope() { current() = prev_; }
  StackedScope(const StackedScope&) = delete;
  StackedScope& operator=(const StackedScope&) = delete;

  static StackedScope*& current() {
    static thread_local StackedScope* scope = nullptr;
    return scope;
  }

  at::Tensor next(at::IntArrayRef sizes, const at::TensorOptions& options) {
    return blocks_->slice(next_++, r_, sizes, options);
  }

 private:
  StackedScope* prev_;
  StackedBlocks* blocks_;
  int64_t r_;
  size_t next_ = 0;
};

inline at::Tensor pooled_empty(at::IntArrayRef sizes, const at::TensorOptions& options) {
  if (StackedScope* scope = StackedScope::current()) return scope->next(sizes, options);
  return OutputPool::instance().empty(sizes, options);
}

inline at::Tensor pooled_empty_like(const at::Tensor& like) {
  return pooled_empty(like.sizes(), like.options());
}

// x W^T + b (into a cached block, as cached_linear below) with weight's N rows taken as
// `groups` consecutive blocks of N / groups, the output laid out group first:
// (groups, ..., N / groups), each group's block contiguous. The input
// projections of independent recurrences that read the same x (a METAGROSS unit's base RNNs)
// arrive so without the permuted copy of a (..., N) output: one GEMM per group, each into its
// slice of one cached output block.
inline at::Tensor cached_linear_grouped(const at::Tensor& x, const at::Tensor& weight,
                                        const c10::optional<at::Tensor>& bias,
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
inline at::Tensor cached_linear(const at::Tensor& x, const at::Tensor& weight,
                                const c10::optional<at::Tensor>& bias) {
  return cached_linear_grouped(x, weight, bias, 1).squeeze(0);
}

// The input projections of R independent recurrences with their own weights, read by groups:
// x (G, rows, D) holds G inputs, weight (R, N, D) and bias (R, N) or None the recurrences'
// (R a multiple of G), and recurrence r reads x[r / (R / G)] (RCRN's two controllers and
// listener base of one direction read the same input, each direction its own). Returns
// (R, rows, N) in a cached output block, out[r] = x[r / (R / G)] W_r^T + b_r, each product on the
// path gemm_path.h chooses for its shape class: the stack the cell kernels take (recurrences.h),
// without a copy of any input per reader.
inline at::Tensor cached_linear_stacked(const at::Tensor& x, const at::Tensor& weight,
                                        const c10::optional<at::Tensor>& bias) {
  TORCH_CHECK(x.dim() == 3 && weight.dim() == 3 && x.size(0) >= 1 &&
                  weight.size(0) % x.size(0) == 0 && x.size(2) == weight.size(2),
              "cached_linear_stacked: expected x (G, rows, D) and weight (R, N, D) with G "
              "dividing R, got x ", x.sizes(), " and weight ", weight.sizes());
  TORCH_CHECK(x.device().is_cpu() && weight.device().is_cpu() &&
                  weight.scalar_type() == x.scalar_type(),
              "cached_linear_stacked: x and weight must be CPU tensors of one dtype");
  const int64_t R = weight.size(0), rows = x.size(1), N = weight.size(1);
  const int64_t per = R / x.size(0);
  if (bias.has_value()) {
    TORCH_CHECK(bias->dim() == 2 && bias->size(0) == R && bias->size(1) == N &&
                    bias->scalar_type() == x.scalar_type(),
                "cached_linear_stacked: bias must be (R, N) = (", R, ", ", N, "), got ",
                bias->sizes());
  }
  auto out = pooled_empty({R, rows, N}, x.options());
  for (int64_t r = 0; r < R; ++r) {
    auto o = out.select(0, r);
    if (bias.has_value()) o.copy_(bias->select(0, r).expand_as(o));
    gemm::into(o, x.select(0, r / per), weight.select(0, r).t(),
               /*accumulate=*/bias.has_value());
  }
  return out;
}

// Python bindings every extension adds: output_cache_stats, output_cache_release,
// output_cache_set_limit, cached_linear, cached_linear_grouped, cached_linear_stacked, and the
// GEMM path's (gemm_path.h).
inline void bind_output_pool(pybind11::module& m) {
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
