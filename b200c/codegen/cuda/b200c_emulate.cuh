// ---------------------------------------------------------------------------
// b200c_emulate.cuh: software model of the sm_100a tcgen05 family for the
// sm_90a emulation target (H200). b200c_ptx.cuh includes this header instead
// of its native tcgen05 helpers when B200C_EMULATE is defined; every helper
// keeps the native name and signature. TMA, mbarriers, named barriers and
// elect.sync stay the real Hopper instructions (b200c_ptx.cuh).
//
// Build: nvcc -arch=sm_90a -DB200C_EMULATE -DB200C_BOUNDED_WAIT -I b200c/codegen/cuda
//
// Sections cited: PTX ISA 9.0 (9.7.16.x = tcgen05) and docs/sm100-facts.md.
//
// The model
//   * Tensor Memory (PTX 9.7.16.1) is a global-memory image, one 128-lane x
//     512-column x 32-bit array per SM slot (TMEM is per SM; two small CTAs can
//     share an SM), laid out [slot][lane][column], slot = %smid read at emu_init.
//     The runtime sets three unmangled globals with cuModuleGetGlobal:
//       b200c_emu_tmem            num_slots*128*512 u32
//       b200c_emu_tmem_alloc_mask num_slots u32, zeroed before each launch;
//                                 bit g = columns 32g..32g+31 allocated
//       b200c_emu_num_slots       > every %smid (size it from %nsmid, PTX 10.9:
//                                 SM ids need not be contiguous, PTX 10.8)
//     Freshly allocated columns are filled with a NaN pattern (kEmuPoison), as
//     stale TMEM would be garbage on hardware; -DB200C_EMU_NO_POISON turns it off.
//   * tcgen05.mma / tcgen05.commit (PTX 9.7.16.10.9, 9.7.16.12.1) are queued
//     by the single MMA-issuing thread into a 32-entry ring in SMEM and executed
//     strictly in issue order by an extra "emulator" warp, the LAST warp of the
//     CTA (kEmulatorThreads). The MMAs are deferred: they run when the next
//     commit (or STOP) reaches the ring, just before its mbarrier arrive, so an
//     MMA's accumulator reaches TMEM only at its commit (the latest moment
//     PTX 9.7.16.6.4.2 allows) and a reader that skips the commit's barrier sees
//     stale TMEM (fresh columns: NaN). Only a ring full of MMAs without a commit
//     runs the oldest early.
//   * tcgen05.ld / tcgen05.st (PTX 9.7.16.8.3, shape .32x32b) are ordinary
//     global loads/stores into the image, with the warp/lane-quadrant access
//     restriction (PTX 9.7.16.8.1) and the CTA's allocation checked. The
//     registers are right at once (a true register dependency needs no wait,
//     PTX 9.7.16.6.4.5), but the access stays in flight for its columns until
//     the warp's wait::ld / wait::st: an MMA that writes columns a warp's ld
//     still reads, or reads columns a warp's st still writes, writes NaN into
//     its D (and the first such hazard of a CTA is printed), so a missing wait
//     gives a wrong result (tests/gpu/test_emulated_tmem_delays.py).
//   * Cost: ~10.5 KiB of static SMEM (ring, FP32 A stage, in-flight masks) on top of the
//     kernel's dynamic SMEM; ~14 us per M128 N128 K16 MMA on an H200
//     (tests/gpu/descriptor_proof.cu prints it). Numerics: exact bf16 products,
//     FP32 sum over k = 0..15 in order (fma chain), then D + sum, round to nearest.
//   * Every misuse the model can see traps with a printf that names it; if the
//     runtime installed b200c_hang_report (B200C_BOUNDED_WAIT) the report gets
//     site = one of the negative EmuError codes below (generated wait sites are
//     >= 0), iter/work = two detail words, lane_thread = the thread.
//
// Contract with the generated kernel
//   1. launch with kEmulatorThreads extra threads; the last warp is the engine;
//   2. thread 0 calls emu_init() before the first __syncthreads(); no other
//      tcgen05 helper may run before that barrier (tmem_alloc comes after it);
//   3. after that barrier the last warp (all 32 lanes) calls emu_mma_engine(),
//      which returns once it has executed the STOP pushed by tcgen05_issue_end();
//   4. one thread issues every MMA/commit of the CTA and calls
//      tcgen05_issue_end() after its last one (also when it issued none);
//   5. barriers that name every thread of the CTA (__syncthreads) after the
//      first one are reached by the engine warp only after emu_mma_engine()
//      returned; TMEM is deallocated after that (the engine still writes it).
// ---------------------------------------------------------------------------
#pragma once
#ifndef B200C_EMULATE
#error "b200c_emulate.cuh is the B200C_EMULATE branch of b200c_ptx.cuh; include b200c_ptx.cuh"
#endif
#include "b200c_ptx.cuh"  // b200c_common.cuh: smem_u32, lane_id, mbar_arrive, HangReport, B200C_WAIT_TIMEOUT_MS (no-op when already included)
#include <stdint.h>
#include <stdio.h>  // device printf

// rows of D per read-modify-write group in the engine (D loads in flight per lane)
#ifndef B200C_EMU_ROW_GROUP
#define B200C_EMU_ROW_GROUP 16
#endif

// global scope (unmangled symbols): set by the runtime with cuModuleGetGlobal
__device__ uint32_t* b200c_emu_tmem;
__device__ uint32_t* b200c_emu_tmem_alloc_mask;
__device__ int b200c_emu_num_slots;

namespace b200c {

constexpr int kEmulatorThreads = 32;

// ---- packed FP32 pairs: scalar fallbacks (fma.rn.f32x2 / add.rn.f32x2 are sm_100+) ----
__device__ __forceinline__ float2 fma_f32x2(float2 a, float2 b, float2 c) {
  return make_float2(__fmaf_rn(a.x, b.x, c.x), __fmaf_rn(a.y, b.y, c.y));
}
__device__ __forceinline__ float2 fma_f32x2_bc(float2 a, float b, float c) {  // a * (b, b) + (c, c)
  return make_float2(__fmaf_rn(a.x, b, c), __fmaf_rn(a.y, b, c));
}
__device__ __forceinline__ float2 add_f32x2(float2 a, float2 b) {
  return make_float2(__fadd_rn(a.x, b.x), __fadd_rn(a.y, b.y));
}
__device__ __forceinline__ float2 mul_f32x2(float2 a, float2 b) {
  return make_float2(__fmul_rn(a.x, b.x), __fmul_rn(a.y, b.y));
}
__device__ __forceinline__ float2 sub_f32x2(float2 a, float2 b) {
  return make_float2(__fsub_rn(a.x, b.x), __fsub_rn(a.y, b.y));
}
__device__ __forceinline__ float2 add_rm_f32x2(float2 a, float2 b) {
  return make_float2(__fadd_rd(a.x, b.x), __fadd_rd(a.y, b.y));
}
// 3-input max.f32 (sm_100) as two fmaxf: same result (max of three, NaN only if all are NaN)
__device__ __forceinline__ float fmax3(float a, float b, float c) { return fmaxf(fmaxf(a, b), c); }
// and max.NaN.f32 with three sources as two two-source max.NaN.f32 (sm_80+): NaN if any source is NaN
__device__ __forceinline__ float fmax3_nan(float a, float b, float c) {
  float d;
  asm("max.NaN.f32 %0, %1, %2;\n\tmax.NaN.f32 %0, %0, %3;" : "=&f"(d) : "f"(a), "f"(b), "f"(c));
  return d;
}

// ---- setmaxnreg (PTX 9.7.19.5): no-op here (the engine warp breaks warpgroup
// alignment), but keep the native operand rules so sm_100a builds agree ----
template <int N> __device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg: N must be a multiple of 8 in [24, 256]");
}
template <int N> __device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg: N must be a multiple of 8 in [24, 256]");
}

// ---------------------------------------------------------------------------
// constants, per-CTA state
// ---------------------------------------------------------------------------
constexpr uint32_t kEmuLanes = 128;      // TMEM lanes (rows), PTX 9.7.16.1
constexpr uint32_t kEmuCols = 512;       // TMEM columns
constexpr uint32_t kEmuQueueSize = 32;   // ring entries
constexpr uint32_t kEmuNoProducer = 0xFFFFFFFFu;
constexpr uint32_t kEmuReadyMagic = 0xB200C0DEu;
constexpr uint32_t kEmuPoison = 0x7FBADBADu;  // NaN written into freshly allocated columns

enum : uint32_t { kEmuOpMmaSS = 1, kEmuOpMmaTS = 2, kEmuOpCommit = 3, kEmuOpStop = 4 };

// HangReport.site codes of the emulator (generated wait sites are >= 0)
enum EmuError : int {
  kEmuErrEngineIdle = -1,    // engine waited too long for a queue entry (iter = entries done)
  kEmuErrQueueFull = -2,     // issuer waited too long for a free ring entry (iter = issued, work = taken)
  kEmuErrAllocWait = -3,     // tmem_alloc waited too long for free columns (iter = ncols, work = mask)
  kEmuErrIdesc = -10,        // unsupported instruction descriptor (iter = idesc, work = d_tmem)
  kEmuErrSmemDesc = -11,     // unsupported SMEM descriptor (iter = idesc, work = d_tmem)
  kEmuErrSmemRange = -12,    // operand address outside dynamic SMEM (iter = addr, work = window end)
  kEmuErrTmemAccess = -13,   // TMEM outside the warp's lanes / the CTA's columns (ld/st: iter = taddr, work = ncols;
                             // mma: iter = idesc, work = d_tmem)
  kEmuErrTmemAlloc = -14,    // alloc/dealloc misuse (alloc: iter = ncols; dealloc: iter = taddr, work = ncols)
  kEmuErrProtocol = -15,     // contract broken: call before emu_init, second issuer, wrong engine warp,
                             // corrupt queue entry (iter/work = the two numbers printed)
  kEmuErrSetup = -16,        // runtime globals missing or %smid >= b200c_emu_num_slots (iter = %smid)
};

struct EmuQueueEntry {      // 32 bytes
  uint32_t op;              // kEmuOp*
  uint32_t d_tmem;          // MMA: D address
  uint32_t idesc;           // MMA: instruction descriptor
  uint32_t accumulate;      // MMA: enable-input-d
  uint64_t a;               // MMA_SS: A descriptor; MMA_TS: A TMEM address; COMMIT: mbarrier
  uint64_t b;               // MMA: B descriptor
};
static_assert(sizeof(EmuQueueEntry) == 32, "queue entry is 32 bytes");

struct EmuCtaState {
  EmuQueueEntry ring[kEmuQueueSize];
  uint32_t head;            // entries published by the issuer (monotonic)
  uint32_t tail;            // entries taken by the engine (monotonic)
  uint32_t producer;        // threadIdx.x of the issuer, kEmuNoProducer before the first entry
  uint32_t slot;            // TMEM image slot (%smid at emu_init)
  uint32_t own_mask;        // 32-column granules held by this CTA
  uint32_t relinquished;    // tcgen05.relinquish_alloc_permit was executed
  uint32_t dyn_base;        // dynamic SMEM window [dyn_base, dyn_base + dyn_size)
  uint32_t dyn_size;
  uint32_t ready;           // kEmuReadyMagic once emu_init ran
  uint32_t hazard_reported; // a TMEM hazard was printed (once per CTA)
};

__shared__ __align__(16) EmuCtaState emu_cta;
__shared__ __align__(16) float emu_a_stage[kEmuLanes][16];  // A of the MMA in flight, FP32 (8 KiB)
// TMEM accesses still in flight, per warp, one bit per 8 TMEM columns (all lanes): tcgen05.ld's not yet
// followed by the warp's tcgen05.wait::ld, tcgen05.st's not yet followed by its tcgen05.wait::st
constexpr uint32_t kEmuMaxWarps = 32;  // 1024 threads
__shared__ unsigned long long emu_ld_pending[kEmuMaxWarps];
__shared__ unsigned long long emu_st_pending[kEmuMaxWarps];
// per warp: (site, iter, work) of its last completed mbar_wait, for the hazard report
__shared__ int emu_last_wait[kEmuMaxWarps][3];
extern __shared__ __align__(16) uint8_t emu_dyn_smem[];     // aliases the kernel's dynamic SMEM

// ---------------------------------------------------------------------------
// small helpers
// ---------------------------------------------------------------------------
__device__ __forceinline__ uint32_t emu_smid() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t emu_dynamic_smem_size() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint64_t emu_now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// true once `mult` x B200C_WAIT_TIMEOUT_MS passed since the first call that read the clock
struct EmuDeadline {
  uint64_t start = 0;
  uint32_t spin = 0;
  uint32_t mult = 1;
  __device__ __forceinline__ bool expired() {
    if ((++spin & 63u) != 0) return false;
    const uint64_t now = emu_now_ns();
    if (start == 0) start = now;
    return now - start > (uint64_t)mult * B200C_WAIT_TIMEOUT_MS * 1000000ull;
  }
};
__device__ __forceinline__ float emu_bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float emu_bf16_hi(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }
__device__ __forceinline__ void emu_ld_shared_v4(uint32_t addr, uint32_t& x, uint32_t& y, uint32_t& z, uint32_t& w) {
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(x), "=r"(y), "=r"(z), "=r"(w) : "r"(addr) : "memory");
}
__device__ __forceinline__ uint32_t emu_ld_shared_u16(uint32_t addr) {
  uint16_t v;
  asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(addr) : "memory");
  return v;
}
// row `lane` of this CTA's TMEM image
__device__ __forceinline__ uint32_t* emu_tmem_row(uint32_t lane) {
  return b200c_emu_tmem + ((size_t)emu_cta.slot * kEmuLanes + lane) * kEmuCols;
}
// columns [col, col + n) lie in granules this CTA allocated
__device__ __forceinline__ bool emu_cols_owned(uint32_t col, uint32_t n) {
  if (n == 0 || col >= kEmuCols || n > kEmuCols - col) return false;
  const uint32_t g0 = col >> 5, g1 = (col + n - 1) >> 5;
  const uint32_t need = ((2u << g1) - 1u) & ~((1u << g0) - 1u);
  return (emu_cta.own_mask & need) == need;
}

// the 8-column units of TMEM columns [col, col + n), n >= 1, col + n <= 512: bit u = columns 8u..8u+7
__device__ __forceinline__ unsigned long long emu_unit_mask(uint32_t col, uint32_t n) {
  const uint32_t u0 = col >> 3, u1 = (col + n - 1u) >> 3;
  return ((2ull << u1) - 1ull) & ~((1ull << u0) - 1ull);  // u1 = 63: 2ull << 63 wraps to 0, minus 1 = all ones
}

// write the hang report (if installed) and trap; the caller printed the message
__device__ __noinline__ void emu_die(int code, uint32_t v0, uint32_t v1) {
#ifdef B200C_BOUNDED_WAIT
  HangReport* r = b200c_hang_report;
  if (r != nullptr && atomicCAS(&r->flag, 0, 1) == 0) {
    r->site = code; r->parity = 0; r->cta = (int)blockIdx.x;
    r->iter = (int)v0; r->work = (int)v1; r->lane_thread = (int)threadIdx.x;
    __threadfence_system();
  }
#endif
  __trap();
}
__device__ __noinline__ void emu_fail_protocol(const char* what, uint32_t v0, uint32_t v1) {
  printf("b200c emulator: protocol error: %s (%u, %u) cta %d thread %d\n", what, v0, v1, (int)blockIdx.x,
         (int)threadIdx.x);
  emu_die(kEmuErrProtocol, v0, v1);
}
__device__ __forceinline__ void emu_require_init(const char* who) {
  if (emu_cta.ready != kEmuReadyMagic)
    emu_fail_protocol(who, 0, 0);  // message: "<helper> before emu_init() + __syncthreads()"
}

// ---------------------------------------------------------------------------
// Operand decoding, shared by the engine and tests/gpu/descriptor_proof.cu
// ---------------------------------------------------------------------------

// 0 when `idesc` is an instruction descriptor this model executes (kind::f16,
// BF16 x BF16 -> F32, dense, A K-major, M = 128, N = 16..256 step 16), else a
// reason code (PTX 9.7.16.4.2 Table 42, docs/sm100-facts.md §4; shapes PTX 9.7.16.2.1 Table 39)
__host__ __device__ __forceinline__ int emu_idesc_check(uint32_t idesc) {
  if (idesc & 0xFu) return 1;                                        // bits 0-3 sparsity / saturate
  if (((idesc >> 4) & 3u) != 1u) return 2;                           // bits 4-5 D format: 1 = F32
  if (((idesc >> 7) & 7u) != 1u || ((idesc >> 10) & 7u) != 1u) return 3;  // A/B format: 1 = BF16
  if (idesc & ((1u << 6) | (1u << 23) | (1u << 29))) return 4;       // reserved bits
  if (idesc & (3u << 13)) return 5;                                  // negate A / B
  if (idesc & (1u << 15)) return 6;                                  // transpose A: A must be K-major
  if (idesc >> 30) return 7;                                         // max shift (.ws only)
  if ((((idesc >> 24) & 31u) << 4) != 128u) return 8;                // M (bits 24-28, >>4)
  const uint32_t n = ((idesc >> 17) & 63u) << 3;                     // N (bits 17-22, >>3)
  if (n < 16 || n > 256 || (n & 15u)) return 9;
  return 0;
}
__host__ __device__ __forceinline__ const char* emu_idesc_reason(int r) {
  switch (r) {
    case 1: return "sparse/saturate bits 0-3 set";
    case 2: return "D format (bits 4-5) is not F32";
    case 3: return "A/B format (bits 7-12) is not BF16";
    case 4: return "reserved bit 6/23/29 set";
    case 5: return "negate A/B (bits 13-14) not modelled";
    case 6: return "transpose A (bit 15) set: A must be K-major";
    case 7: return "max shift (bits 30-31) set";
    case 8: return "M is not 128";
    case 9: return "N is not a multiple of 16 in [16, 256]";
    default: return "ok";
  }
}

// 0 when `desc` is a shared-memory matrix descriptor this model executes, else a
// reason code (PTX 9.7.16.4.1 Table 40/41, docs/sm100-facts.md §3)
__host__ __device__ __forceinline__ int emu_smem_desc_check(uint64_t desc, bool mn_major) {
  if (((desc >> 46) & 7u) != 1u) return 1;                           // bits 46-48 fixed 0b001
  if (((desc >> 14) & 3u) || ((desc >> 30) & 3u) || ((desc >> 53) & 0xFFu)) return 2;  // reserved
  if ((desc >> 49) & 7u) return 3;                                   // base offset: not modelled
  if ((desc >> 52) & 1u) return 4;                                   // LBO mode: absolute (sm_103a)
  const uint32_t sw = (uint32_t)(desc >> 61);
  if (sw != 0u && sw != 2u) return 5;                                // only none / 128B
  // K-major SW128: a K=16 step (32 B) must stay inside one 128-B swizzle row
  if (sw == 2u && !mn_major && ((((uint32_t)desc & 0x3FFFu) << 4) & 127u) > 96u) return 6;
  return 0;
}
__host__ __device__ __forceinline__ const char* emu_smem_desc_reason(int r) {
  switch (r) {
    case 1: return "bits 46-48 are not 0b001 (a Hopper wgmma descriptor?)";
    case 2: return "reserved bits 14-15/30-31/53-60 set";
    case 3: return "base offset (bits 49-51) != 0 is not modelled";
    case 4: return "LBO mode (bit 52) absolute is not modelled";
    case 5: return "swizzle (bits 61-63) other than 0 (none) or 2 (128B)";
    case 6: return "K-major 128B: start is more than 96 B into a 128-B row";
    default: return "ok";
  }
}

// Byte address in the CTA's shared window of element (mn, k) of an MMA operand
// (bf16, one K=16 step: k in 0..15; mn = m for A, n for B) described by `desc`.
// Canonical layouts, PTX 9.7.16.3.3 (units of 16 B, T = 8 bf16):
//   K-major,  none: ((8,m),(T,2k)) : ((1T,SBO),(1,LBO))
//   K-major,  128B: ((8,m),(T,2k)) : ((8T,SBO),(1,T))     LBO unused
//   MN-major, none: ((T,1,m),(8,k)) : ((1,T,SBO),(1T,LBO))
//   MN-major, 128B: ((T,8,m),(8,k)) : ((1,T,LBO),(8T,SBO))
// The 128B swizzle (Swizzle<3,4,3>: bits 4-6 ^= bits 7-9) is applied to the
// absolute address (base offset 0: the pattern repeats on 1024-B boundaries,
// the way TMA's SWIZZLE_128B writes it, PTX 5.5.7).
__host__ __device__ __forceinline__ uint32_t emu_operand_addr(uint64_t desc, bool mn_major, uint32_t mn, uint32_t k) {
  const uint32_t start = ((uint32_t)desc & 0x3FFFu) << 4;
  const uint32_t lbo = ((uint32_t)(desc >> 16) & 0x3FFFu) << 4;
  const uint32_t sbo = ((uint32_t)(desc >> 32) & 0x3FFFu) << 4;
  const bool sw128 = (uint32_t)(desc >> 61) == 2u;
  uint32_t a;
  if (!mn_major) {
    a = sw128 ? start + (mn >> 3) * sbo + (mn & 7u) * 128u + k * 2u
              : start + (mn >> 3) * sbo + (k >> 3) * lbo + (mn & 7u) * 16u + (k & 7u) * 2u;
  } else {
    a = sw128 ? start + (mn >> 6) * lbo + (mn & 63u) * 2u + (k & 7u) * 128u + (k >> 3) * sbo
              : start + (mn >> 3) * sbo + (k >> 3) * lbo + (k & 7u) * 16u + (mn & 7u) * 2u;
  }
  if (sw128) a ^= ((a >> 7) & 7u) << 4;
  return a;
}

// A operand in TMEM (tcgen05.mma ... [a_tmem], kind::f16): row m in lane
// lane(a)+m, two bf16 per 32-bit column, column col(a) + k/2, even k in bits
// 0-15 (docs/sm100-facts.md §3.1, §12; CUTLASS tmem_frg addressing -- not confirmed on a B200).
// Word holding A[m][2*kp] (low half) and A[m][2*kp+1] (high half):
__device__ __forceinline__ const uint32_t* emu_tmem_a_words(uint32_t a_tmem, uint32_t m, uint32_t kp) {
  return emu_tmem_row((a_tmem >> 16) + m) + (a_tmem & 0xFFFFu) + kp;
}
__device__ __forceinline__ uint16_t emu_tmem_a_bits(uint32_t a_tmem, uint32_t m, uint32_t k) {
  return (uint16_t)(*emu_tmem_a_words(a_tmem, m, k >> 1) >> (16u * (k & 1u)));
}

// ---------------------------------------------------------------------------
// emu_init (thread 0, before the first __syncthreads)
// ---------------------------------------------------------------------------
__device__ __noinline__ void emu_fail_setup(uint32_t smid) {
  printf("b200c emulator: setup error: b200c_emu_tmem=%p b200c_emu_tmem_alloc_mask=%p b200c_emu_num_slots=%d, "
         "%%smid=%u (the runtime must set all three and make num_slots > every %%smid) cta %d\n",
         (void*)b200c_emu_tmem, (void*)b200c_emu_tmem_alloc_mask, b200c_emu_num_slots, smid, (int)blockIdx.x);
  emu_die(kEmuErrSetup, smid, (uint32_t)b200c_emu_num_slots);
}
__device__ __forceinline__ void emu_init() {
  EmuCtaState& s = emu_cta;
  const uint32_t smid = emu_smid();
  if (b200c_emu_tmem == nullptr || b200c_emu_tmem_alloc_mask == nullptr || (int)smid >= b200c_emu_num_slots)
    emu_fail_setup(smid);
  s.head = 0; s.tail = 0; s.producer = kEmuNoProducer; s.slot = smid;
  s.own_mask = 0; s.relinquished = 0; s.hazard_reported = 0;
  for (uint32_t w = 0; w < kEmuMaxWarps; ++w) {
    emu_ld_pending[w] = 0ull; emu_st_pending[w] = 0ull;
    emu_last_wait[w][0] = -1; emu_last_wait[w][1] = -1; emu_last_wait[w][2] = -1;
  }
  s.dyn_base = smem_u32(emu_dyn_smem);
  s.dyn_size = emu_dynamic_smem_size();
  __threadfence_block();
  s.ready = kEmuReadyMagic;
}

// ---------------------------------------------------------------------------
// TMEM allocation (PTX 9.7.16.7.1): one whole warp
// ---------------------------------------------------------------------------
__device__ __noinline__ void emu_fail_alloc(const char* what, uint32_t v0, uint32_t v1) {
  printf("b200c emulator: %s (0x%x, 0x%x; CTA holds column granules 0x%04x) cta %d warp %d\n", what, v0, v1,
         emu_cta.own_mask, (int)blockIdx.x, (int)(threadIdx.x >> 5));
  emu_die(kEmuErrTmemAlloc, v0, v1);
}
__device__ __noinline__ uint32_t emu_tmem_alloc_lane0(uint32_t smem_slot, uint32_t ncols) {
  emu_require_init("tmem_alloc before emu_init() + __syncthreads()");
  if (emu_cta.relinquished) emu_fail_alloc("tcgen05.alloc after tcgen05.relinquish_alloc_permit", ncols, 0);
  if (ncols < 32 || ncols > kEmuCols || (ncols & (ncols - 1)))
    emu_fail_alloc("tcgen05.alloc: nCols must be a power of 2 in [32, 512]", ncols, 0);
  const uint32_t g = ncols >> 5;
  const uint32_t run = (g >= 32u) ? 0xFFFFFFFFu : ((1u << g) - 1u);
  uint32_t* mask = b200c_emu_tmem_alloc_mask + emu_cta.slot;
  EmuDeadline deadline;
  uint32_t first = 0, got = 0xFFFFFFFFu;
  for (;;) {  // real tcgen05.alloc blocks until the columns are free
    const uint32_t cur = *reinterpret_cast<volatile uint32_t*>(mask);
    uint32_t s = 0;
    for (; s + g <= 16u; s += g)
      if ((cur & (run << s)) == 0u) break;
    if (s + g <= 16u) {
      if (atomicCAS(mask, cur, cur | (run << s)) == cur) { got = s; break; }
      continue;  // lost a race with a co-resident CTA: re-read
    }
    first = cur;
    if (deadline.expired()) {
      printf("b200c emulator: tcgen05.alloc of %u columns waited more than %d ms: SM slot %u has granules 0x%04x "
             "allocated (a co-resident CTA never deallocated?) cta %d\n",
             ncols, B200C_WAIT_TIMEOUT_MS, emu_cta.slot, first, (int)blockIdx.x);
      emu_die(kEmuErrAllocWait, ncols, first);
    }
    __nanosleep(256);
  }
  emu_cta.own_mask |= run << got;
  const uint32_t col = got * 32u;
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(smem_slot), "r"(col) : "memory");  // lane 0, column col
  return col;
}
__device__ __forceinline__ void tmem_alloc(uint32_t smem_slot, uint32_t ncols) {
  __syncwarp();
  uint32_t col = 0;
  if (lane_id() == 0) col = emu_tmem_alloc_lane0(smem_slot, ncols);
  col = __shfl_sync(0xFFFFFFFFu, col, 0);
#ifndef B200C_EMU_NO_POISON
  // fresh TMEM holds stale data on hardware: poison it so a first MMA with
  // enable-input-d set, or a read before any write, shows up as NaN
  const uint4 p = make_uint4(kEmuPoison, kEmuPoison, kEmuPoison, kEmuPoison);
  for (uint32_t lane = 0; lane < kEmuLanes; ++lane) {
    uint4* row = reinterpret_cast<uint4*>(emu_tmem_row(lane) + col);
    for (uint32_t j = lane_id(); j < ncols / 4u; j += 32u) row[j] = p;
  }
  __threadfence_block();
#endif
  __syncwarp();
}
__device__ __forceinline__ void tmem_relinquish_alloc_permit() {
  if (lane_id() == 0) emu_cta.relinquished = 1;
  __syncwarp();
}
__device__ __noinline__ void emu_tmem_dealloc_lane0(uint32_t taddr, uint32_t ncols) {
  const uint32_t col = taddr & 0xFFFFu;
  if ((taddr >> 16) != 0u) emu_fail_alloc("tcgen05.dealloc: lane field of taddr must be 0", taddr, ncols);
  if (ncols < 32 || ncols > kEmuCols || (ncols & (ncols - 1)) || (col & 31u))
    emu_fail_alloc("tcgen05.dealloc: nCols must be a power of 2 in [32, 512] at a 32-column boundary", taddr, ncols);
  if (!emu_cols_owned(col, ncols))
    emu_fail_alloc("tcgen05.dealloc of columns this CTA did not allocate", taddr, ncols);
  const uint32_t g = ncols >> 5;
  const uint32_t bits = ((g >= 32u) ? 0xFFFFFFFFu : ((1u << g) - 1u)) << (col >> 5);
  emu_cta.own_mask &= ~bits;
  __threadfence();  // our image writes before the columns go to another CTA
  atomicAnd(b200c_emu_tmem_alloc_mask + emu_cta.slot, ~bits);
}
__device__ __forceinline__ void tmem_dealloc(uint32_t taddr, uint32_t ncols) {
  __syncwarp();
  if (lane_id() == 0) emu_tmem_dealloc_lane0(taddr, ncols);
  __syncwarp();
}

// ---------------------------------------------------------------------------
// Issuer side: tcgen05.mma / tcgen05.commit enqueue (PTX 9.7.16.10.9, 9.7.16.12.1)
// ---------------------------------------------------------------------------
__device__ __noinline__ void emu_fail_mma(const char* what, uint32_t d_tmem, uint64_t a, uint64_t b, uint32_t idesc,
                                          int code, const char* reason) {
  printf("b200c emulator: tcgen05.mma rejected: %s: %s (d_tmem=0x%08x a=0x%016llx b_desc=0x%016llx idesc=0x%08x; "
         "CTA holds column granules 0x%04x) cta %d thread %d\n",
         what, reason, d_tmem, (unsigned long long)a, (unsigned long long)b, idesc, emu_cta.own_mask,
         (int)blockIdx.x, (int)threadIdx.x);
  emu_die(code, idesc, d_tmem);
}
__device__ __forceinline__ void emu_check_mma(bool a_tmem, uint32_t d_tmem, uint64_t a, uint64_t b_desc,
                                              uint32_t idesc) {
  const int ri = emu_idesc_check(idesc);
  if (ri) emu_fail_mma("instruction descriptor", d_tmem, a, b_desc, idesc, kEmuErrIdesc, emu_idesc_reason(ri));
  const uint32_t n = ((idesc >> 17) & 63u) << 3;
  if ((d_tmem >> 16) != 0u || !emu_cols_owned(d_tmem & 0xFFFFu, n))
    emu_fail_mma("D in TMEM", d_tmem, a, b_desc, idesc, kEmuErrTmemAccess,
                 "M=128 needs lane 0 and N columns inside this CTA's allocation");
  if (a_tmem) {
    const uint32_t at = (uint32_t)a;
    if ((at >> 16) != 0u || !emu_cols_owned(at & 0xFFFFu, 8))
      emu_fail_mma("A in TMEM", d_tmem, a, b_desc, idesc, kEmuErrTmemAccess,
                   "needs lane 0 and 8 columns (16 bf16) inside this CTA's allocation");
  } else {
    const int ra = emu_smem_desc_check(a, false);
    if (ra) emu_fail_mma("A descriptor", d_tmem, a, b_desc, idesc, kEmuErrSmemDesc, emu_smem_desc_reason(ra));
  }
  const int rb = emu_smem_desc_check(b_desc, (idesc >> 16) & 1u);
  if (rb) emu_fail_mma("B descriptor", d_tmem, a, b_desc, idesc, kEmuErrSmemDesc, emu_smem_desc_reason(rb));
}

__device__ __noinline__ void emu_wait_ring_slot(uint32_t head) {
  volatile uint32_t* vtail = &emu_cta.tail;
  EmuDeadline deadline;
  while (head - *vtail >= kEmuQueueSize) {
    if (deadline.expired()) {
      printf("b200c emulator: MMA issuer waited more than %d ms for a free MMA-queue entry (issued %u, engine took "
             "%u): is the engine warp (last warp) running emu_mma_engine()? cta %d thread %d\n",
             B200C_WAIT_TIMEOUT_MS, head, *vtail, (int)blockIdx.x, (int)threadIdx.x);
      emu_die(kEmuErrQueueFull, head, *vtail);
    }
    __nanosleep(64);
  }
}
__device__ __forceinline__ void emu_enqueue(uint32_t op, uint32_t d_tmem, uint64_t a, uint64_t b, uint32_t idesc,
                                            uint32_t accumulate) {
  EmuCtaState& s = emu_cta;
  emu_require_init("tcgen05.mma/commit before emu_init() + __syncthreads()");
  const uint32_t me = threadIdx.x;
  volatile uint32_t* vprod = &s.producer;
  if (*vprod != me) {
    if (*vprod != kEmuNoProducer)
      emu_fail_protocol("tcgen05.mma/commit from a second thread (first issuer, this thread)", *vprod, me);
    *vprod = me;
  }
  volatile uint32_t* vhead = &s.head;
  const uint32_t head = *vhead;
  if (head - *reinterpret_cast<volatile uint32_t*>(&s.tail) >= kEmuQueueSize) emu_wait_ring_slot(head);
  volatile EmuQueueEntry* e = &s.ring[head % kEmuQueueSize];
  e->op = op; e->d_tmem = d_tmem; e->idesc = idesc; e->accumulate = accumulate; e->a = a; e->b = b;
  __threadfence_block();  // entry before head (release)
  *vhead = head + 1u;
}

// D[tmem] (+)= A[smem desc] . B[smem desc]
__device__ __forceinline__ void tcgen05_mma_ss(uint32_t d_tmem, uint64_t a_desc, uint64_t b_desc, uint32_t idesc,
                                               uint32_t accumulate) {
  emu_require_init("tcgen05.mma before emu_init() + __syncthreads()");
  emu_check_mma(false, d_tmem, a_desc, b_desc, idesc);
  emu_enqueue(kEmuOpMmaSS, d_tmem, a_desc, b_desc, idesc, accumulate != 0u);
}
// D[tmem] (+)= A[tmem] . B[smem desc]
__device__ __forceinline__ void tcgen05_mma_ts(uint32_t d_tmem, uint32_t a_tmem, uint64_t b_desc, uint32_t idesc,
                                               uint32_t accumulate) {
  emu_require_init("tcgen05.mma before emu_init() + __syncthreads()");
  emu_check_mma(true, d_tmem, a_tmem, b_desc, idesc);
  emu_enqueue(kEmuOpMmaTS, d_tmem, a_tmem, b_desc, idesc, accumulate != 0u);
}
// one arrive on `bar` once every earlier MMA of this issuer completed
__device__ __forceinline__ void tcgen05_commit(uint32_t bar) { emu_enqueue(kEmuOpCommit, 0, bar, 0, 0, 0); }
// the SmemDesc forms (b200c_ptx.cuh): by the calling thread, and by one elected lane of a converged warp
__device__ __forceinline__ void tcgen05_mma_ss(uint32_t d_tmem, SmemDesc a, SmemDesc b, uint32_t idesc,
                                               uint32_t accumulate) {
  tcgen05_mma_ss(d_tmem, desc_u64(a), desc_u64(b), idesc, accumulate);
}
__device__ __forceinline__ void tcgen05_mma_ts(uint32_t d_tmem, uint32_t a_tmem, SmemDesc b, uint32_t idesc,
                                               uint32_t accumulate) {
  tcgen05_mma_ts(d_tmem, a_tmem, desc_u64(b), idesc, accumulate);
}
template <uint32_t IDESC>
__device__ __forceinline__ void tcgen05_mma_ss_elect(uint32_t d_tmem, SmemDesc a, SmemDesc b, uint32_t accumulate) {
  if (elect_one()) tcgen05_mma_ss(d_tmem, desc_u64(a), desc_u64(b), IDESC, accumulate);
  __syncwarp();
}
template <uint32_t IDESC>
__device__ __forceinline__ void tcgen05_mma_ts_elect(uint32_t d_tmem, uint32_t a_tmem, SmemDesc b, uint32_t accumulate) {
  if (elect_one()) tcgen05_mma_ts(d_tmem, a_tmem, desc_u64(b), IDESC, accumulate);
  __syncwarp();
}
__device__ __forceinline__ void tcgen05_commit_elect(uint32_t bar) {
  if (elect_one()) tcgen05_commit(bar);
  __syncwarp();
}
// the issuer will issue no more MMAs: the engine returns after this entry
__device__ __forceinline__ void tcgen05_issue_end() { emu_enqueue(kEmuOpStop, 0, 0, 0, 0, 0); }

// ---- fences and waits (PTX 9.7.16.11, 9.7.16.8.5) ----
// tcgen05.ld/st move their data at once here (a true register dependency on an ld's result is honoured
// without a wait, PTX 9.7.16.6.4.5), but each stays "in flight" for the TMEM columns it touched until
// the warp's wait::ld / wait::st (emu_ld_pending / emu_st_pending): an MMA that the engine runs while a
// warp's ld of its D columns, or st of its A or D columns, is still in flight is a hazard on hardware
// (the ld may read the MMA's result, the MMA the old data) and here writes NaN into its D
// (emu_tmem_hazard), so a missing wait gives a wrong result instead of passing by luck.
__device__ __forceinline__ void tcgen05_fence_before() { __threadfence_block(); }
__device__ __forceinline__ void tcgen05_fence_after() { __threadfence_block(); }
__device__ __forceinline__ void emu_clear_pending(unsigned long long* pending) {
  __syncwarp();
  __threadfence_block();  // this warp's TMEM accesses before the clear
  const uint32_t w = threadIdx.x >> 5;
  if (lane_id() == 0 && w < kEmuMaxWarps) *reinterpret_cast<volatile unsigned long long*>(&pending[w]) = 0ull;
  __threadfence_block();  // the clear before this warp's next synchronizing operation (arrive, barrier)
  __syncwarp();
}
__device__ __forceinline__ void emu_note_wait(int site, int iter, int work) {
  const uint32_t w = threadIdx.x >> 5;  // any lane that waited writes the same three words
  if (w < kEmuMaxWarps) {
    volatile int* n = emu_last_wait[w];
    n[0] = site; n[1] = iter; n[2] = work;
  }
}
__device__ __forceinline__ void tmem_wait_ld() { emu_clear_pending(emu_ld_pending); }
__device__ __forceinline__ void tmem_wait_st() { emu_clear_pending(emu_st_pending); }
// columns [taddr's column, + ncols) in flight for this warp (lane 0 records; the warp is converged)
__device__ __forceinline__ void emu_mark_pending(unsigned long long* pending, uint32_t taddr, uint32_t ncols) {
  const uint32_t w = threadIdx.x >> 5;
  if (lane_id() == 0 && w < kEmuMaxWarps) {
    volatile unsigned long long* p = &pending[w];
    *p = *p | emu_unit_mask(taddr & 0xFFFFu, ncols);
  }
}

// ---------------------------------------------------------------------------
// tcgen05.ld / tcgen05.st, shape .32x32b (PTX 9.7.16.8.3, 9.7.16.2.3.1.1):
// lane t of the warp <-> TMEM lane lane(taddr)+t, register j <-> column col(taddr)+j.
// Access restriction (PTX 9.7.16.8.1): warp w reaches lanes 32*(w%4)..+31 only.
// ---------------------------------------------------------------------------
__device__ __noinline__ void emu_fail_tmem_ldst(const char* what, uint32_t taddr, uint32_t ncols, bool uniform) {
  const uint32_t w = threadIdx.x >> 5;
  printf("b200c emulator: %s access violation: taddr=0x%08x (lane %u, column %u, %u columns) by warp %u, which may "
         "use lanes %u-%u only%s; CTA holds column granules 0x%04x; cta %d thread %d\n",
         what, taddr, taddr >> 16, taddr & 0xFFFFu, ncols, w, 32u * (w & 3u), 32u * (w & 3u) + 31u,
         uniform ? "" : " (lanes of the warp passed different addresses)", emu_cta.own_mask, (int)blockIdx.x,
         (int)threadIdx.x);
  emu_die(kEmuErrTmemAccess, taddr, ncols);
}
__device__ __forceinline__ void emu_check_tmem_ldst(const char* what, uint32_t taddr, uint32_t ncols) {
  const uint32_t w = threadIdx.x >> 5;
  const bool uniform = __shfl_sync(0xFFFFFFFFu, taddr, 0) == taddr;  // .sync.aligned: one address per warp
  const bool bad = !uniform || (taddr >> 16) != 32u * (w & 3u) || !emu_cols_owned(taddr & 0xFFFFu, ncols);
  const uint32_t m = __ballot_sync(0xFFFFFFFFu, bad);
  if (m != 0u) {  // one lane reports, the warp traps
    if (lane_id() == (uint32_t)(__ffs(m) - 1)) emu_fail_tmem_ldst(what, taddr, ncols, uniform);
    __syncwarp();
    __trap();
  }
}
template <int N>
__device__ __forceinline__ void emu_tmem_ld(uint32_t taddr, float (&r)[N]) {
  emu_check_tmem_ldst("tcgen05.ld", taddr, N);
  emu_mark_pending(emu_ld_pending, taddr, N);
  const uint32_t* p = emu_tmem_row((taddr >> 16) + lane_id()) + (taddr & 0xFFFFu);
  if ((taddr & 3u) == 0u) {
#pragma unroll
    for (int j = 0; j < N / 4; ++j) {
      const uint4 v = reinterpret_cast<const uint4*>(p)[j];
      r[4 * j + 0] = __uint_as_float(v.x); r[4 * j + 1] = __uint_as_float(v.y);
      r[4 * j + 2] = __uint_as_float(v.z); r[4 * j + 3] = __uint_as_float(v.w);
    }
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) r[j] = __uint_as_float(p[j]);
  }
}
__device__ __forceinline__ void tmem_ld_x8(uint32_t taddr, float (&r)[8]) { emu_tmem_ld<8>(taddr, r); }
__device__ __forceinline__ void tmem_ld_x16(uint32_t taddr, float (&r)[16]) { emu_tmem_ld<16>(taddr, r); }
__device__ __forceinline__ void tmem_ld_x32(uint32_t taddr, float (&r)[32]) { emu_tmem_ld<32>(taddr, r); }
template <int N>
__device__ __forceinline__ void emu_tmem_st(uint32_t taddr, const uint32_t (&r)[N]) {
  emu_check_tmem_ldst("tcgen05.st", taddr, N);
  emu_mark_pending(emu_st_pending, taddr, N);
  uint32_t* p = emu_tmem_row((taddr >> 16) + lane_id()) + (taddr & 0xFFFFu);
  if ((taddr & 3u) == 0u) {
#pragma unroll
    for (int j = 0; j < N / 4; ++j)
      reinterpret_cast<uint4*>(p)[j] = make_uint4(r[4 * j], r[4 * j + 1], r[4 * j + 2], r[4 * j + 3]);
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) p[j] = r[j];
  }
}
__device__ __forceinline__ void tmem_st_x8(uint32_t taddr, const uint32_t (&r)[8]) { emu_tmem_st<8>(taddr, r); }
__device__ __forceinline__ void tmem_st_x16(uint32_t taddr, const uint32_t (&r)[16]) { emu_tmem_st<16>(taddr, r); }
__device__ __forceinline__ void tmem_st_x32(uint32_t taddr, const uint32_t (&r)[32]) { emu_tmem_st<32>(taddr, r); }

// ---------------------------------------------------------------------------
// Engine (the last warp): executes queue entries in issue order
// ---------------------------------------------------------------------------
__device__ __noinline__ void emu_fail_smem_range(uint32_t op, uint32_t addr, uint64_t a, uint64_t b) {
  const uint32_t lo = emu_cta.dyn_base, hi = emu_cta.dyn_base + emu_cta.dyn_size;
  printf("b200c emulator: tcgen05.mma (%s) reads SMEM at 0x%05x, outside the dynamic SMEM window [0x%05x, 0x%05x) "
         "(a=0x%016llx b_desc=0x%016llx) cta %d\n",
         op == kEmuOpMmaTS ? "A in TMEM" : "A and B in SMEM", addr, lo, hi, (unsigned long long)a,
         (unsigned long long)b, (int)blockIdx.x);
  emu_die(kEmuErrSmemRange, addr, hi);
}
// lane `lane` of the warp found an out-of-window address: report it once, trap
__device__ __forceinline__ void emu_check_warp_range(bool bad, uint32_t bad_addr, uint32_t op, uint64_t a,
                                                     uint64_t b) {
  const uint32_t m = __ballot_sync(0xFFFFFFFFu, bad);
  if (m != 0u) {
    if (lane_id() == (uint32_t)(__ffs(m) - 1)) emu_fail_smem_range(op, bad_addr, a, b);
    __syncwarp();
    __trap();
  }
}

// The engine warp, before it runs an MMA: true when a warp's TMEM access is still in flight (see
// tcgen05_fence_before) on columns the MMA writes (D, after a tcgen05.ld without wait::ld) or reads (A in
// TMEM or an accumulated D, after a tcgen05.st without wait::st). Prints the first hazard of the CTA.
__device__ __noinline__ bool emu_tmem_hazard(uint32_t op, uint32_t d_tmem, uint64_t a, uint32_t n_total,
                                             uint32_t accumulate) {
  const uint32_t lane = lane_id();
  const unsigned long long d_units = emu_unit_mask(d_tmem & 0xFFFFu, n_total);
  const unsigned long long read_units = (accumulate ? d_units : 0ull) |
                                        (op == kEmuOpMmaTS ? emu_unit_mask((uint32_t)a & 0xFFFFu, 8u) : 0ull);
  const uint32_t warps = min(blockDim.x / 32u, kEmuMaxWarps);
  unsigned long long ld = 0ull, st = 0ull;
  if (lane < warps) {
    ld = *reinterpret_cast<volatile unsigned long long*>(&emu_ld_pending[lane]) & d_units;
    st = *reinterpret_cast<volatile unsigned long long*>(&emu_st_pending[lane]) & read_units;
  }
  const uint32_t m = __ballot_sync(0xFFFFFFFFu, ld != 0ull || st != 0ull);
  if (m != 0u && lane == (uint32_t)(__ffs(m) - 1) && atomicExch(&emu_cta.hazard_reported, 1u) == 0u) {
    const volatile int* mine = emu_last_wait[lane];
    const uint32_t issuer = *reinterpret_cast<volatile uint32_t*>(&emu_cta.producer) >> 5;
    const volatile int* theirs = emu_last_wait[issuer < kEmuMaxWarps ? issuer : 0];
    printf("b200c emulator: TMEM hazard: tcgen05.mma (D at column %u, %u columns) runs while warp %u's %s "
           "(8-column units 0x%016llx) has not been waited for (tcgen05.wait::%s): its D is written as NaN; "
           "warp %u last passed wait site %d (iter %d, work %d), the MMA issuer (warp %u) site %d (iter %d, "
           "work %d); cta %d\n",
           d_tmem & 0xFFFFu, n_total, lane, ld ? "tcgen05.ld of those columns" : "tcgen05.st of columns it reads",
           ld ? ld : st, ld ? "ld" : "st", lane, mine[0], mine[1], mine[2], issuer, theirs[0], theirs[1], theirs[2],
           (int)blockIdx.x);
  }
  return m != 0u;
}

// D[m][n] = (accumulate ? D[m][n] : 0) + sum_k A[m][k] * B[k][n], M = 128, K = 16,
// FP32 (PTX 9.7.16.10.9; layout D, M=128: row m in lane m, column col(d)+n, PTX 9.7.16.10.5)
__device__ __noinline__ void emu_execute_mma(uint32_t op, uint32_t d_tmem, uint64_t a, uint64_t b_desc,
                                             uint32_t idesc, uint32_t accumulate) {
  const uint32_t lane = lane_id();
  const uint32_t n_total = ((idesc >> 17) & 63u) << 3;
  if (emu_tmem_hazard(op, d_tmem, a, n_total, accumulate)) {  // the race's result: D is NaN
    for (uint32_t m = 0; m < kEmuLanes; ++m) {
      uint32_t* row = emu_tmem_row(m) + (d_tmem & 0xFFFFu);
      for (uint32_t n = lane; n < n_total; n += 32u) row[n] = kEmuPoison;
    }
    __syncwarp();
    return;
  }
  const bool b_mn_major = (idesc >> 16) & 1u;
  const uint32_t lo = emu_cta.dyn_base, hi = emu_cta.dyn_base + emu_cta.dyn_size;
  bool bad = false;
  uint32_t bad_addr = 0;

  // (1) stage A (128 x 16) as FP32; one 16-B chunk (8 consecutive k) per step:
  // 8 k of one row are contiguous in every K-major canonical layout
  for (uint32_t i = lane; i < 2u * kEmuLanes; i += 32u) {
    const uint32_t m = i >> 1, k0 = (i & 1u) * 8u;
    uint32_t w0 = 0, w1 = 0, w2 = 0, w3 = 0;
    if (op == kEmuOpMmaTS) {
      const uint32_t* p = emu_tmem_a_words((uint32_t)a, m, k0 >> 1);
      w0 = p[0]; w1 = p[1]; w2 = p[2]; w3 = p[3];
    } else {
      const uint32_t addr = emu_operand_addr(a, false, m, k0);
      if (addr < lo || addr + 16u > hi) { bad = true; bad_addr = addr; }
      else emu_ld_shared_v4(addr, w0, w1, w2, w3);
    }
    float4* dst = reinterpret_cast<float4*>(&emu_a_stage[m][k0]);
    dst[0] = make_float4(emu_bf16_lo(w0), emu_bf16_hi(w0), emu_bf16_lo(w1), emu_bf16_hi(w1));
    dst[1] = make_float4(emu_bf16_lo(w2), emu_bf16_hi(w2), emu_bf16_lo(w3), emu_bf16_hi(w3));
  }
  emu_check_warp_range(bad, bad_addr, op, a, b_desc);
  __syncwarp();

  // (2) lane owns column n = n0 + lane: B[0..15][n] in registers, all 128 rows
  // of D read-modify-written (coalesced along the columns)
  float* const d_base = reinterpret_cast<float*>(emu_tmem_row(0)) + (d_tmem & 0xFFFFu);  // lane(d) == 0
  for (uint32_t n0 = 0; n0 < n_total; n0 += 32u) {
    const uint32_t n = n0 + lane;
    const bool active = n < n_total;
    float bk[16];
    if (active) {
      if (!b_mn_major) {  // K-major: two 16-B chunks
#pragma unroll
        for (uint32_t h = 0; h < 2u; ++h) {
          const uint32_t addr = emu_operand_addr(b_desc, false, n, 8u * h);
          uint32_t w0 = 0, w1 = 0, w2 = 0, w3 = 0;
          if (addr < lo || addr + 16u > hi) { bad = true; bad_addr = addr; }
          else emu_ld_shared_v4(addr, w0, w1, w2, w3);
          bk[8 * h + 0] = emu_bf16_lo(w0); bk[8 * h + 1] = emu_bf16_hi(w0);
          bk[8 * h + 2] = emu_bf16_lo(w1); bk[8 * h + 3] = emu_bf16_hi(w1);
          bk[8 * h + 4] = emu_bf16_lo(w2); bk[8 * h + 5] = emu_bf16_hi(w2);
          bk[8 * h + 6] = emu_bf16_lo(w3); bk[8 * h + 7] = emu_bf16_hi(w3);
        }
      } else {  // MN-major: one element per k
#pragma unroll
        for (uint32_t k = 0; k < 16u; ++k) {
          const uint32_t addr = emu_operand_addr(b_desc, true, n, k);
          uint32_t v = 0;
          if (addr < lo || addr + 2u > hi) { bad = true; bad_addr = addr; }
          else v = emu_ld_shared_u16(addr);
          bk[k] = __uint_as_float(v << 16);
        }
      }
    }
    emu_check_warp_range(bad, bad_addr, op, a, b_desc);
    if (active) {
      // Groups of kRows rows: D loads first (kRows in flight), then every shared
      // read of A, then the D stores. dcol is a generic pointer, so the compiler
      // must assume a D store may alias emu_a_stage: no store may sit between
      // the A reads of one group, or every row serializes behind the previous.
      constexpr uint32_t kRows = B200C_EMU_ROW_GROUP;
      static_assert(kEmuLanes % kRows == 0, "B200C_EMU_ROW_GROUP must divide 128");
      float* const dcol = d_base + n;
      for (uint32_t m0 = 0; m0 < kEmuLanes; m0 += kRows) {
        float acc[kRows];
#pragma unroll
        for (uint32_t r = 0; r < kRows; ++r) acc[r] = accumulate ? dcol[(m0 + r) * kEmuCols] : 0.0f;
#pragma unroll
        for (uint32_t r = 0; r < kRows; ++r) {
          const float4* ar = reinterpret_cast<const float4*>(emu_a_stage[m0 + r]);  // broadcast reads
          const float4 a0 = ar[0], a1 = ar[1], a2 = ar[2], a3 = ar[3];
          float s = __fmul_rn(a0.x, bk[0]);
          s = __fmaf_rn(a0.y, bk[1], s);  s = __fmaf_rn(a0.z, bk[2], s);  s = __fmaf_rn(a0.w, bk[3], s);
          s = __fmaf_rn(a1.x, bk[4], s);  s = __fmaf_rn(a1.y, bk[5], s);  s = __fmaf_rn(a1.z, bk[6], s);
          s = __fmaf_rn(a1.w, bk[7], s);  s = __fmaf_rn(a2.x, bk[8], s);  s = __fmaf_rn(a2.y, bk[9], s);
          s = __fmaf_rn(a2.z, bk[10], s); s = __fmaf_rn(a2.w, bk[11], s); s = __fmaf_rn(a3.x, bk[12], s);
          s = __fmaf_rn(a3.y, bk[13], s); s = __fmaf_rn(a3.z, bk[14], s); s = __fmaf_rn(a3.w, bk[15], s);
          acc[r] = __fadd_rn(acc[r], s);  // D + sum_k A*B
        }
#pragma unroll
        for (uint32_t r = 0; r < kRows; ++r) dcol[(m0 + r) * kEmuCols] = acc[r];
      }
    }
  }
  __syncwarp();  // every lane done with emu_a_stage and D before the next entry
}

__device__ __noinline__ void emu_fail_engine_idle(uint32_t done, uint32_t last_op) {
  printf("b200c emulator: MMA engine (last warp) waited more than 4 x %d ms for an MMA-queue entry after %u entries "
         "(last op %u: 1 mma_ss, 2 mma_ts, 3 commit): the issuer is stuck or never called tcgen05_issue_end() "
         "cta %d\n",
         B200C_WAIT_TIMEOUT_MS, done, last_op, (int)blockIdx.x);
  emu_die(kEmuErrEngineIdle, done, last_op);
}
// run ring entry `index` (an MMA) and free its slot (all 32 lanes)
__device__ __forceinline__ void emu_run_entry(uint32_t index) {
  EmuCtaState& s = emu_cta;
  const volatile EmuQueueEntry* ve = &s.ring[index % kEmuQueueSize];
  const uint32_t op = ve->op, d_tmem = ve->d_tmem, idesc = ve->idesc, acc = ve->accumulate;
  const uint64_t a = ve->a, b = ve->b;
  __syncwarp();
  emu_execute_mma(op, d_tmem, a, b, idesc, acc);
  __threadfence_block();  // the entry read and D written before the slot is handed back
  __syncwarp();
  if (lane_id() == 0) *reinterpret_cast<volatile uint32_t*>(&s.tail) = index + 1u;
}
// The MMAs are deferred: the engine runs an MMA only when the issuer's next commit (or STOP) reaches the
// queue, in issue order, so an MMA's D reaches TMEM just before its commit's mbarrier arrive, the latest
// moment tcgen05.commit allows (PTX 9.7.16.6.4.2), and a reader that skips the commit's barrier sees the
// old TMEM. When the ring fills up with MMAs before a commit, the oldest runs early (an MMA may complete
// at any time before its commit), so the issuer never waits forever for a slot.
__device__ __noinline__ void emu_mma_engine_body() {
  const uint32_t lane = lane_id();
  EmuCtaState& s = emu_cta;
  if (s.ready != kEmuReadyMagic || (threadIdx.x >> 5) != blockDim.x / 32u - 1u) {
    if (lane == 0)
      emu_fail_protocol("emu_mma_engine must run in the last warp after emu_init() + __syncthreads() (warp, warps)",
                        threadIdx.x >> 5, blockDim.x / 32u);
    __syncwarp();
    __trap();
  }
  volatile uint32_t* vhead = &s.head;
  uint32_t tail = 0;  // oldest entry not yet run (its slot not yet free)
  uint32_t scan = 0;  // next entry to look at: [tail, scan) are MMAs waiting for their commit
  uint32_t last_op = 0;
  for (;;) {
    if (scan - tail == kEmuQueueSize) {  // every slot holds a deferred MMA: run the oldest now
      emu_run_entry(tail);
      ++tail;
      continue;
    }
    if (lane == 0) {
      // an idle engine is normal while the roles wait on each other: give the roles' own
      // bounded waits (which name role, barrier and phase) time to report first
      EmuDeadline deadline;
      deadline.mult = 4;
      while (*vhead == scan) {
        if (deadline.expired()) emu_fail_engine_idle(scan, last_op);
        __nanosleep(32);
      }
    }
    __threadfence_block();  // acquire: head before the entry
    __syncwarp();
    const volatile EmuQueueEntry* ve = &s.ring[scan % kEmuQueueSize];
    const uint32_t op = ve->op;
    const uint64_t bar = ve->a;
    __syncwarp();
    last_op = op;
    if (op == kEmuOpMmaSS || op == kEmuOpMmaTS) {
      ++scan;  // deferred until the next commit
    } else if (op == kEmuOpCommit || op == kEmuOpStop) {
      for (; tail != scan; ++tail) emu_run_entry(tail);  // every earlier MMA, in issue order
      __threadfence_block();  // their TMEM writes before the arrive (release, PTX 9.7.16.12.1)
      __syncwarp();
      ++scan;
      tail = scan;
      if (lane == 0) {
        *reinterpret_cast<volatile uint32_t*>(&s.tail) = tail;  // the commit/STOP entry's slot is free
        if (op == kEmuOpCommit) mbar_arrive((uint32_t)bar);  // tcgen05.commit's mbarrier::arrive::one
      }
      __syncwarp();
      if (op == kEmuOpStop) return;
    } else {
      if (lane == 0) emu_fail_protocol("corrupt MMA-queue entry (op, index)", op, scan);
      __syncwarp();
      __trap();
    }
  }
}
// all 32 lanes of the last warp, after the first __syncthreads; returns after STOP
__device__ __forceinline__ void emu_mma_engine() { emu_mma_engine_body(); }

}  // namespace b200c
