"""Every example and variant compiles with nvcc -arch=sm_100a with 0 spill bytes, and the
emulated sm_90a build of the same source compiles too (ptxas runs on CPU)."""
import pytest

from conftest import EXAMPLES, VARIANTS, schedule_key
from b200c.nvcc import compile_cuda


@pytest.mark.nvcc
@pytest.mark.parametrize("example", EXAMPLES + VARIANTS, ids=schedule_key)
def test_sm100a_zero_spills(example, sm100a_builds):
    res = sm100a_builds[schedule_key(example)].plain  # the build's own flags, compiled once per session
    r = res.resources()
    assert r["registers"] is not None, res.log
    assert r["spill_bytes"] == 0, res.log


@pytest.mark.nvcc
def test_s_cache_without_warp_roles_compiles(tmp_path):
    """The 4-warp cta role supports the S register cache too (review finding)."""
    import b200c

    s = b200c.load_schedule_file(EXAMPLES[2]).replace(exp2="ex2.approx.ftz", s_cache_cols=96, split_rowsum=True)
    res = compile_cuda(b200c.generate(s).source, tmp_path / "k.cubin", "cubin", "sm_100a")
    assert res.resources()["spill_bytes"] == 0


@pytest.mark.nvcc
@pytest.mark.parametrize("example", [EXAMPLES[0], EXAMPLES[3], EXAMPLES[6], EXAMPLES[13], EXAMPLES[17]],
                         ids=lambda p: p.stem)
def test_emulated_sm90a_build(example, generated, tmp_path):
    import b200c.codegen as cg
    from pathlib import Path

    if not (Path(cg.cuda_include_dir()) / "b200c_emulate.cuh").exists():
        pytest.skip("emulation header not present")
    compile_cuda(generated[example.stem].source, tmp_path / "k.cubin", "cubin", "emulate")


def test_output_folder_missing_names_the_output(tmp_path):
    from b200c.errors import BuildError

    out = tmp_path / "missing" / "k.cubin"
    with pytest.raises(BuildError, match=f"cannot write '{out}': folder '{out.parent}' does not exist"):
        compile_cuda("// nothing\n", out, "cubin", "sm_100a")
