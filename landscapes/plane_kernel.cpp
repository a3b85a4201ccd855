// The full-data loss of an MLP at many points of a plane theta + a v0 + b v1 (MLP.plane_loss).
//
// The first layer is linear in its parameters, so its pre-activations on the plane are
// pre0 + a pre1 + b pre2, computed once by torch. What is left per point and sample is small
// (the digits MLP: 32 multiply-adds for the hidden layer, 320 for the output, a log-sum-exp over
// 10), and torch runs it as separate operations that write every intermediate to memory. Here
// each thread takes a tile of points and walks the data one SIMD register of samples at a time,
// one lane per sample, keeping a sample block's activations in L1 and its points' parameters
// beside them.
//
// One template serves float32 (16 lanes) and float64 (8 lanes: surfaces default to float64 so
// that ln|L - L0| resolves the smallest zoom domains). exp, log, tanh, sigmoid and erf are
// written out because the vector types have no libm: exp is Cephes' expf in float32 and a
// degree-13 Taylor polynomial after Cody-Waite reduction in float64 (both ~1 ulp), log an atanh
// series (~1 ulp), erf Abramowitz & Stegun 7.1.26 (absolute error <= 1.5e-7, so GELU is offered
// in float32 only; MLP.plane_loss runs torch's operations for a float64 GELU network).
// Comparisons are written so that a NaN propagates as it does in torch (a NaN < 0 is false), so
// a diverging point gives NaN, never a made-up finite loss.
#include <stdint.h>
#include <string.h>

#include <type_traits>
#include <vector>

// A 64-byte vector of T (one AVX-512 register; two or four where the CPU has narrower ones)
// and the integer vector of the same lane width, which comparisons return.
template <typename T> struct Simd;
template <> struct Simd<float> {
  typedef float vec __attribute__((vector_size(64)));
  typedef int32_t ivec __attribute__((vector_size(64)));
  static constexpr int lanes = 16;
};
template <> struct Simd<double> {
  typedef double vec __attribute__((vector_size(64)));
  typedef int64_t ivec __attribute__((vector_size(64)));
  static constexpr int lanes = 8;
};

template <typename V> using Element = std::remove_reference_t<decltype(V{}[0])>;

enum Activation { RELU = 0, TANH = 1, SIGMOID = 2, GELU = 3 };
enum Task { CLASSIFICATION = 0, REGRESSION = 1 };

template <typename V> static inline V splat(Element<V> x) { return V{} + x; }

template <typename V, typename T> static inline V load(const T *p) {
  V v;
  memcpy(&v, p, sizeof v);
  return v;
}

template <typename V, typename W> static inline V bitcast(W w) {
  V v;
  memcpy(&v, &w, sizeof v);
  return v;
}

static inline Simd<float>::vec vexp(Simd<float>::vec x) {
  typedef Simd<float>::vec vf;
  typedef Simd<float>::ivec vi;
  x = x > 88.3f ? splat<vf>(88.3f) : x;
  x = x < -87.3f ? splat<vf>(-87.3f) : x;
  vf n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;  // round(x / ln 2), by the float's ulp
  vf r = x - n * 0.693359375f + n * 2.12194440e-4f;      // x - n ln 2 in two parts
  vf p = splat<vf>(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * bitcast<vf>((__builtin_convertvector(n, vi) + 127) << 23);  // p 2^n
}

static inline Simd<double>::vec vexp(Simd<double>::vec x) {
  typedef Simd<double>::vec vd;
  typedef Simd<double>::ivec vl;
  x = x > 709.0 ? splat<vd>(709.0) : x;
  x = x < -708.0 ? splat<vd>(-708.0) : x;
  vd n = (x * 1.4426950408889634 + 6755399441055744.0) - 6755399441055744.0;
  vd r = x - n * 6.93147180369123816490e-01 - n * 1.90821492927058770002e-10;  // |r| <= 0.347
  vd p = splat<vd>(1.0 / 6227020800.0);  // sum_k r^k / k!, k <= 13: remainder < 4e-18
  const double inverse_factorials[] = {1.0 / 479001600, 1.0 / 39916800, 1.0 / 3628800,
                                       1.0 / 362880,    1.0 / 40320,    1.0 / 5040,
                                       1.0 / 720,       1.0 / 120,      1.0 / 24,
                                       1.0 / 6,         0.5,            1.0,
                                       1.0};
  for (double c : inverse_factorials) p = p * r + c;
  return p * bitcast<vd>((__builtin_convertvector(n, vl) + 1023) << 52);
}

// log x for x >= 1 (a sum of exponentials whose largest is 1): x = m 2^e, m in [0.707, 1.414),
// log m = 2 atanh t with t = (m - 1) / (m + 1), |t| <= 0.172, as an odd series in t.
static inline Simd<float>::vec vlog(Simd<float>::vec x) {
  typedef Simd<float>::vec vf;
  typedef Simd<float>::ivec vi;
  vi bits = bitcast<vi>(x);
  vi e = ((bits >> 23) & 0xff) - 127;
  vf m = bitcast<vf>((bits & 0x7fffff) | 0x3f800000);
  vi big = m > 1.41421356f;  // -1 where true
  m = big ? m * 0.5f : m;
  e -= big;
  vf t = (m - 1.0f) / (m + 1.0f), t2 = t * t;
  vf p = splat<vf>(1.0f / 11);
  for (int k = 9; k >= 1; k -= 2) p = p * t2 + 1.0f / k;
  vf result = __builtin_convertvector(e, vf) * 0.693147181f + 2.0f * t * p;
  return x == x ? result : x;  // NaN stays NaN
}

static inline Simd<double>::vec vlog(Simd<double>::vec x) {
  typedef Simd<double>::vec vd;
  typedef Simd<double>::ivec vl;
  vl bits = bitcast<vl>(x);
  vl e = ((bits >> 52) & 0x7ff) - 1023;
  vd m = bitcast<vd>((bits & 0xfffffffffffffLL) | 0x3ff0000000000000LL);
  vl big = m > 1.4142135623730951;
  m = big ? m * 0.5 : m;
  e -= big;
  vd t = (m - 1.0) / (m + 1.0), t2 = t * t;
  vd p = splat<vd>(1.0 / 23);  // next term 2 t^25 / 25 < 6e-21
  for (int k = 21; k >= 1; k -= 2) p = p * t2 + 1.0 / k;
  vd result = __builtin_convertvector(e, vd) * 0.6931471805599453 + 2.0 * t * p;
  return x == x ? result : x;
}

template <typename V> static inline V sigmoid(V x) { return 1 / (1 + vexp(-x)); }

template <typename V> static inline V verf(V x) {
  V ax = x < 0 ? -x : x;
  V t = 1 / (1 + 0.3275911f * ax);
  V p = splat<V>(1.061405429f);
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  V y = 1 - p * t * vexp(-ax * ax);
  return x < 0 ? -y : y;
}

// The activation on h[0 .. count), one loop per function, so no branch sits inside a loop.
template <typename V> static inline void activate(V *h, int count, int activation) {
  switch (activation) {
    case TANH:
      for (int k = 0; k < count; k++) h[k] = 2 * sigmoid(2 * h[k]) - 1;
      break;
    case SIGMOID:
      for (int k = 0; k < count; k++) h[k] = sigmoid(h[k]);
      break;
    case GELU:
      for (int k = 0; k < count; k++) h[k] = 0.5f * h[k] * (1 + verf(h[k] * 0.70710678118654752f));
      break;
    default:
      for (int k = 0; k < count; k++) h[k] = h[k] < 0 ? splat<V>(0) : h[k];
  }
}

// out[k0 .. k0 + KT) = W h + bias for one sample block; KT independent sums hide the latency
// of the multiply-adds, and a block of outputs stays in registers.
template <int KT, typename T, typename V>
static inline void rows(const T *weight, const T *bias, int fin, int k0, const V *h, V *out) {
  V acc[KT];
  for (int i = 0; i < KT; i++) acc[i] = splat<V>(bias[k0 + i]);
  for (int j = 0; j < fin; j++) {
    V hj = h[j];
    for (int i = 0; i < KT; i++) acc[i] += weight[(k0 + i) * fin + j] * hj;
  }
  for (int i = 0; i < KT; i++) out[k0 + i] = acc[i];
}

template <typename T, typename V>
static void layer(const T *weight, const T *bias, int fin, int fout, const V *h, V *out) {
  int tiles = (fout + 11) / 12;  // 10 outputs: one block of 10, not 8 + 2
  for (int t = 0; t < tiles; t++) {
    int k0 = fout * t / tiles, kt = fout * (t + 1) / tiles - k0;
    switch (kt) {
#define ROWS(K) \
  case K: rows<K>(weight, bias, fin, k0, h, out); break;
      ROWS(1) ROWS(2) ROWS(3) ROWS(4) ROWS(5) ROWS(6) ROWS(7) ROWS(8) ROWS(9) ROWS(10) ROWS(11)
      ROWS(12)
#undef ROWS
    }
  }
}

// out[p] += the summed loss of samples [0, n) at point p, for p in [0, points).
//   pre      [3][h1][padded] the first layer's pre-activations at theta, v0 and v1 (zero padded
//                            to a multiple of 16 samples)
//   tail     [points][dtail] the later layers' (weight [out][in], bias [out]) at each point
//   widths   [layers + 1]    h1, then each later layer's width; layers = 0: h1 is the output
//   labels   [padded]        classes, as integers as wide as T (classification)
//   targets  [outputs][padded] (regression)
template <typename T>
static void plane_loss(const T *pre, int h1, int n, int padded, const T *a, const T *b,
                       int points, const T *tail, int dtail, const int *widths, int layers,
                       int activation, int task, const void *labels, const T *targets,
                       double *out, int threads) {
  typedef typename Simd<T>::vec V;
  typedef typename Simd<T>::ivec I;
  constexpr int LANES = Simd<T>::lanes;
  int widest = 0;
  for (int l = 0; l <= layers; l++) widest = widths[l] > widest ? widths[l] : widest;
  int outputs = widths[layers];
  // points per tile: their parameters (~32 KB) stay in L1 while the samples stream past
  int tile = dtail > 0 ? 32768 / (int)sizeof(T) / dtail : 16;
  tile = tile < 1 ? 1 : tile > 16 ? 16 : tile;
  int tiles = (points + tile - 1) / tile;
#pragma omp parallel num_threads(threads)
  {
    std::vector<V> buffer(2 * (size_t)widest);
    std::vector<V> acc(tile);
    std::vector<double> total(tile);
    I lane;
    for (int i = 0; i < LANES; i++) lane[i] = i;
#pragma omp for schedule(static)
    for (int t = 0; t < tiles; t++) {
      int p0 = t * tile, count = points - p0 < tile ? points - p0 : tile;
      for (int q = 0; q < count; q++) acc[q] = splat<V>(0), total[q] = 0.0;
      for (int s = 0; s < padded; s += LANES) {
        for (int q = 0; q < count; q++) {
          int p = p0 + q;
          V *h = buffer.data(), *next = h + widest;
          for (int j = 0; j < h1; j++) {
            const T *row = pre + (size_t)j * padded + s;
            h[j] = load<V>(row) + a[p] * load<V>(row + (size_t)h1 * padded) +
                   b[p] * load<V>(row + 2 * (size_t)h1 * padded);
          }
          if (layers > 0) activate(h, h1, activation);
          const T *params = tail + (size_t)p * dtail;
          for (int l = 0; l < layers; l++) {
            int fin = widths[l], fout = widths[l + 1];
            layer(params, params + fin * fout, fin, fout, h, next);
            params += fin * fout + fout;
            if (l + 1 < layers) activate(next, fout, activation);
            V *swap = h;
            h = next, next = swap;
          }
          V loss = splat<V>(0);
          if (task == CLASSIFICATION) {  // log-sum-exp minus the label's logit
            V m = h[0];
            for (int k = 1; k < outputs; k++) m = h[k] > m ? h[k] : m;
            V sum = splat<V>(0), picked = splat<V>(0);
            I label = load<I>(static_cast<const Element<I> *>(labels) + s);
            for (int k = 0; k < outputs; k++) {
              sum += vexp(h[k] - m);
              picked = label == k ? h[k] : picked;
            }
            loss = m + vlog(sum) - picked;
          } else {  // squared error summed over outputs
            for (int k = 0; k < outputs; k++) {
              V e = h[k] - load<V>(targets + (size_t)k * padded + s);
              loss += e * e;
            }
          }
          acc[q] += lane + s < n ? loss : splat<V>(0);
          if ((s / LANES) % 16 == 15 || s + LANES >= padded) {  // to double every 16 blocks
            for (int i = 0; i < LANES; i++) total[q] += acc[q][i];
            acc[q] = splat<V>(0);
          }
        }
      }
      for (int q = 0; q < count; q++) out[p0 + q] += total[q];
    }
  }
}

#define ENTRY(NAME, T)                                                                         \
  extern "C" void NAME(const T *pre, int h1, int n, int padded, const T *a, const T *b,        \
                       int points, const T *tail, int dtail, const int *widths, int layers,    \
                       int activation, int task, const void *labels, const T *targets,         \
                       double *out, int threads) {                                             \
    plane_loss<T>(pre, h1, n, padded, a, b, points, tail, dtail, widths, layers, activation,   \
                  task, labels, targets, out, threads);                                        \
  }
ENTRY(basin_plane_loss_float32, float)
ENTRY(basin_plane_loss_float64, double)
