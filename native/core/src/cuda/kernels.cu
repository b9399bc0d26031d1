// clip-parity CUDA kernels: every op of the cpu store (native/core/src/store.rs) on device memory.
//
// Compiled at run time by NVRTC (native/core/src/cuda/nvrtc.rs) with --fmad=false, and by g++ for the
// CPU emulation used in tests (native/core/src/cuda/emu.hpp): the source includes no header and
// uses only builtins that both provide.
//
// Bitwise rules (what makes the results equal to the cpu backend's):
//  - no contraction: every rounding operation is an explicit _rn intrinsic, and NVRTC runs with
//    --fmad=false anyway;
//  - conversions between f32, bf16 and f16 are done on bit patterns, ported from the cpu code
//    (dtype.rs: f32_to_bf16_bits, f16_bits_to_f32; the `half` crate's f32 -> f16);
//  - NaN: GPU arithmetic returns one canonical NaN, x86 returns the NaN operand (quieted) or, for an
//    invalid operation such as inf * 0, its default NaN. `mul_host` reproduces the host's rule so
//    that scale() writes the same NaN bit patterns as the cpu backend (hashes compare raw bytes);
//  - reductions whose result must equal the cpu's exactly are exact (integer bins, max of bit
//    patterns, counts, wrapping u32 sums), so their order does not matter. The float64 sums of
//    sumAbsPow are deterministic (fixed chunks and trees, independent of the GPU) but summed in a
//    different order than the cpu's 32 lanes: equal within the fp32 tolerance class, not bitwise.

typedef unsigned long long u64;
typedef long long i64;
typedef unsigned int u32;
typedef unsigned short u16;

#define CP_FN __device__ __forceinline__

// Elements per block of the float64 sums: blockDim.x * CP_SUM_ITEMS (must match cuda/store.rs).
#define CP_SUM_ITEMS 32
// Elements per block of the exact bins (must match cuda/store.rs). With p = 2 a bin gains less
// than 2^48 per element, so 2^14 elements cannot overflow a u64 shared bin (2^62).
#define CP_EXACT_CHUNK 16384
// Largest block size the kernels are written for (shared arrays).
#define CP_MAX_BLOCK 256
// Dimensions of the index geometry passed by value (more are handled on the host).
#define CP_MAXD 8

// ---------------------------------------------------------------- scalar helpers

CP_FN u64 splitmix64(u64 x) {
  x += 0x9E3779B97F4A7C15ULL;
  u64 z = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

CP_FN bool f32_isnan(u32 b) { return (b & 0x7fffffffu) > 0x7f800000u; }

// dtype.rs f32_to_bf16_bits: round to nearest even; NaN keeps its top bits and gets the quiet bit.
CP_FN u32 f32_to_bf16_bits(u32 x) {
  if (f32_isnan(x)) return ((x >> 16) | 0x40u) & 0xffffu;
  u32 r = ((x >> 16) & 1u) + 0x7fffu;
  return ((x + r) >> 16) & 0xffffu;
}

CP_FN u32 bf16_bits_to_f32(u32 h) { return h << 16; }

// dtype.rs f16_bits_to_f32 (exact; NaN payloads kept), on integers.
CP_FN u32 f16_bits_to_f32(u32 h) {
  u32 sign = (h & 0x8000u) << 16;
  u32 em = h & 0x7fffu;
  if (em >= 0x7c00u) return sign | 0x7f800000u | ((em & 0x3ffu) << 13);
  if (em >= 0x0400u) return sign | ((em + ((127u - 15u) << 10)) << 13);
  if (em == 0u) return sign;
  // subnormal: em * 2^-24 with its top bit at position p (0..9)
  int p = 31 - __clz((int)em);
  return sign | ((u32)(p + 103) << 23) | ((em << (23 - p)) & 0x7fffffu);
}

// The `half` crate's f32 -> f16 (round to nearest even; NaN: quiet bit plus the top payload bits).
CP_FN u32 f32_to_f16_bits(u32 x) {
  u32 sign = x & 0x80000000u;
  u32 exp = x & 0x7f800000u;
  u32 man = x & 0x007fffffu;
  if (exp == 0x7f800000u) {
    u32 nan_bit = man == 0u ? 0u : 0x0200u;
    return (sign >> 16) | 0x7c00u | nan_bit | (man >> 13);
  }
  u32 half_sign = sign >> 16;
  int half_exp = (int)(exp >> 23) - 127 + 15;
  if (half_exp >= 0x1f) return half_sign | 0x7c00u;
  if (half_exp <= 0) {
    if (14 - half_exp > 24) return half_sign;
    u32 m = man | 0x00800000u;
    u32 half_man = m >> (14 - half_exp);
    u32 round_bit = 1u << (13 - half_exp);
    if ((m & round_bit) != 0u && (m & (3u * round_bit - 1u)) != 0u) half_man += 1u;
    return half_sign | half_man;
  }
  u32 he = (u32)half_exp << 10;
  u32 hm = man >> 13;
  u32 round_bit = 0x1000u;
  if ((man & round_bit) != 0u && (man & (3u * round_bit - 1u)) != 0u) return (half_sign | he | hm) + 1u;
  return half_sign | he | hm;
}

// 2^n for n in [-1074, 1023] (dtype.rs pow2).
CP_FN double cp_pow2(int n) {
  if (n >= -1022) return __longlong_as_double((i64)((u64)(n + 1023) << 52));
  return __longlong_as_double((i64)(1ULL << (n + 1074)));
}

// dtype.rs round_f64_to: round a finite double to a format of `prec` significand bits, exponent
// range [emin, emax], nearest even, gradual underflow, overflow to infinity. Zero and non-finite
// values are returned unchanged.
CP_FN double round_f64_to(double x, int prec, int emin, int emax) {
  u64 bits = (u64)__double_as_longlong(x);
  u64 abits = bits & 0x7fffffffffffffffULL;
  if (abits == 0ULL || abits >= 0x7ff0000000000000ULL) return x;
  double a = __longlong_as_double((i64)abits);
  int be = (int)(abits >> 52);
  int e = be == 0 ? -1074 + (63 - __clzll((i64)(abits & 0xfffffffffffffULL))) : be - 1023;
  int q = (e > emin ? e : emin) - (prec - 1);
  double scaled = __dmul_rn(a, cp_pow2(-q)); // exact
  double r = __dmul_rn(rint(scaled), cp_pow2(q)); // exact
  if (r >= cp_pow2(emax + 1)) r = __longlong_as_double((i64)0x7ff0000000000000ULL);
  u64 rb = (u64)__double_as_longlong(r) | (bits & 0x8000000000000000ULL);
  return __longlong_as_double((i64)rb);
}

// f32 product a * b with the host's NaN rule (x86: a NaN operand comes back quieted, the first
// one when both are NaN; an invalid operation gives the default NaN `dnan`).
CP_FN u32 mul_host(u32 a, u32 b, u32 dnan) {
  if (f32_isnan(a)) return a | 0x00400000u;
  if (f32_isnan(b)) return b | 0x00400000u;
  u32 r = __float_as_uint(__fmul_rn(__uint_as_float(a), __uint_as_float(b)));
  return f32_isnan(r) ? dnan : r;
}

// ---------------------------------------------------------------- dtypes

struct DF32 {
  typedef u32 raw;
  static CP_FN u32 exp_mask() { return 0x7f800000u; }
  static CP_FN u32 abs_mask() { return 0x7fffffffu; }
  static CP_FN u32 to_f32(u32 r) { return r; }
  static CP_FN u32 from_f32(u32 f) { return f; }
  // finite inputs (the generator's values)
  static CP_FN u32 from_f64(double d) { return __float_as_uint(__double2float_rn(d)); }
};

struct DBF16 {
  typedef u16 raw;
  static CP_FN u32 exp_mask() { return 0x7f80u; }
  static CP_FN u32 abs_mask() { return 0x7fffu; }
  static CP_FN u32 to_f32(u32 r) { return bf16_bits_to_f32(r); }
  static CP_FN u32 from_f32(u32 f) { return f32_to_bf16_bits(f); }
  static CP_FN u32 from_f64(double d) {
    return f32_to_bf16_bits(__float_as_uint(__double2float_rn(round_f64_to(d, 8, -126, 127))));
  }
};

struct DF16 {
  typedef u16 raw;
  static CP_FN u32 exp_mask() { return 0x7c00u; }
  static CP_FN u32 abs_mask() { return 0x7fffu; }
  static CP_FN u32 to_f32(u32 r) { return f16_bits_to_f32(r); }
  static CP_FN u32 from_f32(u32 f) { return f32_to_f16_bits(f); }
  static CP_FN u32 from_f64(double d) {
    return f32_to_f16_bits(__float_as_uint(__double2float_rn(round_f64_to(d, 11, -14, 15))));
  }
};

template <class D>
CP_FN bool same_bits(u32 a, u32 b) {
  return a == b || (((a & D::abs_mask()) > D::exp_mask()) && ((b & D::abs_mask()) > D::exp_mask()));
}

// ---------------------------------------------------------------- index geometry

// A block (hyper-rectangle) of a global tensor, local element j -> global flat index:
// j is decomposed row-major over len[0..ndim) and the coordinates weighted by gstride.
struct Geom {
  u64 len[CP_MAXD];
  u64 gstride[CP_MAXD];
  u64 gstart;
  u32 ndim;
  u32 pad;
};

CP_FN u64 geom_index(const Geom& g, u64 j) {
  u64 off = g.gstart;
  for (int k = (int)g.ndim - 1; k >= 0; --k) {
    u64 l = g.len[k];
    off += (j % l) * g.gstride[k];
    j /= l;
  }
  return off;
}

// A box copy: element j of the box (row-major over len) goes from src[soff + sum c_k sstride_k]
// to dst[doff + sum c_k dstride_k].
struct Box {
  u64 len[CP_MAXD];
  u64 sstride[CP_MAXD];
  u64 dstride[CP_MAXD];
  u64 soff;
  u64 doff;
  u64 n;
  u32 ndim;
  u32 pad;
};

// The generator parameters (SPEC section 5) of one fill or verify.
struct GenArgs {
  u64 key;
  double unit_d;   // 2^(e - m + 1)
  u32 m;           // 24 / 8 / 11
  u32 mode;        // 0: generator, 1: every element = const_bits
  u32 exact;       // 1: q * unit is exact in the tensor's dtype (the cpu's f32 path)
  u32 unit_f;      // f32 bits of unit (when exact)
  u32 const_bits;  // raw bits (mode 1)
  u32 special_bits;
  u64 special_local; // local index whose value is special_bits; ~0 for none
};

template <class D>
CP_FN u32 gen_raw(const GenArgs& a, const Geom& g, u64 j) {
  if (j == a.special_local) return a.special_bits;
  if (a.mode != 0u) return a.const_bits;
  u64 bits = splitmix64(a.key + geom_index(g, j));
  i64 q = (i64)(bits >> (64u - a.m)) - ((i64)1 << (a.m - 1u));
  if (a.exact) return D::from_f32(__float_as_uint(__fmul_rn((float)q, __uint_as_float(a.unit_f))));
  return D::from_f64(__dmul_rn((double)q, a.unit_d));
}

template <class D>
CP_FN u32 scale_raw(u32 x, u32 c, u32 dnan) {
  return D::from_f32(mul_host(D::to_f32(x), c, dnan));
}

CP_FN u64 grid_threads() { return (u64)gridDim.x * (u64)blockDim.x; }
CP_FN u64 global_tid() { return (u64)blockIdx.x * (u64)blockDim.x + (u64)threadIdx.x; }

// ---------------------------------------------------------------- elementwise kernels

template <class D>
__device__ void fill_gen_impl(typename D::raw* out, u64 n, Geom g, GenArgs a) {
  for (u64 j = global_tid(); j < n; j += grid_threads()) out[j] = (typename D::raw)gen_raw<D>(a, g, j);
}

template <class D>
__device__ void scale_impl(typename D::raw* x, u64 n, u32 c, u32 dnan) {
  for (u64 j = global_tid(); j < n; j += grid_threads()) x[j] = (typename D::raw)scale_raw<D>(x[j], c, dnan);
}

// first[0] = min over j of the local indices where x[j] is not bitwise scale(gen(j)).
template <class D>
__device__ void verify_impl(const typename D::raw* x, u64 n, Geom g, GenArgs a, u32 c, u32 dnan, u64* first) {
  for (u64 j = global_tid(); j < n; j += grid_threads()) {
    u32 want = scale_raw<D>(gen_raw<D>(a, g, j), c, dnan);
    if (!same_bits<D>(want, x[j])) atomicMin(first, j);
  }
}

template <class D>
__device__ void compare_impl(const typename D::raw* a, const typename D::raw* b, u64 n, u64* first) {
  for (u64 j = global_tid(); j < n; j += grid_threads()) {
    if (!same_bits<D>(a[j], b[j])) atomicMin(first, j);
  }
}

template <class T>
__device__ void fill_const_impl(T* out, u64 n, u32 v) {
  for (u64 j = global_tid(); j < n; j += grid_threads()) out[j] = (T)v;
}

template <class T>
__device__ void copy_box_impl(T* dst, const T* src, Box b) {
  for (u64 j = global_tid(); j < b.n; j += grid_threads()) {
    u64 r = j, so = b.soff, dof = b.doff;
    for (int k = (int)b.ndim - 1; k >= 0; --k) {
      u64 l = b.len[k];
      u64 c = r % l;
      r /= l;
      so += c * b.sstride[k];
      dof += c * b.dstride[k];
    }
    dst[dof] = src[so];
  }
}

// ---------------------------------------------------------------- reductions

// |x|^p of an f32 value a = |x| >= 0 widened to f64, for p other than 1 and 2: for p = 3 and 1.5 the
// correctly rounded value by abspow.rs's operations (the same bits as the cpu backend: x*x is exact,
// the fma and square root are exact-rounding intrinsics); other p the device's pow, which is not
// correctly rounded (the cpu backend's CORE-MATH pow is): a float64 sum within the fp32 class, as the
// order of the sums already is.
CP_FN double abs_pow(double a, double p) {
  if (p == 3.0) return __dmul_rn(__dmul_rn(a, a), a);
  if (p == 1.5) {
    if (!(a > 0.0 && a < __longlong_as_double((i64)0x7ff0000000000000ULL))) return a; // 0, inf, NaN
    double sq = __dmul_rn(a, a);
    double ch = __dmul_rn(sq, a);
    double cl = __fma_rn(sq, a, -ch);
    double s = __dsqrt_rn(ch);
    return __dadd_rn(s, __ddiv_rn(__dadd_rn(__fma_rn(-s, s, ch), cl), __dadd_rn(s, s)));
  }
  return pow(a, p);
}

// Deterministic float64 sums: block b sums elements [b*C, (b+1)*C), C = blockDim.x * CP_SUM_ITEMS,
// thread t the elements b*C + t + k*blockDim.x in increasing k, then a fixed tree over the threads;
// partial[b] is the block's sum. sum_partials adds the partials the same way in one block.
template <class D, int OP>
__device__ void sum_impl(const typename D::raw* x, u64 n, double p, double* partial) {
  __shared__ double s[CP_MAX_BLOCK];
  const u64 bd = blockDim.x;
  const u64 base = (u64)blockIdx.x * bd * CP_SUM_ITEMS + threadIdx.x;
  // all loads first (many in flight per thread), then the additions in order
  u32 r[CP_SUM_ITEMS];
#pragma unroll
  for (int k = 0; k < CP_SUM_ITEMS; ++k) {
    u64 j = base + (u64)k * bd;
    r[k] = j < n ? (u32)x[j] : 0u;
  }
  double acc = 0.0;
#pragma unroll
  for (int k = 0; k < CP_SUM_ITEMS; ++k) {
    if (base + (u64)k * bd < n) {
      double v = (double)__uint_as_float(D::to_f32(r[k]));
      double t;
      if (OP == 0) t = __dmul_rn(v, v);
      else if (OP == 1) t = fabs(v);
      else t = abs_pow(fabs(v), p);
      acc = __dadd_rn(acc, t);
    }
  }
  s[threadIdx.x] = acc;
  __syncthreads();
  for (u32 w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) s[threadIdx.x] = __dadd_rn(s[threadIdx.x], s[threadIdx.x + w]);
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

extern "C" __global__ void sum_partials(const double* partial, u64 count, double* out) {
  __shared__ double s[CP_MAX_BLOCK];
  double acc = 0.0;
  for (u64 i = threadIdx.x; i < count; i += blockDim.x) acc = __dadd_rn(acc, partial[i]);
  s[threadIdx.x] = acc;
  __syncthreads();
  for (u32 w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) s[threadIdx.x] = __dadd_rn(s[threadIdx.x], s[threadIdx.x + w]);
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = s[0];
}

// Exact sums of |x| (P2 = 0) or x^2 (P2 = 1) over the finite elements: x (widened exactly to f32)
// is M * 2^E with M < 2^24; M or M^2 is added to the u64 bin of x's biased exponent field. Block b
// handles elements [b*CP_EXACT_CHUNK, ...) into shared bins (one set per group of 32 threads), then
// adds each bin into the global 128-bit bins[2k] (low word) / bins[2k + 1] (high word) with a carry.
// The host turns the 255 bins into the integer N exactly as exact.rs does (cuda/store.rs).
template <class D, int P2>
__device__ void exact_impl(const typename D::raw* x, u64 n, u64* bins) {
  __shared__ u64 sb[CP_MAX_BLOCK / 32][256];
  const u32 groups = blockDim.x >= 32 ? blockDim.x / 32 : 1;
  const u32 grp = blockDim.x >= 32 ? threadIdx.x / 32 : 0;
  for (u32 i = threadIdx.x; i < groups * 256u; i += blockDim.x) sb[i / 256u][i % 256u] = 0ULL;
  __syncthreads();
  const u64 lo = (u64)blockIdx.x * CP_EXACT_CHUNK;
  const u64 hi = lo + CP_EXACT_CHUNK < n ? lo + CP_EXACT_CHUNK : n;
  for (u64 j = lo + threadIdx.x; j < hi; j += blockDim.x) {
    u32 b = D::to_f32(x[j]);
    u32 k = (b >> 23) & 0xffu;
    if (k == 255u) continue; // Inf, NaN: skipped (the cpu's exact sums are over finite elements)
    u64 m = (u64)((b & 0x7fffffu) | (k != 0u ? 0x800000u : 0u));
    if (m != 0ULL) atomicAdd(&sb[grp][k], P2 ? m * m : m);
  }
  __syncthreads();
  for (u32 k = threadIdx.x; k < 255u; k += blockDim.x) {
    u64 s = 0ULL;
    for (u32 g = 0; g < groups; ++g) s += sb[g][k];
    if (s != 0ULL) {
      u64 old = atomicAdd(&bins[2u * k], s);
      if (old + s < old) atomicAdd(&bins[2u * k + 1u], 1ULL);
    }
  }
}

// Max of the absolute-value bit patterns (NaN patterns are above Inf): out[0] = max.
template <class D>
__device__ void max_abs_impl(const typename D::raw* x, u64 n, u32* out) {
  __shared__ u32 s[CP_MAX_BLOCK];
  u32 m = 0u;
  for (u64 j = global_tid(); j < n; j += grid_threads()) {
    u32 a = (u32)x[j] & D::abs_mask();
    m = a > m ? a : m;
  }
  s[threadIdx.x] = m;
  __syncthreads();
  for (u32 w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w && s[threadIdx.x + w] > s[threadIdx.x]) s[threadIdx.x] = s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0 && s[0] != 0u) atomicMax(out, s[0]);
}

template <class D>
__device__ void nonfinite_impl(const typename D::raw* x, u64 n, u64* out) {
  __shared__ u64 s[CP_MAX_BLOCK];
  u64 c = 0ULL;
  for (u64 j = global_tid(); j < n; j += grid_threads()) c += (((u32)x[j] & D::exp_mask()) == D::exp_mask()) ? 1ULL : 0ULL;
  s[threadIdx.x] = c;
  __syncthreads();
  for (u32 w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0 && s[0] != 0ULL) atomicAdd(out, s[0]);
}

// Wrapping u32 sum of `words` little-endian 32-bit words (the read-bandwidth baseline).
extern "C" __global__ void read_words(const u32* w, u64 words, u32* out) {
  __shared__ u32 s[CP_MAX_BLOCK];
  u32 acc = 0u;
  for (u64 j = global_tid(); j < words; j += grid_threads()) acc += w[j];
  s[threadIdx.x] = acc;
  __syncthreads();
  for (u32 k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(out, s[0]);
}

// ---------------------------------------------------------------- entry points

#define CP_DTYPES(X) X(f32, DF32) X(bf16, DBF16) X(f16, DF16)

#define CP_ENTRIES(N, D)                                                                                   \
  extern "C" __global__ void fill_gen_##N(D::raw* out, u64 n, Geom g, GenArgs a) { fill_gen_impl<D>(out, n, g, a); } \
  extern "C" __global__ void scale_##N(D::raw* x, u64 n, u32 c, u32 dnan) { scale_impl<D>(x, n, c, dnan); }        \
  extern "C" __global__ void verify_##N(const D::raw* x, u64 n, Geom g, GenArgs a, u32 c, u32 dnan, u64* first) {   \
    verify_impl<D>(x, n, g, a, c, dnan, first);                                                            \
  }                                                                                                        \
  extern "C" __global__ void compare_##N(const D::raw* a, const D::raw* b, u64 n, u64* first) {                   \
    compare_impl<D>(a, b, n, first);                                                                       \
  }                                                                                                        \
  extern "C" __global__ void sum_sq_##N(const D::raw* x, u64 n, double p, double* part) { sum_impl<D, 0>(x, n, p, part); } \
  extern "C" __global__ void sum_abs_##N(const D::raw* x, u64 n, double p, double* part) { sum_impl<D, 1>(x, n, p, part); } \
  extern "C" __global__ void sum_pow_##N(const D::raw* x, u64 n, double p, double* part) { sum_impl<D, 2>(x, n, p, part); } \
  extern "C" __global__ void exact_p1_##N(const D::raw* x, u64 n, u64* bins) { exact_impl<D, 0>(x, n, bins); }    \
  extern "C" __global__ void exact_p2_##N(const D::raw* x, u64 n, u64* bins) { exact_impl<D, 1>(x, n, bins); }    \
  extern "C" __global__ void max_abs_##N(const D::raw* x, u64 n, u32* out) { max_abs_impl<D>(x, n, out); }        \
  extern "C" __global__ void nonfinite_##N(const D::raw* x, u64 n, u64* out) { nonfinite_impl<D>(x, n, out); }

CP_DTYPES(CP_ENTRIES)

extern "C" __global__ void fill_u32(u32* out, u64 n, u32 v) { fill_const_impl<u32>(out, n, v); }
extern "C" __global__ void fill_u16(u16* out, u64 n, u32 v) { fill_const_impl<u16>(out, n, v); }
extern "C" __global__ void copy_box_u32(u32* dst, const u32* src, Box b) { copy_box_impl<u32>(dst, src, b); }
extern "C" __global__ void copy_box_u16(u16* dst, const u16* src, Box b) { copy_box_impl<u16>(dst, src, b); }

// Every entry point, in the order of cuda/kernels.rs KERNELS (a test checks both lists).
// CP_KERNEL_LIST_BEGIN
#define CP_KERNEL_LIST(X) \
  X(fill_gen_f32) X(fill_gen_bf16) X(fill_gen_f16) \
  X(scale_f32) X(scale_bf16) X(scale_f16) \
  X(verify_f32) X(verify_bf16) X(verify_f16) \
  X(compare_f32) X(compare_bf16) X(compare_f16) \
  X(sum_sq_f32) X(sum_sq_bf16) X(sum_sq_f16) \
  X(sum_abs_f32) X(sum_abs_bf16) X(sum_abs_f16) \
  X(sum_pow_f32) X(sum_pow_bf16) X(sum_pow_f16) \
  X(exact_p1_f32) X(exact_p1_bf16) X(exact_p1_f16) \
  X(exact_p2_f32) X(exact_p2_bf16) X(exact_p2_f16) \
  X(max_abs_f32) X(max_abs_bf16) X(max_abs_f16) \
  X(nonfinite_f32) X(nonfinite_bf16) X(nonfinite_f16) \
  X(sum_partials) X(read_words) X(fill_u32) X(fill_u16) X(copy_box_u32) X(copy_box_u16)
// CP_KERNEL_LIST_END
