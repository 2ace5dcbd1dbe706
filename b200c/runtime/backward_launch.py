"""Launch the sm_90a backward kernels (:mod:`b200c.codegen.sm90.backward`) on PyTorch tensors.

:func:`attention_backward` runs the module's three kernels on the current stream: the preprocess
(grid ``(S_pad / block_m, H, B)``), the K/V-stationary main kernel (one CTA per work item of
:class:`b200c.codegen.backward_work.BackwardDecomposition`) and the postprocess. It is the launch layer
the autograd formula of ``b200c.attention`` will call (issue 48, step 2); until then it is reachable as
``b200c.runtime.backward_launch.attention_backward`` and from the tests.

The plan decides every launch number (:func:`launch_plan`), so the fake driver's record of a launch
can be checked against the host model's decomposition on the CPU.
"""
from __future__ import annotations

import functools
import math
import os
import threading
from dataclasses import dataclass

import torch

from ..errors import BackwardNotSupportedError, DriverError, LaunchError, ResourceError, ScheduleError
from . import driver
from .inputs import flag_value, softmax_scale_value
from .params import ParamBlock

_lock = threading.Lock()
_modules: dict = {}  # (schedule JSON, target, device) -> _Module

# parameter kinds of the three kernels, in order (the names and order of the generated entry points)
MAIN_SPEC = (("tmap_q", "tensor_map"), ("tmap_k", "tensor_map"), ("tmap_v", "tensor_map"), ("tmap_do", "tensor_map"),
             ("lse_log2", "f32_ptr"), ("dpsum", "f32_ptr"), ("dq_accum", "f32_ptr"), ("dq_semaphore", "i32_ptr"),
             ("dk", "bf16_ptr"), ("dk_stride_b", "i64"), ("dk_stride_h", "i64"), ("dk_stride_s", "i64"),
             ("dv", "bf16_ptr"), ("dv_stride_b", "i64"), ("dv_stride_h", "i64"), ("dv_stride_s", "i64"),
             ("batch", "i32"), ("heads", "i32"), ("heads_kv", "i32"), ("seq_q", "i32"), ("seq_kv", "i32"),
             ("seq_pad", "i32"), ("causal", "i32"), ("softmax_scale", "f32"), ("cu_seqlens_q", "i32_ptr"),
             ("cu_seqlens_k", "i32_ptr"))
PRE_SPEC = (("out", "bf16_ptr"), ("out_stride_b", "i64"), ("out_stride_h", "i64"), ("out_stride_s", "i64"),
            ("dout", "bf16_ptr"), ("dout_stride_b", "i64"), ("dout_stride_h", "i64"), ("dout_stride_s", "i64"),
            ("lse", "f32_ptr"), ("lse_stride_b", "i64"), ("lse_stride_h", "i64"), ("lse_stride_s", "i64"),
            ("lse_log2", "f32_ptr"), ("dpsum", "f32_ptr"), ("dq_accum", "f32_ptr"), ("dq_semaphore", "i32_ptr"),
            ("seq_q", "i32"), ("seq_pad", "i32"), ("cu_seqlens_q", "i32_ptr"))
POST_SPEC = (("dq_accum", "f32_ptr"), ("dq", "bf16_ptr"), ("dq_stride_b", "i64"), ("dq_stride_h", "i64"),
             ("dq_stride_s", "i64"), ("seq_q", "i32"), ("seq_pad", "i32"), ("softmax_scale", "f32"),
             ("cu_seqlens_q", "i32_ptr"))


@dataclass(frozen=True)
class _Boxes:
    """The TMA box of the backward's maps, in the fields :func:`b200c.runtime.driver.encode_tensor_map` reads
    (Q and dO boxes: ``block_m`` rows, named ``"q"``; K and V: ``block_n`` rows)."""

    tma_box_inner: int
    tma_box_rows: int
    kv_box_rows: int
    tma_swizzle: str = "128B"
    tma_l2_promotion: str = "256B"


@dataclass(frozen=True)
class LaunchPlan:
    """The grids, CTA sizes and buffer shapes of one backward call.

    Attributes:
        seq_pad: S_q rounded up to block_m (rows of the FP32 buffers).
        row_grid: ``(S_pad / block_m, H, B)``: the preprocess and postprocess grids.
        row_threads: their CTA size.
        num_work: CTAs of the main kernel (work items: ``B x H_kv x ceil(S_kv / block_n)``).
        threads, smem: the main kernel's CTA size and dynamic SMEM bytes.
    """

    seq_pad: int
    row_grid: tuple
    row_threads: int
    num_work: int
    threads: int
    smem: int


def launch_plan(layout, batch: int, heads: int, heads_kv: int, seq_q: int, seq_kv: int) -> LaunchPlan:
    """The launch numbers of a call (``layout``: the module's
    :class:`~b200c.codegen.sm90.backward.BackwardLayout`)."""
    from ..codegen.backward_work import BackwardDecomposition

    pad = -(-seq_q // layout.block_m) * layout.block_m
    dec = BackwardDecomposition(layout.block_m, layout.block_n)
    return LaunchPlan(pad, (pad // layout.block_m, heads, batch), layout.pre_threads,
                      dec.num_work(batch, heads_kv, seq_kv), layout.threads, layout.smem_bytes)


def param_values(lp: LaunchPlan, q, k, v, out, dout, lse, dq, dk, dv, lse_log2, dpsum, dq_accum, maps, *,
                 causal: bool, scale: float, dq_semaphore=None, cu_seqlens=None) -> tuple:
    """The ``{name: value}`` of the preprocess, main and postprocess kernels' parameters (:data:`PRE_SPEC`,
    :data:`MAIN_SPEC`, :data:`POST_SPEC`) for BHSD views ``q``, ``k``, ``v``, ``out``, ``dout``, ``lse``
    (B, H, S_q), the outputs ``dq``, ``dk``, ``dv``, the FP32 buffers and the four encoded tensor maps
    (q, k, v, dout); ``dq_semaphore``: the int32 (B, H, S_pad / block_m) turn counters of a deterministic
    module (None: 0, the atomic module's null); ``cu_seqlens``: varlen's ``(cu_seqlens_q, cu_seqlens_k,
    max_seqlen_q, max_seqlen_k)``, the tensors then (1, H, total, D) views of packed ones (and the LSE
    (1, H, total_q)): B is the number of sequences, S_q / S_kv the longest, the batch strides 0 (the
    kernels address packed rows)."""
    b, h, sq, _ = q.shape
    hk, skv = k.shape[1], k.shape[2]
    cu_q = cu_k = 0
    if cu_seqlens is not None:
        cu_q, cu_k = cu_seqlens[0].data_ptr(), cu_seqlens[1].data_ptr()
        b, sq, skv = cu_seqlens[0].shape[0] - 1, int(cu_seqlens[2]), int(cu_seqlens[3])
    sem = 0 if dq_semaphore is None else dq_semaphore.data_ptr()

    def st(t):
        if cu_seqlens is not None:
            return (0,) + tuple(int(x) for x in t.stride()[1:3])
        return tuple(int(x) for x in t.stride()[:3])

    pre = dict(out=out.data_ptr(), out_stride_b=st(out)[0], out_stride_h=st(out)[1], out_stride_s=st(out)[2],
               dout=dout.data_ptr(), dout_stride_b=st(dout)[0], dout_stride_h=st(dout)[1], dout_stride_s=st(dout)[2],
               lse=lse.data_ptr(), lse_stride_b=st(lse)[0], lse_stride_h=st(lse)[1], lse_stride_s=st(lse)[2],
               lse_log2=lse_log2.data_ptr(), dpsum=dpsum.data_ptr(), dq_accum=dq_accum.data_ptr(), dq_semaphore=sem,
               seq_q=sq, seq_pad=lp.seq_pad, cu_seqlens_q=cu_q)
    main = dict(tmap_q=maps[0], tmap_k=maps[1], tmap_v=maps[2], tmap_do=maps[3], lse_log2=lse_log2.data_ptr(),
                dpsum=dpsum.data_ptr(), dq_accum=dq_accum.data_ptr(), dq_semaphore=sem, dk=dk.data_ptr(), dk_stride_b=st(dk)[0],
                dk_stride_h=st(dk)[1], dk_stride_s=st(dk)[2], dv=dv.data_ptr(), dv_stride_b=st(dv)[0],
                dv_stride_h=st(dv)[1], dv_stride_s=st(dv)[2], batch=b, heads=h, heads_kv=hk, seq_q=sq, seq_kv=skv,
                seq_pad=lp.seq_pad, causal=int(bool(causal)), softmax_scale=float(scale), cu_seqlens_q=cu_q,
                cu_seqlens_k=cu_k)
    post = dict(dq_accum=dq_accum.data_ptr(), dq=dq.data_ptr(), dq_stride_b=st(dq)[0], dq_stride_h=st(dq)[1],
                dq_stride_s=st(dq)[2], seq_q=sq, seq_pad=lp.seq_pad, softmax_scale=float(scale), cu_seqlens_q=cu_q)
    return pre, main, post


class _Module:
    def __init__(self, built, device: int):
        cu = driver._cu()
        self.cu = cu
        _ = driver._check(cu.cuInit(0), "cuInit")
        dev = driver._check(cu.cuDeviceGet(device), "cuDeviceGet")
        self.context = driver._check(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        with driver.in_context(self.context):
            image = driver._verified_image(built)
            self.module = driver._check(cu.cuModuleLoadData(image), "cuModuleLoadData(backward)")
            from ..codegen.sm90.backward import MAIN_KERNEL, POSTPROCESS_KERNEL, PREPROCESS_KERNEL

            get = lambda n: driver._check(cu.cuModuleGetFunction(self.module, n.encode()), f"cuModuleGetFunction({n})")
            self.main, self.pre, self.post = get(MAIN_KERNEL), get(PREPROCESS_KERNEL), get(POSTPROCESS_KERNEL)
            smem = built.launch.dynamic_smem_bytes
            driver._check(cu.cuFuncSetAttribute(
                self.main, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem),
                "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")


@functools.lru_cache(maxsize=64)
def check_call_schedule(schedule_json: str, d: int, deterministic: bool) -> None:
    """Refuse, when ``b200c.attention(..., backward_schedule=)`` is called, a backward schedule that its
    ``backward()`` would refuse (head_dim set to the inputs' D, the deterministic dQ reduction when asked):
    its budgets (:func:`b200c.plan_backward`) and what the sm90a generator covers. Once per schedule, D and
    mode.

    Raises:
        ScheduleError / ResourceError: the plan's refusals.
        BackwardNotSupportedError: tiles or knobs the generator does not cover yet.
    """
    from ..codegen.backward_plan import plan_backward
    from ..codegen.sm90.backward import supported
    from ..dsl.backward_schedule import BackwardSchedule

    own = BackwardSchedule.from_json(schedule_json)
    schedule = _for_call(own, d, deterministic)
    try:
        plan_backward(schedule, "sm90a")
    except (ScheduleError, ResourceError) as e:
        if own.head_dim == d:
            raise
        raise type(e)(f"backward schedule {own.name!r} (head_dim={own.head_dim}) at the inputs' head dim D = {d}: "
                      f"{e}; pass a backward schedule that holds D = {d}, e.g. "
                      f"b200c.default_backward_schedule({d})") from None
    supported(schedule)


@functools.lru_cache(maxsize=32)
def _generated(schedule_json: str):
    """The generated (and protocol-verified) module of a schedule, once per process."""
    from ..codegen.sm90.backward import generate_backward
    from ..dsl.backward_schedule import BackwardSchedule

    return generate_backward(BackwardSchedule.from_json(schedule_json))


def _loaded(gen, device: int):
    """The built and loaded module of ``gen`` on ``device``: built (disk cache) and loaded once per process."""
    key = (gen.schedule_json, gen.target, device)
    with _lock:
        mod = _modules.get(key)
        if mod is None:
            mod = _modules[key] = _Module(_build(gen), device)
        return mod


def _build(gen):
    """The cached cubin of a generated backward module (the forward's build cache and ninja)."""
    from ..codegen import GeneratedKernel
    from ..codegen.launch import LaunchInfo
    from .build import build_many

    lay = gen.layout
    info = LaunchInfo(name=lay.name, threads=lay.threads, dynamic_smem_bytes=lay.smem_bytes, tmem_cols=0,
                      q_stages=lay.q_stages, block_m=lay.block_m, block_n=lay.block_n, head_dim=lay.head_dim,
                      persistent=False, tma_box_inner=64, tma_box_rows=lay.block_m, tma_swizzle="128B",
                      tma_l2_promotion="256B", params=MAIN_SPEC, tma_kv_box_rows=lay.block_n)
    return build_many([(lay.name, GeneratedKernel(gen.source, info, gen.target))], gen.target, progress=False)[0]


def _capability(q):
    """(major, minor) of q's CUDA device, or None for anything else (the fake driver replaces it)."""
    if not isinstance(q, torch.Tensor) or not q.is_cuda:
        return None
    return tuple(torch.cuda.get_device_capability(q.device))


@torch.compiler.assume_constant_result  # torch.compile takes the value instead of tracing the search below
def covered_head_dims() -> tuple:
    """Head dims whose built-in backward schedule the sm90a generator covers (64, 128 and 256 today)."""
    return _covered_head_dims()


@functools.lru_cache(maxsize=None)
def _covered_head_dims() -> tuple:
    from ..codegen.sm90.backward import supported
    from ..dsl.presets import SM90_BACKWARD

    out = []
    for d, schedule in sorted(SM90_BACKWARD.items()):
        try:
            supported(schedule)
        except BackwardNotSupportedError:
            continue
        out.append(d)
    return tuple(out)


def backward_reason(q, attn_mask=None):
    """Why b200c's backward kernels cannot give this call's gradients, or None: ``(key, message)`` for
    a fallback (the SDPA drop-in's reasons), from metadata only (works while torch.compile traces)."""
    if isinstance(attn_mask, torch.Tensor):
        return "grad:attn_mask", ("inputs require grad with an attn_mask (b200c's masks are mods, whose gradients "
                                  "are not built yet; torch's SDPA computes them)")
    cap = _capability(q)
    if cap != (9, 0):
        where = f"compute capability {'.'.join(map(str, cap))}" if cap else "this device"
        return "grad:device", (f"inputs require grad on {where} (b200c's backward kernels run on sm_90a, H100 / "
                               "H200; torch's SDPA computes the gradients)")
    d = q.shape[-1]
    if d not in covered_head_dims():
        return f"grad:head_dim:{d}", (f"inputs require grad at head dim {d} (b200c's backward kernels cover "
                                      f"{' and '.join(map(str, covered_head_dims()))}; torch's SDPA computes them)")
    return None


def _device_index(dev) -> int:
    return dev.index if dev.index is not None else torch.cuda.current_device()


def _stream(dev) -> int:
    return torch.cuda.current_stream(dev).cuda_stream


def _strides_ok(t) -> bool:
    """A contiguous last dimension, the other strides positive multiples of 8 elements (a size-1 dimension's
    stride is never used: any), a 16-byte aligned start: what TMA and the 16-byte vector loads read."""
    return (t.stride(-1) == 1 or t.shape[-1] == 1) and t.data_ptr() % 16 == 0 and all(
        n == 1 or (s > 0 and s % 8 == 0) for s, n in zip(t.stride()[:-1], t.shape[:-1]))


def _tma_ready(t):
    """``t``, or a contiguous copy when its strides or start do not suit TMA and the 16-byte vector loads
    (a gradient of ``out.sum()`` arrives with stride 0)."""
    if isinstance(t, torch.Tensor) and t.dim() == 4 and not _strides_ok(t):
        return t.contiguous()
    return t


def _check_inputs(q, k, v, out, dout, lse, layout) -> tuple:
    """(B, H, H_kv, S_q, S_kv, D) of BHSD views, refusing what the kernels do not cover."""
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out), ("dout", dout)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise LaunchError(f"attention_backward: {name} must be a 4-D (B, H, S, D) tensor")
        if t.dtype != torch.bfloat16:
            raise LaunchError(f"attention_backward: {name} is {t.dtype}; the backward kernels take torch.bfloat16")
        if t.numel() and not _strides_ok(t):  # an empty gradient of out.sum() has stride 0 and nothing to read
            raise LaunchError(f"attention_backward: {name} needs a contiguous last dimension, strides that are multiples "
                             "of 8 elements and a 16-byte aligned start (TMA); pass .contiguous()")
    for name, t in (("k", k), ("v", v), ("out", out), ("dout", dout), ("lse", lse)):
        if not isinstance(t, torch.Tensor) or t.device != q.device:
            where = t.device if isinstance(t, torch.Tensor) else type(t).__name__
            raise LaunchError(f"attention_backward: {name} is on {where} and q on {q.device}; every tensor must be on "
                             "q's device")
    b, h, sq, d = q.shape
    bk, hk, skv, dk = k.shape
    if tuple(v.shape) != tuple(k.shape) or bk != b or dk != d or tuple(out.shape) != tuple(q.shape) \
            or tuple(dout.shape) != tuple(q.shape):
        raise LaunchError(f"attention_backward: shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, out "
                         f"{tuple(out.shape)}, dout {tuple(dout.shape)} do not agree (k and v: (B, H_kv, S_kv, D))")
    if hk < 1 or h % hk:
        raise LaunchError(f"attention_backward: H = {h} is not a multiple of H_kv = {hk}")
    if d != layout.head_dim:
        raise BackwardNotSupportedError(f"attention_backward: head dim {d}; this module is built for "
                                        f"{layout.head_dim}")
    if min(b, h, sq, skv) < 0:
        raise LaunchError(f"attention_backward: B = {b}, H = {h}, S_q = {sq}, S_kv = {skv} must be >= 0")
    if lse.dtype != torch.float32 or tuple(lse.shape) != (b, h, sq):
        raise LaunchError(f"attention_backward: lse must be FP32 (B, H, S_q) = {(b, h, sq)}, got {lse.dtype} "
                         f"{tuple(lse.shape)}")
    return b, h, hk, sq, skv, d


def attention_backward(q, k, v, out, dout, lse, *, causal: bool = False, scale: float | None = None,
                       schedule=None, deterministic: bool | None = None, **kwargs):
    """dQ, dK, dV of ``out = softmax(q k^T scale (+ causal mask)) v`` from the forward's ``out`` and ``lse``.

    Args:
        q: (B, H, S_q, D) BF16 CUDA tensor (BHSD view; strides that TMA cannot read are copied first).
        k, v: (B, H_kv, S_kv, D), H a multiple of H_kv.
        out: the forward's output, as q.
        dout: the gradient of the loss with respect to ``out``, as q.
        lse: (B, H, S_q) FP32, the forward's log-sum-exp per row in natural-log units (-inf: a row that
            saw no key; its dQ is 0).
        causal: causal mask aligned to the bottom-right corner (as the forward); True or False.
        scale: softmax scale (default 1/sqrt(D)); the forward's rules (a real number >= 0, not so large that
            scale * log2(e) overflows FP32).
        schedule: a BackwardSchedule, or the path of a schedule file whose ``schedule`` is one (default
            ``default_backward_schedule(D)``); its ``head_dim`` is set to the inputs' D; a file is run once
            and again only when it or a file it was built from changes, as ``b200c.attention(schedule=path)``
            does.
        deterministic: add the K/V tiles' dQ parts in K/V tile order (``dq_reduction="deterministic"``:
            bit-equal gradients from run to run, the dQ additions of a Q tile serialised); None: when
            ``torch.are_deterministic_algorithms_enabled()``; False: the schedule's own reduction.

    Returns:
        ``(dq, dk, dv)`` BF16 contiguous tensors of q's, k's and v's shapes (zeros when B, H, S_q or S_kv
        is 0: nothing launches).

    Raises:
        LaunchError: bad shapes, dtypes or strides; ``causal`` / ``deterministic`` not a bool, a bad ``scale``;
            a head dim other than 64, 128 or 256.
        ScheduleError: ``schedule`` is not a BackwardSchedule (or a file defining one), or is invalid.
        BackwardNotSupportedError: not a compute capability 9.0 device, or a head dim or schedule the
            generated kernels do not cover yet.
        BuildError: nvcc failed; DriverError (a LaunchError): a driver call failed.
    """
    if kwargs:
        raise _unexpected_keyword("attention_backward", attention_backward, kwargs)
    causal = flag_value("causal", causal)
    scale = _scale_value(scale)
    if deterministic is not None:
        deterministic = flag_value("deterministic", deterministic)
    schedule = _schedule_for(q, schedule, deterministic)
    gen = _generated(schedule.to_json())
    lay = gen.layout
    q, k, v, out, dout = (_tma_ready(t) for t in (q, k, v, out, dout))
    b, h, hk, sq, skv, d = _check_inputs(q, k, v, out, dout, lse, lay)
    if not (b and h and sq and skv):  # nothing to differentiate through: every gradient is 0 (the forward's out is 0)
        return (torch.zeros_like(q, memory_format=torch.contiguous_format),
                torch.zeros(k.shape, dtype=k.dtype, device=q.device), torch.zeros(v.shape, dtype=v.dtype, device=q.device))
    dq = torch.empty_like(q, memory_format=torch.contiguous_format)
    dk = torch.empty(k.shape, dtype=k.dtype, device=q.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=q.device)
    _run(gen, q, k, v, out, dout, lse, dq, dk, dv, b, h, hk, sq, skv, d, causal, scale, None)
    return dq, dk, dv


def _scale_value(scale) -> float | None:
    """``scale`` as the kernels take it (:func:`b200c.runtime.inputs.softmax_scale_value`'s rules), refused with
    this function's keyword name."""
    try:
        return softmax_scale_value(scale)
    except LaunchError:
        raise LaunchError(f"attention_backward: scale={scale!r}: the backward takes the scales b200c.attention "
                          "takes, a real number >= 0 whose scale * log2(e) is finite in FP32 (None: 1/sqrt(D))") \
            from None


_OTHER_NAMES = {"softmax_scale": "scale=", "is_causal": "causal=", "softmax_lse": "lse (the 6th argument)",
                "layout": "nothing: it takes BHSD views (pass q.transpose(1, 2) and the like for BSHD tensors)"}


def _unexpected_keyword(fname: str, fn, kwargs: dict, positional=("q", "k", "v", "out", "dout", "lse")) -> LaunchError:
    """The error of a keyword ``fn`` does not take: this module's name for it, or the closest one."""
    from .inputs import keyword_given, no_such_keyword

    name, value = next(iter(kwargs.items()))
    given = keyword_given(fname, name, value)
    if name in _OTHER_NAMES:
        return LaunchError(f"{given}: {fname} calls it {_OTHER_NAMES[name]}" if not name == "layout"
                           else f"{given}: {fname} takes {_OTHER_NAMES[name]}")
    return no_such_keyword(fname, fn, name, given, positional)


def _schedule_for(q, schedule, deterministic):
    """The backward schedule of a call: ``schedule`` or the built-in one of q's head dim, deterministic
    when asked (None: torch's deterministic-algorithms switch)."""
    from ..dsl.presets import default_backward_schedule

    cap = _capability(q)
    if cap != (9, 0):
        where = f"compute capability {'.'.join(map(str, cap))}" if cap else f"device {getattr(q, 'device', None)}"
        raise BackwardNotSupportedError(
            f"b200c's backward kernels run on sm_90a (H100 / H200, compute capability 9.0), not on {where}; the "
            "sm100a backward is not built yet: compute this gradient with torch.nn.functional."
            "scaled_dot_product_attention")
    if not isinstance(q, torch.Tensor) or q.dim() not in (3, 4):
        raise LaunchError(f"attention_backward: q must be a 4-D (B, H, S, D) tensor (varlen: 3-D (total, H, D)), got "
                          f"{tuple(q.shape) if isinstance(q, torch.Tensor) else type(q).__name__}")
    d = q.shape[-1]
    if d not in (64, 128, 256):
        raise LaunchError(f"attention_backward: head dim {d}; b200c's backward kernels take 64, 128 or 256")
    d = int(d)
    if schedule is None:
        schedule = default_backward_schedule(d)
    if isinstance(schedule, (str, os.PathLike)):  # a schedule file whose 'schedule' is a BackwardSchedule
        from .schedule_files import backward_schedule_of_file

        schedule = backward_schedule_of_file(schedule)  # loaded once, reloaded when its files change
    from ..dsl.backward_schedule import BackwardSchedule

    if not isinstance(schedule, BackwardSchedule):
        from ..errors import ScheduleError

        raise ScheduleError(f"attention_backward: schedule must be a b200c.BackwardSchedule or the path of a file "
                            f"defining one (b200c.default_backward_schedule(head_dim) is the built-in one); "
                            f"got {type(schedule).__name__}")
    if deterministic is None:
        deterministic = torch.are_deterministic_algorithms_enabled()
    if schedule.head_dim != d:  # written for another head dim: refused naming that, not by a budget alone
        check_call_schedule(schedule.to_json(), d, bool(deterministic))
    return _for_call(schedule, d, deterministic)


def _for_call(schedule, d: int, deterministic: bool):
    """``schedule`` as a call runs it: head_dim set to the inputs' D (as the forward's schedules), the
    deterministic dQ reduction when asked."""
    if schedule.head_dim != d:
        schedule = schedule.replace(head_dim=d)
    if deterministic and schedule.dq_reduction != "deterministic":
        schedule = schedule.replace(dq_reduction="deterministic")
    return schedule


def _run(gen, q, k, v, out, dout, lse, dq, dk, dv, b, h, hk, sq, skv, d, causal, scale, cu_seqlens):
    """Launch the three kernels of ``gen`` on BHSD views (varlen: (1, H, total, D) views and
    ``cu_seqlens`` as :func:`param_values` takes it; ``b``, ``sq``, ``skv`` then the sequences and the
    longest lengths)."""
    lay = gen.layout
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    lp = launch_plan(lay, b, h, hk, sq, skv)
    dev = q.device
    lse_log2 = torch.empty((b, h, lp.seq_pad), dtype=torch.float32, device=dev)
    dpsum = torch.empty((b, h, lp.seq_pad), dtype=torch.float32, device=dev)
    dq_accum = torch.empty((b, h, lp.seq_pad, d), dtype=torch.float32, device=dev)
    sem = (torch.empty((b, h, lp.seq_pad // lay.block_m), dtype=torch.int32, device=dev) if lay.deterministic
           else None)  # zeroed by the preprocess
    mod = _loaded(gen, _device_index(dev))
    boxes = _Boxes(64, lay.block_m, lay.block_n)
    with driver.in_context(mod.context):
        maps = [driver.encode_tensor_map(n, t, boxes) for n, t in (("q", q), ("k", k), ("v", v), ("q", dout))]
    pre, main, post = param_values(lp, q, k, v, out, dout, lse, dq, dk, dv, lse_log2, dpsum, dq_accum, maps,
                                   causal=causal, scale=scale, dq_semaphore=sem, cu_seqlens=cu_seqlens)
    pre, main, post = ParamBlock(PRE_SPEC, pre), ParamBlock(MAIN_SPEC, main), ParamBlock(POST_SPEC, post)
    cu = mod.cu
    stream = _stream(dev)
    gx, gy, gz = lp.row_grid
    with driver.in_context(mod.context):
        for what, fn, grid, block, smem, params in (
                ("preprocess", mod.pre, (gx, gy, gz), lp.row_threads, 0, pre),
                ("main", mod.main, (lp.num_work, 1, 1), lp.threads, lp.smem, main),
                ("postprocess", mod.post, (gx, gy, gz), lp.row_threads, 0, post)):
            (err,) = cu.cuLaunchKernel(fn, *grid, block, 1, 1, smem, stream, params.array_addr, 0)
            if err != cu.CUresult.CUDA_SUCCESS:
                raise DriverError(f"cuLaunchKernel (backward {what}, grid {grid}, {block} threads, {smem} B SMEM) "
                                  f"failed: {driver._err_name(err)}")


def attention_backward_varlen(q, k, v, out, dout, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int,
                              max_seqlen_k: int, *, causal: bool = False, scale: float | None = None,
                              schedule=None, deterministic: bool | None = None, **kwargs):
    """dQ, dK, dV of a varlen call (:func:`b200c.attention_varlen`) from its output and LSE.

    Args:
        q: (total_q, H, D) BF16 CUDA tensor, the sequences packed back to back; k, v: (total_kv, H_kv, D).
        out: the forward's output, as q. dout: the gradient of the loss with respect to ``out``, as q.
        lse: (H, total_q) FP32, the forward's LSE (``return_lse=True``; -inf: a row that saw no key).
        cu_seqlens_q, cu_seqlens_k: int32 (B + 1) cumulative lengths on q's device.
        max_seqlen_q, max_seqlen_k: the longest sequences (ints).
        causal, scale, schedule, deterministic: as :func:`attention_backward` (causal: bottom-right per
            sequence).

    Returns:
        ``(dq, dk, dv)`` BF16 tensors of q's, k's and v's shapes (rows outside every sequence: 0).

    Raises:
        LaunchError: the varlen input rules (:func:`b200c.runtime.varlen.validate_varlen`, the values of
            cu_seqlens as :func:`b200c.runtime.varlen.check_seqlens`: checked unless a CUDA graph is being
            captured), ``out``, ``dout`` or ``lse`` of the wrong shape, dtype or device. BackwardNotSupportedError, BuildError: as
            :func:`attention_backward`.
    """
    from .varlen import _capturing, check_devices, check_seqlens, validate_varlen

    if kwargs:
        raise _unexpected_keyword("attention_backward_varlen", attention_backward_varlen, kwargs,
                                  ("q", "k", "v", "out", "dout", "lse", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q",
                                   "max_seqlen_k"))
    causal = flag_value("causal", causal)
    scale = _scale_value(scale)
    if deterministic is not None:
        deterministic = flag_value("deterministic", deterministic)
    schedule = _schedule_for(q, schedule, deterministic)
    p = validate_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, check_device=False)
    check_devices(q, k, v, cu_seqlens_q, cu_seqlens_k)
    for name, t in (("out", out), ("dout", dout)):
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != tuple(q.shape) or t.dtype != torch.bfloat16:
            raise LaunchError(f"attention_backward_varlen: {name} must be BF16 of q's shape {tuple(q.shape)}")
    if not isinstance(lse, torch.Tensor) or lse.dtype != torch.float32 or tuple(lse.shape) != (q.shape[1], q.shape[0]):
        raise LaunchError(f"attention_backward_varlen: lse must be FP32 (H, total_q) = {(q.shape[1], q.shape[0])}")
    for name, t in (("out", out), ("dout", dout), ("lse", lse)):
        if t.device != q.device:
            raise LaunchError(f"attention_backward_varlen: {name} is on {t.device} and q on {q.device}; every "
                              "tensor must be on q's device")
    if not _capturing(q):  # as the forward: no sequence longer than its max_seqlen (a sync; skipped in capture)
        check_seqlens(cu_seqlens_q, cu_seqlens_k, p)
    # rows outside every sequence (cu_seqlens may start past 0 or end before the last row) get gradient 0
    dq, dk, dv = (torch.zeros(t.shape, dtype=t.dtype, device=t.device) for t in (q, k, v))
    if not p.needs_launch or p.seq_q == 0:  # no keys or no queries anywhere: every gradient is 0
        return dq, dk, dv
    gen = _generated(schedule.to_json())
    if q.shape[-1] != gen.layout.head_dim:
        raise BackwardNotSupportedError(f"attention_backward_varlen: head dim {q.shape[-1]}; this module is built "
                                        f"for {gen.layout.head_dim}")
    # (1, H, total, D) views; _tma_ready copies what TMA cannot read (a gradient of out.sum() has stride 0)
    view = lambda t: _tma_ready(t.unsqueeze(0).transpose(1, 2))  # noqa: E731
    q4, k4, v4, out4, dout4 = (view(t) for t in (q, k, v, out, dout))
    out_view = lambda t: t.unsqueeze(0).transpose(1, 2)  # noqa: E731  fresh contiguous outputs
    _run(gen, q4, k4, v4, out4, dout4, lse.unsqueeze(0), out_view(dq), out_view(dk), out_view(dv), p.batch, p.heads,
         p.heads_kv, p.seq_q, p.seq_kv, q.shape[-1], causal, scale,
         (cu_seqlens_q, cu_seqlens_k, p.seq_q, p.seq_kv))
    return dq, dk, dv


__all__ = ["attention_backward", "attention_backward_varlen", "backward_reason", "check_call_schedule",
           "covered_head_dims", "launch_plan", "param_values", "LaunchPlan", "MAIN_SPEC", "PRE_SPEC", "POST_SPEC"]
