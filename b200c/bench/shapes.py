"""Problem shapes of the benchmark and their FLOP counts.

A shape is written ``BxH[/Hkv]xS[:Skv][xD][c][wN]`` (``c``: causal, bottom-right aligned; ``wN``: with
``c``, a sliding window: each query row sees its ``N`` preceding keys and its own, flash_attn's
``window_size=(N, 0)``) or, for a varlen batch, ``varlen:L1+L2+...xH[/Hkv][xD][c]`` (sequence lengths,
the same for queries and keys), e.g. ``4x16x8192``, ``2x32/8x8192c`` (GQA 32/8, causal),
``8x16x1024:8192`` (S_q = 1024 against S_kv = 8192), ``4x16x8192cw1023``, ``varlen:8192+4096+2048x16``.
Named sets: ``blog`` (the blog's three shapes), ``hopper`` (the Hopper table of
docs/hopper-progression.md), ``fa4`` (the rows where the forward is compared with FlashAttention-4's
Hopper kernel, docs/hopper-progression.md) and ``backward`` (the backward table, docs/backward.md).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ScheduleError


def visible_pairs(s_q: int, s_kv: int, causal: bool, window: int = 0) -> int:
    """(query, key) pairs that attend: S_q * S_kv, or with the bottom-right aligned causal mask
    (row r sees keys 0 .. r + S_kv - S_q) the sum over rows of min(S_kv, max(0, r + S_kv - S_q + 1));
    with a ``window`` (causal only) row r sees keys r + S_kv - S_q - window .. r + S_kv - S_q."""
    if not causal:
        return s_q * s_kv
    total = 0
    off = s_kv - s_q
    for r in range(s_q):
        hi = min(s_kv, max(0, r + off + 1))  # keys < hi
        lo = max(0, r + off - window) if window else 0
        total += max(0, hi - lo)
    return total


@dataclass(frozen=True)
class Shape:
    """One attention problem, BF16: q (B, H, S_q, D), k and v (B, H_kv, S_kv, D); or a varlen batch.

    Attributes:
        batch, heads, seq, head_dim: B, H, S_q, D.
        heads_kv: H_kv (0: H).
        seq_kv: S_kv (0: S_q).
        causal: the bottom-right aligned causal mask.
        lengths: varlen: each sequence's length (queries and keys alike); ``batch`` and ``seq``
            are then their count and maximum.
        window: with ``causal``: each query row sees its ``window`` preceding keys and its own
            (flash_attn's ``window_size=(window, 0)``); 0: no window.
    """

    batch: int
    heads: int
    seq: int
    head_dim: int = 128
    heads_kv: int = 0
    seq_kv: int = 0
    causal: bool = False
    lengths: tuple = ()
    window: int = 0

    @property
    def h_kv(self) -> int:
        return self.heads_kv or self.heads

    @property
    def s_kv(self) -> int:
        return self.seq_kv or self.seq

    @property
    def varlen(self) -> bool:
        return bool(self.lengths)

    @property
    def flops(self) -> int:
        """4 * H * D per attending (query, key) pair: two GEMMs (QK^T, PV) of 2 flops per multiply-add;
        dense non-causal: 4 * B * H * S_q * S_kv * D (masked pairs are not counted)."""
        if self.lengths:
            pairs = sum(visible_pairs(n, n, self.causal) for n in self.lengths)
        else:
            pairs = self.batch * visible_pairs(self.seq, self.s_kv, self.causal, self.window)
        return 4 * self.heads * self.head_dim * pairs

    def tflops(self, ms: float) -> float:
        """TFLOPS of one run taking ``ms`` milliseconds."""
        return self.flops / (ms * 1e-3) / 1e12

    @property
    def label(self) -> str:
        """E.g. ``8x16x4096``, ``2x32/8x8192 causal``, ``varlen(3)x16 D64``."""
        heads = f"{self.heads}/{self.heads_kv}" if self.heads_kv and self.heads_kv != self.heads else f"{self.heads}"
        if self.lengths:
            text = f"varlen{len(self.lengths)}({'+'.join(str(n) for n in self.lengths)})x{heads}"
        else:
            kv = f":{self.seq_kv}" if self.seq_kv and self.seq_kv != self.seq else ""
            text = f"{self.batch}x{heads}x{self.seq}{kv}"
        if self.head_dim != 128:
            text += f" D{self.head_dim}"
        return text + (" causal" if self.causal else "") + (f" window {self.window}" if self.window else "")


# the blog's shapes: B * S = 32K tokens, H = 16, D = 128, BF16, S = 4K / 8K / 16K
BLOG_SHAPES = (Shape(8, 16, 4096), Shape(4, 16, 8192), Shape(2, 16, 16384))

# the Hopper table (issue "Hopper for real models"): D 64/128/256 x dense/causal at the blog's shapes,
# GQA 32/8 causal at 8K, a varlen batch of mixed lengths (32K tokens), S_q = 1024 against S_kv = 8192,
# and two video models' self-attention (Wan-2.1 480p, an LTX-2-like shape)
HOPPER_SHAPES = (
    *(Shape(s.batch, s.heads, s.seq, d, causal=c) for d in (64, 128, 256) for c in (False, True) for s in BLOG_SHAPES),
    Shape(4, 32, 8192, heads_kv=8, causal=True),
    Shape(10, 16, 8192, lengths=(8192, 6144, 4096, 2048, 1024, 512, 256, 8192, 2048, 768)),
    Shape(8, 16, 1024, seq_kv=8192),
    Shape(1, 12, 32760),
    Shape(2, 32, 12288),
)

# the forward against FlashAttention-4's Hopper kernel (issue 50): its ten rows. The varlen batch is 24
# causal sequences of 256 to 8192 tokens (these lengths, 76,288 tokens)
FA4_VARLEN = (8192, 256, 4096, 512, 6144, 1024, 2048, 768, 8192, 3072, 384, 5120, 1536, 256, 7168, 640, 2560, 896,
              4608, 1280, 3584, 320, 8192, 1792)
FA4_SHAPES = (
    Shape(4, 16, 8192),
    Shape(4, 16, 8192, causal=True),
    Shape(2, 32, 8192, heads_kv=8, causal=True),
    Shape(8, 16, 4096, 64, causal=True),
    Shape(1, 40, 16384),
    Shape(len(FA4_VARLEN), 16, max(FA4_VARLEN), causal=True, lengths=FA4_VARLEN),
    Shape(4, 16, 4096, seq_kv=77),
    Shape(1, 40, 32760, seq_kv=512),
    Shape(16, 16, 1024, causal=True),
    Shape(4, 16, 8192, causal=True, window=1023),
)

# the backward table (b200c bench --backward): D 64/128/256 x dense/causal at 2K, 8K and 16K (32K tokens,
# 16 heads), GQA 32/8 causal at 8K, the FA4 varlen batch
BACKWARD_SHAPES = (
    *(Shape(32768 // s, 16, s, d, causal=c) for d in (64, 128, 256) for c in (False, True) for s in (2048, 8192, 16384)),
    Shape(2, 32, 8192, heads_kv=8, causal=True),
    Shape(len(FA4_VARLEN), 16, max(FA4_VARLEN), causal=True, lengths=FA4_VARLEN),
)

NAMED = {"blog": BLOG_SHAPES, "hopper": HOPPER_SHAPES, "fa4": FA4_SHAPES, "backward": BACKWARD_SHAPES}

_DENSE = re.compile(r"(\d+)x(\d+)(?:/(\d+))?x(\d+)(?::(\d+))?(?:x(\d+))?(c?)(?:w(\d+))?")
_VARLEN = re.compile(r"varlen:(\d+(?:\+\d+)*)x(\d+)(?:/(\d+))?(?:x(\d+))?(c?)")


def parse_shape(text: str) -> Shape:
    """One shape in the module docstring's form; raises ScheduleError naming the accepted forms."""
    t = text.strip()
    m = _DENSE.fullmatch(t)
    if m:
        b, h, hkv, s, skv, d, c, win = m.groups()
        if win is not None and not c:
            raise ScheduleError(f"shape {text!r}: a window (wN) goes with the causal mask: write ...cw{win}")
        shape = Shape(int(b), int(h), int(s), int(d) if d else 128, int(hkv) if hkv else 0, int(skv) if skv else 0,
                      bool(c), window=int(win) if win else 0)
        sizes = (shape.batch, shape.heads, shape.seq, shape.head_dim, shape.h_kv, shape.s_kv)
    else:
        m = _VARLEN.fullmatch(t)
        if not m:
            raise ScheduleError(f"shape {text!r}: write BxH[/Hkv]xS[:Skv][xD][c][wN] (e.g. 8x16x4096, 2x32/8x8192c, "
                                f"8x16x1024:8192, 4x16x8192cw1023) or varlen:L1+L2+...xH[/Hkv][xD][c]")
        lens, h, hkv, d, c = m.groups()
        lengths = tuple(int(x) for x in lens.split("+"))
        shape = Shape(len(lengths), int(h), max(lengths), int(d) if d else 128, int(hkv) if hkv else 0, 0, bool(c),
                      lengths)
        sizes = (shape.heads, shape.head_dim, shape.h_kv, *lengths)
    if min(sizes) <= 0:
        raise ScheduleError(f"shape {text!r}: every size must be positive")
    if shape.heads % shape.h_kv:
        raise ScheduleError(f"shape {text!r}: H = {shape.heads} must be a multiple of H_kv = {shape.h_kv}")
    return shape


def parse_shapes(text: str) -> tuple:
    """Comma-separated shapes; ``blog``, ``hopper``, ``fa4`` and ``backward`` stand for their sets."""
    out = []
    for part in (p for p in text.split(",") if p.strip()):
        out.extend(NAMED.get(part.strip(), None) or (parse_shape(part),))
    if not out:
        raise ScheduleError("no shapes given: use --shapes blog or e.g. --shapes 8x16x4096,2x16x16384")
    return tuple(out)
