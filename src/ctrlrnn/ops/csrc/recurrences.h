// Independent recurrences of one cell in one call: the two directions of a bidirectional layer,
// RCRN's three RNNs of a direction, ... Every cell's forward and backward (<cell>.cpp) also take
// their tensors stacked on a leading dimension R (R recurrences with the same batch, lengths and
// sizes; weight_hh (R, G_h, H) instead of (G_h, H)), and return their outputs stacked the same
// way. The binding wraps the cell's function in Recurrences<...>::run, which
//
// * calls it as it is when weight_hh is not stacked;
// * else runs it once per recurrence r on the r-th slice of every tensor argument (lengths
//   excepted: the recurrences share the batch) and stacks each output. The outputs the cells
//   allocate with runtime::empty (their sequences, saved activations, input gradients: the large
//   ones) are written in place into their stacks (StackedBlocks, runtime/pool.h); the others are
//   copied into one.
//
// The recurrences run concurrently, one thread each, when that gives every thread work a single
// recurrence could not: the batch too small to split over the threads (over_batch_slices), or
// at least as many recurrences as threads. Inside that parallel region each recurrence runs its
// whole time loop on its thread (its per-step GEMMs single-threaded). Otherwise they run one
// after another, each over all threads. So a bidirectional layer at batch 1 keeps both cores of
// a 2-core machine busy, where one direction at a time could use only one.

#pragma once

#include "cells_common.h"

#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>

#include <cstddef>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace ctrlrnn::cells {

namespace recurrences_detail {

inline at::Tensor pick(const at::Tensor& t, int64_t r) { return t.select(0, r); }

inline c10::optional<at::Tensor> pick(const c10::optional<at::Tensor>& t, int64_t r) {
  if (t.has_value() && t->defined()) return t->select(0, r);
  return t;
}

inline bool pick(bool v, int64_t) { return v; }

// The r-th recurrence's arguments: every one sliced but the lengths (index L).
template <size_t L, typename Tuple, size_t... I>
auto slice_args(const Tuple& args, int64_t r, std::index_sequence<I...>) {
  return std::make_tuple([&]() -> std::decay_t<std::tuple_element_t<I, Tuple>> {
    if constexpr (I == L) {
      return std::get<I>(args);
    } else {
      return pick(std::get<I>(args), r);
    }
  }()...);
}

// at::stack(parts, 0) into an output of the runtime (runtime::empty): the stacked sequences and
// saved activations are the largest tensors of the call.
inline at::Tensor stack_pooled(const std::vector<at::Tensor>& parts) {
  auto sizes = parts[0].sizes().vec();
  sizes.insert(sizes.begin(), static_cast<int64_t>(parts.size()));
  at::Tensor out = ctrlrnn::runtime::empty(sizes, parts[0].options());
  for (size_t r = 0; r < parts.size(); ++r) out.select(0, static_cast<int64_t>(r)).copy_(parts[r]);
  return out;
}

}  // namespace recurrences_detail

// Whether R recurrences of batch B run concurrently (header comment).
inline bool recurrences_concurrently(int64_t R, int64_t B) {
  const int64_t threads = at::get_num_threads();
  if (R < 2 || threads < 2 || at::in_parallel_region()) return false;
  return B < 2 * kMinRows || R >= threads;
}

template <auto Fn, size_t WeightIdx, size_t BatchIdx, size_t LengthsIdx>
struct Recurrences;

// WeightIdx: the argument weight_hh (its rank says whether the call is stacked); BatchIdx: an
// argument whose dimension 1 is the batch when stacked; LengthsIdx: the shared lengths.
template <typename... A, std::vector<at::Tensor> (*Fn)(A...), size_t WeightIdx, size_t BatchIdx,
          size_t LengthsIdx>
struct Recurrences<Fn, WeightIdx, BatchIdx, LengthsIdx> {
  static std::vector<at::Tensor> run(A... args) {
    const auto all = std::forward_as_tuple(args...);
    const at::Tensor& weight = std::get<WeightIdx>(all);
    if (weight.dim() != 3) return Fn(args...);
    const int64_t R = weight.size(0);
    TORCH_CHECK(R >= 1, "weight_hh: a stack of recurrences needs at least one, got ",
                weight.sizes());
    const auto& probe = std::get<BatchIdx>(all);
    const int64_t B = probe.dim() >= 2 ? probe.size(1) : 0;
    using Tuple = std::tuple<std::decay_t<A>...>;
    const Tuple copy(args...);
    std::vector<std::vector<at::Tensor>> outs(static_cast<size_t>(R));
    ctrlrnn::runtime::StackedBlocks blocks(R);
    const auto one = [&](int64_t r) {
      const ctrlrnn::runtime::StackedScope scope(&blocks, r);
      auto sliced = recurrences_detail::slice_args<LengthsIdx>(
          copy, r, std::index_sequence_for<A...>{});
      outs[static_cast<size_t>(r)] = std::apply(Fn, sliced);
    };
    if (recurrences_concurrently(R, B)) {
      const at::ThreadLocalState state;
      at::parallel_for(0, R, 1, [&](int64_t r0, int64_t r1) {
        at::ThreadLocalStateGuard guard(state);
        for (int64_t r = r0; r < r1; ++r) one(r);
      });
    } else {
      for (int64_t r = 0; r < R; ++r) one(r);
    }
    std::vector<at::Tensor> stacked;
    for (size_t i = 0; i < outs[0].size(); ++i) {
      std::vector<at::Tensor> parts;
      parts.reserve(outs.size());
      for (auto& o : outs) parts.push_back(o[i]);
      at::Tensor whole = blocks.whole(parts);
      stacked.push_back(whole.defined() ? whole : recurrences_detail::stack_pooled(parts));
    }
    return stacked;
  }
};

}  // namespace ctrlrnn::cells
