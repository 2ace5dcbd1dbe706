"""``b200c.scaled_dot_product_attention``: a drop-in for ``torch.nn.functional.scaled_dot_product_attention``.

Same signature and semantics as torch's function (plus the keyword-only
``schedule`` and ``target``). Calls b200c supports run a b200c kernel; every
other call runs torch's own SDPA (the C++ function, so the swap
``torch.nn.functional.scaled_dot_product_attention = b200c.scaled_dot_product_attention``
does not recurse), and a :class:`b200c.FallbackWarning` says why, on every
eager call that falls back (see :func:`_warn`). It falls back only for what
b200c does not run (input kinds, shapes, layouts, options, a schedule that
cannot hold the head dim, a device without the target): a failure of b200c
itself (a :class:`b200c.BuildError`: nvcc failed, or a b200c bug) is raised.
The checks are plain Python on tensor metadata, so
``torch.compile(fullgraph=True)`` traces them (the decision becomes part of
the compiled graph, guarded like any shape or dtype test).
"""
from __future__ import annotations

import collections
import re
import sys
import threading
import warnings

import torch

from ..errors import BarrierTimeoutError, DriverError, FallbackWarning, LaunchError, ScheduleError
from . import api, backward_launch, inputs, op, sdpa_mask

_torch_sdpa = torch._C._nn.scaled_dot_product_attention  # never the (possibly swapped) Python attribute
_BF16 = torch.bfloat16
_warned: set = set()  # reasons said while torch.compile traced (said once per reason per process)
_warn_lock = threading.Lock()
# eager calls by outcome: "b200c" (served by a b200c kernel) or the fallback's reason key; read it
# (collections.Counter) to see what a model's calls got, reset it with .clear(). Compiled graphs decide
# at trace time and are not counted per call.
calls: "collections.Counter" = collections.Counter()
_MAX_TMA_STRIDE_ELEMS = 1 << 39  # 2^40 bytes of bfloat16


_PREFIX = "b200c.scaled_dot_product_attention fell back to torch's scaled_dot_product_attention: "


def _warn(key: str, message: str) -> bool:
    """Issue a :class:`b200c.FallbackWarning` for one eager call that fell back, every time.

    ``warnings.warn`` would show a message once per calling line (the default
    filter action records it in the caller's ``__warningregistry__``), so a
    model falling back in a loop would go silent after its first call. This
    goes through ``warnings.warn_explicit`` with no registry, at the line that
    called the drop-in: the filters still decide (``"ignore"`` silences it,
    ``"once"`` says each text once, ``"error"`` raises it), the default one
    shows every call. ``key``: the reason's kind (see :data:`calls`).
    """
    text = f"{_PREFIX}{message} (said on every call that falls back; " \
           "warnings.filterwarnings('ignore', category=b200c.FallbackWarning) silences it)"
    try:
        frame = sys._getframe(2)  # _warn <- scaled_dot_product_attention <- its caller
    except ValueError:
        frame = None
    if frame is None:
        warnings.warn(text, FallbackWarning, stacklevel=2)
        return True
    g = frame.f_globals
    # module_globals lets the warning show the caller's source line; only a module read from a file has one
    # (the REPL's and `python -c`'s __main__ has a built-in loader, whose get_source raises ImportError)
    where = dict(module=g.get("__name__", "<string>"), registry=None)
    try:
        warnings.warn_explicit(text, FallbackWarning, frame.f_code.co_filename, frame.f_lineno, **where,
                               module_globals=g if g.get("__file__") else None)
    except ImportError:  # a __main__ read from stdin: __file__ '<stdin>', its loader has no source either
        warnings.warn_explicit(text, FallbackWarning, frame.f_code.co_filename, frame.f_lineno, **where)
    return True


def _warn_once(key: str, message: str) -> bool:
    """The warning while torch.compile traces a call that falls back: once per reason per process (the
    compiled graph then runs torch's SDPA with no Python in between, so nothing can say it per call)."""
    with _warn_lock:
        if key in _warned:
            return False
        _warned.add(key)
    warnings.warn(f"{_PREFIX}{message} (decided when torch.compile traced the call; said once per reason)",
                  FallbackWarning, stacklevel=3)
    return True


_warn_traced = torch.compiler.assume_constant_result(_warn_once)  # runs when the graph is traced, not per call


def _scale_reason(scale) -> str:
    return inputs.scale_problem(scale)


_scale_reason_traced = torch.compiler.assume_constant_result(_scale_reason)


def _holds(schedule_json: str, head_dim: int) -> str:
    """"" if the schedule holds ``head_dim`` (see :func:`b200c.runtime.op.specialized_json`), else why not."""
    try:
        op.specialized_json(schedule_json, head_dim)
    except ScheduleError as e:
        return f"{type(e).__name__}: {e}"
    return ""


_holds_traced = torch.compiler.assume_constant_result(_holds)


def _device_reason(q, k, v):
    for name, t in (("query", q), ("key", k), ("value", v)):
        if not t.is_cuda:
            return f"device:{t.device.type}", f"{name} is on {t.device.type} (b200c kernels run on CUDA tensors)"
    if k.device != q.device or v.device != q.device:
        return "device:mixed", "query, key and value are on different devices"
    return None


def _layout_reason(name: str, t, compiling: bool):
    """Why the kernel's TMA rules refuse ``t``'s strides (None if they do not), from metadata only.

    While torch.compile traces, the storage offset is not readable: a view starting off a
    16-byte boundary is then reported by the op's fake impl (a LaunchError) instead.
    """
    st, sh = t.stride(), t.shape
    if st[3] != 1:
        return "layout", f"{name} has last-dim stride {st[3]} (b200c needs a contiguous head dim)"
    if not compiling and t.storage_offset() % 8 != 0:
        return "layout", f"{name} starts {t.storage_offset()} elements into its storage (not 16-byte aligned)"
    for i in range(3):
        if sh[i] != 1 and (st[i] % 8 != 0 or st[i] >= _MAX_TMA_STRIDE_ELEMS):
            return "layout", f"{name} has stride {st[i]} over dim {i} (TMA needs multiples of 8 elements, < 2^39)"
    return None


def _reason(q, k, v, attn_mask, dropout_p, is_causal, enable_gqa, compiling: bool):
    """(key, message) of the first thing b200c does not support, or None."""
    if not isinstance(dropout_p, (int, float)) or dropout_p != 0:
        return "dropout", f"dropout_p={dropout_p} (b200c kernels have no dropout)"
    if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)):
        return "types", "query, key and value are not all tensors"
    if q.is_nested or k.is_nested or v.is_nested:
        return "nested", "nested tensors"
    for name, t in (("query", q), ("key", k), ("value", v)):
        if t.dtype != _BF16:
            return f"dtype:{t.dtype}", f"{name} has dtype {t.dtype} (b200c kernels take torch.bfloat16)"
    r = _device_reason(q, k, v)
    if r is not None:
        return r
    qs, ks, vs = q.shape, k.shape, v.shape
    if len(qs) != 4 or len(ks) != 4 or len(vs) != 4:
        return "rank", f"{len(qs)}-D/{len(ks)}-D/{len(vs)}-D inputs (b200c takes 4-D (B, H, S, D))"
    if not (qs[0] == ks[0] == vs[0] and ks[1] == vs[1] and ks[2] == vs[2] and qs[3] == ks[3] == vs[3]):
        return "shapes", "batch sizes, key/value shapes or head dims differ (b200c needs one B, one D and k, v alike)"
    hq, hkv = qs[1], ks[1]
    if hq != hkv and not (enable_gqa and hkv > 0 and hq % hkv == 0):
        return "heads", f"{hq} query heads and {hkv} key/value heads" + ("" if enable_gqa else " without enable_gqa")
    if is_causal is not True and is_causal is not False:
        return "is_causal", f"is_causal={is_causal!r} is not a bool"
    if is_causal and qs[2] != ks[2]:
        return "causal_top_left", (
            "is_causal=True with S_q != S_kv: torch aligns that mask to the top-left corner, b200c's causal mask to "
            "the bottom-right (FlashAttention >= 2.1); call b200c.attention(..., causal=True) for the latter")
    d = qs[3]
    if d not in inputs.HEAD_DIMS:
        return f"head_dim:{d}", f"head dim {d} (b200c kernels support 64, 128 and 256)"
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad or (
            isinstance(attn_mask, torch.Tensor) and attn_mask.requires_grad)):
        r = backward_launch.backward_reason(q, attn_mask)  # b200c.attention's autograd runs its backward kernels
        if r is not None:
            return r
    if attn_mask is not None:
        if compiling:
            return "attn_mask:compile", ("attn_mask under torch.compile (b200c runs masks as mods, eagerly: call the "
                                         "model without torch.compile, or b200c.attention(mask_mod=...))")
        if is_causal:
            return "attn_mask:causal", "attn_mask together with is_causal=True (torch's SDPA refuses the pair)"
        r = sdpa_mask.mask_problem(attn_mask, q, k)
        if r is not None:
            return r
    if compiling and qs[0] and qs[1] and qs[2] and ks[2]:  # eagerly, b200c's own validation says it (a miss only)
        for name, t in (("query", q), ("key", k), ("value", v)):
            r = _layout_reason(name, t, compiling)
            if r is not None:
                return r
    return None


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False, *, schedule=None, target="auto", backward_schedule=None):
    """A drop-in for ``torch.nn.functional.scaled_dot_product_attention`` that runs a b200c kernel when it can.

    Same signature and semantics as torch's function: query (B, H, S_q, D),
    key and value (B, H_kv, S_kv, D), ``enable_gqa`` for H_kv < H, result
    (B, H, S_q, D). Swap it into a model with one line::

        torch.nn.functional.scaled_dot_product_attention = b200c.scaled_dot_product_attention

    b200c runs calls with: bfloat16 CUDA tensors, 4-D, D 64, 128 or 256,
    ``attn_mask`` None, boolean (True: attend) or additive (float), of any
    shape that broadcasts to (B, H, S_q, S_kv) (key padding (B, 1, 1, S_kv),
    (B, H, 1, S_kv), full masks; compiled in as mods, eagerly: a masked call
    under torch.compile falls back; a boolean mask is a mask_mod, whose block
    mask skips the K/V tiles it hides, an additive one a score_mod adding it
    to every score, no tile skipped), ``dropout_p == 0``, ``is_causal`` only when S_q == S_kv
    (torch aligns a causal mask with S_q != S_kv to the top-left corner,
    b200c to the bottom-right), ``scale`` None or >= 0 (and not so large
    that scale * log2(e) overflows FP32), strides the TMA rules accept, a
    schedule that holds D, a device that runs ``target``; with inputs that
    require grad (and grad mode on) also no ``attn_mask``, compute capability
    9.0 and D 64, 128 or 256: b200c's backward kernels then give the gradients
    (through :func:`b200c.attention`'s autograd formula). Every other call runs
    torch's own SDPA, with a :class:`b200c.FallbackWarning` saying why on every
    eager call that falls back (the warning filters apply: ``warnings.filterwarnings(
    "ignore", category=b200c.FallbackWarning)`` silences it; under torch.compile it
    is said once per reason, when the call is traced). What falls back is counted
    per reason in :data:`b200c.runtime.sdpa.calls`. A failure of b200c itself is
    raised, never hidden behind the fallback.

    Args:
        query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa:
            as ``torch.nn.functional.scaled_dot_product_attention``.
        schedule: a :class:`b200c.Schedule` or schedule file; None uses the
            built-in one of the device's native target for D
            (:func:`b200c.default_schedule`: on an H100/H200 the Hopper
            presets, run natively, with smaller K/V tiles for a short key
            sequence, also under torch.compile's dynamic shapes (compared
            with the lengths where the choice changes); on a B200 the blog's
            stage 18).
        backward_schedule: as :func:`b200c.attention`'s: the backward schedule of
            calls whose inputs require grad (None: the built-in one).
        target: as :func:`b200c.attention`. With ``"auto"`` the drop-in
            never runs the emulation target: a B200 schedule on a Hopper GPU
            falls back to torch (with a warning saying so).

    Deterministic gradients: ``torch.use_deterministic_algorithms(True)``
    (torch's switch; the drop-in has no ``deterministic=`` keyword, as torch's
    function has none) makes the backward add dQ in a fixed order, as
    ``b200c.attention(..., deterministic=True)`` does.

    Returns:
        torch.Tensor (B, H, S_q, D), the dtype of query.

    Raises:
        ScheduleError / IssueOrderError / ResourceError: ``schedule`` itself
            is invalid or infeasible (a schedule that only cannot hold the
            inputs' D falls back instead).
        TargetError: an unknown ``target`` name.
        BuildError: nvcc failed on the generated kernel (the message has nvcc's
            first error line and the generated file), nvcc or ninja is missing,
            or the kernel cache is unusable: errors of b200c or its setup,
            raised so they are fixed rather than run slowly through torch.
        BarrierTimeoutError: an emulated kernel hung.
        Anything torch's SDPA raises for the calls it runs.
    """
    compiling = torch.compiler.is_compiling()
    if type(target) is not str or target not in api._TARGETS:
        api._check_options(target, "bhsd")
    # checked on every call, also those that run torch's SDPA, as b200c.attention checks it
    backward_json = "" if backward_schedule is None else api._checked_backward_json(backward_schedule, query, False)
    inputs.refuse_scale_grad(scale, "scale", "query")  # before the traced fallback helper, by the drop-in's names
    why = _reason(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa, compiling)
    if why is None and scale is not None:
        text = _scale_reason_traced(scale) if compiling else _scale_reason(scale)
        if text:
            why = ("scale", text)
    if why is None:
        d = query.shape[3]
        seq_kv = None if attn_mask is not None else key.shape[2]  # short keys: smaller K/V tiles (dense calls)
        if compiling:
            schedule_json = api._traced_json(query, schedule, target, seq_kv)
        else:
            schedule_json = api._schedule_json(api.default_schedule_for(query, target, seq_kv=seq_kv)
                                               if schedule is None else schedule)
        text = _holds_traced(schedule_json, d) if compiling else _holds(schedule_json, d)
        if text:
            why = (f"schedule:{d}", f"the schedule cannot run head dim {d}: {text}")
        elif compiling:
            s = float(scale) if scale is not None else float(d) ** -0.5
            return api._call_op(query, key, value, schedule_json, s, "bhsd", target, is_causal, False)
        else:
            s = None if scale is None else inputs.softmax_scale_value(scale)
            try:
                if attn_mask is not None:
                    out = api._attention_mods(query, key, value, schedule, False, s, False, "bhsd", target, None, None,
                                              None, None, sdpa_mask.mod_call_of_mask(attn_mask))
                elif api._direct_path_ok(query, key, value):
                    out = op.run_schedule(query, key, value, schedule_json, s, target, "bhsd", is_causal, False)[0]
                else:
                    out = api._call_op(query, key, value, schedule_json, s, "bhsd", target, is_causal, False, False,
                                       backward_json)
                calls["b200c"] += 1
                return out
            except LaunchError as e:  # input rules, the device (UnsupportedDeviceError), the target's capabilities
                if isinstance(e, (BarrierTimeoutError, DriverError)):
                    raise  # a hung kernel or a failed driver call: b200c's own failure, not a reason to fall back
                text = f"{type(e).__name__}: {e}"
                why = (re.sub(r"0x[0-9a-fA-F]+|\d+", "#", text), text)  # counted per rule, not per value
    if compiling:
        _warn_traced(*why)
    else:
        calls[why[0]] += 1
        _warn(*why)
    return _torch_sdpa(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                       enable_gqa=enable_gqa)


