"""The per-call host path: cached launches of loaded kernels.

A launch *entry* is everything one call needs that depends only on the kernel
and on q, k, v's data pointers, shapes, strides, dtypes and device: the
validated problem, the grid, the three tensor maps and the kernel's parameter
block (a ctypes buffer plus the ``void*[]`` array ``cuLaunchKernel`` takes).
Entries are keyed by exactly those inputs, so a call whose tensors match an
earlier one only allocates the output, writes its pointer (and the softmax
scale) into the block and calls ``cuLaunchKernel``; anything else (another
pointer, shape, stride, dtype, device, layout, schedule or target) misses,
is validated in full and gets its own entry. Tensor maps are also cached on
their own by (pointer, shape, strides, box, swizzle, L2 promotion, device).

Kernel parameters (codegen/launch.py contract, in order): three 128-byte
CUtensorMaps (q, k, v; logical (B, H, S, D)), ``out`` pointer, three int64
out strides (B, H, S; elements), four int32 (B, H, S_q, S_kv), float32
softmax scale.
"""
from __future__ import annotations

import ctypes
import threading

import torch

from . import driver
from .inputs import check_grid, empty_result, validate_inputs

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


def clear() -> None:
    """Forget every cached launch entry and tensor map (kernels stay loaded)."""
    _entries.clear()
    _maps.clear()


class Entry:
    """One cached launch configuration (see the module docstring).

    Attributes:
        lk: the LoadedKernel.
        grid, block, smem: launch dimensions and dynamic SMEM bytes.
        default_scale: 1 / sqrt(D), used when the call passes no scale.
        params: the ``void*[12]`` array (its address is passed to cuLaunchKernel).
    """

    __slots__ = ("lk", "device", "grid", "block", "smem", "default_scale", "buf", "params", "params_addr",
                 "out_ptr", "scale", "masks", "hang", "problem", "_cu", "_ok", "_ctx_errors", "_launch", "_memset")

    def __init__(self, lk, problem, grid: int, maps: list[bytes], out_strides: tuple[int, int, int]):
        info = lk.built.launch
        self.lk = lk
        self.device = lk.device
        self.problem = problem
        self.grid = grid
        self.block = lk.block
        self.smem = info.dynamic_smem_bytes
        self.default_scale = problem.head_dim ** -0.5
        # 3 x 128 B maps (64-byte aligned), then 8 B slots for the scalars
        buf = (ctypes.c_uint8 * (64 + 3 * 128 + 9 * 8))()
        base = (ctypes.addressof(buf) + 63) & ~63
        addrs = [base + 128 * i for i in range(3)] + [base + 384 + 8 * i for i in range(9)]
        for a, m in zip(addrs, maps):
            ctypes.memmove(a, m, 128)
        self.out_ptr = ctypes.c_uint64.from_address(addrs[3])
        for a, st in zip(addrs[4:7], out_strides):
            ctypes.c_int64.from_address(a).value = st
        for a, n in zip(addrs[7:11], (problem.batch, problem.heads, problem.seq_q, problem.seq_kv)):
            ctypes.c_int32.from_address(a).value = n
        self.scale = ctypes.c_float.from_address(addrs[11])
        self.buf = buf
        self.params = (ctypes.c_void_p * 12)(*addrs)
        self.params_addr = ctypes.addressof(self.params)
        self.masks = lk.emu_masks  # emulator: TMEM alloc masks zeroed before each launch
        self.hang = lk.hang_report
        cu = driver._cu()
        self._cu = cu
        self._ok = cu.CUresult.CUDA_SUCCESS
        self._ctx_errors = (cu.CUresult.CUDA_ERROR_INVALID_CONTEXT, cu.CUresult.CUDA_ERROR_INVALID_HANDLE)
        self._launch = cu.cuLaunchKernel
        self._memset = cu.cuMemsetD32Async

    def launch(self, out: torch.Tensor, scale: float | None) -> None:
        """Write ``out``'s pointer and the scale into the block and enqueue the kernel (asynchronous).

        Raises:
            BarrierTimeoutError: an earlier launch of this kernel timed out.
            LaunchError: cuLaunchKernel (or the emulator's memset) failed.
        """
        if self.hang is not None and self.hang.flag:
            driver.check_hang(self.lk)
        if _current_device() != self.device:
            with torch.cuda.device(self.device):
                self._enqueue(out, scale, True)
            _bound.ctx = None  # leaving the device context made another context current
        else:
            self._enqueue(out, scale, False)

    def _enqueue(self, out, scale, force_ctx: bool) -> None:
        ctx = self.lk.context
        if force_ctx or getattr(_bound, "ctx", None) is not ctx:
            driver._check(self._cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
            _bound.ctx = ctx
        stream = _get_raw_stream(self.device)
        with _launch_lock:
            self.out_ptr.value = out.data_ptr()
            self.scale.value = self.default_scale if scale is None else scale
            for retry in (False, True):
                what, err = "cuLaunchKernel", self._ok
                if self.masks is not None:
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
        if err != self._ok:
            from ..errors import LaunchError

            driver.check_hang(self.lk)
            info = self.lk.built.launch
            raise LaunchError(
                f"{what} of {info.name!r} (grid {self.grid}, block {self.block}, {self.smem} B SMEM) "
                f"failed: {driver._err_name(err)}"
            )


def run(token, target: str, layout: str, q, k, v, scale: float | None, kernel_for_device) -> torch.Tensor:
    """Attention on CUDA tensors through the entry cache; returns the output (allocated here).

    Args:
        token: identifies the kernel source (the schedule's JSON, or a GeneratedKernel).
        target: the target as given (part of the key; resolved by ``kernel_for_device``).
        layout: ``"bhsd"`` or ``"bshd"``: q, k, v and the result are (B, H, S, D)
            or (B, S, H, D); no copies either way.
        q, k, v: bfloat16 tensors (validated in full on a miss).
        scale: softmax scale in natural-log units, None for 1 / sqrt(D).
        kernel_for_device: ``f(token, target, device_ordinal) -> LoadedKernel``,
            called on a miss (e.g. :func:`b200c.runtime.op.loaded_kernel`).

    Raises:
        LaunchError, UnsupportedDeviceError, BuildError, ScheduleError,
        BarrierTimeoutError: as :func:`b200c.attention`.
    """
    key = (token, target, layout, q.data_ptr(), k.data_ptr(), v.data_ptr(), q.shape, k.shape, v.shape,
           q.stride(), k.stride(), v.stride(), q.dtype, k.dtype, v.dtype, q.get_device())
    e = _entries.get(key)
    if e is None:
        e = _new_entry(key, layout, q, k, v, kernel_for_device)
        if not isinstance(e, Entry):
            return e  # an empty problem's result (no launch)
    out = torch.empty_like(q)
    e.launch(out, scale)
    return out


def _new_entry(key, layout: str, q, k, v, kernel_for_device):
    views = (q, k, v) if layout == "bhsd" else tuple(t.transpose(1, 2) for t in (q, k, v))
    problem = validate_inputs(*views)
    if not problem.needs_launch:
        r = empty_result(views[0], problem)
        return r if layout == "bhsd" else r.transpose(1, 2)
    device = q.get_device()
    lk = kernel_for_device(key[0], key[1], device)
    info = lk.built.launch
    grid = info.grid(problem.batch, problem.heads, problem.seq_q, lk.num_sms)
    check_grid(grid)
    maps = [tensor_map(n, t, info, device) for n, t in zip("qkv", views)]
    sample = torch.empty_like(q)  # empty_like's strides depend only on q's shape and strides
    out_view = sample if layout == "bhsd" else sample.transpose(1, 2)
    e = Entry(lk, problem, grid, maps, tuple(out_view.stride()[:3]))
    if len(_entries) >= MAX_ENTRIES:
        for old in list(_entries)[: MAX_ENTRIES // 2]:
            _entries.pop(old, None)
    _entries[key] = e
    return e


def tensor_map(name: str, t, info, device: int) -> bytes:
    """The (cached) 128-byte tensor map of logical (B, H, S, D) tensor ``t`` for a kernel's launch info."""
    key = (t.data_ptr(), tuple(t.shape), t.stride(), info.tma_box_inner, info.tma_box_rows, info.tma_swizzle,
           info.tma_l2_promotion, device)
    m = _maps.get(key)
    if m is None:
        m = driver.encode_tensor_map(name, t, info)
        if len(_maps) >= MAX_MAPS:
            _maps.clear()
        _maps[key] = m
    return m
