// Standard normal float32 draws for CPU runs (samplers/normals.py): xoshiro256++ bits and the
// Box-Muller transform, 32 normals per loop iteration in SIMD lanes (GCC/Clang vector types).
//
// Bits: 16 xoshiro256++ streams (Blackman & Vigna 2018), two sets of 8 64-bit lanes, each lane's
// 256-bit state filled from SplitMix64 of the call's seed, as the generator's authors advise.
// Each 64-bit output is two 32-bit words: set a gives 16 words for the radii, set b 16 for the
// angles of the same 16 pairs.
//
// Transform: r = sqrt(-2 ln u1), u1 = (k + 1/2) 2^-32 in (0, 1) from a 32-bit word k, so the
// largest |z| is 6.76 (torch's CPU randn takes 24-bit uniforms: 5.77). The angle is a quadrant
// from a word's top 2 bits and a point of [-pi/4, pi/4) from its next 24; (cos, sin) of the
// point are Taylor polynomials (error < 3e-8), turned by the quadrant. ln is exponent * ln 2
// plus 2 atanh((m - 1) / (m + 1)) for the mantissa m in [sqrt(1/2), sqrt(2)) (error < 1e-8).
// No branch depends on a value, so every lane runs the same instructions.
//
// The numbers depend on the seed and n only. tests/test_normals.py recomputes them from the
// published algorithms in float64.

#include <cstdint>
#include <cstring>

namespace {

typedef uint64_t u64x8 __attribute__((vector_size(64)));
typedef uint32_t u32x16 __attribute__((vector_size(64)));
typedef int32_t i32x16 __attribute__((vector_size(64)));
typedef float f32x16 __attribute__((vector_size(64)));

uint64_t splitmix64(uint64_t &x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

inline u64x8 rotl(u64x8 x, int k) { return (x << k) | (x >> (64 - k)); }

struct Xoshiro256pp {  // 8 independent streams, one per lane
    u64x8 s0, s1, s2, s3;

    void seed(uint64_t &sm) {
        for (int l = 0; l < 8; ++l) {
            s0[l] = splitmix64(sm);
            s1[l] = splitmix64(sm);
            s2[l] = splitmix64(sm);
            s3[l] = splitmix64(sm);
        }
    }

    inline u64x8 next() {
        u64x8 out = rotl(s0 + s3, 23) + s0;
        u64x8 t = s1 << 17;
        s2 ^= s0;
        s3 ^= s1;
        s1 ^= s2;
        s0 ^= s3;
        s2 ^= t;
        s3 = rotl(s3, 45);
        return out;
    }
};

inline f32x16 minus_two_log(f32x16 u) {  // -2 ln u for normal, positive u
    i32x16 bits;
    memcpy(&bits, &u, sizeof bits);
    i32x16 exponent = ((bits >> 23) & 0xff) - 127;
    i32x16 mantissa_bits = (bits & 0x007fffff) | 0x3f800000;
    f32x16 m;
    memcpy(&m, &mantissa_bits, sizeof m);  // [1, 2)
    i32x16 high = m > 1.41421356f;         // -1 where true: halve m, raise the exponent
    m = high ? m * 0.5f : m;
    exponent -= high;
    f32x16 s = (m - 1.0f) / (m + 1.0f);  // |s| <= 0.172
    f32x16 z = s * s;
    f32x16 series = 2.0f + z * (0.6666666667f + z * (0.4f + z * (0.2857142857f + z * 0.2222222222f)));
    f32x16 e = __builtin_convertvector(exponent, f32x16);
    return -2.0f * (e * 0.693147180559945f + s * series);
}

}  // namespace

extern "C" void basin_normal_float32(float *out, int64_t n, uint64_t seed) {
    Xoshiro256pp radii, angles;
    radii.seed(seed);
    angles.seed(seed);
    float tail[32];
    for (int64_t i = 0; i < n; i += 32) {
        u64x8 a = radii.next(), b = angles.next();
        u32x16 k, w;
        memcpy(&k, &a, sizeof k);
        memcpy(&w, &b, sizeof w);
        f32x16 u1 = (__builtin_convertvector(k, f32x16) + 0.5f) * 2.3283064365386963e-10f;
        f32x16 r = minus_two_log(u1);
        for (int l = 0; l < 16; ++l) r[l] = __builtin_sqrtf(r[l]);  // vectorised (-fno-math-errno)
        u32x16 quadrant = w >> 30;
        f32x16 x = __builtin_convertvector((w >> 6) & 0xffffff, f32x16) * (1.0f / 16777216.0f);
        f32x16 t = (x - 0.5f) * 1.5707963267948966f, t2 = t * t;
        f32x16 sin_t = t * (1.0f + t2 * (-1.6666667e-1f + t2 * (8.3333333e-3f +
                                 t2 * (-1.98412698e-4f + t2 * 2.7557319e-6f))));
        f32x16 cos_t = 1.0f + t2 * (-0.5f + t2 * (4.16666667e-2f + t2 * (-1.38888889e-3f +
                                 t2 * 2.48015873e-5f)));
        // the angle is t + q pi/2, uniform on a whole turn: q right angles turn (cos t, sin t)
        // into (cos t, sin t), (-sin t, cos t), (-cos t, -sin t), (sin t, -cos t)
        i32x16 odd = (i32x16)((quadrant & 1) != 0);
        i32x16 flip_cos = (i32x16)((quadrant == 1) | (quadrant == 2));
        i32x16 flip_sin = (i32x16)(quadrant >= 2);
        f32x16 c = odd ? sin_t : cos_t, s = odd ? cos_t : sin_t;
        c = flip_cos ? -c : c;
        s = flip_sin ? -s : s;
        f32x16 z0 = r * c, z1 = r * s;
        float *dst = i + 32 <= n ? out + i : tail;
        memcpy(dst, &z0, sizeof z0);
        memcpy(dst + 16, &z1, sizeof z1);
        if (dst == tail) memcpy(out + i, tail, (n - i) * sizeof(float));
    }
}
