"""``b200c.attention_with_kvcache``: a decoding step against a KV cache, in FlashAttention's shape
(``flash_attn_with_kvcache``).

New keys and values are written into the cache in place at ``cache_seqlens`` (torch index ops on the
device), then one split-KV launch (:mod:`b200c.runtime.split_kv`) attends each sequence's query rows to
its first ``cache_seqlens[b] + S_new`` keys: the kernel reads those lengths from the device
(``seqused_k``), so nothing here waits for the GPU and a serving loop can capture one CUDA graph per
batch size and replay it with new lengths. A paged cache (``block_table``) is read through the table;
:func:`paged_rows` is the index math both the host and the kernel use.
"""
from __future__ import annotations

import functools

import torch

from ..errors import LaunchError
from . import api, inputs, launcher
from .inputs import flag_value, keyword_given, no_such_keyword

_Tensor = torch.Tensor


def paged_rows(block_table: torch.Tensor, positions: torch.Tensor, page_size: int) -> torch.Tensor:
    """Rows of the flattened paged cache ``(num_blocks * page_size, H_kv, D)`` holding the tokens at
    ``positions`` of each sequence.

    Args:
        block_table: (B, max_blocks) int32: page ``j`` of sequence ``b`` is cache block ``block_table[b, j]``.
        positions: (B, n) int: token positions within each sequence (0-based).
        page_size: tokens per page.

    Returns:
        (B, n) int64 rows: ``block_table[b, p // page_size] * page_size + p % page_size``.
    """
    pages = torch.gather(block_table.long(), 1, torch.div(positions, page_size, rounding_mode="floor"))
    return pages * page_size + torch.remainder(positions, page_size)


def _lengths(cache_seqlens, batch: int, device) -> torch.Tensor:
    if isinstance(cache_seqlens, int) and not isinstance(cache_seqlens, bool):
        if cache_seqlens < 0:
            raise LaunchError(f"cache_seqlens={cache_seqlens} must be >= 0")
        return torch.full((batch,), cache_seqlens, dtype=torch.int32, device=device)
    if not isinstance(cache_seqlens, _Tensor) or cache_seqlens.dtype != torch.int32 or cache_seqlens.dim() != 1 \
            or cache_seqlens.shape[0] != batch:
        desc = (f"{tuple(cache_seqlens.shape)} {cache_seqlens.dtype}" if isinstance(cache_seqlens, _Tensor)
                else type(cache_seqlens).__name__ if type(cache_seqlens).__module__ == "builtins"
                else f"{inputs.type_name(cache_seqlens)} {cache_seqlens!r} (pass int(...) or a tensor)")
        raise LaunchError(f"cache_seqlens must be an int or a torch.int32 tensor of shape ({batch},) (one length per "
                          f"sequence), got {desc}")
    if cache_seqlens.device != device:
        raise LaunchError(f"cache_seqlens is on {cache_seqlens.device} but q is on {device}")
    if not cache_seqlens.is_contiguous():  # the kernel reads sequence b's length at b
        raise LaunchError(f"cache_seqlens has stride {cache_seqlens.stride(0)} (a view of a larger tensor?); the "
                          "kernel reads it as a contiguous (B,) array: pass cache_seqlens.contiguous()")
    return cache_seqlens


def _check_cache(q, k_cache, v_cache, block_table):
    if q.dim() != 4:
        raise LaunchError(f"q must be (B, S_q, H, D), got shape {tuple(q.shape)}")
    if q.dtype != torch.bfloat16:
        raise LaunchError(f"q is {q.dtype}; b200c kernels take torch.bfloat16 (q, k_cache, v_cache and the new k, v)")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(t, _Tensor) or t.dim() != 4:
            raise LaunchError(f"{name} must be a 4-D tensor ((B, S_max, H_kv, D), or (num_blocks, page_size, H_kv, D) "
                              f"with block_table), got {getattr(t, 'shape', type(t).__name__)}")
    if k_cache.shape != v_cache.shape:
        raise LaunchError(f"k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} must have one shape")
    bq, s_q, h, d = q.shape
    h_kv, d_kv = k_cache.shape[2], k_cache.shape[3]
    layouts = ("q is (B, S_q, H, D) and k_cache (B, S_max, H_kv, D) (flash_attn_with_kvcache's layout; "
               "with block_table (num_blocks, page_size, H_kv, D))")
    if d != d_kv:
        raise LaunchError(f"q has head dim D = {d} but k_cache has {d_kv}: {layouts}")
    if block_table is None and k_cache.shape[0] != bq:
        raise LaunchError(f"q has batch B = {bq} but k_cache has {k_cache.shape[0]} sequences: {layouts}")
    if h_kv < 1 or h % h_kv:
        s_max = k_cache.shape[1]
        hint = ("; q looks like (B, H, S_q, D): pass q.transpose(1, 2)"
                if h_kv >= 1 and s_q % h_kv == 0 and s_q > h else
                "; k_cache looks like (B, H_kv, S_max, D): pass k_cache.transpose(1, 2) and v_cache.transpose(1, 2) "
                "(views)" if block_table is None and s_max >= 1 and h % s_max == 0 and h_kv > s_max else "")
        raise LaunchError(f"q has H = {h} heads but k_cache has H_kv = {h_kv}; H must be a multiple of H_kv: "
                          f"{layouts}{hint}")
    if k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        raise LaunchError(f"k_cache and v_cache must be torch.bfloat16 like q, got {k_cache.dtype} and {v_cache.dtype}")
    if not torch.compiler.is_compiling():  # traced: checked when the op runs (_op_impl)
        _check_cache_layout(k_cache, v_cache)
    if block_table is not None:
        if not isinstance(block_table, _Tensor) or block_table.dtype != torch.int32 or block_table.dim() != 2 \
                or block_table.shape[0] != q.shape[0]:
            got = (f"a {block_table.dtype} tensor of shape {tuple(block_table.shape)}"
                   if isinstance(block_table, _Tensor) else type(block_table).__name__)
            raise LaunchError(f"block_table must be a torch.int32 tensor (B={q.shape[0]}, max_blocks), got {got}"
                              + (" (convert it with block_table.to(torch.int32))"
                                 if isinstance(block_table, _Tensor) and block_table.dtype != torch.int32 else ""))
        if not block_table.is_contiguous():  # the kernel reads row b at b * max_blocks
            raise LaunchError(f"block_table has strides {block_table.stride()} (a slice of a larger table?); the "
                              f"kernel reads it as a contiguous (B, max_blocks) array: pass block_table.contiguous()")
        page = k_cache.shape[1]
        if not 16 <= page <= 256 or page % 16:
            raise LaunchError(f"page size {page} (k_cache.shape[1] with block_table): use a multiple of 16 in 16..256")


# (shape, strides, storage offsets and pointers % 16) of the cache pairs that passed (the caches are bf16 by
# then): a layout seen before is not checked again (the full check costs ~6 us a tensor, a decoding step's budget)
_LAYOUTS_OK: set = set()


def _check_cache_layout(k_cache, v_cache) -> None:
    """The TMA rules for the caches (a paged cache's too: its tensor maps are made from it), by their names.
    Real tensors only (eager calls and the custom op's run; a traced call is checked when it runs)."""
    key = (k_cache.shape, k_cache.stride(), k_cache.storage_offset(), k_cache.data_ptr() % 16, v_cache.stride(),
           v_cache.storage_offset(), v_cache.data_ptr() % 16)
    if key in _LAYOUTS_OK:
        return
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        inputs._check_layout(name, t.transpose(1, 2), True)
    if len(_LAYOUTS_OK) < 4096:
        _LAYOUTS_OK.add(key)


def _append(k_cache, v_cache, k, v, lengths, block_table):
    """Write ``k``, ``v`` (B, S_new, H_kv, D) into the caches at positions ``lengths[b] + i`` (in place)."""
    b, s_new = k.shape[0], k.shape[1]
    pos = lengths.long()[:, None] + torch.arange(s_new, device=k.device)[None, :]  # (B, S_new)
    if block_table is None:
        rows = torch.arange(b, device=k.device)[:, None].expand(b, s_new)
        k_cache[rows, pos] = k
        v_cache[rows, pos] = v
        return
    page = k_cache.shape[1]
    flat = paged_rows(block_table, pos, page)
    pairs = None
    for cache, new in ((k_cache, k), (v_cache, v)):
        if cache.stride(0) == page * cache.stride(1):  # blocks and their rows merge into one index
            cache.view(-1, *cache.shape[2:])[flat] = new
        else:  # e.g. one half of a (num_blocks, 2, page, H_kv, D) K/V tensor: (block, row) pairs
            if pairs is None:
                pairs = (flat // page, flat % page)
            cache[pairs] = new


def attention_with_kvcache(q, k_cache, v_cache, k=None, v=None, *, cache_seqlens=None, block_table=None,
                           causal: bool = False, softmax_scale=None, return_lse: bool = False, schedule=None,
                           target: str = "auto", num_splits: int = 0, check_inputs: bool = True, **kwargs):
    """One attention step against a KV cache, like FlashAttention's ``flash_attn_with_kvcache``.

    Args:
        q: (B, S_q, H, D) bfloat16 on a CUDA device (S_q: 1 for decoding, a few for speculative
            decoding, any S_q works). D is 64, 128 or 256.
        k_cache, v_cache: (B, S_max, H_kv, D) (contiguous cache), or (num_blocks, page_size, H_kv,
            D) with ``block_table`` (paged; page_size a multiple of 16 in 16..256); q's dtype and
            device; H a multiple of H_kv (GQA/MQA). Updated in place when ``k``/``v`` are given.
        k, v: None, or (B, S_new, H_kv, D): keys/values of the new tokens, written into the cache at
            positions ``cache_seqlens[b] .. cache_seqlens[b] + S_new - 1`` before the attention.
        cache_seqlens: required; an int or a torch.int32 tensor (B,) on q's device: tokens already in each
            sequence's cache. The call attends to the first ``cache_seqlens[b] + S_new`` keys. The
            values must leave room for the new tokens (``cache_seqlens[b] + S_new <= S_max``, or the
            pages the table names); they are read on the host only by ``check_inputs`` (below), else
            they stay on the device (no synchronization; CUDA-graph capturable).
        block_table: None, or (B, max_blocks) torch.int32: sequence ``b``'s token ``t`` lives in
            cache block ``block_table[b, t // page_size]``, row ``t % page_size`` (vLLM's layout).
        causal: bottom-right aligned per sequence (query row ``r`` sees keys up to
            ``r + L_b - S_q``, ``L_b`` its key count): the new tokens see the cache and each other
            causally.
        softmax_scale: natural-log units; default ``1 / sqrt(D)``.
        return_lse: also return the LSE, float32 (B, H, S_q).
        schedule, target: as :func:`b200c.attention` (the schedule's split-KV build runs).
        num_splits: 0: chosen per call from the shape and the SM count
            (:func:`b200c.codegen.work.choose_splits`, from S_max: the lengths stay on the device);
            1..128: that many splits.
        check_inputs: True (default): read ``cache_seqlens`` and ``block_table`` on the host first (one
            synchronization) and refuse, with the caches untouched, a negative length, a length past the
            cache's capacity (``cache_seqlens[b] + S_new`` above S_max, or above ``max_blocks * page_size``)
            and a table entry of a used page outside ``0..num_blocks - 1``; without the check such values
            make the append's index kernel fail on the device, which loses the CUDA context. False: no
            synchronization, for a serving loop that guarantees the values (required inside a CUDA-graph
            capture, which cannot synchronize).

    Returns:
        ``out`` (B, S_q, H, D) bfloat16, or ``(out, lse)`` with ``return_lse``. A sequence with no key
        gives O = 0 and LSE = -inf.

    Raises:
        LaunchError: a tensor or argument rule is broken (names it, the rule and the value); with
            ``check_inputs``, a bad length or table entry (naming the sequence, the entry and the limit),
            or a CUDA-graph capture. Also a keyword this function does not take (``**kwargs`` only catches
            it to say what to pass): ``flash_attn_with_kvcache``'s keywords b200c's KV-cache step has
            no counterpart for (``window_size``, ``softcap``, ``alibi_slopes``, ``rotary_cos`` /
            ``rotary_sin`` / ``rotary_interleaved``, ``cache_batch_idx``, ``cache_leftpad``) at a value
            other than their no-op default (those pass, as does ``return_softmax_lse``, which is
            ``return_lse``), or a misspelt name.
        BackwardNotSupportedError: with grad mode on, q, a cache or a new k / v requires grad (the step
            is forward-only: its output would carry no gradient).
        ScheduleError / ResourceError / BuildError / UnsupportedDeviceError: as :func:`b200c.attention`.

    torch.compile: traced as the custom op ``torch.ops.b200c.attention_with_kvcache`` (the caches marked as
    mutated, a fake impl for the shapes), so ``torch.compile(fullgraph=True)`` of a decoding step has no
    graph break; ``softmax_scale`` must then be a Python number.

    A paged cache is read in place: the load warp looks each K/V tile's pages up in the table and loads
    them with TMA boxes of ``gcd(block_n, page_size)`` rows (one box per page run of a tile when the page
    holds a tile; several small boxes, a gather, when it does not).
    """
    if kwargs:
        return_lse = _flash_attn_keywords(kwargs, return_lse)
    if cache_seqlens is None:
        raise LaunchError("attention_with_kvcache needs cache_seqlens= (the tokens already in each sequence's "
                          "cache, before the new k, v): an int or a torch.int32 tensor (B,) on q's device")
    if not isinstance(q, _Tensor):
        raise LaunchError(f"q must be a torch.Tensor, got {type(q).__name__}")
    _check_no_grad(q=q, k_cache=k_cache, v_cache=v_cache, k=k, v=v)
    _check_cache(q, k_cache, v_cache, block_table)
    if (k is None) != (v is None):
        raise LaunchError("pass both k and v (the new tokens) or neither")
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or not 0 <= num_splits <= 128:
        raise LaunchError(f"num_splits={num_splits!r}: use 0 (chosen per call) or 1..128")
    batch = q.shape[0]
    lengths = _lengths(cache_seqlens, batch, q.device)
    if k is not None:
        if k.dim() != 4 or k.shape[0] != batch or k.shape[2:] != k_cache.shape[2:] or v.shape != k.shape:
            raise LaunchError(f"k and v must be (B={batch}, S_new, H_kv={k_cache.shape[2]}, D={k_cache.shape[3]}), "
                              f"got {tuple(k.shape)} and {tuple(v.shape)}")
        for name, t in (("k", k), ("v", v)):  # before anything is written into the caches
            if t.dtype != k_cache.dtype or t.device != k_cache.device:
                raise LaunchError(f"the new {name} is {t.dtype} on {t.device}; it is written into the caches, "
                                  f"{k_cache.dtype} on {k_cache.device}: pass {name}.to(k_cache)")
    scale = api._check_scale(softmax_scale)
    causal, return_lse = flag_value("causal", causal), flag_value("return_lse", return_lse)
    check_inputs = flag_value("check_inputs", check_inputs)
    s_new = 0 if k is None else k.shape[1]
    if isinstance(cache_seqlens, int) and cache_seqlens + s_new > _capacity(k_cache, block_table):
        _too_long(cache_seqlens, s_new, k_cache, block_table, None)  # an int: no device value to read
    if torch.compiler.is_compiling():  # one opaque op in the graph (its fake impl gives the shapes)
        base = api._traced_json(q, schedule, target)
        if scale is None:
            scale = float(q.shape[-1]) ** -0.5
        out, lse = torch.ops.b200c.attention_with_kvcache(q, k_cache, v_cache, k, v, lengths, block_table, base,
                                                          float(scale), target, causal, return_lse, num_splits,
                                                          check_inputs)
        return (out, lse) if return_lse else out
    if check_inputs:
        check_values(q, lengths, s_new, k_cache, block_table)
    if schedule is None:
        schedule = api.default_schedule_for(q, target)
    base = api._schedule_json(schedule, target)
    out, lse = _attend(q, k_cache, v_cache, k, v, lengths, block_table, base, scale, target, causal, return_lse,
                       num_splits)
    return (out, lse) if return_lse else out


def _capacity(k_cache, block_table) -> int:
    """Tokens a sequence's cache holds: S_max, or max_blocks * page_size of a paged cache."""
    return k_cache.shape[1] if block_table is None else block_table.shape[1] * k_cache.shape[1]


def _too_long(length: int, s_new: int, k_cache, block_table, b) -> None:
    where = "" if b is None else f"[{b}]"
    limit = (f"S_max = {k_cache.shape[1]} (k_cache.shape[1])" if block_table is None else
             f"max_blocks * page_size = {block_table.shape[1]} * {k_cache.shape[1]} = "
             f"{_capacity(k_cache, block_table)} (block_table.shape[1] pages of k_cache.shape[1] tokens)")
    raise LaunchError(f"cache_seqlens{where} + S_new = {length} + {s_new} = {length + s_new} tokens, more than the "
                      f"cache holds: {limit}; use a larger cache (or more pages in the table) or shorter lengths")


def check_values(q, lengths, s_new: int, k_cache, block_table) -> None:
    """The device values of a KV-cache call, read on the host in one synchronization (``check_inputs``):
    every length non-negative and within the cache's capacity with the new tokens, and every table entry of
    a page the sequence uses (``ceil((cache_seqlens[b] + S_new) / page_size)`` pages) a block of the cache.

    Raises:
        LaunchError: the first bad value (sequence, entry, value and limit), or a CUDA-graph capture in
            progress (a capture cannot synchronize: pass ``check_inputs=False``).
    """
    if q.is_cuda and torch.cuda.is_current_stream_capturing():
        raise LaunchError("attention_with_kvcache(check_inputs=True) reads cache_seqlens and block_table on the host "
                          "(a synchronization), which a CUDA-graph capture cannot do: pass check_inputs=False in "
                          "captured steps (the serving loop then guarantees the lengths and the table)")
    if lengths.numel() == 0:  # an empty batch: nothing to read (the launcher returns the empty result)
        return
    # few kernels on the common (valid) path: each torch op is a launch, about 5 us of host time on a GPU;
    # where a bad value is, is looked up only once one is known to be there
    lo, hi = torch.aminmax(lengths)  # int32
    vals = [lo, hi]
    if block_table is not None and block_table.shape[1] > 0:
        page, blocks = k_cache.shape[1], k_cache.shape[0]
        # pages sequence b uses (<= 0 for a negative length: none; a length past the capacity is refused
        # before the table is looked at); an entry is bad where clamping it into 0..blocks-1 moves it
        pages = (lengths + (s_new + page - 1)).div_(page, rounding_mode="floor")
        col = torch.arange(block_table.shape[1], dtype=torch.int32, device=block_table.device)
        used = col[None, :] < pages[:, None]
        bad = used if blocks == 0 else (block_table.clamp(0, blocks - 1) != block_table).logical_and_(used)
        any_bad, first = torch.max(bad.view(-1).int(), 0)  # the first bad entry's index (ties: the first)
        # torch.take, not block_table.flatten()[first]: indexing by a tensor reads its value on the host
        vals += [any_bad, first.int(), torch.take(block_table, first)]
    got = torch.stack(vals).tolist()  # the one synchronization
    if got[0] < 0:
        b = int(lengths.argmin())
        raise LaunchError(f"cache_seqlens[{b}] = {got[0]}: lengths (tokens already cached) must be >= 0")
    if got[1] + s_new > _capacity(k_cache, block_table):
        b = int(lengths.argmax())
        _too_long(int(lengths[b]), s_new, k_cache, block_table, b)
    if len(got) > 2 and got[2]:
        b, j = divmod(got[3], block_table.shape[1])
        raise LaunchError(f"block_table[{b}, {j}] = {got[4]} is not a block of the paged cache (num_blocks = "
                          f"{k_cache.shape[0]}: entries 0..{k_cache.shape[0] - 1}); sequence {b} uses its first "
                          f"{-(-(int(lengths[b]) + s_new) // k_cache.shape[1])} pages (cache_seqlens[{b}] + S_new = "
                          f"{int(lengths[b]) + s_new} tokens of {k_cache.shape[1]} per page)")


def _check_no_grad(**tensors) -> None:
    """A KV-cache step is forward-only: with grad mode on, an input that requires grad would get no gradient.

    Raises:
        BackwardNotSupportedError: naming the first such input.
    """
    if not torch.is_grad_enabled():
        return
    for name, t in tensors.items():
        if isinstance(t, _Tensor) and t.requires_grad:
            from ..errors import BackwardNotSupportedError

            raise BackwardNotSupportedError(
                f"attention_with_kvcache is forward-only and {name} requires grad: its output would carry no "
                "gradient; call it under torch.no_grad() / torch.inference_mode() or pass detached tensors; "
                "b200c.attention (and attention_varlen) run the backward for training")


# flash_attn_with_kvcache's keywords that attention_with_kvcache has no counterpart for, and what to do instead
_FA_ONLY = {
    "window_size": "a sliding window is not supported in the KV-cache step yet (b200c.attention takes window_size=)",
    "softcap": "score softcapping is not supported in the KV-cache step yet (b200c.attention takes "
               "score_mod=b200c.mods.softcap(...))",
    "alibi_slopes": "ALiBi is not supported in the KV-cache step yet (b200c.attention takes "
                    "score_mod=b200c.mods.alibi(...))",
    "rotary_cos": "rotary embedding is not applied here: rotate q and the new k before the call",
    "rotary_sin": "rotary embedding is not applied here: rotate q and the new k before the call",
    "rotary_interleaved": "rotary embedding is not applied here: rotate q and the new k before the call",
    "cache_batch_idx": "the caches are indexed by q's batch index (or through block_table); gather the cache "
                       "rows first",
    "cache_leftpad": "left-padded caches are not supported: keep each sequence's tokens from position 0",
}


# other libraries' names (torch SDPA, FlashAttention-4's CuTe interface, FlexAttention) of keywords this one has
_OTHER_NAMES = {
    "scale": "softmax_scale= (torch SDPA's scale)",
    "is_causal": "causal=",
    "page_table": "block_table= (a torch.int32 (B, max_blocks) table of page indices)",
    "seqused_k": "cache_seqlens= (the tokens already in each sequence's cache, before the new k, v)",
    "cache_seqlen": "cache_seqlens=",
    "seqlens_k": "cache_seqlens=",
}


def _no_op(name: str, value) -> bool:
    """Whether flash_attn_with_kvcache's keyword ``name`` has the value that does nothing (its default)."""
    if name in ("rotary_cos", "rotary_sin", "cache_batch_idx", "cache_leftpad", "alibi_slopes"):
        return value is None
    if name == "window_size":
        return isinstance(value, (tuple, list)) and tuple(value) == (-1, -1)
    if name == "softcap":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0
    return False


def _flash_attn_keywords(kwargs: dict, return_lse) -> bool:
    """The keywords of a call written for ``flash_attn_with_kvcache``: ``return_softmax_lse`` is
    ``return_lse`` (both given: they must agree), its other keywords pass at their no-op defaults
    (``rotary_cos=None``, ``window_size=(-1, -1)``, ``softcap=0.0``, ...; ``rotary_interleaved`` with no
    rotary tables); anything else raises :func:`_unexpected_keyword`'s error. Returns ``return_lse``."""
    rest = dict(kwargs)
    if "return_softmax_lse" in rest:
        flag = rest.pop("return_softmax_lse")
        if not isinstance(flag, bool):
            raise LaunchError(f"return_softmax_lse={flag!r}: use True or False (b200c's name: return_lse)")
        if return_lse and not flag:
            raise LaunchError("return_lse=True and return_softmax_lse=False disagree: pass one of them")
        return_lse = return_lse or flag
    if "rotary_interleaved" in rest and rest.get("rotary_cos") is None:
        rest.pop("rotary_interleaved")  # means nothing without rotary tables
    rest = {k: v for k, v in rest.items() if not _no_op(k, v)}
    if rest:
        raise _unexpected_keyword(rest)
    return return_lse


def _unexpected_keyword(kwargs: dict) -> LaunchError:
    """The error of a call to :func:`attention_with_kvcache` with a keyword it does not take (the first of
    ``kwargs``): flash_attn_with_kvcache's names, its keywords without a counterpart here, or a misspelling
    (with the closest name)."""
    name, value = next(iter(kwargs.items()))
    given = keyword_given("attention_with_kvcache", name, value)
    if name in _FA_ONLY:
        return LaunchError(f"{given}: {_FA_ONLY[name]}")
    if name in _OTHER_NAMES:
        return LaunchError(f"{given}: attention_with_kvcache calls it {_OTHER_NAMES[name]}")
    return no_such_keyword("attention_with_kvcache", attention_with_kvcache, name, given, ("q", "k_cache", "v_cache"))


def _attend(q, k_cache, v_cache, k, v, lengths, block_table, base: str, scale, target: str, causal: bool,
            return_lse: bool, num_splits: int):
    """The checked call of :func:`attention_with_kvcache` (and the real impl of its custom op): append the new
    tokens, then one split-KV launch. Returns ``(out, lse or None)``."""
    s_q = q.shape[1]
    s_new = 0
    if k is not None:
        s_new = k.shape[1]
        _append(k_cache, v_cache, k, v, lengths, block_table)
    used = lengths + s_new if s_new else lengths
    if used.dtype != torch.int32:
        used = used.to(torch.int32)

    token = _token(base, num_splits)
    qs = q
    folded = launcher.fold_gqa(q, k_cache, "bshd") if s_q == 1 else None
    if folded is not None:  # one query row per head: the query heads of a K/V head become its rows
        qs, causal = folded, False
    if block_table is None:
        out, lse = launcher.run(token, target, "bshd", qs, k_cache, v_cache, scale, _SPLIT_SOURCE, causal, return_lse,
                                _CallValues(used, None, token[1]))
    else:
        out, lse = _run_paged(token, target, qs, k_cache, v_cache, block_table, used, scale, causal, return_lse)
    if folded is not None:
        out, lse = launcher.unfold_gqa(out, lse, q, "bshd")
    return out, lse


# ---- the custom op (torch.compile) -------------------------------------------------------------------
# ``torch.ops.b200c.attention_with_kvcache``: k_cache and v_cache are mutated (the append), so the schema
# marks them and functionalization keeps the write; the fake impl gives out (B, S_q, H, D) like q and the
# LSE (B, H, S_q) float32 (empty without return_lse). Eager calls do not go through it (one dispatcher hop
# less per decoding step).

def _op_impl(q, k_cache, v_cache, k, v, cache_seqlens, block_table, schedule_json, softmax_scale, target, causal,
             return_lse, num_splits, check_inputs):
    _check_cache_layout(k_cache, v_cache)
    if check_inputs:
        check_values(q, cache_seqlens, 0 if k is None else k.shape[1], k_cache, block_table)
    out, lse = _attend(q, k_cache, v_cache, k, v, cache_seqlens, block_table, schedule_json, softmax_scale, target,
                       causal, return_lse, num_splits)
    return out, (lse if lse is not None else q.new_empty((0,), dtype=torch.float32))


def _op_fake(q, k_cache, v_cache, k, v, cache_seqlens, block_table, schedule_json, softmax_scale, target, causal,
             return_lse, num_splits, check_inputs):
    b, s_q, h = q.shape[0], q.shape[1], q.shape[2]
    lse = q.new_empty((b, h, s_q), dtype=torch.float32) if return_lse else q.new_empty((0,), dtype=torch.float32)
    return torch.empty_like(q, memory_format=torch.contiguous_format), lse


def _register():
    from .op import _lib

    if hasattr(torch.ops.b200c, "attention_with_kvcache"):
        return
    _lib.define("attention_with_kvcache(Tensor q, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor? k, Tensor? v, "
                "Tensor cache_seqlens, Tensor? block_table, str schedule_json, float softmax_scale, str target, "
                "bool causal, bool return_lse, int num_splits, bool check_inputs) -> (Tensor, Tensor)")
    _lib.impl("attention_with_kvcache", _op_impl, "CompositeExplicitAutograd")
    torch.library.register_fake("b200c::attention_with_kvcache", _op_fake, lib=_lib)


_register()


@functools.lru_cache(maxsize=256)
def _token(base: str, num_splits: int) -> tuple:
    """The kernel token of a KV-cache call (cached: a decoding step parses no JSON): (JSON of the schedule's
    split-KV build, :func:`b200c.runtime.split_kv.split_token`; fixed split count or None). The count is the
    caller's ``num_splits``, else the schedule's ``kv_splits`` where it fixes one (2..128), else None (chosen per
    call); the kernel reads the lengths and the table."""
    from ..dsl import Schedule
    from .split_kv import split_token

    kv_splits = Schedule.from_json(base).kv_splits
    return split_token(base), num_splits or (kv_splits if kv_splits not in (None, 0, 1) else None)


class _CallValues:
    """The per-call kernel values of a KV-cache call (:func:`b200c.runtime.launcher.run`'s ``mod_call``
    slot): the device lengths ``seqused_k`` and the paged cache's ``block_table``."""

    __slots__ = ("lengths", "table", "num_splits")

    def __init__(self, lengths, table, num_splits=None):
        self.lengths, self.table, self.num_splits = lengths, table, num_splits

    def values(self, entry, causal):
        out = {"seqused_k": self.lengths.data_ptr()}
        if self.table is not None:
            out["block_table"] = self.table.data_ptr()
        return out


def _run_paged(token, target, q, k_cache, v_cache, block_table, used, scale, causal, return_lse):
    """A paged KV cache through the launch-entry cache: the kernel's K/V tensor maps are the caches
    (num_blocks, page_size, H_kv, D) themselves (a block is the batch coordinate), with boxes of
    ``gcd(block_n, page_size)`` rows, each inside one page; the table is read by the load warp."""
    key = ("paged", token, target, causal, return_lse, q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(),
           q.shape, k_cache.shape, v_cache.shape, q.stride(), k_cache.stride(), v_cache.stride(),
           tuple(block_table.shape), q.get_device())
    e = launcher._entries.get(key)
    if e is None:
        e = _new_paged_entry(key, token, target, q, k_cache, v_cache, block_table, causal, return_lse)
        if not isinstance(e, launcher.Entry):
            return e
    return e.call(q, scale, _CallValues(used, block_table).values(e, causal))


class _SplitSource:
    """Kernel source of KV-cache tokens ``(schedule JSON of the split-KV build, fixed split count or None)``
    (:func:`b200c.runtime.launcher.run`): the count is the launch's, the kernel the schedule's."""

    @staticmethod
    def specialize(token, head_dim: int):
        from . import op

        return (op.specialized_json(token[0], head_dim), token[1])

    @staticmethod
    def load(token, target: str, device: int):
        from . import op

        return op.loaded_kernel(token[0] if isinstance(token, tuple) else token, target, device)


_SPLIT_SOURCE = _SplitSource()


def _new_paged_entry(key, token, target, q, k_cache, v_cache, block_table, causal, return_lse):
    import dataclasses
    import math

    from . import inputs, launcher, op
    from .split_kv import SplitLaunch

    page = k_cache.shape[1]
    batch, max_blocks = block_table.shape
    h_kv, d = k_cache.shape[2], k_cache.shape[3]
    qv = q.transpose(1, 2)  # (B, H, S_q, D)
    # the problem as the kernel sees it: (B, H_kv, max_blocks * page, D) keys per sequence (a stride-0 stand-in
    # for the rules of the sizes; the data comes through the table)
    stand_in = k_cache.new_empty(1, 1, 1, d).expand(batch, h_kv, max_blocks * page, d)
    problem = inputs.validate_inputs(qv, stand_in, stand_in, check_device=False)
    inputs._check_devices({"q": qv, "k": k_cache, "v": v_cache})
    if block_table.device != q.device:
        raise LaunchError(f"block_table is on {block_table.device} but q is on {q.device}")
    if not problem.needs_launch:
        r = inputs.empty_result(qv, problem).transpose(1, 2)
        lse = torch.full((problem.batch, problem.heads, problem.seq_q), float("-inf"), dtype=torch.float32,
                         device=q.device) if return_lse else None
        return r, lse
    fixed = token[1]
    token = op.specialized_json(token[0], problem.head_dim)
    device = q.get_device()
    lk = op.SCHEDULES.load(token, target, device)
    launcher.check_capabilities(lk, causal, return_lse, problem.heads != problem.heads_kv, False)
    info = lk.built.launch
    pack = launcher.pack_heads(info.q_stages, problem.heads, problem.heads_kv, problem.seq_q, causal, False,
                               info.block_m)
    lk, info, splits = launcher._split_kernel(lk, token, target, device, op.SCHEDULES, problem, pack, causal, fixed)
    n_work = info.num_work_items(problem.batch, problem.heads, problem.seq_q, pack, splits)
    launcher.check_work_items(n_work)
    grid = info.grid(problem.batch, problem.heads, problem.seq_q, lk.num_sms, pack, splits)
    launcher.check_grid(grid)
    box = math.gcd(info.block_n, page)
    paged_info = dataclasses.replace(info, tma_kv_box_rows=box)
    maps = launcher.tensor_maps(lk, [("q", qv)])
    from . import driver

    with driver.in_context(lk.context):
        maps += [driver.encode_tensor_map(n, t.transpose(1, 2), paged_info) for n, t in (("k", k_cache), ("v", v_cache))]
    sample = torch.empty_like(q)
    out_view = sample.transpose(1, 2)
    b, h, s = problem.batch, problem.heads, problem.seq_q
    lse_shape = (b, h, s) if return_lse else None
    lse_strides = (h * s, s, 1) if return_lse else (0, 0, 0)
    out_strides = tuple(out_view.stride()[:3])
    values = launcher.kernel_arguments(problem, maps, out_strides, lse_strides, causal, pack, problem.head_dim ** -0.5)
    values.update(launcher.mod_defaults(info))
    split = SplitLaunch(lk, splits, b * h, s, h, out_strides, lse_strides)
    values.update(split.kernel_values(max_blocks, page, box))
    e = launcher.Entry(lk, problem, grid, values, pack, lse_shape, q.device, sample, split)
    launcher.remember(key, e)
    return e


__all__ = ["attention_with_kvcache", "paged_rows"]
