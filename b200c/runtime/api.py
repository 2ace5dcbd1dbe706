"""``b200c.attention`` and ``b200c.attention_varlen``: the user-facing PyTorch entry points.

Eager calls on plain CUDA tensors that need no autograd take a direct path:
the schedule's validated JSON comes from a cache (per Schedule object, or per
schedule file as long as none of the files it was built from changed on disk:
one poll of an inotify queue while nothing did, :mod:`b200c.runtime.watch`)
and the launch from :mod:`b200c.runtime.launcher` (per tensor pointers,
shapes, strides). Everything else (torch.compile tracing, fake/meta tensors,
tensor subclasses, dispatch or function modes, functorch transforms, JIT
tracing, inputs that require grad) goes through the registered custom ops
``torch.ops.b200c.attention`` (``attention_lse`` with ``return_lse``) and
``torch.ops.b200c.attention_varlen``, which reach the same launcher.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Hashable

import torch

from ..dsl import Schedule
from ..errors import BuildError, LaunchError, ScheduleError, TargetError
from . import launcher, op  # op: registers torch.ops.b200c.attention
from .schedule_files import _json_of_file, _json_of_schedule, _validated_json
from .inputs import check_tensor_types, flag_value, keyword_given, no_such_keyword, softmax_scale_value
from .varlen import seqlen_value

_TARGETS: set = {"auto"}  # names seen resolving (the fast path's one set lookup); others go through _check_options
_LAYOUTS = frozenset(("bhsd", "bshd"))
_Tensor = torch.Tensor
_HEAD_DIMS = (64, 128, 256)


# ---- schedule identity ------------------------------------------------------------


def _schedule_json(schedule, target: str = "auto") -> str:
    """Validated ``Schedule.to_json()`` of a Schedule or a schedule file path (eager; cached), also
    for ``target`` when one is named (:func:`_check_target_fits`).

    Raises:
        ScheduleError / ResourceError / IssueOrderError: not a Schedule or a
            path, or the file or schedule is invalid or infeasible.
    """
    if isinstance(schedule, Schedule):
        text = _json_of_schedule(schedule)
    elif isinstance(schedule, (str, os.PathLike)):
        text = _json_of_file(os.fspath(schedule))
    else:
        raise _not_a_schedule(schedule)
    if target != "auto" and (text, target) not in _fits:
        _check_target_fits(text, target)
    return text


# ---- the built-in schedule of a call ---------------------------------------------


_defaults: dict = {}  # (device index, target, head dim, mods, dense key length) -> the built-in Schedule
_default_targets: dict = {}  # (device index, target) -> the target record whose presets run


def default_schedule_for(q, target="auto", mods: bool = False, seq_kv=None):
    """The built-in schedule a call without one runs (``schedule=None``): the presets of the call's
    target for q's head dim (b200c/dsl/presets.py); with ``target="auto"`` those of the device's
    native target (a Hopper GPU: the sm90a presets; a B200: sm100a's), never the emulation target's.
    ``mods``: the presets for calls with a score_mod / mask_mod. ``seq_kv``: a dense call's key length
    (an int): a short one takes the target's smaller K/V tiles where it has them
    (:func:`b200c.dsl.presets.short_kv_preset`).

    Raises:
        ScheduleError: no built-in schedule for q's head dim.
        UnsupportedDeviceError: no native b200c target for q's device.
        LaunchError: q has fewer than 3 dimensions.
    """
    if q.dim() < 3:  # the head dim is q's last dimension: name the shape rule, not a head dim
        raise LaunchError(f"q must be a 4-D tensor ((B, H, S, D); layout='bshd': (B, S, H, D); varlen: 3-D (total, "
                          f"H, D)), got shape {tuple(q.shape)}")
    d = int(q.shape[-1])
    dev = q.get_device() if q.is_cuda else -1
    return _default(dev, target, d, mods, seq_kv)


def _default(dev: int, target, d: int, mods: bool = False, seq_kv=None):
    n = None if mods else seq_kv  # a dense call's key length picks its K/V tiles
    # only None and ints are keys: a SymInt cannot be hashed, and True or 77.0 would find the entries of 1 and 77
    # (short_kv_preset refuses them)
    key = (dev, target, d, mods, n) if n is None or type(n) is int else None
    hit = _defaults.get(key) if key is not None else None
    if hit is not None:
        return hit
    t = _default_targets.get((dev, target))
    if t is None:
        t = _default_target(dev, target)
        _default_targets[(dev, target)] = t
    s = None if mods or seq_kv is None else t.short_kv_preset(d, seq_kv)
    if s is None:
        s = t.default_schedule(d, mods)
    if key is not None:
        if len(_defaults) >= 4096:  # one entry per key length seen (a decoding loop's grows by one a step)
            _defaults.clear()
        _defaults[key] = s
    return s


def _default_target(dev: int, target):
    """The target record whose presets a call without a schedule runs (see :func:`default_schedule_for`)."""
    from ..codegen.targets import AUTO, for_device, native_targets, resolve_or_auto

    t = resolve_or_auto(target)
    if t == AUTO:
        if dev < 0 or not torch.cuda.is_available():  # no device to ask (CPU or fake tensors on a machine without
            t = native_targets()[0]                     # a GPU): the first registered native target
        else:
            cap, name = op.device_capability(dev)
            natives = [r for r in for_device(cap) if r.native]
            if not natives:
                from ..errors import UnsupportedDeviceError

                raise UnsupportedDeviceError(f"no native b200c target for the device ({name}, compute capability "
                                             f"{cap[0]}.{cap[1]}); pass a schedule and a target")
            t = natives[0]
    return t


@torch.compiler.assume_constant_result
def _default_json(dev: int, target: str, d: int, seq_kv: int = 0) -> str:
    """The built-in schedule's validated JSON while torch.compile traces (a constant of the graph);
    ``seq_kv`` 0: a dense call's key length past every short-key breakpoint (or not known), the head dim's
    preset."""
    return _validated_json(_default(dev, target, d, False, seq_kv or None).to_json())


@torch.compiler.assume_constant_result
def _short_kv_breakpoints(dev: int, target: str, d: int) -> tuple:
    """:meth:`b200c.codegen.targets.Target.short_kv_breakpoints` of the call's target (a constant of the graph)."""
    t = _default_targets.get((dev, target))
    if t is None:
        t = _default_targets[(dev, target)] = _default_target(dev, target)
    return t.short_kv_breakpoints(d)


def _head_dim_constant(d) -> int:
    """``d`` as a Python int while torch.compile traces: a head dim b200c runs is compared with each (one guard
    under dynamic shapes, where ``d`` is symbolic and cannot be read); another one is passed as it is (its
    error comes from the preset lookup, or from the op)."""
    for x in _HEAD_DIMS:
        if d == x:
            return x
    return d


def _key_length_constant(dev: int, target: str, d: int, seq_kv) -> int:
    """A dense call's key length while torch.compile traces, as :func:`_default_json` takes it: the first
    short-key breakpoint at or above it (the same preset as the length itself,
    :func:`b200c.dsl.presets.short_kv_breakpoints`), else 0 (the head dim's preset). Only comparisons: under
    dynamic shapes the length is symbolic, and each comparison is a guard (the preset is chosen as for
    static shapes)."""
    if seq_kv is None or isinstance(seq_kv, bool) or not isinstance(seq_kv, (int, torch.SymInt)) or d not in _HEAD_DIMS:
        return 0
    if seq_kv < 1:
        return 0
    for bp in _short_kv_breakpoints(dev, target, d):
        if seq_kv <= bp:
            return bp
    return 0


# ---- schedule identity under torch.compile -----------------------------------------


def _schedule_fields() -> tuple[str, ...]:
    import dataclasses

    return tuple(f.name for f in dataclasses.fields(Schedule))


_FIELDS = _schedule_fields()


@functools.lru_cache(maxsize=512)
def _json_cached(values: tuple) -> str:
    return _validated_json(Schedule(**dict(zip(_FIELDS, values))).to_json())


@torch.compiler.assume_constant_result
def _json_of_fields(values: tuple) -> str:
    return _json_cached(values)


@torch.compiler.assume_constant_result
def _json_of_text(text: str) -> str:
    return _validated_json(text)


@torch.compiler.assume_constant_result
def _json_of_path(path) -> str:
    return _json_of_file(os.fspath(path))


def _traced_schedule_json(schedule) -> str:
    """Schedule JSON while torch.compile traces: a constant of the compiled graph.

    The traced code reads the Schedule's canonical JSON (``Schedule._json``, a
    str made with the immutable Schedule), so the compiled function holds one
    guard on it, not one per field, and no graph break occurs; a Schedule
    whose knobs JSON cannot hold has its field values read instead (one guard
    each). (Passing the Schedule object itself to a constant-result function
    fails on torch 2.11: "can't reconstruct arbitrary frozen dataclass
    instances", measured on the H200.) A schedule file is read when the
    function is compiled; edits after that need a recompile
    (``torch._dynamo.reset()`` or a new ``torch.compile``).
    """
    if isinstance(schedule, Schedule):
        text = schedule._json
        if text is not None:
            return _json_of_text(text)
        return _json_of_fields(tuple([getattr(schedule, name) for name in _FIELDS]))
    if isinstance(schedule, (str, os.PathLike)):
        return _json_of_path(schedule)
    raise _not_a_schedule(schedule)


def _not_a_schedule(schedule) -> ScheduleError:
    """The error of a ``schedule=`` that is neither a Schedule nor a path; a BackwardSchedule is told where it goes."""
    from ..dsl.backward_schedule import BackwardSchedule

    text = f"schedule must be a b200c.Schedule or a schedule file path, got {type(schedule).__name__}"
    if isinstance(schedule, BackwardSchedule):
        text += (": a BackwardSchedule sets the backward pass, which b200c.attention runs with the built-in one of "
                 "its head dim; to run your own, call b200c.attention_backward(q, k, v, out, dout, lse, "
                 "schedule=...) with the forward's out and lse (b200c.attention(..., return_lse=True))")
    return ScheduleError(text)


# ---- arguments ----------------------------------------------------------------------


_fits: set = set()  # (schedule JSON, target) pairs that _check_target_fits passed


def _check_target_fits(schedule_json: str, target: str) -> None:
    """A target named explicitly must be one the schedule can be generated for, checked before the
    tensors: e.g. a Hopper schedule (block_m=64) with ``target="sm100a"`` raises the ScheduleError
    that ``b200c compile --target sm100a`` gives, not a tensor or device error.

    Raises:
        ScheduleError / ResourceError: the schedule breaks a rule or budget of that target.
    """
    from ..codegen import make_plan
    from ..codegen.targets import resolve, schedule_target

    plan_target = resolve(target).source_target()  # emulate: the sm100a kernel
    s = Schedule.from_json(schedule_json)
    if schedule_target(s) is not plan_target:  # its own target was checked with the schedule
        make_plan(s, plan_target)
    _fits.add((schedule_json, target))


def _check_options(target, layout) -> None:
    """Raise for an unknown ``target`` (TargetError, :func:`b200c.codegen.targets.resolve`) or ``layout``;
    a known target name joins the set the calls' fast path looks it up in."""
    if not isinstance(target, Hashable) or target not in _TARGETS:
        from ..codegen.targets import resolve_or_auto

        resolve_or_auto(target)  # raises TargetError naming the targets
        _TARGETS.add(target)
    if layout not in _LAYOUTS:
        raise LaunchError(f"layout={layout!r}: use 'bhsd' (B, H, S, D) or 'bshd' (B, S, H, D)")


_check_scale = softmax_scale_value  # None, or a float the kernel computes right (raises LaunchError)


def _direct_path_ok(q, k, v) -> bool:
    """Plain eager CUDA tensors with no autograd (reverse or forward mode), tracing, modes or
    transforms: skip the dispatcher."""
    return (
        type(q) is _Tensor and type(k) is _Tensor and type(v) is _Tensor
        and q.is_cuda and k.is_cuda and v.is_cuda
        and not (_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad))
        and _no_tracing()
    )


_grad_enabled = torch.is_grad_enabled
try:
    _dispatch_modes = torch._C._len_torch_dispatch_stack
    _function_modes = torch._C._is_torch_function_mode_enabled
    _jit_tracing = torch._C._get_tracing_state
    _functorch_level = torch._C._functorch.maybe_current_level
    _forward_ad = torch.autograd.forward_ad
    _forward_ad._current_level  # noqa: B018  (present: checked below)

    def _no_tracing() -> bool:
        return (not _dispatch_modes() and not _function_modes() and _jit_tracing() is None
                and _functorch_level() is None and _forward_ad._current_level < 0)

    DIRECT_PATH = True
except AttributeError:  # a torch without these internals: always use the dispatcher
    def _no_tracing() -> bool:
        return False

    DIRECT_PATH = False  # reported by scripts/host_overhead.py


# ---- the entry points ---------------------------------------------------------------


def attention(q, k, v, *, schedule=None, causal: bool = False, softmax_scale=None, return_lse: bool = False,
              layout: str = "bhsd", target: str = "auto", score_mod=None, mask_mod=None, sinks=None,
              window_size=None, deterministic: bool = False, backward_schedule=None, **kwargs):
    """Attention ``softmax(q @ k^T * softmax_scale [+ causal mask]) @ v`` with a b200c kernel,
    like FlashAttention's ``flash_attn_func``.

    Args:
        q: (B, H, S_q, D) with ``layout="bhsd"`` (like torch SDPA) or
            (B, S_q, H, D) with ``layout="bshd"`` (like FlashAttention);
            torch.bfloat16 on a CUDA device. D is 64, 128 or 256; any
            S_q >= 0.
        k, v: (B, H_kv, S_kv, D) (or (B, S_kv, H_kv, D)), same dtype and
            device as q; H must be a multiple of H_kv (GQA/MQA: query head h
            reads K/V head ``h // (H / H_kv)``); any S_kv >= 0.
            Any strides with a contiguous last dimension work without copies
            (e.g. slices of a packed QKV tensor): 16-byte aligned data and
            S/H/B strides that are multiples of 8 elements.
        schedule: a :class:`b200c.Schedule`, the path of a schedule file
            (a ``.py`` file defining ``schedule``), or None: the built-in
            schedule of the target for D (:func:`b200c.default_schedule`; with
            ``target="auto"`` the device's native target: the Hopper
            presets on an H100/H200, the B200 ones on a B200; on Hopper a
            short S_kv takes smaller K/V tiles when the preset's would mostly
            compute padding: ``default_schedule(D, target, seq_kv=S_kv)``;
            calls with mods keep their own presets; under torch.compile with
            dynamic shapes the same preset, chosen by comparing the symbolic
            S_kv with the lengths where the choice changes). The kernel is generated
            for the inputs' D (``schedule.replace(head_dim=D)``). A file is
            read again when it, or any file it was built from (schedule files
            it loads, helper modules next to it), changes on disk.
        causal: bottom-right aligned, as FlashAttention >= 2.1: query row ``r``
            (0-based, within its sequence) sees keys ``0 .. r + S_kv - S_q``;
            for S_q == S_kv that is the usual lower-triangular mask. Rows that
            see no key (S_q > S_kv: the first S_q - S_kv rows) give O = 0 and
            LSE = -inf.
        softmax_scale: natural-log units; default ``1 / sqrt(D)``. A Python
            float or int, a numpy scalar or a 0-d real tensor; 0 gives a
            uniform softmax. Refused: negative, NaN, infinite, and scales
            whose ``scale * log2(e)`` overflows FP32 (about 2.36e38).
        return_lse: also return the log-sum-exp of each row,
            ``log(sum_j exp(q_i . k_j * softmax_scale))`` in natural-log units.
        layout: ``"bhsd"`` or ``"bshd"``: the order of the dimensions above
            (and of the result).
        target: ``"auto"`` (a B200 schedule: ``"sm100a"`` on compute
            capability 10.0, refused with UnsupportedDeviceError on 9.0, which
            runs it only emulated: pass ``"emulate"``; a Hopper schedule,
            examples/hopper: ``"sm90a"``), ``"sm100a"`` (B200), ``"sm90a"``
            (the native Hopper kernel of a Hopper schedule) or ``"emulate"``
            (the sm100a kernel on H100/H200, correctness only).
        score_mod: FlexAttention's ``score_mod(score, b, h, q_idx, kv_idx) -> score``,
            applied to the scaled score (``q . k * softmax_scale``, natural-log
            units, FP32) before the softmax; ``b``, ``h``, ``q_idx``, ``kv_idx``
            are int32 (sequence, query head, query row and key position within
            the sequence). Traced with torch.fx and compiled into the kernel
            (the ops it may use: :data:`b200c.dsl.mods.OPS`); tensors it
            captures are kernel inputs indexed by those arguments, so new
            values do not recompile. Recipes: :mod:`b200c.mods`.
        mask_mod: FlexAttention's ``mask_mod(b, h, q_idx, kv_idx) -> bool``
            (True: the key is visible). Its block mask (which K/V tiles each
            work item visits, and which of them it sees whole) is computed with
            torch ops on q's device and cached per (function, captured tensors,
            shapes); the kernel skips empty tiles and evaluates the mask on the
            partial ones only. Combined with ``causal`` (both must hold). A row
            that sees no key gives O = 0 and LSE = -inf. A mask_mod that is
            exactly ``q_idx >= kv_idx`` (read from its traced graph) with
            S_q == S_kv runs the ``causal=True`` kernel instead (the same mask),
            and one that is a sliding window ``q_idx - left <= kv_idx <= q_idx
            + right`` (e.g. ``b200c.mods.sliding_window``) runs what
            ``window_size=(left, right)`` runs (``causal=True`` with it when
            right = 0).
        sinks: attention sinks (gpt-oss): one logit per query head, a real
            tensor (H,) on q's device, taken as an extra entry of every row's
            softmax denominator (not of O); the LSE includes it.
        window_size: ``(left, right)`` as flash_attn_func's: query row ``r``
            sees keys ``r + S_kv - S_q - left .. r + S_kv - S_q + right``
            (bottom-right aligned; -1: unbounded on that side). A built-in
            mask_mod (combined with ``mask_mod`` and ``causal``); no mask
            tensor.
        deterministic: as flash_attn_func's: the backward adds the K/V
            tiles' parts of dQ in K/V tile order, so gradients are bit-equal
            from run to run (slower than the default atomic additions). Also
            on whenever ``torch.use_deterministic_algorithms(True)`` is. The
            forward is deterministic either way.
        backward_schedule: None (the built-in backward schedule of D), a
            :class:`b200c.BackwardSchedule` or the path of a file defining
            one: what ``backward()`` through this call runs (its head_dim set
            to D; see :func:`b200c.attention_backward`). Eager calls only for
            now: traced by torch.compile it raises a ScheduleError, so
            ``fullgraph=True`` fails and otherwise the graph breaks there and
            the call runs eagerly with it. Calls with mods have no backward
            yet: refused with a BackwardNotSupportedError when an input
            requires grad, as without it.

    Calls with ``score_mod``, ``mask_mod``, ``sinks`` or ``window_size`` run
    eagerly (torch.compile breaks the graph around them) and are forward-only.

    Returns:
        torch.Tensor ``out``: bfloat16, q's shape and, for dense q, q's
        strides; or ``(out, lse)`` with ``return_lse``: lse float32
        (B, H, S_q) for either layout (FlashAttention's ``softmax_lse``).
        Empty inputs (B, H or S_q = 0) give an empty result and S_kv = 0
        gives zeros (LSE -inf), without a launch. Special values propagate
        as in torch's FP32 SDPA: a NaN among a row's scores makes that row
        NaN.

    Raises:
        ScheduleError / ResourceError / IssueOrderError: invalid or infeasible
            schedule, also for a ``target`` named explicitly (checked before
            the tensors), or a schedule that cannot
            hold the inputs' head dim (ResourceError naming the budget, e.g.
            two Q stages at D = 256 need 768 of 512 TMEM columns). With
            ``schedule=None`` a head dim other than 64, 128 or 256 is a
            ScheduleError (no built-in schedule for it).
        LaunchError: a tensor or argument rule is broken (names the tensor or
            argument, the rule and the value).
            Also a keyword this function does not take (``**kwargs`` only
            catches it to say what to pass): torch SDPA's ``is_causal``
            (use ``causal=``), ``scale`` (use ``softmax_scale=``),
            ``attn_mask``, ``dropout_p`` and ``enable_gqa`` (arguments of
            the SDPA drop-in, :func:`b200c.scaled_dot_product_attention`),
            or a misspelt name.
        TargetError: an unknown ``target`` name.
        UnsupportedDeviceError: the GPU cannot run the target.
        BuildError: nvcc missing or compilation failed.
        BarrierTimeoutError: an earlier emulated launch timed out (see
            :func:`b200c.runtime.check_hang`).
        BackwardNotSupportedError: raised by ``backward()`` through this op (the
            forward works on inputs that require grad) for what the backward kernels
            do not cover yet: a device other than compute capability 9.0 (H100 /
            H200), a gradient into the returned LSE (also when it is the only
            gradient). A ``backward_schedule`` that ``backward()`` would refuse
            is refused at the call (ScheduleError / ResourceError /
            BackwardNotSupportedError). Where covered,
            ``backward()`` runs b200c's sm90a backward kernels; their gradients
            are first order only (differentiating them again raises). At the
            call: a ``softmax_scale`` tensor that requires grad, in grad mode.

    Performance: the first call per (schedule, head dim, target, device)
    generates, builds (cached on disk, verified by sha256) and loads the
    kernel. Later calls on plain CUDA tensors only allocate the output (and
    the LSE) and call ``cuLaunchKernel`` asynchronously on the current stream:
    tensor maps and the parameter block are cached per data pointers, shapes,
    strides and options (``python scripts/host_overhead.py`` measures the
    host time per call). Calls are CUDA-graph capturable once the kernel is
    loaded. With ``q_stages`` > 1 and GQA, a work item may hold that many
    query heads of one K/V group instead of consecutive Q tiles (causal,
    short S_q; see :func:`b200c.runtime.launcher.pack_heads`).

    torch.compile: registered as the custom ops ``torch.ops.b200c.attention``
    and (``return_lse=True``) ``torch.ops.b200c.attention_lse``, returning
    ``(out, lse)``, so ``torch.compile(fullgraph=True)`` traces them
    without a graph break; a schedule file is read when the function is
    compiled; ``softmax_scale`` must then be a Python number.

    Example:
        >>> q, k, v = (torch.randn(2, 16, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        >>> o = b200c.attention(q, k, v)  # the built-in schedule of the GPU's target
        >>> o, lse = b200c.attention(q, k[:, :4], v[:, :4], causal=True, return_lse=True)  # GQA, 16 on 4 heads
        >>> o = b200c.attention(q, k, v, schedule=b200c.default_schedule(128, target="sm90a"))  # an H100/H200's
    """
    if kwargs:
        raise _unexpected_keyword(kwargs)
    if deterministic is not False:
        deterministic = flag_value("deterministic", deterministic)
    backward_json = "" if backward_schedule is None else _checked_backward_json(backward_schedule, q, deterministic)
    if window_size is not None and type(window_size) in (tuple, list) and tuple(window_size) == (-1, -1):
        window_size = None  # flash_attn's "no window": the plain kernel
    if score_mod is not None or mask_mod is not None or sinks is not None or window_size is not None:
        return _attention_mods(q, k, v, schedule, causal, softmax_scale, return_lse, layout, target, score_mod,
                               mask_mod, sinks, window_size, deterministic=deterministic)
    if torch.compiler.is_compiling():
        return _attention_traced(q, k, v, schedule, causal, softmax_scale, return_lse, layout, target, deterministic)
    if not (type(q) is _Tensor and type(k) is _Tensor and type(v) is _Tensor):
        check_tensor_types(q, k, v)  # subclasses (fake tensors, Parameters) pass; anything else raises
    if type(target) is not str or target not in _TARGETS or layout not in _LAYOUTS:
        _check_options(target, layout)
    if causal is not False and causal is not True:
        causal = flag_value("causal", causal)
    if return_lse is not False and return_lse is not True:
        return_lse = flag_value("return_lse", return_lse)
    scale = _check_scale(softmax_scale)
    if schedule is None:
        schedule = default_schedule_for(q, target, seq_kv=_seq_kv(k, layout))
    schedule_json = _schedule_json(schedule, target)  # the schedule first: its errors come before tensor/device ones
    if _direct_path_ok(q, k, v):
        out, lse = launcher.run(schedule_json, target, layout, q, k, v, scale, op.SCHEDULES, causal, return_lse)
        return (out, lse) if return_lse else out
    return _call_op(q, k, v, schedule_json, scale, layout, target, causal, return_lse, deterministic, backward_json)


@functools.lru_cache(maxsize=64)
def _backward_schedule_json(schedule) -> str:
    """A BackwardSchedule's validated JSON, once per schedule value (a frozen dataclass: equal schedules hit)."""
    return schedule.validate().to_json()


def _checked_backward_json(schedule, q, deterministic) -> str:
    """:func:`_backward_json`, and the schedule refused at the call where its ``backward()`` would refuse it
    (:func:`b200c.runtime.backward_launch.check_call_schedule`, for q's head dim when b200c has backward
    kernels for it; other head dims are refused by their own rules)."""
    text = _backward_json(schedule)
    d = q.shape[-1] if isinstance(q, torch.Tensor) and q.dim() in (3, 4) else None
    if d in (64, 128, 256):
        from . import backward_launch

        backward_launch.check_call_schedule(text, d, bool(deterministic) or torch.are_deterministic_algorithms_enabled())
    return text


def _backward_json(schedule) -> str:
    """The JSON of a call's ``backward_schedule=`` (a BackwardSchedule, or a file defining one: loaded once, as
    :func:`b200c.attention_backward` loads it).

    Raises:
        ScheduleError: under torch.compile (not supported yet), not a BackwardSchedule or such a file, or invalid.
    """
    from ..dsl.backward_schedule import BackwardSchedule

    if torch.compiler.is_compiling():
        raise ScheduleError("backward_schedule= is not supported under torch.compile yet (the compiled graph takes "
                            "the built-in backward schedule): call without it inside the compiled function, or "
                            "run the call eagerly")
    if isinstance(schedule, BackwardSchedule):
        return _backward_schedule_json(schedule)
    if isinstance(schedule, (str, os.PathLike)):
        return _json_of_file(os.fspath(schedule), backward=True)
    raise ScheduleError(f"backward_schedule must be a b200c.BackwardSchedule or the path of a file defining one "
                        f"(b200c.default_backward_schedule(head_dim) is the built-in one), got {type(schedule).__name__}")


@functools.cache
def _mods_runtime():
    """What calls with mods use, imported on the first one (``import b200c`` stays light) and not
    again per call (an import statement in a function costs about a microsecond each time)."""
    from ..codegen.mods import mask_knob
    from . import mod_call
    from .mod_window import window_mask

    return mask_knob, mod_call, window_mask


@torch.compiler.disable
def _attention_mods(q, k, v, schedule, causal, softmax_scale, return_lse, layout, target, score_mod, mask_mod,
                    sinks, window_size, prepared=None, deterministic=False):
    """:func:`attention` with mods (eager: the functions are traced here, the captured tensors are
    kernel arguments; see :mod:`b200c.runtime.mod_call`). ``prepared``: a ModCall made by the caller
    (the SDPA drop-in's attn_mask, :mod:`b200c.runtime.sdpa_mask`) instead of the functions."""
    mask_knob, mod_call, window_mask = _mods_runtime()
    check_tensor_types(q, k, v)
    _check_options(target, layout)
    causal, return_lse, scale, schedule_json = _mod_call_args(q, k, v, schedule, causal, return_lse, softmax_scale,
                                                              target, score_mod)
    if q.dim() != 4 or k.dim() != 4:
        raise LaunchError(f"q and k must be 4-D ({'B, H, S, D' if layout == 'bhsd' else 'B, S, H, D'}), got "
                          f"{tuple(q.shape)} and {tuple(k.shape)}")
    s_q, s_kv = (q.shape[2], k.shape[2]) if layout == "bhsd" else (q.shape[1], k.shape[1])
    heads = q.shape[1] if layout == "bhsd" else q.shape[2]
    if window_size is not None:
        mask_mod = window_mask(window_size, s_q, s_kv, q.device, mask_mod, batch=q.shape[0])
    if prepared is None:
        mod_call.check_no_grad(score_mod, mask_mod, sinks)
    mc = prepared if prepared is not None else mod_call.prepare(score_mod, mask_mod, sinks, q)
    knob = mask_knob(mc.mods) if s_q == s_kv and window_size is None else None
    if knob == "causal":  # the causal knob's mask, as a mask_mod
        return attention(q, k, v, schedule=schedule, causal=True, softmax_scale=softmax_scale, return_lse=return_lse,
                         layout=layout, target=target, deterministic=deterministic)
    if knob is not None and not causal:  # a sliding window as a mask_mod: the window recipe's kernel
        return attention(q, k, v, schedule=schedule, causal=knob[1] == 0, softmax_scale=softmax_scale,
                         return_lse=return_lse, layout=layout, target=target, window_size=knob,
                         deterministic=deterministic)
    mc = mc.for_sizes(q.shape[0], heads, s_q, s_kv)
    mc.check(q, heads)
    schedule_json = _mods_schedule_json(q, schedule, schedule_json, target, mc)
    out, lse = launcher.run((schedule_json, mc.mods_json), target, layout, q, k, v, scale, op.MODDED, causal,
                            return_lse, mc)
    return (out, lse) if return_lse else out


def _call_op(q, k, v, schedule_json: str, scale: float | None, layout: str, target: str, causal: bool,
             return_lse: bool, deterministic: bool = False, backward_json: str = ""):
    if layout == "bshd":  # views only: the kernel reads any strides
        q, k, v = (t.transpose(1, 2) if t.dim() == 4 else t for t in (q, k, v))
    if scale is None:
        scale = float(q.shape[-1]) ** -0.5 if q.dim() > 0 and q.shape[-1] > 0 else 1.0
    # the schema's defaults otherwise: fewer arguments per call
    more = (bool(deterministic), backward_json) if backward_json else (True,) if deterministic else ()
    if return_lse:
        out, lse = torch.ops.b200c.attention_lse(q, k, v, schedule_json, scale, target, causal, *more)
        return (out.transpose(1, 2) if layout == "bshd" else out), lse
    out = torch.ops.b200c.attention(q, k, v, schedule_json, scale, target, causal, *more)
    return out.transpose(1, 2) if layout == "bshd" else out


def _attention_traced(q, k, v, schedule, causal, softmax_scale, return_lse, layout, target, deterministic=False):
    check_tensor_types(q, k, v)
    _check_options(target, layout)
    causal = flag_value("causal", causal)
    return_lse = flag_value("return_lse", return_lse)
    scale = _check_scale(softmax_scale)
    return _call_op(q, k, v, _traced_json(q, schedule, target, _seq_kv(k, layout)), scale, layout, target, causal,
                    return_lse, deterministic)


def _seq_kv(k, layout: str):
    """k's key length (an int, or a SymInt while torch.compile traces dynamic shapes), None if k is not 4-D."""
    if not isinstance(k, torch.Tensor) or k.dim() != 4:
        return None
    return k.shape[2] if layout == "bhsd" else k.shape[1]


def _traced_json(q, schedule, target, seq_kv=None) -> str:
    """Schedule JSON while torch.compile traces: the given schedule's, or the built-in one's (``seq_kv``:
    a dense call's key length, also a symbolic one: :func:`_key_length_constant`)."""
    if schedule is None:
        dev = q.get_device() if q.is_cuda else -1
        d = _head_dim_constant(q.shape[-1])
        return _default_json(dev, target, d, _key_length_constant(dev, target, d, seq_kv))
    return _traced_schedule_json(schedule)


_SDPA_NAMES = {"is_causal": "causal", "scale": "softmax_scale"}  # torch SDPA's name -> b200c.attention's
# flash_attn_func's keywords that are score_mods here
_FA_MOD_NAMES = {"softcap": "score_mod=b200c.mods.softcap(cap) (tanh softcapping, as flash_attn's softcap)",
                 "alibi_slopes": "score_mod=b200c.mods.alibi(slopes) (b200c.mods.alibi_slopes(heads) makes "
                                 "the standard slopes)"}


def _unexpected_keyword(kwargs: dict, varlen: bool = False) -> LaunchError:
    """The error of a call to :func:`attention` (``varlen``: :func:`attention_varlen`) with a keyword it does not
    take (the first of ``kwargs``): torch SDPA's names for its arguments, SDPA-only arguments, flash_attn's
    softcap / alibi_slopes, or a misspelling (with the closest name)."""
    fname = "b200c.attention_varlen" if varlen else "b200c.attention"
    name, value = next(iter(kwargs.items()))
    given = keyword_given(fname, name, value)
    if varlen and name == "layout":
        return LaunchError(f"{given}: attention_varlen takes packed (total_tokens, H, D) tensors, flash_attn_"
                           "varlen_func's layout; it has no layout argument")
    if varlen and name == "dropout_p":
        return LaunchError(f"{given}: b200c kernels have no dropout; drop the argument for dropout_p=0 (for "
                           "dropout_p > 0 use flash_attn_varlen_func)")
    if name in _SDPA_NAMES:
        drop_in = "" if varlen else " (or call b200c.scaled_dot_product_attention, the SDPA drop-in)"
        return LaunchError(f"{given}: that is torch SDPA's name; {fname} takes flash_attn_func's: "
                           f"{_SDPA_NAMES[name]}={drop_in}")
    if name in _FA_MOD_NAMES:
        return LaunchError(f"{given}: {fname} takes it as a score_mod: {_FA_MOD_NAMES[name]}")
    if name in ("attn_mask", "dropout_p", "enable_gqa"):
        instead = {"attn_mask": "; here a mask is mask_mod= (or causal=, window_size=)",
                   "dropout_p": " (b200c kernels have no dropout: it falls back to torch's for dropout_p > 0)",
                   "enable_gqa": "; here GQA needs no flag (k and v with fewer heads than q)"}[name]
        return LaunchError(f"{given}: {name} is an argument of the SDPA drop-in, "
                           f"b200c.scaled_dot_product_attention{instead}")
    return no_such_keyword(fname, attention_varlen if varlen else attention, name, given,
                           ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k"))


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, schedule=None,
                     causal: bool = False, softmax_scale=None, return_lse: bool = False, target: str = "auto",
                     check_seqlens: bool = True, score_mod=None, mask_mod=None, sinks=None, window_size=None,
                     deterministic: bool = False, backward_schedule=None, **kwargs):
    """Attention over a batch of sequences of different lengths packed into one tensor, like
    FlashAttention's ``flash_attn_varlen_func``.

    Args:
        q: (total_q, H, D) bfloat16 on a CUDA device: every sequence's query
            rows, one after the other. D is 64, 128 or 256.
        k, v: (total_kv, H_kv, D), same dtype and device; H a multiple of
            H_kv (GQA/MQA). Any strides with a contiguous last dimension and
            the 16-byte rules of :func:`b200c.attention` work without copies.
        cu_seqlens_q, cu_seqlens_k: torch.int32, shape (B + 1,), on q's
            device: sequence ``b`` owns q rows
            ``cu_seqlens_q[b]:cu_seqlens_q[b + 1]`` and k/v rows
            ``cu_seqlens_k[b]:cu_seqlens_k[b + 1]``. Empty sequences (length
            0 in q and/or k) are allowed.
        max_seqlen_q, max_seqlen_k: ints >= the longest query / key sequence
            (max_seqlen_q sets the grid).
        schedule, softmax_scale, target: as :func:`b200c.attention`.
        causal: as :func:`b200c.attention`, per sequence (S_q, S_kv: that
            sequence's lengths). A query sequence whose key sequence is empty
            gives O = 0 and LSE = -inf.
        return_lse: also return the LSE, float32 (H, total_q)
            (FlashAttention's varlen convention).
        check_seqlens: check cu_seqlens' values before launching (they must
            not decrease, start at >= 0, end inside the tensors, and respect
            max_seqlen_*): one small device-to-host copy, i.e. a sync of the
            current stream; skipped while a CUDA graph is being captured. With
            the check, query rows outside every sequence are set to 0 (LSE
            -inf). Pass False to skip the sync when the values are known to be
            right; wrong values are then undefined behaviour (out-of-bounds
            writes), as in FlashAttention.
        score_mod, mask_mod, sinks, window_size: as :func:`b200c.attention`,
            with ``b`` the sequence and ``q_idx`` / ``kv_idx`` positions within
            it (the window per sequence; eager only, forward-only).
        deterministic: as :func:`b200c.attention`: dQ's parts added in K/V
            tile order in the backward.
        backward_schedule: as :func:`b200c.attention`'s.

    Returns:
        ``out`` (q's shape, bfloat16) or ``(out, lse)`` with ``return_lse``.

    Raises:
        LaunchError: a tensor, argument or cu_seqlens value breaks a rule
            (names it, the rule and the value); a keyword this function does
            not take (``**kwargs`` only catches it to say what to pass:
            ``layout``, ``dropout_p``, torch SDPA's names, ``softcap``, a
            misspelling); otherwise as :func:`b200c.attention`.

    torch.compile: the custom op ``torch.ops.b200c.attention_varlen``;
    ``max_seqlen_*`` are graph constants.
    """
    if kwargs:
        raise _unexpected_keyword(kwargs, varlen=True)
    deterministic = flag_value("deterministic", deterministic)  # mods have no backward: checked, not used
    backward_json = "" if backward_schedule is None else _checked_backward_json(backward_schedule, q, deterministic)
    if score_mod is not None or mask_mod is not None or sinks is not None or window_size is not None:
        return _attention_varlen_mods(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, schedule,
                                      causal, softmax_scale, return_lse, target, check_seqlens, score_mod, mask_mod,
                                      sinks, window_size)
    if not torch.compiler.is_compiling():
        check_tensor_types(q, k, v)
    if type(target) is not str or target not in _TARGETS:
        _check_options(target, "bhsd")
    max_seqlen_q = seqlen_value("max_seqlen_q", max_seqlen_q)
    max_seqlen_k = seqlen_value("max_seqlen_k", max_seqlen_k)
    causal = flag_value("causal", causal)
    return_lse = flag_value("return_lse", return_lse)
    check_seqlens = flag_value("check_seqlens", check_seqlens)
    scale = _check_scale(softmax_scale)
    if torch.compiler.is_compiling():
        schedule_json = _traced_json(q, schedule, target)
    else:
        if schedule is None:
            schedule = default_schedule_for(q, target)
        schedule_json = _schedule_json(schedule, target)
        if (_direct_path_ok(q, k, v) and type(cu_seqlens_q) is _Tensor and type(cu_seqlens_k) is _Tensor):
            out, lse = op.run_schedule_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                              schedule_json, scale, target, causal, return_lse, check_seqlens)
            return (out, lse) if return_lse else out
    for name, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if not isinstance(t, torch.Tensor):
            raise LaunchError(f"{name} must be a torch.Tensor of int32, got {type(t).__name__}")
    if scale is None:
        scale = float(q.shape[-1]) ** -0.5 if q.dim() > 0 and q.shape[-1] > 0 else 1.0
    # the schema's defaults otherwise
    more = (deterministic, backward_json) if backward_json else (True,) if deterministic else ()
    out, lse = torch.ops.b200c.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                                schedule_json, scale, target, causal, return_lse, check_seqlens,
                                                *more)
    return (out, lse) if return_lse else out


@torch.compiler.disable
def _attention_varlen_mods(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, schedule, causal,
                           softmax_scale, return_lse, target, check_seqlens, score_mod, mask_mod, sinks,
                           window_size=None):
    """:func:`attention_varlen` with mods (eager; see :func:`_attention_mods`)."""
    _, mod_call, window_mask = _mods_runtime()
    check_tensor_types(q, k, v)
    _check_options(target, "bhsd")
    max_seqlen_q = seqlen_value("max_seqlen_q", max_seqlen_q)
    max_seqlen_k = seqlen_value("max_seqlen_k", max_seqlen_k)
    check_seqlens = flag_value("check_seqlens", check_seqlens)
    causal, return_lse, scale, schedule_json = _mod_call_args(q, k, v, schedule, causal, return_lse, softmax_scale,
                                                              target, score_mod)
    for name, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if not isinstance(t, torch.Tensor):
            raise LaunchError(f"{name} must be a torch.Tensor of int32, got {type(t).__name__}")
    if q.dim() != 3:
        raise LaunchError(f"q must be 3-D (total_q, H, D), got {tuple(q.shape)}")
    if window_size is not None:
        mask_mod = window_mask(window_size, max_seqlen_q, max_seqlen_k, q.device, mask_mod,
                               cu_seqlens=(cu_seqlens_q, cu_seqlens_k))
    mod_call.check_no_grad(score_mod, mask_mod, sinks)
    mc = mod_call.prepare(score_mod, mask_mod, sinks, q).for_sizes(cu_seqlens_q.shape[0], q.shape[1],
                                                                     max_seqlen_q, max_seqlen_k)
    mc.check(q, q.shape[1])
    schedule_json = _mods_schedule_json(q, schedule, schedule_json, target, mc)
    out, lse = op.run_schedule_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, schedule_json,
                                      scale, target, causal, return_lse, check_seqlens, mc)
    return (out, lse) if return_lse else out


def _mod_call_args(q, k, v, schedule, causal, return_lse, softmax_scale, target, score_mod) -> tuple:
    """The checks both calls with mods make after the tensors' types and the options:
    ``(causal, return_lse, scale, schedule_json)``. The schedule's errors come before the inputs' (a
    built-in one's: the head dim and the device; :func:`_mods_schedule_json` decides between the
    target's two built-in schedules once the mods are traced).

    Raises:
        LaunchError, ScheduleError, UnsupportedDeviceError, BackwardNotSupportedError: as the checks do.
    """
    causal = flag_value("causal", causal)
    return_lse = flag_value("return_lse", return_lse)
    scale = _check_scale(softmax_scale)
    _check_mod_scale(score_mod, scale)
    schedule_json = _schedule_json(schedule if schedule is not None else default_schedule_for(q, target, mods=True),
                                   target)
    _forward_only_mods(q, k, v)
    return causal, return_lse, scale, schedule_json


def _mods_schedule_json(q, schedule, schedule_json: str, target, mc) -> str:
    """The schedule of a call with mods: the given one, or the built-in dense one for light mods (at most
    one FMA per score: :func:`b200c.codegen.mods.light`), else the built-in mods one (``schedule_json``)."""
    if schedule is None and mc.light:
        return _schedule_json(default_schedule_for(q, target), target)
    return schedule_json


_MIN_MOD_SCALE = 2.0 ** -60


def _check_mod_scale(score_mod, scale) -> None:
    """A score_mod's result is scaled back by 1 / softmax_scale in the kernel (the exponent folds the scale
    in): below 2^-60 that factor would overflow FP32 for results above about 2^67.

    Raises:
        LaunchError: a score_mod with ``softmax_scale`` < 2^-60 (0 included).
    """
    if score_mod is not None and scale is not None and scale < _MIN_MOD_SCALE:
        raise LaunchError(f"softmax_scale={scale!r} with a score_mod: the kernel gives score_mod the scaled score and "
                          "scales its result back by 1 / softmax_scale, which overflows below 2^-60; pass "
                          "softmax_scale=1 and scale the score inside score_mod instead (e.g. multiply it by 0)")


def _forward_only_mods(q, k, v) -> None:
    """Calls with mods are forward-only and not captured in CUDA graphs (the launcher checks the devices).

    Raises:
        BackwardNotSupportedError: an input requires grad (with grad mode on).
        LaunchError: a CUDA graph is being captured (a call's block mask is a cached tensor the graph
            would keep a pointer to after the cache freed it).
    """
    if q.is_cuda and torch.cuda.is_current_stream_capturing():
        raise LaunchError("calls with score_mod / mask_mod / sinks / window_size cannot be captured in a CUDA graph "
                          "yet (their block masks and traced functions are cached per call); run them eagerly, "
                          "or capture calls without mods")
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        from ..errors import BackwardNotSupportedError

        raise BackwardNotSupportedError(
            "b200c attention with score_mod / mask_mod / sinks / window_size is forward-only and q, k or v requires "
            "grad; call it under torch.no_grad() or on detached tensors (torch's flex_attention has a backward)")


def attention_generated(q, k, v, generated, *, causal: bool = False, softmax_scale=None,
                        return_lse: bool = False, target: str = "auto"):
    """Run a :class:`b200c.codegen.GeneratedKernel` directly (eager only, no custom op, no autograd).

    For kernels that are not a Schedule (e.g. hand-edited or deliberately
    broken variants in tests). q is logical (B, H, S_q, D), k and v
    (B, H_kv, S_kv, D) with D the kernel's head dim; same rules, result and
    errors as :func:`b200c.attention`. The build is cached on disk by source
    text and the launch per tensor pointers/shapes/strides.
    """
    check_tensor_types(q, k, v)
    _check_options(target, "bhsd")
    causal = flag_value("causal", causal)
    return_lse = flag_value("return_lse", return_lse)
    scale = _check_scale(softmax_scale)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        from ..errors import BackwardNotSupportedError

        raise BackwardNotSupportedError(
            "attention_generated has no autograd formula; pass detached q, k, v or call it under torch.no_grad() "
            "(b200c.attention supports inputs that require grad, forward only)"
        )
    out, lse = launcher.run(generated, target, "bhsd", q, k, v, scale, op.GENERATED, causal, return_lse)
    return (out, lse) if return_lse else out
