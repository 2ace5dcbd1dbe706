"""The host side of split-KV (flash-decoding; the decomposition is :mod:`b200c.codegen.work`).

Per launch entry: how many splits (:func:`splits_for`, from the call's shape and the device's SM
count through :func:`b200c.codegen.work.choose_splits`), which build runs them (a schedule with
``kv_splits=None`` runs its split-KV build, ``kv_splits=0``, only for calls that split:
:func:`split_token`), and per call the FP32 workspace of the splits' O and LSE and the second launch,
``b200c_attention_combine``, that merges them into ``out`` and ``lse`` (:class:`SplitLaunch`); a call of
one split on a split-KV build (a KV-cache call that does not split) stores ``out`` and ``lse`` from the
kernel itself, with neither.
Both launches go to the same stream, the combine with programmatic dependent launch (its CTAs start
while the splits run and wait in the kernel for their results); CUDA-graph capture records both (the
workspace comes from PyTorch's caching allocator, as ``out`` does).
"""
from __future__ import annotations

import functools

import torch

from ..codegen.work import COMBINE_ROWS_PER_CTA, choose_splits, combine_params

_F32 = torch.float32


def kv_tiles(info, seq_kv: int) -> int:
    """K/V tiles the longest work item visits (also causal: bottom-right aligned, its last query row
    sees the whole S_kv)."""
    return max(1, -(-seq_kv // info.block_n))


def splits_for(info, items: int, seq_q: int, seq_kv: int, causal: bool, num_sms: int) -> int:
    """Splits per work item for a call (1: none), for the kernel of launch info ``info``: the
    schedule's ``kv_splits`` where it fixes one (2..128), else :func:`choose_splits`'s; a schedule
    with ``kv_splits=1`` never splits."""
    if info.kv_splits == 1:
        return 1
    return choose_splits(items, kv_tiles(info, seq_kv), num_sms, info.persistent,
                         fixed=info.kv_splits)


def split_token(token):
    """The kernel token of a schedule's split-KV build (:func:`b200c.dsl.split_build.split_build`: ``kv_splits=0``,
    the count per call), or None where the token names no schedule (a GeneratedKernel: it runs as
    generated)."""
    if isinstance(token, str):
        return _split_json(token)
    if isinstance(token, tuple) and len(token) == 2 and isinstance(token[0], str):
        return (split_token(token[0]), token[1])
    return None


@functools.lru_cache(maxsize=256)
def _split_json(schedule_json: str) -> str:
    from ..dsl import Schedule
    from ..dsl.split_build import split_build

    return split_build(Schedule.from_json(schedule_json)).to_json()


class SplitLaunch:
    """What a split-KV entry adds per call: the workspace and the combine kernel's launch.

    Attributes:
        num_splits: splits per work item (written into the main kernel's parameters too).
        part_rows: rows per (sequence, head) in the workspace (S_q; varlen: total_q).
        rows: rows to merge (B * H * part_rows; varlen B = 1).
        o_shape, lse_shape: shapes of the FP32 workspace tensors allocated per call.
        merges: more than one split: the call allocates the workspace and launches the combine kernel. With
            one split the kernel stores ``out`` and ``lse`` itself (its epilogue's ``c.num_splits == 1``
            branch): one launch, no workspace.
    """

    __slots__ = ("num_splits", "part_rows", "rows", "o_shape", "lse_shape", "block", "grid", "slots", "function",
                 "head_dim", "config", "merges")

    def __init__(self, lk, num_splits: int, slots: int, part_rows: int, heads: int, out_strides, lse_strides):
        from .params import ParamBlock

        d = lk.built.launch.head_dim
        self.num_splits = num_splits
        self.merges = num_splits > 1
        self.part_rows = part_rows
        self.rows = slots * part_rows
        self.head_dim = d
        self.o_shape = (num_splits, self.rows, d)
        self.lse_shape = (num_splits, self.rows)
        self.grid = -(-self.rows // COMBINE_ROWS_PER_CTA)
        self.function = lk.combine
        values = {"o_part": 0, "lse_part": 0, "out": 0, "lse": 0, "sinks": 0,
                  "out_stride_b": out_strides[0], "out_stride_h": out_strides[1], "out_stride_s": out_strides[2],
                  "lse_stride_b": lse_strides[0], "lse_stride_h": lse_strides[1], "lse_stride_s": lse_strides[2],
                  "rows": self.rows, "heads": heads, "part_rows": part_rows, "num_splits": num_splits}
        self.block = ParamBlock(tuple((p.name, p.kind) for p in combine_params()), values)
        self.slots = {n: self.block.slot(n) for n in ("o_part", "lse_part", "out", "lse", "sinks")}
        self.config = None  # the combine's cuLaunchKernelEx configuration, made on its first launch (launch_config)

    def launch_config(self, cu, stream):
        """The combine kernel's ``cuLaunchKernelEx`` configuration on ``stream``: its grid, 128 threads, and
        programmatic dependent launch (``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION``), so its CTAs
        are scheduled while the split kernel runs (the split kernel's ``griddepcontrol.launch_dependents``)
        and wait at ``griddepcontrol.wait`` for its results instead of launching after it ends. Made once;
        the stream is set per call."""
        c = self.config
        if c is None:
            attr = cu.CUlaunchAttribute()
            attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attr.value.programmaticStreamSerializationAllowed = 1
            c = cu.CUlaunchConfig()
            c.gridDimX, c.gridDimY, c.gridDimZ = self.grid, 1, 1
            c.blockDimX, c.blockDimY, c.blockDimZ = COMBINE_ROWS_PER_CTA * 32, 1, 1
            c.sharedMemBytes = 0
            c.attrs = [attr]
            c.numAttrs = 1
            self.config = c
        c.hStream = stream
        return c

    def kernel_values(self, max_blocks: int = 0, page_size: int = 0, page_box: int = 0) -> dict:
        """The main kernel's split-KV parameter values (:func:`b200c.codegen.work.params`): the count and
        workspace rows; the pointers are written per call (0 here); a paged cache's table shape and boxes."""
        return dict(num_splits=self.num_splits, part_rows=self.part_rows, o_part=0, lse_part=0, seqused_k=0,
                    block_table=0, max_blocks=max_blocks, page_size=page_size, page_box=page_box)

    def workspace(self, empty):
        """The per-call FP32 workspace ``(o_part, lse_part)`` (``empty(size, stride, dtype)``)."""
        n, r, d = self.o_shape
        return empty(self.o_shape, (r * d, d, 1), _F32), empty(self.lse_shape, (r, 1), _F32)


def check_split(lk, token) -> None:
    """A split-KV build must hold its combine kernel (a cubin from before split-KV: rebuild).

    Raises:
        LaunchError: the loaded module has no combine kernel.
    """
    if lk.combine is None:
        from ..errors import LaunchError

        raise LaunchError(f"kernel {lk.built.launch.name!r} is a split-KV build without its combine kernel; "
                          "clear the kernel cache (b200c cache clear) and call again")


__all__ = ["splits_for", "split_token", "SplitLaunch", "kv_tiles", "check_split"]
