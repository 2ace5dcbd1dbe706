"""Problem shapes of the benchmark and their FLOP counts."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ScheduleError


@dataclass(frozen=True)
class Shape:
    """One attention problem: q, k, v of logical shape (batch, heads, seq, head_dim), BF16, non-causal."""

    batch: int
    heads: int
    seq: int
    head_dim: int = 128

    @property
    def flops(self) -> int:
        """4 * B * H * S^2 * D: two GEMMs (QK^T, PV) of 2 * S * S * D each per (batch, head)."""
        return 4 * self.batch * self.heads * self.seq * self.seq * self.head_dim

    def tflops(self, ms: float) -> float:
        """TFLOPS of one run taking ``ms`` milliseconds."""
        return self.flops / (ms * 1e-3) / 1e12

    @property
    def label(self) -> str:
        """E.g. ``8x16x4096`` (B x H x S)."""
        return f"{self.batch}x{self.heads}x{self.seq}"


# the blog's shapes: B * S = 32K tokens, H = 16, D = 128, BF16, S = 4K / 8K / 16K
BLOG_SHAPES = (Shape(8, 16, 4096), Shape(4, 16, 8192), Shape(2, 16, 16384))


def parse_shape(text: str) -> Shape:
    """``"BxHxS"`` (e.g. ``8x16x4096``; head dim 128), ``"BxHxSxD"``, or ``"blog"``-free single
    shapes; raises ScheduleError naming the accepted form."""
    m = re.fullmatch(r"\s*(\d+)x(\d+)x(\d+)(?:x(\d+))?\s*", text)
    if not m:
        raise ScheduleError(f"shape {text!r}: write BxHxS (e.g. 8x16x4096) or BxHxSxD")
    b, h, s = (int(m.group(i)) for i in (1, 2, 3))
    d = int(m.group(4)) if m.group(4) else 128
    if min(b, h, s, d) <= 0:
        raise ScheduleError(f"shape {text!r}: every size must be positive")
    return Shape(b, h, s, d)


def parse_shapes(text: str) -> tuple:
    """Comma-separated shapes; ``blog`` stands for the blog's three shapes."""
    out = []
    for part in (p for p in text.split(",") if p.strip()):
        out.extend(BLOG_SHAPES if part.strip() == "blog" else (parse_shape(part),))
    if not out:
        raise ScheduleError("no shapes given: use --shapes blog or e.g. --shapes 8x16x4096,2x16x16384")
    return tuple(out)
