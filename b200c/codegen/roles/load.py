"""Role ``load`` (blog ch.4, 6, 14, minor 17): one warp, an elected lane
issues every TMA.

Q tiles once per work item (after ``q_free`` when persistent, ch.14); then
K/V tokens in consumption order, each into the ring's next slot after the
slot's previous token was released by its last consumer (``kv_empty``,
ch.6). Paired tokens load K(j) and V(j) into one slot. One elected lane runs
the role.
"""
from __future__ import annotations

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


def _token(lw, tensors, note):
    plan = lw.plan
    name = "load"
    tx = "2 * TILE_BYTES" if len(tensors) == 2 else "TILE_BYTES"
    loads = []
    for n, t in enumerate(tensors):
        dst = "SMEM_KV + slot * KV_SLOT_BYTES" + (" + TILE_BYTES" if n == 1 else "")
        loads.append(TmaLoadTile(t, dst, "w.kv_row0 + j * BLOCK_N", "kv_full", "slot", "w.h_kv",
                                 str(lw.plan.tile.block_n)))
    return Scope(note, (
        Wait("kv_empty", "slot", lw.phase("kv_empty_ph", "slot", plan.kv_stages), lw.site(name, "kv_empty"), "j"),
        Arrive("kv_full", "slot", by="thread", tx_bytes=tx),
        *loads,
        Assign("slot", "slot + 1 == KV_STAGES ? 0u : slot + 1"),  # the ring's next slot
    ))


def build(lw) -> RoleIR:
    """The ``load`` role's program (``lw``: the :class:`~b200c.codegen.lowering.Lowering`)."""
    plan = lw.plan
    name = "load"
    role = lw.role_spec("load")
    if plan.kv_tokens == "paired":
        tokens = (_token(lw, ("k", "v"), "K/V(j): K and V share one slot"),)
    else:
        tokens = (_token(lw, ("k",), "token K(j) (blog ch.6)"), _token(lw, ("v",), "token V(j)"))
    q_loads = tuple(TmaLoadTile("q", q_buf(q), f"w.q_row0 + q_tile_of(c, w, {q}) * BLOCK_M", "q_full", None,
                                f"q_head_of(c, w, {q})", str(plan.tile.block_m)) for q in range(plan.q_stages))
    item = []
    if plan.persistent:
        item.append(Comment("blog ch.14: reuse Q SMEM once the last QK of the previous work item has completed"))
        item.append(Wait("q_free", None, lw.phase("q_free_ph"), lw.site(name, "q_free"), "-1", fence_after=False))
    item += [
        Arrive("q_full", by="thread", tx_bytes=f"{plan.q_stages} * TILE_BYTES"),
        *q_loads,
        Loop("j", "0", "w.n_kv", tokens, "K/V tokens in consumption order"),
    ]
    body = [
        *setmaxnreg(lw, role.regs),
        Comment("blog ch.4: one load warp; ch.6: K/V ring of KV_STAGES slots"),
        PhaseDecl("kv_empty_ph", plan.kv_stages, 1, lw.storage(plan.kv_stages)),
    ]
    if plan.persistent:
        body.append(PhaseDecl("q_free_ph", 1, 1, "scalar"))
    body += [
        Comment("one elected lane runs the whole role (waits, expect_tx, TMA issue); the others wait at the end"),
        Single("elect", (Decl("uint32_t", "slot", "0"), WorkLoop(plan.persistent, tuple(item)))),
    ]
    return RoleIR(name, role.warps, tuple(body), regs=role.regs, blog="ch.4, ch.6 (ring), ch.14 (q_free), minor 17")
