"""The capstone scripts' models build and run with every attention call going through b200c's SDPA
drop-in, which counts each call's outcome (here, on the CPU, every call falls back: device:cpu). Skipped
without the optional [capstone] extra (diffusers, transformers)."""
import functools
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples/capstone"))


@pytest.mark.parametrize("script", ["ltx2", "decoder"])
def test_model_attention_goes_through_the_drop_in(script):
    pytest.importorskip("diffusers" if script == "ltx2" else "transformers")
    import importlib
    import warnings

    import torch.nn.functional as F

    import b200c
    from b200c.runtime import sdpa

    mod = importlib.import_module(script)
    _, forward = mod.build(1, "cpu", tiny=True) if script == "ltx2" else mod.build(1, "cpu", 1, 64, tiny=True)
    original = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = functools.partial(b200c.scaled_dot_product_attention)
    sdpa.calls.clear()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", b200c.FallbackWarning)
            forward()
    finally:
        F.scaled_dot_product_attention = original
    assert sum(sdpa.calls.values()) >= (3 if script == "ltx2" else 1)  # self + cross attentions of a layer
    assert set(sdpa.calls) <= {"device:cpu", "attn_mask"}, dict(sdpa.calls)


@pytest.mark.parametrize("script, needs", [("decoder.py", "transformers"), ("ltx2.py", "diffusers"),
                                           ("generate.py", "transformers"), ("per_call.py", "diffusers")])
def test_scripts_say_what_they_need_in_one_line(script, needs):
    """Issue 34's trial: without the [capstone] extra (or a GPU) a capstone script printed a traceback."""
    import importlib.util
    import subprocess

    import torch

    if importlib.util.find_spec(needs) is not None and torch.cuda.is_available():
        pytest.skip("the script can run here")
    r = subprocess.run([sys.executable, str(ROOT / "examples/capstone" / script)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith(f"{script}: needs ") and "Traceback" not in r.stderr
