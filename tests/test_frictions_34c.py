"""Issue 34 item 5: frictions of the new-user trial at 1ccf9cc, each with its test.

* ``b200c bench --decode default default`` printed a traceback on a machine without a GPU (the decode branch
  skipped the device check); the second ``default`` was required and ignored.
* The plan's split-KV line pointed to ``--shape B,H,H_kv,S_q,S_kv``, which no command had.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "b200c", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: the decode table would be measured")
@pytest.mark.parametrize("files", [("default",), ()])
def test_bench_decode_without_a_gpu_is_one_line(files):
    r = _cli("bench", "--decode", "default", *files)
    assert r.returncode == 2 and r.stdout == "", r.stdout
    assert len(r.stderr.splitlines()) == 1 and "needs a CUDA GPU" in r.stderr and "Traceback" not in r.stderr


def test_bench_arguments_are_checked_before_the_gpu():
    r = _cli("bench", "--decode", "default", "examples/07_compute_pipeline.py")
    assert r.returncode == 2 and "give no schedule files" in r.stderr, r.stderr
    r = _cli("bench")
    assert r.returncode == 2 and "needs schedule files or 'default'" in r.stderr, r.stderr


def test_plan_shape_prints_the_split_count_the_runtime_launches():
    """The count printed by ``--emit plan --shape`` equals the one the runtime writes into the launch (the
    stand-in driver, 132 SMs) for the same schedule and shape."""
    import b200c
    from b200c.dsl import load_schedule_file
    from b200c.runtime import fake_driver

    path = "examples/hopper/h11_persistent.py"
    sched = load_schedule_file(ROOT / path)
    for shape, causal in (((1, 32, 8, 1, 32768), False), ((2, 8, 8, 1, 20000), False), ((32, 32, 8, 1, 4096), False),
                          ((1, 4, 4, 300, 9000), True)):
        r = _cli("compile", path, "--emit", "plan", "--shape", ",".join(map(str, shape)), *(["--causal"] * causal))
        assert r.returncode == 0, r.stderr
        line = r.stdout.strip().splitlines()[-1]
        printed = int(re.search(r"on 132 SMs: (\d+) split", line).group(1))
        b, h, hk, sq, skv = shape
        with fake_driver.install(target="sm90a", num_sms=132) as fd:
            q = torch.zeros(b, h, sq, 128, dtype=torch.bfloat16)
            kv = torch.zeros(b, hk, skv, 128, dtype=torch.bfloat16)
            b200c.attention(q, kv, kv, schedule=sched, causal=causal, target="sm90a")
            launched = fd.launches[0].params.get("num_splits", 1)
        assert printed == launched, (shape, line, launched)


def test_plan_shape_refusals():
    path = "examples/hopper/h11_persistent.py"
    for args, words in ((("--shape", "1,32,8"), "five integers"), (("--shape", "1,30,8,1,64"), "multiple of H_kv"),
                        (("--causal",), "go with --shape"), (("--sms", "0", "--shape", "1,8,8,1,64"), ">= 1")):
        r = _cli("compile", path, "--emit", "plan", *args)
        assert r.returncode == 2 and words in r.stderr, (args, r.stderr)
    r = _cli("compile", path, "--shape", "1,8,8,1,64")
    assert r.returncode == 2 and "use it with --emit plan" in r.stderr, r.stderr


def test_kernel_source_is_the_kernel_a_call_with_those_mods_loads():
    """Issue 34 item 2: b200c.kernel_source (and ``b200c compile default --score-mod ...``) print the CUDA the
    runtime builds for a call with those mods (the stand-in driver records what the call loads)."""
    import b200c
    import b200c.mods as mods
    from b200c.runtime import fake_driver, op

    table = torch.randn(16, 64, 64)

    def my_bias(score, b, h, q_idx, kv_idx):
        return score + table[h, q_idx // 64, kv_idx // 64]

    cases = ((128, dict(score_mod=my_bias)), (64, dict(mask_mod=mods.sliding_window(256))),  # the window's kernel
             (128, dict(mask_mod=lambda b, h, q_idx, kv_idx: q_idx >= kv_idx)),  # the causal knob's (no mods)
             (128, dict(score_mod=mods.alibi(mods.alibi_slopes(16)))),  # its index math is specialised
             (128, dict(score_mod=mods.softcap(30.0), mask_mod=mods.document(torch.zeros(512, dtype=torch.int32)))))
    for d, kw in cases:
        with fake_driver.install(target="sm90a"):
            loaded = []
            load = op.kernel_for_generated  # the stand-in's loader, restored before install() restores the real one
            op.kernel_for_generated = lambda g, *a: loaded.append(g.source) or load(g, *a)
            try:
                q = torch.randn(1, 16, 512, d, dtype=torch.bfloat16)
                b200c.attention(q, q, q, target="sm90a", **kw)
            finally:
                op.kernel_for_generated = load
        assert loaded and loaded[-1] == b200c.kernel_source(d, "sm90a", **kw), (d, kw)
    r = _cli("compile", "default", "--score-mod", "examples/mods/my_mods.py:my_bias", "--mask-mod",
             "examples/mods/my_mods.py:local")
    assert r.returncode == 0 and "hopper_mods_d128" in r.stdout and "abs(q_idx - kv_idx) <= 128" in r.stdout, r.stderr
    r = _cli("compile", "default", "--emit", "cubin")
    assert r.returncode == 2 and "plan, IR or CUDA" in r.stderr


def test_kernel_source_takes_the_window_and_sinks_of_a_call():
    """kernel_source had no window_size or sinks (seen in a reread): the kernels of such calls could not be
    printed without a GPU. Each is the kernel the call loads (the stand-in driver records it)."""
    import b200c
    import b200c.mods as mods
    from b200c.runtime import fake_driver, op

    sinks = torch.zeros(16)
    cases = ((128, dict(window_size=(1023, 0)), dict(causal=True)), (64, dict(window_size=(-1, 64)), {}),
             (128, dict(sinks=sinks), {}), (128, dict(sinks=sinks, window_size=(127, 0)), {}),
             (128, dict(window_size=(255, 255), mask_mod=mods.document(torch.zeros(512, dtype=torch.int32))), {}))
    sources = []
    for d, kw, extra in cases:
        with fake_driver.install(target="sm90a"):
            loaded = []
            load = op.kernel_for_generated
            op.kernel_for_generated = lambda g, *a: loaded.append(g.source) or load(g, *a)
            try:
                q = torch.randn(1, 16, 512, d, dtype=torch.bfloat16)
                b200c.attention(q, q, q, target="sm90a", **kw, **extra)
            finally:
                op.kernel_for_generated = load
        src = b200c.kernel_source(d, "sm90a", **kw)
        assert loaded and loaded[-1] == src, (d, kw)
        sources.append(src)
    assert len(set(sources)) == len(sources)  # each case is its own kernel: the keywords were not ignored
    assert b200c.kernel_source(128, "sm90a", window_size=(-1, -1)) == b200c.kernel_source(128, "sm90a")
    with pytest.raises(b200c.LaunchError, match="window_size must be a pair"):
        b200c.kernel_source(128, "sm90a", window_size=5)
