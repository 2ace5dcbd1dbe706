"""Every Hopper example compiles for sm_90a (nvcc -gencode=arch=compute_90a,code=sm_90a)
with 0 spill bytes and no wgmma register hazard in its hot loop; a profiling
build and a bounded-wait (debug) build compile too."""
import pytest

import b200c
from b200c.errors import BuildError
from b200c.nvcc import compile_cuda
from conftest import HOPPER_EXAMPLES


def _sass_tools():
    from b200c import sass

    try:
        sass.find_cuobjdump()
        return True
    except BuildError:
        return False


@pytest.mark.nvcc
@pytest.mark.parametrize("example", HOPPER_EXAMPLES, ids=lambda p: p.stem)
def test_sm90a_zero_spills_no_hazards(example, generated_sm90, tmp_path):
    out = tmp_path / "k.cubin"
    res = compile_cuda(generated_sm90[example.stem].source, out, "cubin", "sm_90a")
    r = res.resources()
    assert r["registers"] is not None, res.log
    assert r["spill_bytes"] == 0 and r["stack_frame"] == 0, res.log
    if _sass_tools():
        from b200c.sass import disassemble
        from b200c.sass.hopper import async_register_hazards, hot_loop

        loop = hot_loop(disassemble(out))
        assert loop and loop["mma"] > 0
        assert async_register_hazards(loop["body"]) == []


@pytest.mark.nvcc
def test_profiling_and_debug_builds_compile(tmp_path, monkeypatch):
    s = b200c.load_schedule_file(HOPPER_EXAMPLES[-1])
    res = compile_cuda(b200c.generate(s, "sm90a", profile=True).source, tmp_path / "p.cubin", "cubin", "sm_90a")
    assert res.resources()["registers"] is not None
    monkeypatch.setenv("B200C_BOUNDED_WAIT", "1")
    res = compile_cuda(b200c.generate(s, "sm90a").source, tmp_path / "d.cubin", "cubin", "sm_90a")
    assert res.resources()["registers"] is not None


def test_sm90a_flags():
    from b200c.codegen.targets import resolve
    from b200c.toolchain import nvcc_flags

    assert resolve("sm_90a") is resolve("sm90") is resolve("SM90A")
    flags = nvcc_flags("sm90a")
    assert flags[0] == "-gencode=arch=compute_90a,code=sm_90a" and "-arch=sm_90a" not in flags
