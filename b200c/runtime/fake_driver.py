"""A stand-in for the CUDA driver, for CPU-only tests and host-overhead measurements.

:func:`install` replaces, for the duration of a ``with`` block, everything the
per-call path of :func:`b200c.attention` touches on a GPU: the driver module
(``cuLaunchKernel``, ``cuLaunchKernelEx``, ``cuCtxSetCurrent``/``Push``/``Pop``, ``cuMemsetD32Async``,
``cuTensorMapEncodeTiled``, ``cuDriverGetVersion``; like the real driver, a launch or an
encode in a thread with no current context fails with CUDA_ERROR_INVALID_CONTEXT), kernel building/loading
(a LoadedKernel with the schedule's real LaunchInfo, no cubin; the backward module's three kernels with
their parameter specs), the device
queries and PyTorch's current stream, and lets CPU tensors pass the CUDA
device rule (also in the SDPA drop-in). Launches are recorded with the
parameter block decoded by the kernel's own signature (``LaunchInfo.params``),
so a test can check exactly what the kernel would receive, by parameter name.

Nothing here is used by the real runtime.
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import threading
import types
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import api, backward_launch, driver, inputs, launcher, op, sdpa
from .params import decode
from .api import _no_tracing
from .build import BuiltKernel

_T = torch.Tensor
_grad_enabled = torch.is_grad_enabled


@dataclass
class Launch:
    """One recorded ``cuLaunchKernel``, with the parameter block decoded.

    ``params`` maps each parameter name of the kernel's signature to its
    value (bytes for tensor maps, ints for pointers and integers, a float for
    the scale); the properties are shortcuts into it.
    """

    grid: int
    block: int
    smem: int
    stream: int
    params: dict
    kernel: object = None  # the kernel's LaunchInfo (its schedule name, q_stages, head_dim, ...)
    grid_yz: tuple = (1, 1)  # gridDim.y, gridDim.z (the backward's preprocess / postprocess: H, B)
    pdl: bool = False  # cuLaunchKernelEx with programmatic dependent launch (the split-KV combine)

    @property
    def maps(self) -> tuple:
        """The three 128-byte tensor maps (q, k, v)."""
        return self.params["tmap_q"], self.params["tmap_k"], self.params["tmap_v"]

    @property
    def out_ptr(self) -> int:
        return self.params["out"]

    @property
    def out_strides(self) -> tuple:
        return tuple(self.params[f"out_stride_{d}"] for d in "bhs")

    @property
    def lse_ptr(self) -> int:
        return self.params["lse"]

    @property
    def lse_strides(self) -> tuple:
        return tuple(self.params[f"lse_stride_{d}"] for d in "bhs")

    @property
    def sizes(self) -> tuple:
        """(B, H, S_q, S_kv)."""
        return tuple(self.params[n] for n in ("batch", "heads", "seq_q", "seq_kv"))

    @property
    def scale(self) -> float:
        return self.params["softmax_scale"]


class FakeFunction:
    """The fake CUfunction: carries the kernel's LaunchInfo (its parameter spec decodes the launches)."""

    def __init__(self, info, spec=None):
        self.info = info
        self.spec = info.params if spec is None else spec  # the combine kernel of a split-KV build: its own


@dataclass
class FakeDriver:
    """Counters and records of the fake driver (see :func:`install`)."""

    version: int = 13000
    launches: list = field(default_factory=list)
    encodes: list = field(default_factory=list)  # (globalAddress, dims, strides, box inner, box rows) per encode
    memsets: int = 0
    ctx_sets: int = 0
    ctx_pushes: int = 0  # cuCtxPushCurrent calls (tensor maps encoded with the kernel's context current)
    loads: int = 0
    record: bool = True
    _keep: list = field(default_factory=list, repr=False)

    def module(self):
        """A namespace that looks like ``cuda.bindings.driver`` to b200c.runtime."""
        from cuda.bindings import driver as real

        ok = real.CUresult.CUDA_SUCCESS
        fd = self

        def launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra, pdl=False):
            if current() is None:
                return (no_ctx,)
            if fd.record:
                fd.launches.append(Launch(gx, bx, smem, int(stream), decode(f.spec, params), f.info, (gy, gz), pdl))
            return (ok,)

        def launch_ex(config, f, params, extra):  # cuLaunchKernelEx: the same launch, its attributes read
            pdl = any(a.id == real.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
                      and a.value.programmaticStreamSerializationAllowed for a in config.attrs[:config.numAttrs])
            return launch(f, config.gridDimX, config.gridDimY, config.gridDimZ, config.blockDimX, config.blockDimY,
                          config.blockDimZ, config.sharedMemBytes, config.hStream, params, extra, pdl)

        def memset(ptr, value, n, stream):
            fd.memsets += 1
            return (ok,)

        no_ctx = real.CUresult.CUDA_ERROR_INVALID_CONTEXT
        bound = threading.local()  # like the driver: each thread has its own current context (none at first)

        def current():
            stack = getattr(bound, "stack", None)
            return stack[-1] if stack else getattr(bound, "ctx", None)

        def set_ctx(ctx):
            fd.ctx_sets += 1
            bound.ctx = ctx
            return (ok,)

        def push_ctx(ctx):
            fd.ctx_pushes += 1
            bound.stack = getattr(bound, "stack", []) + [ctx]
            return (ok,)

        def pop_ctx():
            ctx = bound.stack[-1]
            bound.stack = bound.stack[:-1]
            return (ok, ctx)

        def encode(dtype, rank, addr, dims, strides, box, elem_strides, interleave, swizzle, l2, oob):
            if current() is None:  # the real driver refuses too (a new thread's first CUDA call, measured on the H200)
                return no_ctx, None
            dims = tuple(int(x) for x in dims)
            strides = tuple(int(x) for x in strides)
            fd.encodes.append((int(addr), dims, strides, int(box[0]), int(box[1])))
            words = [int(addr), (1 << 64) - 1] + [int.from_bytes(hashlib.sha256(repr((dims, strides, i)).encode())
                                                                  .digest()[:8], "little") for i in range(14)]
            buf = (ctypes.c_uint64 * 16)(*words)
            fd._keep.append(buf)
            return ok, types.SimpleNamespace(getPtr=lambda: ctypes.addressof(buf))

        ns = types.SimpleNamespace(**{name: getattr(real, name) for name in dir(real) if name[:2] == "CU"})
        ns.cuuint64_t, ns.cuuint32_t = int, int
        ns.cuLaunchKernel = launch
        ns.cuLaunchKernelEx = launch_ex
        ns.cuMemsetD32Async = memset
        ns.cuCtxSetCurrent = set_ctx
        ns.cuCtxPushCurrent = push_ctx
        ns.cuCtxPopCurrent = pop_ctx
        ns.cuTensorMapEncodeTiled = encode
        ns.cuDriverGetVersion = lambda: (ok, fd.version)
        ns.cuGetErrorName = lambda err: (ok, str(err).encode())
        return ns


class _Patches:
    def __init__(self):
        self._undo = []

    def setattr(self, obj, name, value):
        self._undo.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    def undo(self):
        while self._undo:
            obj, name, old = self._undo.pop()
            setattr(obj, name, old)


@contextlib.contextmanager
def install(*, target: str = "sm100a", num_sms: int = 132, version: int = 13000):
    """Replace the driver, kernel loading, device queries and the CUDA device rule (see the module docstring).

    Everything is restored when the ``with`` block ends.

    Args:
        target: the resolved target of the fake loaded kernels (``"sm100a"``: a
            compute capability 10.0 device; ``"emulate"``, ``"sm90a"``: 9.0). Calls with
            ``target="auto"`` (the default) take it, as on a GPU of that kind: ``"sm90a"``
            stands for an H100/H200, ``"sm100a"`` for a B200; with ``"emulate"`` (never what
            ``"auto"`` picks) they take sm100a.
        num_sms: SM count of the fake device.
        version: what ``cuDriverGetVersion`` returns.

    Yields:
        FakeDriver: the records.
    """
    from ..codegen.targets import resolve

    record = resolve(target)
    fd = FakeDriver(version=version)
    mod = fd.module()
    mp = _Patches()

    def load(generated, tgt, device):
        fd.loads += 1
        built = BuiltKernel(Path("/fake/kernel.cubin"), generated.launch, record.name, "f" * 64, False)
        block = generated.launch.threads + record.emulator_threads
        emulated = record.emulator_threads > 0
        masks = (0, 2 * num_sms) if emulated else None
        report = driver.HangReport() if emulated else None
        func = FakeFunction(generated.launch)
        lk = driver.LoadedKernel(built, device, object(), None, func, num_sms, block, record, report, masks)
        if generated.launch.split_kv:
            from ..codegen.work import combine_params

            lk.combine = FakeFunction(generated.launch, tuple((p.name, p.kind) for p in combine_params()))
        if generated.launch.work().item_order:
            from ..codegen.work import work_order_params

            lk.work_order = FakeFunction(generated.launch, tuple((p.name, p.kind) for p in work_order_params()))
        return lk

    def load_backward(gen, device):  # the backward module (b200c.runtime.backward_launch): three kernels
        fd.loads += 1
        bl = backward_launch
        return types.SimpleNamespace(cu=mod, context=object(), main=FakeFunction(gen.layout, bl.MAIN_SPEC),
                                     pre=FakeFunction(gen.layout, bl.PRE_SPEC), post=FakeFunction(gen.layout, bl.POST_SPEC))

    mp.setattr(backward_launch, "_loaded", load_backward)
    mp.setattr(backward_launch, "_capability", lambda q: tuple(record.compute_capability))
    mp.setattr(backward_launch, "_device_index", lambda dev: -1)
    mp.setattr(backward_launch, "_stream", lambda dev: 7)
    mp.setattr(driver, "_cu", lambda: mod)
    mp.setattr(driver, "_driver_version", None)
    mp.setattr(driver, "_note_emulation", lambda t: None)  # no GPU here: "running on a Hopper GPU" would be false
    mp.setattr(op, "kernel_for_generated", load)
    mp.setattr(op, "_kernels", {})
    mp.setattr(op, "device_capability", lambda dev: (record.compute_capability, "fake GPU"))
    mp.setattr(inputs, "_check_devices", lambda ts: None)
    mp.setattr(launcher, "_get_raw_stream", lambda device: 7)
    mp.setattr(launcher, "_current_device", lambda: -1)  # CPU tensors report device -1
    mp.setattr(launcher, "_empty", lambda size, stride, dtype: torch.empty_strided(size, stride, dtype=dtype))
    mp.setattr(api, "_direct_path_ok", _direct_path_ok_on_cpu)
    mp.setattr(sdpa, "_device_reason", lambda q, k, v: None)
    if record.native:  # target="auto" takes the fake device's target, as on a GPU of that kind
        real_default = api._default_target
        mp.setattr(api, "_default_target", lambda dev, tgt: record if tgt == "auto" else real_default(dev, tgt))
    mp.setattr(api, "_default_targets", {})
    mp.setattr(api, "_defaults", {})
    launcher.clear()
    try:
        yield fd
    finally:
        launcher.clear()
        mp.undo()


def _direct_path_ok_on_cpu(q, k, v) -> bool:
    """:func:`b200c.runtime.api._direct_path_ok` without the CUDA-device condition."""
    return (type(q) is _T and type(k) is _T and type(v) is _T
            and not (_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad))
            and _no_tracing())

