"""What both capstone scripts measure: a model's forward with torch's SDPA (its default backend choice:
cuDNN on Hopper), with FlashAttention-2 forced (the noise yardstick), and with every attention call through
``b200c.scaled_dot_product_attention`` (the one-line swap); the attention calls b200c served and those that
fell back (with each reason), the output's relative distance to the torch run, and the forward times
(CUDA events, median of a few rounds after a warm-up; each round runs the torch forward and the b200c
forward back to back, the first of the two alternating between rounds, so neither the GPU's clock drift
nor the order favours either). Not a schedule file (no ``schedule`` here)."""
from __future__ import annotations

import statistics


def missing(*modules: str):
    """Why a capstone script cannot run here (a module of the ``[capstone]`` extra not installed, or no CUDA
    GPU), as one line; None when it can."""
    import importlib.util

    absent = [m for m in modules if importlib.util.find_spec(m) is None]
    if absent:
        return f"needs {' and '.join(absent)}, not installed: pip install -e \".[capstone]\""
    import torch

    if not torch.cuda.is_available():
        return "needs a CUDA GPU (an H100/H200: the drop-in runs b200c's Hopper kernels there); none is visible"
    return None


def rel_dist(a, b) -> float:
    """||a - b|| / ||b|| in FP32."""
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def compare(name: str, forward, runs: int = 3) -> dict:
    """Run ``forward()`` (returns a tensor) three ways and print the capstone table; returns the numbers."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import b200c
    from b200c.bench.timing import time_interleaved
    from b200c.runtime import sdpa

    original = F.scaled_dot_product_attention

    def through_b200c():
        F.scaled_dot_product_attention = b200c.scaled_dot_product_attention
        try:
            return forward()
        finally:
            F.scaled_dot_product_attention = original

    with torch.no_grad():
        ref = forward()
        # FlashAttention-2 where it takes the call (the memory-efficient kernel for masked ones: FA2 has no masks)
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
            fa2 = forward()
        through_b200c()  # warm-up: builds and loads the kernels
        torch.cuda.synchronize()
        sdpa.calls.clear()
        out = through_b200c()  # one counted forward
        torch.cuda.synchronize()
        counted = dict(sdpa.calls)
        both = (forward, through_b200c)
        times = ([], [])
        for r in range(max(runs, 1) + 1):  # round 0: the warm-up
            order = (0, 1) if r % 2 else (1, 0)
            for i, t in zip(order, time_interleaved([both[i] for i in order], warmup=0, iters=1)):
                if r:
                    times[i].append(t.median_ms)
        t_torch, t_b200c = statistics.median(times[0]), statistics.median(times[1])
    served = counted.pop("b200c", 0)
    fallen = sum(counted.values())
    res = dict(model=name, calls=served + fallen, served=served, fallbacks=counted,
               rel_dist_b200c=rel_dist(out, ref), rel_dist_fa2=rel_dist(fa2, ref), ms_torch=t_torch, ms_b200c=t_b200c)
    print(f"{name}: {served} of {served + fallen} attention calls on b200c"
          + (f"; fallbacks: {', '.join(f'{k} x{v}' for k, v in counted.items())}" if counted else ""))
    print(f"  output vs torch SDPA: b200c {res['rel_dist_b200c']:.2e}, FlashAttention-2 {res['rel_dist_fa2']:.2e} "
          f"(relative L2; torch's memory-efficient kernel for masked calls: FlashAttention-2 has no masks)")
    print(f"  forward: torch SDPA {t_torch:.1f} ms, b200c {t_b200c:.1f} ms ({t_torch / t_b200c:.2f}x)")
    return res
