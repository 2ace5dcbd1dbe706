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
