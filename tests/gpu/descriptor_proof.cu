// descriptor_proof.cu: proves on a real GPU (H200, emulation target) that the
// SMEM/TMEM operand layouts the code generator uses agree with what TMA writes,
// through the same decode the emulator's MMA engine uses (b200c_emulate.cuh).
//
// Build (repository root):
//   nvcc -arch=sm_90a -DB200C_EMULATE -DB200C_BOUNDED_WAIT -I b200c/codegen/cuda \
//        tests/gpu/descriptor_proof.cu -lcuda -o descriptor_proof
// (cuInit / cuTensorMapEncodeTiled are fetched with cudaGetDriverEntryPointByVersion,
// so -lcuda may be left out where the toolkit has no libcuda.so)
// Run: ./descriptor_proof            all checks, one "PASS name" / "FAIL name (...)" line each,
//                                    exit status 1 when any check failed
//      ./descriptor_proof --trap X   one misuse that must trap (X = tmem_lane, smem_range, idesc);
//                                    run as child processes by the default mode
//
// Checks
//   decode_*   a 128x128 bf16 tile whose element (row r, col c) holds the bit
//              pattern r*128+c (plus a 2-bit tile tag in bits 14-15) is TMA-loaded
//              from a rank-4 BSHD / BHSD tensor exactly as the generated kernels
//              load it (no swizzle: 16 boxes {8,128}; 128B: 2 boxes {64,128});
//              every element of every K=16 MMA step is read back through
//              b200c::emu_operand_addr with the code generator's descriptors:
//              K-major (Q/K as A or B: row mn, col 16kk+k) and MN-major (V as B:
//              row 16kk+k, col mn)
//   tmem_a_*   a P tile written with tmem_st_x8 the way the softmax does, read
//              back through the MMA_TS A decode at a_tmem + 8kk
//   mma_*      real emulated MMAs: identity products that must reproduce the
//              operands bit-exactly (each descriptor variant through the engine),
//              and QK^T / PV of random bf16 tiles against a host reference, the
//              latter issued the way the generated MMA warp issues them: the
//              whole warp calls tcgen05_mma_{ss,ts}_elect / tcgen05_commit_elect
//              with 32-bit descriptor words (SmemDesc, desc_add); the decode
//              checks also require those words to equal the 64-bit descriptors
//   trap_*     the emulator traps on a TMEM lane-quadrant violation, an SMEM
//              operand outside the dynamic window, and an unsupported idesc
//   (also printed, not checked: the time of one emulated M128 N128 K16 MMA)
// ---------------------------------------------------------------------------
#include <cuda.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>

#include "b200c_ptx.cuh"

#ifndef B200C_EMULATE
#error "build with -DB200C_EMULATE -DB200C_BOUNDED_WAIT (emulation target)"
#endif

// ---- problem: [B][S][H][D] bf16, one 128x128 tile per operand -------------
constexpr int kB = 2, kS = 256, kH = 2, kD = 128, kRows = 128;
constexpr int kWorkThreads = 128;                                   // 4 warps: thread = TMEM lane
constexpr int kThreads = kWorkThreads + b200c::kEmulatorThreads;    // + the engine warp
constexpr uint32_t kTileBytes = kRows * kD * 2;                     // 32768
constexpr uint32_t kSmemBytes = 1024 + 4 * kTileBytes + 64;         // align slack, 4 tiles, barriers
constexpr uint32_t kIdescQK = 0x08200490u;  // M128 N128, A K-major, B K-major (docs/sm100-facts.md §4)
constexpr uint32_t kIdescPV = 0x08210490u;  // M128 N128, A K-major, B MN-major
constexpr uint32_t kIdescQK64 = 0x08100490u;  // M128 N64, A K-major, B K-major

enum Mode : int {
  kModeDecode = 0,      // tile0 = X (bit patterns): SMEM descriptor decode
  kModeIdentity = 1,    // tile0 = Y, tile3 = I: Y.I^T, I.Y^T, I.Y through the engine
  kModeTmemP = 2,       // P -> TMEM, tile3 = I: TMEM A decode, P.I^T, P.I
  kModeNumeric = 3,     // tile0 = Q, tile1 = K, tile2 = V, P -> TMEM: QK^T, PV, QK^T(N=64)
  kModePerf = 4,        // args.s1 chained MMAs (M128 N128, accumulate) for timing only
  kModeTrapLane = 10,   // warp 1 reads TMEM lanes 0-31
  kModeTrapSmem = 11,   // MMA A descriptor beyond the dynamic SMEM window
  kModeTrapIdesc = 12,  // MMA with M = 64
};

struct Args {
  int mode;
  int swizzle;          // descriptor swizzle code of tile0..2: 0 none, 2 = 128B (TMA maps built to match)
  int b0, h0, s0;       // map0 tile coordinates (batch, head, first row)
  int s1, s2;           // map1 / map2 first rows (batch b0, head h0)
  uint16_t* out16;      // decode outputs
  float* out32;         // D outputs, [region][128][128]
  const uint16_t* p_bits;  // P tile (128x128 bf16 bits), row-major
  int* status;          // [0] descriptor check failures, [1] dyn base matches, [2] dyn size
};

// ---- descriptors exactly as the code generator builds them ----------------
// Q/K tile (K-major) for MMA K-step kk (16 columns)
__device__ uint64_t desc_kmajor(uint32_t tile, int swizzle, int kk) {
  return swizzle ? b200c::smem_desc(tile + (kk / 4) * 16384 + (kk % 4) * 32, 16, 1024, 2)
                 : b200c::smem_desc(tile + kk * 4096, 2048, 128, 0);
}
// V tile as B (MN-major, N = head dim, K = kv row) for K-step kk (16 kv rows)
__device__ uint64_t desc_mnmajor(uint32_t tile, int swizzle, int kk) {
  return swizzle ? b200c::smem_desc(tile + kk * 2048, 16384, 1024, 2)
                 : b200c::smem_desc(tile + kk * 256, 128, 2048, 0);
}

// the same descriptors as the generator's 32-bit words (kmajor_desc/mnmajor_desc + desc_add)
__device__ b200c::SmemDesc words_kmajor(uint32_t tile, int swizzle, int kk) {
  return swizzle ? b200c::desc_add(b200c::smem_desc_words(tile, 16, 1024, 2), (kk / 4) * 16384 + (kk % 4) * 32)
                 : b200c::desc_add(b200c::smem_desc_words(tile, 2048, 128, 0), kk * 4096);
}
__device__ b200c::SmemDesc words_mnmajor(uint32_t tile, int swizzle, int kk) {
  return swizzle ? b200c::desc_add(b200c::smem_desc_words(tile, 16384, 1024, 2), kk * 2048)
                 : b200c::desc_add(b200c::smem_desc_words(tile, 128, 2048, 0), kk * 256);
}

// TMA-load one 128x128 tile the way the generated kernels do
__device__ void load_tile(const CUtensorMap* map, uint32_t dst, uint32_t bar, int swizzle, int s0, int h, int b) {
  if (swizzle) {
    for (int j = 0; j < 2; ++j) b200c::tma_load_4d(dst + 16384 * j, map, bar, 64 * j, s0, h, b);
  } else {
    for (int j = 0; j < 16; ++j) b200c::tma_load_4d(dst + 2048 * j, map, bar, 8 * j, s0, h, b);
  }
}

__device__ __forceinline__ uint32_t ld_shared_u32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ uint16_t ld_shared_u16(uint32_t addr) {
  uint16_t v;
  asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ void st_shared_u16(uint32_t addr, uint16_t v) {
  asm volatile("st.shared.u16 [%0], %1;" ::"r"(addr), "h"(v) : "memory");
}

// copy TMEM columns [col, col + 128) of this warp's 32 lanes to out[row][0..127]
template <int X>
__device__ void read_region(uint32_t taddr_base, uint32_t col, float* out) {
  const uint32_t w = b200c::warp_id(), row = 32 * w + b200c::lane_id();
  for (int c = 0; c < 128; c += X) {
    float v[X];
    if constexpr (X == 8) b200c::tmem_ld_x8(taddr_base + ((32 * w) << 16) + col + c, v);
    if constexpr (X == 16) b200c::tmem_ld_x16(taddr_base + ((32 * w) << 16) + col + c, v);
    if constexpr (X == 32) b200c::tmem_ld_x32(taddr_base + ((32 * w) << 16) + col + c, v);
    b200c::tmem_wait_ld();
    for (int j = 0; j < X; ++j) out[row * 128 + c + j] = v[j];
  }
}

__global__ void __launch_bounds__(kThreads, 1)
proof_kernel(const __grid_constant__ CUtensorMap map0, const __grid_constant__ CUtensorMap map1,
             const __grid_constant__ CUtensorMap map2, Args args) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw = b200c::smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // 128B swizzle needs 1024-B aligned tiles
  const uint32_t tile[4] = {base, base + kTileBytes, base + 2 * kTileBytes, base + 3 * kTileBytes};
  const uint32_t bar_tma = base + 4 * kTileBytes;
  const uint32_t bar_mma[3] = {bar_tma + 8, bar_tma + 16, bar_tma + 24};
  const uint32_t tmem_slot = bar_tma + 32;
  const uint32_t tid = threadIdx.x, warp = tid / 32;
  const int mode = args.mode, sw = args.swizzle;
  const bool uses_tmem = mode != kModeDecode;

  if (tid == 0) {
    b200c::emu_init();
    b200c::mbar_init(bar_tma, 1);
    for (int i = 0; i < 3; ++i) b200c::mbar_init(bar_mma[i], 1);
    b200c::fence_mbarrier_init();
  }
  __syncthreads();

  if (warp == kWorkThreads / 32) {
    b200c::emu_mma_engine();  // the engine warp
  } else {
    auto work_bar = [] { b200c::named_bar_sync(1, kWorkThreads); };
    // ---- loads --------------------------------------------------------------
    int ntiles = 0;
    if (mode == kModeDecode || mode == kModeIdentity || mode == kModeTrapSmem || mode == kModeTrapIdesc) ntiles = 1;
    if (mode == kModeNumeric) ntiles = 3;
    if (mode == kModePerf) ntiles = 2;
    if (tid == 0 && ntiles > 0) {
      b200c::prefetch_tensormap(&map0);
      b200c::mbar_arrive_expect_tx(bar_tma, ntiles * kTileBytes);
      load_tile(&map0, tile[0], bar_tma, sw, args.s0, args.h0, args.b0);
      if (ntiles == 3) {
        load_tile(&map1, tile[1], bar_tma, sw, args.s1, args.h0, args.b0);
        load_tile(&map2, tile[2], bar_tma, sw, args.s2, args.h0, args.b0);
      }
      if (mode == kModePerf) load_tile(&map0, tile[1], bar_tma, sw, 0, args.h0, args.b0);
    }
    if (mode == kModeIdentity || mode == kModeTmemP) {
      // identity 128x128 in tile3, in the no-swizzle layout the TMA boxes {8,128} produce:
      // element (r, c) at (c/8)*2048 + r*16 + (c%8)*2; symmetric, so it is I as K-major and MN-major
      for (uint32_t i = tid; i < 128u * 128u; i += kWorkThreads) {
        const uint32_t r = i / 128, c = i % 128;
        st_shared_u16(tile[3] + (c / 8) * 2048 + r * 16 + (c % 8) * 2, r == c ? 0x3F80 : 0);
      }
      b200c::fence_proxy_async_smem();
    }
    if (uses_tmem && warp == 0) b200c::tmem_alloc(tmem_slot, 512);
    work_bar();
    const uint32_t tmem = uses_tmem ? ld_shared_u32(tmem_slot) : 0;
    if (ntiles > 0) b200c::mbar_wait(bar_tma, 0, /*site*/ 100, 0);
    if (tid == 0) {
      args.status[1] = (b200c::emu_cta.dyn_base == raw) ? 1 : 0;
      args.status[2] = (int)b200c::emu_cta.dyn_size;
    }

    // ---- P -> TMEM columns 384..447 as the softmax writes it: thread = row,
    // 16 bf16 per tcgen05.st.32x32b.x8, low half = even column ----------------
    if (mode == kModeTmemP || mode == kModeNumeric) {
      const uint32_t row = tid;
      for (int j8 = 0; j8 < 8; ++j8) {
        uint32_t r[8];
        for (int i = 0; i < 8; ++i) {
          const uint32_t lo = args.p_bits[row * 128 + 16 * j8 + 2 * i];
          const uint32_t hi = args.p_bits[row * 128 + 16 * j8 + 2 * i + 1];
          r[i] = b200c::pack_bf16x2(__uint_as_float(lo << 16), __uint_as_float(hi << 16));
        }
        b200c::tmem_st_x8(tmem + ((32 * warp) << 16) + 384 + 8 * j8, r);
      }
      b200c::tmem_wait_st();
      b200c::tcgen05_fence_before();
      work_bar();
    }

    if (mode == kModeDecode) {
      if (tid == 0) {  // the generator's descriptors must pass the engine's own validation
        int bad = 0;
        for (int kk = 0; kk < 8; ++kk)
          bad += (b200c::emu_smem_desc_check(desc_kmajor(tile[0], sw, kk), false) != 0) +
                 (b200c::emu_smem_desc_check(desc_mnmajor(tile[0], sw, kk), true) != 0) +
                 (b200c::desc_u64(words_kmajor(tile[0], sw, kk)) != desc_kmajor(tile[0], sw, kk)) +
                 (b200c::desc_u64(words_mnmajor(tile[0], sw, kk)) != desc_mnmajor(tile[0], sw, kk));
        args.status[0] = bad;
      }
      for (uint32_t i = tid; i < 8u * 128u * 16u; i += kWorkThreads) {
        const int kk = i / 2048, mn = (i / 16) % 128, k = i % 16;
        args.out16[i] = ld_shared_u16(b200c::emu_operand_addr(desc_kmajor(tile[0], sw, kk), false, mn, k));
        args.out16[16384 + i] = ld_shared_u16(b200c::emu_operand_addr(desc_mnmajor(tile[0], sw, kk), true, mn, k));
      }
    }
    if (mode == kModeTmemP) {  // TMEM A decode: A[m][k] of K-step kk at a_tmem = P + 8*kk
      const uint32_t m = tid;
      for (int kk = 0; kk < 8; ++kk)
        for (int k = 0; k < 16; ++k)
          args.out16[(kk * 128 + m) * 16 + k] = b200c::emu_tmem_a_bits(tmem + 384 + 8 * kk, m, k);
    }

    // ---- MMAs -----------------------------------------------------------------
    if (mode == kModeNumeric && warp == 0) {  // as the generated MMA warp: all 32 lanes call, one issues
      b200c::tcgen05_fence_after();
      for (int kk = 0; kk < 8; ++kk)  // S = Q K^T
        b200c::tcgen05_mma_ss_elect<kIdescQK>(tmem + 0, words_kmajor(tile[0], sw, kk), words_kmajor(tile[1], sw, kk),
                                              kk > 0);
      b200c::tcgen05_commit_elect(bar_mma[0]);
      for (int kk = 0; kk < 8; ++kk)  // O = P V, P from TMEM
        b200c::tcgen05_mma_ts_elect<kIdescPV>(tmem + 128, tmem + 384 + 8 * kk, words_mnmajor(tile[2], sw, kk), kk > 0);
      b200c::tcgen05_commit_elect(bar_mma[1]);
    }
    // one issuing thread (the rest of the MMAs; lane 0 of warp 0, the elected lane above)
    if (tid == 0) {
      b200c::tcgen05_fence_after();
      if (mode == kModeIdentity) {
        for (int kk = 0; kk < 8; ++kk)  // D0 = Y . I^T = Y      (A = Y K-major, variant under test)
          b200c::tcgen05_mma_ss(tmem + 0, desc_kmajor(tile[0], sw, kk), desc_kmajor(tile[3], 0, kk), kIdescQK, kk > 0);
        b200c::tcgen05_commit(bar_mma[0]);
        for (int kk = 0; kk < 8; ++kk)  // D1 = I . Y^T = Y^T    (B = Y K-major)
          b200c::tcgen05_mma_ss(tmem + 128, desc_kmajor(tile[3], 0, kk), desc_kmajor(tile[0], sw, kk), kIdescQK, kk > 0);
        b200c::tcgen05_commit(bar_mma[1]);
        for (int kk = 0; kk < 8; ++kk)  // D2 = I . Y = Y        (B = Y MN-major)
          b200c::tcgen05_mma_ss(tmem + 256, desc_kmajor(tile[3], 0, kk), desc_mnmajor(tile[0], sw, kk), kIdescPV, kk > 0);
        b200c::tcgen05_commit(bar_mma[2]);
      } else if (mode == kModeTmemP) {
        for (int kk = 0; kk < 8; ++kk)  // D0 = P . I^T = P      (B = I K-major)
          b200c::tcgen05_mma_ts(tmem + 0, tmem + 384 + 8 * kk, desc_kmajor(tile[3], 0, kk), kIdescQK, kk > 0);
        b200c::tcgen05_commit(bar_mma[0]);
        for (int kk = 0; kk < 8; ++kk)  // D1 = P . I = P        (B = I MN-major)
          b200c::tcgen05_mma_ts(tmem + 128, tmem + 384 + 8 * kk, desc_mnmajor(tile[3], 0, kk), kIdescPV, kk > 0);
        b200c::tcgen05_commit(bar_mma[1]);
      } else if (mode == kModeNumeric) {
        // (S = Q K^T and O = P V were issued above by the whole warp 0, elect forms)
        for (int kk = 0; kk < 8; ++kk)  // S[:, 0:64] with N = 64
          b200c::tcgen05_mma_ss(tmem + 256, desc_kmajor(tile[0], sw, kk), desc_kmajor(tile[1], sw, kk), kIdescQK64, kk > 0);
        b200c::tcgen05_commit(bar_mma[2]);
      } else if (mode == kModePerf) {
        for (int i = 0; i < args.s1; ++i)
          b200c::tcgen05_mma_ss(tmem, desc_kmajor(tile[0], sw, i % 8), desc_kmajor(tile[1], sw, i % 8), kIdescQK, i > 0);
        b200c::tcgen05_commit(bar_mma[0]);
      } else if (mode == kModeTrapSmem) {
        const uint32_t beyond = (raw + kSmemBytes + 1024u) & ~1023u;  // past the dynamic window
        b200c::tcgen05_mma_ss(tmem, b200c::smem_desc(beyond, 16, 1024, 2), desc_kmajor(tile[0], sw, 0), kIdescQK, 0);
        b200c::tcgen05_commit(bar_mma[0]);
      } else if (mode == kModeTrapIdesc) {
        b200c::tcgen05_mma_ss(tmem, desc_kmajor(tile[0], sw, 0), desc_kmajor(tile[0], sw, 0), 0x04200490u, 0);  // M64
      }
      b200c::tcgen05_issue_end();
    }
    if (mode == kModeTrapLane && warp == 1) {
      float v[8];
      b200c::tmem_ld_x8(tmem, v);  // lanes 0-31 from warp 1: must trap
      args.out32[tid] = v[0];
    }
    if (mode == kModeTrapSmem || mode == kModePerf) b200c::mbar_wait(bar_mma[0], 0, 101, 0);  // (trap: the engine traps first)

    // ---- results ------------------------------------------------------------
    const int nregions = mode == kModeIdentity ? 3 : mode == kModeTmemP ? 2 : mode == kModeNumeric ? 3 : 0;
    for (int r = 0; r < nregions; ++r) {
      b200c::mbar_wait(bar_mma[r], 0, 102 + r, 0);
      b200c::tcgen05_fence_after();
      float* out = args.out32 + r * 128 * 128;
      if (mode == kModeIdentity) read_region<32>(tmem, 128 * r, out);
      if (mode == kModeTmemP) read_region<16>(tmem, 128 * r, out);
      if (mode == kModeNumeric) read_region<8>(tmem, 128 * r, out);
    }
    b200c::tcgen05_fence_before();
  }
  __syncthreads();
  if (uses_tmem && warp == 0) {
    b200c::tmem_relinquish_alloc_permit();
    b200c::tmem_dealloc(ld_shared_u32(tmem_slot), 512);
  }
}

__global__ void nsmid_kernel(int* out) {
  uint32_t n;
  asm volatile("mov.u32 %0, %%nsmid;" : "=r"(n));
  *out = (int)n;
}

// ===========================================================================
// host
// ===========================================================================
#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(e_), __FILE__,      \
                   __LINE__, #x);                                                               \
      std::exit(2);                                                                             \
    }                                                                                           \
  } while (0)

static int g_failures = 0;
static float g_last_ms = 0;  // duration of the last proof_kernel launch
static void report(bool ok, const std::string& name, const std::string& why) {
  if (ok) std::printf("PASS %s\n", name.c_str());
  else { std::printf("FAIL %s (%s)\n", name.c_str(), why.c_str()); ++g_failures; }
  std::fflush(stdout);
}

static uint16_t f32_to_bf16_bits(float f) {  // round to nearest even (finite inputs)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static float bf16_bits_to_f32(uint16_t b) {
  const uint32_t u = (uint32_t)b << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
static uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// logical [B][S][H][D] tensor stored BSHD or BHSD
struct Tensor {
  bool bhsd = false;
  std::vector<uint16_t> host;
  uint16_t* dev = nullptr;
  size_t index(int b, int s, int h, int d) const {
    return bhsd ? (((size_t)b * kH + h) * kS + s) * kD + d : (((size_t)b * kS + s) * kH + h) * kD + d;
  }
  uint16_t at(int b, int s, int h, int d) const { return host[index(b, s, h, d)]; }
};
template <class F>
static Tensor make_tensor(bool bhsd, F value) {
  Tensor t;
  t.bhsd = bhsd;
  t.host.resize((size_t)kB * kS * kH * kD);
  for (int b = 0; b < kB; ++b)
    for (int s = 0; s < kS; ++s)
      for (int h = 0; h < kH; ++h)
        for (int d = 0; d < kD; ++d) t.host[t.index(b, s, h, d)] = value(b, s, h, d);
  CK(cudaMalloc(&t.dev, t.host.size() * 2));
  CK(cudaMemcpy(t.dev, t.host.data(), t.host.size() * 2, cudaMemcpyHostToDevice));
  return t;
}

// Driver entry points through the runtime (no link-time dependency on libcuda,
// so the program also links where the toolkit has no libcuda stub)
template <class F>
static F driver_fn(const char* name, unsigned version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || fn == nullptr) {
    std::fprintf(stderr, "driver entry point %s (version %u) not found\n", name, version);
    std::exit(2);
  }
  return reinterpret_cast<F>(fn);
}

// rank-4 map exactly as the runtime builds it: dims {D, S, H, B}, byte strides of S, H, B
static CUtensorMap make_map(const Tensor& t, int swizzle) {
  CUtensorMap map;
  const cuuint64_t dims[4] = {kD, kS, kH, kB};
  const cuuint64_t strides[3] = {
      t.bhsd ? (cuuint64_t)kD * 2 : (cuuint64_t)kH * kD * 2,            // S
      t.bhsd ? (cuuint64_t)kS * kD * 2 : (cuuint64_t)kD * 2,            // H
      (cuuint64_t)kS * kH * kD * 2};                                    // B
  const cuuint32_t box[4] = {swizzle ? 64u : 8u, (cuuint32_t)kRows, 1, 1};
  const cuuint32_t estrides[4] = {1, 1, 1, 1};
  static const auto encode = driver_fn<decltype(&cuTensorMapEncodeTiled)>("cuTensorMapEncodeTiled", 12000);
  const CUresult r = encode(
      &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, t.dev, dims, strides, box, estrides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled failed: %d\n", (int)r);
    std::exit(2);
  }
  return map;
}

struct Device {
  uint32_t* tmem = nullptr;
  uint32_t* mask = nullptr;
  int slots = 0;
  b200c::HangReport* hang_host = nullptr;
  uint16_t* out16 = nullptr;
  float* out32 = nullptr;
  uint16_t* p_bits = nullptr;
  int* status = nullptr;
};

static Device setup_device() {
  Device dv;
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));  // create the primary context
  if (driver_fn<decltype(&cuInit)>("cuInit", 2000)(0) != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuInit failed\n");
    std::exit(2);
  }
  int* d_n;
  CK(cudaMalloc(&d_n, sizeof(int)));
  nsmid_kernel<<<1, 1>>>(d_n);
  int nsmid = 0, sms = 0;
  CK(cudaMemcpy(&nsmid, d_n, sizeof(int), cudaMemcpyDeviceToHost));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  dv.slots = nsmid > sms ? nsmid : sms;
  CK(cudaMalloc(&dv.tmem, (size_t)dv.slots * 128 * 512 * 4));
  CK(cudaMalloc(&dv.mask, (size_t)dv.slots * 4));
  CK(cudaMemcpyToSymbol(b200c_emu_tmem, &dv.tmem, sizeof(dv.tmem)));
  CK(cudaMemcpyToSymbol(b200c_emu_tmem_alloc_mask, &dv.mask, sizeof(dv.mask)));
  CK(cudaMemcpyToSymbol(b200c_emu_num_slots, &dv.slots, sizeof(int)));
  CK(cudaHostAlloc(&dv.hang_host, sizeof(b200c::HangReport), cudaHostAllocMapped));
  std::memset(dv.hang_host, 0, sizeof(b200c::HangReport));
  b200c::HangReport* hang_dev;
  CK(cudaHostGetDevicePointer(&hang_dev, dv.hang_host, 0));
  CK(cudaMemcpyToSymbol(b200c_hang_report, &hang_dev, sizeof(hang_dev)));
  CK(cudaMalloc(&dv.out16, 2 * 16384 * 2));
  CK(cudaMalloc(&dv.out32, 3 * 128 * 128 * 4));
  CK(cudaMalloc(&dv.p_bits, 128 * 128 * 2));
  CK(cudaMalloc(&dv.status, 16 * sizeof(int)));
  CK(cudaFuncSetAttribute(proof_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSmemBytes));
  return dv;
}

static cudaError_t launch(Device& dv, Args a, const CUtensorMap& m0, const CUtensorMap& m1, const CUtensorMap& m2) {
  CK(cudaMemset(dv.mask, 0, (size_t)dv.slots * 4));  // the runtime zeroes the allocation masks per launch
  CK(cudaMemset(dv.out16, 0xFF, 2 * 16384 * 2));
  CK(cudaMemset(dv.out32, 0xFF, 3 * 128 * 128 * 4));
  CK(cudaMemset(dv.status, 0, 16 * sizeof(int)));
  a.out16 = dv.out16; a.out32 = dv.out32; a.p_bits = dv.p_bits; a.status = dv.status;
  cudaEvent_t t0, t1;
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  CK(cudaEventRecord(t0));
  proof_kernel<<<1, kThreads, kSmemBytes>>>(m0, m1, m2, a);
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaEventRecord(t1);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e == cudaSuccess) cudaEventElapsedTime(&g_last_ms, t0, t1);
  return e;
}

static const char* sw_name(int sw) { return sw ? "sw128" : "none"; }

// ---- checks ------------------------------------------------------------------
static void check_decode(Device& dv, bool bhsd, int sw) {
  // element (row r, col c) of tile (b, h, s-tile) holds r*128 + c in bits 0-13 and
  // the tag (b + h + s-tile) & 3 in bits 14-15 (a wrong tile shows up as a wrong tag)
  Tensor x = make_tensor(bhsd, [](int b, int s, int h, int d) {
    return (uint16_t)((((b + h + s / kRows) & 3) << 14) | ((s % kRows) * 128 + d));
  });
  const CUtensorMap m = make_map(x, sw);
  Args a{};
  a.mode = kModeDecode; a.swizzle = sw; a.b0 = 1; a.h0 = 1; a.s0 = 128;
  const std::string suffix = std::string(sw_name(sw)) + (bhsd ? "_bhsd" : "_bshd");
  cudaError_t e = launch(dv, a, m, m, m);
  if (e != cudaSuccess) {
    report(false, "decode_" + suffix, std::string("kernel failed: ") + cudaGetErrorString(e));
    std::exit(1);
  }
  std::vector<uint16_t> out(2 * 16384);
  int status[16];
  CK(cudaMemcpy(out.data(), dv.out16, out.size() * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(status, dv.status, sizeof(status), cudaMemcpyDeviceToHost));
  report(status[0] == 0, "desc_valid_" + suffix,
         std::to_string(status[0]) + " generator descriptors rejected by emu_smem_desc_check");
  auto tile_at = [&](int r, int c) { return x.at(a.b0, a.s0 + r, a.h0, c); };
  for (int which = 0; which < 2; ++which) {  // 0: K-major (Q/K), 1: MN-major (V)
    std::string why;
    for (int i = 0; i < 16384 && why.empty(); ++i) {
      const int kk = i / 2048, mn = (i / 16) % 128, k = i % 16;
      const uint16_t want = which == 0 ? tile_at(mn, 16 * kk + k) : tile_at(16 * kk + k, mn);
      const uint16_t got = out[which * 16384 + i];
      if (got != want) {
        char buf[256];
        std::snprintf(buf, sizeof buf, "first mismatch kk=%d mn=%d k=%d: got 0x%04x (row %d col %d tag %d), want 0x%04x",
                      kk, mn, k, got, (got & 0x3FFF) / 128, got % 128, got >> 14, want);
        why = buf;
      }
    }
    report(why.empty(), std::string(which == 0 ? "decode_kmajor_" : "decode_mnmajor_") + suffix, why);
  }
  CK(cudaFree(x.dev));
}

static std::string first_bit_mismatch(const std::vector<float>& got, int region,
                                      const std::function<float(int, int)>& want) {
  for (int m = 0; m < 128; ++m)
    for (int n = 0; n < 128; ++n) {
      const float g = got[region * 16384 + m * 128 + n], w = want(m, n);
      if (f32_bits(g) != f32_bits(w)) {
        char buf[200];
        std::snprintf(buf, sizeof buf, "first mismatch D[%d][%d]: got %a (0x%08x), want %a (0x%08x)", m, n, g,
                      f32_bits(g), w, f32_bits(w));
        return buf;
      }
    }
  return "";
}

static void check_identity(Device& dv, int sw) {
  // Y: finite, normal bf16 values, distinct per (row, col) of a tile
  Tensor y = make_tensor(false, [](int, int s, int, int d) { return (uint16_t)(0x3000 + (s % kRows) * 128 + d); });
  const CUtensorMap m = make_map(y, sw);
  Args a{};
  a.mode = kModeIdentity; a.swizzle = sw; a.b0 = 0; a.h0 = 1; a.s0 = 128;
  cudaError_t e = launch(dv, a, m, m, m);
  const std::string s = sw_name(sw);
  if (e != cudaSuccess) {
    report(false, "mma_identity_" + s, std::string("kernel failed: ") + cudaGetErrorString(e));
    std::exit(1);
  }
  std::vector<float> out(3 * 16384);
  CK(cudaMemcpy(out.data(), dv.out32, out.size() * 4, cudaMemcpyDeviceToHost));
  auto Y = [&](int r, int c) { return bf16_bits_to_f32(y.at(a.b0, a.s0 + r, a.h0, c)); };
  std::printf("     identity launch (24 MMAs M128 N128 K16 + TMA + alloc): %.3f ms\n", g_last_ms);
  std::string why = first_bit_mismatch(out, 0, [&](int mm, int n) { return Y(mm, n); });
  report(why.empty(), "mma_ss_a_kmajor_" + s + " (Y.I^T == Y)", why);
  why = first_bit_mismatch(out, 1, [&](int mm, int n) { return Y(n, mm); });
  report(why.empty(), "mma_ss_b_kmajor_" + s + " (I.Y^T == Y^T)", why);
  why = first_bit_mismatch(out, 2, [&](int mm, int n) { return Y(mm, n); });
  report(why.empty(), "mma_ss_b_mnmajor_" + s + " (I.Y == Y)", why);
  CK(cudaFree(y.dev));
}

static std::vector<uint16_t> upload_p(Device& dv, bool random_unit, unsigned seed) {
  std::vector<uint16_t> p(128 * 128);
  srand(seed);
  for (int m = 0; m < 128; ++m)
    for (int j = 0; j < 128; ++j)
      p[m * 128 + j] = random_unit ? f32_to_bf16_bits((float)rand() / (float)RAND_MAX)
                                   : (uint16_t)(0x3000 + m * 128 + j);  // distinct normal bf16
  CK(cudaMemcpy(dv.p_bits, p.data(), p.size() * 2, cudaMemcpyHostToDevice));
  return p;
}

static void check_tmem_p(Device& dv) {
  const std::vector<uint16_t> p = upload_p(dv, false, 0);
  Tensor dummy = make_tensor(false, [](int, int, int, int) { return (uint16_t)0; });
  const CUtensorMap m = make_map(dummy, 0);
  Args a{};
  a.mode = kModeTmemP;
  cudaError_t e = launch(dv, a, m, m, m);
  if (e != cudaSuccess) {
    report(false, "tmem_a_decode", std::string("kernel failed: ") + cudaGetErrorString(e));
    std::exit(1);
  }
  std::vector<uint16_t> out16(16384);
  std::vector<float> out(3 * 16384);
  CK(cudaMemcpy(out16.data(), dv.out16, out16.size() * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(out.data(), dv.out32, out.size() * 4, cudaMemcpyDeviceToHost));
  std::string why;
  for (int i = 0; i < 16384 && why.empty(); ++i) {
    const int kk = i / 2048, mm = (i / 16) % 128, k = i % 16;
    const uint16_t want = p[mm * 128 + 16 * kk + k], got = out16[i];
    if (got != want) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "first mismatch kk=%d m=%d k=%d: got 0x%04x, want 0x%04x", kk, mm, k, got, want);
      why = buf;
    }
  }
  report(why.empty(), "tmem_a_decode (tmem_st_x8 P, MMA_TS A at a_tmem + 8kk)", why);
  auto P = [&](int r, int c) { return bf16_bits_to_f32(p[r * 128 + c]); };
  why = first_bit_mismatch(out, 0, P);
  report(why.empty(), "mma_ts_b_kmajor (P.I^T == P)", why);
  why = first_bit_mismatch(out, 1, P);
  report(why.empty(), "mma_ts_b_mnmajor (P.I == P)", why);
  CK(cudaFree(dummy.dev));
}

static void check_numeric(Device& dv, int sw) {
  srand(1234 + sw);
  auto rnd = [](int, int, int, int) { return f32_to_bf16_bits(2.0f * (float)rand() / (float)RAND_MAX - 1.0f); };
  Tensor q = make_tensor(false, rnd), k = make_tensor(false, rnd), v = make_tensor(false, rnd);
  const std::vector<uint16_t> p = upload_p(dv, true, 99 + sw);
  const CUtensorMap mq = make_map(q, sw), mk = make_map(k, sw), mv = make_map(v, sw);
  Args a{};
  a.mode = kModeNumeric; a.swizzle = sw; a.b0 = 1; a.h0 = 0; a.s0 = 128; a.s1 = 0; a.s2 = 128;
  cudaError_t e = launch(dv, a, mq, mk, mv);
  const std::string s = sw_name(sw);
  if (e != cudaSuccess) {
    report(false, "mma_numeric_" + s, std::string("kernel failed: ") + cudaGetErrorString(e));
    std::exit(1);
  }
  std::vector<float> out(3 * 16384);
  int status[16];
  CK(cudaMemcpy(out.data(), dv.out32, out.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(status, dv.status, sizeof(status), cudaMemcpyDeviceToHost));
  if (sw == 0)
    report(status[1] == 1 && status[2] == (int)kSmemBytes, "emu_dynamic_smem_window",
           "emulator's dynamic SMEM base/size differ from the kernel's: base match " + std::to_string(status[1]) +
               ", size " + std::to_string(status[2]));
  auto f = [](uint16_t b) { return (double)bf16_bits_to_f32(b); };
  // tolerance: FP32 accumulation of 128 products, relative to sum |a*b|
  auto compare = [&](int region, int ncols, const std::function<void(int, int, double&, double&)>& ref,
                     const std::string& name) {
    double worst = 0;
    std::string why;
    for (int mm = 0; mm < 128; ++mm)
      for (int n = 0; n < ncols; ++n) {
        double r = 0, mag = 0;
        ref(mm, n, r, mag);
        const double g = out[region * 16384 + mm * 128 + n], err = std::fabs(g - r), tol = 4e-6 * mag + 1e-7;
        if (!(err <= tol) && why.empty()) {
          char buf[200];
          std::snprintf(buf, sizeof buf, "first mismatch D[%d][%d]: got %.9g, want %.9g (tol %.3g)", mm, n, g, r, tol);
          why = buf;
        }
        worst = std::fmax(worst, err / (mag + 1e-30));
      }
    if (why.empty()) std::printf("     %s: max |err| / sum|a*b| = %.3g\n", name.c_str(), worst);
    report(why.empty(), name, why);
  };
  auto qk = [&](int mm, int n, double& r, double& mag) {
    for (int d = 0; d < kD; ++d) {
      const double t = f(q.at(a.b0, a.s0 + mm, a.h0, d)) * f(k.at(a.b0, a.s1 + n, a.h0, d));
      r += t; mag += std::fabs(t);
    }
  };
  compare(0, 128, qk, "mma_ss_qk_" + s + " (S = Q K^T vs host)");
  compare(1, 128,
          [&](int mm, int d, double& r, double& mag) {
            for (int j = 0; j < 128; ++j) {
              const double t = f(p[mm * 128 + j]) * f(v.at(a.b0, a.s2 + j, a.h0, d));
              r += t; mag += std::fabs(t);
            }
          },
          "mma_ts_pv_" + s + " (O = P V, P in TMEM, vs host)");
  compare(2, 64, qk, "mma_ss_qk_n64_" + s + " (N = 64)");
  std::string why;
  for (int mm = 0; mm < 128 && why.empty(); ++mm)  // N = 64 must leave columns 64..127 alone (poison)
    for (int n = 64; n < 128; ++n)
      if (f32_bits(out[2 * 16384 + mm * 128 + n]) != b200c::kEmuPoison) {
        why = "D[" + std::to_string(mm) + "][" + std::to_string(n) + "] written by an N=64 MMA";
        break;
      }
  report(why.empty(), "mma_n64_bounds_" + s, why);
  CK(cudaFree(q.dev)); CK(cudaFree(k.dev)); CK(cudaFree(v.dev));
}

// child mode: the misuse must trap and leave the expected code in the hang report
static int run_trap(const std::string& which) {
  Device dv = setup_device();
  Tensor y = make_tensor(false, [](int, int s, int, int d) { return (uint16_t)(0x3000 + (s % kRows) * 128 + d); });
  const CUtensorMap m = make_map(y, 2);
  Args a{};
  a.swizzle = 2; a.b0 = 0; a.h0 = 0; a.s0 = 0;
  int want = 0;
  if (which == "tmem_lane") { a.mode = kModeTrapLane; want = b200c::kEmuErrTmemAccess; }
  else if (which == "smem_range") { a.mode = kModeTrapSmem; want = b200c::kEmuErrSmemRange; }
  else if (which == "idesc") { a.mode = kModeTrapIdesc; want = b200c::kEmuErrIdesc; }
  else { std::fprintf(stderr, "unknown trap case %s\n", which.c_str()); return 2; }
  const cudaError_t e = launch(dv, a, m, m, m);
  b200c::HangReport r;
  std::memcpy(&r, (const void*)dv.hang_host, sizeof r);  // host-mapped, written by the trapping thread
  std::printf("trap %s: launch -> %s; hang report flag %d site %d iter 0x%x work 0x%x thread %d\n", which.c_str(),
              cudaGetErrorName(e), r.flag, r.site, (unsigned)r.iter, (unsigned)r.work, r.lane_thread);
  return (e != cudaSuccess && r.flag == 1 && r.site == want) ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--trap") return run_trap(argv[2]);

  Device dv = setup_device();
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d), %d TMEM image slots, %u B dynamic SMEM\n", prop.name, prop.major, prop.minor,
              dv.slots, kSmemBytes);

  for (int bhsd = 0; bhsd < 2; ++bhsd)
    for (int sw = 0; sw <= 2; sw += 2) check_decode(dv, bhsd != 0, sw);
  check_tmem_p(dv);
  for (int sw = 0; sw <= 2; sw += 2) check_identity(dv, sw);
  for (int sw = 0; sw <= 2; sw += 2) check_numeric(dv, sw);

  {  // informational: emulated MMA cost (difference of two chain lengths)
    Tensor y = make_tensor(false, [](int, int s, int, int d) { return (uint16_t)(0x3000 + (s % kRows) * 128 + d); });
    const CUtensorMap m = make_map(y, 2);
    float ms[2] = {0, 0};
    for (int i = 0; i < 2; ++i) {
      Args a{};
      a.mode = kModePerf; a.swizzle = 2; a.s0 = 128; a.s1 = i ? 264 : 8;
      for (int rep = 0; rep < 2; ++rep) {  // second run is the timed one
        const cudaError_t e = launch(dv, a, m, m, m);
        if (e != cudaSuccess) { report(false, "mma_perf", cudaGetErrorString(e)); std::exit(1); }
      }
      ms[i] = g_last_ms;
    }
    std::printf("     emulated tcgen05.mma M128 N128 K16 (accumulate): %.2f us each (8 MMAs: %.3f ms, 264: %.3f ms)\n",
                1000.0 * (ms[1] - ms[0]) / 256.0, ms[0], ms[1]);
    CK(cudaFree(y.dev));
  }

  // misuse cases in child processes (a trap ends the CUDA context)
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = 0;
    for (const char* c : {"tmem_lane", "smem_range", "idesc"}) {
      const std::string cmd = std::string("'") + self + "' --trap " + c + " 2>&1";
      std::fflush(stdout);
      const int rc = std::system(cmd.c_str());
      report(rc == 0, std::string("trap_") + c, "child exit status " + std::to_string(rc));
    }
  } else {
    report(false, "trap_cases", "cannot find /proc/self/exe");
  }

  std::printf("%s: %d failure(s)\n", g_failures ? "FAILED" : "ALL PASSED", g_failures);
  return g_failures ? 1 : 0;
}
