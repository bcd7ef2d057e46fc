// ctrlrnn runtime, tuned: a cache of freed blocks for the kernels' large outputs.
//
// Why: glibc serves blocks above its mmap threshold (at most 32 MiB) with a fresh mmap and
// returns them with munmap. The first write to each fresh page is a page fault and a page clear.
// A recurrent layer allocates the same large outputs every training step. Without a cache every
// step pays that first touch again. torch's CPU allocator has no such cache on desktop builds.
//
// What: OutputPool::empty(sizes, options) serves a request of kMinPooledBytes or more from the
// cache. When the tensor dies its block returns to the cache. Capacities round up to 8 size
// classes per power of two, so a request reuses a block of its class. The bytes held while unused are capped
// (CTRLRNN_OUTPUT_CACHE_MB, handed in by configure; 0 disables the cache), oldest evicted first.
// `ctrlrnn.ops.empty_cache()` frees them all.
//
// Huge pages: a block of 2 MiB or more is 2 MiB-aligned and advised MADV_HUGEPAGE. The kernels
// stream through these outputs each step; on 4 KiB pages every few rows is a TLB miss.
// CTRLRNN_HUGE_PAGES=0 turns the advice off. Under THP "never" the advice does nothing.
//
// The extensions share one cache: GCC exports the function-local static of
// OutputPool::instance() as a unique symbol, which the loader binds once across libraries despite
// RTLD_LOCAL. ctrlrnn/ops/output_cache.py reports each shared pool once.
//
// Kernels do not call this header: they ask runtime.h for an output (runtime::empty).

#pragma once

#include <ATen/ATen.h>

#include <c10/core/impl/alloc_cpu.h>

#include "mode.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <atomic>
#include <cstdint>
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

  // Whether large blocks are advised onto huge pages (CTRLRNN_HUGE_PAGES, default on; set by
  // configure).
  static std::atomic<bool>& huge_pages_ref() {
    static std::atomic<bool> on{true};
    return on;
  }
  static bool huge_pages() { return huge_pages_ref().load(); }

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
  // The limit is 512 MiB until configure hands in CTRLRNN_OUTPUT_CACHE_MB.
  OutputPool() : limit_(int64_t(512) << 20) {}

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
// sequence of runtime::empty requests; the call returns each output stacked on a leading dimension
// R. While recurrence r runs on a thread (a StackedScope there), that thread's k-th request is
// served by slice r of the k-th block of shape (R, sizes...), made by whichever recurrence asks
// first; afterwards an output that is slice r of one block in every recurrence r is that block,
// with nothing copied. For the largest tensors of a bidirectional layer (sequences, saved
// activations, input gradients) the copy it saves is a read and a write of each of them.
// A request whose sizes or options differ from its block's gets a block of its own, and its
// output is stacked by copying. With stacked_outputs off (mode.h) runtime::empty skips the
// scope, so every output is stacked by copying.
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
      runtime::count_use(runtime::kStackedOutputs);
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

// While alive, this thread's runtime::empty requests are recurrence r's (StackedBlocks above).
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

}  // namespace ctrlrnn
