"""scripts/host_overhead.py runs on a CPU-only machine: it says it skipped, and with
--stub-driver it times the Python-side path with the driver stubbed."""
import subprocess
import sys

import pytest

from conftest import ROOT


def _has_gpu():
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(_has_gpu(), reason="on a GPU the script measures for real (tests/gpu)")
def test_skips_without_gpu_and_stub_table():
    script = str(ROOT / "scripts" / "host_overhead.py")
    r = subprocess.run([sys.executable, script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "host_overhead: skipped: no CUDA GPU" in r.stdout
    r = subprocess.run([sys.executable, script, "--stub-driver", "--calls", "20", "--reps", "2"], capture_output=True,
                       text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = {line.split("  ")[0].strip(): line for line in r.stdout.splitlines() if "  " in line}
    for name in ("b200c.attention(schedule=Schedule)", "b200c.attention(schedule=path)", "torch.ops.b200c.attention",
                 "torch.compile(fullgraph=True)", "b200c.scaled_dot_product_attention decode step (bool mask)",
                 "b200c.attention_with_kvcache (256 cached keys)", "b200c.attention_with_kvcache(check_inputs=False)",
                 "b200c.scaled_dot_product_attention causal", "b200c.scaled_dot_product_attention GQA 2/1",
                 "b200c.scaled_dot_product_attention bool key-padding mask",
                 "b200c.scaled_dot_product_attention additive mask", "b200c.attention_varlen (2 sequences)"):
        assert name in rows, r.stdout
        assert float(rows[name][len(name):].split()[0]) > 0  # microseconds per call
