"""The records of traced attention mods (score_mod / mask_mod, FlexAttention's conventions): what the
tracer (:mod:`b200c.dsl.mods`) produces, the code generator (:mod:`b200c.codegen.mods`) lowers and
the runtime keys kernels by. Pure data (msgspec), no torch.

A :class:`ModSet` is part of a kernel's identity: two calls whose functions trace to the same
graph (same ops, same constants, same captured-tensor dtypes and ranks) share one kernel, whatever
the functions are called and wherever they are written; the captured tensors' values, shapes and
strides are kernel arguments, so new values (a new padding mask, a new bias) do not recompile.
"""
from __future__ import annotations

from typing import Any, Optional

import msgspec

# element types of values inside a mod: FP32 scores and floats, 32-bit signed indices, booleans
VALUE_TYPES = ("f32", "i32", "bool")
# element types a captured tensor may have, as they are read on the device
TENSOR_DTYPES = ("f32", "bf16", "f16", "i32", "i64", "bool")
# the parameters of the traced functions, in FlexAttention's order
SCORE_PARAMS = ("score", "b", "h", "q_idx", "kv_idx")
MASK_PARAMS = ("b", "h", "q_idx", "kv_idx")


class ModNode(msgspec.Struct, frozen=True):
    """One value of a traced mod, in SSA form.

    Attributes:
        name: the value's C name (``v0``, ``v1``, ...; parameters keep their names:
            ``score``, ``b``, ``h``, ``q_idx``, ``kv_idx``).
        op: the canonical operation (a key of :data:`b200c.dsl.mods.OPS`), ``"param"`` for a
            parameter, ``"const"`` for a literal, ``"load"`` for an element of a captured tensor.
        args: names of the input values, in order (``load``: the index values, one per dimension).
        type: the value's element type (:data:`VALUE_TYPES`).
        const: the literal of a ``const`` node (a float, int or bool), else None.
        tensor: the captured tensor index of a ``load`` node, else None.
    """

    name: str
    op: str
    args: tuple[str, ...] = ()
    type: str = "f32"
    const: Any = None
    tensor: Optional[int] = None


class ModGraph(msgspec.Struct, frozen=True):
    """One traced function: its values in evaluation order and the one it returns.

    Attributes:
        kind: ``"score_mod"`` (``(score, b, h, q_idx, kv_idx) -> score``, FP32) or ``"mask_mod"``
            (``(b, h, q_idx, kv_idx) -> bool``).
        nodes: the values (parameters first, in :data:`SCORE_PARAMS` / :data:`MASK_PARAMS` order).
        output: the name of the returned value.
        expression: the returned value as one readable expression (printed in the kernel's comment).
    """

    kind: str
    nodes: tuple[ModNode, ...]
    output: str
    expression: str = ""


class CapturedTensor(msgspec.Struct, frozen=True, omit_defaults=True):
    """A tensor the mods read (a closure variable of the user's function), as the kernel sees it:
    kernel parameters ``cap{index}`` (pointer) and ``cap{index}_stride{d}`` (element strides).

    Attributes:
        dtype: element type on the device (:data:`TENSOR_DTYPES`).
        ndim: number of dimensions (>= 1; one index per dimension).
        unit_dims: dimensions every call of this kernel passes with element stride 1, among those the
            score_mod indexes by ``kv_idx`` (:func:`b200c.codegen.mods.kv_indexed_dims`; the runtime sets
            it per call). The kernel then reads consecutive keys at constant offsets from one address per
            tile. Empty (the traced record, and left out of the JSON) reads every stride from its
            parameter.
    """

    dtype: str
    ndim: int
    unit_dims: tuple[int, ...] = ()


class ModSet(msgspec.Struct, frozen=True):
    """The mods of one kernel: an optional score_mod, an optional mask_mod, the tensors they capture
    (shared: one tensor used by both is one kernel input) and an attention sink flag.

    Attributes:
        score_mod: the traced score_mod, or None.
        mask_mod: the traced mask_mod, or None.
        captured: the captured tensors, indexed by ``ModNode.tensor``.
        sinks: the kernel takes a per-head sink logit (FP32, (H,)) in the softmax denominator.
        small_indices: every call of this kernel has B, H, S_q and S_kv below 2^21 (the runtime
            sets it), so sums and differences of two indices convert to float exactly with integer
            and FP32 adds instead of the quarter-rate I2F (:mod:`b200c.codegen.mods`).
    """

    score_mod: Optional[ModGraph] = None
    mask_mod: Optional[ModGraph] = None
    captured: tuple[CapturedTensor, ...] = ()
    sinks: bool = False
    small_indices: bool = False

    @property
    def empty(self) -> bool:
        """No mod at all (the plain kernel)."""
        return self.score_mod is None and self.mask_mod is None and not self.sinks

    def to_json(self) -> str:
        """Canonical JSON (the kernel cache key's part for the mods)."""
        return msgspec.json.encode(self).decode()

    @classmethod
    def from_json(cls, text: str) -> "ModSet":
        """The ModSet of :meth:`to_json`'s text."""
        return msgspec.json.decode(text, type=cls)


__all__ = ["ModNode", "ModGraph", "CapturedTensor", "ModSet", "VALUE_TYPES", "TENSOR_DTYPES", "SCORE_PARAMS",
           "MASK_PARAMS"]
