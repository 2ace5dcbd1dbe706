"""A native kernel built with register spills warns (PerformanceWarning) with ptxas' figures; a built-in
schedule's kernel builds silently. The spilling example: BackwardSchedule(q_stages=1) at head dim 64, which
ptxas (nvcc 13.0) compiles with spills in the main kernel though the schedule plans (its resource model does
not see them)."""
import warnings

import pytest

import b200c
from b200c.codegen.sm90.backward import generate_backward
from b200c.runtime.backward_launch import _build
from b200c.runtime.build import _slow_build_note

pytestmark = pytest.mark.nvcc


def _needs_tools():
    from b200c.runtime.build import find_ninja
    from b200c.toolchain import find_nvcc

    try:
        find_nvcc(), find_ninja()
    except b200c.BuildError as e:
        pytest.skip(f"no toolchain: {e}")


def test_a_spilling_build_warns_and_the_built_in_one_does_not(tmp_path, monkeypatch):
    _needs_tools()
    monkeypatch.setenv("B200C_CACHE_DIR", str(tmp_path))
    spilling = b200c.default_backward_schedule(64).replace(name="one_q_stage", q_stages=1)
    with pytest.warns(b200c.PerformanceWarning, match=r"'one_q_stage'.*b200c_attention_backward: \d+ B spill stores"):
        _build(generate_backward(spilling))
    with warnings.catch_warnings():
        warnings.simplefilter("error", b200c.PerformanceWarning)
        _build(generate_backward(b200c.default_backward_schedule(64)))
        _build(generate_backward(spilling))  # a cache hit: said when it was built


def test_the_note_reads_ptxas_report():
    log = ("ptxas info    : Function properties for b200c_attention_backward\n"
           "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Function properties for b200c_backward_preprocess\n"
           "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n")
    note = _slow_build_note("mine", "sm90a", log)
    assert "b200c_attention_backward: 4 B spill stores, 4 B spill loads" in note and "preprocess" not in note
    assert _slow_build_note("mine", "sm90a", log.replace("4 bytes spill", "0 bytes spill")) == ""
    serial = "ptxas /tmp/k.ptx, line 5; warning : wgmma.mma_async instructions are serialized (C7512)\n"
    assert "(C7512)" in _slow_build_note("mine", "sm90a", serial)
