// ctrlrnn: which CPU runtime serves the kernels, tuned or plain, and which of the tuned
// runtime's mechanisms are switched off one by one.
//
// The tuned runtime is the output cache (pool.h), the GEMM chooser and its paths
// (gemm_paths.h, tiny_gemm.h, step_gemm.h), streaming stores (streaming.h) and the polynomial
// exp (vector_math.h). The plain runtime is torch alone: at::empty, at::mm_out and addmm_, std::exp
// and std::tanh, ordinary stores. Both compute the same results up to float rounding, so the
// kernel tests run under each and a kernel's correctness never rests on the machinery.
//
// Three mechanisms have no setting of their own elsewhere, so they can be switched off here
// (CTRLRNN_RUNTIME_OFF, handed in by configure): MKL's packed per-step GEMM, the polynomial
// exp and tanh, and the stacked recurrences' outputs without a copy. A benchmark can then
// measure each alone. Each counts its uses, so a test can see which path a call took.
//
// One kind per process. The state is a function-local static of an inline function, which GCC
// exports as a unique symbol, so every extension binds the same instance (pool.h says more).
// It is read at each call, so it can be switched between calls without a rebuild.

#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace ctrlrnn::runtime {

enum Kind : int { kTuned = 0, kPlain = 1 };

inline std::atomic<int>& kind_ref() {
  static std::atomic<int> kind{kTuned};
  return kind;
}

inline bool plain() { return kind_ref().load(std::memory_order_relaxed) == kPlain; }

inline const char* kind_name() { return plain() ? "plain" : "tuned"; }

// Sets the kind by name ("tuned" or "plain"); returns false, changing nothing, for any other.
inline bool set_kind(const std::string& name) {
  if (name != "tuned" && name != "plain") return false;
  kind_ref().store(name == "plain" ? kPlain : kTuned);
  return true;
}

// The switchable mechanisms, in the order of their names and counters.
enum Mechanism : int { kPackedGemm = 0, kPolyExp = 1, kStackedOutputs = 2, kMechanisms = 3 };

inline const char* mechanism_name(int m) {
  static const char* const names[kMechanisms] = {"packed_gemm", "poly_exp", "stacked_outputs"};
  return names[m];
}

// Bit m set: mechanism m is off.
inline std::atomic<int>& off_ref() {
  static std::atomic<int> off{0};
  return off;
}

// Whether mechanism m serves this call: the tuned runtime with m not switched off.
inline bool uses(Mechanism m) {
  return !plain() && (off_ref().load(std::memory_order_relaxed) & (1 << m)) == 0;
}

// The bits of the named mechanisms; -1 when a name is not one of them.
inline int off_bits(const std::vector<std::string>& names) {
  int bits = 0;
  for (const std::string& name : names) {
    int m = 0;
    while (m < kMechanisms && name != mechanism_name(m)) ++m;
    if (m == kMechanisms) return -1;
    bits |= 1 << m;
  }
  return bits;
}

// Switches off exactly the named mechanisms; returns false, changing nothing, on a name that is
// not one of them.
inline bool set_off(const std::vector<std::string>& names) {
  const int bits = off_bits(names);
  if (bits < 0) return false;
  off_ref().store(bits);
  return true;
}

inline std::vector<std::string> off_names() {
  std::vector<std::string> out;
  const int bits = off_ref().load();
  for (int m = 0; m < kMechanisms; ++m) {
    if (bits & (1 << m)) out.emplace_back(mechanism_name(m));
  }
  return out;
}

// How often each mechanism served, counted once per kernel call (never per element), so that
// counting stays cheap.
inline std::array<std::atomic<int64_t>, kMechanisms>& use_counts() {
  static std::array<std::atomic<int64_t>, kMechanisms> counts{};
  return counts;
}

inline void count_use(Mechanism m) { use_counts()[m].fetch_add(1, std::memory_order_relaxed); }

}  // namespace ctrlrnn::runtime
