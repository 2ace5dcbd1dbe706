"""Load cubins and launch them on PyTorch tensors through cuda-bindings.

Everything runs in the device's primary context (the one PyTorch uses).
Modules are loaded once per (cache key, device), after the cubin's bytes were
checked against the sha256 recorded at build time. Tensor maps are encoded
here (:func:`encode_tensor_map`); :mod:`b200c.runtime.launcher` caches them and
the kernel's parameter block and calls ``cuLaunchKernel`` on PyTorch's current
stream: no host synchronisation and no device allocation, so launches can be
captured in a CUDA graph once the kernel was loaded by a call outside capture.

Emulation target (sm_90a): on first load a zeroed TMEM image
(2 x SMs slots of 128 lanes x 512 columns x 4 bytes, shared by every kernel on
the device) and the hang report (host-mapped pinned memory, one per module)
are wired into the module globals. After a failed synchronisation call
:func:`check_hang` (or use :func:`synchronize`) to turn a bounded-wait trap
into a :class:`BarrierTimeoutError`.
"""
from __future__ import annotations

import contextlib
import ctypes
import logging
import struct
import threading
from dataclasses import dataclass, field

from ..codegen.launch import KERNEL_NAME
from ..errors import BarrierTimeoutError, DriverError, LaunchError, UnsupportedDeviceError
from .build import BuiltKernel
from .inputs import tma_strides

log = logging.getLogger("b200c.runtime")

_TMEM_SLOT_BYTES = 128 * 512 * 4
_lock = threading.Lock()
_loaded: dict[tuple[str, int], "LoadedKernel"] = {}
_emu_tmem: dict[int, tuple[int, int, int]] = {}  # device -> (tmem ptr, mask ptr, num_slots)
_emulate_noted = False


class HangSite(ctypes.Structure):
    """Host view of ``b200c::HangSite``: one more timed-out wait."""

    _fields_ = [(n, ctypes.c_int) for n in ("site", "parity", "cta", "iter", "work", "lane_thread")]


class HangReport(ctypes.Structure):
    """Host view of ``b200c::HangReport`` (b200c_ptx.cuh): the first timed-out
    wait, then ``more`` other stuck waits of the same deadlock (up to 7)."""

    _fields_ = [(n, ctypes.c_int) for n in ("flag", "site", "parity", "cta", "iter", "work", "lane_thread", "more")] + [
        ("others", HangSite * 7)
    ]


# ---- target / architecture ---------------------------------------------------------


def _note_emulation(target) -> None:
    global _emulate_noted
    if not _emulate_noted:
        _emulate_noted = True
        log.warning(
            "b200c: running the emulated kernel (target %r, %s) on a %s GPU: for correctness only, never for speed",
            target.name, target.arch, target.devices,
        )


def check_arch(target, capability: tuple[int, int], device_name: str = "") -> None:
    """Check that a device of compute ``capability`` (major, minor) runs ``target`` (a name or a
    :class:`~b200c.codegen.targets.Target`): its record's ``compute_capability``; an emulation
    target logs once that it is for correctness only.

    Raises:
        TargetError: unknown target.
        UnsupportedDeviceError: naming both capabilities and the targets the device runs.
    """
    from ..codegen.targets import for_device, resolve

    t = resolve(target)
    need = t.compute_capability
    have = tuple(capability)
    dev = f" ({device_name})" if device_name else ""
    if have != need:
        runs = for_device(have)
        hint = (f"; on this device use {' or '.join(f'target={chr(34)}{r.name}{chr(34)} ({r.summary})' for r in runs)}"
                if runs else
                f"; target {t.name!r} runs on compute capability {need[0]}.{need[1]} ({t.devices}) only")
        raise UnsupportedDeviceError(
            f"target {t.name!r} needs compute capability {need[0]}.{need[1]} but the device{dev} "
            f"has {have[0]}.{have[1]}{hint}"
        )
    if not t.native:
        _note_emulation(t)


def resolve_target(target, capability: tuple[int, int], device_name: str = "", schedule_target=None):
    """The :class:`~b200c.codegen.targets.Target` a call runs on a device.

    ``"auto"`` picks the schedule's own kernel where the device runs it natively:
    ``schedule_target`` (the native target the schedule is written for, see
    :func:`b200c.codegen.targets.schedule_target`; default the first native
    target) when the device has its compute capability. It never picks an
    emulation target: a schedule whose target the device runs only emulated (a
    B200 schedule on a Hopper GPU) raises, saying so and how to ask for the
    emulation by name (``target="emulate"``, correctness only) or for a schedule
    of the device (``b200c.default_schedule(D, target=...)``).

    Raises:
        TargetError: unknown target name.
        UnsupportedDeviceError: the device cannot run the (resolved) target natively
            under ``"auto"``, or cannot run the named target at all.
    """
    from ..codegen.targets import AUTO, REGISTRY, emulation_of, for_device, native_targets, resolve, resolve_or_auto

    t = resolve_or_auto(target)
    if t == AUTO:
        own = resolve(schedule_target) if schedule_target is not None else native_targets()[0]
        have = tuple(capability)
        dev = f" ({device_name})" if device_name else ""
        if own.compute_capability != have:
            emu = emulation_of(own, have)
            natives = [r for r in for_device(have) if r.native]
            mine = (f"a schedule for it (b200c.default_schedule(head_dim, target={natives[0].name!r}), or "
                    f"schedule=None)" if natives else "")
            if emu is not None:
                raise UnsupportedDeviceError(
                    f"the schedule is written for target {own.name!r} ({own.summary}), which the device{dev} of "
                    f"compute capability {have[0]}.{have[1]} runs only emulated (target {emu.name!r}: {emu.summary}, "
                    f"several times slower than torch SDPA); target='auto' never picks the emulation: pass "
                    f"target={emu.name!r} to run it so" + (f", or {mine}" if mine else "")
                )
            if not natives:
                raise UnsupportedDeviceError(
                    f"no b200c target for the device{dev} of compute capability {have[0]}.{have[1]}: "
                    + ", ".join(f"target {r.name!r} needs {r.compute_capability[0]}.{r.compute_capability[1]} "
                                f"({r.devices})" for r in REGISTRY)
                )
        t = own  # check_arch names the capability it needs
    check_arch(t, capability, device_name)
    return t


# ---- driver helpers ------------------------------------------------------------------


def _cu():
    from cuda.bindings import driver as cu

    return cu


def _err_name(err) -> str:
    cu = _cu()
    try:
        r = cu.cuGetErrorName(err)
        return r[1].decode() if isinstance(r[1], bytes) else str(r[1])
    except Exception:  # noqa: BLE001 - naming the error must not fail
        return str(err)


def _check(result, what: str):
    """Unpack a cuda-bindings result tuple; raise DriverError on failure."""
    cu = _cu()
    err, *vals = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise DriverError(f"{what} failed: {_err_name(err)}")
    if not vals:
        return None
    return vals[0] if len(vals) == 1 else tuple(vals)


@contextlib.contextmanager
def in_context(ctx):
    """Make CUDA context ``ctx`` current in this thread for the ``with`` block (``cuCtxPushCurrent``),
    then restore whatever was current before (``cuCtxPopCurrent``): driver calls that need a current
    context (loading a module, encoding a tensor map) work in any thread, also one that never made
    a CUDA call, without changing the thread's current device for PyTorch.

    Raises:
        LaunchError: the context cannot be made current.
    """
    cu = _cu()
    _check(cu.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
    try:
        yield ctx
    finally:
        cu.cuCtxPopCurrent()


def _set_global(module, name: str, data: bytes) -> bool:
    """Copy ``data`` into module global ``name``; False if the module has no such global."""
    cu = _cu()
    err, dptr, size = cu.cuModuleGetGlobal(module, name.encode())
    if err == cu.CUresult.CUDA_ERROR_NOT_FOUND:
        return False
    _check((err,), f"cuModuleGetGlobal({name})")
    if size != len(data):
        raise LaunchError(f"module global {name} has {size} bytes, expected {len(data)}")
    _check(cu.cuMemcpyHtoD(dptr, data, len(data)), f"cuMemcpyHtoD({name})")
    return True


# ---- loading -------------------------------------------------------------------------


@dataclass
class LoadedKernel:
    """A cubin loaded into one device's primary context.

    Attributes:
        built: the cached kernel.
        device: CUDA device ordinal.
        num_sms: SM count of the device.
        block: threads per CTA (``launch.threads`` + the target's ``emulator_threads``).
        target: the :class:`~b200c.codegen.targets.Target` it was built for.
        hang_report: host view of the hang report (emulation builds), else None.
    """

    built: BuiltKernel
    device: int
    context: object
    module: object
    function: object
    num_sms: int
    block: int
    target: object = None  # the Target record of built.target
    hang_report: HangReport | None = None
    emu_masks: tuple | None = None  # (device pointer, slot count) of the TMEM alloc masks
    _keep: list = field(default_factory=list, repr=False)
    combine: object = None  # split-KV builds: the module's b200c_attention_combine (b200c/codegen/work.py)
    block_mask: object = None  # builds with a block mask: b200c_block_mask_ranges (b200c/codegen/mod_kernel.py)
    work_order: object = None  # builds with a varlen item order: b200c_work_order (b200c/runtime/work_order.py)


def load(built: BuiltKernel, device: int) -> LoadedKernel:
    """Load ``built`` on CUDA device ordinal ``device`` (cached per (key, device)).

    Raises:
        LaunchError: a driver call failed, the kernel entry is missing, or the
            kernel needs more SMEM/threads than the device allows.
    """
    with _lock:
        k = (built.key, device)
        if k not in _loaded:
            _loaded[k] = _load(built, device)
        return _loaded[k]


def _verified_image(built: BuiltKernel) -> bytes:
    """The cubin's bytes, checked against the sha256 recorded when it was built.

    A damaged cubin is never handed to the driver (the driver may crash on
    one instead of returning an error).

    Raises:
        BuildError: the file is unreadable or changed since it was verified.
    """
    from ..errors import BuildError
    from .cache import sha256_bytes

    try:
        image = built.cubin_path.read_bytes()
    except OSError as e:
        raise BuildError(f"cannot read cached kernel {built.cubin_path}: {e.strerror or e}; call again to rebuild it") from None
    if built.cubin_sha256 and sha256_bytes(image) != built.cubin_sha256:
        raise BuildError(
            f"cached kernel {built.cubin_path} changed after it was verified (sha256 mismatch); "
            "call again to rebuild it"
        )
    return image


def _load(built: BuiltKernel, device: int) -> LoadedKernel:
    cu = _cu()
    A = cu.CUdevice_attribute
    launch = built.launch
    _check(cu.cuInit(0), "cuInit")
    dev = _check(cu.cuDeviceGet(device), "cuDeviceGet")
    ctx = _check(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    with in_context(ctx):  # this thread's current context (PyTorch's current device) stays as it was
        return _load_in(built, device, dev, ctx)


def _load_in(built: BuiltKernel, device: int, dev, ctx) -> LoadedKernel:
    cu = _cu()
    A = cu.CUdevice_attribute
    launch = built.launch
    image = _verified_image(built)
    module = _check(cu.cuModuleLoadData(image), f"cuModuleLoadData({built.cubin_path})")
    func = _check(cu.cuModuleGetFunction(module, KERNEL_NAME.encode()), f"cuModuleGetFunction({KERNEL_NAME})")

    from ..codegen.targets import resolve

    target = resolve(built.target)
    block = launch.threads + target.emulator_threads
    max_threads = _check(
        cu.cuFuncGetAttribute(cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, func), "cuFuncGetAttribute"
    )
    if block > max_threads:
        raise LaunchError(
            f"kernel {launch.name!r} needs {block} threads per CTA but its registers allow {max_threads} on device {device}"
        )
    optin = _check(cu.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev), "cuDeviceGetAttribute")
    static = _check(
        cu.cuFuncGetAttribute(cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, func), "cuFuncGetAttribute"
    )
    if launch.dynamic_smem_bytes + static > optin:
        raise LaunchError(
            f"kernel {launch.name!r} needs {launch.dynamic_smem_bytes} B dynamic + {static} B static SMEM per CTA; "
            f"device {device} allows {optin} B"
        )
    _check(
        cu.cuFuncSetAttribute(
            func, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, launch.dynamic_smem_bytes
        ),
        "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
    )
    num_sms = _check(cu.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "cuDeviceGetAttribute")
    lk = LoadedKernel(built, device, ctx, module, func, num_sms, block, target)
    if launch.split_kv:
        from ..codegen.work import COMBINE_KERNEL_NAME

        lk.combine = _check(cu.cuModuleGetFunction(module, COMBINE_KERNEL_NAME.encode()),
                            f"cuModuleGetFunction({COMBINE_KERNEL_NAME})")
    if ("kv_ranges", "i32_ptr") in launch.params:  # a block mask: the module's kernel for mask tensors
        from ..codegen.mod_kernel import BLOCK_MASK_KERNEL_NAME

        lk.block_mask = _check(cu.cuModuleGetFunction(module, BLOCK_MASK_KERNEL_NAME.encode()),
                               f"cuModuleGetFunction({BLOCK_MASK_KERNEL_NAME})")
    if launch.work().item_order:  # a varlen item order: the module's kernel that makes it
        from ..codegen.work import WORK_ORDER_KERNEL_NAME

        lk.work_order = _check(cu.cuModuleGetFunction(module, WORK_ORDER_KERNEL_NAME.encode()),
                               f"cuModuleGetFunction({WORK_ORDER_KERNEL_NAME})")
    if target.emulator_threads:
        _wire_emulator(lk)
    elif target.bounded_waits == "debug":
        _wire_hang_report(lk)
    return lk


def _wire_hang_report(lk: LoadedKernel) -> None:
    """Debug builds of a target whose waits are bounded only on request (``bounded_waits="debug"``,
    ``B200C_BOUNDED_WAIT=1``: sm90a) have the hang report global; release builds do not, and
    nothing is allocated for them."""
    cu = _cu()
    err, _, _ = cu.cuModuleGetGlobal(lk.module, b"b200c_hang_report")
    if err != cu.CUresult.CUDA_SUCCESS:
        return
    host = _check(cu.cuMemHostAlloc(ctypes.sizeof(HangReport), cu.CU_MEMHOSTALLOC_DEVICEMAP), "cuMemHostAlloc")
    ctypes.memset(int(host), 0, ctypes.sizeof(HangReport))
    dptr = _check(cu.cuMemHostGetDevicePointer(host, 0), "cuMemHostGetDevicePointer")
    if _set_global(lk.module, "b200c_hang_report", struct.pack("<Q", int(dptr))):
        lk.hang_report = HangReport.from_address(int(host))
    lk._keep.append(host)


def _wire_emulator(lk: LoadedKernel) -> None:
    cu = _cu()
    if lk.device not in _emu_tmem:
        slots = 2 * lk.num_sms
        tmem = _check(cu.cuMemAlloc(slots * _TMEM_SLOT_BYTES), "cuMemAlloc(TMEM image)")
        masks = _check(cu.cuMemAlloc(slots * 4), "cuMemAlloc(TMEM masks)")
        _check(cu.cuMemsetD8(tmem, 0, slots * _TMEM_SLOT_BYTES), "cuMemsetD8")
        _check(cu.cuMemsetD8(masks, 0, slots * 4), "cuMemsetD8")
        _emu_tmem[lk.device] = (int(tmem), int(masks), slots)
    tmem, masks, slots = _emu_tmem[lk.device]
    lk.emu_masks = (cu.CUdeviceptr(masks), slots)
    found = [
        _set_global(lk.module, "b200c_emu_tmem", struct.pack("<Q", tmem)),
        _set_global(lk.module, "b200c_emu_tmem_alloc_mask", struct.pack("<Q", masks)),
        _set_global(lk.module, "b200c_emu_num_slots", struct.pack("<i", slots)),
    ]
    if not all(found):
        log.debug("b200c: emulation kernel %r lacks some emulator globals", lk.built.launch.name)
    host = _check(cu.cuMemHostAlloc(ctypes.sizeof(HangReport), cu.CU_MEMHOSTALLOC_DEVICEMAP), "cuMemHostAlloc")
    ctypes.memset(int(host), 0, ctypes.sizeof(HangReport))
    dptr = _check(cu.cuMemHostGetDevicePointer(host, 0), "cuMemHostGetDevicePointer")
    if _set_global(lk.module, "b200c_hang_report", struct.pack("<Q", int(dptr))):
        lk.hang_report = HangReport.from_address(int(host))
    lk._keep.append(host)


# ---- tensor maps ------------------------------------------------------------------------

TENSOR_MAP_BYTES = 128  # sizeof(CUtensorMap)
_SWIZZLE = {"none": "CU_TENSOR_MAP_SWIZZLE_NONE", "32B": "CU_TENSOR_MAP_SWIZZLE_32B",
            "64B": "CU_TENSOR_MAP_SWIZZLE_64B", "128B": "CU_TENSOR_MAP_SWIZZLE_128B"}
_L2 = {"none": "CU_TENSOR_MAP_L2_PROMOTION_NONE", "64B": "CU_TENSOR_MAP_L2_PROMOTION_L2_64B",
       "128B": "CU_TENSOR_MAP_L2_PROMOTION_L2_128B", "256B": "CU_TENSOR_MAP_L2_PROMOTION_L2_256B"}


# CUTLASS works around a CUDA driver bug in TMA descriptors: for driver
# versions <= 13.1 (cuDriverGetVersion() <= 13010) it clears bit 21 of the
# descriptor's second 64-bit word when the tensor's memory span is under
# 128 KiB. Public source: NVIDIA/cutlass, include/cute/atom/copy_traits_sm90_tma.hpp
# (cute::detail::make_tma_copy_desc, right after cuTensorMapEncodeTiled); CHANGELOG 4.3.4: "Work
# around a driver TMA descriptor related bug which will cause occasional errors
# on Blackwell when the tensor's backing memory allocation is less than 128KB".
# b200c applies the same condition, with the span computed the same way
# (cosize of the layout x element size) and the version read at run time.
TMA_WORKAROUND_MAX_DRIVER = 13010
TMA_WORKAROUND_MAX_BYTES = 128 * 1024  # exclusive
_driver_version: int | None = None


def driver_version() -> int:
    """``cuDriverGetVersion()`` (1000 * major + 10 * minor, e.g. 13000), read once per process.

    Raises:
        LaunchError: the driver cannot be queried.
    """
    global _driver_version
    if _driver_version is None:
        _driver_version = int(_check(_cu().cuDriverGetVersion(), "cuDriverGetVersion"))
    return _driver_version


def tensor_span_bytes(shape, strides, elem_bytes: int = 2) -> int:
    """Bytes from a tensor's first to one past its last element (CuTe's cosize x element size)."""
    if any(n == 0 for n in shape):
        return 0
    return elem_bytes * (1 + sum((n - 1) * st for n, st in zip(shape, strides)))


def apply_tma_driver_workaround(desc: bytearray, span_bytes: int, version: int) -> bool:
    """Clear bit 21 of the descriptor's second 64-bit word when CUTLASS would (see above).

    Args:
        desc: the 128-byte CUtensorMap, modified in place.
        span_bytes: :func:`tensor_span_bytes` of the tensor.
        version: :func:`driver_version`.

    Returns:
        True if the bit was cleared.
    """
    if version <= TMA_WORKAROUND_MAX_DRIVER and span_bytes < TMA_WORKAROUND_MAX_BYTES:
        word = int.from_bytes(desc[8:16], "little") & ~(1 << 21)
        desc[8:16] = word.to_bytes(8, "little")
        return True
    return False


_encode_args: dict = {}


def _encode_constants(cu, box_inner: int, rows: int, swizzle: str, l2: str) -> tuple:
    """The arguments of cuTensorMapEncodeTiled that depend only on the kernel (data type, box, element
    strides, interleave, swizzle, L2 promotion, OOB fill), built once per box and driver module: a
    grown K/V cache encodes new maps every decoding step (b200c.runtime.grown)."""
    key = (box_inner, rows, swizzle, l2)
    hit = _encode_args.get(key)
    if hit is not None and hit[0] is cu:  # built with this driver module (tests swap it)
        return hit[1]
    u32 = cu.cuuint32_t
    hit = (cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
           [u32(box_inner), u32(rows), u32(1), u32(1)], [u32(1)] * 4,  # lists, as the H200 ran them; never mutated
           cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
           getattr(cu.CUtensorMapSwizzle, _SWIZZLE[swizzle]), getattr(cu.CUtensorMapL2promotion, _L2[l2]),
           cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if len(_encode_args) > 64:
        _encode_args.clear()
    _encode_args[key] = (cu, hit)
    return hit


def encode_tensor_map(name: str, t, launch) -> bytes:
    """The 128-byte CUtensorMap of a logical (B, H, S, D) bf16 tensor (launch.py contract).

    dims {D, S, H, B}; strides of S, H, B in bytes; box {tma_box_inner,
    tma_box_rows (Q) or kv_box_rows (K, V), 1, 1}; swizzle and L2 promotion
    from ``launch``; OOB zero fill; then CUTLASS's driver workaround (:func:`apply_tma_driver_workaround`).

    Raises:
        LaunchError: the driver rejects the map (names tensor, shape, strides).
    """
    cu = _cu()
    b, h, s, d = (int(x) for x in t.shape)
    strides = tma_strides(t)
    rows = launch.tma_box_rows if name == "q" else launch.kv_box_rows
    u64 = cu.cuuint64_t
    dtype, box, elem, interleave, swizzle, l2, oob = _encode_constants(
        cu, launch.tma_box_inner, rows, launch.tma_swizzle, launch.tma_l2_promotion)
    err, tmap = cu.cuTensorMapEncodeTiled(dtype, 4, t.data_ptr(), [u64(d), u64(s), u64(h), u64(b)],
                                          [u64(x) for x in strides], box, elem, interleave, swizzle, l2, oob)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise LaunchError(
            f"cuTensorMapEncodeTiled rejected tensor {name} (shape {tuple(t.shape)}, strides {tuple(t.stride())} "
            f"elements, box {launch.tma_box_inner}x{rows}, swizzle {launch.tma_swizzle}): {_err_name(err)}"
        )
    desc = bytearray(ctypes.string_at(tmap.getPtr(), TENSOR_MAP_BYTES))
    apply_tma_driver_workaround(desc, tensor_span_bytes(t.shape, t.stride()), driver_version())
    return bytes(desc)


# ---- hangs ---------------------------------------------------------------------------


_emu_errors: dict[int, str] | None = None


def emulator_errors() -> dict[int, str]:
    """HangReport.site codes < 0 of the emulator -> description (parsed from b200c_emulate.cuh)."""
    global _emu_errors
    if _emu_errors is None:
        import re
        from pathlib import Path

        from ..codegen import cuda_include_dir

        _emu_errors = {}
        header = Path(cuda_include_dir()) / "b200c_emulate.cuh"
        text = header.read_text() if header.is_file() else ""
        for m in re.finditer(r"kEmuErr(\w+)\s*=\s*(-\d+),\s*//\s*(.*)", text):
            _emu_errors[int(m.group(2))] = f"{m.group(1)}: {m.group(3).strip()}"
    return _emu_errors


def hang_message(lk_name: str, report: HangReport, site, sites=None) -> str:
    """Text of a BarrierTimeoutError for ``report`` (``site``: a WaitSite or
    None; ``sites``: site id -> WaitSite lookup for the other stuck waits)."""
    if report.site < 0:
        what = emulator_errors().get(report.site, "unknown emulator error")
        return (
            f"b200c kernel {lk_name!r}: the Blackwell emulator trapped with error {report.site} ({what}) in "
            f"CTA {report.cta}, thread {report.lane_thread}; detail words iter=0x{report.iter & 0xFFFFFFFF:x}, "
            f"work=0x{report.work & 0xFFFFFFFF:x}; the CUDA context is now unusable: restart the process"
        )
    where = f"role {site.role}, barrier {site.barrier}" if site else "unknown role/barrier"
    also = ""
    if sites is not None and report.more > 0:
        parts = []
        for o in list(report.others)[: min(report.more, 7)]:
            w = sites(o.site)
            name = f"role {w.role} on {w.barrier}" if w else f"site {o.site}"
            text = f"{name} (parity {o.parity}, CTA {o.cta}, K/V iteration {o.iter})"
            if text not in parts:  # several warps of one role stuck at the same place
                parts.append(text)
        also = "; also stuck: " + "; ".join(parts)
    return (
        f"b200c kernel {lk_name!r}: bounded mbarrier wait timed out at site {report.site} ({where}), "
        f"waiting for phase parity {report.parity}, CTA {report.cta}, thread {report.lane_thread}, "
        f"K/V iteration {report.iter}, work item {report.work}{also}; the CUDA context is now unusable: "
        "restart the process"
    )


def check_hang(kernel: LoadedKernel | None = None) -> None:
    """Raise BarrierTimeoutError if ``kernel`` (default: every loaded kernel) recorded a hang.

    Reads host-mapped memory only (no CUDA call), so it works after the
    context died. Call it when a synchronisation reports an error.

    Raises:
        BarrierTimeoutError: naming role, barrier, parity, CTA, K/V iteration, work item.
    """
    kernels = [kernel] if kernel is not None else list(_loaded.values())
    for lk in kernels:
        r = lk.hang_report
        if r is not None and r.flag == 1:
            info = lk.built.launch
            raise BarrierTimeoutError(hang_message(info.name, r, info.site(r.site), info.site))


def synchronize(device=None) -> None:
    """``torch.cuda.synchronize(device)``, turning a bounded-wait trap into BarrierTimeoutError.

    Raises:
        BarrierTimeoutError: a b200c kernel timed out in a bounded wait.
        RuntimeError: any other CUDA error (re-raised).
    """
    import torch

    try:
        torch.cuda.synchronize(device)
    except Exception:
        check_hang()
        raise
