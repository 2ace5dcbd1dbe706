#!/usr/bin/env python3
"""Real attention inputs on a GPU (issue 10), every case against FP32 attention: one table.

    python scripts/gpu_job.py --out $OUT --sweep real-inputs      # the lead's one command (H200: emulate)
    python scripts/real_inputs_sweep.py --out $OUT [--budget-s 330] [--target emulate] [--groups ...]

Cases (about 300; order: special, sdpa, varlen, head_dim, roles, lengths):

* lengths: examples/18 at D = 128, S_q and S_kv independently over
  1, 63, 64, 127, 129, 255, 257, 1000, 4095, causal on and off, (H, H_kv)
  cycling over (3, 3), (6, 3), (8, 1) (GQA ratios 1, 2, 8; the ratio-2 and -8
  cases pack heads), B = 3 up to length 257, else 1;
* head_dim: the presets for D = 64 and D = 256 (b200c/dsl/presets.py);
* roles: examples/04 (non-persistent, one Q stage) and examples/01 (the 4-warp
  kernel) at D = 64, 128, 256;
* varlen: batches with empty sequences (length 0 in q and/or k) for every
  schedule above;
* special: NaN in a query row / a key (the rows that see it must be NaN, as
  torch's FP32 attention), softmax_scale 0, 10 and 1e-30, (B, S, H, D)
  layout, S_kv = 0, a call without the LSE (same output);
* sdpa: b200c.scaled_dot_product_attention (presets, GQA, causal), which must
  not fall back.

Accept rule (FlashAttention's tests): max|out - ref| <= 2 * max|torch_bf16 - ref| + 1e-3
over rows that see at least one key, ref = FP32 attention from the same BF16
inputs (causal mask aligned to the bottom-right corner, GQA by repeating the
K/V heads), torch_bf16 = torch SDPA in BF16 with the same explicit mask; rows
that see no key must be exactly 0 with LSE -inf; the LSE within 1e-3 (absolute)
of torch.logsumexp of the FP32 scaled scores; NaN exactly where ref is NaN.
Writes ``real_inputs.json`` and ``real_inputs_table.txt`` under --out.
Wall times are emulated ones: correctness only.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

LENGTHS = (1, 63, 64, 127, 129, 255, 257, 1000, 4095)
HEADS = ((3, 3), (6, 3), (8, 1))  # (H, H_kv): GQA ratios 1, 2, 8
LSE_TOL = 1e-3
GROUPS = ("special", "sdpa", "varlen", "head_dim", "roles", "lengths")


def schedules(target: str = "emulate") -> dict:
    """name -> Schedule of the sweep: the B200 schedules for the sm100a kernels (``emulate``), their Hopper
    counterparts for ``sm90a`` (h11 = the D = 128 preset for ex18, the D = 64/256 presets, h02 (one consumer,
    not persistent) for ex04, h01 (one warpgroup, baseline) for ex01 and ex02)."""
    import b200c
    from b200c.codegen.targets import resolve
    from b200c.dsl import presets

    ex = ROOT / "examples"
    if resolve(target).presets == "hopper":
        hop = ex / "hopper"
        # the roles at every head dim: 80-row K/V tiles (what a consumer holds at D = 256)
        h01 = b200c.load_schedule_file(hop / "h01_baseline.py").replace(block_n=80)
        return {
            "ex18": presets.HOPPER_D128,
            "d64": presets.HOPPER_D64,
            "d256": presets.HOPPER_D256,
            "ex04": b200c.load_schedule_file(hop / "h02_warp_specialization.py").replace(block_n=80),
            "ex01": h01,
            "ex02": h01,
        }
    return {
        "ex18": b200c.load_schedule_file(ex / "18_tma_l2_promotion.py"),
        "d64": presets.D64,
        "d256": presets.D256,
        "ex04": b200c.load_schedule_file(ex / "04_warp_specialization.py"),
        "ex01": b200c.load_schedule_file(ex / "01_baseline.py"),
        # the cta role at head dim 64: stage 1 keeps P in the K tile's SMEM, too small below head_dim 128
        # (refused with a ScheduleError), so stage 2 (P in TMEM) stands in for it there
        "ex02": b200c.load_schedule_file(ex / "02_p_in_tmem.py"),
    }


@dataclass
class Case:
    """One sweep case. ``varlen``: ((len_q, len_k), ...) per sequence, else None."""

    group: str
    schedule: str
    d: int
    b: int
    h: int
    h_kv: int
    s_q: int
    s_kv: int
    causal: bool
    scale: float | None = None
    varlen: tuple | None = None
    special: str = ""
    seed: int = 0

    def label(self) -> str:
        if self.varlen is not None:
            shape = f"varlen {'/'.join(f'{a}:{b}' for a, b in self.varlen)} H={self.h}/{self.h_kv}"
        else:
            shape = f"B={self.b} H={self.h}/{self.h_kv} Sq={self.s_q} Skv={self.s_kv}"
        extra = ("causal " if self.causal else "") + self.special
        if self.scale is not None:
            extra += f" scale={self.scale:g}"
        return f"{self.schedule}@{self.d} {shape} {extra}".strip()


def make_cases(groups=GROUPS, lengths=LENGTHS) -> list[Case]:
    """Every case of the sweep, in run order (see the module docstring)."""
    cases: list[Case] = []
    n = itertools.count()

    def add(**kw):
        cases.append(Case(seed=next(n), **kw))

    long = max(lengths)
    mid = sorted(lengths)[len(lengths) // 2]
    if "special" in groups:
        for sched, d in (("ex18", 128), ("ex04", 128), ("ex01", 128)):
            for causal in (False, True):
                add(group="special", schedule=sched, d=d, b=1, h=3, h_kv=3, s_q=300, s_kv=300, causal=causal,
                    special="nan_q")
                add(group="special", schedule=sched, d=d, b=1, h=6, h_kv=3, s_q=300, s_kv=300, causal=causal,
                    special="nan_k")
        for causal in (False, True):  # the NaN key in a software-exp2 column (14 of every 16 at stage 18)
            add(group="special", schedule="ex18", d=128, b=1, h=6, h_kv=3, s_q=300, s_kv=300, causal=causal,
                special="nan_k_sw")
        for scale in (0.0, 10.0, 1e-30):
            for causal in (False, True):
                add(group="special", schedule="ex18", d=128, b=3, h=6, h_kv=3, s_q=300, s_kv=500, causal=causal,
                    scale=scale)
        add(group="special", schedule="ex18", d=128, b=3, h=6, h_kv=3, s_q=257, s_kv=1000, causal=True,
            special="bshd")
        add(group="special", schedule="ex18", d=128, b=3, h=6, h_kv=3, s_q=100, s_kv=0, causal=True)
        add(group="special", schedule="ex18", d=128, b=3, h=8, h_kv=1, s_q=129, s_kv=1000, causal=True,
            special="no_lse")
    if "sdpa" in groups:
        for sched, d in (("d64", 64), ("ex18", 128), ("d256", 256)):
            add(group="sdpa", schedule=sched, d=d, b=3, h=6, h_kv=3, s_q=1000, s_kv=1000, causal=True,
                special="sdpa")
        add(group="sdpa", schedule="ex18", d=128, b=1, h=3, h_kv=3, s_q=63, s_kv=long, causal=False, special="sdpa")
    if "varlen" in groups:
        batches = (((0, 5), (1, 0), (129, 129), (1000, 300), (63, long), (0, 0), (257, 257)),
                   ((300, 300), (1, 1), (0, 0), (64, 64), (2000, 2000)))
        i = 0
        for sched, d in (("ex18", 128), ("d64", 64), ("d256", 256), ("ex04", 128), ("ex01", 128)):
            for batch in batches:
                for causal in (False, True):
                    h, h_kv = HEADS[i % len(HEADS)]
                    i += 1
                    add(group="varlen", schedule=sched, d=d, b=len(batch), h=h, h_kv=h_kv,
                        s_q=max(a for a, _ in batch), s_kv=max(b for _, b in batch), causal=causal, varlen=batch)
    pairs_hd = [(1, 1), (63, 257), (129, 127), (257, 1000), (1000, 257), (64, long), (long, 64), (long, long)]
    if "head_dim" in groups:
        i = 0
        for sched, d in (("d64", 64), ("d256", 256)):
            for (sq, skv), causal in itertools.product(pairs_hd, (False, True)):
                h, h_kv = HEADS[i % len(HEADS)]
                i += 1
                add(group="head_dim", schedule=sched, d=d, b=3 if max(sq, skv) <= 257 else 1, h=h, h_kv=h_kv,
                    s_q=sq, s_kv=skv, causal=causal)
    pairs_roles = [(1, 1), (127, 129), (255, mid), (mid, 255), (long, long)]
    if "roles" in groups:
        i = 0
        for sched, d in itertools.product(("ex04", "ex01"), (64, 128, 256)):
            sched = "ex02" if (sched, d) == ("ex01", 64) else sched
            for (sq, skv), causal in itertools.product(pairs_roles, (False, True)):
                h, h_kv = HEADS[i % len(HEADS)]
                i += 1
                add(group="roles", schedule=sched, d=d, b=3 if max(sq, skv) <= 257 else 1, h=h, h_kv=h_kv,
                    s_q=sq, s_kv=skv, causal=causal)
    if "lengths" in groups:
        for i, (sq, skv, causal) in enumerate(itertools.product(lengths, lengths, (False, True))):
            h, h_kv = HEADS[i % len(HEADS)]
            add(group="lengths", schedule="ex18", d=128, b=3 if max(sq, skv) <= 257 else 1, h=h, h_kv=h_kv,
                s_q=sq, s_kv=skv, causal=causal)
    return cases


# ---- reference -------------------------------------------------------------------------------


def causal_mask(s_q: int, s_kv: int, causal: bool, device):
    """(S_q, S_kv) bool: True where query row r sees key c (bottom-right aligned when causal)."""
    import torch

    if not causal:
        return torch.ones(s_q, s_kv, dtype=torch.bool, device=device)
    rows = torch.arange(s_q, device=device)[:, None]
    cols = torch.arange(s_kv, device=device)[None, :]
    return cols <= rows + (s_kv - s_q)


def reference(q, k, v, scale: float, causal: bool, with_torch_bf16: bool = True):
    """FP32 attention of logical (B, H, S_q, D) q and (B, H_kv, S_kv, D) k, v.

    Returns (out fp32 (B, H, S_q, D), lse fp32 (B, H, S_q), torch_bf16 (or None), visible (S_q,) bool).
    Rows that see no key: out 0, lse -inf. torch_bf16: torch SDPA in BF16 with the same explicit
    mask and repeated K/V heads (None when S_kv = 0 or not asked for).
    """
    import torch
    import torch.nn.functional as F

    B, H, s_q, D = q.shape
    h_kv, s_kv = k.shape[1], k.shape[2]
    group = H // h_kv
    mask = causal_mask(s_q, s_kv, causal, q.device)
    visible = mask.any(-1) if s_kv > 0 else torch.zeros(s_q, dtype=torch.bool, device=q.device)
    out = torch.zeros(B, H, s_q, D, dtype=torch.float32, device=q.device)
    lse = torch.full((B, H, s_q), float("-inf"), dtype=torch.float32, device=q.device)
    chunk = max(1, min(H, (1 << 27) // max(1, s_q * s_kv)))
    for b in range(B):
        for h0 in range(0, H, chunk):
            heads = list(range(h0, min(H, h0 + chunk)))
            kv = [h // group for h in heads]
            qs = q[b, heads].float()
            ks, vs = k[b, kv].float(), v[b, kv].float()
            if s_kv == 0 or s_q == 0:
                continue
            s = (qs @ ks.transpose(-1, -2)) * scale
            s = s.masked_fill(~mask, float("-inf"))
            lse[b, heads] = torch.logsumexp(s, dim=-1)
            p = torch.softmax(s, dim=-1)
            p = torch.where(visible[:, None], p, torch.zeros((), device=q.device))
            out[b, heads] = p @ vs
    torch_bf16 = None
    if with_torch_bf16 and s_kv > 0 and s_q > 0:
        kr = k.repeat_interleave(group, dim=1)
        vr = v.repeat_interleave(group, dim=1)
        torch_bf16 = torch.cat([F.scaled_dot_product_attention(q[b:b + 1], kr[b:b + 1], vr[b:b + 1], attn_mask=mask,
                                                               scale=scale) for b in range(B)])
    return out, lse, torch_bf16, visible


@dataclass
class Check:
    """Accumulates the comparison of one case (several sequences for varlen)."""

    err: float = 0.0
    ref_err: float = 0.0
    lse_err: float = 0.0
    failures: list = field(default_factory=list)

    def add(self, out, lse, ref, ref_lse, torch_bf16, visible, what: str = "") -> None:
        """Compare ``out`` (B, H, S_q, D) and ``lse`` (B, H, S_q) (or None) with the reference."""
        import torch

        where = f" ({what})" if what else ""
        o = out.float()
        vis = visible[None, None, :].expand(o.shape[:3])
        ref_nan = torch.isnan(ref).any(-1)  # (B, H, S_q): rows NaN in the reference
        out_nan = torch.isnan(o).any(-1)
        if not torch.equal(ref_nan & vis, out_nan & vis):
            self.failures.append(f"NaN rows differ from the reference{where}: {int((ref_nan & vis).sum())} in ref, "
                                 f"{int((out_nan & vis).sum())} in out")
        if bool(ref_nan.any()):
            rows = ref_nan & vis
            if bool(rows.any()) and not bool(torch.isnan(o[rows]).all()):
                self.failures.append(f"a NaN row of the reference is not entirely NaN in out{where}")
        ok = vis & ~ref_nan
        if bool(ok.any()):
            d = (o - ref).abs()[ok]
            if not bool(torch.isfinite(d).all()):
                self.failures.append(f"non-finite values in rows that see keys{where}")
            self.err = max(self.err, float(d.nan_to_num(float("inf")).max()))
            if torch_bf16 is not None:  # rows where torch's BF16 SDPA itself is NaN say nothing
                e = (torch_bf16.float() - ref).abs()[ok]
                e = e[~torch.isnan(e)]
                if e.numel():
                    self.ref_err = max(self.ref_err, float(e.max()))
        hidden = ~vis
        if bool(hidden.any()) and not bool((o[hidden] == 0).all()):
            self.failures.append(f"rows that see no key are not 0{where}")
        if lse is not None:
            if bool(hidden.any()) and not bool((lse[hidden] == float("-inf")).all()):
                self.failures.append(f"LSE of rows that see no key is not -inf{where}")
            if not torch.equal(torch.isnan(lse) & vis, ref_nan & vis):
                self.failures.append(f"NaN LSE rows differ from the reference{where}")
            if bool(ok.any()):
                e = (lse - ref_lse).abs()[ok]
                self.lse_err = max(self.lse_err, float(e.nan_to_num(float("inf")).max()))

    def verdict(self) -> tuple[str, float, list]:
        tol = 2 * self.ref_err + 1e-3
        fails = list(self.failures)
        if self.err > tol:
            fails.append(f"max|out - ref| = {self.err:.3e} > tol {tol:.3e}")
        if self.lse_err > LSE_TOL:
            fails.append(f"max|lse - ref| = {self.lse_err:.3e} > {LSE_TOL}")
        return ("FAIL" if fails else "PASS"), tol, fails


# ---- running one case --------------------------------------------------------------------------


def make_dense(case: Case, device):
    import torch

    g = torch.Generator(device="cpu").manual_seed(1000 + case.seed)
    q = torch.randn(case.b, case.h, case.s_q, case.d, generator=g) * 3.0
    k = torch.randn(case.b, case.h_kv, case.s_kv, case.d, generator=g)
    v = torch.randn(case.b, case.h_kv, case.s_kv, case.d, generator=g)
    if case.special == "nan_q" and case.s_q > 0:
        q[case.b - 1, case.h - 1, case.s_q // 2, 3] = float("nan")
    if case.special == "nan_k" and case.s_kv > 0:
        k[0, 0, min(100, case.s_kv - 1), 5] = float("nan")
    if case.special == "nan_k_sw" and case.s_kv > 0:
        k[0, 0, min(142, case.s_kv - 1), 5] = float("nan")  # key 142: column 14 of its 16, the polynomial's
    return [x.to(device=device, dtype=torch.bfloat16) for x in (q, k, v)]


def b200c_calls(target: str):
    """The functions a case calls: b200c.attention, attention_varlen, scaled_dot_product_attention."""
    import b200c

    def dense(q, k, v, schedule, causal, scale, return_lse, layout="bhsd"):
        return b200c.attention(q, k, v, schedule=schedule, causal=causal, softmax_scale=scale, return_lse=return_lse,
                               layout=layout, target=target)

    def varlen(q, k, v, cq, ck, mq, mk, schedule, causal, scale):
        return b200c.attention_varlen(q, k, v, cq, ck, mq, mk, schedule=schedule, causal=causal, softmax_scale=scale,
                                      return_lse=True, target=target)

    def sdpa(q, k, v, schedule, causal):
        return b200c.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True, schedule=schedule,
                                                  target=target)

    return dense, varlen, sdpa


def run_case(case: Case, scheds: dict, calls, device, sync=lambda: None) -> dict:
    """Run one case; returns its result row (status PASS/FAIL, errors, tolerance, wall time)."""
    import torch

    dense, varlen_fn, sdpa_fn = calls
    sched = scheds[case.schedule]
    scale = case.scale if case.scale is not None else case.d ** -0.5
    row = dict(asdict(case), case=case.label())
    row["varlen"] = [list(x) for x in case.varlen] if case.varlen else None
    chk = Check()
    t0 = time.time()
    if case.varlen is not None:
        lq = [a for a, _ in case.varlen]
        lk = [b for _, b in case.varlen]
        sub = Case(**{**asdict(case), "varlen": None, "b": 1, "s_q": sum(lq), "s_kv": sum(lk)})
        qd, kd, vd = make_dense(sub, device)  # (1, H, total, D)
        q, k, v = (x[0].transpose(0, 1).contiguous() for x in (qd, kd, vd))  # packed (total, H, D)
        cq = torch.tensor([0] + list(itertools.accumulate(lq)), dtype=torch.int32, device=device)
        ck = torch.tensor([0] + list(itertools.accumulate(lk)), dtype=torch.int32, device=device)
        out, lse = varlen_fn(q, k, v, cq, ck, max(lq), max(lk), sched, case.causal, case.scale)
        sync()
        row["wall_s"] = round(time.time() - t0, 3)
        oq, ok_ = 0, 0
        for i, (a, b) in enumerate(case.varlen):
            if a > 0:
                qs = q[oq:oq + a].transpose(0, 1)[None]
                ks, vs = (x[ok_:ok_ + b].transpose(0, 1)[None] for x in (k, v))
                ref, ref_lse, tb, vis = reference(qs, ks, vs, scale, case.causal)
                chk.add(out[oq:oq + a].transpose(0, 1)[None], lse[:, oq:oq + a][None], ref, ref_lse, tb, vis,
                        f"sequence {i}")
            oq += a
            ok_ += b
    else:
        q, k, v = make_dense(case, device)
        if case.special == "sdpa":
            from b200c import FallbackWarning

            with warnings.catch_warnings():
                warnings.simplefilter("error", FallbackWarning)  # falling back to torch fails the case
                out = sdpa_fn(q, k, v, sched, case.causal)
            lse = None
        elif case.special == "bshd":
            qs, ks, vs = (x.transpose(1, 2).contiguous() for x in (q, k, v))  # (B, S, H, D) memory
            out, lse = dense(qs, ks, vs, sched, case.causal, case.scale, True, "bshd")
            out = out.transpose(1, 2)
        else:
            out, lse = dense(q, k, v, sched, case.causal, case.scale, True)
        sync()
        row["wall_s"] = round(time.time() - t0, 3)
        ref, ref_lse, tb, vis = reference(q, k, v, scale, case.causal)
        chk.add(out, lse, ref, ref_lse, tb, vis)
        if case.special == "no_lse":
            again = dense(q, k, v, sched, case.causal, case.scale, False)
            sync()
            chk.add(again, None, ref, ref_lse, tb, vis, "without the LSE")
            row["no_lse_bitwise_equal"] = bool(torch.equal(again, out))
    status, tol, fails = chk.verdict()
    row.update(status=status, max_err=chk.err, ref_bf16_err=chk.ref_err, tol=tol, lse_err=chk.lse_err,
               failures=fails)
    return row


def pack_mode(case: Case, scheds: dict) -> int | None:
    """Whether the runtime packs heads for this case (None for the SDPA drop-in's own choice)."""
    from b200c.runtime import launcher

    s = scheds[case.schedule]
    return int(launcher.pack_heads(s.q_stages, case.h, case.h_kv, case.s_q, case.causal, case.varlen is not None,
                                   s.block_m))


# ---- the whole sweep ---------------------------------------------------------------------------


def prebuild(cases, scheds, target: str) -> float:
    """Build every (schedule, head dim) kernel of the cases in parallel (the runtime's own specialization)."""
    from b200c.runtime import api, op
    from b200c.runtime.build import build_many

    t0 = time.time()
    pairs = sorted({(c.schedule, c.d) for c in cases})
    items = [(f"{s}@{d}", op.generated_kernel(op.specialized_json(api._schedule_json(scheds[s]), d))) for s, d in pairs]
    build_many(items, target, progress=False)
    return time.time() - t0


def table(rows) -> str:
    lines = [f"{'case':78s} {'pack':>4s} {'max err':>10s} {'tol':>10s} {'lse err':>10s} {'result':>7s} {'wall':>8s}"]
    for r in rows:
        lines.append(f"{r['case'][:78]:78s} {str(r.get('pack', '-')):>4s} {r.get('max_err', float('nan')):10.3e} "
                     f"{r.get('tol', float('nan')):10.3e} {r.get('lse_err', float('nan')):10.3e} "
                     f"{r['status']:>7s} {str(r.get('wall_s', '-')) + ' s':>8s}")
        for f in r.get("failures", [])[:3]:
            lines.append(f"    {f}")
        if "error" in r:
            lines.append(f"    {r['error'][:300]}")
    return "\n".join(lines)


def run_sweep(out_dir, target: str = "emulate", budget_s: float = 330.0, groups=GROUPS, build: bool = True,
              calls=None, device: str = "cuda", lengths=LENGTHS) -> dict:
    """Build, run every case, print one table, write real_inputs.json / real_inputs_table.txt; return the report.

    ``calls`` (default: b200c with ``target``) and ``device`` let the harness itself be tested on a CPU.
    """
    import torch

    from b200c.runtime import synchronize

    torch.set_float32_matmul_precision("highest")  # the FP32 reference without TF32
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    scheds = schedules(target)
    cases = make_cases(groups, lengths)
    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        dev = f"{p.name} cc {p.major}.{p.minor} SMs {p.multi_processor_count}"
    else:
        dev = device
    from b200c.codegen.targets import resolve

    report = {"device": dev, "target": target, "torch": torch.__version__, "emulated": not resolve(target).native,
              "cases": len(cases)}
    print(report["device"], "torch", torch.__version__, f"target {target}, {len(cases)} cases", flush=True)
    if build:
        report["build_s"] = round(prebuild(cases, scheds, target), 1)
        print(f"built {len({(c.schedule, c.d) for c in cases})} kernels in {report['build_s']} s", flush=True)
    sync = synchronize if device == "cuda" else (lambda: None)
    calls = calls or b200c_calls(target)
    rows = []
    t_start = time.time()
    dead = None
    for case in cases:
        if dead or time.time() - t_start > budget_s:
            rows.append(dict(case=case.label(), group=case.group, status="NOT RUN",
                             reason=dead or f"time budget {budget_s} s"))
            continue
        try:
            row = run_case(case, scheds, calls, device, sync)
        except Exception as e:  # report and go on; a hang or a dead context stops the sweep
            row = dict(case=case.label(), group=case.group, status="ERROR", error=f"{type(e).__name__}: {e}"[:600])
            text = row["error"]
            if "restart the process" in text or "illegal" in text.lower() or "CUDA error" in text:
                dead = f"stopped after an unrecoverable error in {case.label()}"
        if case.special != "sdpa":
            row["pack"] = pack_mode(case, scheds)
        rows.append(row)
        print(f"{row['status']:7s} {row['case']}"
              + (f"  err={row['max_err']:.2e} tol={row['tol']:.2e} lse={row['lse_err']:.1e}" if "max_err" in row else "")
              + (f"  {row.get('error', '')[:200]}" if row["status"] == "ERROR" else "")
              + ("  " + "; ".join(row.get("failures", [])) if row.get("failures") else ""), flush=True)
    report["sweep_s"] = round(time.time() - t_start, 1)
    report["results"] = rows
    counts = {s: sum(r["status"] == s for r in rows) for s in ("PASS", "FAIL", "ERROR", "NOT RUN")}
    report["counts"] = counts
    (out_dir / "real_inputs.json").write_text(json.dumps(report, indent=1))
    text = table(rows)
    summary = (f"real inputs ({target}{', emulated: correctness only' if report['emulated'] else ''}): "
               f"{counts['PASS']} passed, {counts['FAIL']} failed, {counts['ERROR']} errors, "
               f"{counts['NOT RUN']} not run, of {len(rows)} cases in {report['sweep_s']} s")
    (out_dir / "real_inputs_table.txt").write_text(text + "\n" + summary + "\n")
    print(text)
    print(summary, flush=True)
    return report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/b200c_out"))
    ap.add_argument("--target", default="emulate")
    ap.add_argument("--budget-s", type=float, default=330.0, help="stop starting cases after this many seconds")
    ap.add_argument("--groups", default=",".join(GROUPS), help=f"comma list of {', '.join(GROUPS)}")
    ap.add_argument("--no-build", action="store_true", help="skip the parallel prebuild")
    args = ap.parse_args()
    groups = tuple(g for g in args.groups.split(",") if g)
    unknown = set(groups) - set(GROUPS)
    if unknown:
        ap.error(f"unknown group(s) {sorted(unknown)}; known: {', '.join(GROUPS)}")
    report = run_sweep(args.out, args.target, args.budget_s, groups, not args.no_build)
    return 0 if report["counts"]["FAIL"] == report["counts"]["ERROR"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
