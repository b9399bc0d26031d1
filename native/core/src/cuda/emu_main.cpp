// The CPU emulation library of the CUDA kernels (tests only; see emu.hpp and cuda/emu.rs).
// Built as: c++ -std=c++17 -O2 -fPIC -shared -ffp-contract=off emu_main.cpp -o libcp_cuda_emu.so
#include "emu.hpp"
#include "kernels.cu"

cp_emu_fiber* cp_emu_cur = nullptr;
cp_emu_dim3 blockIdx{0, 0, 0}, blockDim{1, 1, 1}, gridDim{1, 1, 1};

namespace {

const size_t kStack = 256 * 1024;
jmp_buf g_main_jb;
ucontext_t g_main_uc;
std::function<void(void**)>* g_kernel = nullptr;
void** g_args = nullptr;
std::vector<cp_emu_fiber> g_fibers;
std::vector<std::vector<char>> g_stacks;
std::mutex g_mutex;
// Kernels seen to call __syncthreads (learned at their first launch, which runs on fibers).
std::map<std::string, bool> g_barriers;
bool g_direct = false;
bool g_saw_barrier = false;

void yield_to_scheduler() {
  if (!_setjmp(cp_emu_cur->jb)) _longjmp(g_main_jb, 1);
}

// A fiber runs the current kernel for the current block, then waits for the next block (of this
// launch or a later one): fibers live for the whole process.
void fiber_main() {
  for (;;) {
    (*g_kernel)(g_args);
    cp_emu_cur->state = 2;
    yield_to_scheduler();
  }
}

void resume(cp_emu_fiber& f) {
  cp_emu_cur = &f;
  if (!_setjmp(g_main_jb)) {
    if (!f.started) {
      f.started = true;
      swapcontext(&g_main_uc, &f.ctx); // first entry onto the fiber's own stack
    } else {
      _longjmp(f.jb, 1);
    }
  }
}

void make_fibers(unsigned n) {
  if (g_fibers.size() >= n) return;
  size_t old = g_fibers.size();
  g_fibers.resize(n);
  g_stacks.resize(n);
  for (size_t t = old; t < n; ++t) g_stacks[t].resize(kStack);
  for (size_t t = 0; t < n; ++t) g_fibers[t].started = false; // (re)created below on first resume
  for (size_t t = 0; t < n; ++t) {
    cp_emu_fiber& f = g_fibers[t];
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = g_stacks[t].data();
    f.ctx.uc_stack.ss_size = g_stacks[t].size();
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, fiber_main, 0);
  }
}

// Runs one block; false when its threads did not meet at the same barriers.
bool run_block(unsigned threads) {
  for (unsigned t = 0; t < threads; ++t) {
    g_fibers[t].tid = t;
    g_fibers[t].state = 0;
  }
  for (;;) {
    for (unsigned t = 0; t < threads; ++t) {
      cp_emu_fiber& f = g_fibers[t];
      if (f.state == 2) continue;
      f.state = 0;
      resume(f);
    }
    unsigned done = 0, waiting = 0;
    for (unsigned t = 0; t < threads; ++t) {
      if (g_fibers[t].state == 2) done++;
      else waiting++;
    }
    if (waiting == 0) return true;
    if (done != 0) {
      // abandon the waiting fibers mid-kernel: start every fiber afresh next time
      for (auto& f : g_fibers) f.started = false;
      size_t n = g_fibers.size();
      g_fibers.clear();
      make_fibers((unsigned)n);
      return false;
    }
  }
}

template <typename... A, size_t... I>
void call_impl(void (*f)(A...), void** args, std::index_sequence<I...>) {
  f(*static_cast<typename std::remove_reference<A>::type*>(args[I])...);
}
template <typename... A>
std::function<void(void**)> thunk(void (*f)(A...)) {
  return [f](void** args) { call_impl(f, args, std::index_sequence_for<A...>{}); };
}

std::map<std::string, std::function<void(void**)>>& registry() {
  static std::map<std::string, std::function<void(void**)>> r;
  if (r.empty()) {
#define CP_EMU_REG(name) r[#name] = thunk(&name);
    CP_KERNEL_LIST(CP_EMU_REG)
#undef CP_EMU_REG
  }
  return r;
}

} // namespace

void __syncthreads() {
  if (g_direct) std::abort(); // a kernel that synchronized nowhere at its first launch does now
  g_saw_barrier = true;
  cp_emu_cur->state = 1;
  yield_to_scheduler();
}

// 0: done; 1: unknown kernel; 2: block size out of range; 3: divergent __syncthreads.
extern "C" int cp_emu_launch(const char* name, unsigned grid, unsigned block, void** args) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto& r = registry();
  auto it = r.find(name);
  if (it == r.end()) return 1;
  if (block == 0 || block > CP_MAX_BLOCK) return 2;
  make_fibers(block);
  gridDim = cp_emu_dim3{grid, 1, 1};
  blockDim = cp_emu_dim3{block, 1, 1};
  g_kernel = &it->second;
  g_args = args;
  auto known = g_barriers.find(name);
  if (known != g_barriers.end() && !known->second) {
    g_direct = true;
    for (unsigned b = 0; b < grid; ++b) {
      blockIdx = cp_emu_dim3{b, 0, 0};
      for (unsigned t = 0; t < block; ++t) {
        g_fibers[t].tid = t;
        cp_emu_cur = &g_fibers[t];
        (*g_kernel)(g_args);
      }
    }
    g_direct = false;
    return 0;
  }
  g_saw_barrier = false;
  for (unsigned b = 0; b < grid; ++b) {
    blockIdx = cp_emu_dim3{b, 0, 0};
    if (!run_block(block)) return 3;
  }
  g_barriers[name] = g_saw_barrier;
  return 0;
}

// The names of the kernels this library holds, separated by spaces (for the list check).
extern "C" const char* cp_emu_kernels() {
  static std::string s;
  if (s.empty()) {
#define CP_EMU_NAME(name) s += #name " ";
    CP_KERNEL_LIST(CP_EMU_NAME)
#undef CP_EMU_NAME
  }
  return s.c_str();
}

// Scalar helpers, exported so that tests compare them with the Rust code on many inputs.
extern "C" unsigned cp_emu_f32_to_bf16(unsigned x) { return f32_to_bf16_bits(x); }
extern "C" unsigned cp_emu_f32_to_f16(unsigned x) { return f32_to_f16_bits(x); }
extern "C" unsigned cp_emu_f16_to_f32(unsigned h) { return f16_bits_to_f32(h); }
extern "C" unsigned cp_emu_mul_host(unsigned a, unsigned b, unsigned dnan) { return mul_host(a, b, dnan); }
extern "C" double cp_emu_round_f64_to(double x, int prec, int emin, int emax) { return round_f64_to(x, prec, emin, emax); }
extern "C" unsigned long long cp_emu_splitmix64(unsigned long long x) { return splitmix64(x); }
