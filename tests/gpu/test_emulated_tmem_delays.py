"""The emulation target delays TMEM effects the way a B200 may (issue 33, item 4, dynamic half), so a
kernel that misses a tcgen05 wait or commit computes a wrong result on the H200 instead of passing:

* an MMA's accumulator reaches TMEM only when its tcgen05.commit reaches the emulator (b200c_emulate.cuh,
  emu_mma_engine_body): a reader released by a plain mbarrier arrive instead of the commit reads stale TMEM;
* a tcgen05.ld stays in flight until the warp's tcgen05.wait::ld: an MMA that overwrites its columns
  meanwhile writes NaN (emu_tmem_hazard).

Each broken variant is the stage-18 kernel's generated text with one edit (the protocol verifier would
reject it as IR, so the edit is made to the .cu), run next to the unedited kernel on the same inputs
against FP32 attention. Runs in a child process: a trap would end the CUDA context.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCHEDULE = ROOT / "examples/18_tma_l2_promotion.py"
pytestmark = pytest.mark.gpu

_WAIT_LD = re.compile(r"^(?P<indent>[ \t]*)tmem_wait_ld\(\);[^\n]*$", re.M)


def without_wait_ld(source: str) -> str:
    """``source`` with every ``tmem_wait_ld();`` statement of the role code removed (the helper's own
    definition stays). Raises ValueError when there is none."""
    out, n = _WAIT_LD.subn(lambda m: m.group("indent") + "// tcgen05.wait::ld removed by the test", source)
    if n == 0:
        raise ValueError("no tmem_wait_ld(); statement in the source")
    return out


def commit_as_plain_arrive(source: str, barrier: str = "BAR_S_FULL + 0") -> str:
    """``source`` with the MMA role's ``tcgen05_commit_elect(c.bar(<barrier>))`` replaced by an ordinary
    mbarrier arrive of one elected lane: the same arrival count, but no wait for the MMAs before it.
    Raises ValueError when there is none."""
    old = f"tcgen05_commit_elect(c.bar({barrier}));"
    if old not in source:
        raise ValueError(f"no {old} in the source")
    return source.replace(old, f"{{ if (elect_one()) mbar_arrive(c.bar({barrier})); __syncwarp(); }}  // not a commit (test)")


CHILD = r"""
import json, sys, torch
sys.path.insert(0, %(root)r)
import b200c
from b200c.codegen import GeneratedKernel
from b200c.runtime import attention_generated, synchronize
from tests.gpu.test_emulated_tmem_delays import without_wait_ld, commit_as_plain_arrive

torch.set_float32_matmul_precision("highest")
gen = b200c.generate(b200c.load_schedule_file(%(schedule)r))
g = torch.Generator(device="cuda").manual_seed(0)
B, H, S_Q, S_KV, D = 2, 2, 256, 640, gen.launch.head_dim
q, k, v = [torch.randn(B, H, n, D, device="cuda", generator=g).bfloat16() for n in (S_Q, S_KV, S_KV)]
scale = D ** -0.5
p = torch.softmax((q.float() @ k.float().transpose(-1, -2)) * scale, dim=-1)
ref = p @ v.float()
tol = 2 * float((p.bfloat16().float() @ v.float() - ref).abs().max()) + 1e-3
res = {"tol": tol}
for name, edit in (("unedited", None), ("no_wait_ld", without_wait_ld), ("commit_as_arrive", commit_as_plain_arrive)):
    kern = gen if edit is None else GeneratedKernel(source=edit(gen.source), launch=gen.launch, target=gen.target)
    print("VARIANT " + name, flush=True)  # the emulator's printf lines of this variant follow (flushed at the sync)
    try:
        out = attention_generated(q, k, v, kern, target="emulate")
        synchronize()
        o = out.float()
        res[name] = {"nan": bool(torch.isnan(o).any()), "err": float((o - ref).abs().nan_to_num(float("inf")).max())}
    except Exception as e:
        res[name] = {"error": type(e).__name__ + ": " + str(e)[:400]}
        break  # the context may be gone
print("RESULT " + json.dumps(res))
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the emulation target needs a compute capability 9.0 GPU")
    code = CHILD % {"root": str(ROOT), "schedule": str(SCHEDULE)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "B200C_CACHE_DIR": str(tmp_path_factory.mktemp("cache"))})
    line = next((l for l in r.stdout.splitlines() if l.startswith("RESULT ")), None)
    assert line is not None, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(line[len("RESULT "):]), variant_output(r.stdout)


def variant_output(stdout: str) -> dict:
    """{variant: the child's stdout lines printed while it ran} (between its ``VARIANT`` marker and the next)."""
    out: dict = {}
    name = None
    for line in stdout.splitlines():
        if line.startswith("VARIANT "):
            name = line[len("VARIANT "):]
            out[name] = ""
        elif name is not None and not line.startswith("RESULT "):
            out[name] += line + "\n"
    return out


def test_unedited_kernel_is_right(results):
    res, out = results
    u = res["unedited"]
    assert "error" not in u, u
    assert not u["nan"] and u["err"] <= res["tol"], (u, res["tol"])
    assert "TMEM hazard" not in out["unedited"], out["unedited"][-2000:]


def test_missing_wait_ld_gives_a_wrong_result(results):
    res, out = results
    r = res["no_wait_ld"]
    assert "error" not in r, r
    assert r["nan"] or r["err"] > 10 * res["tol"], (r, res["tol"])
    text = out["no_wait_ld"]
    assert "TMEM hazard" in text and "tcgen05.wait::ld" in text and "last passed wait site" in text, text[-2000:]


def test_arrive_instead_of_commit_gives_a_wrong_result(results):
    res, _ = results
    r = res["commit_as_arrive"]
    assert "error" not in r, r
    assert r["nan"] or r["err"] > 10 * res["tol"], (r, res["tol"])
