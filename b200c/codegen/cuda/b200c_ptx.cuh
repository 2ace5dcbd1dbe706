// ---------------------------------------------------------------------------
// b200c PTX helpers: one small inline function per instruction.
// Sources: PTX ISA 9.0 (sections cited per helper) and docs/sm100-facts.md.
// The tcgen05 family, setmaxnreg and packed f32x2 math are replaced by the
// software model in b200c_emulate.cuh when B200C_EMULATE is defined (sm_90a);
// everything else (TMA, mbarrier, named barriers, elect.sync) is shared.
// ---------------------------------------------------------------------------
#ifndef B200C_PTX_CUH  // include guard: generated kernels inline this file, the emulation header includes it
#define B200C_PTX_CUH
#include <cuda.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <stdio.h>  // device printf of the bounded waits (B200C_BOUNDED_WAIT)

namespace b200c {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ uint32_t warp_id() { return threadIdx.x >> 5; }
// x through an opaque mov: ptxas computes the value here, once (used where measured to pay: the correction
// warps' TMEM lane base, kept in a register instead of recomputed in the hot loop; kernel parameters read
// inside a role instead of at kernel entry)
__device__ __forceinline__ uint32_t pin_u32(uint32_t x) {
  uint32_t y;
  asm volatile("mov.u32 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}
__device__ __forceinline__ uint32_t lane_id() { return threadIdx.x & 31; }

// ---- mbarrier (PTX 9.7.13.15) ---------------------------------------------
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
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

// Wait until the phase with parity `parity` of `bar` has completed.
// `site` names the wait site (the generated file's WAIT_SITES table: role,
// barrier) and `iter` the K/V iteration, reported by bounded waits.
#ifdef B200C_BOUNDED_WAIT
#ifndef B200C_WAIT_TIMEOUT_MS
#define B200C_WAIT_TIMEOUT_MS 4000
#endif
struct HangSite {              // one more timed-out wait of the same deadlock
  int site, parity, cta, iter, work, lane_thread;
};
struct HangReport {            // host-mapped memory, written before __trap()
  int flag, site, parity, cta, iter, work, lane_thread, more;  // the first timed-out wait; `more` = others
  HangSite others[7];
};
}  // namespace b200c
// global scope (unmangled symbol) so the runtime finds it with cuModuleGetGlobal
__device__ b200c::HangReport* b200c_hang_report;
namespace b200c {
__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Record this timed-out wait (lane 0 of each warp, each wait site once), give
// the other stuck waits of the same deadlock 300 ms to record theirs (the root
// cause is often not the first to time out), then trap.
__device__ __noinline__ void report_hang(int site, uint32_t parity, int iter, int work) {
  HangReport* r = b200c_hang_report;
  if (r != nullptr && lane_id() == 0) {  // one record per warp
    bool seen = false;                    // best effort: one record per wait site
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
    if ((spin & 1023u) == 1023u) {
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
__device__ __forceinline__ void named_bar_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// ---- elect.sync (PTX 9.7.13.x): one lane of a converged warp ---------------
__device__ __forceinline__ bool elect_one() {
  uint32_t pred;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "elect.sync _|p, 0xffffffff;\n\t"
      "selp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(pred));
  return pred != 0;
}

// ---- TMA (PTX 9.7.9.25.5.2) ------------------------------------------------
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void prefetch_tensormap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
// generic-proxy SMEM writes -> async proxy (MMA reads P from SMEM), PTX 9.7.16.6.5
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// ---- SMEM matrix descriptor for tcgen05.mma (PTX 9.7.16.4.1, docs/sm100-facts.md §3) -----
// bits 0-13 start>>4, 16-29 LBO>>4, 32-45 SBO>>4, 46 fixed 1, 61-63 swizzle
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo, uint32_t swizzle) {
  return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFFu) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3FFFu) << 32) | (1ull << 46) | ((uint64_t)(swizzle & 7u) << 61);
}

// The descriptor as the two 32-bit words generated kernels keep: `lo` holds the start-address and LBO
// fields, `hi` the SBO field, the fixed bit 46 and the swizzle mode (one constant per tile layout). The
// MMA wrappers join them inside their asm; as one 64-bit value, LLVM turned each K-step advance into a
// 64-bit add with carry (measured on stage 18's MMA loop).
struct SmemDesc {
  uint32_t lo, hi;
};
__device__ __forceinline__ SmemDesc smem_desc_words(uint32_t addr, uint32_t lbo, uint32_t sbo, uint32_t swizzle) {
  return {((addr & 0x3FFFFu) >> 4) | (((lbo >> 4) & 0x3FFFu) << 16),
          ((sbo >> 4) & 0x3FFFu) | (1u << 14) | ((swizzle & 7u) << 29)};
}
// `d` advanced by `bytes` (a multiple of 16): only the start-address field (bits 0-13, address >> 4)
// moves; tiles lie below 256 KiB, so the field never carries into bit 14
__device__ __forceinline__ SmemDesc desc_add(SmemDesc d, uint32_t bytes) { return {d.lo + (bytes >> 4), d.hi}; }
__host__ __device__ __forceinline__ uint64_t desc_u64(SmemDesc d) { return ((uint64_t)d.hi << 32) | d.lo; }

// ---- math ------------------------------------------------------------------
__device__ __forceinline__ float ex2_approx_ftz(float x) {   // PTX 9.7.3.21
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// pack (lo, hi) into bf16x2: cvt.rn.bf16x2.f32 d, a, b puts a in the upper half
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
__device__ __forceinline__ float lg2_approx_ftz(float x) {  // PTX 9.7.3.22; LSE only (rowsum >= 1)
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// x rounded to BF16 (round to nearest even) and back to FP32
__device__ __forceinline__ float bf16_round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
// the two BF16 halves of a bf16x2 word as FP32 (exact): rowsum adds the P values PV really consumes
__device__ __forceinline__ float bf16x2_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16x2_hi(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }

}  // namespace b200c

#ifdef B200C_EMULATE
#include "b200c_emulate.cuh"
#else
namespace b200c {
constexpr int kEmulatorThreads = 0;

// ---- packed FP32 pairs (PTX 9.7.3, sm_100+) ------------------------------
__device__ __forceinline__ float2 fma_f32x2(float2 a, float2 b, float2 c) {
  uint64_t d;
  asm("fma.rn.f32x2 %0, %1, %2, %3;" : "=l"(d)
      : "l"(*reinterpret_cast<uint64_t*>(&a)), "l"(*reinterpret_cast<uint64_t*>(&b)),
        "l"(*reinterpret_cast<uint64_t*>(&c)));
  return *reinterpret_cast<float2*>(&d);
}
__device__ __forceinline__ float2 add_f32x2(float2 a, float2 b) {
  uint64_t d;
  asm("add.rn.f32x2 %0, %1, %2;" : "=l"(d)
      : "l"(*reinterpret_cast<uint64_t*>(&a)), "l"(*reinterpret_cast<uint64_t*>(&b)));
  return *reinterpret_cast<float2*>(&d);
}
__device__ __forceinline__ float2 mul_f32x2(float2 a, float2 b) {
  uint64_t d;
  asm("mul.rn.f32x2 %0, %1, %2;" : "=l"(d)
      : "l"(*reinterpret_cast<uint64_t*>(&a)), "l"(*reinterpret_cast<uint64_t*>(&b)));
  return *reinterpret_cast<float2*>(&d);
}
__device__ __forceinline__ float2 sub_f32x2(float2 a, float2 b) {
  uint64_t d;
  asm("sub.rn.f32x2 %0, %1, %2;" : "=l"(d)
      : "l"(*reinterpret_cast<uint64_t*>(&a)), "l"(*reinterpret_cast<uint64_t*>(&b)));
  return *reinterpret_cast<float2*>(&d);
}
__device__ __forceinline__ float2 add_rm_f32x2(float2 a, float2 b) {  // rounded toward -infinity
  uint64_t d;
  asm("add.rm.f32x2 %0, %1, %2;" : "=l"(d)
      : "l"(*reinterpret_cast<uint64_t*>(&a)), "l"(*reinterpret_cast<uint64_t*>(&b)));
  return *reinterpret_cast<float2*>(&d);
}
// 3-input max (FMNMX3), PTX 9.7.3.10 (max.f32 with three sources, sm_100+)
__device__ __forceinline__ float fmax3(float a, float b, float c) {
  float d;
  asm("max.f32 %0, %1, %2, %3;" : "=f"(d) : "f"(a), "f"(b), "f"(c));
  return d;
}
// the same with .NaN: any NaN source gives NaN (FMNMX3.NAN, one instruction as FMNMX3)
__device__ __forceinline__ float fmax3_nan(float a, float b, float c) {
  float d;
  asm("max.NaN.f32 %0, %1, %2, %3;" : "=f"(d) : "f"(a), "f"(b), "f"(c));
  return d;
}

// ---- register reconfiguration (PTX 9.7.19.5), per warpgroup ---------------
template <int N> __device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N> __device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

// ---- TMEM allocation (PTX 9.7.16.7.1): one whole warp ----------------------
__device__ __forceinline__ void tmem_alloc(uint32_t slot, uint32_t ncols) {
  asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;" ::"r"(slot), "r"(ncols)
               : "memory");
}
__device__ __forceinline__ void tmem_relinquish_alloc_permit() {
  asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void tmem_dealloc(uint32_t taddr, uint32_t ncols) {
  asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" ::"r"(taddr), "r"(ncols) : "memory");
}

// ---- tcgen05.mma kind::f16, cta_group::1 (PTX 9.7.16.10.9) ----------------
// D[tmem] (+)= A[smem desc] . B[smem desc]
__device__ __forceinline__ void tcgen05_mma_ss(uint32_t d_tmem, uint64_t a_desc, uint64_t b_desc,
                                               uint32_t idesc, uint32_t accumulate) {
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "setp.ne.b32 p, %4, 0;\n\t"
      "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;\n\t}" ::"r"(d_tmem),
      "l"(a_desc), "l"(b_desc), "r"(idesc), "r"(accumulate)
      : "memory");
}
// D[tmem] (+)= A[tmem] . B[smem desc]
__device__ __forceinline__ void tcgen05_mma_ts(uint32_t d_tmem, uint32_t a_tmem, uint64_t b_desc,
                                               uint32_t idesc, uint32_t accumulate) {
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "setp.ne.b32 p, %4, 0;\n\t"
      "tcgen05.mma.cta_group::1.kind::f16 [%0], [%1], %2, %3, p;\n\t}" ::"r"(d_tmem),
      "r"(a_tmem), "l"(b_desc), "r"(idesc), "r"(accumulate)
      : "memory");
}
// arrive once on `bar` when every earlier tcgen05 op of this thread completes (PTX 9.7.16.12.1)
__device__ __forceinline__ void tcgen05_commit(uint32_t bar) {
  asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];" ::"r"(bar)
               : "memory");
}

// The same MMAs with SmemDesc descriptors. Issued by the calling thread (one thread calls); the words are
// joined in C++ here: when one lane runs the whole MMA role, 64-bit descriptors kept ptxas off spilling
// (joined inside the asm instead, stage 12's MMA role spilled 72 B at 48 registers, measured)
__device__ __forceinline__ void tcgen05_mma_ss(uint32_t d_tmem, SmemDesc a, SmemDesc b, uint32_t idesc,
                                               uint32_t accumulate) {
  tcgen05_mma_ss(d_tmem, desc_u64(a), desc_u64(b), idesc, accumulate);
}
__device__ __forceinline__ void tcgen05_mma_ts(uint32_t d_tmem, uint32_t a_tmem, SmemDesc b, uint32_t idesc,
                                               uint32_t accumulate) {
  tcgen05_mma_ts(d_tmem, a_tmem, desc_u64(b), idesc, accumulate);
}
// Issued by one lane of the calling warp: the whole warp calls them, converged, and elect.sync inside the
// asm (PTX ISA: elect.sync) picks the issuer, so the code around stays warp-uniform and ptxas keeps the
// descriptors and ring slots in uniform registers (measured: stage 18's MMA loop 265 instructions with one
// elected lane running the whole role, 238 this way).
template <uint32_t IDESC>
__device__ __forceinline__ void tcgen05_mma_ss_elect(uint32_t d_tmem, SmemDesc a, SmemDesc b, uint32_t accumulate) {
  asm volatile(
      "{\n\t.reg .pred p, e;\n\t.reg .b64 da, db;\n\t"
      "elect.sync _|e, 0xffffffff;\n\t"
      "setp.ne.b32 p, %5, 0;\n\t"
      "mov.b64 da, {%1, %2};\n\t"
      "mov.b64 db, {%3, %4};\n\t"
      "@e tcgen05.mma.cta_group::1.kind::f16 [%0], da, db, %6, p;\n\t}" ::"r"(d_tmem),
      "r"(a.lo), "r"(a.hi), "r"(b.lo), "r"(b.hi), "r"(accumulate), "n"(IDESC)
      : "memory");
}
template <uint32_t IDESC>
__device__ __forceinline__ void tcgen05_mma_ts_elect(uint32_t d_tmem, uint32_t a_tmem, SmemDesc b, uint32_t accumulate) {
  asm volatile(
      "{\n\t.reg .pred p, e;\n\t.reg .b64 db;\n\t"
      "elect.sync _|e, 0xffffffff;\n\t"
      "setp.ne.b32 p, %4, 0;\n\t"
      "mov.b64 db, {%2, %3};\n\t"
      "@e tcgen05.mma.cta_group::1.kind::f16 [%0], [%1], db, %5, p;\n\t}" ::"r"(d_tmem),
      "r"(a_tmem), "r"(b.lo), "r"(b.hi), "r"(accumulate), "n"(IDESC)
      : "memory");
}
__device__ __forceinline__ void tcgen05_commit_elect(uint32_t bar) {
  asm volatile(
      "{\n\t.reg .pred e;\n\t"
      "elect.sync _|e, 0xffffffff;\n\t"
      "@e tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];\n\t}" ::"r"(bar)
      : "memory");
}
// no MMA follows from this issuer (used by the emulator's engine; nothing on sm_100a)
__device__ __forceinline__ void tcgen05_issue_end() {}

// ---- tcgen05 fences and waits (PTX 9.7.16.11, 9.7.16.8.5) -----------------
__device__ __forceinline__ void tcgen05_fence_before() {
  asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
}
__device__ __forceinline__ void tcgen05_fence_after() {
  asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
}
__device__ __forceinline__ void tmem_wait_ld() { asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void tmem_wait_st() { asm volatile("tcgen05.wait::st.sync.aligned;" ::: "memory"); }

// ---- TMEM <-> registers, shape 32x32b: lane t of the warp <-> TMEM lane
// lane(taddr)+t, register j <-> column col(taddr)+j (PTX 9.7.16.8.3) ----------
__device__ __forceinline__ void tmem_ld_x8(uint32_t taddr, float (&r)[8]) {
  asm volatile("tcgen05.ld.sync.aligned.32x32b.x8.b32 {%0,%1,%2,%3,%4,%5,%6,%7}, [%8];"
               : "=f"(r[0]), "=f"(r[1]), "=f"(r[2]), "=f"(r[3]), "=f"(r[4]), "=f"(r[5]), "=f"(r[6]), "=f"(r[7])
               : "r"(taddr));
}
__device__ __forceinline__ void tmem_ld_x16(uint32_t taddr, float (&r)[16]) {
  asm volatile(
      "tcgen05.ld.sync.aligned.32x32b.x16.b32 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, [%16];"
      : "=f"(r[0]), "=f"(r[1]), "=f"(r[2]), "=f"(r[3]), "=f"(r[4]), "=f"(r[5]), "=f"(r[6]), "=f"(r[7]),
        "=f"(r[8]), "=f"(r[9]), "=f"(r[10]), "=f"(r[11]), "=f"(r[12]), "=f"(r[13]), "=f"(r[14]), "=f"(r[15])
      : "r"(taddr));
}
__device__ __forceinline__ void tmem_ld_x32(uint32_t taddr, float (&r)[32]) {
  asm volatile(
      "tcgen05.ld.sync.aligned.32x32b.x32.b32 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, [%32];"
      : "=f"(r[0]), "=f"(r[1]), "=f"(r[2]), "=f"(r[3]), "=f"(r[4]), "=f"(r[5]), "=f"(r[6]), "=f"(r[7]),
        "=f"(r[8]), "=f"(r[9]), "=f"(r[10]), "=f"(r[11]), "=f"(r[12]), "=f"(r[13]), "=f"(r[14]), "=f"(r[15]),
        "=f"(r[16]), "=f"(r[17]), "=f"(r[18]), "=f"(r[19]), "=f"(r[20]), "=f"(r[21]), "=f"(r[22]), "=f"(r[23]),
        "=f"(r[24]), "=f"(r[25]), "=f"(r[26]), "=f"(r[27]), "=f"(r[28]), "=f"(r[29]), "=f"(r[30]), "=f"(r[31])
      : "r"(taddr));
}
__device__ __forceinline__ void tmem_st_x8(uint32_t taddr, const uint32_t (&r)[8]) {
  asm volatile("tcgen05.st.sync.aligned.32x32b.x8.b32 [%0], {%1,%2,%3,%4,%5,%6,%7,%8};" ::"r"(taddr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]), "r"(r[4]), "r"(r[5]), "r"(r[6]), "r"(r[7])
               : "memory");
}
__device__ __forceinline__ void tmem_st_x16(uint32_t taddr, const uint32_t (&r)[16]) {
  asm volatile(
      "tcgen05.st.sync.aligned.32x32b.x16.b32 [%0], {%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16};"
      ::"r"(taddr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]), "r"(r[4]), "r"(r[5]), "r"(r[6]), "r"(r[7]),
      "r"(r[8]), "r"(r[9]), "r"(r[10]), "r"(r[11]), "r"(r[12]), "r"(r[13]), "r"(r[14]), "r"(r[15])
      : "memory");
}
__device__ __forceinline__ void tmem_st_x32(uint32_t taddr, const uint32_t (&r)[32]) {
  asm volatile(
      "tcgen05.st.sync.aligned.32x32b.x32.b32 [%0], {%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,"
      "%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32};"
      ::"r"(taddr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]), "r"(r[4]), "r"(r[5]), "r"(r[6]), "r"(r[7]),
      "r"(r[8]), "r"(r[9]), "r"(r[10]), "r"(r[11]), "r"(r[12]), "r"(r[13]), "r"(r[14]), "r"(r[15]),
      "r"(r[16]), "r"(r[17]), "r"(r[18]), "r"(r[19]), "r"(r[20]), "r"(r[21]), "r"(r[22]), "r"(r[23]),
      "r"(r[24]), "r"(r[25]), "r"(r[26]), "r"(r[27]), "r"(r[28]), "r"(r[29]), "r"(r[30]), "r"(r[31])
      : "memory");
}
}  // namespace b200c
#endif  // B200C_EMULATE

namespace b200c {
// ---- software exp2 of a pair on the FMA pipes (blog ch.9 and its appendix) --
// 2^x = 2^floor(x) * 2^frac(x). floor: adding 1.5 * 2^23 with rounding toward
// -inf leaves 1.5 * 2^23 + floor(x) exactly (the integer lands in the low
// mantissa bits), so (bits << 23) is floor(x) << 23 mod 2^32 and is added to
// the exponent field of 2^frac, a cubic ((c3 f + c2) f + c1) f + 1 with the
// blog's coefficients. All in f32x2 pairs (FADD2.RM, FADD2, FFMA2 on sm_100).
// Inputs below -127 are clamped (result ~2^-127, like ex2.approx.ftz's flush).
// A NaN input does NOT come out NaN: the exponent add turns the canonical NaN
// into FLT_MAX. Schedules with the software exp2 therefore take the row max
// with max.NaN (RowmaxPass nan_max): a NaN score makes the row max, and so
// every x of the row, NaN, and the hardware ex2 columns carry it into the
// rowsum and O, as torch's FP32 softmax does.
__device__ __forceinline__ float fmax_nan(float a, float b) {
  float d;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}
__device__ __forceinline__ float2 exp2_poly_x2(float2 x) {
  x = make_float2(fmax_nan(x.x, -127.f), fmax_nan(x.y, -127.f));
  const float2 magic = make_float2(12582912.f, 12582912.f);  // 1.5 * 2^23
  const float2 r = add_rm_f32x2(x, magic);                   // 1.5 * 2^23 + floor(x)
  const float2 f = sub_f32x2(x, sub_f32x2(r, magic));        // frac(x) in [0, 1)
  float2 p = fma_f32x2(make_float2(0.077f, 0.077f), f, make_float2(0.227f, 0.227f));
  p = fma_f32x2(p, f, make_float2(0.695f, 0.695f));
  p = fma_f32x2(p, f, make_float2(1.f, 1.f));
  return make_float2(__int_as_float(__float_as_int(p.x) + (__float_as_int(r.x) << 23)),
                     __int_as_float(__float_as_int(p.y) + (__float_as_int(r.y) << 23)));
}
// One value: lane x of the pair function, so bit for bit what the P pass computed for that score.
__device__ __forceinline__ float exp2_poly(float x) { return exp2_poly_x2(make_float2(x, x)).x; }
// a >= b ? x : y by setp + selp (PTX ISA, comparison and selection instructions): both values computed,
// no branch (ptxas turned the same C ternary around exp2_poly into a branch: +16 instructions in the
// stage 18 softmax loop, measured)
__device__ __forceinline__ float select_ge(float a, float b, float x, float y) {
  float d;
  asm("{\n\t.reg .pred p;\n\tsetp.ge.f32 p, %1, %2;\n\tselp.f32 %0, %3, %4, p;\n\t}"
      : "=f"(d) : "f"(a), "f"(b), "f"(x), "f"(y));
  return d;
}
}  // namespace b200c
#endif  // B200C_PTX_CUH
