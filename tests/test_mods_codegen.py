"""Lowering of traced mods to CUDA C (b200c/codegen/mods.py): the op table covers every canonical op,
the functions' signatures and comments, the Ctx members, the literals, and the C text itself: compiled
with g++ (CUDA's intrinsics defined for the host) and run on random inputs against the interpreter of
tests/test_mods_trace.py for every case there, and compiled with nvcc for sm_90a (skipped without
nvcc); on a GPU the nvcc build runs too."""
import shutil
import subprocess

import msgspec
import pytest
import torch

from b200c.codegen.mods import (C_LOAD, C_OPS, C_TENSOR_TYPES, c_literal, ctx_fields, device_functions,
                               score_bias_parts)
from b200c.dsl.mod_records import TENSOR_DTYPES, CapturedTensor, ModSet
from b200c.dsl.mods import OPS, trace_mods
from b200c.toolchain import find_nvcc
from test_mods_trace import B, CASES, H, SKV, SQ, evaluate

SCORE_SIG = ("__device__ __forceinline__ float score_mod(const Ctx& c, const float score, const int b, const int h, "
             "const int q_idx, const int kv_idx,",
             "                                           const int kv_off = 0) {  // kv_off: the part of kv_idx known at "
             "compile time")
MASK_SIG = ("__device__ __forceinline__ bool mask_mod(const Ctx& c, const int b, const int h, const int q_idx, "
            "const int kv_idx) {")


def test_every_canonical_op_has_a_c_template():
    assert set(C_OPS) == set(OPS), f"missing: {sorted(set(OPS) - set(C_OPS))}, extra: {sorted(set(C_OPS) - set(OPS))}"
    assert set(C_LOAD) == set(TENSOR_DTYPES) == set(C_TENSOR_TYPES)


def test_softcap_function_text():
    mods, _ = trace_mods(lambda score, b, h, q_idx, kv_idx: torch.tanh(score / 30.0) * 30.0)
    lines = device_functions(mods)
    i = lines.index("// score_mod, traced with torch.fx: tanh(score / 30.0) * 30.0")
    # the helper it calls comes first: one MUFU.TANH
    assert lines[i - 5:i] == ("__device__ __forceinline__ float mod_tanh(const float x) {", "  float y;",
                              '  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));', "  return y;", "}")
    assert lines[i:] == (
        "// score_mod, traced with torch.fx: tanh(score / 30.0) * 30.0",
        *SCORE_SIG,
        "  const float v1 = __fdividef(score, 30.0f);",
        "  const float v2 = mod_tanh(v1);",
        "  const float v4 = v2 * 30.0f;",
        "  return v4;",
        "}",
    )
    assert ctx_fields(mods) == ()


def test_mask_with_captured_tensors_text():
    doc = torch.zeros(2, 8, dtype=torch.int64)
    bias = torch.zeros(4, 8, dtype=torch.bfloat16).t()
    mods, tensors = trace_mods(score_mod=lambda score, b, h, q_idx, kv_idx: score + bias[kv_idx, h],
                               mask_mod=lambda b, h, q_idx, kv_idx: doc[b, q_idx] == doc[b, kv_idx],
                               sinks=torch.zeros(4))
    lines = device_functions(mods)
    assert lines[0] == "// score_mod, traced with torch.fx: score + cap0[kv_idx, h]" and lines[1:3] == SCORE_SIG
    assert ("  const float v0 = __bfloat162float(c.cap0[(int64_t)kv_idx * c.cap0_stride[0] + "
            "(int64_t)h * c.cap0_stride[1]]);") in lines
    i = lines.index("// mask_mod, traced with torch.fx: cap1[b, q_idx] == cap1[b, kv_idx]")
    assert lines[i + 1] == MASK_SIG
    assert "  const int v0 = (int)c.cap1[(int64_t)b * c.cap1_stride[0] + (int64_t)q_idx * c.cap1_stride[1]];" in lines
    assert lines[-2:] == ("  return v2;", "}")
    assert not any(l.endswith("\n") for l in lines)
    assert ctx_fields(mods) == (
        "const __nv_bfloat16* cap0;  // bf16, 2-D",
        "int64_t cap0_stride[2];",
        "const long long* cap1;  // i64, 2-D",
        "int64_t cap1_stride[2];",
        "const float* sinks;  // per-head attention sink logits, FP32, (H,)",
    )


def test_ctx_fields_per_dtype():
    mods = ModSet(captured=tuple(CapturedTensor(dtype=d, ndim=i + 1) for i, d in enumerate(TENSOR_DTYPES)))
    fields = ctx_fields(mods)
    for k, d in enumerate(TENSOR_DTYPES):
        assert fields[2 * k] == f"const {C_TENSOR_TYPES[d]}* cap{k};  // {d}, {k + 1}-D"
        assert fields[2 * k + 1] == f"int64_t cap{k}_stride[{k + 1}];"
    assert C_TENSOR_TYPES == {"f32": "float", "bf16": "__nv_bfloat16", "f16": "__half", "i32": "int",
                              "i64": "long long", "bool": "bool"}
    assert device_functions(ModSet()) == () and ctx_fields(ModSet()) == ()


def test_helpers_only_when_used():
    plain = device_functions(trace_mods(lambda score, b, h, q_idx, kv_idx: score * 2)[0])
    assert not any("mod_floordiv" in l or "mod_floormod" in l for l in plain)
    both = device_functions(trace_mods(lambda score, b, h, q_idx, kv_idx: score // 2 + q_idx % 3)[0])
    text = "\n".join(both)
    assert text.index("int mod_floordiv(") < text.index("float score_mod(")
    assert text.count("mod_floordiv(const int") == 1 and text.count("mod_floormod(const float") == 1


def test_c_literals():
    assert c_literal(30.0, "f32") == "30.0f"
    assert c_literal(1e-05, "f32") == "1e-05f"
    assert c_literal(0.1, "f32") == "0.1f"
    assert c_literal(-2.5, "f32") == "(-2.5f)"
    assert c_literal(1 / 3, "f32") == "0.33333334f"  # the FP32 value, shortest
    assert c_literal(float("inf"), "f32") == "INFINITY" and c_literal(float("-inf"), "f32") == "(-INFINITY)"
    assert c_literal(float("nan"), "f32") == "NAN" and c_literal(1e39, "f32") == "INFINITY"
    assert c_literal(3, "f32") == "3.0f" and c_literal(True, "f32") == "1.0f"
    assert c_literal(7, "i32") == "7" and c_literal(-7, "i32") == "(-7)"
    assert c_literal(-2 ** 31, "i32") == "(-2147483647 - 1)"
    assert c_literal(True, "bool") == "true" and c_literal(0, "bool") == "false"
    # every FP32 number reads back as itself
    g = torch.Generator().manual_seed(0)
    for x in (torch.randn(200, generator=g) * 10.0 ** torch.randint(-40, 38, (200,), generator=g)).tolist():
        x32 = torch.tensor(x, dtype=torch.float32).item()
        text = c_literal(x32, "f32").strip("()").rstrip("f")
        if text not in ("INFINITY", "-INFINITY"):
            assert torch.tensor(float(text), dtype=torch.float32).item() == x32


def test_operands_are_converted_explicitly():
    mods, _ = trace_mods(lambda score, b, h, q_idx, kv_idx: torch.where(q_idx > 2.5, q_idx, score) + (q_idx == 3))
    body = "\n".join(device_functions(mods))
    assert "(float)q_idx > 2.5f" in body  # comparison in f32
    assert "? (float)q_idx : score" in body
    assert "(float)v" in body  # the bool added to a float


# ---------------------------------------------------------------------------------------------------
# the C text, compiled and run


_HOST_PRELUDE = r"""
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
// CUDA's device spellings, for the host
#define __device__
#define __forceinline__ inline
#define __expf(x) expf(x)
#define __fdividef(x, y) ((x) / (y))
#define rsqrtf(x) (1.0f / sqrtf(x))
static inline float __int_as_float(int x) { float f; memcpy(&f, &x, 4); return f; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
struct __nv_bfloat16 { uint16_t bits; };
static inline float __bfloat162float(__nv_bfloat16 h) {
  uint32_t u = (uint32_t)h.bits << 16; float f; memcpy(&f, &u, 4); return f;
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {(uint16_t)((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return {(uint16_t)(u >> 16)};
}
typedef _Float16 __half;
static inline float __half2float(__half h) { return (float)h; }
static inline __half __float2half_rn(float f) { return (__half)f; }
#define TO_DEVICE(p, n) (p)
"""

# the PTX the mod helpers inline, as the host computes it (the exact function: PTX's approximation is checked
# on the GPU, test_device_functions_run_on_the_gpu)
_HOST_ASM = {'  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));': "  y = tanhf(x);"}

_CUDA_PRELUDE = r"""
#include <cuda_bf16.h>
#include <stdint.h>
#include <stdio.h>
static const void* TO_DEVICE(const void* p, size_t n) {
  void* d = nullptr;
  cudaMalloc(&d, n < 1 ? 1 : n);
  cudaMemcpy(d, p, n, cudaMemcpyHostToDevice);
  return d;
}
"""

N_POINTS = 96
SPLIT_CASES: list = []  # the cases the last program() evaluated through score_bias_parts


def _points(seed=0):
    g = torch.Generator().manual_seed(seed)
    score = torch.randn(N_POINTS, generator=g) * 4
    idx = [torch.randint(0, n, (N_POINTS,), generator=g, dtype=torch.int32) for n in (B, H, SQ, SKV)]
    return (score, *idx)


def _storage_bytes(t: torch.Tensor) -> bytes:
    """The elements of ``t`` laid out at its strides from offset 0 (what the kernel's pointer sees)."""
    length = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
    store = torch.zeros(length, dtype=t.dtype)
    store.as_strided(t.shape, t.stride()).copy_(t)
    return bytes(store.view(torch.uint8).tolist())


def _array(name: str, values, ctype: str) -> str:
    return f"alignas(16) static const {ctype} {name}[] = {{{', '.join(values)}}};"


def program(cases, mode: str, points, kv_off: str = "", parts: bool = False) -> str:
    """One C++ (mode "host") or CUDA (mode "cuda") translation unit that evaluates every case's mod at
    ``points`` and prints ``case point value`` lines (``%a``); each case lives in its own namespace.
    ``kv_off``: a C expression of ``i`` passed to score_mod as the compile-time part of kv_idx (as the
    kernels pass the key's column within a fragment; "" passes none); ``parts``: an additive score_mod
    whose bias splits is evaluated as the Hopper whole tiles do, from ``score_bias_parts``."""
    score, b, h, q, kv = points
    split = SPLIT_CASES
    split.clear()
    out = [_HOST_PRELUDE if mode == "host" else _CUDA_PRELUDE]
    out.append(_array("P_SCORE", [f"{x.hex()}f" for x in score.tolist()], "float"))
    for name, t in (("P_B", b), ("P_H", h), ("P_Q", q), ("P_KV", kv)):
        out.append(_array(name, [str(v) for v in t.tolist()], "int"))
    runs = []
    for i, (kind, mods, tensors) in enumerate(cases):
        ns = f"m{i}"
        out.append(f"namespace {ns} {{")
        out.append("struct Ctx {")
        out.extend("  " + f for f in ctx_fields(mods))
        out.append("  int unused;")
        out.append("};")
        fns = device_functions(mods)
        out.extend(fns if mode == "cuda" else (_HOST_ASM.get(line, line) for line in fns))
        off = f", {kv_off}" if kv_off else ""
        call = (f"score_mod(c, s[i], b[i], h[i], q[i], kv[i]{off})" if kind == "score_mod"
                else "(mask_mod(c, b[i], h[i], q[i], kv[i]) ? 1.0f : 0.0f)")
        split_lines = score_bias_parts(mods) if kind == "score_mod" and kv_off and parts else ()
        if split_lines:  # the Hopper whole-tile path: the bias from its per-row base and per-key slope
            out.extend(split_lines)
            call = (f"[&]{{ float sl, ba; const int k = {kv_off}; score_bias_parts(c, b[i], h[i], q[i], kv[i] - k, sl, "
                    "ba); return s[i] + (ba + sl * (float)k); }()")
            split.append(i)
        params = "const Ctx c, const float* s, const int* b, const int* h, const int* q, const int* kv, float* o, int n"
        if mode == "host":
            out.append(f"void run({params}) {{ for (int i = 0; i < n; i++) o[i] = {call}; }}")
        else:
            out.append(f"__global__ void run({params}) {{")
            out.append(f"  const int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) o[i] = {call};")
            out.append("}")
        out.append("}")
        setup = [f"  {{ {ns}::Ctx c{{}};"]
        for k, t in enumerate(tensors):
            data = _storage_bytes(t)
            out.append(_array(f"{ns}_cap{k}", [str(x) for x in data] or ["0"], "unsigned char"))
            ctype = C_TENSOR_TYPES[mods.captured[k].dtype]
            setup.append(f"    c.cap{k} = (const {ctype}*)TO_DEVICE({ns}_cap{k}, {len(data)});")
            for d, st in enumerate(t.stride()):
                setup.append(f"    c.cap{k}_stride[{d}] = {st};")
        if mode == "host":
            setup.append(f"    {ns}::run(c, P_SCORE, P_B, P_H, P_Q, P_KV, res, {N_POINTS});")
        else:
            setup.append(f"    {ns}::run<<<1, {N_POINTS}>>>(c, d_s, d_b, d_h, d_q, d_kv, d_o, {N_POINTS});")
            setup.append(f"    cudaMemcpy(res, d_o, sizeof(res), cudaMemcpyDeviceToHost);")
        setup.append(f'    for (int i = 0; i < {N_POINTS}; i++) printf("{i} %d %a\\n", i, (double)res[i]); }}')
        runs.extend(setup)
    out.append("int main() {")
    out.append(f"  static float res[{N_POINTS}];")
    if mode == "cuda":
        out.append("  const float* d_s = (const float*)TO_DEVICE(P_SCORE, sizeof(P_SCORE));")
        for v, name in (("d_b", "P_B"), ("d_h", "P_H"), ("d_q", "P_Q"), ("d_kv", "P_KV")):
            out.append(f"  const int* {v} = (const int*)TO_DEVICE({name}, sizeof({name}));")
        out.append("  float* d_o = nullptr; cudaMalloc(&d_o, sizeof(res));")
    out.extend(runs)
    if mode == "cuda":
        out.append('  cudaError_t e = cudaDeviceSynchronize(); if (e != cudaSuccess) { printf("CUDA error %s\\n", '
                   'cudaGetErrorString(e)); return 1; }')
    out.append("  return 0;")
    out.append("}")
    return "\n".join(out) + "\n"


def traced_cases():
    """(kind, ModSet, captured tensors) of every case of tests/test_mods_trace.py."""
    result = []
    for name, kind, fn, _, _ in CASES:
        mods, tensors = trace_mods(**{kind: fn})
        result.append((kind, mods, tensors))
    return result


def expected(cases, points):
    """The interpreter's values of every case at ``points``: a list of FP32 tensors (mask: 0 / 1)."""
    score, b, h, q, kv = points
    return [evaluate(getattr(mods, kind), tensors, score, b, h, q, kv).float() for kind, mods, tensors in cases]


def compare(cases, points, output: str, rtol: float, atol: float, names=None, tanh_rtol: float | None = None) -> None:
    """Every case's printed values against the interpreter's; ``tanh_rtol``: the relative tolerance of the
    score_mods that call tanh (PTX tanh.approx.f32 on the GPU)."""
    got = [torch.full((N_POINTS,), float("nan")) for _ in cases]
    seen = 0
    for line in output.splitlines():
        c, i, v = line.split()
        got[int(c)][int(i)] = float.fromhex(v)
        seen += 1
    assert seen == len(cases) * N_POINTS, output[-2000:]
    names = names or [c[0] for c in CASES]
    assert len(names) == len(cases)
    for name, (kind, mods, _), g, want in zip(names, cases, got, expected(cases, points)):
        graph = getattr(mods, kind)
        if kind == "mask_mod":
            assert torch.equal(g, want), f"{name}: {graph.expression}\nC: {g}\nPython: {want}"
        else:
            r = tanh_rtol if tanh_rtol is not None and any(n.op == "tanh" for n in graph.nodes) else rtol
            torch.testing.assert_close(g, want, rtol=r, atol=atol, equal_nan=True,
                                       msg=lambda m: f"{name}: {graph.expression}: {m}")


def run_on_host(tmp_path, name: str, text: str) -> str:
    """``text`` (a :func:`program` in host mode) compiled with g++ and run: its stdout."""
    src, exe = tmp_path / f"{name}.cpp", tmp_path / name
    src.write_text(text)
    r = subprocess.run(["g++", "-std=c++17", "-O1", "-w", str(src), "-o", str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ on PATH to run the C lowering on the host")
def test_c_lowering_matches_the_interpreter_on_the_host(tmp_path):
    """Every case's C, compiled by g++ with CUDA's intrinsics defined for the host, gives the interpreter's
    values (FP32 math functions of libm: within a few ulp)."""
    cases, points = traced_cases(), _points()
    compare(cases, points, run_on_host(tmp_path, "mods_host", program(cases, "host", points)), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ on PATH to run the C lowering on the host")
def test_c_lowering_with_small_indices_and_a_compile_time_key_part(tmp_path):
    """With small_indices (int -> float through mod_i2f) and kv_idx split into a run-time and a
    compile-time part (kv_off, as the kernels call score_mod), every case still gives the interpreter's
    values: the per-row / per-key split of index arithmetic (ALiBi's slope * (kv_idx - q_idx)) is exact
    up to FP32 rounding."""
    cases = [(kind, msgspec.structs.replace(mods, small_indices=True), tensors)
             for kind, mods, tensors in traced_cases()]
    assert any("per row + per key" in line for _, mods, _ in cases for line in device_functions(mods))
    points = _points(seed=3)
    for parts in (False, True):  # score_mod(..., kv_off) as the masked tiles call it; the split bias
        text = program(cases, "host", points, kv_off="kv[i] % 13", parts=parts)
        split = [CASES[i][0] for i in SPLIT_CASES]
        assert len(split) >= (3 if parts else 0), split  # score + a per-head bias, index arithmetic, ...
        compare(cases, points, run_on_host(tmp_path, f"mods_split{int(parts)}", text), rtol=1e-5, atol=1e-5)


def _with_unit_dims(mods, tensors):
    """``mods`` with each captured tensor's unit_dims as the runtime sets them for ``tensors``."""
    from b200c.codegen.mods import kv_indexed_dims

    caps = tuple(msgspec.structs.replace(c, unit_dims=tuple(d for d in dims if t.stride(d) == 1))
                 for c, dims, t in zip(mods.captured, kv_indexed_dims(mods), tensors))
    return msgspec.structs.replace(mods, captured=caps)


def test_key_loads_along_a_unit_stride_dimension_are_split():
    """A score_mod's load indexed by kv_idx along a dimension of stride 1 is one address per tile
    (kv_idx - kv_off) plus the compile-time key offset; with another stride, another dimension, or a
    mask_mod in the kernel, it stays one multiply per index. The record leaves unit_dims out of the JSON
    when empty (the kernel cache keys of tensors without it are unchanged)."""
    from b200c.codegen.mods import kv_indexed_dims

    bias = torch.zeros(4, 8, dtype=torch.bfloat16)  # (H, S_kv), stride (8, 1)
    fn = lambda score, b, h, q_idx, kv_idx: score + bias[h, kv_idx + 1]  # noqa: E731
    mods, tensors = trace_mods(score_mod=fn)
    assert kv_indexed_dims(mods) == ((1,),) and '"unit_dims"' not in mods.to_json()
    split = _with_unit_dims(mods, tensors)
    assert split.captured[0].unit_dims == (1,) and '"unit_dims":[1]' in split.to_json()
    line = [x for x in device_functions(split) if "c.cap0[" in x][0]
    assert "c.cap0[((int64_t)h * c.cap0_stride[0] + (int64_t)(v1 - kv_off)) + kv_off]" in line, line
    transposed = bias.t().contiguous().t()  # the same values, stride (1, 4): kv_idx's dimension is not unit
    assert _with_unit_dims(mods, (transposed,)).captured[0].unit_dims == ()
    masked, tensors = trace_mods(score_mod=fn, mask_mod=lambda b, h, q_idx, kv_idx: kv_idx >= 0)
    assert kv_indexed_dims(masked) == ((),)
    forced = msgspec.structs.replace(masked, captured=(msgspec.structs.replace(masked.captured[0], unit_dims=(1,)),))
    assert not any("kv_off)" in x for x in device_functions(forced))


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ on PATH to run the C lowering on the host")
def test_c_lowering_of_unit_stride_key_loads_matches_the_interpreter(tmp_path):
    """Every case with the unit_dims its captured tensors give (as the runtime compiles a call) and kv_idx
    split into a run-time and a compile-time part: the split loads read the interpreter's values."""
    g = torch.Generator().manual_seed(11)
    table = torch.randn(B, H, SQ, SKV, generator=g).bfloat16()  # contiguous: kv_idx's dimension has stride 1
    key_bias = torch.randn(H, SKV + 3, generator=g)
    ids = torch.randint(-50, 50, (SKV + 3,), generator=g, dtype=torch.int32)
    extra = {
        "contiguous bf16 table": lambda score, b, h, q_idx, kv_idx: score + table[b, h, q_idx, kv_idx],
        "key bias at kv_idx + 3": lambda score, b, h, q_idx, kv_idx: score * 0.5 + key_bias[h, kv_idx + 3] * 2.0,
        "int ids by key": lambda score, b, h, q_idx, kv_idx: score + (ids[kv_idx] * 3 - q_idx).float(),
    }
    cases, names = [], [c[0] for c in CASES] + list(extra)
    for kind, mods, tensors in traced_cases() + [("score_mod", *trace_mods(score_mod=fn)) for fn in extra.values()]:
        cases.append((kind, _with_unit_dims(mods, tensors), tensors))
    split = [names[i] for i, (_, mods, _) in enumerate(cases)
             if any("kv_off)) + kv_off]" in x for x in device_functions(mods))]
    assert split == list(extra), split
    points = _points(seed=5)
    for small in (False, True):
        run_cases = [(k, msgspec.structs.replace(m, small_indices=small), t) for k, m, t in cases]
        out = run_on_host(tmp_path, f"mods_unit{int(small)}", program(run_cases, "host", points, kv_off="kv[i] % 13"))
        compare(run_cases, points, out, rtol=1e-5, atol=1e-5, names=names)


@pytest.mark.nvcc
def test_device_functions_compile_with_nvcc(tmp_path):
    """The functions of every case (every op, every captured dtype) inside a kernel, nvcc -arch=sm_90a."""
    cases = traced_cases()
    src = tmp_path / "mods.cu"
    src.write_text(program(cases, "cuda", _points()))
    r = subprocess.run([find_nvcc(), "-arch=sm_90a", "-c", str(src), "-o", str(tmp_path / "mods.o")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]


@pytest.mark.gpu
@pytest.mark.nvcc
def test_device_functions_run_on_the_gpu(tmp_path):
    """The nvcc build runs on the GPU and gives the interpreter's values (CUDA's FP32 functions, __expf:
    within a few ulp; tanh.approx.f32: within 2^-10 relative, twice the PTX ISA's bound)."""
    major, minor = torch.cuda.get_device_capability()
    arch = {(9, 0): "sm_90a", (10, 0): "sm_100a"}.get((major, minor), f"sm_{major}{minor}")
    cases, points = traced_cases(), _points()
    src = tmp_path / "mods_gpu.cu"
    src.write_text(program(cases, "cuda", points))
    exe = tmp_path / "mods_gpu"
    r = subprocess.run([find_nvcc(), f"-arch={arch}", str(src), "-o", str(exe)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr
    compare(cases, points, run.stdout, rtol=2e-5, atol=2e-5, tanh_rtol=2.0 ** -10)
