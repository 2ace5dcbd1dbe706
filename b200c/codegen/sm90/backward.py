"""The sm_90a backward kernels of a :class:`b200c.dsl.backward_schedule.BackwardSchedule`, as CUDA text.

One module holds three kernels (``templates/backward.cu.j2``): the preprocess (D = rowsum(dO * O), the
LSE in log2 units, dq_accum zeroed), the K/V-stationary main kernel (one CTA per work item of
:class:`b200c.codegen.backward_work.BackwardDecomposition`: a producer thread streams Q, dO, LSE and D
through a ``q_stages`` ring with TMA; ``mma_warpgroups`` consumer warpgroups each own ``block_n /
mma_warpgroups`` keys, compute S^T and dP^T with wgmma, keep dK and dV in registers and add their columns
of the visit's dQ into an FP32 buffer) and the postprocess (dQ = dq_accum * scale in BF16).

:func:`backward_layout` decides every number the template prints (from
:func:`b200c.codegen.backward_plan.plan_backward`'s regions and budgets); the warp roles are IR
(:mod:`b200c.codegen.sm90.backward_ir`) checked by the barrier-protocol verifier before
:func:`generate_backward` renders them. What the kernel does not cover yet is refused here by name
(:func:`supported`).
"""
from __future__ import annotations

import msgspec

from ..render import environment
from .emit import _HERE, helper_header
from .text import TEXT
from .wgmma import backward_wrappers

MAIN_KERNEL = "b200c_attention_backward"
PREPROCESS_KERNEL = "b200c_attention_backward_preprocess"
POSTPROCESS_KERNEL = "b200c_attention_backward_postprocess"
PRE_THREADS = 128  # threads of the preprocess and postprocess CTAs (BLOCK_M rows each)

#: entry parameters of the main kernel, in order: (name, what it is), as the generated file lists them
MAIN_PARAMS = (
    ("tmap_q", "CUtensorMap: TMA map of Q (BF16, dims {D, S_q, H, B})"),
    ("tmap_k", "CUtensorMap: TMA map of K (dims {D, S_kv, H_kv, B})"),
    ("tmap_v", "CUtensorMap: TMA map of V (as K)"),
    ("tmap_do", "CUtensorMap: TMA map of dO (as Q)"),
    ("lse_log2", "const float*: (B, H, S_pad) the forward's LSE times log2(e) (the preprocess's output)"),
    ("dpsum", "const float*: (B, H, S_pad) rowsum(dO * O) (the preprocess's output)"),
    ("dq_accum", "float*: (B, H, S_pad, D) FP32 dQ / softmax_scale, zeroed by the preprocess"),
    ("dq_semaphore", "int*: (B, H, S_pad / BLOCK_M) dQ turns taken per Q tile, zeroed by the preprocess "
                     "(dq_reduction='deterministic'; null otherwise)"),
    ("dk", "__nv_bfloat16*: dK, logical (B, H_kv, S_kv, D)"),
    ("dk_stride_b", "const int64_t: element stride of dK over B"),
    ("dk_stride_h", "const int64_t: element stride of dK over H_kv"),
    ("dk_stride_s", "const int64_t: element stride of dK over S_kv (rows; D is contiguous)"),
    ("dv", "__nv_bfloat16*: dV, as dK"),
    ("dv_stride_b", "const int64_t"),
    ("dv_stride_h", "const int64_t"),
    ("dv_stride_s", "const int64_t"),
    ("batch", "const int: B"),
    ("heads", "const int: H (query heads)"),
    ("heads_kv", "const int: H_kv (H is a multiple)"),
    ("seq_q", "const int: S_q"),
    ("seq_kv", "const int: S_kv"),
    ("seq_pad", "const int: S_pad, S_q rounded up to BLOCK_M"),
    ("causal", "const int: 1: causal mask aligned to the bottom-right corner"),
    ("softmax_scale", "const float: natural-log units, usually 1/sqrt(D)"),
    ("cu_seqlens_q", "const int*: varlen: (B + 1) first packed row of each sequence; then seq_q is the longest "
                     "sequence and the tensors are packed (total, H, D) with batch strides 0 (null: dense)"),
    ("cu_seqlens_k", "const int*: varlen: as cu_seqlens_q for the keys (null: dense)"),
)


class BackwardLayout(msgspec.Struct, frozen=True):
    """Every number of one generated sm_90a backward module.

    Attributes:
        name: the schedule's name.
        head_dim, block_m, block_n, q_stages, mma_warpgroups: the schedule's tiles.
        wg_keys: keys of each consumer warpgroup's S^T and dP^T (the M of its wgmmas: 64).
        kv_split: ``"keys"`` or ``"columns"``: how the warpgroups share dK and dV
            (:func:`b200c.codegen.backward_plan.kv_split`).
        wg_key_stride: keys between the warpgroups' first keys (``"keys"``: wg_keys; ``"columns"``: 0, every
            warpgroup computes S^T and dP^T of the whole tile).
        kv_cols: dK and dV columns per consumer warpgroup (the N of its dV and dK wgmmas).
        kv_wg_col_bytes: per warpgroup index, the byte offset of its first column slice in the Q and dO tiles
            (the B of dK and dV; ``"keys"``: 0).
        kv_wg_col0: per warpgroup index, its first dK / dV column (``"keys"``: 0).
        dk_before_dq: wait for the visit's dV and dK wgmmas before dQ's are issued
            (:func:`b200c.codegen.backward_plan.dk_before_dq`).
        dv_after_ds: pack P^T and issue dV after dS^T is made, not before
            (:func:`b200c.codegen.backward_plan.dv_after_ds`).
        ds_rows_by_warp: ``"columns"`` with several warpgroups: each warpgroup writes only the dS^T rows of
            its share of the warps (``4 / mma_warpgroups`` warps' 16-row blocks), the others' copies of the
            same values are not stored twice.
        dq_split: ``"columns"``, ``"rows"`` or ``"keys"``: how the warpgroups share dQ
            (:func:`b200c.codegen.backward_plan.dq_split`).
        dq_cols: dQ columns per consumer warpgroup (the N of its dQ wgmma).
        dq_keys: keys each warpgroup's dQ sums over (the K of its dQ wgmmas: block_n, or wg_keys where split
            by keys).
        dq_wg_key_bytes: per warpgroup index, the byte offset of its first dQ key row in the dS^T and K
            tiles (``"keys"``: wg_keys rows of 128 B; else 0).
        dq_wg_col_bytes: per warpgroup index, the byte offset of its first K column slice (``"columns"``:
            dq_cols / 64 slices; ``"keys"``: 0).
        dq_wg_col0: per warpgroup index, its first dQ column (``"columns"``: dq_cols; else 0).
        dq_wg_row_bytes: per warpgroup index, the byte offset of its 64 query rows' slice of the dS^T tile
            (``"rows"``: one slice of block_n x 128 B; else 0).
        ds_slice_bytes: one 64-row slice of a dS^T tile (block_n keys x 128 B; block_m / 64 slices per tile).
        dq_wg_part: whether warpgroup w's dQ is part w of the tile in ``dq_accum`` (``"columns"``, ``"rows"``: 1;
            ``"keys"``: 0, every warpgroup adds into the one part).
        dq_store: ``"bulk"`` or ``"red"``: how a visit's dQ is added into ``dq_accum``
            (:func:`b200c.codegen.backward_plan.dq_store`). Either way ``dq_accum`` holds each Q tile in the
            consumers' fragment order, as parts of 64 rows x dq_cols (part p at float ``64 dq_cols p``: rows
            ``[64 p, 64 p + 64)`` where split by rows, columns ``[p dq_cols, (p + 1) dq_cols)`` where split
            by columns, the one part where split by keys), in a part float4 chunk ``j`` of consumer thread
            ``t`` at ``4 (128 j + t)``.
        deterministic: ``dq_reduction == "deterministic"``: the K/V tiles of a sequence add into a Q tile's
            dQ rows in K/V tile order (a per-Q-tile turn counter in global memory), so dQ is bit-equal
            from run to run.
        dq_turn_wait_by_wg: with ``deterministic``, whether warpgroup w also waits for the warpgroups
            before it in its own CTA (``"keys"``: they add into the same dQ elements).
        threads, consumer_threads: threads of the main kernel's CTA and of its consumer warpgroups.
        pre_threads: threads of the preprocess / postprocess CTAs.
        consumer_regs, producer_regs: the setmaxnreg budgets.
        regions: ``(name, offset, bytes, what)`` of each SMEM region (from ``plan_backward``).
        barriers: ``(name, first index, count, arrivals, who)`` of each mbarrier family.
        num_barriers, smem_bytes: barrier count; dynamic SMEM of the main kernel (with the 1024-B slack).
        q_tile_bytes, kv_tile_bytes, ds_tile_bytes, row_vec_bytes: one Q/dO, K/V, dS^T tile; one visit's LSE.
        visit_tx_bytes: the bytes one visit's loads complete on its Q-full barrier.
        slices: 64-column TMA boxes per tile (head_dim / 64).
    """

    name: str
    head_dim: int
    block_m: int
    block_n: int
    q_stages: int
    mma_warpgroups: int
    wg_keys: int
    kv_split: str
    wg_key_stride: int
    kv_cols: int
    kv_wg_col_bytes: int
    kv_wg_col0: int
    ds_rows_by_warp: bool
    dk_before_dq: bool
    dv_after_ds: bool
    dq_split: str
    dq_cols: int
    dq_keys: int
    dq_wg_key_bytes: int
    dq_wg_col_bytes: int
    dq_wg_col0: int
    dq_wg_row_bytes: int
    ds_slice_bytes: int
    dq_wg_part: int
    dq_store: str
    deterministic: bool
    dq_turn_wait_by_wg: bool
    threads: int
    consumer_threads: int
    pre_threads: int
    consumer_regs: int
    producer_regs: int
    regions: tuple
    barriers: tuple
    num_barriers: int
    smem_bytes: int
    q_tile_bytes: int
    kv_tile_bytes: int
    ds_tile_bytes: int
    row_vec_bytes: int
    visit_tx_bytes: int
    slices: int


class GeneratedBackward(msgspec.Struct, frozen=True):
    """A generated backward module: its CUDA text and the numbers the launcher needs.

    Attributes:
        source: the self-contained .cu text (three ``extern "C"`` kernels).
        layout: its :class:`BackwardLayout`.
        schedule_json: the schedule it was generated from (canonical JSON).
        target: ``"sm90a"``.
    """

    source: str
    layout: BackwardLayout
    schedule_json: str
    target: str = "sm90a"


_WHAT = {"k": "the item's K tile (BLOCK_N x D, K-major)", "v": "the item's V tile (BLOCK_N x D, K-major)",
         "q": "Q_STAGES Q tiles (BLOCK_M x D)", "do": "Q_STAGES dO tiles (BLOCK_M x D)",
         "ds": "two dS^T tiles (BLOCK_N keys x BLOCK_M rows, 128B swizzle), one per visit parity",
         "dq": "each consumer warpgroup's FP32 dQ of the visit (64 rows x DQ_COLS, fragment order), the source of "
               "its bulk reduce-add",
         "lse": "Q_STAGES x BLOCK_M lse_log2 (FP32)", "dpsum": "Q_STAGES x BLOCK_M dpsum (FP32)",
         "barriers": "mbarriers"}


def _plans(schedule) -> bool:
    """Whether ``schedule`` passes :func:`b200c.codegen.backward_plan.plan_backward` (its knobs and budgets)."""
    from ...errors import ResourceError, ScheduleError
    from ..backward_plan import plan_backward

    try:
        plan_backward(schedule)
    except (ResourceError, ScheduleError):
        return False
    return True


def supported(schedule) -> None:
    """Refuse a schedule whose kernel is not generated yet, naming the missing piece.

    Covered: head dims 64, 128 and 256 with ``block_m == 64``, or ``block_m == 64 * mma_warpgroups`` (dQ split
    by rows: FA3's 128 x 128 at head dim 64) where dK and dV split by keys; dK and dV split by keys with 64 keys
    per consumer warpgroup (``block_n == 64 * mma_warpgroups``), or by columns (``block_n == 64``, each
    warpgroup's ``head_dim / mma_warpgroups`` columns a multiple of 64: head dim 256 over two warpgroups);
    atomic or deterministic dQ reduction; one CTA per work item.

    Raises:
        BackwardNotSupportedError: another tile shape, or ``persistent=True``.
    """
    from ...errors import BackwardNotSupportedError
    from ..backward_plan import kv_split

    s = schedule
    why = None
    w = s.mma_warpgroups
    by_keys = kv_split(s.block_n, s.head_dim, w) == "keys"
    if s.block_m != 64 and not (by_keys and w > 1 and s.block_m == 64 * w):
        rows = (f", or {64 * w} with dK and dV split by keys: one 64-row slice of the dS^T tile per consumer "
                "warpgroup" if w > 1 else " with one consumer warpgroup")
        why = f"block_m = {s.block_m} (use 64{rows})"
    elif by_keys and s.block_n != 64 * w:
        why = (f"block_n = {s.block_n} with {w} consumer warpgroups (each owns 64 keys: use block_n = {64 * w})")
    elif not by_keys and (s.block_n != 64 or (s.head_dim // w) % 64):
        need = "use block_n = 64" + ("" if (s.head_dim // w) % 64 == 0 else
                                      f", and {s.head_dim // w} columns per warpgroup is not a multiple of 64")
        if w > 1 and _plans(s.replace(block_n=64 * w)):  # the other split: 64 keys per consumer warpgroup
            need += f"; or block_n = {64 * w}, dK and dV split by keys"
        why = (f"block_n = {s.block_n} at head dim {s.head_dim} with {w} consumer warpgroups (dK and dV split by "
               f"columns: {need})")
    elif s.persistent:
        why = "persistent=True (the persistent backward grid)"
    if why is not None:
        raise BackwardNotSupportedError(f"backward schedule {s.name!r}: the sm90a backward kernel does not support "
                                        f"{why} yet")


def backward_layout(schedule, target: str = "sm90a") -> BackwardLayout:
    """The layout of ``schedule``'s sm_90a backward module.

    Raises:
        ScheduleError, ResourceError: from :func:`b200c.codegen.backward_plan.plan_backward`.
        BackwardNotSupportedError: from :func:`supported`.
    """
    from ..backward_plan import dq_split, kv_split, plan_backward

    plan = plan_backward(schedule, target)
    s = schedule
    supported(s)
    sizes = dict(plan.smem)
    regions = tuple((name, off, sizes[name], _WHAT[name]) for name, off in plan.offsets)
    st = s.q_stages
    barriers = (("kv_full", 0, 1, 1, "the producer's arrive.expect_tx + TMA of K and V; waited by every consumer"),
                ("q_full", 1, st, 1, "the producer's arrive.expect_tx + TMA of Q, dO, LSE, D of a stage; waited by "
                                     "every consumer"),
                ("q_empty", 1 + st, st, 4 * s.mma_warpgroups,
                 "each consumer warp once its wgmmas reading the stage completed; waited by the producer"))
    split = dq_split(s.head_dim, s.mma_warpgroups, s.block_m, s.block_n)
    kv = kv_split(s.block_n, s.head_dim, s.mma_warpgroups)
    kv_cols = s.head_dim if kv == "keys" else s.head_dim // s.mma_warpgroups
    q_tile = s.block_m * s.head_dim * 2
    row_vec = s.block_m * 4
    return BackwardLayout(
        name=s.name, head_dim=s.head_dim, block_m=s.block_m, block_n=s.block_n, q_stages=st,
        mma_warpgroups=s.mma_warpgroups, wg_keys=64, kv_split=kv, wg_key_stride=64 if kv == "keys" else 0,
        kv_cols=kv_cols, kv_wg_col_bytes=0 if kv == "keys" else kv_cols // 64 * s.block_m * 128,
        kv_wg_col0=0 if kv == "keys" else kv_cols, ds_rows_by_warp=kv == "columns" and s.mma_warpgroups > 1,
        dk_before_dq=plan.dk_first, dv_after_ds=plan.dv_late,
        dq_split=split,
        dq_cols=s.head_dim // s.mma_warpgroups if split == "columns" else s.head_dim,
        dq_keys=s.block_n // s.mma_warpgroups if split == "keys" else s.block_n,
        dq_wg_key_bytes=s.block_n // s.mma_warpgroups * 128 if split == "keys" else 0,
        dq_wg_col_bytes=s.head_dim // s.mma_warpgroups // 64 * s.block_n * 128 if split == "columns" else 0,
        dq_wg_col0=s.head_dim // s.mma_warpgroups if split == "columns" else 0,
        dq_wg_row_bytes=s.block_n * 128 if split == "rows" else 0, ds_slice_bytes=s.block_n * 128,
        dq_wg_part=0 if split == "keys" else 1, dq_store=plan.dq_store,
        deterministic=s.dq_reduction == "deterministic", dq_turn_wait_by_wg=split == "keys",
        threads=plan.threads, consumer_threads=128 * s.mma_warpgroups,
        pre_threads=PRE_THREADS, consumer_regs=s.consumer_regs, producer_regs=s.producer_regs, regions=regions,
        barriers=barriers, num_barriers=1 + 2 * st, smem_bytes=plan.smem_bytes, q_tile_bytes=q_tile,
        kv_tile_bytes=s.block_n * s.head_dim * 2, ds_tile_bytes=s.block_n * s.block_m * 2, row_vec_bytes=row_vec,
        visit_tx_bytes=2 * q_tile + 2 * row_vec, slices=s.head_dim // 64)


def backward_kernel_ir(schedule, target: str = "sm90a"):
    """The main kernel's warp roles as IR (:mod:`b200c.codegen.sm90.backward_ir`), verified.

    Raises:
        ScheduleError, ResourceError, BackwardNotSupportedError: see :func:`backward_layout`.
        ProtocolError: the roles break their barrier protocol.
    """
    from ..verify import verify
    from .backward_ir import backward_ir

    ir = backward_ir(backward_layout(schedule, target), MAIN_KERNEL)
    verify(ir)
    return ir


def generate_backward(schedule, target: str = "sm90a") -> GeneratedBackward:
    """Generate the backward module of ``schedule`` for ``target`` (sm90a).

    Raises:
        ScheduleError, ResourceError, BackwardNotSupportedError: see :func:`backward_layout`.
    """
    from ...version import __version__

    from ..render import indent, render_block

    lay = backward_layout(schedule, target)
    ir = backward_kernel_ir(schedule, target)  # verified: the barrier protocol of the roles printed below
    env = environment(str(_HERE / "templates"), tuple(sorted(TEXT.items())))
    roles = {r.name: dict(body=indent(render_block(env, r.body)), blog=r.blog) for r in ir.roles}
    defaults = type(schedule)()
    lines = [f"{f} = {getattr(schedule, f)!r}" for f in schedule.__dataclass_fields__
             if f == "name" or getattr(schedule, f) != getattr(defaults, f)]
    text = env.get_template("backward.cu.j2").render(
        lay=lay, version=__version__, schedule_lines=lines or ["(all defaults)"], helpers=helper_header(),
        wgmma_wrappers=backward_wrappers(lay.block_m, lay.kv_cols, lay.dq_cols), main_params=MAIN_PARAMS,
        roles=roles, named=ir.plan.named_barriers,
        names=dict(main=MAIN_KERNEL, preprocess=PREPROCESS_KERNEL, postprocess=POSTPROCESS_KERNEL))
    return GeneratedBackward(text.rstrip() + "\n", lay, schedule.to_json(), target)


__all__ = ["BackwardLayout", "GeneratedBackward", "backward_layout", "backward_kernel_ir", "generate_backward", "supported",
           "MAIN_KERNEL", "PREPROCESS_KERNEL", "POSTPROCESS_KERNEL", "MAIN_PARAMS"]
