"""The per-call host path: cached launches of loaded kernels.

A launch *entry* is everything one call needs that depends only on the kernel
and on the call's tensors' data pointers, shapes, strides, dtypes and device
and its options (causal, LSE requested): the validated problem, the grid, the
three tensor maps and the kernel's parameter block. Entries are keyed by
exactly those inputs, so a call whose tensors match an earlier one only
allocates the output (and the LSE), writes their pointers (and the softmax
scale) into the block and calls ``cuLaunchKernel``; anything else misses, is
validated in full and gets its own entry. Tensor maps are also cached on
their own by (pointer, shape, strides, box, swizzle, L2 promotion, device).

Kernel parameters are packed by name from the kernel's entry signature
(``LaunchInfo.params``, written once in :mod:`b200c.codegen.signature`;
:mod:`b200c.runtime.params`): :func:`kernel_arguments` gives every value the
runtime knows under its parameter name; ``out``, ``lse`` and
``softmax_scale`` are rewritten per call.

Dense calls: :func:`run`; varlen calls: :mod:`b200c.runtime.varlen`.
"""
from __future__ import annotations

import functools
import threading

import torch

from . import driver, grown
from .inputs import check_grid, check_work_items, empty_result
from .work_order import THREADS as _ORDER_THREADS

MAX_ENTRIES = 256
MAX_MAPS = 1024
_entries: dict = {}
_maps: dict = {}
_launch_lock = threading.Lock()  # the parameter block of an entry is shared: write + launch as one step
_bound = threading.local()  # .ctx: the CUcontext this thread last made current


# PyTorch's current stream on a device as an int handle, and the current device: called per launch
try:
    _get_raw_stream = torch._C._cuda_getCurrentRawStream
    _current_device = torch._C._cuda_getDevice
except AttributeError:  # a torch without the private fast accessors: public, slower
    def _get_raw_stream(device: int) -> int:
        return torch.cuda.current_stream(device).cuda_stream

    def _current_device() -> int:
        return torch.cuda.current_device()

# An empty tensor of (size, stride, dtype) on the current CUDA device, from PyTorch's caching
# allocator: the allocation torch.compile's generated code makes (no dispatcher pass; 1.9 us
# against 3.1 for torch.empty_like on the H200's host)
try:
    from torch._C._dynamo.guards import _empty_strided_cuda as _empty
except ImportError:  # a torch without it: the public call
    def _empty(size, stride, dtype):
        return torch.empty_strided(size, stride, dtype=dtype, device="cuda")


def clear() -> None:
    """Forget every cached launch entry, tensor map, grown-cache template and the tensor-map encoder's
    constant arguments (kernels stay loaded)."""
    _entries.clear()
    _maps.clear()
    grown.clear()
    driver._encode_args.clear()


def pack_heads(q_stages: int, heads: int, heads_kv: int, seq_q: int, causal: bool, varlen: bool,
               block_m: int = 128) -> bool:
    """Whether a launch packs heads: a work item's Q stages are ``q_stages`` consecutive query
    heads (the same Q tile) of one K/V group, so each K/V tile is loaded once for all of them.

    Valid only when ``(H / H_kv) % q_stages == 0`` (so also ``H % q_stages == 0``) and
    ``q_stages > 1``. Chosen when it pays over the default (``q_stages`` consecutive Q tiles
    of one head per work item):

    * ``ceil(S_q / block_m) % q_stages != 0``: the last work item of every head would leave
      Q stages idle (e.g. ``S_q <= block_m * (q_stages - 1)``: decoding, short prompts);
    * ``causal``: the Q tiles of one item would visit the K/V tiles of the last one's
      diagonal, the packed heads share one diagonal;
    * varlen: sequences of any length, so some items would be part-idle.

    Otherwise (non-causal dense, whole items) both modes do the same work and the
    default keeps neighbouring Q tiles of one head together.
    """
    if q_stages <= 1 or heads_kv <= 0 or (heads // heads_kv) % q_stages != 0:
        return False
    return causal or varlen or (-(-seq_q // block_m)) % q_stages != 0


# a causal problem of more work items than this many rounds of the persistent grid is not modelled
# (:func:`pack_balances`): over many rounds a CTA's load evens out (8x16x4096, 31 rounds: 1.039 packed)
BALANCE_ROUNDS = 12


def pack_balances(info, batch: int, heads: int, heads_kv: int, seq_q: int, seq_kv: int, num_sms: int) -> bool:
    """Whether a causal, non-varlen launch of a persistent kernel keeps packing heads (:func:`pack_heads`
    chose it because of the diagonal) once its CTAs' loads are counted: packed items are one Q tile,
    so a head group has twice as many, and their longest-first order can align with the grid's rounds.
    The work decomposition's Python model (:meth:`b200c.codegen.work.WorkDecomposition.item`, the
    device's order) gives each CTA's K/V tiles with and without packing; packing stays unless its most
    loaded CTA visits more tiles than the unpacked one's. Measured on the H200: (2, 16, 4096, 128)
    causal with 8 K/V heads (a Llama-style decoder's prefill) ran 300.6 us packed against cuDNN's
    260.3; its most loaded CTA visits 134 K/V tiles packed against a mean of 95 (1.41x), 100 unpacked
    (mean 97, 1.03x); unpacked, the same call ran 236.2 us against cuDNN's 259.6. Not modelled past
    :data:`BALANCE_ROUNDS` rounds of the grid (packing stays). Cached per shape."""
    if not info.persistent:
        return True
    grid_packed = info.grid(batch, heads, seq_q, num_sms, True)
    if info.num_work_items(batch, heads, seq_q, False) > BALANCE_ROUNDS * grid_packed:
        return True
    work = info.work()
    packed = _max_cta_tiles(work, batch, heads, heads_kv, seq_q, seq_kv, grid_packed, True)
    grid = info.grid(batch, heads, seq_q, num_sms, False)
    return packed <= _max_cta_tiles(work, batch, heads, heads_kv, seq_q, seq_kv, grid, False)


@functools.lru_cache(maxsize=256)
def _max_cta_tiles(work, batch: int, heads: int, heads_kv: int, seq_q: int, seq_kv: int, grid: int,
                   pack: bool) -> int:
    """K/V tiles the most loaded of ``grid`` persistent CTAs visits in a causal launch (grid-stride over
    the work items, the device's order)."""
    loads = [0] * grid
    for w in range(work.num_work(batch, heads, seq_q, pack)):
        loads[w % grid] += work.item(w, batch=batch, heads=heads, heads_kv=heads_kv, seq_q=seq_q, seq_kv=seq_kv,
                                     causal=True, pack_heads=pack, grid=grid).n_kv
    return max(loads)


def kernel_arguments(problem, maps, out_strides, lse_strides, causal: bool, pack: bool, default_scale: float,
                     cu_seqlens=(0, 0)) -> dict:
    """Every kernel parameter value the runtime knows, by its name in :mod:`b200c.codegen.signature`.

    ``out`` and ``lse`` are 0 (null) here and written per call; a new kernel
    parameter needs its value added here, not a new layout.
    """
    return {
        "tmap_q": maps[0], "tmap_k": maps[1], "tmap_v": maps[2],
        "out": 0, "out_stride_b": out_strides[0], "out_stride_h": out_strides[1], "out_stride_s": out_strides[2],
        "lse": 0, "lse_stride_b": lse_strides[0], "lse_stride_h": lse_strides[1], "lse_stride_s": lse_strides[2],
        "cu_seqlens_q": cu_seqlens[0], "cu_seqlens_k": cu_seqlens[1],
        "batch": problem.batch, "heads": problem.heads, "heads_kv": problem.heads_kv,
        "seq_q": problem.seq_q, "seq_kv": problem.seq_kv,
        "causal": int(causal), "pack_heads": int(pack), "softmax_scale": default_scale,
    }


def mod_defaults(info) -> dict:
    """Null values of a kernel's mod parameters (:func:`b200c.codegen.mod_kernel.params`: block mask,
    sinks, captured tensors); each call writes its own (:meth:`Entry.call`'s ``extra``)."""
    from ..codegen.signature import ATTENTION_PARAMS

    base = {p.name for p in ATTENTION_PARAMS}
    return {name: 0 for name, _ in info.params if name not in base}


class Entry:
    """One cached launch configuration (see the module docstring).

    Attributes:
        lk: the LoadedKernel.
        problem: the validated Problem.
        grid, block, smem: launch dimensions and dynamic SMEM bytes.
        pack_heads: whether work items pack heads (:func:`pack_heads`).
        default_scale: 1 / sqrt(D), used when the call passes no scale.
        lse_shape: shape of the LSE to allocate per call, None when not requested.
        device: CUDA device ordinal; torch_device: the same as a torch.device.
        block_params: the :class:`~b200c.runtime.params.ParamBlock`.
        split: the :class:`~b200c.runtime.split_kv.SplitLaunch` of a split-KV entry, else None.
        values, base: what a grown K/V cache's entries are made from (:mod:`b200c.runtime.grown`): the
            parameter values by name and (the loaded kernel before the split choice, its token); None for
            entries of other paths (varlen, the KV-cache call).
    """

    __slots__ = ("lk", "device", "torch_device", "grid", "block", "smem", "default_scale", "block_params",
                 "params_addr", "out_ptr", "lse_ptr", "scale", "masks", "hang", "problem", "pack_heads", "lse_shape",
                 "out_size", "out_stride", "out_dtype", "lse_stride", "context", "_plain", "_cu", "_ok", "_ctx_errors",
                 "_launch", "_memset", "split", "_o_part", "_lse_part", "values", "base", "order", "_item_order")

    def __init__(self, lk, problem, grid: int, values: dict, pack: bool, lse_shape, torch_device, out_like=None,
                 split=None, order=None):
        from .params import ParamBlock

        info = lk.built.launch
        self.lk = lk
        self.device = lk.device
        self.torch_device = torch_device
        self.problem = problem
        self.grid = grid
        self.block = lk.block
        self.smem = info.dynamic_smem_bytes
        self.pack_heads = pack
        self.lse_shape = lse_shape
        # what call() allocates: out as empty_like(q) would (out_like: such a tensor), the LSE contiguous
        self.out_size = None if out_like is None else tuple(out_like.shape)
        self.out_stride = None if out_like is None else out_like.stride()
        self.out_dtype = None if out_like is None else out_like.dtype
        self.lse_stride = None if lse_shape is None else torch.empty(lse_shape, device="meta").stride()
        self.default_scale = values["softmax_scale"]
        block = ParamBlock(info.params, values)
        self.block_params = block
        self.params_addr = block.array_addr
        self.out_ptr = block.slot("out")
        self.lse_ptr = block.slot("lse")
        self.scale = block.slot("softmax_scale")
        self.masks = lk.emu_masks  # emulator: TMEM alloc masks zeroed before each launch
        self.hang = lk.hang_report
        self.context = lk.context
        # split-KV (b200c.runtime.split_kv.SplitLaunch): the workspace per call, then the combine launch (2+ splits)
        self.split = split
        self._o_part = block.slot("o_part") if split is not None else None
        self._lse_part = block.slot("lse_part") if split is not None else None
        # a varlen entry's item order (b200c.runtime.work_order.OrderLaunch): made by b200c_work_order per call
        self.order = order
        self._item_order = block.slot("item_order") if order is not None else None
        # what call() launches in one step (a split-KV entry of one split too: no workspace, no combine)
        self._plain = (self.masks is None and self.hang is None and (split is None or not split.merges)
                       and order is None)
        cu = driver._cu()
        self._cu = cu
        self._ok = cu.CUresult.CUDA_SUCCESS
        self._ctx_errors = (cu.CUresult.CUDA_ERROR_INVALID_CONTEXT, cu.CUresult.CUDA_ERROR_INVALID_HANDLE)
        self._launch = cu.cuLaunchKernel
        self._memset = cu.cuMemsetD32Async
        # the template of a grown K/V cache's entries (b200c.runtime.grown): the parameter values and
        # (the loaded kernel before the split choice, its token); None where the entry is no template
        self.values = None
        self.base = None

    def call(self, q: torch.Tensor, scale: float | None, extra=None):
        """Allocate ``out`` (as ``torch.empty_like(q)``) and, when the entry wants it, the LSE, enqueue the
        kernel (asynchronous) and return ``(out, lse)``: the whole per-call work of a cached launch.

        The common case (q's device current, this entry's context bound, no emulator state) runs here
        in one frame; anything else goes through :meth:`launch`. ``extra``: other parameter values of
        this call by name (a kernel with mods: captured tensors, sinks, the block mask), or None.

        Raises:
            as :meth:`launch`.
        """
        if not self._plain or _current_device() != self.device or getattr(_bound, "ctx", None) is not self.context:
            if self.split is not None:
                return self._call_split(q, scale, extra)
            if self.device >= 0:
                with torch.cuda.device(self.device):
                    out, lse = self._alloc()
            else:  # CPU tensors (the stand-in driver of b200c.runtime.fake_driver)
                out, lse = self._alloc()
            self.launch(out, lse, scale, extra)
            return out, lse
        out = _empty(self.out_size, self.out_stride, self.out_dtype)
        lse = None if self.lse_shape is None else _empty(self.lse_shape, self.lse_stride, _F32)
        stream = _get_raw_stream(self.device)
        with _launch_lock:
            if extra is not None:
                self._write_extra(extra)
            self.out_ptr.value = out.data_ptr()
            self.lse_ptr.value = 0 if lse is None else lse.data_ptr()
            self.scale.value = self.default_scale if scale is None else scale
            (err,) = self._launch(self.lk.function, self.grid, 1, 1, self.block, 1, 1, self.smem, stream,
                                  self.params_addr, 0)
        if err != self._ok:
            if err not in self._ctx_errors:
                self._raise("cuLaunchKernel", err)
            # another library made its context current: bind ours and launch once more (raises if that fails)
            self._enqueue(out, lse, scale, True, extra)
        return out, lse

    def _call_split(self, q, scale, extra):
        """:meth:`call` of a split-KV entry: the splits write the FP32 workspace, the combine kernel merges
        it into ``out`` and ``lse`` (same stream, in that order); with one split the kernel writes them."""
        if self.device >= 0:
            with torch.cuda.device(self.device):
                out, lse = self._alloc()
        else:
            out, lse = self._alloc()
        self.launch(out, lse, scale, extra)
        return out, lse

    def _write_extra(self, extra) -> None:
        """Write per-call parameter values by name (under the launch lock)."""
        slot = self.block_params.slot
        for name, value in extra.items():
            slot(name).value = value

    def _alloc(self):
        """``(out, lse)`` for one call on the current device (see :meth:`call`)."""
        out = _empty(self.out_size, self.out_stride, self.out_dtype)
        return out, (None if self.lse_shape is None else _empty(self.lse_shape, self.lse_stride, _F32))

    def launch(self, out: torch.Tensor, lse: torch.Tensor | None, scale: float | None, extra=None) -> None:
        """Write ``out``'s and ``lse``'s pointers and the scale into the block and enqueue the kernel (asynchronous).

        Raises:
            BarrierTimeoutError: an earlier launch of this kernel timed out.
            DriverError: cuLaunchKernel (or the emulator's memset, or a split-KV entry's cuLaunchKernelEx of the
                combine kernel) failed.
        """
        if self.hang is not None and self.hang.flag:
            driver.check_hang(self.lk)
        if _current_device() != self.device:
            with torch.cuda.device(self.device):
                self._enqueue(out, lse, scale, True, extra, *self._scratch())
            _bound.ctx = None  # leaving the device context made another context current
        else:
            self._enqueue(out, lse, scale, False, extra, *self._scratch())

    def _scratch(self):
        """``(parts, table)`` of one call on the current device: a split-KV entry's FP32 workspace (2+ splits)
        and a varlen entry's item order tensor, each None where the entry has none."""
        parts = self.split.workspace(_empty) if self.split is not None and self.split.merges else None
        return parts, (self.order.table(_empty) if self.order is not None else None)

    def _enqueue(self, out, lse, scale, force_ctx: bool, extra=None, parts=None, table=None) -> None:
        ctx = self.context
        if force_ctx or getattr(_bound, "ctx", None) is not ctx:
            driver._check(self._cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
            _bound.ctx = ctx
        stream = _get_raw_stream(self.device)
        with _launch_lock:
            if extra is not None:
                self._write_extra(extra)
            self.out_ptr.value = out.data_ptr()
            self.lse_ptr.value = 0 if lse is None else lse.data_ptr()
            self.scale.value = self.default_scale if scale is None else scale
            if parts is not None:
                self._o_part.value = parts[0].data_ptr()
                self._lse_part.value = parts[1].data_ptr()
            if table is not None:
                self._item_order.value = self.order.order_slot.value = table.data_ptr()
            for retry in (False, True):
                what, err = "cuLaunchKernel", self._ok
                if table is not None:  # the varlen item order first, on the same stream (b200c.runtime.work_order)
                    what = f"cuLaunchKernel of b200c_work_order (the varlen item order: grid 1, block {_ORDER_THREADS}) before that"
                    (err,) = self._launch(self.order.function, 1, 1, 1, _ORDER_THREADS, 1, 1, 0, stream,
                                          self.order.block.array_addr, 0)
                if err == self._ok and self.masks is not None:
                    (err,) = self._memset(self.masks[0], 0, self.masks[1], stream)
                    what = "cuMemsetD32Async (emulator TMEM alloc masks) before cuLaunchKernel"
                if err == self._ok:
                    what = "cuLaunchKernel"
                    (err,) = self._launch(self.lk.function, self.grid, 1, 1, self.block, 1, 1, self.smem, stream,
                                          self.params_addr, 0)
                if err in self._ctx_errors and not retry and not force_ctx:
                    driver._check(self._cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")  # another library's context
                    _bound.ctx = ctx
                    continue
                break
            if err == self._ok and parts is not None:  # split-KV: merge the splits (b200c/codegen/work.py)
                sp = self.split
                slots = sp.slots
                slots["o_part"].value = parts[0].data_ptr()
                slots["lse_part"].value = parts[1].data_ptr()
                slots["out"].value = out.data_ptr()
                slots["lse"].value = 0 if lse is None else lse.data_ptr()
                slots["sinks"].value = int(extra.get("sinks", 0)) if extra else 0
                what = "cuLaunchKernelEx (split-KV combine, programmatic dependent launch)"
                (err,) = self._cu.cuLaunchKernelEx(sp.launch_config(self._cu, stream), sp.function,
                                                   sp.block.array_addr, 0)
        if err != self._ok:
            self._raise(what, err)

    def _raise(self, what: str, err) -> None:
        """Raise the DriverError of failed driver call ``what`` (a hang of an earlier launch first)."""
        from ..errors import DriverError

        driver.check_hang(self.lk)
        info = self.lk.built.launch
        raise DriverError(
            f"{what} of {info.name!r} (grid {self.grid}, block {self.block}, {self.smem} B SMEM) "
            f"failed: {driver._err_name(err)}"
        )


_F32 = torch.float32


def check_capabilities(lk, causal: bool, return_lse: bool, gqa: bool, varlen: bool) -> None:
    """Refuse what the loaded kernel's target does not compute (its record's ``caps``, e.g. the
    native Hopper kernel's dense non-causal attention without the LSE).

    Raises:
        LaunchError: naming the features, the target and what to use instead.
    """
    caps = lk.target.caps
    asked = [name for name, on, can in (("causal=True", causal, caps.causal),
                                        ("return_lse=True", return_lse, caps.lse),
                                        ("GQA/MQA (k, v with fewer heads than q)", gqa, caps.gqa),
                                        ("varlen", varlen, caps.varlen)) if on and not can]
    if asked:
        from ..codegen.targets import REGISTRY
        from ..errors import LaunchError

        others = sorted((t for t in REGISTRY if t.compute_capability == lk.target.compute_capability
                         and t is not lk.target and all(getattr(t.caps, c) for c, on in (
                             ("causal", causal), ("lse", return_lse), ("gqa", gqa), ("varlen", varlen)) if on)),
                        key=lambda t: not t.native)  # a native one first
        alt = f"use target={others[0].name!r} ({others[0].summary}) or torch SDPA" if others else "use torch SDPA"
        raise LaunchError(
            f"{', '.join(asked)}: the kernels of target {lk.target.name!r} ({lk.target.summary}) do not compute "
            f"{'it' if len(asked) == 1 else 'them'} yet; {alt} (b200c.scaled_dot_product_attention falls back by "
            f"itself)"
        )


def run(token, target: str, layout: str, q, k, v, scale: float | None, source, causal: bool = False,
        return_lse: bool = False, mod_call=None):
    """Attention on CUDA tensors through the entry cache; returns ``(out, lse)`` (allocated here).

    Args:
        token: identifies the kernel source (the schedule's JSON, or a GeneratedKernel).
        target: the target as given (part of the key; resolved by ``source.load``).
        layout: ``"bhsd"`` or ``"bshd"``: q, k, v and the result are (B, H, S, D)
            or (B, S, H, D); no copies either way.
        q, k, v: bfloat16 tensors (validated in full on a miss); k, v may have
            fewer heads (GQA).
        scale: softmax scale in natural-log units (checked), None for 1 / sqrt(D).
        source: where kernels come from, used on a miss (:data:`b200c.runtime.op.SCHEDULES`
            or :data:`~b200c.runtime.op.GENERATED`): ``source.specialize(token, head_dim)``
            (the token of the kernel for the inputs' head dim; raises ResourceError /
            LaunchError when there is none) and ``source.load(token, target, device) -> LoadedKernel``.
        causal: bottom-right aligned causal mask.
        return_lse: also return the log-sum-exp, FP32 (B, H, S_q); else ``lse`` is None.
        mod_call: a :class:`b200c.runtime.mod_call.ModCall` (the token's kernel has mods): its
            per-call values (captured tensors, sinks, the block mask) are written before the launch.

    Raises:
        LaunchError, UnsupportedDeviceError, BuildError, ScheduleError, ResourceError,
        BarrierTimeoutError: as :func:`b200c.attention`.
    """
    if mod_call is None and q.dim() == 4 and k.dim() == 4 and q.shape[2 if layout == "bhsd" else 1] == 1:
        folded = fold_gqa(q, k, layout)
        if folded is not None:  # a decoding step of a GQA model: one K/V read per K/V head (fold_gqa)
            out, lse = run(token, target, "bshd", folded, k if layout == "bshd" else k.transpose(1, 2),
                           v if layout == "bshd" else v.transpose(1, 2), scale, source, False, return_lse)
            return unfold_gqa(out, lse, q, layout)
    key = (token, target, layout, causal, return_lse, q.data_ptr(), k.data_ptr(), v.data_ptr(), q.shape, k.shape,
           v.shape, q.stride(), k.stride(), v.stride(), q.dtype, k.dtype, v.dtype, q.get_device())
    e = _entries.get(key)
    if e is None:
        # a K/V cache longer than the last call's (a decoding step): the entry from that call's
        fam = grown.family_key(key, layout, q, k, v)
        e = _grown_entry(grown.regrown(fam, layout, q, k, v), key[1], source, causal,
                         getattr(mod_call, "num_splits", None))
        if e is None:
            e = _new_entry(key, layout, q, k, v, source, causal, return_lse, getattr(mod_call, "num_splits", None))
            if not isinstance(e, Entry):
                return e  # an empty problem's result (no launch)
        else:
            remember(key, e)
        grown.note(fam, e)
    if mod_call is not None:
        return e.call(q, scale, mod_call.values(e, causal))
    return e.call(q, scale)


def fold_gqa(q, k, layout: str):
    """A decoding step's q with its query heads folded into rows: q of one query row per head, (B, H, 1, D)
    (``layout="bhsd"``) or (B, 1, H, D), and k of H_kv < H heads, as the (B, H / H_kv, H_kv, D) BSHD view
    (no copy) in which the H / H_kv query heads of one K/V head are the query rows of an MHA problem on
    H_kv heads. Each K/V head is then read once for all of its query heads (FlashAttention's PackGQA
    idea, done by the launch). Causal is nothing for one row (bottom-right aligned, it sees every key),
    so the folded call is non-causal. None where it does not apply (MHA, a last dim that is not
    contiguous)."""
    h_dim = 1 if layout == "bhsd" else 2
    h, h_kv = q.shape[h_dim], k.shape[h_dim]
    if h_kv <= 0 or h <= h_kv or h % h_kv or q.stride(3) != 1:
        return None
    g = h // h_kv
    s_b, s_h = q.stride(0), q.stride(h_dim)
    return q.as_strided((q.shape[0], g, h_kv, q.shape[3]), (s_b, s_h, g * s_h, 1))


def unfold_gqa(out, lse, q, layout: str):
    """``(out, lse)`` of a folded call (:func:`fold_gqa`) in the shapes of the call that was folded."""
    b, d = q.shape[0], q.shape[3]
    h = q.shape[1 if layout == "bhsd" else 2]
    o = out.transpose(1, 2).reshape(b, h, d)  # (B, H_kv, g, D) -> query head h_kv * g + i
    o = o.unsqueeze(2) if layout == "bhsd" else o.unsqueeze(1)
    return o, None if lse is None else lse.reshape(b, h, 1)


def _new_entry(key, layout: str, q, k, v, source, causal: bool, return_lse: bool, fixed_splits=None):
    from . import inputs

    views = (q, k, v) if layout == "bhsd" else tuple(t.transpose(1, 2) for t in (q, k, v))
    problem = inputs.validate_inputs(*views, check_device=False)
    if not problem.needs_launch:
        inputs._check_devices(dict(zip("qkv", views)))
        r = empty_result(views[0], problem)
        lse = None
        if return_lse:
            fill = float("-inf") if problem.seq_kv == 0 else 0.0
            lse = torch.full((problem.batch, problem.heads, problem.seq_q), fill, dtype=_F32, device=q.device)
        return (r if layout == "bhsd" else r.transpose(1, 2)), lse
    token = source.specialize(key[0], problem.head_dim)  # a schedule that cannot hold D raises here
    inputs._check_devices(dict(zip("qkv", views)))
    device = q.get_device()
    lk = source.load(token, key[1], device)
    check_capabilities(lk, causal, return_lse, problem.heads != problem.heads_kv, False)
    pack = packing(lk, problem, causal)
    base = (lk, token)
    lk, info, splits = _split_kernel(lk, token, key[1], device, source, problem, pack, causal, fixed_splits)
    n_work = info.num_work_items(problem.batch, problem.heads, problem.seq_q, pack, splits)
    check_work_items(n_work)
    grid = info.grid(problem.batch, problem.heads, problem.seq_q, lk.num_sms, pack, splits)
    check_grid(grid)
    maps = tensor_maps(lk, zip("qkv", views))
    sample = torch.empty_like(q)  # empty_like's strides depend only on q's shape and strides
    out_view = sample if layout == "bhsd" else sample.transpose(1, 2)
    b, h, s = problem.batch, problem.heads, problem.seq_q
    lse_shape = (b, h, s) if return_lse else None
    lse_strides = (h * s, s, 1) if return_lse else (0, 0, 0)
    out_strides = tuple(out_view.stride()[:3])
    values = kernel_arguments(problem, maps, out_strides, lse_strides, causal, pack, problem.head_dim ** -0.5)
    values.update(mod_defaults(info))
    split = None
    if info.split_kv:
        from .split_kv import SplitLaunch

        split = SplitLaunch(lk, splits, b * h, s, h, out_strides, lse_strides)
        values.update(split.kernel_values())
    e = Entry(lk, problem, grid, values, pack, lse_shape, q.device, sample, split)
    e.values, e.base = values, base
    remember(key, e)
    return e


def _grown_entry(regrown, target: str, source, causal: bool, fixed_splits=None):
    """The entry of a grown K/V cache's call from its family's template (:func:`b200c.runtime.grown.regrown`'s
    ``(template, views, problem)``), or None where it would not launch as the template does (another
    head packing, split count or kernel) or there is no template."""
    if regrown is None:
        return None
    sib, views, problem = regrown
    lk_base, token = sib.base
    pack = packing(lk_base, problem, causal)
    lk, _, splits = _split_kernel(lk_base, token, target, lk_base.device, source, problem, pack, causal, fixed_splits)
    if lk is not sib.lk or pack != sib.pack_heads or splits != (sib.split.num_splits if sib.split else 1):
        return None
    maps = tensor_maps(lk, zip("qkv", views))
    values = dict(sib.values, tmap_q=maps[0], tmap_k=maps[1], tmap_v=maps[2], seq_kv=problem.seq_kv)
    e = Entry(lk, problem, sib.grid, values, pack, sib.lse_shape, sib.torch_device, grown.OutLike(sib), sib.split)
    e.values, e.base = values, sib.base
    return e


def packing(lk, problem, causal: bool) -> bool:
    """Whether the work items of a dense call pack heads (:func:`pack_heads`; causal calls packed for the
    diagonal alone only where that balances the grid, :func:`pack_balances`)."""
    info = lk.built.launch
    pack = pack_heads(info.q_stages, problem.heads, problem.heads_kv, problem.seq_q, causal, False, info.block_m)
    if pack and causal and not pack_heads(info.q_stages, problem.heads, problem.heads_kv, problem.seq_q, False,
                                          False, info.block_m):  # packed for the diagonal alone
        pack = pack_balances(info, problem.batch, problem.heads, problem.heads_kv, problem.seq_q, problem.seq_kv,
                             lk.num_sms)
    return pack


def _split_kernel(lk, token, target, device: int, source, problem, pack: bool, causal: bool, fixed=None):
    """``(loaded kernel, its launch info, splits per work item)`` of a call: a schedule that leaves the
    count to the call (``kv_splits=None``) runs its split-KV build when :func:`b200c.runtime.split_kv.splits_for`
    splits (decoding: few items, long K/V); a split-KV build always takes a count (>= 1)."""
    from .split_kv import check_split, split_token, splits_for

    info = lk.built.launch
    if info.kv_splits == 1 or (not info.split_kv and info.kv_splits is not None):
        return lk, info, 1
    items = info.num_work_items(problem.batch, problem.heads, problem.seq_q, pack)
    n = fixed if fixed else splits_for(info, items, problem.seq_q, problem.seq_kv, causal, lk.num_sms)
    if not info.split_kv:
        if n <= 1:
            return lk, info, 1
        t = split_token(token)
        if t is None:
            return lk, info, 1
        lk = source.load(t, target, device)
        info = lk.built.launch
    check_split(lk, token)
    return lk, info, max(1, n)


def remember(key, e: Entry) -> None:
    """Cache entry ``e`` under ``key`` (dropping the older half when full)."""
    if len(_entries) >= MAX_ENTRIES:
        for old in list(_entries)[: MAX_ENTRIES // 2]:
            _entries.pop(old, None)
    _entries[key] = e


def tensor_maps(lk, named) -> list:
    """The tensor maps of ``(name, tensor)`` pairs for loaded kernel ``lk``, encoded with its context
    current (:func:`b200c.runtime.driver.in_context`): the driver refuses to encode one in a thread
    with no current context (CUDA_ERROR_INVALID_CONTEXT), e.g. any new thread whose first CUDA call
    is a b200c call."""
    named = list(named)
    info = lk.built.launch
    if all(_map_key(n, t, info, lk.device) in _maps for n, t in named):
        return [_maps[_map_key(n, t, info, lk.device)] for n, t in named]
    with driver.in_context(lk.context):
        return [tensor_map(n, t, info, lk.device) for n, t in named]


def _map_key(name: str, t, info, device: int) -> tuple:
    rows = info.tma_box_rows if name == "q" else info.kv_box_rows  # K/V boxes have block_n rows (sm90a: 176)
    return (t.data_ptr(), tuple(t.shape), t.stride(), info.tma_box_inner, rows, info.tma_swizzle,
            info.tma_l2_promotion, device)


def tensor_map(name: str, t, info, device: int) -> bytes:
    """The (cached) 128-byte tensor map of logical (B, H, S, D) tensor ``t`` for a kernel's launch info
    (k and v: H_kv heads; varlen: the (1, H, total, D) view of a packed tensor); a context must be
    current (see :func:`tensor_maps`)."""
    key = _map_key(name, t, info, device)
    m = _maps.get(key)
    if m is None:
        m = driver.encode_tensor_map(name, t, info)
        if len(_maps) >= MAX_MAPS:
            _maps.clear()
        _maps[key] = m
    return m
