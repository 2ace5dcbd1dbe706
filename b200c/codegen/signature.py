"""The kernel's entry signature, written once: rendered into every generated
kernel (the entry point and its comment) and packed by the runtime's launcher
in the same order (b200c/runtime/driver.py)."""
from __future__ import annotations

import msgspec

KERNEL_NAME = "b200c_attention"

# kind -> C parameter type
_CTYPES = {
    "tensor_map": "const __grid_constant__ CUtensorMap",
    "bf16_ptr": "__nv_bfloat16* __restrict__",
    "f32_ptr": "float* __restrict__",
    "i32_ptr": "const int* __restrict__",
    "ptr": "const void* __restrict__",
    "i64": "const int64_t",
    "i32": "const int",
    "f32": "const float",
}


class Param(msgspec.Struct, frozen=True):
    """One kernel parameter.

    Attributes:
        name: C name (also the key the runtime fills it by).
        kind: ``tensor_map`` (128-B CUtensorMap by value), ``bf16_ptr``,
            ``f32_ptr``, ``i32_ptr``, ``ptr`` (untyped: a captured tensor of the mods),
            ``i64``, ``i32`` or ``f32``.
        doc: what it holds, with units.
    """

    name: str
    kind: str
    doc: str = ""

    @property
    def ctype(self) -> str:
        """The C type of the parameter."""
        return _CTYPES[self.kind]


ATTENTION_PARAMS = (
    Param("tmap_q", "tensor_map", "TMA map of Q (BF16, rank 4, dims {D, S_q, H, B}; varlen: {D, total_q, H, 1})"),
    Param("tmap_k", "tensor_map", "TMA map of K (dims {D, S_kv, H_kv, B}; varlen: {D, total_kv, H_kv, 1})"),
    Param("tmap_v", "tensor_map", "TMA map of V (as K)"),
    Param("out", "bf16_ptr", "O, same logical (B, H, S_q, D) shape as Q"),
    Param("out_stride_b", "i64", "element stride of O over B (varlen: 0)"),
    Param("out_stride_h", "i64", "element stride of O over H"),
    Param("out_stride_s", "i64", "element stride of O over S_q (rows)"),
    Param("lse", "f32_ptr", "log-sum-exp per (B, H, S_q) row in natural-log units, or null"),
    Param("lse_stride_b", "i64", "element stride of lse over B (varlen: 0)"),
    Param("lse_stride_h", "i64", "element stride of lse over H"),
    Param("lse_stride_s", "i64", "element stride of lse over S_q"),
    Param("cu_seqlens_q", "i32_ptr", "varlen: B + 1 prefix sums of the query lengths, else null"),
    Param("cu_seqlens_k", "i32_ptr", "varlen: B + 1 prefix sums of the key lengths, else null"),
    Param("batch", "i32", "B (sequences)"),
    Param("heads", "i32", "H (query heads)"),
    Param("heads_kv", "i32", "H_kv (K/V heads; H is a multiple)"),
    Param("seq_q", "i32", "S_q (varlen: the longest query sequence)"),
    Param("seq_kv", "i32", "S_kv (varlen: unused, read from cu_seqlens_k)"),
    Param("causal", "i32", "1: causal mask aligned to the bottom-right corner"),
    Param("pack_heads", "i32", "1: a work item's Q stages are Q_STAGES heads of one K/V group (GQA)"),
    Param("softmax_scale", "f32", "natural-log units, usually 1/sqrt(D)"),
)


def c_parameter_list(params=ATTENTION_PARAMS, first_prefix: str = f"{KERNEL_NAME}(", width: int = 115) -> str:
    """The C declaration ``NAME(type name, ...) {`` wrapped greedily at ``width``
    columns, continuation lines aligned after the opening parenthesis."""
    pad = " " * len(first_prefix)
    decls = [f"{p.ctype} {p.name}" for p in params]
    lines, cur = [], first_prefix
    for i, d in enumerate(decls):
        piece = d + (", " if i < len(decls) - 1 else ") {")
        if cur.strip() and cur not in (first_prefix,) and len(cur + piece.rstrip()) > width:
            lines.append(cur.rstrip())
            cur = pad
        cur += piece
    lines.append(cur.rstrip())
    return "\n".join(lines)
