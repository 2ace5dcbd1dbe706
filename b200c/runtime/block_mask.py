"""Per-work-item K/V tile ranges of a mask_mod (FlexAttention's conventions), computed on the host
device before a launch and cached.

A mask_mod is ``mask_fn(b, h, q_idx, kv_idx) -> bool``: True where query row ``q_idx`` of sequence
``b``, head ``h`` may see key ``kv_idx``. The kernel visits, per work item
(:class:`b200c.codegen.work.WorkDecomposition`: ``q_stages`` Q tiles that share every K/V tile), the
K/V tiles ``[kv_lo, kv_hi)``; of them ``[full_lo, full_hi)`` are *full* (every row of the item sees
every key: no mask evaluated), the others *partial* (the mask, the key-length bound and the causal
bound evaluated per element). :func:`kv_ranges` computes these four numbers per item from the mask
evaluated on whole tiles with torch ops, in chunks that bound the memory;
:func:`cached_kv_ranges` keeps recent results (an LRU keyed by the caller);
:func:`block_counts` sums them for reports.
"""
from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import Callable, Hashable, Iterable, Optional

import torch

from ..codegen.work import WorkDecomposition
from ..errors import LaunchError

MASK_ARGS = ("b", "h", "q_idx", "kv_idx")
# the most elements of one intermediate tensor of kv_ranges (the evaluated mask of one chunk, or the
# per-tile any/all of one chunk); kv_ranges(chunk_elems=...) overrides it
CHUNK_ELEMS = 1 << 26
# the row of an item that visits nothing: tile 0, masked (its rows give O = 0, LSE = -inf)
EMPTY_RANGE = (0, 0, 0, 1)


def _largest(total: int, cost: Callable[[int], tuple[int, int]], budget: int) -> int:
    """The largest n in [1, total] whose costs all stay within ``budget`` (1 if none does)."""
    lo, hi = 1, max(total, 1)
    if max(cost(hi)) <= budget:
        return hi
    while lo < hi:  # costs grow with n: the last n within budget
        mid = (lo + hi + 1) // 2
        if max(cost(mid)) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _lengths(cu, n: int, name: str, longest: int, longest_name: str, device, check: bool = True) -> torch.Tensor:
    cu = torch.as_tensor(cu).to(device=device, dtype=torch.int64).reshape(-1)
    if cu.numel() != n + 1:
        raise LaunchError(f"{name} has {cu.numel()} entries; it must have batch + 1 = {n + 1} (prefix sums)")
    lens = cu[1:] - cu[:-1]
    if n and check:
        lo, hi = int(lens.min()), int(lens.max())
        if lo < 0:
            raise LaunchError(f"{name} decreases (a sequence of {lo} rows); it must be non-decreasing prefix sums")
        if hi > longest:
            raise LaunchError(f"{name} gives a sequence of {hi} rows, longer than {longest_name}={longest}; "
                              f"pass the longest sequence's length as {longest_name}")
    return lens


def _index_error(err: Exception, extents: dict) -> LaunchError:
    """The LaunchError for a mask_fn that indexed a captured tensor out of range."""
    msg = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    ranges = ", ".join(f"{a} < {k}={v}" for a, (k, v) in extents.items())
    m = re.search(r"with size (\d+)", msg)
    hint = ""
    if m:
        size = int(m.group(1))
        short = [f"{a} (up to {v - 1})" for a, (k, v) in extents.items() if v > size]
        if short:
            hint = f"; a captured tensor's dimension of size {size} is shorter than the range of {', '.join(short)}"
    return LaunchError(f"mask_mod indexed a captured tensor out of range ({msg}){hint}: every tensor the "
                       f"mask_mod captures must cover the whole index range it is called with ({ranges}), "
                       f"i.e. (B, H, S_q, S_kv) along the dimensions it indexes with b, h, q_idx, kv_idx")


def _eval_mask(mask_fn, args, shape, extents, device) -> torch.Tensor:
    """mask_fn on the broadcastable index tensors ``args``: a bool tensor broadcast to ``shape``."""
    try:
        out = mask_fn(*args)
    except IndexError as err:
        raise _index_error(err, extents) from err
    except LaunchError:
        raise
    except Exception as err:  # noqa: BLE001 -- anything the user's function raises becomes a LaunchError
        if "out of bounds" in str(err) or "out of range" in str(err):
            raise _index_error(err, extents) from err
        raise LaunchError(f"mask_mod raised {type(err).__name__}: {err} (it was called with broadcastable "
                          f"int64 tensors b, h, q_idx, kv_idx of shapes {[tuple(a.shape) for a in args]})") from err
    if not isinstance(out, torch.Tensor) or out.dtype != torch.bool:
        got = f"a {out.dtype} tensor" if isinstance(out, torch.Tensor) else f"a {type(out).__name__}"
        raise LaunchError(f"mask_mod must return a bool tensor (True: the key is visible); it returned {got}: "
                          "compare the indices (kv_idx <= q_idx), combine with & | ~, or for a constant mask "
                          "write kv_idx >= 0 (always) / kv_idx < 0 (never)")
    try:
        ok = torch.broadcast_shapes(out.shape, shape) == torch.Size(shape)
    except RuntimeError:
        ok = False
    if not ok:
        raise LaunchError(f"mask_mod must return a bool tensor broadcastable to the shape of its arguments "
                          f"{tuple(shape)} (b, h, q_idx, kv_idx broadcast); it returned shape {tuple(out.shape)}")
    return out.to(device)


def kv_ranges(mask_fn: Callable, work: WorkDecomposition, *, batch: int, heads: int, heads_kv: int,
              seq_q: int, seq_kv: int, causal: bool = False, pack_heads: bool = False,
              cu_seqlens_q=None, cu_seqlens_k=None, device="cpu",
              uses: Iterable[str] = frozenset(MASK_ARGS), chunk_elems: Optional[int] = None,
              check_seqlens: bool = True) -> torch.Tensor:
    """The K/V tile ranges every work item of a masked attention call visits.

    A score entry (row ``r``, key ``c``) of sequence ``b``, head ``h`` is *visible* iff
    ``r < len_q``, ``c < len_kv``, with ``causal`` ``c <= r + len_kv - len_q`` (bottom-right aligned),
    and ``mask_fn(b, h, r, c)``. Rows ``r >= len_q`` are ignored. K/V tile ``j`` (keys
    ``j * block_n ..``) of an item is *empty* when no row (< len_q) of any of its Q stages sees a key of
    it, *full* when every such row sees all ``block_n`` keys, else *partial*.

    Args:
        mask_fn: ``mask_fn(b, h, q_idx, kv_idx)``, called with broadcastable int64 tensors on
            ``device`` of shapes ``(nb, 1, 1, 1)``, ``(1, nh, 1, 1)``, ``(1, 1, nq, 1)``,
            ``(1, 1, 1, nk)`` (a chunk of the index range; positions within the sequence;
            ``q_idx < S_q``, ``kv_idx < S_kv``); must return a bool tensor broadcastable to their
            broadcast shape (size-1 dimensions where it does not depend on an argument are fine).
        work: the kernel's work decomposition (``block_m``, ``block_n``, ``q_stages``).
        batch, heads, heads_kv: B, H, H_kv (H a multiple of H_kv; with ``pack_heads`` of ``q_stages``).
        seq_q, seq_kv: S_q, S_kv (varlen: the longest sequence's lengths), >= 0.
        causal: bottom-right aligned causal masking on top of ``mask_fn``.
        pack_heads: items are the same Q tile of ``q_stages`` consecutive heads (GQA packing).
        cu_seqlens_q, cu_seqlens_k: varlen: B + 1 prefix sums (lists or int tensors), or both None.
        device: where to evaluate and where the result lives.
        uses: the arguments ``mask_fn`` depends on (a subset of ``b``, ``h``, ``q_idx``, ``kv_idx``);
            an unused one is passed as a single 0 (shape ``(1, 1, 1, 1)``) and the result broadcast.
        chunk_elems: the most elements of one intermediate tensor (default :data:`CHUNK_ELEMS`);
            the mask is evaluated in chunks of batch, heads, Q rows and K/V columns under it.
        check_seqlens: check that the cu_seqlens give lengths in ``[0, seq_q]`` / ``[0, seq_kv]`` (reads
            them back from the device: a sync); False trusts them (flash_attn_varlen_func's
            ``check_seqlens=False`` contract: wrong values are undefined behaviour).

    Returns:
        A contiguous int32 tensor ``(num_items, 4)`` on ``device`` (``num_items =
        work.num_work(batch, heads, seq_q, pack_heads)``), row ``i`` for item
        ``i = rest * q_groups + group`` (``group`` the item's actual Q group, independent of the
        causal order): ``(kv_lo, full_lo, full_hi, kv_hi)`` in K/V tiles. ``kv_lo``/``kv_hi`` are the
        first non-empty tile and one past the last; ``[full_lo, full_hi)`` the longest run of full tiles
        (the first on ties), ``full_lo = full_hi = kv_lo`` if there is none. An item that sees nothing
        (or lies past its varlen sequence's last row) gets :data:`EMPTY_RANGE` ``(0, 0, 0, 1)``: the
        kernel visits tile 0 masked, and its rows give O = 0, LSE = -inf.

    Raises:
        LaunchError: ``mask_fn`` raised (an index out of range of a captured tensor: the message says
            the tensor must cover (B, H, S_q, S_kv)), returned something other than a bool tensor of
            a broadcastable shape; bad ``uses``, ``cu_seqlens`` or sizes.
    """
    uses = frozenset(uses)
    if not uses <= set(MASK_ARGS):
        raise LaunchError(f"uses names {sorted(uses - set(MASK_ARGS))}; it must be a subset of {list(MASK_ARGS)}")
    for name, v in (("batch", batch), ("heads", heads), ("heads_kv", heads_kv), ("seq_q", seq_q), ("seq_kv", seq_kv)):
        if int(v) != v or v < 0:
            raise LaunchError(f"{name}={v}; it must be a non-negative integer")
    if heads_kv <= 0 or heads % heads_kv:
        raise LaunchError(f"heads={heads} must be a multiple of heads_kv={heads_kv} (>= 1)")
    if (cu_seqlens_q is None) != (cu_seqlens_k is None):
        raise LaunchError("cu_seqlens_q and cu_seqlens_k go together: pass both (varlen) or neither")
    budget = int(CHUNK_ELEMS if chunk_elems is None else chunk_elems)
    if budget < 1:
        raise LaunchError(f"chunk_elems={chunk_elems}; it must be >= 1")
    device = torch.device(device)
    bm, bn, qs = work.block_m, work.block_n, work.q_stages
    num_items = work.num_work(batch, heads, seq_q, pack_heads)
    varlen = cu_seqlens_q is not None
    if varlen:
        lens_q = _lengths(cu_seqlens_q, batch, "cu_seqlens_q", seq_q, "seq_q", device, check_seqlens)
        lens_k = _lengths(cu_seqlens_k, batch, "cu_seqlens_k", seq_kv, "seq_kv", device, check_seqlens)
    if num_items == 0 or seq_kv == 0:
        return _empty_range(torch.int32, device).repeat(num_items, 1)

    q_groups = work.q_groups(seq_q, pack_heads)
    n_kv = -(-seq_kv // bn)
    hu = qs if pack_heads else 1              # heads per head unit (one item's heads)
    n_hu = heads // hu
    ru = bm if pack_heads else qs * bm        # rows per row unit (one item's Q tiles)
    use_b, use_h = "b" in uses, "h" in uses
    use_q, use_k = "q_idx" in uses, "kv_idx" in uses
    extents = {"b": ("B", batch), "h": ("H", heads), "q_idx": ("S_q", seq_q), "kv_idx": ("S_kv", seq_kv)}

    if not use_q and (batch if use_b else 1) * (heads if use_h else 1) * n_kv * bn <= budget:
        return _q_free(mask_fn, work, batch, heads, seq_q, seq_kv, causal, pack_heads,
                       (lens_q, lens_k) if varlen else None, device, uses, extents)
    out = _empty_range(torch.int32, device).repeat(num_items, 1)

    # chunk sizes, greedily: K/V columns, then Q rows, then heads, then sequences; costs are the
    # evaluated mask (b and h only count where the mask or the bounds depend on them) and the per-tile
    # any/all tensors of one chunk (every b and h of the chunk, all K/V tiles)
    def costs(nb, nhu, nr, nc):
        ev = (nb if use_b or varlen else 1) * (nhu * hu if use_h else 1) * nr * ru * nc * bn
        return ev, nb * nhu * hu * nr * (ru // bm) * n_kv

    nc = _largest(n_kv, lambda n: costs(1, 1, 1, n), budget)
    nr = _largest(q_groups, lambda n: costs(1, 1, n, nc), budget)
    nh = _largest(n_hu, lambda n: costs(1, n, nr, nc), budget)
    nbt = _largest(batch, lambda n: costs(n, nh, nr, nc), budget)

    i64 = dict(dtype=torch.int64, device=device)
    zero = torch.zeros((1, 1, 1, 1), **i64)
    tile_idx = _tile_index(device, n_kv)
    for b0 in range(0, batch, nbt):
        b1 = min(batch, b0 + nbt)
        bs = torch.arange(b0, b1, **i64)
        if varlen:
            lq, lk = lens_q[b0:b1].view(-1, 1, 1, 1), lens_k[b0:b1].view(-1, 1, 1, 1)
        else:
            lq = torch.full((1, 1, 1, 1), seq_q, **i64)
            lk = torch.full((1, 1, 1, 1), seq_kv, **i64)
        for g0 in range(0, n_hu, nh):
            g1 = min(n_hu, g0 + nh)
            hs = torch.arange(g0 * hu, g1 * hu, **i64)
            for r0 in range(0, q_groups, nr):
                r1 = min(q_groups, r0 + nr)
                rows = torch.arange(r0 * ru, r1 * ru, **i64)
                n_rows, n_qt = rows.numel(), rows.numel() // bm
                dont_care = (rows.view(1, 1, n_qt, bm, 1) >= lq.view(-1, 1, 1, 1, 1))  # (nbb, 1, nqt, bm, 1)
                any_t = all_t = None
                for c0 in range(0, n_kv, nc):
                    c1 = min(n_kv, c0 + nc)
                    cols = torch.arange(c0 * bn, c1 * bn, **i64)
                    args = (bs.view(-1, 1, 1, 1) if use_b else zero,
                            hs.view(1, -1, 1, 1) if use_h else zero,
                            rows.clamp(max=seq_q - 1).view(1, 1, -1, 1) if use_q else zero,
                            cols.clamp(max=seq_kv - 1).view(1, 1, 1, -1) if use_k else zero)
                    shape = torch.broadcast_shapes(*(a.shape for a in args))
                    m = _eval_mask(mask_fn, args, shape, extents, device)
                    r, c = rows.view(1, 1, -1, 1), cols.view(1, 1, 1, -1)
                    bound = (r < lq) & (c < lk)
                    if causal:
                        bound &= c - r <= lk - lq
                    vis = m & bound                     # (nb or 1, nh or 1, n_rows, ncols)
                    vis = vis.reshape(vis.shape[0], vis.shape[1], n_qt, bm, c1 - c0, bn)
                    row_any = vis.any(dim=5)            # (.., nqt, bm, ntiles): a row sees a key of the tile
                    row_all = vis.all(dim=5)            # a row sees every key of the tile
                    del vis
                    a = row_any.any(dim=3)
                    f = (row_all | dont_care).all(dim=3)
                    if any_t is None:
                        lead = (max(a.shape[0], f.shape[0]), max(a.shape[1], f.shape[1]))
                        any_t = torch.zeros((*lead, n_qt, n_kv), dtype=torch.bool, device=device)
                        all_t = torch.zeros_like(any_t)
                    any_t[..., c0:c1] = a
                    all_t[..., c0:c1] = f
                # combine Q tiles (or heads) into items: union for non-empty, intersection for full
                nb_c, nh_c = b1 - b0, g1 * hu - g0 * hu
                any_t = any_t.expand(nb_c, nh_c, n_qt, n_kv)
                all_t = all_t.expand(nb_c, nh_c, n_qt, n_kv)
                if pack_heads:
                    shp = (nb_c, g1 - g0, hu, n_qt, n_kv)
                    nonempty, full = any_t.reshape(shp).any(dim=2), all_t.reshape(shp).all(dim=2)
                    rest = (bs.view(-1, 1, 1) * n_hu + torch.arange(g0, g1, **i64).view(1, -1, 1))
                else:
                    shp = (nb_c, nh_c, r1 - r0, qs, n_kv)
                    nonempty, full = any_t.reshape(shp).any(dim=3), all_t.reshape(shp).all(dim=3)
                    rest = bs.view(-1, 1, 1) * heads + hs.view(1, -1, 1)
                ids = (rest * q_groups + torch.arange(r0, r1, **i64).view(1, 1, -1)).reshape(-1)
                out[ids] = _ranges(nonempty.reshape(-1, n_kv), full.reshape(-1, n_kv), tile_idx)
    return out.contiguous()


def check_mask_tensor(mask: torch.Tensor, want: tuple) -> None:
    """The rule of :func:`tensor_ranges`'s ``mask``: bool, 4-D, each dimension 1 or ``want``'s
    (B, H, S_q, S_kv).

    Raises:
        LaunchError: any other tensor.
    """
    if mask.dtype != torch.bool or mask.dim() != 4 or any(m not in (1, w) for m, w in zip(mask.shape, want)):
        raise LaunchError(f"mask of dtype {mask.dtype} and shape {tuple(mask.shape)}: tensor_ranges takes a 4-D "
                          f"bool tensor broadcastable to (B, H, S_q, S_kv) = {tuple(want)}")


def tensor_ranges(mask: torch.Tensor, work: WorkDecomposition, *, batch: int, heads: int, seq_q: int,
                  seq_kv: int, pack_heads: bool = False) -> torch.Tensor:
    """:func:`kv_ranges` of a boolean mask given as a tensor (torch SDPA's ``attn_mask``: True where the
    query row sees the key), without varlen or causal: the same result, from the tensor itself instead of
    a mask_mod evaluated on index tensors (no index tensors, no gather, no chunking). A new mask tensor
    costs about 30 torch ops instead of about 60, each a kernel launch on the GPU: for the padded
    decoder's (2, 1, 4096, 4096) causal mask a call with a new tensor took 609 us of host time on the
    H200's host against torch's 60, with the same tensor (cached) 94 against 90.

    Args:
        mask: bool, 4-D, each dimension 1 (broadcast) or (B, H, S_q, S_kv)'s. Its memory is read once
            and not copied (dimensions expanded with stride 0 are read at one index).
        work, batch, heads, seq_q, seq_kv, pack_heads: as :func:`kv_ranges`.

    Returns:
        As :func:`kv_ranges`: int32 ``(num_items, 4)`` on the mask's device.

    Raises:
        LaunchError: a mask that is not a 4-D bool tensor broadcastable to (B, H, S_q, S_kv).
    """
    check_mask_tensor(mask, (batch, heads, seq_q, seq_kv))
    bm, bn, qs = work.block_m, work.block_n, work.q_stages
    num_items = work.num_work(batch, heads, seq_q, pack_heads)
    device = mask.device
    if num_items == 0 or seq_kv == 0:
        return _empty_range(torch.int32, device).repeat(num_items, 1)
    n_kv = -(-seq_kv // bn)
    q_groups = work.q_groups(seq_q, pack_heads)
    hu = qs if pack_heads else 1  # heads per item
    ru = bm if pack_heads else qs * bm  # rows per item
    m = mask
    for d in range(4):  # a dimension broadcast by expand() (stride 0) holds one value: read it once
        if m.shape[d] > 1 and m.stride(d) == 0:
            m = m.narrow(d, 0, 1)
    whole = seq_kv // bn  # K/V tiles inside the sequence; a partial last one is never full
    if m.shape[3] == 1:  # the same for every key of a row
        row_any = m.expand(*m.shape[:3], n_kv)
        row_all = row_any if whole == n_kv else torch.cat((row_any[..., :whole],
                                                           torch.zeros_like(row_any[..., whole:])), 3)
    else:  # whole tiles reduced in place (a view), the partial last one apart: no copy of the mask
        tiles = m[..., :whole * bn].reshape(*m.shape[:3], whole, bn)
        row_any, row_all = tiles.any(dim=4), tiles.all(dim=4)  # (B|1, H|1, S_q|1, n_kv)
        if whole != n_kv:
            tail = m[..., whole * bn:].any(dim=3, keepdim=True)
            row_any, row_all = torch.cat((row_any, tail), 3), torch.cat((row_all, torch.zeros_like(tail)), 3)
    if row_any.shape[2] == 1:  # the same for every row, and every item has a row inside the sequence
        g_any, g_all = row_any, row_all
    else:  # rows past S_q (the last item's padding) see nothing and do not stop a tile being full
        pad = q_groups * ru - seq_q
        if pad:
            row_any = torch.nn.functional.pad(row_any, (0, 0, 0, pad), value=False)
            row_all = torch.nn.functional.pad(row_all, (0, 0, 0, pad), value=True)
        shape = (*row_any.shape[:2], q_groups, ru, n_kv)
        g_any, g_all = row_any.reshape(shape).any(dim=3), row_all.reshape(shape).all(dim=3)
    if hu > 1 and g_any.shape[1] > 1:  # an item's heads: union for non-empty, intersection for full
        shape = (g_any.shape[0], heads // hu, hu, *g_any.shape[2:])
        g_any, g_all = g_any.reshape(shape).any(dim=2), g_all.reshape(shape).all(dim=2)
    lead = g_any.shape[:3]
    r = _ranges(g_any.reshape(-1, n_kv), g_all.reshape(-1, n_kv),
                _tile_index(device, n_kv))
    return r.view(*lead, 4).expand(batch, heads // hu, q_groups, 4).reshape(-1, 4).contiguous()


def _q_free(mask_fn, work, batch, heads, seq_q, seq_kv, causal, pack_heads, lens, device, uses,
            extents) -> torch.Tensor:
    """:func:`kv_ranges` of a mask that does not read ``q_idx`` (key padding, per-head key biases): the
    mask is evaluated once per (b, h, key), not per query row (LTX-2's cross-attention, 12,288 query
    rows, spent most of a forward on the full grid), and combined with the rows' bounds (lengths,
    causal) per K/V tile. ``full`` is exact (the mask sees every key of the tile and every row's
    bound covers it); ``non-empty`` may call a tile non-empty where the mask's keys and a row's
    bound do not meet (causal): such a tile is visited as partial and masked, never skipped wrongly.
    ``lens``: varlen's (lengths of q, lengths of k), or None.

    What depends only on the sizes (the index tensors the mask is called with, the rows' bounds of a
    call without cu_seqlens) is made once (:func:`_const`): a model makes a new mask tensor per call,
    so this runs in every masked SDPA call, and each torch op is a kernel launch on the GPU."""
    bm, bn, qs = work.block_m, work.block_n, work.q_stages
    n_kv = -(-seq_kv // bn)
    q_groups = work.q_groups(seq_q, pack_heads)
    hu = qs if pack_heads else 1
    ru = bm if pack_heads else qs * bm
    use_b, use_h, use_k = "b" in uses, "h" in uses, "kv_idx" in uses
    units = heads // hu
    i64 = dict(dtype=torch.int64, device=device)

    def index_args():
        zero = torch.zeros((1, 1, 1, 1), **i64)
        cols = torch.arange(n_kv * bn, **i64).clamp(max=seq_kv - 1)
        return (torch.arange(batch, **i64).view(-1, 1, 1, 1) if use_b else zero,
                torch.arange(heads, **i64).view(1, -1, 1, 1) if use_h else zero, zero,
                cols.view(1, 1, 1, -1) if use_k else zero)

    key = (device, "q_free args", n_kv * bn, seq_kv, batch if use_b else 0, heads if use_h else 0, use_k)
    args = _const(key, index_args)
    versions = tuple(a._version for a in args)
    shape = torch.broadcast_shapes(*(a.shape for a in args))
    try:
        m = _eval_mask(mask_fn, args, shape, extents, device)
    finally:
        if tuple(a._version for a in args) != versions:  # the mask_fn wrote to its arguments: never reuse them
            _drop_const(key)
    m = m.expand(*shape[:3], n_kv * bn)[:, :, 0]  # (B|1, H|1, n_kv * bn); a mask without kv_idx: every key
    m = m.reshape(m.shape[0], m.shape[1], n_kv, bn)
    m_any, m_all = m.any(dim=3), m.all(dim=3)  # (B|1, H|1, n_kv)
    if pack_heads and use_h:  # an item's heads: union for non-empty, intersection for full
        m_any = m_any.reshape(m_any.shape[0], units, hu, n_kv).any(dim=2)
        m_all = m_all.reshape(m_all.shape[0], units, hu, n_kv).all(dim=2)

    def row_bounds(lq, lk, per_group: bool):
        # the rows' bounds per K/V tile: row r sees keys c < lim(r) (the length, and causal's diagonal);
        # (B|1, G, n_kv): some row of the item's group sees a key of the tile / every row sees all of them.
        # Without causal and cu_seqlens every group has the same bounds (each has a row < S_q): G = 1.
        groups = q_groups if per_group else 1
        rows = torch.arange(groups * ru, **i64).view(1, -1, 1)
        lq, lk = lq.view(-1, 1, 1), lk.view(-1, 1, 1)
        lim = torch.minimum(lk, rows + lk - lq + 1) if causal else lk.expand(-1, rows.shape[1], 1)
        tiles = torch.arange(n_kv, **i64).view(1, 1, -1)
        valid = rows < lq
        r_any = valid & (tiles * bn < lim)                 # (B|1, rows, n_kv)
        r_all = ~valid | ((tiles + 1) * bn <= lim)
        b_any = r_any.reshape(r_any.shape[0], groups, ru, n_kv).any(dim=2)
        b_all = r_all.reshape(r_all.shape[0], groups, ru, n_kv).all(dim=2)
        return b_any, b_all & b_any

    if lens is not None:
        b_any, b_full = row_bounds(*lens, True)
    else:
        b_any, b_full = _const((device, "q_free bounds", bm, bn, qs, q_groups, ru, seq_q, seq_kv, causal),
                               lambda: row_bounds(torch.full((1,), seq_q, **i64), torch.full((1,), seq_kv, **i64),
                                                  causal))
    nonempty = m_any.unsqueeze(2) & b_any.unsqueeze(1)  # (B|1, units|1, G|1, n_kv)
    full = m_all.unsqueeze(2) & b_full.unsqueeze(1)
    lead = torch.broadcast_shapes(nonempty.shape[:3], full.shape[:3])
    r = _ranges(nonempty.expand(*lead, n_kv).reshape(-1, n_kv), full.expand(*lead, n_kv).reshape(-1, n_kv),
                _tile_index(device, n_kv))
    return r.view(*lead, 4).expand(batch, units, q_groups, 4).reshape(-1, 4).contiguous()


def _ranges(nonempty: torch.Tensor, full: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``(kv_lo, full_lo, full_hi, kv_hi)`` int32 rows from per-item, per-tile non-empty / full flags
    (``idx``: ``arange(n_kv)``, int64). About 18 torch ops (kernel launches on the GPU), each made by
    every masked call with a new mask."""
    n_kv = nonempty.shape[1]
    full = full & nonempty
    kv_lo = torch.where(nonempty, idx, n_kv).amin(dim=1)  # n_kv: the item sees nothing
    kv_hi = torch.where(nonempty, idx, -1).amax(dim=1) + 1
    # length of the run of full tiles ending at each tile; the first longest run ends at the first max
    # (torch.max over a dimension returns the first maximal value's index)
    last_break = torch.where(full, -1, idx).cummax(dim=1).values
    longest, end = ((idx - last_break) * full).max(dim=1)
    full_hi = torch.where(longest == 0, kv_lo, end + 1)  # no full tile: an empty run at kv_lo
    full_lo = full_hi - longest
    rows = torch.stack((kv_lo, full_lo, full_hi, kv_hi), dim=1)
    empty = _const((rows.device, "empty range", rows.dtype), lambda: _empty_range(rows.dtype, rows.device))
    return torch.where((kv_lo < n_kv).view(-1, 1), rows, empty).to(torch.int32)


def _empty_range(dtype, device) -> torch.Tensor:
    """:data:`EMPTY_RANGE` as a tensor on ``device``, made by fills: ``torch.tensor(..., device=<cuda>)``
    and ``t[i] = v`` copy a host value to the device and wait for the stream (a device sync in every
    masked call; ``fill_`` passes the value as a kernel argument)."""
    out = torch.zeros(len(EMPTY_RANGE), dtype=dtype, device=device)
    for i, v in enumerate(EMPTY_RANGE):
        if v:
            out[i:i + 1].fill_(v)
    return out


class BlockMaskCache:
    """A thread-safe LRU of computed K/V ranges (or anything), at most ``maxsize`` entries.

    Keys are whatever the caller makes hashable, e.g. (the mask function's identity, its captured
    tensors' ``data_ptr``/``_version``/shape/stride, the sizes, the decomposition, causal, packing,
    device). A value is computed outside the lock; two threads missing the same key may both compute
    it (the last one stored wins; both results are equal).
    """

    def __init__(self, maxsize: int = 64):
        if maxsize < 1:
            raise ValueError(f"maxsize={maxsize}; it must be >= 1")
        self.maxsize = maxsize
        self._entries: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: Hashable, compute: Callable[[], torch.Tensor]) -> torch.Tensor:
        """The value cached under ``key``, else ``compute()`` stored under it (evicting the least
        recently used entry past ``maxsize``)."""
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                self.hits += 1
                return self._entries[key]
            self.misses += 1
        value = compute()
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)
        return value

    def put(self, key: Hashable, value) -> None:
        """Store ``value`` under ``key`` (replacing what is there), evicting past ``maxsize``."""
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)

    def drop(self, key: Hashable) -> None:
        """Forget ``key`` (nothing if it is not there)."""
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        """Drop every entry and reset the hit/miss counts."""
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


_CACHE = BlockMaskCache()
_CONSTS = BlockMaskCache(128)  # tensors that depend only on sizes and the device (and stream): see _const


def _stream_of(device):
    return torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else None


def _const(key: tuple, make: Callable):
    """``make()`` (tensors that depend only on ``key``, whose first entry is the device), made once per
    device and current stream and kept (an LRU of 128). Only read, never written: a masked call makes no
    kernel launch for them again. Per stream: a tensor made on one stream is not read by another before
    its values are there. Made outside inference mode (an inference tensor has no version counter, and
    the next call may run outside it); while a CUDA graph is captured, made afresh (a tensor made in a
    capture holds its values only when the graph replays)."""
    def build():
        with torch.inference_mode(False):
            return make()

    device = key[0]
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return build()
    return _CONSTS.get((_stream_of(device),) + key, build)


def _tile_index(device, n_kv: int) -> torch.Tensor:
    """``arange(n_kv)`` (int64) on ``device``, made once (:func:`_const`): the K/V tile numbers
    :func:`_ranges` takes."""
    return _const((device, "tile index", n_kv), lambda: torch.arange(n_kv, dtype=torch.int64, device=device))


def _drop_const(key: tuple) -> None:
    """Forget what :func:`_const` keeps under ``key`` for the current stream."""
    _CONSTS.drop((_stream_of(key[0]),) + key)


def cached_kv_ranges(key: Hashable, compute: Callable[[], torch.Tensor]) -> torch.Tensor:
    """The module-wide :class:`BlockMaskCache` (64 entries): the value stored under ``key``, else
    ``compute()`` (e.g. a ``functools.partial`` of :func:`kv_ranges`; the runtime stores the ranges with weak
    references to the tensors they were computed from, :meth:`b200c.runtime.mod_call.ModCall.ranges`) stored under it."""
    return _CACHE.get(key, compute)


def block_counts(ranges: torch.Tensor) -> dict:
    """Summary of :func:`kv_ranges`'s result ``(num_items, 4)``: a dict of ints ``items``,
    ``visited`` (K/V tiles the kernel visits, over all items), ``full`` (of which unmasked) and
    ``partial`` (masked: ``visited - full``)."""
    if ranges.dim() != 2 or ranges.shape[1] != 4:
        raise LaunchError(f"ranges has shape {tuple(ranges.shape)}; it must be (num_items, 4) from kv_ranges")
    r = ranges.to(torch.int64)
    visited = int((r[:, 3] - r[:, 0]).sum())
    full = int((r[:, 2] - r[:, 1]).sum())
    return {"items": int(r.shape[0]), "visited": visited, "full": full, "partial": visited - full}


__all__ = ["kv_ranges", "tensor_ranges", "check_mask_tensor", "block_counts", "cached_kv_ranges", "BlockMaskCache", "CHUNK_ELEMS", "EMPTY_RANGE",
           "MASK_ARGS"]
