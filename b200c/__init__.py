"""b200c: compile declarative attention schedules to CUDA for sm_100a (B200,
tcgen05) or sm_90a (Hopper, wgmma) and run them.

Public API:
    Schedule                 the declarative kernel schedule (b200c.dsl)
    load_schedule_file(path) run a schedule file, return its ``schedule``
    plan(schedule, target="sm100a")      the layout (SMEM, TMEM, barriers, warp roles); checks budgets
    generate(schedule, target="sm100a")  CUDA source + launch info (b200c.codegen); target "sm90a": Hopper
    attention(q, k, v, *, schedule, ...)  like flash_attn_func (b200c.runtime)
    attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, schedule, ...)
                             like flash_attn_varlen_func
    scaled_dot_product_attention(query, key, value, ...)  drop-in for torch's SDPA
    errors: ScheduleError, ResourceError, IssueOrderError, BuildError, TargetError,
            LaunchError, UnsupportedDeviceError, BarrierTimeoutError, ProtocolError,
            BackwardNotSupportedError, DrawError; warning: FallbackWarning
"""
from .errors import (
    B200cError,
    BackwardNotSupportedError,
    BarrierTimeoutError,
    BuildError,
    DrawError,
    FallbackWarning,
    IssueOrderError,
    LaunchError,
    ProtocolError,
    ResourceError,
    ScheduleError,
    TargetError,
    UnsupportedDeviceError,
)
from .dsl import Schedule, load_schedule_file

__version__ = "0.1.0"


def plan(schedule, target: str = "sm100a"):
    """Validate ``schedule`` for ``target`` and return its layout plan (``print``
    it); raises ScheduleError / IssueOrderError / ResourceError / TargetError
    (see b200c.codegen.make_plan)."""
    from .codegen import make_plan

    return make_plan(schedule, target)


def generate(schedule, target: str = "sm100a", profile: bool = False):
    """Validate ``schedule`` and return its GeneratedKernel for ``target``
    (``"sm100a"``, ``"emulate"`` or ``"sm90a"``; see b200c.codegen.generate)."""
    from .codegen import generate as _generate

    return _generate(schedule, target, profile=profile)


_impls: dict = {}


def _impl(name: str):
    f = _impls.get(name)
    if f is None:  # import statements, not importlib: torch.compile traces them
        if name == "scaled_dot_product_attention":
            from .runtime import sdpa as module
        else:
            from .runtime import api as module
        f = _impls[name] = getattr(module, name)
    return f


def attention(q, k, v, *, schedule, causal=False, softmax_scale=None, return_lse=False, layout="bhsd",
              target="auto"):
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
        schedule: a :class:`b200c.Schedule` or the path of a schedule file
            (a ``.py`` file defining ``schedule``). The kernel is generated
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
            capability 10.0, ``"emulate"`` on 9.0; a Hopper schedule,
            examples/hopper: ``"sm90a"``), ``"sm100a"`` (B200), ``"sm90a"``
            (the native Hopper kernel of a Hopper schedule) or ``"emulate"``
            (the sm100a kernel on H100/H200, correctness only).

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
            schedule (checked before the tensors), or a schedule that cannot
            hold the inputs' head dim (ResourceError naming the budget, e.g.
            two Q stages at D = 256 need 768 of 512 TMEM columns).
        LaunchError: a tensor or argument rule is broken (names the tensor or
            argument, the rule and the value).
        UnsupportedDeviceError: the GPU cannot run the target.
        BuildError: nvcc missing or compilation failed.
        BarrierTimeoutError: an earlier emulated launch timed out (see
            :func:`b200c.runtime.check_hang`).
        BackwardNotSupportedError: raised by ``backward()`` through this
            op: the kernels are forward-only (the forward works on inputs that
            require grad).

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
        >>> o = b200c.attention(q, k, v, schedule=b200c.Schedule())
        >>> o, lse = b200c.attention(q, k[:, :4], v[:, :4], schedule=b200c.Schedule(), causal=True, return_lse=True)
    """
    return _impl("attention")(q, k, v, schedule=schedule, causal=causal, softmax_scale=softmax_scale,
                              return_lse=return_lse, layout=layout, target=target)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, schedule, causal=False,
                     softmax_scale=None, return_lse=False, target="auto", check_seqlens=True):
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

    Returns:
        ``out`` (q's shape, bfloat16) or ``(out, lse)`` with ``return_lse``.

    Raises:
        LaunchError: a tensor, argument or cu_seqlens value breaks a rule
            (names it, the rule and the value); otherwise as
            :func:`b200c.attention`.

    torch.compile: the custom op ``torch.ops.b200c.attention_varlen``;
    ``max_seqlen_*`` are graph constants.
    """
    return _impl("attention_varlen")(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                     schedule=schedule, causal=causal, softmax_scale=softmax_scale,
                                     return_lse=return_lse, target=target, check_seqlens=check_seqlens)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False, *, schedule=None, target="auto"):
    """A drop-in for ``torch.nn.functional.scaled_dot_product_attention`` that runs a b200c kernel when it can.

    Same signature and semantics as torch's function: query (B, H, S_q, D),
    key and value (B, H_kv, S_kv, D), ``enable_gqa`` for H_kv < H, result
    (B, H, S_q, D). Swap it into a model with one line::

        torch.nn.functional.scaled_dot_product_attention = b200c.scaled_dot_product_attention

    b200c runs calls with: bfloat16 CUDA tensors, 4-D, D 64, 128 or 256, no
    ``attn_mask``, ``dropout_p == 0``, ``is_causal`` only when S_q == S_kv
    (torch aligns a causal mask with S_q != S_kv to the top-left corner,
    b200c to the bottom-right), ``scale`` None or >= 0 (and not so large
    that scale * log2(e) overflows FP32), strides the TMA rules accept, a
    schedule that holds D, no gradients needed (grad mode off or inputs not
    requiring grad), a device that runs ``target``. Every other call runs
    torch's own SDPA, with a :class:`b200c.FallbackWarning` once per reason.

    Args:
        query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa:
            as ``torch.nn.functional.scaled_dot_product_attention``.
        schedule: a :class:`b200c.Schedule` or schedule file; None uses the
            built-in one for D (:mod:`b200c.dsl.presets`: the blog's stage 18,
            one Q stage at D = 256).
        target: as :func:`b200c.attention` (on a Hopper GPU ``"auto"`` runs
            the emulated kernel: correctness only).

    Returns:
        torch.Tensor (B, H, S_q, D), the dtype of query.

    Raises:
        ScheduleError / IssueOrderError / ResourceError: ``schedule`` itself
            is invalid or infeasible (a schedule that only cannot hold the
            inputs' D falls back instead).
        BuildError: an unknown ``target`` name.
        BarrierTimeoutError: an emulated kernel hung.
        Anything torch's SDPA raises for the calls it runs.
    """
    return _impl("scaled_dot_product_attention")(query, key, value, attn_mask, dropout_p, is_causal, scale,
                                                 enable_gqa, schedule=schedule, target=target)


__all__ = [
    "Schedule",
    "load_schedule_file",
    "plan",
    "generate",
    "attention",
    "attention_varlen",
    "scaled_dot_product_attention",
    "B200cError",
    "ScheduleError",
    "ResourceError",
    "IssueOrderError",
    "BuildError",
    "TargetError",
    "LaunchError",
    "ProtocolError",
    "DrawError",
    "UnsupportedDeviceError",
    "BarrierTimeoutError",
    "BackwardNotSupportedError",
    "FallbackWarning",
    "__version__",
]
