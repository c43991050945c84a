/* The two transcendental functions the sampler needs, without libm.
 *
 * Why not libm: the first call to glibc's log1p and expm1 faults in libm's code and constant
 * tables, and the kernel's fault-around maps each fault's whole 64 KiB window: measured at
 * +112 KiB of libm in a profiled Node process's RSS (bench/README.md), more than the rest of
 * the profiler's own memory. Both functions here take only a few dozen instructions in this
 * file's pages, which every sample touches anyway.
 *
 * Accuracy: within a few units in the last place of libm's results over each function's whole
 * domain (test/native/fastmath.test.ts checks every binade against libm), far below what the
 * estimates need: a relative error e in the interval draw or the weight biases an estimate by
 * e, and the sampling tests resolve biases of 1e-3.
 *
 * Header-only (static inline) so that the test fixture can include it and compare. */
#ifndef MP_FASTMATH_H
#define MP_FASTMATH_H

#include <stdint.h>
#include <string.h>

/* ln(x) for finite x > 0 with x normal (>= 2^-1022); 0 for x == 1 exactly.
 * x = m * 2^e with m in [sqrt(1/2), sqrt(2)), and ln m = 2 atanh(s), s = (m - 1) / (m + 1),
 * |s| <= 0.1716: the series 2 (s + s^3/3 + s^5/5 + ...) has fallen below 2^-56 of its sum
 * by its twelfth term. m - 1 is exact (Sterbenz), so ln stays accurate near 1. */
static inline double mp_ln(double x) {
  uint64_t bits;
  memcpy(&bits, &x, sizeof(bits));
  int e = (int)((bits >> 52) & 0x7ff) - 1023;
  bits = (bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
  double m;
  memcpy(&m, &bits, sizeof(m));
  if (m > 1.4142135623730951) {
    m *= 0.5;
    e++;
  }
  double s = (m - 1.0) / (m + 1.0), s2 = s * s;
  double p = 1.0 / 25;
  p = 1.0 / 23 + s2 * p;
  p = 1.0 / 21 + s2 * p;
  p = 1.0 / 19 + s2 * p;
  p = 1.0 / 17 + s2 * p;
  p = 1.0 / 15 + s2 * p;
  p = 1.0 / 13 + s2 * p;
  p = 1.0 / 11 + s2 * p;
  p = 1.0 / 9 + s2 * p;
  p = 1.0 / 7 + s2 * p;
  p = 1.0 / 5 + s2 * p;
  p = 1.0 / 3 + s2 * p;
  const double ln2_hi = 0x1.62e42fefa3800p-1, ln2_lo = 0x1.ef35793c76730p-45; /* ln 2 = hi + lo, hi * e exact */
  return (double)e * ln2_hi + ((double)e * ln2_lo + 2.0 * s + 2.0 * s * s2 * p);
}

/* 1 - e^(-t) for t >= 0 (also +inf: 1), without the cancellation of 1 - exp(-t) at small t.
 * t < 1/2: the alternating series t - t^2/2! + t^3/3! - ..., summed until a term falls below
 * 2^-56 of the sum (by the 18th at most; a sample's t = size / R is mostly below 2^-10, where
 * four terms do: the weight is taken twice per sample).
 * t >= 1/2: e^(-t) = 2^-k e^(-r), k = round(t / ln 2), |r| <= ln2 / 2, by its Taylor series
 * to the 16th term, and 1 - e^(-t) >= 0.39 has no cancellation. Past t = 40, 1 - e^(-t) is 1 in
 * a double. */
static inline double mp_one_minus_exp_neg(double t) {
  if (!(t > 0)) return 0.0; /* also NaN */
  if (t < 0.5) {
    static const double inverse[19] = {0, 1, 1.0 / 2, 1.0 / 3, 1.0 / 4, 1.0 / 5, 1.0 / 6, 1.0 / 7, 1.0 / 8, 1.0 / 9,
                                       1.0 / 10, 1.0 / 11, 1.0 / 12, 1.0 / 13, 1.0 / 14, 1.0 / 15, 1.0 / 16, 1.0 / 17, 1.0 / 18};
    double term = t, sum = t;
    for (int k = 2; k <= 18; k++) {
      term *= -t * inverse[k];
      sum += term;
      if ((term < 0 ? -term : term) < 0x1.0p-56 * sum) break;
    }
    return sum;
  }
  if (t > 40.0) return 1.0;
  const double ln2_hi = 0x1.62e42fefa3800p-1, ln2_lo = 0x1.ef35793c76730p-45;
  int k = (int)(t * 1.4426950408889634 + 0.5);
  double r = (t - (double)k * ln2_hi) - (double)k * ln2_lo; /* t - k ln 2, k * hi exact */
  double q = 1.0;                                          /* e^(-r) = sum (-r)^n / n! */
  for (int n = 16; n >= 1; n--) q = 1.0 - r / (double)n * q;
  uint64_t bits = (uint64_t)(1023 - k) << 52; /* 2^-k, k <= 58: a normal double */
  double scale;
  memcpy(&scale, &bits, sizeof(scale));
  return 1.0 - q * scale;
}

#endif
