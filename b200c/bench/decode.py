"""The decode table of ``b200c bench --decode``: one attention step of S_q query rows (1, or a few with
speculative decoding) against a KV cache, timed side by side with the strongest baselines a torch user
has, as bandwidth: the bytes the call must read (K and V once, plus Q and O) per second, next to the
measured copy bandwidth of the same bytes (``torch`` copying the K/V cache, read + write counted) on
this GPU.

Cases are written ``BxH/Hkv:S_kv[xD][qN][pP]``: e.g. ``1x32/8:32768`` (batch 1, 32 query heads on 8
K/V heads, a 32K cache, D = 128, one query row), ``8x64/8:16384q4`` (4 query rows), ``32x32/8:4096p16``
(a paged cache of 16-token pages).

Baselines (:func:`baselines`), each timed in the same interleaved loop:

* ``cuDNN``: torch SDPA with the cuDNN backend forced and ``enable_gqa=True`` (K/V not copied: what
  ``scaled_dot_product_attention(q, k, v, enable_gqa=True)`` gives a user);
* ``cuDNN expanded``: the same on K/V repeated to H heads (the repeat done once, outside the timing),
  which is faster on some shapes;
* ``FlashAttention-2``: ``aten::_flash_attention_forward`` (GQA native, its own split-KV);
* ``FA4-sm90`` (compute capability 9.0) or ``FlashAttention-4`` (10.x) where ``flash_attn.cute``
  imports: ``flash_attn_func`` on the contiguous cache, ``flash_attn_varlen_func`` with ``page_table``
  and ``seqused_k`` on a paged one; "not installed" otherwise.

cuDNN and FlashAttention-2 take no paged cache: paged rows time them on the contiguous cache of the same
keys. The causal rows (S_q > 1) skip cuDNN (torch's causal mask is top-left aligned). ``of_best`` is
b200c's bandwidth over the best baseline's of the row.
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


def baselines(c: Case, q, k, v, causal: bool, capability: tuple, paged=None) -> list:
    """``(name, callable)`` of every baseline of case ``c`` on a device of ``capability`` (module
    docstring): q (B, S_q, H, D), k and v (B, S_kv, H_kv, D); ``paged``: ``(k_cache, v_cache, table,
    lengths)`` of a paged case (FA4 reads it), else None. A missing FA4 appears as ``(name, None)``."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from .baselines import fa4_available, fa4_name, first_output

    group = c.heads // c.heads_kv
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    fa2_op = torch.ops.aten._flash_attention_forward
    out = []

    def fa2():
        return fa2_op(q, k, v, None, None, c.seq_q, c.seq_kv, 0.0, causal, False)[0]

    if not causal:
        def cudnn_gqa():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=False, enable_gqa=group > 1)

        out.append(("cuDNN", cudnn_gqa))
        if group > 1:
            kr, vr = kt.repeat_interleave(group, dim=1), vt.repeat_interleave(group, dim=1)

            def cudnn_expanded():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(qt, kr, vr, is_causal=False)

            out.append(("cuDNN expanded", cudnn_expanded))
    out.append(("FlashAttention-2", fa2))
    name = fa4_name(capability)
    if name is not None:
        if not fa4_available(capability):
            out.append((name, None))
        elif paged is not None:
            from flash_attn.cute import flash_attn_varlen_func

            kc, vc, table, lens = paged

            def fa4_paged():
                return first_output(flash_attn_varlen_func(q, kc, vc, page_table=table, seqused_k=lens,
                                                           causal=causal))

            out.append((name, fa4_paged))
        else:
            from flash_attn.cute import flash_attn_func

            def fa4():
                return first_output(flash_attn_func(q, k, v, causal=causal))

            out.append((name, fa4))
    return out


def measure(cases, *, device="cuda", iters: int = 30, warmup: int = 5, target: str = "auto") -> list:
    """One row per case: microseconds and GB/s of b200c, every baseline (:func:`baselines`) and the copy,
    timed interleaved (:func:`b200c.bench.timing.time_interleaved`, L2 flushed before each run), plus
    the largest error of b200c's output against FlashAttention-2's (non-causal rows)."""
    import torch

    from ..runtime.kvcache import attention_with_kvcache

    from .timing import time_interleaved

    capability = tuple(torch.cuda.get_device_capability(device))
    rows = []
    for c in cases:
        q, k, v = _inputs(c, device)
        lens = torch.full((c.batch,), c.seq_kv, dtype=torch.int32, device=device)
        causal = c.seq_q > 1
        paged = None
        if c.page:
            pages = -(-c.seq_kv // c.page)
            kc = k.reshape(c.batch * pages, c.page, c.heads_kv, c.head_dim) if c.seq_kv % c.page == 0 else None
            if kc is None:
                raise ScheduleError(f"{c.label}: S_kv must be a multiple of the page size")
            vc = v.reshape(c.batch * pages, c.page, c.heads_kv, c.head_dim)
            table = torch.arange(c.batch * pages, dtype=torch.int32, device=device).reshape(c.batch, pages)
            paged = (kc, vc, table, lens)

            def ours():  # check_inputs=False: a serving loop's call (the default reads the lengths and the
                # table on the host, a synchronization per call that the baselines do not make)
                return attention_with_kvcache(q, kc, vc, cache_seqlens=lens, block_table=table, causal=causal,
                                              target=target, check_inputs=False)
        else:
            def ours():
                return attention_with_kvcache(q, k, v, cache_seqlens=lens, causal=causal, target=target,
                                              check_inputs=False)

        base = baselines(c, q, k, v, causal, capability, paged)
        missing = [n for n, fn in base if fn is None]
        base = [(n, fn) for n, fn in base if fn is not None]
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
        fa2 = dict(base)["FlashAttention-2"]
        if not causal:
            err = float((out.float() - fa2().float()).abs().max())
        usable = []
        for n, fn in base:  # a baseline that cannot run this case is a note, not a failed row
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    fn()
                usable.append((n, fn))
            except Exception as e:  # noqa: BLE001
                missing.append(f"{n} ({type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''})")
        fns = [ours, copy] + [fn for _, fn in usable]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = time_interleaved(fns, warmup=warmup, iters=iters, device=device)
        us = [x.median_ms * 1e3 for x in t]
        gbs = [c.bytes / (u * 1e-6) / 1e9 for u in us]
        kv_bytes = 2 * c.batch * c.heads_kv * c.seq_kv * c.head_dim * 2
        row = dict(case=c.label, bytes=c.bytes, b200c_us=us[0], b200c_gbs=gbs[0],
                   copy_gbs=2 * kv_bytes / (us[1] * 1e-6) / 1e9,  # read + write
                   baselines={n: dict(us=u, gbs=g) for (n, _), u, g in zip(usable, us[2:], gbs[2:])},
                   not_run=missing, max_err_vs_fa2=err)
        add_ratios(row)
        rows.append(row)
    return rows


def add_ratios(row: dict) -> None:
    """``of_copy`` (b200c over the copy bandwidth) and ``best`` / ``of_best`` (the fastest baseline's name,
    b200c over its bandwidth) of a measured row."""
    row["of_copy"] = row["b200c_gbs"] / row["copy_gbs"]
    if row["baselines"]:
        best = max(row["baselines"], key=lambda n: row["baselines"][n]["gbs"])
        row["best"] = best
        row["of_best"] = row["b200c_gbs"] / row["baselines"][best]["gbs"]
    else:
        row["best"], row["of_best"] = None, None


BASELINE_COLUMNS = ("cuDNN", "cuDNN expanded", "FlashAttention-2", "FA4-sm90", "FlashAttention-4")


def markdown(rows: list) -> str:
    """The decode table (GB/s: bytes the call must move per second); a baseline column appears when some
    row has it, "-" where it did not run, and the notes under the table say why."""
    cols = [n for n in BASELINE_COLUMNS if any(n in r.get("baselines", {}) or any(x.split(" (")[0] == n
                                                                                  for x in r.get("not_run", ()))
                                                for r in rows)]
    out = ["| case | MB moved | b200c us | b200c GB/s | " + "".join(f"{n} GB/s | " for n in cols)
           + "copy GB/s | b200c / copy | b200c / best | max err vs FA2 |",
           "|---|---|---|---|" + "---|" * len(cols) + "---|---|---|---|"]
    notes = []
    for r in rows:
        if "error" in r:
            out.append(f"| {r['case']} | {r['bytes'] / 1e6:.1f} | error: {r['error']} |" + " |" * (len(cols) + 5))
            continue
        cells = []
        for n in cols:
            b = r["baselines"].get(n)
            cells.append(f"{b['gbs']:.0f}" if b else ("not installed" if n in r["not_run"] else "-"))
        best = f"{100 * r['of_best']:.0f} % ({r['best']})" if r["of_best"] is not None else "-"
        out.append(f"| {r['case']} | {r['bytes'] / 1e6:.1f} | {r['b200c_us']:.1f} | {r['b200c_gbs']:.0f} | "
                   + "".join(f"{x} | " for x in cells)
                   + f"{r['copy_gbs']:.0f} | {100 * r['of_copy']:.0f} % | {best} | {r['max_err_vs_fa2']:.2e} |")
        notes += [f"- {r['case']}: {x} not run" for x in r["not_run"] if " (" in x]
    return "\n".join(out + (["", "Notes:"] + notes if notes else []))


__all__ = ["Case", "parse_cases", "baselines", "measure", "markdown", "add_ratios", "DEFAULT_CASES"]
