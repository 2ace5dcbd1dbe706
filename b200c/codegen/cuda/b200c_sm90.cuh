// ---------------------------------------------------------------------------
// b200c PTX helpers of the Hopper (sm_90a) backend: one small inline function
// per instruction, each naming its section of the PTX ISA 9.0 manual.
// Generated sm90a kernels inline this file (the tcgen05 kernels inline
// b200c_ptx.cuh instead); what both backends share (mbarriers and bounded
// waits, TMA, named barriers, elect.sync, the softmax math and its NaN rule)
// is b200c_common.cuh, inlined with it. The wgmma.mma_async wrappers of the
// shapes a kernel uses are generated into the kernel itself
// (b200c/codegen/sm90/wgmma.py).
// ---------------------------------------------------------------------------
#ifndef B200C_SM90_CUH
#define B200C_SM90_CUH
#include "b200c_common.cuh"  // shared with b200c_ptx.cuh: ids, mbarriers, bounded waits, TMA, softmax math

namespace b200c {

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
