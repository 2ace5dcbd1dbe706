"""Calls with mods (score_mod / mask_mod / attention sinks): the traced functions (cached per
function), the kernel token and each launch's values of the mods' kernel parameters.

A :class:`ModCall` holds what one call adds to the plain attention call: the
:class:`~b200c.dsl.mod_records.ModSet` (part of the kernel's identity: the traced graph, not the
function's name or the captured values), the captured tensors and the sink logits (kernel
arguments, written per launch, so new values never recompile) and the mask function the block mask
is computed from (:mod:`b200c.runtime.block_mask`, cached per mask, captured tensors, shapes and
tile shape).
"""
from __future__ import annotations

import collections
import threading
import weakref
from collections import OrderedDict

import torch

from ..errors import LaunchError

_TORCH_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "i32": torch.int32,
                 "i64": torch.int64, "bool": torch.bool}
_traced: "OrderedDict" = OrderedDict()  # (function identities) -> (functions, ModSet, tensors)
_traced_lock = threading.Lock()
_MAX_TRACED = 32  # each entry keeps its functions (and what they capture) alive
_light: dict = {}  # ModSet JSON -> b200c.codegen.mods.light of it (~140 us to compute: not per call)
_kv_dims_of: dict = {}  # ModSet JSON -> b200c.codegen.mods.kv_indexed_dims of it
_specialized: dict = {}  # (ModSet JSON, small_indices, unit_dims) -> ModCall.for_sizes's (ModSet, its JSON)
_uncached = collections.deque(maxlen=64)  # block masks computed for one call only, alive until 64 later ones


class ModCall:
    """The mods of one call.

    Attributes:
        mods: the :class:`~b200c.dsl.mod_records.ModSet` compiled into the kernel.
        mods_json: its canonical JSON (the kernel token's second half).
        tensors: the captured tensors, in ``mods.captured`` order (kernel parameters ``cap{k}``).
        sinks: FP32 (H,) sink logits on the call's device, or None.
        mask_fn: the mask_mod (evaluated with torch ops for the block mask), or None.
        mask_uses: the mask_mod's arguments that its value depends on.
        mask_tensor: the mask_mod's values as a 4-D bool tensor broadcastable to (B, H, S_q, S_kv) (an SDPA
            boolean ``attn_mask``: the block mask is computed from it by
            :func:`b200c.runtime.block_mask.tensor_ranges`), or None.
    """

    __slots__ = ("mods", "mods_json", "tensors", "sinks", "mask_fn", "mask_uses", "mask_tensor")

    def __init__(self, mods, tensors, sinks, mask_fn, mask_uses, mods_json=None, mask_tensor=None):
        self.mods = mods
        self.mods_json = mods.to_json() if mods_json is None else mods_json  # given: the caller's cached JSON
        self.tensors = tuple(tensors)
        self.sinks = sinks
        self.mask_fn = mask_fn
        self.mask_uses = mask_uses
        self.mask_tensor = mask_tensor

    def for_sizes(self, *sizes) -> "ModCall":
        """This call's mods specialised to its sizes and captured tensors (each another kernel, cached
        like any): :attr:`~b200c.dsl.mod_records.ModSet.small_indices` set when every size (B, H, S_q,
        S_kv; varlen: the longest sequences) is below 2^21 (the kernel may then convert index sums to
        float without the I2F), and per captured tensor the
        :attr:`~b200c.dsl.mod_records.CapturedTensor.unit_dims`: the dimensions the score_mod indexes by
        key that this tensor has with stride 1 (its keys are read at constant offsets from one address per
        tile)."""
        from ..codegen.mods import SMALL_INDEX, kv_indexed_dims

        small = not self.mods.small_indices and all(0 <= int(s) < SMALL_INDEX for s in sizes)
        dims = _memo(_kv_dims_of, self.mods_json, lambda: kv_indexed_dims(self.mods))
        caps = self.mods.captured
        units = tuple(tuple(d for d in dd if t.stride(d) == 1) for dd, t in zip(dims, self.tensors))
        if not small and all(u == c.unit_dims for u, c in zip(units, caps)):
            return self

        def specialise():  # per ModSet and specialisation, not per call (a replace and its JSON: ~15 us)
            import msgspec

            captured = tuple(c if u == c.unit_dims else msgspec.structs.replace(c, unit_dims=u)
                             for u, c in zip(units, caps))
            mods = msgspec.structs.replace(self.mods, small_indices=self.mods.small_indices or small,
                                           captured=captured)
            return mods, mods.to_json()

        mods, mods_json = _memo(_specialized, (self.mods_json, small, units), specialise)
        return ModCall(mods, self.tensors, self.sinks, self.mask_fn, self.mask_uses, mods_json, self.mask_tensor)

    @property
    def light(self) -> bool:
        """:func:`b200c.codegen.mods.light` of :attr:`mods` (whether the built-in schedule keeps the dense
        K/V tiles), computed once per ModSet."""
        from ..codegen.mods import light

        return _memo(_light, self.mods_json, lambda: light(self.mods))

    def check(self, q, heads: int) -> None:
        """The captured tensors and the sinks are usable with query ``q`` (H = ``heads``).

        Raises:
            LaunchError: a tensor on another device, or sinks that are not (H,) real numbers.
        """
        for k, t in enumerate(self.tensors):
            if t.device != q.device:
                raise LaunchError(f"the mods capture a tensor on {t.device} (captured tensor {k}, shape "
                                  f"{tuple(t.shape)}) but q is on {q.device}; move it to {q.device}")
        if self.sinks is not None and tuple(self.sinks.shape) != (heads,):
            raise LaunchError(f"sinks has shape {tuple(self.sinks.shape)}; it must be (H,) = ({heads},): one logit "
                              "per query head")

    def values(self, entry, causal: bool, cu_seqlens=None, check_seqlens: bool = True) -> dict:
        """The mods' kernel parameter values for one launch of ``entry`` (a
        :class:`b200c.runtime.launcher.Entry`): captured pointers and strides, sinks, block mask
        (``cu_seqlens``: a varlen call's two prefix-sum tensors; ``check_seqlens``: False skips the block
        mask's check of their values, which reads them back from the device)."""
        out = {}
        for k, t in enumerate(self.tensors):
            out[f"cap{k}"] = t.data_ptr()
            for d, st in enumerate(t.stride()):
                out[f"cap{k}_stride{d}"] = st
        if self.mods.sinks:
            out["sinks"] = self.sinks.data_ptr()
        if self.mods.mask_mod is not None:
            out["kv_ranges"] = self.ranges(entry, causal, cu_seqlens, check_seqlens).data_ptr()
        return out

    def ranges(self, entry, causal: bool, cu_seqlens=None, check_seqlens: bool = True) -> torch.Tensor:
        """The block mask of this call (:func:`b200c.runtime.block_mask.kv_ranges`), cached."""
        from .block_mask import _CACHE, cached_kv_ranges, kv_ranges, tensor_ranges

        p = entry.problem
        info = entry.lk.built.launch
        work = info.work()
        device = entry.torch_device
        inputs = self.tensors + (tuple(cu_seqlens) if cu_seqlens is not None else ())
        # a view made per call (an SDPA mask of fewer than 4 dimensions, reshaped) is its base tensor's data:
        # the identity check compares the tensors that own the memory (pointer, shape, strides and the
        # shared version counter are in the key)
        owners = tuple(t if t._base is None else t._base for t in inputs)
        cuda = device.type == "cuda"
        stream = torch.cuda.current_stream(device) if cuda else None

        def compute():
            if self.mask_tensor is not None and cu_seqlens is None and not causal:
                ranges = tensor_ranges(self.mask_tensor, work, batch=p.batch, heads=p.heads, seq_q=p.seq_q,
                                       seq_kv=p.seq_kv, pack_heads=entry.pack_heads)
            else:
                ranges = kv_ranges(self.mask_fn, work, batch=p.batch, heads=p.heads, heads_kv=p.heads_kv,
                                   seq_q=p.seq_q, seq_kv=p.seq_kv, causal=causal, pack_heads=entry.pack_heads,
                                   cu_seqlens_q=None if cu_seqlens is None else cu_seqlens[0],
                                   cu_seqlens_k=None if cu_seqlens is None else cu_seqlens[1], device=device,
                                   uses=self.mask_uses, check_seqlens=check_seqlens)
            done = None
            if cuda:
                done = torch.cuda.Event()
                done.record(stream)
            # weak references to the inputs are kept with the result: a pointer and version seen again belong
            # to the same tensors only while they are alive (a freed block reused by new values would otherwise
            # hit), and the cache must not keep them alive (strong references kept a model's last 64 masks:
            # 2.1 GB of the padded decoder's (2, 1, 4096, 4096) masks)
            return ranges, tuple(weakref.ref(t) for t in owners), stream, done

        if any(t.is_inference() for t in inputs):
            # made under torch.inference_mode: no version counter, so a write in place could not be told from
            # the tensor seen before; computed for this call only, and kept alive past its launch (the caller
            # keeps only the pointer; freed before the launch is enqueued, the block could be reused and
            # written first)
            ranges = compute()[0]
            _uncached.append(ranges)
            return ranges
        caps = tuple((t.data_ptr(), t._version, tuple(t.shape), t.stride()) for t in self.tensors)
        seqs = None if cu_seqlens is None else tuple((t.data_ptr(), t._version) for t in cu_seqlens)
        key = (self.mods_json, caps, seqs, work.block_m, work.block_n, work.q_stages, p.batch, p.heads, p.heads_kv,
               p.seq_q, p.seq_kv, causal, entry.pack_heads, str(device))
        ranges, kept, made_on, done = cached_kv_ranges(key, compute)
        if any(a() is not b for a, b in zip(kept, owners)):  # other tensors at the same addresses: compute again
            hit = compute()
            _CACHE.put(key, hit)
            ranges, kept, made_on, done = hit
        if cuda and made_on != stream:  # computed on another stream: wait for it, and keep it alive for this one
            stream.wait_event(done)
            ranges.record_stream(stream)
        return ranges


def _memo(table: dict, key, make):
    """``table[key]``, else ``make()`` stored under ``key`` (the table is emptied past 256 entries): the
    per-ModSet facts a call needs (a graph walk, a replace and its JSON), computed once, not per call."""
    hit = table.get(key)
    if hit is None:
        hit = make()
        if len(table) > 256:
            table.clear()
        table[key] = hit
    return hit


def _identity(fn, depth: int = 3) -> tuple:
    """What a traced function's result depends on besides its code: the function object, the objects
    its closure cells, defaults and the globals its code names hold, one level into objects' attributes
    (``self.alpha``), and nested functions the same way. A rebound variable or attribute traces again;
    state mutated inside a container (a list changed in place) is not seen."""
    if fn is None:
        return (None,)
    if depth == 0 or not callable(fn):
        return (id(fn),)
    owner = getattr(fn, "__self__", None)
    if owner is not None and getattr(fn, "__func__", None) is not None:  # a bound method: its function and object
        return (_identity(fn.__func__, depth - 1), id(owner),
                tuple((k, id(v)) for k, v in getattr(owner, "__dict__", {}).items()))
    code = getattr(fn, "__code__", None)
    if code is None and hasattr(fn, "__call__") and hasattr(type(fn), "__call__"):  # a callable object
        return (id(fn), tuple((k, id(v)) for k, v in getattr(fn, "__dict__", {}).items()))
    out = [id(fn), id(getattr(fn, "__defaults__", None))]
    for v in _reads(fn):
        if callable(v) and getattr(v, "__code__", None) is not None:
            out.append(_identity(v, depth - 1))
        elif hasattr(v, "__dict__") and not isinstance(v, (type, type(torch))) and not isinstance(v, torch.Tensor):
            out.append((id(v), tuple((k, id(a)) for k, a in vars(v).items())))
        else:
            out.append(id(v))
    return tuple(out)


def _needs_grad(fn, depth: int = 3) -> bool:
    """Whether a tensor ``fn`` reads (through its closure, defaults, the globals its code names, one
    level into objects' attributes, an ``nn.Module``'s parameters, nested functions) requires
    grad: the kernel reads it, but its result would carry no gradient for it."""
    if fn is None or depth == 0:
        return False
    seen = []
    owner = getattr(fn, "__self__", None)
    if owner is not None:
        seen.append(owner)
    fn = getattr(fn, "__func__", fn)
    seen += _reads(fn) + list(getattr(fn, "__defaults__", None) or ())
    if getattr(fn, "__code__", None) is None:  # a callable object: its attributes
        seen.append(fn)
    for v in seen:
        if isinstance(v, (torch.Tensor, torch.nn.Module)):
            if _holds_grad(v):
                return True
        elif callable(v) and getattr(v, "__code__", None) is not None:
            if _needs_grad(v, depth - 1):
                return True
        elif hasattr(v, "__dict__") and not isinstance(v, (type, type(torch))):
            if any(_holds_grad(a) for a in vars(v).values()):
                return True
    return False


def _holds_grad(v) -> bool:
    """A tensor that requires grad, or an ``nn.Module`` with a parameter that does."""
    if isinstance(v, torch.Tensor):
        return v.requires_grad
    return isinstance(v, torch.nn.Module) and any(t.requires_grad for t in v.parameters())


def _reads(fn) -> list:
    """The objects a plain function reads besides its arguments: its closure cells' contents and the
    globals its code names (what :func:`_identity` keys a trace by and :func:`_needs_grad` looks through)."""
    values = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ()) if _filled(c)]
    code = getattr(fn, "__code__", None)
    glb = getattr(fn, "__globals__", {})
    return values + [glb[n] for n in (code.co_names if code is not None else ()) if n in glb]


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018
        return True
    except ValueError:  # an empty cell (a variable assigned after the function was made)
        return False


def prepare(score_mod=None, mask_mod=None, sinks=None, q=None) -> ModCall:
    """Trace ``score_mod`` / ``mask_mod`` (cached per function and closure) and check ``sinks``.

    Args:
        score_mod: ``(score, b, h, q_idx, kv_idx) -> score`` or None.
        mask_mod: ``(b, h, q_idx, kv_idx) -> bool`` or None.
        sinks: per-head sink logits, a real tensor (H,) on q's device (converted to FP32), or None.
        q: the call's query (for the sinks' device), or None.

    Raises:
        ScheduleError: a function cannot be traced or uses an op outside the table
            (:func:`b200c.dsl.mods.trace_mods`).
        LaunchError: sinks that are not a real floating tensor.
    """
    from ..dsl.mods import trace_mods, uses

    if sinks is not None:
        if not isinstance(sinks, torch.Tensor) or not sinks.is_floating_point() or sinks.dim() != 1:
            raise LaunchError(f"sinks must be a 1-D floating tensor of one logit per query head (H,), got "
                              f"{type(sinks).__name__}" + (f" of shape {tuple(sinks.shape)}, dtype {sinks.dtype}"
                                                           if isinstance(sinks, torch.Tensor) else ""))
        if q is not None and sinks.device != q.device:
            raise LaunchError(f"sinks is on {sinks.device} but q is on {q.device}; move it to {q.device}")
        sinks = sinks.detach().to(torch.float32).contiguous()
    key = (_identity(score_mod), _identity(mask_mod), sinks is not None)
    with _traced_lock:
        hit = _traced.get(key)
        if hit is not None and hit[0][0] == score_mod and hit[0][1] == mask_mod:
            _traced.move_to_end(key)
            mods, tensors = hit[1], hit[2]
        else:
            hit = None
    if hit is None:
        mods, tensors = trace_mods(score_mod=score_mod, mask_mod=mask_mod, sinks=sinks)
        with _traced_lock:
            _traced[key] = ((score_mod, mask_mod), mods, tensors)
            while len(_traced) > _MAX_TRACED:
                _traced.popitem(last=False)
    mask_uses = uses(mods.mask_mod) if mods.mask_mod is not None else frozenset()
    return ModCall(mods, tensors, sinks, mask_mod, mask_uses)


def check_no_grad(score_mod=None, mask_mod=None, sinks=None) -> None:
    """Calls with mods are forward-only: with grad mode on, a tensor the mods read that requires grad (a
    learned bias table, learnable sink logits) would get no gradient from the call's result.

    Raises:
        BackwardNotSupportedError: such a tensor, with grad mode on.
    """
    if not torch.is_grad_enabled():
        return
    what = None
    if isinstance(sinks, torch.Tensor) and sinks.requires_grad:
        what = "sinks requires grad"
    elif _needs_grad(score_mod) or _needs_grad(mask_mod):
        what = "a tensor the score_mod / mask_mod reads requires grad (a learned table, an nn.Parameter)"
    if what:
        from ..errors import BackwardNotSupportedError

        raise BackwardNotSupportedError(
            f"b200c attention with mods is forward-only and {what}: the result would carry no gradient for it; "
            "call it under torch.no_grad() / torch.inference_mode(), or use torch's flex_attention to train it")


__all__ = ["ModCall", "check_no_grad", "prepare"]
