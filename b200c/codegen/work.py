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
(:attr:`b200c.codegen.plan.Plan.serpentine`: the sm_90a backend's persistent plans), with ``causal`` (or
a varlen item order, :func:`longest_first`) the odd rounds of ``grid`` items run right to left (:attr:`WorkDecomposition.serpentine`), so a CTA
that took one of a round's longest items takes one of the next round's shortest: a static
longest-processing-time balance (FlashAttention-3's LPT scheduler has the same aim with a dynamic counter). K/V tiles per
CTA over the grid-stride loop (132 CTAs, h11's 2 x 64 x 176 tile; ``tests/test_work.py`` pins
these): the most loaded CTA visits 1.117x / 1.075x / 1.055x the mean at 8x16x4096 / 4x16x8192 /
2x16x16384 causal in per-head order alone, 1.034x / 1.033x / 1.031x with the serpentine rounds.

Split-KV (flash-decoding; :attr:`WorkDecomposition.split_kv`, a schedule's ``kv_splits``): when the
items alone would leave SMs idle (a decoding step: one Q tile per (sequence, head group) against a long
KV cache), each item is cut into ``num_splits`` split items over consecutive ranges of its K/V visits:
split ``s`` of an item with ``n_kv`` visits takes visits ``[s p, min((s + 1) p, n_kv))``,
``p = ceil(n_kv / num_splits)`` (an empty range: one fully masked tile, O = 0, LSE = -inf). Split is
the fastest-varying part of the item number, so the splits of one item run side by side. Each split
writes its rows' O (FP32, normalised by its own row sum) and LSE to a workspace
(:func:`part_row`); a second kernel of the same module (``b200c_attention_combine``) merges them:
``LSE = log sum_s exp(LSE_s)``, ``O = sum_s exp(LSE_s - LSE) O_s`` (attention sinks join there as one
more term with O = 0), so a row's result does not depend on the split count beyond FP32 rounding.
How many splits a call takes is decided in Python (:func:`choose_splits`).

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
    split: int = 0  # split-KV: which split of its item; its visits start at v0 of the item's visit order
    v0: int = 0
    n_full_all: int = 0  # split-KV with a block mask: the whole item's full visits (kv_tile's order)


class WorkDecomposition(msgspec.Struct, frozen=True):
    """The work decomposition of one kernel (decided in Python from its plan).

    Attributes:
        block_m: Q rows per Q tile (one Q stage).
        block_n: K/V rows per tile.
        q_stages: Q tiles per work item.
        order: the order work items are numbered in (:data:`ORDERS`).
        serpentine: persistent kernels: with ``causal`` or a varlen item order, odd rounds of the
            grid-stride loop take their items right to left (:meth:`position`).
        block_sparse: a mask_mod's block mask gives each item's tiles (:meth:`item` with ``ranges``,
            :meth:`kv_tile`): ``(kv_lo, full_lo, full_hi, kv_hi)`` per item id
            (:meth:`item_id`); the full run is visited first, then the partial tiles.
        split_kv: the kernel takes ``num_splits`` at launch and each item is cut into that many
            splits of its K/V visits (module docstring; 1: no split, the same items as without).
        item_order: the kernel takes a varlen call's item order (:func:`longest_first`, made on the GPU
            by the module's ``b200c_work_order``) at launch (``item_order``; null: the numbering above);
            every build without a block mask.
    """

    block_m: int
    block_n: int
    q_stages: int
    order: str = "longest_first_per_head"
    serpentine: bool = False
    block_sparse: bool = False
    split_kv: bool = False
    item_order: bool = False

    def position(self, work: int, num_work: int, grid: int, causal: bool) -> int:
        """The item number that grid-stride index ``work`` stands for (the device's remap at the top
        of ``decode_work``): the identity unless :attr:`serpentine` and ``causal`` (the caller passes
        True for an ordered varlen launch too); then round
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

    def tile_of_visit(self, item: WorkItem, v: int) -> int:
        """The K/V tile that local visit ``v`` of ``item`` loads (the device's ``kv_tile``, or the
        visit itself without a block mask or splits)."""
        v += item.v0
        if self.block_sparse:
            n_full = item.n_full_all if self.split_kv else item.n_full
            return self.kv_tile(item.kv_lo, item.full_lo, n_full, v)
        return v

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

    def num_work(self, batch: int, heads: int, seq_q: int, pack_heads: bool = False, num_splits: int = 1) -> int:
        """Work items of a problem (the kernel's ``num_work``); ``seq_q`` is the longest query
        sequence of a varlen call; ``num_splits``: split-KV's splits per item."""
        return batch * (heads // self.q_stages if pack_heads else heads) * self.q_groups(seq_q, pack_heads) * num_splits

    def item(self, work: int, *, batch: int, heads: int, heads_kv: int, seq_q, seq_kv, causal: bool = False,
             pack_heads: bool = False, cu_seqlens_q: Optional[list] = None,
             cu_seqlens_k: Optional[list] = None, grid: Optional[int] = None, ranges=None, num_splits: int = 1,
             seqused_k: Optional[list] = None, order: Optional[list] = None) -> WorkItem:
        """Work item ``work`` (0 <= work < :meth:`num_work`), as the device's ``decode_work`` gives it.
        ``seq_q``/``seq_kv``: the lengths (varlen: the longest, with the prefix sums given); ``grid``:
        the persistent kernel's CTAs (``work`` is then the grid-stride index, remapped by
        :meth:`position`); None: ``work`` is the item number. ``ranges``: a block mask's rows
        ``(kv_lo, full_lo, full_hi, kv_hi)`` by :meth:`item_id` (block-sparse kernels).
        ``num_splits``: split-KV (:attr:`split_kv` kernels): the item is split ``work % num_splits``
        of the unsplit item ``work // num_splits``. ``seqused_k``: per-sequence key lengths of a KV
        cache (the keys past them are not read), else None. ``order``: a varlen call's item order
        (:func:`longest_first`; :attr:`item_order` kernels), else None: entry ``order[work // head_groups]``
        names the item's sequence and Q group, its head (group) is ``work % head_groups``; the persistent
        remap's serpentine rounds then apply whether or not ``causal``."""
        if grid is not None:
            work = self.position(work, self.num_work(batch, heads, seq_q, pack_heads, num_splits), grid,
                                 causal or order is not None)
        split = 0
        if num_splits > 1:
            work, split = divmod(work, num_splits)
        if order is not None:
            rest, group = self.ordered_entry(work, order, heads, seq_q, pack_heads)
        else:
            groups = self.q_groups(seq_q, pack_heads)
            group, rest = work % groups, work // groups
            if causal:
                group = groups - 1 - group
        item = self._item(rest, group, batch, heads, heads_kv, seq_q, seq_kv, causal, pack_heads, cu_seqlens_q,
                          cu_seqlens_k, ranges, seqused_k)
        if not self.split_kv:
            return item
        return self.split_item(item, split, num_splits)

    def ordered_entry(self, work: int, order: list, heads: int, seq_q: int, pack_heads: bool) -> tuple:
        """``(rest, group)`` of ordered item ``work`` (the device's ``item_order`` branch of ``decode_item``):
        ``rest`` = sequence * head_groups + head group, ``group`` its actual Q group; an entry < 0 gives
        sequence 0 and the Q group past the last (no row: not valid)."""
        groups = self.q_groups(seq_q, pack_heads)
        head_groups = heads // self.q_stages if pack_heads else heads
        e = order[work // head_groups]
        b, g = (0, groups) if e < 0 else divmod(e, groups)
        return b * head_groups + work % head_groups, g

    @staticmethod
    def split_item(item: WorkItem, split: int, num_splits: int) -> WorkItem:
        """Split ``split`` of ``num_splits`` of an item (the device's split step in ``decode_work``):
        visits ``[split * p, min((split + 1) * p, n_kv))`` with ``p = ceil(n_kv / num_splits)``; an
        empty range visits one tile past the item's last (fully masked: O = 0, LSE = -inf)."""
        import msgspec

        per = -(-item.n_kv // num_splits)
        v0 = split * per
        here = min(per, item.n_kv - v0)
        return msgspec.structs.replace(item, split=split, v0=v0, n_kv=max(here, 1),
                                       n_full=max(0, min(item.n_full - v0, here)), n_full_all=item.n_full)

    def _item(self, rest, group, batch, heads, heads_kv, seq_q, seq_kv, causal, pack_heads, cu_seqlens_q,
              cu_seqlens_k, ranges, seqused_k) -> WorkItem:
        groups = self.q_groups(seq_q, pack_heads)
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
        if seqused_k is not None:
            len_kv = seqused_k[b]
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
        """Columns of K/V visit ``j`` that query row ``row_in_seq`` of ``item``'s sequence sees
        (>= block_n: all of them; <= 0: none), as the device's ``col_limit``."""
        j = self.tile_of_visit(item, j) if (self.split_kv or self.block_sparse) else j
        lim = item.len_kv - j * self.block_n
        if causal:
            lim = min(lim, row_in_seq + item.len_kv - item.len_q + 1 - j * self.block_n)
        return lim


# ---- a varlen call's item order (b200c_work_order) ------------------------------------------------------

ORDER_MAX_ENTRIES = 16384  # entries (B * Q groups) b200c_work_order holds in shared memory (2 B each)
ORDER_MAX_KEY = 4000  # the largest K/V tile count it sorts by (4 B of shared memory per count)
WORK_ORDER_KERNEL_NAME = "b200c_work_order"
# its static shared memory: a 2-byte count per entry and a 4-byte slot per count (0 .. ORDER_MAX_KEY + 1)
assert 2 * ORDER_MAX_ENTRIES + 4 * (ORDER_MAX_KEY + 2) <= 48 * 1024, "b200c_work_order past 48 KB of static SMEM"


def longest_first(d: WorkDecomposition, *, batch: int, seq_q: int, cu_seqlens_q: list, cu_seqlens_k: list,
                  causal: bool, pack_heads: bool, max_key: int = ORDER_MAX_KEY) -> list:
    """A varlen call's item order, as ``b200c_work_order`` writes it on the GPU (the Python model).

    Entry ``e = b * q_groups + g`` stands for the items of sequence ``b``'s Q group ``g`` (every head or head
    group); the result lists the entries whose Q group holds rows, by the K/V tiles their items visit
    (:meth:`WorkDecomposition.item`'s ``n_kv``, capped at ``max_key``), most first, equal counts in entry
    order, then -1 for each entry that holds no row; ``batch * q_groups`` values in all.

    Args:
        d: the kernel's decomposition. batch: B. seq_q: the longest query sequence (the kernel's ``seq_q``).
        cu_seqlens_q, cu_seqlens_k: the B + 1 prefix sums. causal: bottom-right causal.
        pack_heads: items pack heads (then a Q group is one Q tile). max_key: the count the kernel caps at.
    """
    groups = d.q_groups(seq_q, pack_heads)
    heads = d.q_stages if pack_heads else 1
    keyed = []
    for e in range(batch * groups):
        b, g = divmod(e, groups)
        it = d._item(b, g, batch, heads, 1, seq_q, 0, causal, pack_heads, cu_seqlens_q, cu_seqlens_k, None, None)
        if it.valid:
            keyed.append((-min(it.n_kv, max_key), e))
    keyed.sort()
    entries = [e for _, e in keyed]
    return entries + [-1] * (batch * groups - len(entries))


def work_order_params() -> tuple:
    """Entry parameters of ``b200c_work_order``."""
    from .signature import Param

    return (
        Param("cu_seqlens_q", "i32_ptr", "B + 1 prefix sums of the query lengths"),
        Param("cu_seqlens_k", "i32_ptr", "B + 1 prefix sums of the key lengths"),
        Param("order", "i32_ptr", "out: B * q_groups entries, longest first (longest_first)"),
        Param("batch", "i32", "B"),
        Param("seq_q", "i32", "the longest query sequence (the attention kernel's seq_q)"),
        Param("causal", "i32", "1: causal, bottom-right aligned"),
        Param("pack_heads", "i32", "1: the attention kernel's items pack heads"),
        Param("max_key", "i32", f"K/V tile counts are capped here (<= {ORDER_MAX_KEY})"),
    )


def decomposition(plan) -> WorkDecomposition:
    """The work decomposition of a plan (every backend: the plan's tile and Q stages; the serpentine
    rounds where the backend's plan asks for them, :attr:`b200c.codegen.plan.Plan.serpentine`; split-KV
    where the schedule asks for its build, :attr:`b200c.codegen.plan.Plan.split_kv`)."""
    from .mod_kernel import block_sparse

    sparse = block_sparse(getattr(plan, "mods", None))
    return WorkDecomposition(plan.tile.block_m, plan.tile.block_n, plan.q_stages, serpentine=plan.serpentine,
                             block_sparse=sparse, split_kv=bool(getattr(plan, "split_kv", False)),
                             item_order=not sparse)


def template_args(d: WorkDecomposition) -> dict:
    """What ``templates/work.cuh.j2`` prints from (``work=`` in the kernel template)."""
    return {"order": d.order, "serpentine": d.serpentine, "block_sparse": d.block_sparse, "split_kv": d.split_kv,
            "item_order": d.item_order, "order_max_entries": ORDER_MAX_ENTRIES, "order_max_key": ORDER_MAX_KEY}


# ---- split-KV: the kernel's extra parameters and how many splits a call takes --------------------------

MAX_SPLITS = 128
# K/V tiles a split keeps at least: measured on the H200 (1x32/8:32768, D 128, the sm90a preset's 176-key
# tiles): 8 splits of 23-24 tiles ran 67 us, 16 splits of 11-12 tiles 217 us (scripts/decode_probe.py)
MIN_SPLIT_TILES = 16


def params(d: WorkDecomposition) -> tuple:
    """Entry parameters the decomposition adds after the others (:mod:`b200c.codegen.signature`): a varlen
    item order (:attr:`WorkDecomposition.item_order`), split-KV's."""
    from .signature import Param

    order = (Param("item_order", "i32_ptr", "varlen: the item order (b200c_work_order), or null"),) if d.item_order else ()
    if not d.split_kv:
        return order
    return order + (
        Param("num_splits", "i32",
              "split-KV: splits per work item (1: the kernel stores out and the LSE itself, no combine)"),
        Param("part_rows", "i32", "split-KV: rows per (sequence, head) in the workspace (S_q; varlen: total_q)"),
        Param("o_part", "f32_ptr", "split-KV: each split's O, FP32 (splits, B, H, part_rows, D); varlen B = 1"),
        Param("lse_part", "f32_ptr", "split-KV: each split's LSE, FP32 (splits, B, H, part_rows), natural log"),
        Param("seqused_k", "i32_ptr", "KV cache: per-sequence key lengths (B,), or null (seq_kv / cu_seqlens_k)"),
        Param("block_table", "i32_ptr", "paged KV cache: (B, max_blocks) cache block of each page, or null"),
        Param("max_blocks", "i32", "paged KV cache: pages per sequence in block_table"),
        Param("page_size", "i32", "paged KV cache: keys per page (a multiple of 16)"),
        Param("page_box", "i32", "paged KV cache: rows per K/V TMA box (divides block_n and page_size)"),
    )


def combine_params() -> tuple:
    """Entry parameters of the split-KV combine kernel ``b200c_attention_combine``."""
    from .signature import Param

    return (
        Param("o_part", "f32_ptr", "each split's O, FP32 (splits, B, H, part_rows, D)"),
        Param("lse_part", "f32_ptr", "each split's LSE, FP32 (splits, B, H, part_rows)"),
        Param("out", "bf16_ptr", "O, same logical (B, H, S_q, D) shape as Q"),
        Param("out_stride_b", "i64", "element stride of O over B (varlen: 0)"),
        Param("out_stride_h", "i64", "element stride of O over H"),
        Param("out_stride_s", "i64", "element stride of O over S_q (rows)"),
        Param("lse", "f32_ptr", "log-sum-exp per (B, H, S_q) row in natural-log units, or null"),
        Param("lse_stride_b", "i64", "element stride of lse over B (varlen: 0)"),
        Param("lse_stride_h", "i64", "element stride of lse over H"),
        Param("lse_stride_s", "i64", "element stride of lse over S_q"),
        Param("sinks", "f32_ptr", "attention sink logit per query head (natural-log units), or null"),
        Param("rows", "i32", "rows to merge: B * H * part_rows (varlen B = 1)"),
        Param("heads", "i32", "H"),
        Param("part_rows", "i32", "rows per (sequence, head)"),
        Param("num_splits", "i32", "splits per row"),
    )


COMBINE_KERNEL_NAME = "b200c_attention_combine"
COMBINE_ROWS_PER_CTA = 4  # one warp per row, 4 warps per CTA


def choose_splits(items: int, kv_tiles: int, num_sms: int, persistent: bool = False, fixed=None) -> int:
    """How many splits of its K/V tiles each work item takes (split-KV, flash-decoding).

    Args:
        items: work items of the call without splits (:meth:`WorkDecomposition.num_work`).
        kv_tiles: K/V tiles of the longest item (``ceil(S_kv / block_n)``; causal: up to its diagonal).
        num_sms: the device's SMs (132 on an H200).
        persistent: the kernel is persistent (grid = min(items, SMs)); the count only sets the items.
        fixed: the schedule's ``kv_splits`` (None or 0: decided here; 1..128: that count, capped at
            ``kv_tiles``).

    Returns:
        1 .. min(128, kv_tiles). The rule (the aim of FlashAttention's ``num_splits_heuristic``, in our
        words): no split while the items fill 80 % of the SMs; else the count whose last wave of
        CTAs is fullest (``items * n / (ceil(items * n / SMs) * SMs)``), the smallest count within
        95 % of the best, with each split keeping at least :data:`MIN_SPLIT_TILES` K/V tiles (measured:
        shorter splits ran slower) and at most two waves of CTAs.
    """
    if fixed not in (None, 0):
        return max(1, min(int(fixed), kv_tiles, MAX_SPLITS))
    if items <= 0 or kv_tiles <= 1 or items >= 0.8 * num_sms:
        return 1
    cap = min(MAX_SPLITS, max(1, kv_tiles // MIN_SPLIT_TILES), -(-2 * num_sms // items))
    if cap <= 1:
        return 1

    def eff(n):
        ctas = items * n
        return ctas / (-(-ctas // num_sms) * num_sms)

    best = max(eff(n) for n in range(1, cap + 1))
    return next(n for n in range(1, cap + 1) if eff(n) >= 0.95 * best)


__all__ = ["WorkItem", "WorkDecomposition", "ORDERS", "decomposition", "template_args", "params", "combine_params",
           "choose_splits", "COMBINE_KERNEL_NAME", "MAX_SPLITS", "longest_first", "work_order_params",
           "WORK_ORDER_KERNEL_NAME", "ORDER_MAX_ENTRIES", "ORDER_MAX_KEY"]
