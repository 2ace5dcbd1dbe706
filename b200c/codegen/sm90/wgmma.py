"""The ``wgmma.mma_async`` wrappers a sm_90a kernel uses, as CUDA text.

``wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16`` (PTX ISA 9.0,
9.7.15.5.2) names every accumulator register in its operand list (N/2 FP32
registers per thread), so each N needs its own inline-asm wrapper. The kernel
gets exactly the two it uses: the SS form for S = Q K^T (N = block_n) and the
RS form for O += P V (N = head_dim). ``scale_d == 0`` turns the accumulate off
(D = A B), PTX's predicate operand scale-d.
"""
from __future__ import annotations


def _dlist(n_regs: int) -> str:
    return ", ".join(f"%{i}" for i in range(n_regs))


def _douts(n_regs: int) -> str:
    return ", ".join(f'"+f"(d[{i}])' for i in range(n_regs))


def ss(n: int) -> str:
    """SS form, both operands K-major in SMEM (imm-trans-a = imm-trans-b = 0):
    ``D(64 x n) (+)= A[desc] B[desc]``."""
    r = n // 2
    return (
        f"template <> __device__ __forceinline__ void wgmma_ss_n<{n}>(float (&d)[{r}], uint64_t a_desc, "
        f"uint64_t b_desc, int scale_d) {{\n"
        f"  asm volatile(\n"
        f"      \"{{\\n\\t.reg .pred p;\\n\\t\"\n"
        f"      \"setp.ne.b32 p, %{r + 2}, 0;\\n\\t\"\n"
        f"      \"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 \"\n"
        f"      \"{{{_dlist(r)}}}, %{r}, %{r + 1}, p, 1, 1, 0, 0;\\n\\t}}\"\n"
        f"      : {_douts(r)}\n"
        f"      : \"l\"(a_desc), \"l\"(b_desc), \"r\"(scale_d));\n"
        f"}}\n"
    )


def rs(n: int) -> str:
    """RS form, A (four bf16x2 registers per thread, the m64k16 A fragment) from
    registers, B N-major in SMEM (imm-trans-b = 1): ``D(64 x n) (+)= A B[desc]``."""
    r = n // 2
    return (
        f"template <> __device__ __forceinline__ void wgmma_rs_n<{n}>(float (&d)[{r}], uint32_t a0, uint32_t a1, "
        f"uint32_t a2, uint32_t a3, uint64_t b_desc, int scale_d) {{\n"
        f"  asm volatile(\n"
        f"      \"{{\\n\\t.reg .pred p;\\n\\t\"\n"
        f"      \"setp.ne.b32 p, %{r + 5}, 0;\\n\\t\"\n"
        f"      \"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 \"\n"
        f"      \"{{{_dlist(r)}}}, {{%{r}, %{r + 1}, %{r + 2}, %{r + 3}}}, %{r + 4}, p, 1, 1, 1;\\n\\t}}\"\n"
        f"      : {_douts(r)}\n"
        f"      : \"r\"(a0), \"r\"(a1), \"r\"(a2), \"r\"(a3), \"l\"(b_desc), \"r\"(scale_d));\n"
        f"}}\n"
    )


def ss_tt(n: int) -> str:
    """SS form with both operands MN-major in SMEM (imm-trans-a = imm-trans-b = 1), as the backward's
    dQ = dS K reads them (A = dS^T stored keys x rows, B = K stored keys x D): ``D(64 x n) (+)= A B``.
    Declares and defines ``wgmma_ss_tt_n<n>``."""
    r = n // 2
    return (
        f"template <int N> __device__ __forceinline__ void wgmma_ss_tt_n(float (&d)[N / 2], uint64_t a_desc, "
        f"uint64_t b_desc, int scale_d);\n"
        f"template <> __device__ __forceinline__ void wgmma_ss_tt_n<{n}>(float (&d)[{r}], uint64_t a_desc, "
        f"uint64_t b_desc, int scale_d) {{\n"
        f"  asm volatile(\n"
        f"      \"{{\\n\\t.reg .pred p;\\n\\t\"\n"
        f"      \"setp.ne.b32 p, %{r + 2}, 0;\\n\\t\"\n"
        f"      \"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 \"\n"
        f"      \"{{{_dlist(r)}}}, %{r}, %{r + 1}, p, 1, 1, 1, 1;\\n\\t}}\"\n"
        f"      : {_douts(r)}\n"
        f"      : \"l\"(a_desc), \"l\"(b_desc), \"r\"(scale_d));\n"
        f"}}\n"
    )


def backward_wrappers(block_m: int, kv_cols: int, dq_cols: int) -> str:
    """The wrappers of the sm_90a backward kernel (namespace b200c): SS ``m64n{block_m}`` for S^T and dP^T,
    RS ``m64n{kv_cols}`` for dV and dK (a warpgroup's columns of them), SS transposed ``m64n{dq_cols}`` for dQ."""
    return "namespace b200c {\n" + ss(block_m) + rs(kv_cols) + ss_tt(dq_cols) + "}  // namespace b200c"


def wrappers(ss_n: int, rs_n: int) -> str:
    """The specializations of ``wgmma_ss_n<ss_n>`` and ``wgmma_rs_n<rs_n>`` (namespace b200c)."""
    return "namespace b200c {\n" + ss(ss_n) + rs(rs_n) + "}  // namespace b200c"
