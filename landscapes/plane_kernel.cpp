// The full-data loss of an MLP at many points of a plane theta + a v0 + b v1 (MLP.plane_loss).
//
// The first layer is linear in its parameters, so its pre-activations on the plane are
// pre0 + a pre1 + b pre2, computed once by torch. What is left per point and sample is small
// (the digits MLP: 32 multiply-adds for the hidden layer, 320 for the output, a log-sum-exp over
// 10), and torch runs it as separate operations that write every intermediate to memory. Here
// each thread takes a tile of points and walks the data 16 samples at a time, one SIMD lane per
// sample, keeping a sample block's activations in L1 and its points' parameters beside them.
//
// exp, log, tanh, sigmoid and erf are written out because the vector types have no libm: exp is
// Cephes' expf (~1 ulp), log an atanh series (~1 ulp on [1, 2)), erf Abramowitz & Stegun 7.1.26
// (absolute error <= 1.5e-7). Comparisons are written so that a NaN propagates as it does in
// torch (a NaN < 0 is false), so a diverging point gives NaN, never a made-up finite loss.
#include <stdint.h>
#include <string.h>

#include <vector>

constexpr int LANES = 16;
typedef float vf __attribute__((vector_size(LANES * 4)));
typedef int32_t vi __attribute__((vector_size(LANES * 4)));

enum Activation { RELU = 0, TANH = 1, SIGMOID = 2, GELU = 3 };
enum Task { CLASSIFICATION = 0, REGRESSION = 1 };

static inline vf splat(float x) { return vf{} + x; }

static inline vf load(const float *p) {
  vf v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline vf vexp(vf x) {
  x = x > 88.3f ? splat(88.3f) : x;
  x = x < -87.3f ? splat(-87.3f) : x;
  vf n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;  // round(x / ln 2), by the float's ulp
  vf r = x - n * 0.693359375f + n * 2.12194440e-4f;      // x - n ln 2 in two parts
  vf p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  vi bits = (__builtin_convertvector(n, vi) + 127) << 23;  // 2^n
  vf scale;
  memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

static inline vf vlog(vf x) {  // x >= 1 here (a sum of exponentials whose largest is 1)
  vi bits;
  memcpy(&bits, &x, sizeof bits);
  vi e = ((bits >> 23) & 0xff) - 127;
  vi mantissa = (bits & 0x7fffff) | 0x3f800000;
  vf m;
  memcpy(&m, &mantissa, sizeof m);  // x = m 2^e, m in [1, 2)
  vi big = m > 1.41421356f;         // -1 where true: m / 2 in [0.707, 1), e + 1
  m = big ? m * 0.5f : m;
  e -= big;
  vf t = (m - 1.0f) / (m + 1.0f), t2 = t * t;  // log m = 2 atanh t, |t| <= 0.172
  vf p = splat(1.0f / 11);
  p = p * t2 + 1.0f / 9;
  p = p * t2 + 1.0f / 7;
  p = p * t2 + 1.0f / 5;
  p = p * t2 + 1.0f / 3;
  p = p * t2 + 1.0f;
  vf result = __builtin_convertvector(e, vf) * 0.693147181f + 2.0f * t * p;
  return x == x ? result : x;  // NaN stays NaN
}

static inline vf sigmoid(vf x) { return 1.0f / (1.0f + vexp(-x)); }

static inline vf verf(vf x) {
  vf ax = x < 0.0f ? -x : x;
  vf t = 1.0f / (1.0f + 0.3275911f * ax);
  vf p = splat(1.061405429f);
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  vf y = 1.0f - p * t * vexp(-ax * ax);
  return x < 0.0f ? -y : y;
}

static inline vf activate(vf x, int activation) {
  switch (activation) {
    case TANH: return 2.0f * sigmoid(2.0f * x) - 1.0f;
    case SIGMOID: return sigmoid(x);
    case GELU: return 0.5f * x * (1.0f + verf(x * 0.70710678f));
    default: return x < 0.0f ? splat(0.0f) : x;
  }
}

// out[k0 .. k0 + KT) = W h + bias for one sample block; KT independent sums hide the latency
// of the multiply-adds, and a block of outputs stays in registers.
template <int KT>
static inline void rows(const float *weight, const float *bias, int fin, int k0, const vf *h,
                        vf *out) {
  vf acc[KT];
  for (int i = 0; i < KT; i++) acc[i] = splat(bias[k0 + i]);
  for (int j = 0; j < fin; j++) {
    vf hj = h[j];
    for (int i = 0; i < KT; i++) acc[i] += weight[(k0 + i) * fin + j] * hj;
  }
  for (int i = 0; i < KT; i++) out[k0 + i] = acc[i];
}

static void layer(const float *weight, const float *bias, int fin, int fout, const vf *h,
                  vf *out) {
  int tiles = (fout + 11) / 12;  // 10 outputs: one tile of 10, not 8 + 2
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
//   pre      [3][h1][n16]  the first layer's pre-activations at theta, v0 and v1 (zero padded)
//   tail     [points][dtail] the later layers' (weight [out][in], bias [out]) at each point
//   widths   [layers + 1]  h1, then each later layer's width; layers = 0: h1 is the output
//   labels   [n16]         classes (classification); targets [outputs][n16] (regression)
extern "C" void basin_plane_loss(const float *pre, int h1, int n, int n16, const float *a,
                                 const float *b, int points, const float *tail, int dtail,
                                 const int *widths, int layers, int activation, int task,
                                 const int32_t *labels, const float *targets, double *out,
                                 int threads) {
  int widest = 0;
  for (int l = 0; l <= layers; l++) widest = widths[l] > widest ? widths[l] : widest;
  int outputs = widths[layers];
  // points per tile: their parameters (~32 KB) stay in L1 while the samples stream past
  int tile = dtail > 0 ? 8192 / dtail : 16;
  tile = tile < 1 ? 1 : tile > 16 ? 16 : tile;
  int tiles = (points + tile - 1) / tile;
#pragma omp parallel num_threads(threads)
  {
    std::vector<vf> buffer(2 * (size_t)widest);
    std::vector<vf> acc(tile);
    std::vector<double> total(tile);
    vi lane;
    for (int i = 0; i < LANES; i++) lane[i] = i;
#pragma omp for schedule(static)
    for (int t = 0; t < tiles; t++) {
      int p0 = t * tile, count = points - p0 < tile ? points - p0 : tile;
      for (int q = 0; q < count; q++) acc[q] = splat(0.0f), total[q] = 0.0;
      for (int s = 0; s < n16; s += LANES) {
        for (int q = 0; q < count; q++) {
          int p = p0 + q;
          vf *h = buffer.data(), *next = h + widest;
          for (int j = 0; j < h1; j++) {
            const float *row = pre + (size_t)j * n16 + s;
            vf x = load(row) + a[p] * load(row + (size_t)h1 * n16) +
                   b[p] * load(row + 2 * (size_t)h1 * n16);
            h[j] = layers > 0 ? activate(x, activation) : x;
          }
          const float *params = tail + (size_t)p * dtail;
          for (int l = 0; l < layers; l++) {
            int fin = widths[l], fout = widths[l + 1];
            layer(params, params + fin * fout, fin, fout, h, next);
            params += fin * fout + fout;
            if (l + 1 < layers)
              for (int k = 0; k < fout; k++) next[k] = activate(next[k], activation);
            vf *swap = h;
            h = next, next = swap;
          }
          vf loss;
          if (task == CLASSIFICATION) {  // log-sum-exp minus the label's logit
            vf m = h[0];
            for (int k = 1; k < outputs; k++) m = h[k] > m ? h[k] : m;
            vf sum = splat(0.0f), picked = splat(0.0f);
            vi label;
            memcpy(&label, labels + s, sizeof label);
            for (int k = 0; k < outputs; k++) {
              sum += vexp(h[k] - m);
              picked = label == k ? h[k] : picked;
            }
            loss = m + vlog(sum) - picked;
          } else {  // squared error summed over outputs
            loss = splat(0.0f);
            for (int k = 0; k < outputs; k++) {
              vf e = h[k] - load(targets + (size_t)k * n16 + s);
              loss += e * e;
            }
          }
          acc[q] += lane + s < n ? loss : splat(0.0f);
          if ((s / LANES) % 16 == 15 || s + LANES >= n16) {  // to double every 256 samples
            for (int i = 0; i < LANES; i++) total[q] += acc[q][i];
            acc[q] = splat(0.0f);
          }
        }
      }
      for (int q = 0; q < count; q++) out[p0 + q] += total[q];
    }
  }
}
