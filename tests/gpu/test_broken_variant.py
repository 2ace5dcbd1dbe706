"""A deliberately broken kernel (the softmax warps never arrive on p_ready),
built only here, fails within seconds with the stuck roles and barriers
named instead of hanging. Runs in a child process: a trap ends the CUDA
context."""
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.gpu

CHILD = r"""
import sys, torch
sys.path.insert(0, %r)
import b200c
from b200c.runtime import attention_generated, synchronize
from tests.gpu.broken import broken_kernel
gen = broken_kernel(%r, "softmax", "p_ready")
q = torch.randn(1, 1, 256, 128, device="cuda", dtype=torch.bfloat16)
try:
    attention_generated(q, q, q, gen, target="emulate")
    synchronize()
    print("NO ERROR")
except Exception as e:
    print(type(e).__name__ + ": " + str(e))
"""


def test_missing_arrive_is_named_not_hung(tmp_path):
    import torch

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the emulation target needs a compute capability 9.0 GPU")
    code = CHILD % (str(ROOT), str(ROOT / "examples/04_warp_specialization.py"))
    t0 = time.time()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180,
                       env={**__import__("os").environ, "B200C_CACHE_DIR": str(tmp_path)})
    out = r.stdout
    assert "BarrierTimeoutError" in out, r.stdout + r.stderr
    assert "role mma on p_ready" in out or "role mma, barrier p_ready" in out, out
    assert "phase parity" in out and "CTA" in out and "K/V iteration" in out
    assert time.time() - t0 < 120
