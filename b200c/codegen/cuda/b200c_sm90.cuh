// ---------------------------------------------------------------------------
// b200c PTX helpers of the Hopper (sm_90a) backend: one small inline function
// per instruction, each naming its section of the PTX ISA 9.0 manual.
// Generated sm90a kernels inline this file (the tcgen05 kernels inline
// b200c_ptx.cuh instead; the mbarrier/TMA/bounded-wait helpers are the same
// instructions, kept separate so that neither backend's generated files
// change when the other's header does). The wgmma.mma_async wrappers of the
// shapes a kernel uses are generated into the kernel itself
// (b200c/codegen/sm90/wgmma.py).
// ---------------------------------------------------------------------------
#ifndef B200C_SM90_CUH
#define B200C_SM90_CUH
#include <cuda.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <stdio.h>  // device printf of the bounded waits (B200C_BOUNDED_WAIT)

namespace b200c {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ uint32_t warp_id() { return threadIdx.x >> 5; }
__device__ __forceinline__ uint32_t lane_id() { return threadIdx.x & 31; }
__device__ __forceinline__ uint64_t globaltimer_ns() {  // special register %globaltimer (PTX ISA chapter 10, "Special Registers"), ns
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// ---- mbarrier (PTX 9.7.13.15) ---------------------------------------------
// init 9.7.13.15.9
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// make the initialised barriers visible to the async proxy (TMA), fence 9.7.13.4
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// arrive 9.7.13.15.13 (default .release.cta semantics)
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// arrive where `pred` holds, as one predicated instruction (no branch around it in a hot loop)
__device__ __forceinline__ void mbar_arrive_if(uint32_t bar, bool pred) {
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "setp.ne.b32 p, %1, 0;\n\t"
      "@p mbarrier.arrive.shared::cta.b64 _, [%0];\n\t}" ::"r"(bar), "r"((uint32_t)pred)
      : "memory");
}
// arrive + expect-tx 9.7.13.15.13 / 9.7.13.15.11: one arrival, `bytes` of TMA to come
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
// try_wait.parity 9.7.13.15.16: true once the phase with parity `parity` completed
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t ok;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
      "selp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(ok)
      : "r"(bar), "r"(parity)
      : "memory");
  return ok != 0;
}

// Wait until the phase with parity `parity` of `bar` has completed. `site` names
// the wait site (the generated file's wait-site table: role, barrier), `iter`
// the K/V tile and `work` the work item, reported by bounded waits.
#ifdef B200C_BOUNDED_WAIT
#ifndef B200C_WAIT_TIMEOUT_MS
#define B200C_WAIT_TIMEOUT_MS 4000
#endif
struct HangSite {              // one more timed-out wait of the same deadlock
  int site, parity, cta, iter, work, lane_thread;
};
struct HangReport {            // host-mapped memory, written before __trap() (same layout as b200c_ptx.cuh)
  int flag, site, parity, cta, iter, work, lane_thread, more;
  HangSite others[7];
};
}  // namespace b200c
// global scope (unmangled symbol) so the runtime finds it with cuModuleGetGlobal
__device__ b200c::HangReport* b200c_hang_report;
namespace b200c {
// Record this timed-out wait (lane 0 of each warp, each wait site once), give the
// other stuck waits of the same deadlock 300 ms to record theirs, then trap (9.7.19.4).
__device__ __noinline__ void report_hang(int site, uint32_t parity, int iter, int work) {
  HangReport* r = b200c_hang_report;
  if (r != nullptr && lane_id() == 0) {
    bool seen = false;
    for (int i = 0; i < 7 && i < r->more; ++i) seen |= r->others[i].site == site;
    if (r->flag && r->site == site) seen = true;
    if (!seen && atomicCAS(&r->flag, 0, 1) == 0) {
      r->site = site; r->parity = (int)parity; r->cta = (int)blockIdx.x;
      r->iter = iter; r->work = work; r->lane_thread = (int)threadIdx.x;
    } else if (!seen) {
      const int i = atomicAdd(&r->more, 1);
      if (i < 7) r->others[i] = HangSite{site, (int)parity, (int)blockIdx.x, iter, work, (int)threadIdx.x};
    }
    __threadfence_system();
  }
  printf("b200c: bounded wait timed out: site %d parity %u cta %d thread %d iter %d work %d\n",
         site, parity, (int)blockIdx.x, (int)threadIdx.x, iter, work);
  const uint64_t t0 = globaltimer_ns();
  while (globaltimer_ns() - t0 < 300000000ull) {
  }
  __trap();
}
#endif

__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity, int site, int iter, int work = -1) {
#ifdef B200C_BOUNDED_WAIT
  uint64_t start = 0;
  for (uint32_t spin = 0; !mbar_try_wait(bar, parity); ++spin) {
    if ((spin & 255u) == 255u) {
      const uint64_t now = globaltimer_ns();
      if (start == 0) start = now;
      else if (now - start > (uint64_t)B200C_WAIT_TIMEOUT_MS * 1000000ull) report_hang(site, parity, iter, work);
    }
  }
#else
  (void)site; (void)iter; (void)work;
  while (!mbar_try_wait(bar, parity)) {
  }
#endif
}

// ---- named barriers (PTX 9.7.13.1); id 0 is __syncthreads ------------------
// bar.sync: count `threads` arrivals (this warp's included), block until complete
__device__ __forceinline__ void named_bar_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// bar.arrive: add this warp's arrivals without waiting
__device__ __forceinline__ void named_bar_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// ---- elect.sync (PTX 9.7.13, "elect.sync"): one lane of a converged warp ----
__device__ __forceinline__ bool elect_one() {
  uint32_t pred;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "elect.sync _|p, 0xffffffff;\n\t"
      "selp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(pred));
  return pred != 0;
}

// ---- TMA (PTX 9.7.9.25.5.2): 4-D tile load, completion counted on an mbarrier ----
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}
// prefetch the tensor map into the descriptor cache (9.7.9.15)
__device__ __forceinline__ void prefetch_tensormap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// ---- register reconfiguration (PTX 9.7.19.5), executed by a whole warpgroup ----
template <int N> __device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N> __device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

// ---- wgmma (PTX 9.7.15) ---------------------------------------------------------
// Matrix descriptor (9.7.15.5.1.2.2 "Matrix Descriptor Format"):
//   bits 0-13  start address >> 4
//   bits 16-29 leading dimension byte offset (LBO) >> 4
//   bits 32-45 stride dimension byte offset (SBO) >> 4
//   bits 49-51 matrix base offset (0: every swizzle atom here is 1024 B aligned)
//   bits 62-63 swizzle mode, 1 = 128-Byte swizzle
// The two 32-bit halves are built separately: k-steps only add to the start address in the
// low word (no carry out of bits 0-13: SMEM addresses are < 2^18), the high word is a constant.
__device__ __forceinline__ uint32_t wgmma_desc_lo(uint32_t smem_addr, uint32_t lbo_bytes) {
  return ((smem_addr & 0x3FFFFu) >> 4) | (((lbo_bytes >> 4) & 0x3FFFu) << 16);
}
__host__ __device__ constexpr uint32_t wgmma_desc_hi(uint32_t sbo_bytes) {
  return ((sbo_bytes >> 4) & 0x3FFFu) | (1u << 30);  // bit 62 of the descriptor: 128B swizzle
}
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t lo, uint32_t hi) {
  return ((uint64_t)hi << 32) | lo;
}
// wgmma.fence (9.7.15.7.1): order earlier register writes (S/P/O) before the next wgmma reads them
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
// wgmma.commit_group (9.7.15.7.2): close the group of wgmmas issued so far
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// wgmma.wait_group N (9.7.15.7.3): at most N most recent groups still pending
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Compiler-level fence on a register (no instruction): every read of an accumulator after
// wgmma_wait goes through it, so the compiler cannot hoist the read above the wait, and every
// write before the next wgmma_fence stays ordered before it.
__device__ __forceinline__ void reg_fence(float& x) { asm volatile("" : "+f"(x)::"memory"); }
__device__ __forceinline__ void reg_fence(uint32_t& x) { asm volatile("" : "+r"(x)::"memory"); }
template <int N> __device__ __forceinline__ void reg_fence_all(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) reg_fence(r[i]);
}
template <int N> __device__ __forceinline__ void reg_fence_all(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) reg_fence(r[i]);
}
// the m64nNk16 wrappers (9.7.15.5.2); the generated kernel specializes the shapes it uses
template <int N> __device__ __forceinline__ void wgmma_ss_n(float (&d)[N / 2], uint64_t a_desc, uint64_t b_desc,
                                                            int scale_d);
template <int N> __device__ __forceinline__ void wgmma_rs_n(float (&d)[N / 2], uint32_t a0, uint32_t a1,
                                                            uint32_t a2, uint32_t a3, uint64_t b_desc, int scale_d);

// ---- math ------------------------------------------------------------------
// An opaque copy (mov.b32, PTX 9.7.9.9): ptxas cannot merge the value with others or hoist it (the shared
// work decomposition reads kernel parameters through it, see decode_work).
__device__ __forceinline__ uint32_t pin_u32(uint32_t x) {
  uint32_t y;
  asm volatile("mov.b32 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}
__device__ __forceinline__ float lg2_approx_ftz(float x) {  // lg2 9.7.3.22; the LSE only (rowsum >= 1)
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float ex2_approx_ftz(float x) {  // ex2 9.7.3.21
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// pack (lo, hi) into bf16x2, lo in bits 0-15 (cvt 9.7.9.21: "d, a, b" puts a in the upper half)
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
// max.NaN.f32 (PTX 9.7.3.10, sm_80+): NaN if either source is NaN (fmaxf returns the other one). The
// softmax takes its row max with it when some columns use the software exp2 below, which clamps a NaN
// input to -127: the NaN max then makes every exponent of the row NaN, and the ex2.approx columns carry it.
__device__ __forceinline__ float fmax_nan(float a, float b) {
  float d;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}
// Software exp2 on the FMA pipe (blog ch.9, the same cubic as b200c_ptx.cuh's exp2_poly_x2,
// scalar: Hopper has no packed f32x2 FMA):
//   2^x = 2^floor(x) * 2^f, f = x - floor(x) in [0,1), 2^f ~ ((c3 f + c2) f + c1) f + 1.
// floor(x) by one round-toward-minus-infinity add of 1.5*2^23 (add.rm, 9.7.3.3): the integer
// lands in the low mantissa bits, and (bits << 23) is exactly floor(x) << 23, which is added to
// the exponent of the polynomial. Inputs below -127 flush to about 2^-127.
__device__ __forceinline__ float exp2_poly(float x) {
  x = fmaxf(x, -127.f);
  const float big = __fadd_rd(x, 12582912.f);  // 1.5 * 2^23 + floor(x)
  const float f = x - (big - 12582912.f);
  float p = fmaf(0.077f, f, 0.227f);
  p = fmaf(p, f, 0.695f);
  p = fmaf(p, f, 1.f);
  return __int_as_float(__float_as_int(p) + (__float_as_int(big) << 23));
}

}  // namespace b200c

// ---- profiling builds: role timelines (b200c bench --profile) ------------------
// The host points b200c_trace at a zeroed buffer of
// (CTAs recorded) x (tracks per CTA) x b200c_trace_cap records; each record is
// (%globaltimer ns << 8) | event id, written by one thread of a role instance
// (its track). CTAs >= b200c_trace_ctas and records past the capacity are dropped.
__device__ unsigned long long* b200c_trace;
__device__ int b200c_trace_cap;
__device__ int b200c_trace_ctas;
namespace b200c {
template <int TRACKS>
__device__ __forceinline__ void trace_stamp_to(bool writer, int track, uint32_t& n, uint32_t event) {
  if (writer && (int)blockIdx.x < b200c_trace_ctas && (int)n < b200c_trace_cap) {
    const size_t at = ((size_t)blockIdx.x * TRACKS + track) * (size_t)b200c_trace_cap + n;
    b200c_trace[at] = (globaltimer_ns() << 8) | event;
  }
  ++n;
}
}  // namespace b200c
#endif  // B200C_SM90_CUH
