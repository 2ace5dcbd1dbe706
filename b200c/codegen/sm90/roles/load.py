"""The sm_90a producer: role ``load`` (blog ch.4, 6, 14, minor 17), one warp,
an elected lane issues every TMA.

The sm_90a kernel keeps the dense-input context it was built with (``c.n_kv``,
one (b, h, q_tile) work item, the TMA store of O with partial-tile masking),
so its producer is this file; the tcgen05 producer (b200c/codegen/roles/load.py)
follows the real-inputs context (varlen rows, GQA heads, ``w.n_kv``) and runs
on one elected lane with a running slot counter.

Q tiles once per work item (after ``q_free`` when persistent, ch.14); then
K/V tokens in consumption order, each into ring slot ``token % KV_STAGES``
after the slot's previous token was released by its last consumer
(``kv_empty``, ch.6). Paired tokens load K(j) and V(j) into one slot.

The sm_90a plan has one ``q_full``/``q_free`` per Q
stage (each consumer warpgroup starts on its own rows, FA3) and K/V tiles of
``block_n`` rows (``KV_TILE_BYTES``). When the issue order uses K(j+1) before
V(j) (sm_90a's intra-warpgroup overlap, FA3 §3.2), the tokens are loaded in
that order, so ring slots are taken in the order the consumers use them.
"""
from __future__ import annotations

from ...roles.load import q_buf, setmaxnreg
from ...ir import Arrive, Assign, Comment, Decl, Loop, PhaseDecl, RoleIR, Scope, Single, Wait
from ..ir import DenseWorkLoop, tma_tile


def _token(lw, tensors, note, tile="j"):
    plan = lw.plan
    name = "load"
    one = "TILE_BYTES" if plan.tile.k_tile_bytes == plan.tile.q_tile_bytes else "KV_TILE_BYTES"
    tx = f"2 * {one}" if len(tensors) == 2 else one
    row = f"{tile} * BLOCK_N" if tile.isidentifier() or tile.isdigit() else f"({tile}) * BLOCK_N"
    loads = []
    for n, t in enumerate(tensors):
        dst = "SMEM_KV + slot * KV_SLOT_BYTES" + (f" + {one}" if n == 1 else "")
        loads.append(tma_tile(t, dst, row, "kv_full", "slot"))
    wait = Wait("kv_empty", "slot", lw.phase("kv_empty_ph", "slot", plan.kv_stages), lw.site(name, "kv_empty"), tile)
    return Scope(note, (
        Decl("const uint32_t", "slot", "kv_token % KV_STAGES"),
        *lw.span("wait kv_empty", (wait,)),
        Single("elect", (Arrive("kv_full", "slot", by="thread", tx_bytes=tx), *loads)),
        Assign("kv_token", "kv_token + 1"),
    ))


def _k_ahead(plan) -> bool:
    """Whether the first use of K(j+1) comes before that of V(j) (separate tokens)."""
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
        Loop("i", "0", "c.n_kv - 1", tuple(tok(k, at(off)) for k, off in steady),
             f"K/V tokens in the consumers' order of use: {order}"),
        *(tok(k, "c.n_kv - 1") for k, _ in epi),
    )


def _q_loads_per_stage(lw, name) -> list:
    plan = lw.plan
    out = []
    for q in range(plan.q_stages):
        row = f"(w.q_tile + {q}) * BLOCK_M" if q else "w.q_tile * BLOCK_M"
        load_q = (Single("elect", (Arrive("q_full", str(q), by="thread", tx_bytes="TILE_BYTES"),
                                   tma_tile("q", q_buf(q), row, "q_full", str(q)))),)
        if plan.persistent:
            wait = Wait("q_free", str(q), lw.phase("q_free_ph", str(q), plan.q_stages, True),
                        lw.site(name, "q_free"), "-1")
            load_q = (*lw.span("wait q_free", (wait,)), *load_q)
        note = f"Q rows of consumer {q}" + (", once its last QK of the previous work item completed"
                                              if plan.persistent else "")
        out.append(Scope(note, load_q))
    return out


def build(lw, own_setmaxnreg: bool = True) -> RoleIR:
    """The ``load`` role's program (``lw``: the :class:`~b200c.codegen.lowering.Lowering`).

    ``own_setmaxnreg``: the role sets its warpgroup's register budget itself
    (tcgen05); the sm_90a entry sets every warpgroup's budget instead."""
    plan = lw.plan
    name = "load"
    role = lw.role_spec("load")
    per_stage_q = plan.barrier("q_full").count > 1
    tokens = None
    if not _k_ahead(plan):  # built first: wait-site ids as before the sm_90a additions
        if plan.kv_tokens == "paired":
            tokens = (_token(lw, ("k", "v"), "K/V(j): K and V share one slot"),)
        else:
            tokens = (_token(lw, ("k",), "token K(j) (blog ch.6)"), _token(lw, ("v",), "token V(j)"))
    item = []
    if per_stage_q:
        item += _q_loads_per_stage(lw, name)
    else:
        q_loads = tuple(tma_tile("q", q_buf(q), f"(w.q_tile + {q}) * BLOCK_M" if q else "w.q_tile * BLOCK_M",
                                    "q_full") for q in range(plan.q_stages))
        if plan.persistent:
            item.append(Comment("blog ch.14: reuse Q SMEM once the last QK of the previous work item has completed"))
            item.append(Wait("q_free", None, lw.phase("q_free_ph"), lw.site(name, "q_free"), "-1", fence_after=False))
        item.append(Single("elect", (Arrive("q_full", by="thread", tx_bytes=f"{plan.q_stages} * TILE_BYTES"),
                                     *q_loads)))
    if tokens is None:
        item += _tokens_k_ahead(lw)
    else:
        item.append(Loop("j", "0", "c.n_kv", tokens, "K/V tokens in consumption order"))
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
    body += [Decl("uint32_t", "kv_token", "0"), DenseWorkLoop(plan.persistent, tuple(item))]
    return RoleIR(name, role.warps, tuple(body), regs=role.regs, blog="ch.4, ch.6 (ring), ch.14 (q_free), minor 17")
