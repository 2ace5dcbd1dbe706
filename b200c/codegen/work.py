"""The work decomposition every backend shares: how a problem is cut into work items, which K/V
tiles each item visits and which of them need a mask.

A *work item* is ``q_stages`` Q tiles (``block_m`` rows each) that share every K/V tile: consecutive
Q tiles of one (sequence, head) or, when the runtime packs heads (GQA with at least ``q_stages``
query heads per K/V head; :func:`b200c.runtime.launcher.pack_heads`), the same Q tile of
``q_stages`` query heads of one K/V group, so each K/V tile is loaded once for all of them
(FlashAttention-3/4's pack_gqa idea). Per item:

* sequence ``b``, first query head ``h``, K/V head ``h_kv = h / (H / H_kv)`` (GQA/MQA), first Q tile;
* row offsets of its sequence in packed varlen tensors (``cu_seqlens``) and the sequence's lengths;
* ``n_kv``: K/V tiles to visit (>= 1; causal, bottom-right aligned: up to the diagonal of the
  item's last row; a row that sees no key then gives O = 0, LSE = -inf);
* ``n_full``: how many of the first tiles every row of every Q stage sees whole (no mask); tiles
  ``n_full .. n_kv - 1`` are masked per row (:func:`col_limit`: the partial last tile, the causal
  diagonal);
* ``valid``: false for an item past a shorter varlen sequence's last Q tile (every role skips it).

Items are numbered ``(sequence, head or head group)``-major, Q group minor; with ``causal`` the Q
groups of each head run last-first, so the longest items (most K/V tiles) start first
(:attr:`WorkDecomposition.order` ``"longest_first_per_head"``). A persistent kernel hands items out
statically (CTA ``i`` takes ``i, i + grid, i + 2 grid, ...``); where its backend's plan asks for it
(:attr:`b200c.codegen.plan.Plan.serpentine`: the sm_90a backend's persistent plans), with ``causal``
the odd rounds of ``grid`` items run right to left (:attr:`WorkDecomposition.serpentine`), so a CTA
that took one of a round's longest items takes one of the next round's shortest: a static
longest-processing-time balance (FlashAttention-3's LPT scheduler has the same aim with a dynamic counter). K/V tiles per
CTA over the grid-stride loop (132 CTAs, h11's 2 x 64 x 176 tile; ``tests/test_work.py`` pins
these): the most loaded CTA visits 1.117x / 1.075x / 1.055x the mean at 8x16x4096 / 4x16x8192 /
2x16x16384 causal in per-head order alone, 1.034x / 1.033x / 1.031x with the serpentine rounds.

The same decomposition exists twice, and they must agree: the device code every backend's
kernel includes (``templates/work.cuh.j2``, rendered from this record: :func:`template_args`), and
the Python model here (:meth:`WorkDecomposition.num_work`, :meth:`WorkDecomposition.item`), which
the launcher uses for the grid and the tests use as the reference.
"""
from __future__ import annotations

from typing import Optional

import msgspec

ORDERS = ("longest_first_per_head",)


class WorkItem(msgspec.Struct, frozen=True):
    """One work item (the Python model of the device ``WorkItem``; fields as documented there)."""

    b: int
    h: int
    h_kv: int
    q_tile: int
    q_row0: int
    kv_row0: int
    len_q: int
    len_kv: int
    n_kv: int
    n_full: int
    valid: bool
    kv_lo: int = 0  # block mask: first visited tile and first full tile (else 0: tiles 0 .. n_kv - 1 in order)
    full_lo: int = 0


class WorkDecomposition(msgspec.Struct, frozen=True):
    """The work decomposition of one kernel (decided in Python from its plan).

    Attributes:
        block_m: Q rows per Q tile (one Q stage).
        block_n: K/V rows per tile.
        q_stages: Q tiles per work item.
        order: the order work items are numbered in (:data:`ORDERS`).
        serpentine: persistent kernels: with ``causal``, odd rounds of the grid-stride loop take
            their items right to left (:meth:`position`).
        block_sparse: a mask_mod's block mask gives each item's tiles (:meth:`item` with ``ranges``,
            :meth:`kv_tile`): ``(kv_lo, full_lo, full_hi, kv_hi)`` per item id
            (:meth:`item_id`); the full run is visited first, then the partial tiles.
    """

    block_m: int
    block_n: int
    q_stages: int
    order: str = "longest_first_per_head"
    serpentine: bool = False
    block_sparse: bool = False

    def position(self, work: int, num_work: int, grid: int, causal: bool) -> int:
        """The item number that grid-stride index ``work`` stands for (the device's remap at the top
        of ``decode_work``): the identity unless :attr:`serpentine` and ``causal``; then round
        ``r = work // grid`` runs right to left when ``r`` is odd (the last, partial round within
        its own length), a bijection of ``0 .. num_work - 1``."""
        if not (self.serpentine and causal):
            return work
        rnd, pos = divmod(work, grid)
        if rnd % 2 == 0:
            return work
        in_round = min(grid, num_work - rnd * grid)
        return rnd * grid + in_round - 1 - pos

    def item_id(self, work: int, seq_q: int, pack_heads: bool, causal: bool) -> int:
        """The block-mask row of item number ``work``: ``(sequence, head or head group)`` major, the
        item's actual Q group minor (causal's last-first numbering undone)."""
        groups = self.q_groups(seq_q, pack_heads)
        group, rest = work % groups, work // groups
        return rest * groups + (groups - 1 - group if causal else group)

    @staticmethod
    def kv_tile(kv_lo: int, full_lo: int, n_full: int, v: int) -> int:
        """The K/V tile of visit ``v`` of a block-sparse item: the full run first, then the partial
        tiles before it, then those after it (the device's ``kv_tile``)."""
        head = full_lo - kv_lo
        return full_lo + v if v < n_full else (kv_lo + v - n_full if v < n_full + head else kv_lo + v)

    def q_groups(self, seq_q: int, pack_heads: bool) -> int:
        """Work items per (sequence, head or head group): ``ceil(S_q / block_m)`` Q tiles, grouped by
        ``q_stages`` unless heads are packed."""
        q_tiles = -(-seq_q // self.block_m)
        return q_tiles if pack_heads else -(-q_tiles // self.q_stages)

    def num_work(self, batch: int, heads: int, seq_q: int, pack_heads: bool = False) -> int:
        """Work items of a problem (the kernel's ``num_work``); ``seq_q`` is the longest query
        sequence of a varlen call."""
        return batch * (heads // self.q_stages if pack_heads else heads) * self.q_groups(seq_q, pack_heads)

    def item(self, work: int, *, batch: int, heads: int, heads_kv: int, seq_q, seq_kv, causal: bool = False,
             pack_heads: bool = False, cu_seqlens_q: Optional[list] = None,
             cu_seqlens_k: Optional[list] = None, grid: Optional[int] = None, ranges=None) -> WorkItem:
        """Work item ``work`` (0 <= work < :meth:`num_work`), as the device's ``decode_work`` gives it.
        ``seq_q``/``seq_kv``: the lengths (varlen: the longest, with the prefix sums given); ``grid``:
        the persistent kernel's CTAs (``work`` is then the grid-stride index, remapped by
        :meth:`position`); None: ``work`` is the item number. ``ranges``: a block mask's rows
        ``(kv_lo, full_lo, full_hi, kv_hi)`` by :meth:`item_id` (block-sparse kernels)."""
        if grid is not None:
            work = self.position(work, self.num_work(batch, heads, seq_q, pack_heads), grid, causal)
        groups = self.q_groups(seq_q, pack_heads)
        group, rest = work % groups, work // groups
        if causal:
            group = groups - 1 - group
        if pack_heads:
            head_groups = heads // self.q_stages
            b, h, q_tile = rest // head_groups, (rest % head_groups) * self.q_stages, group
        else:
            b, h, q_tile = rest // heads, rest % heads, group * self.q_stages
        h_kv = h // (heads // heads_kv)
        if cu_seqlens_q is not None:
            q_row0, kv_row0 = cu_seqlens_q[b], cu_seqlens_k[b]
            len_q, len_kv = cu_seqlens_q[b + 1] - q_row0, cu_seqlens_k[b + 1] - kv_row0
        else:
            q_row0 = kv_row0 = 0
            len_q, len_kv = seq_q, seq_kv
        valid = q_tile * self.block_m < len_q
        n = -(-len_kv // self.block_n)
        if causal:
            rows = (1 if pack_heads else self.q_stages) * self.block_m
            last_row = min(q_tile * self.block_m + rows, len_q) - 1
            last_key = last_row + len_kv - len_q
            n = min(n, 0 if last_key < 0 else last_key // self.block_n + 1)
        n_kv = max(n, 1)
        full = len_kv // self.block_n
        if causal:
            keys_of_first_row = q_tile * self.block_m + len_kv - len_q + 1
            full = min(full, 0 if keys_of_first_row < 0 else keys_of_first_row // self.block_n)
        if ranges is not None:
            kv_lo, full_lo, full_hi, kv_hi = (int(x) for x in ranges[rest * groups + group])
            return WorkItem(b, h, h_kv, q_tile, q_row0, kv_row0, len_q, len_kv, kv_hi - kv_lo, full_hi - full_lo,
                            valid, kv_lo, full_lo)
        return WorkItem(b, h, h_kv, q_tile, q_row0, kv_row0, len_q, len_kv, n_kv, min(full, n_kv), valid)

    def col_limit(self, item: WorkItem, row_in_seq: int, j: int, causal: bool = False) -> int:
        """Columns of K/V tile ``j`` that query row ``row_in_seq`` of ``item``'s sequence sees
        (>= block_n: all of them; <= 0: none), as the device's ``col_limit``."""
        lim = item.len_kv - j * self.block_n
        if causal:
            lim = min(lim, row_in_seq + item.len_kv - item.len_q + 1 - j * self.block_n)
        return lim


def decomposition(plan) -> WorkDecomposition:
    """The work decomposition of a plan (every backend: the plan's tile and Q stages; the serpentine
    rounds where the backend's plan asks for them, :attr:`b200c.codegen.plan.Plan.serpentine`)."""
    from .mod_kernel import block_sparse

    return WorkDecomposition(plan.tile.block_m, plan.tile.block_n, plan.q_stages, serpentine=plan.serpentine,
                             block_sparse=block_sparse(getattr(plan, "mods", None)))


def template_args(d: WorkDecomposition) -> dict:
    """What ``templates/work.cuh.j2`` prints from (``work=`` in the kernel template)."""
    return {"order": d.order, "serpentine": d.serpentine, "block_sparse": d.block_sparse}


__all__ = ["WorkItem", "WorkDecomposition", "ORDERS", "decomposition", "template_args"]
