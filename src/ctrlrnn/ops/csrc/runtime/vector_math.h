// ctrlrnn runtime: the activations of the kernels' pointwise loops, tuned and plain.
//
// Tuned float: exp by a branch-free polynomial, so the loops that call it vectorise without
// -ffast-math (glibc's expf is a call per element). Two flavours of it, each kept as its kernels
// were tested with:
// * Saturating (the elementwise kernels: scan, QRNN pooling, RCRN listener, METAGROSS level):
//   the argument is clamped and NaN restored by one final select.
// * Act<float> (the fused cells): selects at both ends give std::exp's values there, and tanh
//   takes an odd series near 0, where 1 - 2 / (exp(2x) + 1) loses relative accuracy.
// Plain: std::exp and std::tanh, also the tuned runtime's with poly_exp off (mode.h). double is
// std::exp and std::tanh in every flavour.
// All give torch's special values: sigmoid(+Inf) = 1, sigmoid(-Inf) = 0, tanh(+-Inf) = +-1, and
// NaN stays NaN.
//
// with_math<T, Tuned>(f) calls f with the flavour the runtime asks for (mode.h), so a kernel
// instantiates its loops for each flavour and picks one per call, never per element.

#pragma once

#include "mode.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace ctrlrnn::runtime {

// exp for float without branches. Cody-Waite range reduction, degree-6 polynomial, about 2 ulp
// on [-87, 88]. The clamp keeps the arithmetic finite and saturates both ends. At kExpHi and
// above (+Inf included) the scale 2^n is 2^128 = +Inf. At kExpLo and below (-Inf included) the
// result is FLT_MIN, not 0; sigmoid and tanh read it only through 1 + exp, where both round alike.
// NaN clamps to a finite value; the callers restore it.
inline float exp_saturating(float x) {
  // ln(FLT_MAX): round(x / ln 2) is 128 from ~88.376 up, so everything above overflows to +Inf
  constexpr float kExpHi = 88.7228391117f;
  constexpr float kExpLo = -87.3365447504f;  // exp(kExpLo) = FLT_MIN, the smallest normal
  const float xc = std::min(kExpHi, std::max(kExpLo, x));
  const float n = std::floor(xc * 1.44269504088896341f + 0.5f);
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;  // n = 128: the bits of +Inf
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}
inline double exp_saturating(double x) { return std::exp(x); }

// The elementwise kernels' tuned flavour.
struct Saturating {
  template <typename T>
  static T sigmoid(T x) {
    const T y = T(1) / (T(1) + exp_saturating(-x));
    return x != x ? x : y;  // NaN stays NaN
  }
  // tanh(x) = 1 - 2 / (exp(2x) + 1) saturates exactly at both ends.
  template <typename T>
  static T tanh(T x) {
    if constexpr (std::is_same_v<T, double>) {
      return std::tanh(x);
    } else {
      const T y = T(1) - T(2) / (exp_saturating(T(2) * x) + T(1));
      return x != x ? x : y;
    }
  }
};

// The fused cells' tuned flavour.
template <typename T>
struct Act;

template <>
struct Act<double> {
  static double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
  static double tanh(double x) { return std::tanh(x); }
};

template <>
struct Act<float> {
  // The polynomial on [-87, 88]; std::exp's values beyond: +Inf above ln(FLT_MAX), 0 below the
  // smallest normal's logarithm, NaN for NaN. NaN clamps to -87, so no NaN is converted to int.
  // The ends are selects, which vector code turns into blends.
  static float exp(float x) {
    float xc = x > -87.0f ? x : -87.0f;  // NaN -> -87
    xc = xc < 88.0f ? xc : 88.0f;
    // n = round(x / ln 2) by the 1.5 * 2^23 trick (std::floor blocks gcc's vectoriser).
    const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof(scale));
    float y = p * scale;
    y = x < -87.3365447504f ? 0.0f : y;                                    // below FLT_MIN
    y = x > 88.7228391117f ? std::numeric_limits<float>::infinity() : y;  // above FLT_MAX
    return x != x ? x : y;                                                 // NaN stays NaN
  }
  static float sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }
  // Near 0 the odd series; elsewhere 1 - 2 / (exp(2x) + 1), exactly +-1 at +-Inf. NaN fails
  // the comparison and takes the second form, which gives NaN.
  static float tanh(float x) {
    const float big = 1.0f - 2.0f / (exp(2.0f * x) + 1.0f);
    const float x2 = x * x;
    const float small =
        x * (1.0f + x2 * (-0.333333333333f +
                          x2 * (0.133333333333f + x2 * (-0.053968253968f + x2 * 0.021869488536f))));
    return (x2 < 0.01f) ? small : big;
  }
};

// The plain flavour: the C library's functions.
struct Plain {
  template <typename T>
  static T sigmoid(T x) {
    return T(1) / (T(1) + std::exp(-x));
  }
  template <typename T>
  static T tanh(T x) {
    return std::tanh(x);
  }
};

// Calls f(Tuned{}) or, for float under the plain runtime or with poly_exp off (mode.h),
// f(Plain{}). double has one flavour.
template <typename T, typename Tuned, typename F>
inline void with_math(const F& f) {
  if constexpr (std::is_same_v<T, float>) {
    if (!uses(kPolyExp)) {
      f(Plain{});
      return;
    }
    count_use(kPolyExp);
  }
  f(Tuned{});
}

}  // namespace ctrlrnn::runtime
