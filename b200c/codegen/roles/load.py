"""Role ``load`` of every backend (blog ch.4, 6, 14, minor 17; FlashAttention-3's producer warp):
one warp, an elected lane issues every TMA, following the shared work decomposition
(b200c/codegen/work.py: each item's Q tiles and heads, its K/V head and tile range, varlen row
offsets).

Per work item: the Q tiles (after ``q_free`` when persistent, ch.14), then the K/V tokens in the
order the consumers use them, each into the ring's next slot once its previous token was released
by its last consumer (``kv_empty``, ch.6). Paired tokens load K(j) and V(j) into one slot. What
differs between backends is read from the plan, not from a backend name:

* one ``q_full`` for all Q stages (tcgen05: the MMA warp issues every Q stage's MMAs) or one per Q
  stage (sm90: each consumer warpgroup starts on its own rows, FA3), with ``q_free`` alike;
* K/V tiles of ``block_n`` rows (``KV_TILE_BYTES`` when they differ from a Q tile's bytes);
* the token order: when the issue order uses K(j+1) before V(j) (sm90's intra-warpgroup overlap,
  FA3 §3.2), K(0) | K(i+1) V(i) | V(n-1), so ring slots are taken in the order of use;
* TMA boxes of one size (tcgen05) or of block_m rows for Q and block_n rows for K/V (sm90).
"""
from __future__ import annotations

from ..mod_kernel import kv_col0, kv_row

from ..ir import (Arrive, Assign, Comment, Decl, Loop, PhaseDecl, RoleIR, Scope, SetMaxNReg, Single,
                  TmaLoadTile, Wait, WorkLoop)


def setmaxnreg(lw, regs) -> tuple:
    """setmaxnreg for a role's warpgroup, inc or dec against the entry count
    (nothing when no budget is set or it equals the entry count)."""
    if regs is None:
        return ()
    entry = lw.plan.limits.entry_registers(lw.plan.threads)
    if regs == entry:
        return ()
    return (SetMaxNReg(regs, inc=regs > entry),)


def q_buf(q: int) -> str:
    """SMEM offset expression of Q stage q's tile."""
    return "SMEM_Q" if q == 0 else f"SMEM_Q + {q} * TILE_BYTES"


def tile_load(lw, tensor: str, dst: str, row: str, barrier: str, index, head: str, tile: str = "j") -> TmaLoadTile:
    """A TMA tile load with the plan's box constants (Q boxes of block_m rows; K/V of block_n). A split-KV
    build's K/V loads may read a paged KV cache (``tile``: the K/V tile's visit, for its first key)."""
    plan = lw.plan
    q = tensor == "q"
    rows = plan.tile.block_m if q else plan.tile.block_n
    split = plan.tma_kv is not None  # Q and K/V boxes differ (sm90: 64 and block_n rows)
    slice_bytes = ("TMA_Q_SLICE_BYTES" if q else "TMA_KV_SLICE_BYTES") if split else "TMA_SLICE_BYTES"
    rows_text = ("BLOCK_M" if q else "BLOCK_N") if split else str(rows)
    paged = not q and plan.split_kv
    return TmaLoadTile(tensor, dst, row, barrier, index, head, rows_text, slice_bytes=slice_bytes, paged=paged,
                       first_key=kv_col0(plan, tile) if paged else "")


def _kv_tile_bytes(plan) -> str:
    return "TILE_BYTES" if plan.tile.k_tile_bytes == plan.tile.q_tile_bytes else "KV_TILE_BYTES"


def _token(lw, tensors, note, tile: str = "j"):
    plan = lw.plan
    name = "load"
    one = _kv_tile_bytes(plan)
    tx = f"2 * {one}" if len(tensors) == 2 else one
    loads = []
    for n, t in enumerate(tensors):
        dst = "SMEM_KV + slot * KV_SLOT_BYTES" + (f" + {one}" if n == 1 else "")
        loads.append(tile_load(lw, t, dst, kv_row(plan, tile), "kv_full", "slot", "w.h_kv", tile))
    return Scope(note, (
        *lw.span("wait kv_empty", (Wait("kv_empty", "slot", lw.phase("kv_empty_ph", "slot", plan.kv_stages),
                                        lw.site(name, "kv_empty"), tile),)),
        Arrive("kv_full", "slot", by="thread", tx_bytes=tx),
        *loads,
        Assign("slot", "slot + 1 == KV_STAGES ? 0u : slot + 1"),  # the ring's next slot
    ))


def k_ahead(plan) -> bool:
    """Whether the consumers use K(j+1) before V(j) (separate tokens, a leading issue order whose
    steady state loads K first: sm90's intra-warpgroup overlap)."""
    if plan.issue is None or plan.kv_tokens != "separate" or not plan.issue.lead:
        return False
    _, steady, _ = plan.issue.load_sequence()
    return [k for k, _ in steady] == ["K", "V"]


def _tokens_k_ahead(lw) -> tuple:
    """K(0) | K(i+1) V(i) for i < n-1 | V(n-1)."""
    pro, steady, epi = lw.plan.issue.load_sequence()

    def at(off):
        return "i" if off == 0 else f"i + {off}"

    def tok(kind, tile):
        return _token(lw, (kind.lower(),), f"token {kind}({tile})", tile)

    order = " ".join(f"{k}({at(off).replace(' ', '')})" for k, off in steady)
    return (
        *(tok(k, "0") for k, _ in pro),
        Loop("i", "0", "w.n_kv - 1", tuple(tok(k, at(off)) for k, off in steady),
             f"K/V tokens in the consumers' order of use: {order}"),
        *(tok(k, "w.n_kv - 1") for k, _ in epi),
    )


def _q_loads_per_stage(lw, name) -> list:
    """Each Q stage's rows on its own barriers (q_full[q], q_free[q])."""
    plan = lw.plan
    out = []
    for q in range(plan.q_stages):
        load_q = (Arrive("q_full", str(q), by="thread", tx_bytes="TILE_BYTES"),
                  tile_load(lw, "q", q_buf(q), f"w.q_row0 + q_tile_of(c, w, {q}) * BLOCK_M", "q_full", str(q),
                        f"q_head_of(c, w, {q})"))
        if plan.persistent:
            wait = Wait("q_free", str(q), lw.phase("q_free_ph", str(q), plan.q_stages, True),
                        lw.site(name, "q_free"), "-1")
            load_q = (*lw.span("wait q_free", (wait,)), *load_q)
        note = f"Q rows of Q stage {q}" + (", once its last QK of the previous work item completed"
                                             if plan.persistent else "")
        out.append(Scope(note, load_q))
    return out


def build(lw, own_setmaxnreg: bool = True) -> RoleIR:
    """The ``load`` role's program (``lw``: the :class:`~b200c.codegen.lowering.Lowering`).

    ``own_setmaxnreg``: the role sets its warpgroup's register budget itself (tcgen05); the sm_90a
    entry sets every warpgroup's budget instead."""
    plan = lw.plan
    name = "load"
    role = lw.role_spec("load")
    per_stage_q = plan.barrier("q_full").count > 1
    tokens = None
    if not k_ahead(plan):  # built first: the wait-site ids of the K/V ring come first
        if plan.kv_tokens == "paired":
            tokens = (_token(lw, ("k", "v"), "K/V(j): K and V share one slot"),)
        else:
            tokens = (_token(lw, ("k",), "token K(j) (blog ch.6)"), _token(lw, ("v",), "token V(j)"))
    item = []
    if per_stage_q:
        item += _q_loads_per_stage(lw, name)
    else:
        q_loads = tuple(tile_load(lw, "q", q_buf(q), f"w.q_row0 + q_tile_of(c, w, {q}) * BLOCK_M", "q_full", None,
                              f"q_head_of(c, w, {q})") for q in range(plan.q_stages))
        if plan.persistent:
            item.append(Comment("blog ch.14: reuse Q SMEM once the last QK of the previous work item has completed"))
            item.append(Wait("q_free", None, lw.phase("q_free_ph"), lw.site(name, "q_free"), "-1", fence_after=False))
        item += [Arrive("q_full", by="thread", tx_bytes=f"{plan.q_stages} * TILE_BYTES"), *q_loads]
    if tokens is None:
        item += _tokens_k_ahead(lw)
    else:
        item.append(Loop("j", "0", "w.n_kv", tokens, "K/V tokens in consumption order"))
    body = [
        *(setmaxnreg(lw, role.regs) if own_setmaxnreg else ()),
        Comment("blog ch.4: one load warp; ch.6: K/V ring of KV_STAGES slots"),
        PhaseDecl("kv_empty_ph", plan.kv_stages, 1, lw.storage(plan.kv_stages)),
    ]
    if plan.persistent:
        if per_stage_q:
            body.append(PhaseDecl("q_free_ph", plan.q_stages, 1, lw.storage(plan.q_stages, True)))
        else:
            body.append(PhaseDecl("q_free_ph", 1, 1, "scalar"))
    body += [
        Comment("one elected lane runs the whole role (waits, expect_tx, TMA issue); the others wait at the end"),
        Single("elect", (Decl("uint32_t", "slot", "0"), WorkLoop(plan.persistent, tuple(item)))),
    ]
    return RoleIR(name, role.warps, tuple(body), regs=role.regs, blog="ch.4, ch.6 (ring), ch.14 (q_free), minor 17")
