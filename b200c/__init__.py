"""b200c: compile declarative attention schedules to CUDA for sm_100a (B200,
tcgen05) or sm_90a (Hopper, wgmma) and run them.

Public API:
    Schedule                 the declarative kernel schedule (b200c.dsl)
    load_schedule_file(path) run a schedule file, return its ``schedule``
    plan(schedule, target="sm100a")      the layout (SMEM, TMEM, barriers, warp roles); checks budgets
    default_schedule(head_dim, target="sm100a")  the built-in schedule of a target (sm90a: Hopper)
    BackwardSchedule, default_backward_schedule(head_dim, target="sm90a"), plan_backward(schedule, target)
                             the backward's schedule, its built-in ones and its budget plan (the sm90a
                             backward kernels: head dims 64, 128 and 256, docs/backward.md)
    generate(schedule, target="sm100a")  CUDA source + launch info (b200c.codegen); target "sm90a": Hopper
    kernel_source(head_dim, target="sm90a", *, schedule=None, score_mod=None, mask_mod=None)
                             the CUDA a call with those mods runs (no GPU needed)
    attention(q, k, v, *, schedule, ...)  like flash_attn_func (b200c.runtime)
    attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, schedule, ...)
                             like flash_attn_varlen_func
    attention_with_kvcache(q, k_cache, v_cache, k=None, v=None, *, cache_seqlens, block_table=None, ...)
                             like flash_attn_with_kvcache (decoding; split-KV, paged caches)
    attention_backward(q, k, v, out, dout, lse, *, causal=False, scale=None, schedule=None, ...)
                             dQ, dK, dV from the forward's out and lse (a BackwardSchedule of your own);
                             attention_backward_varlen likewise for packed sequences
    scaled_dot_product_attention(query, key, value, ...)  drop-in for torch's SDPA
    errors: ScheduleError, ResourceError, IssueOrderError, BuildError, TargetError,
            LaunchError, UnsupportedDeviceError, BarrierTimeoutError, DriverError, ProtocolError,
            BackwardNotSupportedError, DrawError; warnings: FallbackWarning, PerformanceWarning,
            UntestedCompilerWarning
"""
from .errors import (
    B200cError,
    BackwardNotSupportedError,
    BarrierTimeoutError,
    BuildError,
    DrawError,
    DriverError,
    FallbackWarning,
    IssueOrderError,
    LaunchError,
    PerformanceWarning,
    ProtocolError,
    ResourceError,
    ScheduleError,
    TargetError,
    UnsupportedDeviceError,
    UntestedCompilerWarning,
)
from .dsl import Schedule, load_schedule_file
from .dsl.backward_schedule import BackwardSchedule

from .version import __version__


def plan(schedule, target: str = "sm100a"):
    """Validate ``schedule`` for ``target`` and return its layout plan (``print``
    it); raises ScheduleError / IssueOrderError / ResourceError / TargetError
    (see b200c.codegen.make_plan)."""
    from .codegen import make_plan

    return make_plan(schedule, target)


def generate(schedule, target: str = "sm100a", profile: bool = False, mods=None):
    """Validate ``schedule`` and return its GeneratedKernel for ``target``
    (``"sm100a"``, ``"emulate"`` or ``"sm90a"``; see b200c.codegen.generate). ``mods``: a traced
    ModSet (``b200c.dsl.mods.trace_mods(score_mod=..., mask_mod=...)[0]``) compiled in, or None."""
    from .codegen import generate as _generate

    return _generate(schedule, target, profile=profile, mods=mods)


def default_schedule(head_dim: int, target: str = "sm100a", mods=False, seq_kv=None):
    """The built-in schedule of ``target`` (``"sm100a"``, ``"emulate"``: the blog's stage 18 and its
    head-dim variants; ``"sm90a"``: the Hopper progression's last stage) for head dim 64, 128 or 256
    (b200c/dsl/presets.py). What ``b200c.attention(schedule=None)`` and the SDPA drop-in run;
    ``mods=True``: what they run for calls with a score_mod / mask_mod (Hopper: smaller K/V tiles);
    ``mods=<a traced ModSet>``: what a call with those mods runs (light ones, such as ALiBi, keep the dense
    tiles: :func:`b200c.codegen.mods.light`). ``seq_kv``: the key length of a dense call; on sm90a a short
    one (a few hundred keys, cross-attention) takes smaller K/V tiles when the preset's would mostly compute
    padding (:func:`b200c.dsl.presets.short_kv_tiles`; at head dim 64 those with 1-128 or 225-256 keys one
    warpgroup per CTA, :func:`b200c.dsl.presets.short_kv_preset`; 129-224 keep the preset's one 224-row tile),
    as the dense calls without a schedule do; checked,
    then ignored with ``mods``; None: the head dim's preset. Which lengths count as short follows from the
    tiles' padding, not a threshold (at head dim 64: 251 keys yes, 448 no, 500 yes).

    Raises:
        TargetError: unknown target. ScheduleError: another head dim; ``seq_kv`` not None and not a
            non-negative integer.
    """
    from .codegen.targets import resolve

    return resolve(target).default_schedule(head_dim, mods, seq_kv)


def kernel_source(head_dim: int, target: str = "sm90a", *, schedule=None, score_mod=None, mask_mod=None,
                  sinks=None, window_size=None) -> str:
    """The CUDA source of the kernel ``b200c.attention(q, k, v, schedule=schedule, score_mod=score_mod,
    mask_mod=mask_mod, sinks=sinks, window_size=window_size)`` runs for inputs of head dim ``head_dim`` on
    ``target``, without a GPU.

    Args:
        head_dim: D of the inputs: 64, 128 or 256.
        target: ``"sm90a"`` (H100/H200, the default), ``"sm100a"`` or ``"emulate"``.
        schedule: a Schedule or schedule file; None: the built-in one a call without a schedule runs
            (:func:`default_schedule` with these mods: the mods presets where the mods need them).
        score_mod, mask_mod: as :func:`b200c.attention` (traced here, as a call traces them; needs torch).
            The kernel is the one of calls whose B, H and sequence lengths are below 2^21 (nearly every
            call: their index math is specialised) and whose captured tensors have the strides the
            functions see here. A mask_mod alone that a call recognises (``q_idx >= kv_idx``, a sliding
            window) gives the kernel of the knob it stands for, as in a call with S_q == S_kv.
        sinks: None, or the per-head sink logits a call passes (a 1-D floating tensor; only whether there
            are sinks changes the kernel, not their values).
        window_size: None, or ``(left, right)`` as :func:`b200c.attention` takes it (ints >= -1; the
            bounds are a kernel argument, so every window with the same bounded sides is one kernel).

    Returns:
        str: the generated CUDA source.

    Raises:
        ScheduleError: a function cannot be traced, an unsupported head dim, an invalid schedule.
        LaunchError: ``sinks`` is not a 1-D floating tensor; ``window_size`` is not a pair of ints >= -1.
        ResourceError, TargetError: as :func:`generate`.
    """
    import msgspec

    from .codegen import generate as _generate
    from .dsl.loader import load_schedule_file as _load

    mods = None
    if window_size is None and mask_mod is not None and score_mod is None and sinks is None:
        # what a call with S_q == S_kv runs for a mask_mod the runtime recognises: the causal lambda the plain
        # kernel (the causal knob's), a sliding-window band the window recipe's kernel
        from .codegen.mods import mask_knob
        from .runtime.mod_call import prepare

        knob = mask_knob(prepare(None, mask_mod, None).mods)
        if knob == "causal":
            mask_mod = None
        elif knob is not None:
            window_size, mask_mod = knob, None
    if window_size is not None:  # the call's window is a mask_mod over a (B, 2) bounds tensor
        from .runtime.mod_window import window_mask

        mask_mod = window_mask(window_size, 1, 1, "cpu", mask_mod)
    if score_mod is not None or mask_mod is not None or sinks is not None:
        from .runtime.mod_call import prepare

        mods = msgspec.structs.replace(prepare(score_mod, mask_mod, sinks).mods, small_indices=True)
    if schedule is None:
        schedule = default_schedule(head_dim, target, mods=mods if mods is not None else False)
    else:
        schedule = (_load(schedule) if not isinstance(schedule, Schedule) else schedule).replace(head_dim=head_dim)
    return _generate(schedule, target, mods=mods).source


def default_backward_schedule(head_dim: int, target: str = "sm90a"):
    """The built-in :class:`BackwardSchedule` for head dim 64, 128 or 256 (only ``target="sm90a"`` has them;
    raises ScheduleError for another target or head dim, TargetError for an unknown target name): the schedule
    :func:`attention`'s backward runs for that head dim (``b200c compile`` / ``check`` / ``draw`` take it too)."""
    from .codegen.targets import resolve

    return resolve(target).default_backward_schedule(head_dim)


def plan_backward(schedule, target: str = "sm90a"):
    """Check a :class:`BackwardSchedule`'s shared-memory and register budgets on ``target`` and return its
    :class:`b200c.codegen.backward_plan.BackwardPlan` (``.describe()`` prints it); raises ScheduleError /
    ResourceError (see b200c.codegen.backward_plan.plan_backward)."""
    from .codegen.backward_plan import plan_backward as _plan

    return _plan(schedule, target)


# The entry points that need torch live in b200c.runtime and are imported on first use
# (PEP 562), so `import b200c` and `b200c compile` stay free of torch. After that first
# use they are plain attributes of this module: no wrapper frame per call, and nothing
# that torch.compile would guard on or recompile for.
_RUNTIME = ("attention", "attention_varlen", "attention_with_kvcache", "attention_backward", "attention_backward_varlen",
            "scaled_dot_product_attention")


def _register_torch_provider() -> None:
    """Register b200c as an SDPA flash provider ("b200c", torch.nn.attention) when torch is already
    imported (activating it stays the user's call); without torch nothing is imported."""
    import sys

    if "torch" in sys.modules:
        try:
            from .runtime.torch_flash import register

            register()
        except Exception:  # noqa: BLE001 - a torch without the hook or a partial install: nothing to register
            pass


_register_torch_provider()


def __getattr__(name: str):
    if name not in _RUNTIME:
        raise AttributeError(f"module 'b200c' has no attribute {name!r}")
    from . import runtime  # its own lazy attributes import the module that defines each

    value = getattr(runtime, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_RUNTIME))


__all__ = [
    "Schedule",
    "load_schedule_file",
    "plan",
    "generate",
    "default_schedule",
    "kernel_source",
    "BackwardSchedule",
    "default_backward_schedule",
    "plan_backward",
    "attention",
    "attention_varlen",
    "attention_with_kvcache",
    "attention_backward",
    "attention_backward_varlen",
    "scaled_dot_product_attention",
    "B200cError",
    "ScheduleError",
    "ResourceError",
    "IssueOrderError",
    "BuildError",
    "TargetError",
    "PerformanceWarning",
    "UntestedCompilerWarning",
    "LaunchError",
    "ProtocolError",
    "DrawError",
    "UnsupportedDeviceError",
    "BarrierTimeoutError",
    "DriverError",
    "BackwardNotSupportedError",
    "FallbackWarning",
    "__version__",
]
