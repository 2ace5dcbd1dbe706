"""The decode table of ``b200c bench --decode``: one attention step of S_q query rows (1, or a few with
speculative decoding) against a KV cache, timed side by side with cuDNN and FlashAttention-2, as
bandwidth: the bytes the call must read (K and V once, plus Q and O) per second, next to the measured
copy bandwidth of the same bytes (``torch`` copying the K/V cache, read + write counted) on this GPU.

Cases are written ``BxH/Hkv:S_kv[xD][qN][pP]``: e.g. ``1x32/8:32768`` (batch 1, 32 query heads on 8
K/V heads, a 32K cache, D = 128, one query row), ``8x64/8:16384q4`` (4 query rows), ``32x32/8:4096p16``
(a paged cache of 16-token pages). Baselines: cuDNN through torch SDPA with K/V repeated to H heads
(the repeat is done once, outside the timing: a plan per shape, as a serving stack caches it),
FlashAttention-2 through ``aten::_flash_attention_forward`` (GQA native, its own split-KV); neither
takes a paged cache, so paged rows compare against their contiguous runs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ScheduleError

DEFAULT_CASES = ("1x32/8:32768", "8x64/8:16384", "8x32/8:8192", "32x32/8:4096", "128x32/8:1024",
                 "1x32/8:131072", "1x32/8:32768q4", "4x32/32:8192", "16x32/8:4096x64", "16x32/8:4096x256",
                 "32x32/8:4096p16", "32x32/8:4096p256", "1x32/8:32768p16")


@dataclass(frozen=True)
class Case:
    """One decoding step: q (B, S_q, H, D), a KV cache of S_kv keys per sequence (H_kv heads)."""

    batch: int
    heads: int
    heads_kv: int
    seq_kv: int
    head_dim: int = 128
    seq_q: int = 1
    page: int = 0

    @property
    def label(self) -> str:
        extra = (f"x{self.head_dim}" if self.head_dim != 128 else "") + (f"q{self.seq_q}" if self.seq_q != 1 else "")
        return f"{self.batch}x{self.heads}/{self.heads_kv}:{self.seq_kv}{extra}" + (f"p{self.page}" if self.page else "")

    @property
    def bytes(self) -> int:
        """Bytes the call must move: K and V once (BF16), Q read and O written."""
        kv = 2 * self.batch * self.heads_kv * self.seq_kv * self.head_dim * 2
        return kv + 2 * self.batch * self.heads * self.seq_q * self.head_dim * 2


_CASE = re.compile(r"^(\d+)x(\d+)/(\d+):(\d+)(?:x(\d+))?(?:q(\d+))?(?:p(\d+))?$")


def parse_cases(text: str) -> tuple:
    """``"default"`` or a comma list of cases (module docstring).

    Raises:
        ScheduleError: a case that does not parse, with the syntax.
    """
    if text in ("default", "decode"):
        text = ",".join(DEFAULT_CASES)
    out = []
    for part in text.split(","):
        m = _CASE.match(part.strip())
        if not m:
            raise ScheduleError(f"decode case {part!r}: write BxH/Hkv:S_kv[xD][qN][pP], e.g. 1x32/8:32768 or "
                                "32x32/8:4096p16")
        b, h, hk, s, d, q, p = m.groups()
        out.append(Case(int(b), int(h), int(hk), int(s), int(d or 128), int(q or 1), int(p or 0)))
    return tuple(out)


def _inputs(c: Case, device):
    import torch

    g = torch.Generator(device="cpu").manual_seed(0)
    q = torch.randn(c.batch, c.seq_q, c.heads, c.head_dim, generator=g).to(device, torch.bfloat16)
    k = torch.randn(c.batch, c.seq_kv, c.heads_kv, c.head_dim, generator=g).to(device, torch.bfloat16)
    v = torch.randn(c.batch, c.seq_kv, c.heads_kv, c.head_dim, generator=g).to(device, torch.bfloat16)
    return q, k, v


def measure(cases, *, device="cuda", iters: int = 30, warmup: int = 5, target: str = "auto") -> list:
    """One row per case: microseconds and GB/s of b200c, cuDNN, FlashAttention-2 and the copy, timed
    interleaved (:func:`b200c.bench.timing.time_interleaved`, L2 flushed before each run), plus the
    largest error of b200c's output against cuDNN's."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from ..runtime.kvcache import attention_with_kvcache

    from .timing import time_interleaved

    rows = []
    for c in cases:
        q, k, v = _inputs(c, device)
        lens = torch.full((c.batch,), c.seq_kv, dtype=torch.int32, device=device)
        causal = c.seq_q > 1
        if c.page:
            pages = -(-c.seq_kv // c.page)
            kc = k.reshape(c.batch * pages, c.page, c.heads_kv, c.head_dim) if c.seq_kv % c.page == 0 else None
            if kc is None:
                raise ScheduleError(f"{c.label}: S_kv must be a multiple of the page size")
            vc = v.reshape(c.batch * pages, c.page, c.heads_kv, c.head_dim)
            table = torch.arange(c.batch * pages, dtype=torch.int32, device=device).reshape(c.batch, pages)

            def ours():
                return attention_with_kvcache(q, kc, vc, cache_seqlens=lens, block_table=table, causal=causal,
                                                    target=target)
        else:
            def ours():
                return attention_with_kvcache(q, k, v, cache_seqlens=lens, causal=causal, target=target)

        group = c.heads // c.heads_kv
        qt = q.transpose(1, 2)
        kr = k.transpose(1, 2).repeat_interleave(group, dim=1)
        vr = v.transpose(1, 2).repeat_interleave(group, dim=1)
        fa2_op = torch.ops.aten._flash_attention_forward

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(qt, kr, vr, is_causal=False)

        def fa2():
            return fa2_op(q, k, v, None, None, c.seq_q, c.seq_kv, 0.0, causal, False)[0]

        dst_k, dst_v = torch.empty_like(k), torch.empty_like(v)

        def copy():
            dst_k.copy_(k)
            dst_v.copy_(v)

        import warnings

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = ours()
        except Exception as e:  # noqa: BLE001 - report the row and go on
            rows.append(dict(case=c.label, bytes=c.bytes, error=f"{type(e).__name__}: {e}"[:300]))
            continue
        err = float("nan")
        if not causal:
            err = float((out.float() - fa2().float()).abs().max())
        fns = [ours, fa2, copy] + ([cudnn] if not causal else [])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = time_interleaved(fns, warmup=warmup, iters=iters, device=device)
        us = [x.median_ms * 1e3 for x in t]
        gbs = [c.bytes / (u * 1e-6) / 1e9 for u in us]
        kv_bytes = 2 * c.batch * c.heads_kv * c.seq_kv * c.head_dim * 2
        copy_gbs = 2 * kv_bytes / (us[2] * 1e-6) / 1e9  # read + write
        row = dict(case=c.label, bytes=c.bytes, b200c_us=us[0], b200c_gbs=gbs[0], fa2_us=us[1], fa2_gbs=gbs[1],
                   copy_gbs=copy_gbs, cudnn_us=us[3] if len(us) > 3 else None,
                   cudnn_gbs=gbs[3] if len(us) > 3 else None, max_err_vs_fa2=err)
        row["of_copy"] = row["b200c_gbs"] / copy_gbs
        best = max(x for x in (row["fa2_gbs"], row["cudnn_gbs"]) if x is not None)
        row["of_best"] = row["b200c_gbs"] / best
        rows.append(row)
    return rows


def markdown(rows: list) -> str:
    """The decode table (GB/s: bytes the call must move per second)."""
    out = ["| case | MB moved | b200c us | b200c GB/s | FlashAttention-2 GB/s | cuDNN GB/s | copy GB/s | "
           "b200c / copy | b200c / best | max err vs FA2 |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['case']} | {r['bytes'] / 1e6:.1f} | error: {r['error']} | | | | | | | |")
            continue
        cud = f"{r['cudnn_gbs']:.0f}" if r["cudnn_gbs"] is not None else "-"
        out.append(f"| {r['case']} | {r['bytes'] / 1e6:.1f} | {r['b200c_us']:.1f} | {r['b200c_gbs']:.0f} | "
                   f"{r['fa2_gbs']:.0f} | {cud} | {r['copy_gbs']:.0f} | {100 * r['of_copy']:.0f} % | "
                   f"{100 * r['of_best']:.0f} % | {r['max_err_vs_fa2']:.2e} |")
    return "\n".join(out)


__all__ = ["Case", "parse_cases", "measure", "markdown", "DEFAULT_CASES"]
