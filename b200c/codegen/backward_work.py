"""The backward pass's work decomposition, shared by every backend: K/V-stationary work items.

FlashAttention's backward (FA2 Algorithm 2, FA3 and FA4 alike) keeps one K/V tile in the CTA and walks
the query rows that see it: each step recomputes ``S = Q K^T`` and ``P = exp(S scale - LSE)`` from the
forward's saved LSE, accumulates ``dV += P^T dO`` and ``dK += dS^T Q scale`` on chip
(``dS = P (dO V^T - D)``, ``D = rowsum(dO O)`` from a small preprocess), and adds ``dQ += dS K scale``
into an FP32 buffer shared with the other K/V tiles' CTAs (atomics, or a fixed order for a
deterministic mode). A *backward work item* here is one K/V tile (``block_n`` keys) of one
(sequence, K/V head). It walks every query head of the K/V head's GQA group (``H / H_kv`` heads), so
dK and dV are summed over the group on chip and need no reduction afterwards, and per head the Q tiles
(``block_m`` rows) that see the tile:

* ``q_lo``: the first Q tile with a row that sees a key of the tile (causal, bottom-right aligned as
  in the forward: query row ``r`` sees keys ``<= r + len_kv - len_q``; 0 otherwise), ``n_q`` the Q
  tiles of the sequence: visits ``q_lo .. n_q - 1`` (none when ``q_lo >= n_q``: dK = dV = 0);
* ``q_full_lo``: the first Q tile whose every row sees every key of the tile (causal: past the
  diagonal); visits before it are masked per row (:meth:`BackwardDecomposition.col_limit`), and every
  visit of the partial last K/V tile (``partial``) is masked at its columns.

Items are numbered (sequence, K/V head)-major, K/V tile minor: with ``causal`` the first K/V tiles
have the most Q tiles to visit, so the longest items start first, as the forward's
``longest_first_per_head`` order.

The decomposition visits exactly the forward's tiles: Q tile ``i`` of head ``h`` meets K/V tile ``j``
in the backward if and only if the forward's item for that Q tile visits ``j``, and the pair is masked
in one if and only if it is masked in the other (``tests/test_backward_work.py`` checks it against
:class:`b200c.codegen.work.WorkDecomposition` over causal / non-causal, S_q != S_kv, GQA, partial
tiles and varlen). The deterministic dQ order is the K/V tile order: ``dq_contributors`` lists, for one
(sequence, query head, Q tile), the items that add into its dQ, in the order a deterministic kernel
serialises them.

``b200c.codegen.backward_model.attention_backward`` runs this decomposition on the host in FP64
(the reference the backward kernels are checked against, as the forward's Python model is); the
kernels, their schedule knobs and roles are issue 31's remaining work (docs/backward.md).
"""
from __future__ import annotations

from typing import Optional

import msgspec


class BackwardItem(msgspec.Struct, frozen=True):
    """One backward work item: K/V tile ``kv_tile`` of sequence ``b``, K/V head ``h_kv``.

    Attributes:
        b, h_kv, kv_tile: the sequence, K/V head and K/V tile (``block_n`` keys from ``kv_tile * block_n``).
        h0, heads_per_kv: its query heads ``h0 .. h0 + heads_per_kv - 1`` (the GQA group).
        q_row0, kv_row0: the sequence's first row in packed varlen tensors (0 otherwise).
        len_q, len_kv: the sequence's query and key lengths.
        q_lo, q_full_lo, n_q: Q tiles visited ``q_lo .. n_q - 1`` per query head; those below
            ``q_full_lo`` are masked per row (the causal diagonal).
        partial: the K/V tile is the sequence's partial last one (its columns past ``len_kv`` are masked
            on every visit).
        valid: false for a K/V tile past a shorter varlen sequence's keys (every role skips it).
    """

    b: int
    h_kv: int
    kv_tile: int
    h0: int
    heads_per_kv: int
    q_row0: int
    kv_row0: int
    len_q: int
    len_kv: int
    q_lo: int
    q_full_lo: int
    n_q: int
    partial: bool
    valid: bool

    @property
    def n_visits(self) -> int:
        """Q-tile visits of the item over its query heads (0 when no row sees the tile)."""
        return self.heads_per_kv * max(0, self.n_q - self.q_lo) if self.valid else 0


class BackwardDecomposition(msgspec.Struct, frozen=True):
    """The backward decomposition of one kernel: ``block_m`` query rows per Q tile, ``block_n`` keys per
    K/V tile (the K/V-stationary tile)."""

    block_m: int
    block_n: int

    def kv_tiles(self, seq_kv: int) -> int:
        """K/V tiles of a sequence of ``seq_kv`` keys (the items per (sequence, K/V head))."""
        return -(-seq_kv // self.block_n)

    def num_work(self, batch: int, heads_kv: int, seq_kv: int) -> int:
        """Work items of a problem (``seq_kv``: the longest key sequence of a varlen call)."""
        return batch * heads_kv * self.kv_tiles(seq_kv)

    def item(self, work: int, *, batch: int, heads: int, heads_kv: int, seq_q: int, seq_kv: int,
             causal: bool = False, cu_seqlens_q: Optional[list] = None,
             cu_seqlens_k: Optional[list] = None) -> BackwardItem:
        """Work item ``work`` (0 <= work < :meth:`num_work`). ``seq_q``/``seq_kv``: the lengths (varlen: the
        longest, with the prefix sums given)."""
        tiles = self.kv_tiles(seq_kv)
        rest, j = divmod(work, tiles)
        b, h_kv = divmod(rest, heads_kv)
        g = heads // heads_kv
        if cu_seqlens_q is not None:
            q_row0, kv_row0 = cu_seqlens_q[b], cu_seqlens_k[b]
            len_q, len_kv = cu_seqlens_q[b + 1] - q_row0, cu_seqlens_k[b + 1] - kv_row0
        else:
            q_row0 = kv_row0 = 0
            len_q, len_kv = seq_q, seq_kv
        n_q = -(-len_q // self.block_m)
        valid = j * self.block_n < len_kv
        first_key = j * self.block_n
        last_key = min((j + 1) * self.block_n, len_kv) - 1
        partial = (j + 1) * self.block_n > len_kv
        if causal:
            off = len_kv - len_q  # row r sees keys <= r + off
            first_row = first_key - off  # the first row that sees the tile's first key
            # (first_row < len_q for a valid tile: its first key is < len_kv)
            q_lo = first_row // self.block_m if first_row > 0 else 0
            every_row = last_key - off  # rows >= this see every key of the tile
            q_full_lo = max(0, -(-every_row // self.block_m)) if every_row > 0 else 0
        else:
            q_lo = q_full_lo = 0
        q_lo, q_full_lo = min(q_lo, n_q), min(max(q_full_lo, q_lo), n_q)
        return BackwardItem(b, h_kv, j, h_kv * g, g, q_row0, kv_row0, len_q, len_kv, q_lo, q_full_lo, n_q, partial,
                            valid)

    def visits(self, item: BackwardItem):
        """``(query head, Q tile, masked)`` of each visit of ``item``, in the kernel's order: query head major,
        Q tile ascending. ``masked``: some (row, key) pair of the visit is hidden (causal diagonal or the
        partial last K/V tile)."""
        if not item.valid:
            return
        for h in range(item.h0, item.h0 + item.heads_per_kv):
            for i in range(item.q_lo, item.n_q):
                yield h, i, item.partial or i < item.q_full_lo

    def col_limit(self, item: BackwardItem, row_in_seq: int, causal: bool = False) -> int:
        """Keys of the item's K/V tile that query row ``row_in_seq`` of its sequence sees (>= block_n: all of
        them; <= 0: none), as the forward's ``col_limit`` for the same tile."""
        lim = item.len_kv - item.kv_tile * self.block_n
        if causal:
            lim = min(lim, row_in_seq + item.len_kv - item.len_q + 1 - item.kv_tile * self.block_n)
        return lim

    def dq_contributors(self, b: int, h: int, q_tile: int, *, batch: int, heads: int, heads_kv: int, seq_q: int,
                        seq_kv: int, causal: bool = False, cu_seqlens_q: Optional[list] = None,
                        cu_seqlens_k: Optional[list] = None) -> list:
        """Item numbers that add into dQ of (sequence ``b``, query head ``h``, Q tile ``q_tile``), in K/V tile
        order: the order a deterministic backward serialises them in."""
        h_kv = h // (heads // heads_kv)
        tiles = self.kv_tiles(seq_kv)
        out = []
        for j in range(tiles):
            w = (b * heads_kv + h_kv) * tiles + j
            it = self.item(w, batch=batch, heads=heads, heads_kv=heads_kv, seq_q=seq_q, seq_kv=seq_kv, causal=causal,
                           cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k)
            if it.valid and it.q_lo <= q_tile < it.n_q:
                out.append(w)
        return out


__all__ = ["BackwardDecomposition", "BackwardItem"]
