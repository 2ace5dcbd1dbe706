// ---------------------------------------------------------------------------
// b200c PTX helpers: one small inline function per instruction.
// Sources: PTX ISA 9.0 (sections cited per helper) and docs/sm100-facts.md.
// The tcgen05 family, setmaxnreg and packed f32x2 math are replaced by the
// software model in b200c_emulate.cuh when B200C_EMULATE is defined (sm_90a);
// what both backends share (TMA, mbarriers and bounded waits, named barriers,
// elect.sync, the softmax math and its NaN rule) is b200c_common.cuh.
// ---------------------------------------------------------------------------
#ifndef B200C_PTX_CUH  // include guard: generated kernels inline this file, the emulation header includes it
#define B200C_PTX_CUH
#include "b200c_common.cuh"  // shared with b200c_sm90.cuh: ids, mbarriers, bounded waits, TMA, softmax math

namespace b200c {

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

}  // namespace b200c

#ifdef B200C_EMULATE
#include "b200c_emulate.cuh"
#else
namespace b200c {
constexpr int kEmulatorThreads = 0;

// ---- packed FP32 pairs (PTX 9.7.3, sm_100+) ------------------------------
// a * (b, b) + (c, c): fma_f32x2 of a scalar pair built inside the asm, so ptxas reads b and c as the
// broadcast scalar operands of FFMA2 (R.F32) instead of copying them into register pairs (P's
// scale-and-subtract: 2 to 4 moves per K/V tile fewer in the stage 18 softmax loop, measured)
__device__ __forceinline__ float2 fma_f32x2_bc(float2 a, float b, float c) {
  uint64_t d;
  asm("{\n\t.reg .b64 bb, cc;\n\tmov.b64 bb, {%2, %2};\n\tmov.b64 cc, {%3, %3};\n\tfma.rn.f32x2 %0, %1, bb, cc;\n\t}"
      : "=l"(d) : "l"(*reinterpret_cast<uint64_t*>(&a)), "f"(b), "f"(c));
  return *reinterpret_cast<float2*>(&d);
}
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
// ---- software exp2 of a pair on the FMA pipes: b200c_common.cuh's exp2_poly (its comment gives the
// method), step for step on f32x2 pairs (FADD2.RM, FADD2, FFMA2 on sm_100), so either lane equals
// exp2_poly of that input bit for bit, except for a NaN input: without exp2_poly's last FMA (one FFMA2 per
// pair, 8 per K/V tile in the P pass of the blog's stages) a NaN becomes FLT_MAX here. The P pass never
// needs it: a NaN exponent s * scale + neg reaches a column only when the row's running max is NaN (then
// every column is NaN, the ex2.approx ones too: at least 8 of every 16 take it) or +inf (a +inf score:
// inf - inf in its own column), and both rebase with a rescale factor that the rebase makes NaN
// (softmax_rules.nan_rescale), so the rowsum, O and the LSE are NaN as torch's FP32 softmax gives
__device__ __forceinline__ float2 exp2_poly_x2(float2 x) {
  x = make_float2(fmax_nan(x.x, kExp2PolyMin), fmax_nan(x.y, kExp2PolyMin));
  const float2 magic = make_float2(kExp2PolyMagic, kExp2PolyMagic);
  const float2 r = add_rm_f32x2(x, magic);                   // 1.5 * 2^23 + floor(x)
  const float2 f = sub_f32x2(x, sub_f32x2(r, magic));        // frac(x) in [0, 1)
  float2 p = fma_f32x2(make_float2(kExp2PolyC3, kExp2PolyC3), f, make_float2(kExp2PolyC2, kExp2PolyC2));
  p = fma_f32x2(p, f, make_float2(kExp2PolyC1, kExp2PolyC1));
  p = fma_f32x2(p, f, make_float2(1.f, 1.f));
  return make_float2(exp2_poly_join(p.x, r.x), exp2_poly_join(p.y, r.y));  // NaN in, FLT_MAX out (above)
}
}  // namespace b200c
#endif  // B200C_PTX_CUH
