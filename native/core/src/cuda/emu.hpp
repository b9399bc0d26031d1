// A small CUDA emulation on the CPU, for testing kernels.cu without a GPU (g++ -std=c++17).
//
// A launch runs its blocks one after another; the threads of a block are cooperative fibers on the
// calling OS thread (created once with makecontext, then switched with _setjmp/_longjmp, which
// costs no system call), switched at __syncthreads(), so shared memory (`static` here), atomics
// (plain read-modify-write: nothing runs in between) and barriers behave as on a GPU for kernels
// that synchronize only through __syncthreads and atomics, as kernels.cu does. A kernel that did
// not call __syncthreads at its first launch runs its threads as plain calls afterwards.
// Launches are serialized by a mutex. Floating-point operations are the host's (SSE, nearest even,
// no contraction: build with -ffp-contract=off); kernels.cu does not depend on how hardware
// propagates NaN payloads.
#pragma once

// Fibers switch with _setjmp/_longjmp between stacks, which glibc's fortified longjmp refuses.
#undef _FORTIFY_SOURCE
#include <setjmp.h>
#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static

struct cp_emu_dim3 {
  unsigned x, y, z;
};

struct cp_emu_fiber {
  ucontext_t ctx;
  jmp_buf jb;
  unsigned tid;
  int state; // 0 runnable, 1 waiting at a barrier, 2 finished with its block
  bool started;
};

extern cp_emu_fiber* cp_emu_cur;
extern cp_emu_dim3 blockIdx, blockDim, gridDim;
#define threadIdx (cp_emu_thread_idx())
inline cp_emu_dim3 cp_emu_thread_idx() { return cp_emu_dim3{cp_emu_cur->tid, 0, 0}; }

void __syncthreads();

inline float __uint_as_float(unsigned v) { float f; std::memcpy(&f, &v, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned v; std::memcpy(&v, &f, 4); return v; }
inline double __longlong_as_double(long long v) { double d; std::memcpy(&d, &v, 8); return d; }
inline long long __double_as_longlong(double d) { long long v; std::memcpy(&v, &d, 8); return v; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __dsqrt_rn(double a) { return std::sqrt(a); }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
inline float __double2float_rn(double d) { return (float)d; }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
using std::fabs;
using std::pow;
using std::rint;

// Atomics: fibers never interleave inside one of these.
template <class T>
inline T atomicAdd(T* p, T v) { T o = *p; *p = o + v; return o; }
template <class T>
inline T atomicMin(T* p, T v) { T o = *p; if (v < o) *p = v; return o; }
template <class T>
inline T atomicMax(T* p, T v) { T o = *p; if (v > o) *p = v; return o; }
