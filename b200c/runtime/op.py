"""The ``b200c::attention``, ``b200c::attention_lse`` and ``b200c::attention_varlen`` operators
(torch.library: real, fake and autograd kernels; see "registration" below for why not ``custom_op``).

Schedules cross the op boundary as ``Schedule.to_json()`` text; the runtime
specializes it to the inputs' head dim (:func:`specialized_json`), the
generated kernel is cached per JSON string, the built+loaded kernel per
(JSON, target, device) and each launch configuration per tensor
pointers/shapes/strides and options (:mod:`b200c.runtime.launcher`), so a
repeated call only launches. ``b200c::attention`` returns ``out``,
``b200c::attention_lse`` ``(out, lse)``; ``b200c::attention_varlen`` returns
``(out, lse)``, lse an empty FP32 tensor unless ``return_lse``. The fake impls only propagate shapes
(and check the inputs and that the schedule holds their head dim), so
``torch.compile(fullgraph=True)`` traces calls without touching data.

The ops' autograd formulas (eager and ``torch.compile``): with an input that requires grad,
``b200c::attention`` runs ``b200c::attention_lse`` (``b200c::attention_varlen`` itself with
``return_lse=True``) and saves q, k, v, out and the LSE; the backward is ``b200c::attention_backward``
(``b200c::attention_varlen_backward``: custom ops whose fake impls let AOT autograd trace them), the
sm90a backward kernels. What they do not cover yet raises :class:`b200c.BackwardNotSupportedError` when
the backward runs, never in the forward: a gradient into a returned LSE, devices other than compute
capability 9.0.
"""
from __future__ import annotations

import functools
import threading
from typing import Optional

import torch

from . import launcher
from .inputs import validate_inputs

_kernels: dict[tuple[str, str, int], object] = {}
_key_locks: dict[tuple, threading.Lock] = {}  # one lock per kernel key (see loaded_kernel)
_key_locks_lock = threading.Lock()  # guards _key_locks only: held for a dict lookup, never through a build
_capability: dict[int, tuple[tuple[int, int], str]] = {}


@functools.lru_cache(maxsize=256)
def generated_kernel(schedule_json: str, target="sm100a", mods_json: str = ""):
    """``b200c.codegen.generate(Schedule.from_json(schedule_json), target)``, cached per
    (JSON string, target, mods); a target that builds another's source (the emulation target:
    sm100a's) generates that one. ``mods_json``: a :class:`b200c.dsl.mod_records.ModSet`'s JSON
    (score_mod / mask_mod / sinks compiled in), "" for none.

    Raises:
        ScheduleError, ResourceError, IssueOrderError, TargetError.
    """
    from .. import codegen
    from ..codegen.targets import resolve
    from ..dsl import Schedule

    if not mods_json:
        return codegen.generate(Schedule.from_json(schedule_json), resolve(target).source_target())
    from ..dsl.mod_records import ModSet

    return codegen.generate(Schedule.from_json(schedule_json), resolve(target).source_target(),
                            mods=ModSet.from_json(mods_json))


@functools.lru_cache(maxsize=256)
def _schedule_target(schedule_json: str):
    from ..codegen.targets import schedule_target
    from ..dsl import Schedule

    return schedule_target(Schedule.from_json(schedule_json))


def device_capability(device: int) -> tuple[tuple[int, int], str]:
    """((major, minor), name) of CUDA device ``device`` (cached)."""
    if device not in _capability:
        _capability[device] = (torch.cuda.get_device_capability(device), torch.cuda.get_device_name(device))
    return _capability[device]


def kernel_for_generated(generated, target: str, device: int):
    """Resolve ``target`` for ``device``, build ``generated`` (disk cache) and load it.

    Raises:
        UnsupportedDeviceError, BuildError, LaunchError.
    """
    from . import driver
    from .build import build

    from ..errors import UnsupportedDeviceError

    from ..codegen.targets import resolve

    cap, name = device_capability(device)
    made_for = resolve(getattr(generated, "target", "sm100a"))
    resolved = driver.resolve_target(target, cap, name, made_for.source_target())
    if resolved.source != made_for.source:
        raise UnsupportedDeviceError(
            f"kernel {generated.launch.name!r} was generated for target {made_for.name!r} but the build target is "
            f"{resolved.name!r}; generate it with b200c.codegen.generate(schedule, target={resolved.source!r})"
        )
    return driver.load(build(generated, resolved), device)


def _key_lock(key: tuple) -> threading.Lock:
    """The lock of kernel key ``key`` (made on first use; kept, like the kernel, for the process)."""
    with _key_locks_lock:
        lock = _key_locks.get(key)
        if lock is None:
            lock = _key_locks[key] = threading.Lock()
        return lock


def loaded_kernel(schedule_json: str, target: str, device: int, mods_json: str = ""):
    """The LoadedKernel for a schedule (and mods, ``mods_json``: see :func:`generated_kernel`) on a
    device: resolve target, generate, build, load (cached).

    Threads: generation, nvcc and loading run under a lock of the kernel's key alone
    (schedule JSON, target, device, mods), so threads asking for different kernels
    compile them in parallel, while threads asking for the same one wait for its one
    build (and a failed build is retried by the next call). Across processes the disk
    cache's per-key file lock (:func:`b200c.runtime.cache.key_lock`) does the same.

    Raises:
        UnsupportedDeviceError, BuildError, LaunchError, ScheduleError.
    """
    key = (schedule_json, target, device) if not mods_json else (schedule_json, target, device, mods_json)
    lk = _kernels.get(key)
    if lk is None:
        from . import driver

        cap, name = device_capability(device)
        resolved = driver.resolve_target(target, cap, name, _schedule_target(schedule_json))  # before generating
        with _key_lock(key):
            lk = _kernels.get(key)
            if lk is None:
                gen = (generated_kernel(schedule_json, resolved) if not mods_json
                       else generated_kernel(schedule_json, resolved, mods_json))
                lk = kernel_for_generated(gen, target, device)
                _kernels[key] = lk
    return lk


_specialized: dict[tuple[str, int], object] = {}


class _Refusal(tuple):
    """A cached refusal of :func:`specialized_json`: (error class, message), never an exception
    instance. Each call raises a new exception: a cached instance raised again would grow its
    ``__traceback__`` by every call's frames (and keep their tensors alive)."""

    def error(self) -> Exception:
        return self[0](self[1])


def specialized_json(schedule_json: str, head_dim: int) -> str:
    """The schedule JSON with ``head_dim`` set to the inputs' D (``schedule.replace(head_dim=D)``),
    checked against the hardware budgets (``b200c.plan``); cached, failures too (as their class and
    message: every refused call raises a new exception, so it holds only that call's frames).

    Raises:
        ResourceError: the schedule cannot hold D (e.g. two Q stages at D = 256 need
            768 of 512 TMEM columns); the message names the budget and what to change.
        ScheduleError: another rule breaks at this head dim.
    """
    key = (schedule_json, head_dim)
    hit = _specialized.get(key)
    if hit is None:
        hit = _specialize(schedule_json, head_dim)
        if len(_specialized) >= 512:
            _specialized.clear()
        _specialized[key] = hit
    if hit.__class__ is _Refusal:
        raise hit.error()
    return hit


def _specialize(schedule_json: str, head_dim: int):
    from ..codegen import make_plan
    from ..dsl import Schedule
    from ..errors import ScheduleError

    from ..codegen.targets import schedule_target

    s = Schedule.from_json(schedule_json)
    if s.head_dim == head_dim:
        return schedule_json
    t = s.replace(head_dim=head_dim)
    try:
        # planned for the target the schedule is written for (a Hopper schedule's rules, not the ones the
        # specialized copy happens to pass or fail first)
        make_plan(t, schedule_target(s))
    except ScheduleError as e:
        hint = (f"pass a schedule that holds D = {head_dim} (b200c.default_schedule({head_dim}, "
                f"target={schedule_target(s).name!r}) does, as does schedule=None), or use "
                "torch.nn.functional.scaled_dot_product_attention (b200c.scaled_dot_product_attention falls back to it)")
        text = f"schedule {s.name!r} at the inputs' head dim D = {head_dim}: {e}; {hint}"
        return _Refusal((type(e), text))
    return t.to_json()


class _Schedules:
    """Kernel source of schedule-JSON tokens (see :func:`b200c.runtime.launcher.run`)."""

    @staticmethod
    def specialize(token: str, head_dim: int) -> str:
        return specialized_json(token, head_dim)

    @staticmethod
    def load(token: str, target: str, device: int):
        return loaded_kernel(token, target, device)


class _Generated:
    """Kernel source of GeneratedKernel tokens: no specialization, the head dim must match."""

    @staticmethod
    def specialize(generated, head_dim: int):
        if generated.launch.head_dim != head_dim:
            from ..errors import LaunchError

            raise LaunchError(
                f"kernel {generated.launch.name!r} was generated for head dim {generated.launch.head_dim} but the "
                f"inputs have D = {head_dim}; generate it from schedule.replace(head_dim={head_dim})"
            )
        return generated

    @staticmethod
    def load(generated, target: str, device: int):
        return kernel_for_generated(generated, target, device)


class _Modded:
    """Kernel source of ``(schedule JSON, mods JSON)`` tokens: a schedule with score_mod / mask_mod /
    sinks compiled in (:mod:`b200c.runtime.mod_call`)."""

    @staticmethod
    def specialize(token, head_dim: int):
        return (specialized_json(token[0], head_dim), token[1])

    @staticmethod
    def load(token, target: str, device: int):
        return loaded_kernel(token[0], target, device, token[1])


SCHEDULES = _Schedules()
GENERATED = _Generated()
MODDED = _Modded()


def run_schedule(q, k, v, schedule_json: str, softmax_scale: float | None, target: str, layout: str = "bhsd",
                 causal: bool = False, return_lse: bool = False):
    """Launch the kernel of a (validated) schedule JSON on CUDA tensors (the SDPA drop-in's direct path;
    the ops' impls call :func:`b200c.runtime.launcher.run` themselves).

    ``layout`` says whether q, k, v (and the result) are (B, H, S, D) or
    (B, S, H, D); see :func:`b200c.runtime.launcher.run`. Returns ``(out, lse)``,
    lse None unless ``return_lse``.
    """
    return launcher.run(schedule_json, target, layout, q, k, v, softmax_scale, SCHEDULES, causal, return_lse)


def run_schedule_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int,
                        schedule_json: str, softmax_scale: float | None, target: str, causal: bool = False,
                        return_lse: bool = False, check_seqlens: bool = True, mod_call=None):
    """The varlen op's real impl (see :func:`b200c.runtime.varlen.run_varlen`); returns ``(out, lse)``.
    ``mod_call``: the call's mods (:mod:`b200c.runtime.mod_call`), or None."""
    from .varlen import run_varlen

    if mod_call is not None:
        return run_varlen((schedule_json, mod_call.mods_json), target, q, k, v, cu_seqlens_q, cu_seqlens_k,
                          max_seqlen_q, max_seqlen_k, softmax_scale, MODDED, causal, return_lse, check_seqlens,
                          mod_call)
    return run_varlen(schedule_json, target, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                      softmax_scale, SCHEDULES, causal, return_lse, check_seqlens)


_F32 = torch.float32


def _no_lse(q) -> torch.Tensor:
    return q.new_empty((0,), dtype=_F32)


# ---- registration ---------------------------------------------------------------------
#
# The forward ops are defined with torch.library.Library, not torch.library.custom_op: a
# custom_op call runs about ten Python frames of wrappers (its autograd kernel, a
# redispatch, the backend wrapper, a dynamo-disable wrapper, an aliasing check), which
# cost more than the launch itself (stub driver: 37 us per call against 10 us for the
# direct path). Here the op's Autograd kernel is the only Python hop of a plain call: when
# no input needs grad and nothing but a dense backend is left below autograd (no tensor
# subclass, dispatch mode, functionalization or functorch layer: see :func:`_plain`), it
# calls the real impl itself; everything else takes the same route as a custom_op
# (redispatch below autograd, or an autograd.Function whose backward runs the backward kernels).

_lib = torch.library.Library("b200c", "FRAGMENT")
_AFTER_AUTOGRAD = torch._C._after_autograd_keyset
_BELOW_AUTOGRAD = torch._C._AutoDispatchBelowAutograd
_DENSE_BACKENDS = (torch._C.DispatchKey.CUDA, torch._C.DispatchKey.CPU)
_plain_keysets: set[int] = set()  # raw_repr() of dispatch key sets found plain (a few distinct values)
_grad_enabled = torch.is_grad_enabled


def _plain(keyset) -> bool:
    """Whether an op call with dispatch key set ``keyset`` reaches the backend kernel directly
    once past autograd: below the Autograd key only ADInplaceOrView (a fallthrough for these
    ops) and a dense CUDA or CPU backend are left. Cached per raw key set."""
    raw = keyset.raw_repr()
    if raw in _plain_keysets:
        return True
    rest = (keyset & _AFTER_AUTOGRAD).remove(torch._C.DispatchKey.ADInplaceOrView)
    if rest.highestPriorityTypeId() not in _DENSE_BACKENDS:
        return False
    if len(_plain_keysets) < 64:
        _plain_keysets.add(raw)
    return True


def _define(name: str, schema: str, impl, fake):
    """Define ``b200c::<name>`` with real impl ``impl`` (any backend), fake impl ``fake`` and the
    autograd kernel described above; returns the OpOverload. The first three
    arguments are q, k, v (the only ones that may require grad)."""
    _lib.define(f"{name}{schema}")
    _lib.impl(name, impl, "CompositeExplicitAutograd")
    torch.library.register_fake(f"b200c::{name}", fake, lib=_lib)
    overload = getattr(torch.ops.b200c, name).default

    class Forward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, keyset, *args):
            below = keyset & _AFTER_AUTOGRAD
            with _BELOW_AUTOGRAD():
                if name == "attention":  # the backward needs the LSE: run the LSE-returning op, hand out `out`
                    out, lse = attention_lse_op.redispatch(below, *args)
                    result = out
                elif name == "attention_varlen":  # the same: the call with return_lse=True, its LSE kept
                    full = list(args) + list(_VARLEN_DEFAULTS[len(args) - 10:])
                    asked = bool(full[11])
                    full[11] = True
                    out, lse = overload.redispatch(below, *full)
                    result = (out, lse if asked else _no_lse(out))
                else:
                    result = overload.redispatch(below, *args)
                    out, lse = result
            ctx.n_inputs = len(args)
            ctx.set_materialize_grads(False)
            if name == "attention_varlen":
                ctx.save_for_backward(args[0], args[1], args[2], out, lse, args[3], args[4])
                ctx.varlen = True
                ctx.max_seqlen = (args[5], args[6])
                ctx.scale, ctx.causal = float(args[8]), bool(full[10])
                ctx.deterministic = bool(full[13])
                ctx.backward_schedule = full[14]
            else:
                ctx.save_for_backward(args[0], args[1], args[2], out, lse)
                ctx.varlen = False
                ctx.scale, ctx.causal = float(args[4]), bool(args[6]) if len(args) > 6 else False
                ctx.deterministic = bool(args[7]) if len(args) > 7 else False
                ctx.backward_schedule = args[8] if len(args) > 8 else ""
            return result

        @staticmethod
        def backward(ctx, grad_out, *grad_rest):
            # every refusal is the backward op's, at run time: torch.compile traces this function while it
            # compiles the forward (its fake impl then returns shapes), and the forward must not raise
            if grad_out is None:
                if not grad_rest or grad_rest[0] is None:
                    return (None,) * (ctx.n_inputs + 1)
                # a gradient reaches only the returned LSE: the backward op refuses a non-zero one (an all-zero
                # one gives zero gradients) instead of the gradient being dropped
                grad_out = torch.zeros_like(ctx.saved_tensors[3])
            if ctx.varlen:
                q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
                dq, dk, dv = torch.ops.b200c.attention_varlen_backward(
                    grad_out, q, k, v, out, lse, cu_q, cu_k, ctx.max_seqlen[0], ctx.max_seqlen[1], ctx.scale,
                    ctx.causal, grad_rest[0] if grad_rest else None, ctx.deterministic, ctx.backward_schedule)
                return (None, dq, dk, dv) + (None,) * (ctx.n_inputs - 3)
            q, k, v, out, lse = ctx.saved_tensors
            grad_lse = grad_rest[0] if grad_rest else None
            dq, dk, dv = torch.ops.b200c.attention_backward(grad_out, q, k, v, out, lse, ctx.scale, ctx.causal,
                                                            grad_lse, ctx.deterministic, ctx.backward_schedule)
            return (None, dq, dk, dv) + (None,) * (ctx.n_inputs - 3)

    Forward.__name__ = Forward.__qualname__ = f"b200c_{name}_forward"

    def autograd_kernel(keyset, *args):
        if _grad_enabled() and (args[0].requires_grad or args[1].requires_grad or args[2].requires_grad):
            return Forward.apply(keyset, *args)
        if keyset.raw_repr() in _plain_keysets or _plain(keyset):
            return impl(*args)  # what the redispatch below would reach, without the second hop
        with _BELOW_AUTOGRAD():
            return overload.redispatch(keyset & _AFTER_AUTOGRAD, *args)

    _lib.impl(name, autograd_kernel, "Autograd", with_keyset=True)
    return overload


_ATTENTION_SCHEMA = ("(Tensor q, Tensor k, Tensor v, str schedule_json, float softmax_scale, str target, "
                     "bool causal=False, bool deterministic=False, str backward_schedule=\"\")")


def _attention_impl(q, k, v, schedule_json, softmax_scale, target, causal=False, deterministic=False,
                    backward_schedule=""):
    """``b200c::attention`` on logical (B, H, S_q, D) q and (B, H_kv, S_kv, D) k, v (bf16);
    see :func:`b200c.attention`. Returns out, like q. (``deterministic`` is read by the autograd
    formula only: the backward's dQ reduction.) (``b200c::attention_lse`` also returns
    the LSE; two ops because a second output costs every dispatcher call more.)"""
    return launcher.run(schedule_json, target, "bhsd", q, k, v, softmax_scale, SCHEDULES, causal, False)[0]


def _attention_fake(q, k, v, schedule_json, softmax_scale, target, causal=False, deterministic=False,
                    backward_schedule=""):
    p = validate_inputs(q, k, v, check_device=False, check_pointers=False)
    if p.needs_launch:
        specialized_json(schedule_json, p.head_dim)
    return torch.empty_like(q)


def _attention_lse_impl(q, k, v, schedule_json, softmax_scale, target, causal=False, deterministic=False,
                        backward_schedule=""):
    """As ``b200c::attention``, returning ``(out, lse)``: lse FP32 (B, H, S_q), natural-log units."""
    return launcher.run(schedule_json, target, "bhsd", q, k, v, softmax_scale, SCHEDULES, causal, True)


def _attention_lse_fake(q, k, v, schedule_json, softmax_scale, target, causal=False, deterministic=False,
                        backward_schedule=""):
    p = validate_inputs(q, k, v, check_device=False, check_pointers=False)
    if p.needs_launch:
        specialized_json(schedule_json, p.head_dim)
    return torch.empty_like(q), q.new_empty((p.batch, p.heads, p.seq_q), dtype=_F32)


def _attention_varlen_impl(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, schedule_json,
                           softmax_scale, target, causal=False, return_lse=False, check_seqlens=True,
                           deterministic=False, backward_schedule=""):
    """Varlen attention on packed (total, H, D) tensors; see :func:`b200c.attention_varlen`.

    Returns ``(out, lse)``: out like q; lse FP32 (H, total_q), or empty unless ``return_lse``.
    """
    out, lse = run_schedule_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, schedule_json,
                                   softmax_scale, target, causal, return_lse, check_seqlens)
    return out, (lse if lse is not None else _no_lse(q))


def _attention_varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, schedule_json,
                           softmax_scale, target, causal=False, return_lse=False, check_seqlens=True,
                           deterministic=False, backward_schedule=""):
    from .varlen import validate_varlen

    p = validate_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, check_device=False,
                        check_pointers=False)
    if p.needs_launch:
        specialized_json(schedule_json, p.head_dim)
    lse = q.new_empty((p.heads, p.total_q), dtype=_F32) if return_lse else _no_lse(q)
    return torch.empty_like(q), lse


attention_op = _define("attention", _ATTENTION_SCHEMA + " -> Tensor", _attention_impl, _attention_fake)
attention_lse_op = _define("attention_lse", _ATTENTION_SCHEMA + " -> (Tensor, Tensor)", _attention_lse_impl,
                           _attention_lse_fake)
attention_varlen_op = _define(
    "attention_varlen",
    "(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, SymInt max_seqlen_q, "
    "SymInt max_seqlen_k, str schedule_json, float softmax_scale, str target, bool causal=False, "
    "bool return_lse=False, bool check_seqlens=True, bool deterministic=False, str backward_schedule=\"\") "
    "-> (Tensor, Tensor)",
    _attention_varlen_impl, _attention_varlen_fake)


# attention_varlen's arguments from index 10 on, with their schema defaults (causal, return_lse, check_seqlens,
# deterministic, backward_schedule)
_VARLEN_DEFAULTS = (False, False, True, False, "")
_LSE_REFUSAL = ("a gradient flows into the LSE that b200c's attention call returned (return_lse=True); the "
                "backward kernels take the gradient of the output only: detach the LSE")


def _refuse_backward(grad_lse) -> None:
    """The backward ops' own refusal, at run time: a non-zero gradient into a returned LSE (an empty or
    all-zero one is what torch passes for an LSE the loss does not use). The device's and head dim's
    refusals are the launch layer's."""
    from ..errors import BackwardNotSupportedError

    if grad_lse is not None and bool(grad_lse.ne(0).any()):
        raise BackwardNotSupportedError(_LSE_REFUSAL)


@torch.library.custom_op("b200c::attention_backward", mutates_args=())
def attention_backward_op(
    grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
    softmax_scale: float, causal: bool, grad_lse: Optional[torch.Tensor] = None, deterministic: bool = False,
    backward_schedule: str = ""
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward of ``b200c::attention`` / ``b200c::attention_lse``: dQ, dK, dV of logical (B, H, S, D)
    views from the sm90a backward kernels (:func:`b200c.runtime.backward_launch.attention_backward`).
    The refusals are here, at run time, not in the autograd formula, which torch.compile traces while it
    compiles the forward. ``grad_lse``: the gradient reaching a returned LSE (refused unless it is all zeros:
    torch.compile passes zeros for an LSE the loss does not use). ``deterministic``: the forward call's
    (``b200c.attention(deterministic=True)``): dQ added in K/V tile order; False: as
    ``torch.are_deterministic_algorithms_enabled()``. ``backward_schedule``: the forward call's
    (``b200c.attention(backward_schedule=...)``) as its JSON, "" for the built-in one.

    Raises:
        BackwardNotSupportedError: a non-zero ``grad_lse``, a device other than compute capability 9.0 (the
            backward kernels are sm_90a only), or an input the kernels do not cover yet.
    """
    from . import backward_launch

    _refuse_backward(grad_lse)
    return backward_launch.attention_backward(q, k, v, out, grad_out, lse, causal=causal, scale=softmax_scale,
                                              deterministic=True if deterministic else None,
                                              schedule=_backward_schedule_of(backward_schedule))


@torch.library.custom_op("b200c::attention_varlen_backward", mutates_args=())
def attention_varlen_backward_op(
    grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
    cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
    softmax_scale: float, causal: bool, grad_lse: Optional[torch.Tensor] = None, deterministic: bool = False,
    backward_schedule: str = ""
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward of ``b200c::attention_varlen``: dQ, dK, dV of packed (total, H, D) tensors from the
    sm90a backward kernels (:func:`b200c.runtime.backward_launch.attention_backward_varlen`); ``lse`` the
    forward's (H, total_q) LSE, ``grad_lse`` and ``deterministic`` as :func:`attention_backward_op`'s.

    Raises:
        BackwardNotSupportedError: as :func:`attention_backward_op`.
    """
    from . import backward_launch

    _refuse_backward(grad_lse)
    return backward_launch.attention_backward_varlen(q, k, v, out, grad_out, lse, cu_seqlens_q, cu_seqlens_k,
                                                     max_seqlen_q, max_seqlen_k, causal=causal, scale=softmax_scale,
                                                     deterministic=True if deterministic else None,
                                                     schedule=_backward_schedule_of(backward_schedule))


def _backward_schedule_of(text: str):
    """The BackwardSchedule of a forward call's ``backward_schedule`` JSON (cached), None for ""."""
    if not text:
        return None
    from .schedule_files import _backward_of_json

    return _backward_of_json(text)


def _backward_fake(grad_out, q, k, v, *rest, **kwargs):
    """Both backward ops' fake impl: dQ, dK, dV shaped as q, k, v."""
    return (q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape))


attention_backward_op.register_fake(_backward_fake)
attention_varlen_backward_op.register_fake(_backward_fake)


def _no_double_backward(ctx, *grads):
    """The backward ops' own gradient: refused. A backward with create_graph=True still runs (its result then
    carries this node); differentiating that result again raises here, naming the limit, instead of torch's
    'no autograd formula' error."""
    from ..errors import BackwardNotSupportedError

    raise BackwardNotSupportedError(
        "b200c attention has first-order gradients only: differentiating its gradients (a gradient penalty, "
        "double backward, Hessian-vector products) would differentiate its backward kernels, which have no "
        "gradient; use torch.nn.functional.scaled_dot_product_attention there")


attention_backward_op.register_autograd(_no_double_backward, setup_context=lambda ctx, inputs, output: None)
attention_varlen_backward_op.register_autograd(_no_double_backward, setup_context=lambda ctx, inputs, output: None)
