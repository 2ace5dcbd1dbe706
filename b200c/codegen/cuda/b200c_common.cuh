// ---------------------------------------------------------------------------
// b200c_common.cuh: the device helpers both backends share, one definition each.
// b200c_ptx.cuh (sm_100a, and the sm_90a emulation of it) and b200c_sm90.cuh
// (Hopper, wgmma) include this file; the emitters inline it in place of the
// #include line (b200c.codegen.cuda.header_text), so a generated .cu stays
// self-contained; the emulated build finds it with -I like b200c_emulate.cuh. Sources: PTX ISA 9.0 (sections cited per
// helper) and docs/sm100-facts.md.
//
// What lives here: thread/warp ids, mbarriers and their bounded waits (one spin
// mask, B200C_WAIT_SPIN_MASK), the hang report, named barriers, elect.sync, the
// 4-D TMA load, and the softmax math with its special-value rules:
//
//   NaN rule (both backends): a NaN score, or a +inf score (s - max =
//   inf - inf = NaN), makes the row's rowsum, O and LSE NaN, as torch's FP32
//   softmax gives; a -inf score gives P = 0; a row with no finite score (all
//   -inf) is handled by the kernels (O = 0, LSE = -inf). ex2.approx.ftz gives
//   exp2(NaN) = NaN and exp2(-inf) = 0 in hardware; the software polynomial
//   exp2_poly below does too (its exponent add alone would turn NaN into
//   FLT_MAX, so the NaN is carried past it by one FMA, x * 0 + y). The sm_100a
//   P pass's pair form (b200c_ptx.cuh's exp2_poly_x2) skips that FMA: there
//   the rebase makes the rescale factor NaN for a NaN or +inf max, which is
//   when a NaN exponent reaches a column (softmax_rules.nan_rescale).
// ---------------------------------------------------------------------------
#ifndef B200C_COMMON_CUH
#define B200C_COMMON_CUH
#include <cuda.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <stdio.h>  // device printf of the bounded waits (B200C_BOUNDED_WAIT)

#ifndef B200C_WAIT_TIMEOUT_MS
#define B200C_WAIT_TIMEOUT_MS 4000
#endif
// bounded waits read %globaltimer once every B200C_WAIT_SPIN_MASK + 1 failed try_waits
#ifndef B200C_WAIT_SPIN_MASK
#define B200C_WAIT_SPIN_MASK 255u
#endif

namespace b200c {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ uint32_t warp_id() { return threadIdx.x >> 5; }
__device__ __forceinline__ uint32_t lane_id() { return threadIdx.x & 31; }
// x through an opaque mov (PTX 9.7.9.9): ptxas computes the value here, once, and cannot merge or hoist it
// (used where measured to pay: TMEM/SMEM bases kept in a register, kernel parameters read inside a role)
__device__ __forceinline__ uint32_t pin_u32(uint32_t x) {
  uint32_t y;
  asm volatile("mov.b32 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}
// special register %globaltimer (PTX ISA chapter 10, "Special Registers"), ns
__device__ __forceinline__ uint64_t globaltimer_ns() {
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
struct HangSite {              // one more timed-out wait of the same deadlock
  int site, parity, cta, iter, work, lane_thread;
};
struct HangReport {            // host-mapped memory, written before __trap() (b200c/runtime/driver.py reads it)
  int flag, site, parity, cta, iter, work, lane_thread, more;  // the first timed-out wait; `more` = others
  HangSite others[7];
};
}  // namespace b200c
// global scope (unmangled symbol) so the runtime finds it with cuModuleGetGlobal
__device__ b200c::HangReport* b200c_hang_report;
namespace b200c {
// Record this timed-out wait (lane 0 of each warp, each wait site once), give
// the other stuck waits of the same deadlock 300 ms to record theirs (the root
// cause is often not the first to time out), then trap (9.7.19.4).
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

#ifdef B200C_EMULATE
// b200c_emulate.cuh: the warp's last completed wait (site, iter, work), named in the emulator's hazard reports
__device__ __forceinline__ void emu_note_wait(int site, int iter, int work);
#endif

__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity, int site, int iter, int work = -1) {
#ifdef B200C_BOUNDED_WAIT
  uint64_t start = 0;
  for (uint32_t spin = 0; !mbar_try_wait(bar, parity); ++spin) {
    if ((spin & B200C_WAIT_SPIN_MASK) == B200C_WAIT_SPIN_MASK) {
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
#ifdef B200C_EMULATE
  emu_note_wait(site, iter, work);
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

// ---- math ------------------------------------------------------------------
__device__ __forceinline__ float ex2_approx_ftz(float x) {  // ex2 9.7.3.21: NaN -> NaN, -inf -> 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float lg2_approx_ftz(float x) {  // lg2 9.7.3.22; the LSE only (rowsum >= 1)
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// pack (lo, hi) into bf16x2, lo in bits 0-15 (cvt 9.7.9.21: "d, a, b" puts a in the upper half)
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}
// the power of two at or below |x| with x's sign (x finite, normal): the exponent scale of rows whose max
// reaches 2^30, where s * scale must be exact (b200c.codegen.softmax_rules.huge_lines)
__device__ __forceinline__ float pow2_floor(float x) { return __uint_as_float(__float_as_uint(x) & 0xFF800000u); }
// x / pow2_floor(x) (x finite, positive, normal), exactly: x's significand in [1, 2)
__device__ __forceinline__ float pow2_ratio(float x) {
  return __uint_as_float((__float_as_uint(x) & 0x007FFFFFu) | 0x3F800000u);
}
// x rounded to BF16 (round to nearest even) and back to FP32
__device__ __forceinline__ float bf16_round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
// the two BF16 halves of a bf16x2 word as FP32 (exact): rowsum adds the P values PV really consumes
__device__ __forceinline__ float bf16x2_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16x2_hi(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }
// max.NaN.f32 (PTX 9.7.3.10, sm_80+): NaN if either source is NaN (fmaxf returns the other one)
__device__ __forceinline__ float fmax_nan(float a, float b) {
  float d;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
  return d;
}
// a >= b ? x : y by setp + selp (PTX ISA, comparison and selection instructions): both values computed,
// no branch (ptxas turned the same C ternary around exp2_poly into a branch: +16 instructions in the
// stage 18 softmax loop, measured)
__device__ __forceinline__ float select_ge(float a, float b, float x, float y) {
  float d;
  asm("{\n\t.reg .pred p;\n\tsetp.ge.f32 p, %1, %2;\n\tselp.f32 %0, %3, %4, p;\n\t}"
      : "=f"(d) : "f"(a), "f"(b), "f"(x), "f"(y));
  return d;
}

// ---- software exp2 on the FMA pipes (blog ch.9 and its appendix) ------------
// 2^x = 2^floor(x) * 2^frac(x). floor: adding 1.5 * 2^23 with rounding toward
// -inf leaves 1.5 * 2^23 + floor(x) exactly (the integer lands in the low
// mantissa bits), so (bits << 23) is floor(x) << 23 mod 2^32 and is added to
// the exponent field of 2^frac, a cubic ((c3 f + c2) f + c1) f + 1 with the
// blog's coefficients. Inputs below -127 are clamped to -127 with max.NaN
// (a NaN stays NaN), where the exponent add gives exactly +0 (ex2.approx.ftz
// flushes there too), so -inf gives 0. The exponent add would turn a NaN into
// FLT_MAX, so the last step, y + x * 0 (one FMA), carries the NaN of x (x * 0
// is +-0 for every other clamped x, and y + -0 = y): the NaN rule at the top
// of this file. b200c_ptx.cuh's exp2_poly_x2 is the same steps on
// f32x2 pairs; exp2_poly equals either lane of it bit for bit (IEEE
// round-to-nearest / round-down operations on each lane).
constexpr float kExp2PolyMagic = 12582912.f;  // 1.5 * 2^23
constexpr float kExp2PolyMin = -127.f;
constexpr float kExp2PolyC3 = 0.077f, kExp2PolyC2 = 0.227f, kExp2PolyC1 = 0.695f;
// 2^frac (`p`, in [1, 2)) times 2^floor, floor held in the low bits of `r` = 1.5 * 2^23 + floor
__device__ __forceinline__ float exp2_poly_join(float p, float r) {
  return __int_as_float(__float_as_int(p) + (__float_as_int(r) << 23));
}
// exp2_poly without the NaN-carrying last step (NaN in, FLT_MAX out): for exponents whose NaN the kernel
// carries another way (the sm_100a softmax's top-P rounding: its rowsum is NaN then, softmax_rules.nan_rescale)
__device__ __forceinline__ float exp2_poly_bare(float x) {
  x = fmax_nan(x, kExp2PolyMin);
  const float r = __fadd_rd(x, kExp2PolyMagic);                  // 1.5 * 2^23 + floor(x)
  const float f = __fsub_rn(x, __fsub_rn(r, kExp2PolyMagic));   // frac(x) in [0, 1)
  float p = __fmaf_rn(kExp2PolyC3, f, kExp2PolyC2);
  p = __fmaf_rn(p, f, kExp2PolyC1);
  p = __fmaf_rn(p, f, 1.f);
  return exp2_poly_join(p, r);
}
__device__ __forceinline__ float exp2_poly(float x) {
  return __fmaf_rn(fmax_nan(x, kExp2PolyMin), 0.f, exp2_poly_bare(x));  // NaN in, NaN out
}

}  // namespace b200c
#endif  // B200C_COMMON_CUH
