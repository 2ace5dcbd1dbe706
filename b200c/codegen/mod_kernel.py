"""What a kernel with mods (score_mod / mask_mod / attention sinks, :mod:`b200c.dsl.mod_records`)
adds to the shared parts every backend prints: entry parameters, kernel-context fields and their
initialisation, the traced device functions (:mod:`b200c.codegen.mods`) and ``mod_entry``, the one
function both backends call per score entry. Decided here in Python; the templates print the lines.

Per score entry (query row ``row`` of the sequence, key column ``col``, head ``h``):

* indices past the sequence (the partial last Q and K/V tiles) are clamped into it, so a captured
  tensor is never indexed past the problem's shape by the kernel itself; those entries are masked
  afterwards (``col_limit``) or belong to rows that are never stored;
* ``score_mod`` sees the scaled score ``s * softmax_scale`` (natural-log units, FlexAttention's
  convention) and its result is scaled back (``* inv_scale``), so the backends' exponent
  arithmetic (scale folded into the exponent, blog ch.8) is unchanged;
* ``mask_mod`` is evaluated on the K/V tiles the block mask calls partial only (``masked``); a
  false entry is -inf.

Block sparsity (a mask_mod): the kernel reads per work item ``(kv_lo, full_lo, full_hi, kv_hi)``
from ``kv_ranges`` (:mod:`b200c.runtime.block_mask`, computed with torch ops on the GPU) and visits
the full tiles first, then the partial ones (``kv_tile`` in ``templates/work.cuh.j2``).
"""
from __future__ import annotations

from ..dsl.mod_records import ModSet
from .signature import ATTENTION_PARAMS, Param


def block_sparse(mods) -> bool:
    """Whether the kernel takes a block mask (it has a mask_mod)."""
    return mods is not None and mods.mask_mod is not None


def has_score_mod(mods) -> bool:
    """Whether the kernel applies a score_mod (every tile then takes the -inf-safe softmax)."""
    return mods is not None and mods.score_mod is not None


def has_mods(mods) -> bool:
    """Whether the kernel puts its scores through ``mod_entry`` (a score_mod or a mask_mod)."""
    return has_score_mod(mods) or block_sparse(mods)


def params(mods) -> tuple:
    """The kernel's entry parameters: :data:`~b200c.codegen.signature.ATTENTION_PARAMS`, then the
    mods' (block mask, sinks, one pointer and ``ndim`` strides per captured tensor)."""
    if mods is None or mods.empty:
        return ATTENTION_PARAMS
    out = list(ATTENTION_PARAMS)
    if block_sparse(mods):
        out.append(Param("kv_ranges", "i32_ptr", "block mask: (kv_lo, full_lo, full_hi, kv_hi) K/V tiles per work item"))
    if mods.sinks:
        out.append(Param("sinks", "f32_ptr", "attention sink logit per query head (natural-log units), FP32 (H,)"))
    for k, t in enumerate(mods.captured):
        out.append(Param(f"cap{k}", "ptr", f"captured tensor {k} of the mods ({t.dtype}, {t.ndim}-D)"))
        out += [Param(f"cap{k}_stride{d}", "i64", f"element stride of captured tensor {k}, dim {d}")
                for d in range(t.ndim)]
    return tuple(out)


def ctx_fields(mods) -> tuple:
    """Lines of the kernel context's mod fields."""
    if mods is None or mods.empty:
        return ()
    from . import mods as lowering

    out = []
    if block_sparse(mods):
        out.append("  const int4* kv_ranges;  // block mask: (kv_lo, full_lo, full_hi, kv_hi) per work item")
    if has_score_mod(mods):
        out.append("  float inv_scale;        // 1 / softmax_scale: score_mod's result back in raw score units")
    out += ["  " + line.strip() for line in lowering.ctx_fields(mods)]
    return tuple(out)


def ctx_init(mods) -> tuple:
    """Lines of the entry that fill the context's mod fields from the parameters."""
    if mods is None or mods.empty:
        return ()
    out = []
    if block_sparse(mods):
        out.append("  c.kv_ranges = reinterpret_cast<const int4*>(kv_ranges);")
    if has_score_mod(mods):
        out.append("  c.inv_scale = 1.f / softmax_scale;")
    if mods.sinks:
        out.append("  c.sinks = sinks;")
    from .mods import C_TENSOR_TYPES

    for k, t in enumerate(mods.captured):
        out.append(f"  c.cap{k} = static_cast<const {C_TENSOR_TYPES[t.dtype]}*>(cap{k});")
        out += [f"  c.cap{k}_stride[{d}] = cap{k}_stride{d};" for d in range(t.ndim)]
    return tuple(out)


def functions(mods) -> tuple:
    """Lines of the traced device functions and ``mod_entry`` (after the context and work item)."""
    if not has_mods(mods):
        return ()
    from . import mods as lowering

    out = list(lowering.device_functions(mods))
    score, mask = has_score_mod(mods), block_sparse(mods)
    out += [
        "",
        "// One score entry through the mods: row `row` / key `col` of the sequence, query head h. Indices past the",
        "// sequence are clamped into it (no branch, and a captured tensor is never read past the problem's shape);",
        "// those entries are masked after (col_limit) or belong to rows that are not stored."
        + (" score_mod sees the scaled" if score else ""),
    ]
    if score:
        out.append("// score (natural-log units) and its result goes back to raw score units (the exponent folds the "
                   "scale in, blog ch.8).")
    if mask:
        out.append("// mask_mod runs on the tiles the block mask calls partial (masked); false: -inf.")
    additive = score and lowering.additive_score_mod(mods)
    if score:
        out.append("// col_off: the part of col known at compile time (passed on to score_mod as kv_off on whole tiles).")
    if additive:
        out += ["// The score_mod is score + bias: score_mod(-0.0f, ...) is the bias exactly (-0 + x = x), added in raw",
                "// score units with one FMA (no scaling of the score there and back)."]
    out += [
        "__device__ __forceinline__ float mod_entry(const Ctx& c, const WorkItem& w, const int h, const int row, "
        "const int col,",
        "                                           const int col_off, const float s, const bool masked) {",
        "  const int r = min(row, w.len_q - 1);",
    ]
    # a score_mod that indexes no captured tensor by kv_idx takes the column as it is on every tile (its
    # entries past the sequence are masked after), keeping the compile-time part
    clamp_score = score and lowering.reads_by_kv(mods.score_mod)
    if clamp_score or mask:
        out.append("  const int k = masked ? max(min(col, w.len_kv - 1), 0) : col;  // whole tiles lie inside the "
                   "sequence")
    if score:
        kv, off = ("k", "masked ? 0 : col_off") if clamp_score else ("col", "col_off")
        out.append(f"  float x = fmaf(score_mod(c, -0.0f, w.b, h, r, {kv}, {off}), c.inv_scale, s);" if additive else
                   f"  float x = score_mod(c, s * c.softmax_scale, w.b, h, r, {kv}, {off}) * c.inv_scale;")
    else:
        out.append("  float x = s;")
    if mask:
        out.append("  if (masked && !mask_mod(c, w.b, h, r, k)) x = -INFINITY;")
    out += ["  return x;", "}"]
    return tuple(out)


def template_args(mods) -> dict:
    """What the kernel templates print for the mods (empty strings without mods)."""
    return {
        "ctx_fields": "\n".join(ctx_fields(mods)),
        "ctx_init": "\n".join(ctx_init(mods)),
        "functions": "\n".join(functions(mods)),
    }


BLOCK_MASK_KERNEL_NAME = "b200c_block_mask_ranges"
BLOCK_MASK_MAX_THREADS = 1024  # its __launch_bounds__; one warp per K/V tile in flight
BLOCK_MASK_MAX_TILES = 48 * 1024  # its dynamic shared memory: one byte per K/V tile, within the default 48 KiB


def block_mask_params() -> tuple:
    """Entry parameters of ``b200c_block_mask_ranges`` (``templates/work.cuh.j2``), the kernel every module
    with a block mask holds: the block mask of a boolean mask tensor (torch SDPA's ``attn_mask``) in one
    launch, launched by :mod:`b200c.runtime.mask_ranges`."""
    return (
        Param("mask", "ptr", "the bool mask, one byte per entry, broadcastable to (B, H, S_q, S_kv)"),
        Param("stride_b", "i64", "element stride of the mask over B (0: broadcast)"),
        Param("stride_h", "i64", "element stride over H (0: broadcast)"),
        Param("stride_q", "i64", "element stride over S_q (0: broadcast)"),
        Param("stride_k", "i64", "element stride over S_kv (0: broadcast)"),
        Param("ranges", "i32_ptr", "out: (kv_lo, full_lo, full_hi, kv_hi) per work item, int32 (items, 4)"),
        Param("batch", "i32", "B"),
        Param("head_groups", "i32", "work items over H: H / heads_per_item"),
        Param("q_groups", "i32", "work items over S_q"),
        Param("lead_b", "i32", "CTAs over B: B, or 1 where the mask broadcasts B"),
        Param("lead_h", "i32", "CTAs over the head groups: head_groups, or 1 where the mask broadcasts H"),
        Param("lead_g", "i32", "CTAs over the Q groups: q_groups, or 1 where the mask broadcasts S_q"),
        Param("heads_per_item", "i32", "query heads of one work item (GQA packing: q_stages, else 1)"),
        Param("rows_per_item", "i32", "query rows of one work item"),
        Param("mask_heads", "i32", "the mask's extent over H (1 or H)"),
        Param("mask_rows", "i32", "the mask's extent over S_q (1 or S_q)"),
        Param("seq_q", "i32", "S_q"),
        Param("seq_kv", "i32", "S_kv"),
        Param("n_kv", "i32", "K/V tiles: ceil(S_kv / BLOCK_N)"),
        Param("vec16", "i32", "1: keys contiguous and every row 16-byte aligned (16 keys per load), else 0"),
    )


def kv_col0(plan, tile: str = "j") -> str:
    """C expression of the first key column (in the sequence) of K/V tile number ``tile`` (visit order)
    of the work item: with a block mask or split-KV the visit order maps to tiles through ``kv_tile``."""
    t = f"kv_tile(w, {tile})" if block_sparse(plan.mods) or getattr(plan, "split_kv", False) else (tile if tile.isidentifier() or tile.isdigit()
                                                                else f"({tile})")
    return f"{t} * BLOCK_N"


def kv_row(plan, tile: str = "j") -> str:
    """C expression of the first K/V row (in the tensors) of K/V tile number ``tile`` (visit order)."""
    return f"w.kv_row0 + {kv_col0(plan, tile)}"


__all__ = ["block_sparse", "has_score_mod", "has_mods", "params", "ctx_fields", "ctx_init", "functions",
           "template_args", "kv_row", "kv_col0", "ModSet", "BLOCK_MASK_KERNEL_NAME", "block_mask_params"]
