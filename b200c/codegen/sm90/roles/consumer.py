"""Role ``consumer`` (FlashAttention-3 §3): one warpgroup per Q stage, 64 Q
rows; it issues its own wgmmas and runs the online softmax in registers.

Per work item: wait for its Q rows, then the K/V tiles in the issue order's
shape, then the epilogue. On sm_90a only the order of one Q stage's two
steps matters (each warpgroup issues its own wgmmas); three orders are legal:

* ``Q0K(i) P0V(i)`` (no lead; the default): QK(j), wait, softmax(j), PV(j), wait.
* ``Q0K(i+1) P0V(i)`` (FA3 §3.2 intra-warpgroup overlap): iteration i issues
  QK(i+1), rescales O while it runs, issues PV(i), waits for QK(i+1) only
  (``wgmma.wait_group 1``) and runs softmax(i+1) while PV(i) is in flight.
* ``P0V(i) Q0K(i+1)``: PV(i) then QK(i+1) back to back on the tensor core,
  one wait for both, then softmax(i+1) (no softmax/GEMM overlap in the warpgroup).

With ``pingpong`` (FA3 §3.1) each batch of GEMM issues between two waits is a
turn: consumer q waits on named barrier turn[q] before it and arrives on
turn[1-q] after it; consumer 1 gives consumer 0 the first turn. Every
consumer takes the same number of turns per work item (2n without a lead,
n+1 with one), so the alternation carries across persistent work items.

K/V tokens are taken from the ring (slot, parity) in their order of first
use, which is the load warp's order; each consumer warp releases a token
(``kv_empty``) once the wait that proves its wgmma completed returned. With
``persistent`` the last QK of a work item releases the Q rows (``q_free``).
"""
from __future__ import annotations

from ...ir import (Arrive, Comment, Decl, If, Loop, NamedBarArrive, NamedBarSync, PhaseDecl, PhaseRef, RingAdvance,
                   RoleIR, Scope, Wait, WorkLoop)
from ..ir import ConsumerInit, PackP, RescaleO, StoreO, WgmmaPV, WgmmaQK, WgmmaWait
from ...work import decomposition
from ..softmax import item_row_bias, row_bias_per_item, softmax_node

KV_BUF = "SMEM_KV + {slot} * KV_SLOT_BYTES"  # SMEM offset of a ring slot
Q_BUF = "SMEM_Q + q * TILE_BYTES"  # this consumer's Q rows (``q``: the role's Q stage)


class _Builder:
    """Node helpers of one consumer lowering (``lw``: the Lowering)."""

    def __init__(self, lw):
        self.lw = lw
        self.pingpong = bool(lw.plan.named_barriers) and lw.s.pingpong
        self.persistent = lw.plan.persistent
        # at head dim 256 the O accumulator takes 128 of the consumer's 240 registers; with a block mask's
        # visit order and a mask_mod the consumer index q, kept live for the turn barriers, was the register
        # nvcc spilled (20 B at hopper_mods_d256, nvcc 13.0); these kernels re-read it from %tid.x at each turn
        self.turn_q = "consumer_index()" if decomposition(lw.plan).block_sparse and lw.plan.tile.head_dim >= 256 \
            else None
        # with a block mask the work item's sequence and head, kept live through the K/V loop for the
        # epilogue's stores, were what nvcc 13.5.37 spilled (8-16 B in hopper_mods_d128 with softcap +
        # document and in the document split builds at 128 and 256); the store decodes the item again
        self.redecode_store = decomposition(lw.plan).block_sparse

    def take(self, kind: str) -> tuple:
        """Take the next ring token (a ``K`` or ``V`` tile): its slot and parity."""
        v = kind.lower()
        return (Decl("const uint32_t", f"{v}_slot", "kv_slot"), Decl("const uint32_t", f"{v}_ph", "kv_phase"),
                RingAdvance("kv_slot", "kv_phase", "KV_STAGES"))

    def wait_full(self, kind: str, tile: str) -> tuple:
        """Wait until the taken token (``K`` or ``V`` of tile ``tile``) landed in its slot."""
        v = kind.lower()
        w = Wait("kv_full", f"{v}_slot", PhaseRef(f"{v}_ph", None, "value"),
                 self.lw.site("consumer", f"kv_full ({kind})"), tile)
        return self.lw.span(f"wait {kind}", (w,))

    def release(self, kind: str) -> tuple:
        """Each warp of the consumer releases the token's slot (after the wait that proved its wgmma done)."""
        return (Arrive("kv_empty", f"{kind.lower()}_slot", by="warp"),)

    def turn(self, nodes) -> tuple:
        """A batch of GEMM issues; with ping-pong, the warpgroup's turn."""
        nodes = tuple(nodes)
        if not self.pingpong:
            return self.lw.span("issue", nodes)
        q = self.turn_q
        return (*self.lw.span("wait turn", (NamedBarSync("turn", "q", "FA3 §3.1: my turn to issue GEMMs", q),)),
                *self.lw.span("issue", nodes),
                NamedBarArrive("turn", "1 - q", "pass the turn to the other consumer", q and f"1 - {q}"))

    def qk(self) -> WgmmaQK:
        """S = Q K^T on the taken K slot."""
        return WgmmaQK("q_smem", "c.smem + " + KV_BUF.format(slot="k_slot"))

    def pv(self) -> WgmmaPV:
        """O += P V on the taken V slot."""
        return WgmmaPV(KV_BUF.format(slot="v_slot"))

    def wait(self, pending: int, regs: str, note: str) -> tuple:
        """``wgmma.wait_group pending`` and the fence of the registers it completes."""
        return self.lw.span(f"wait {'QK' if regs == 's' else 'PV' if regs == 'o' else 'QK+PV'}",
                            (WgmmaWait(pending, regs, note),))

    def release_q(self, cond: str) -> tuple:
        """Persistent: the last QK of the work item completed; the Q rows are free."""
        if not self.persistent:
            return ()
        return (If(cond, (Arrive("q_free", "q", by="warp"),)),)

    def softmax(self, tile: str, masked=None) -> tuple:
        """Softmax of S(tile), masked per row on the tiles some row does not see whole (``masked``:
        known to be (not) such a tile; None: decided at run time)."""
        return self.lw.span("softmax", (softmax_node(self.lw.plan, tile, masked),))


def _qk_first_tile(b: _Builder) -> tuple:
    """Prologue of the leading orders: QK(0) alone, softmax(0), P(0)."""
    return (Scope("prologue: QK(0), softmax(0)", (
        *b.take("K"), *b.wait_full("K", "0"),
        *b.turn((b.qk(),)),
        *b.wait(0, "s", "S(0) ready"),
        *b.release("K"), *b.release_q("w.n_kv == 1"),
        *b.softmax("0"), PackP(),
    )),)


def _pv_last_tile(b: _Builder) -> tuple:
    """Epilogue of the leading orders: PV(n-1)."""
    return (Scope("epilogue: PV(n-1)", (
        *b.take("V"), *b.wait_full("V", "w.n_kv - 1"),
        RescaleO(),
        *b.turn((b.pv(),)),
        *b.wait(0, "o", "O final"),
        *b.release("V"),
    )),)


def _no_lead(b: _Builder) -> tuple:
    """``Q0K(i) P0V(i)``: QK(j), wait, softmax(j), PV(j), wait."""
    def body(masked):
        return (
            *b.take("K"), *b.take("V"), *b.wait_full("K", "j"),
            *b.turn((b.qk(),)),
            *b.wait(0, "s", "S(j) ready"),
            *b.release("K"), *b.release_q("j == w.n_kv - 1"),
            *b.softmax("j", masked), PackP(),
            RescaleO(),
            *b.wait_full("V", "j"),
            *b.turn((b.pv(),)),
            *b.wait(0, "o", "PV(j) done: P and V(j) free"),
            *b.release("V"),
        )
    return (Loop("j", "0", "w.n_full", body(False), "Q0K(i) P0V(i): QK, softmax, PV of each K/V tile every row "
                                                      "sees whole"),
            Loop("j", "w.n_full", "w.n_kv", body(True), "the masked tiles: the partial last one, the causal diagonal"))


# the steady-state loop takes softmax(i + 1) of whole tiles (i + 1 < n_full), the second one masked tiles
_STEADY_END = "w.n_full - 1"
_MASKED_START = "w.n_full > 0 ? w.n_full - 1 : 0"


def _qk_ahead(b: _Builder) -> tuple:
    """``Q0K(i+1) P0V(i)``: FA3's intra-warpgroup overlap (module docstring)."""
    def body(masked):
        return (
            *b.take("K"), *b.take("V"), *b.wait_full("K", "i + 1"),
            *b.turn((b.qk(), Comment("O *= factor of softmax(i) while QK(i+1) runs"), RescaleO(),
                     *b.wait_full("V", "i"), b.pv())),
            *b.wait(1, "s", "QK(i+1) done; PV(i) may still run"),
            *b.release("K"), *b.release_q("i + 1 == w.n_kv - 1"),
            Comment("FA3 §3.2: softmax(i+1) overlaps PV(i) on the tensor core"),
            *b.softmax("i + 1", masked),
            *b.wait(0, "o", "PV(i) done: P and V(i) free"),
            *b.release("V"),
            PackP(),
        )
    return (*_qk_first_tile(b),
            Loop("i", "0", _STEADY_END, body(False), "Q0K(i+1) P0V(i): QK of the next tile before PV of this one"),
            Loop("i", _MASKED_START, "w.n_kv - 1", body(True), "the same for the masked tiles i + 1 (the partial last "
                                                                 "one, the causal diagonal)"),
            *_pv_last_tile(b))


def _pv_first(b: _Builder) -> tuple:
    """``P0V(i) Q0K(i+1)``: PV(i) and QK(i+1) back to back, one wait."""
    def body(masked):
        return (
            *b.take("V"), *b.take("K"),
            RescaleO(),
            *b.wait_full("V", "i"), *b.wait_full("K", "i + 1"),
            *b.turn((b.pv(), b.qk())),
            *b.wait(0, "so", "PV(i) and QK(i+1) done"),
            *b.release("V"), *b.release("K"), *b.release_q("i + 1 == w.n_kv - 1"),
            *b.softmax("i + 1", masked), PackP(),
        )
    return (*_qk_first_tile(b),
            Loop("i", "0", _STEADY_END, body(False), "P0V(i) Q0K(i+1): PV and the next QK back to back"),
            Loop("i", _MASKED_START, "w.n_kv - 1", body(True), "the same for the masked tiles i + 1"),
            *_pv_last_tile(b))


def row_in_seq(q: str) -> Decl:
    """This thread's first row of the Q stage in its sequence (the second is 8 rows below: the wgmma
    D fragment, PTX 9.7.15.5.1.1.1), for the masked tiles' column limits."""
    return Decl("const int", "row_in_seq",
                f"q_tile_of(c, w, {q}) * BLOCK_M + 16 * (int)((threadIdx.x >> 5) & 3u) + (int)(lane_id() >> 2)",
                model="0")


def row_bias(q: str) -> Decl:
    """The score_mod's split bias for this thread's rows of the work item (``row_bias_item``: the per-key
    slope and the value at the key where the bias crosses zero), evaluated once before the K/V loop;
    each whole tile then offsets it by its distance from there
    (:func:`b200c.codegen.sm90.softmax.apply_score_bias_lines`)."""
    return Decl("const RowBias", "rbias", item_row_bias(f"q_head_of(c, w, {q})"))


def shape_of(order) -> str:
    """``"none"``, ``"qk_first"`` or ``"pv_first"``: the per-stage order's shape."""
    steps = order.stage_steps(0)
    if not order.lead:
        return "none"
    return "qk_first" if steps[0].kind == "QK" else "pv_first"


def build(lw) -> RoleIR:
    """The ``consumer`` role's program: one copy for every Q stage (``q`` is a
    run-time argument, warp-uniform)."""
    b = _Builder(lw)
    roles = lw.plan.role_specs("consumer")
    shape = shape_of(lw.plan.issue)
    tiles = {"none": _no_lead, "qk_first": _qk_ahead, "pv_first": _pv_first}[shape](b)
    item = (
        ConsumerInit(),
        row_in_seq("q"),
        *((row_bias("q"),) if row_bias_per_item(lw.plan) else ()),
        *lw.span("wait Q", (Wait("q_full", "q", lw.phase("q_full_ph"), lw.site("consumer", "q_full"), "-1"),)),
        *tiles,
        *lw.span("epilogue", (StoreO("q", redecode=b.redecode_store),)),
    )
    body = [
        Comment(f"FA3 §3: consumer warpgroup q owns Q rows [64 q, 64 q + 64) of the work item; issue order "
                f"{' '.join(st.symbolic for st in lw.plan.issue.stage_steps(0))}"),
        PhaseDecl("q_full_ph", 1, 0, "scalar"),
        Decl("const uint32_t", "q_smem", f"c.smem + {Q_BUF}"),  # this consumer's Q rows, loop-invariant
        Decl("uint32_t", "kv_slot", "0"),
        Decl("uint32_t", "kv_phase", "0"),
    ]
    if b.pingpong:
        body.append(If("q == 1", (NamedBarArrive("turn", "0", "consumer 0 takes the first turn"),)))
    body.append(WorkLoop(lw.plan.persistent, item))
    return RoleIR("consumer", roles[0].warps, tuple(body), instances=tuple((r.q_stage, r.warps) for r in roles),
                  regs=roles[0].regs, blog="FA3 §3.1 (ping-pong), §3.2 (overlap); blog ch.8, 9, 11")
