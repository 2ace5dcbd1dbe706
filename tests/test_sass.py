"""SASS counts without a GPU reproduce the blog's stage 7 -> 8 direction
(ch.8: MUFU.EX2 129 -> 129, FSETP.GEU 129 -> 0, FMUL 644 -> 257 per softmax
instance; our kernels instantiate the softmax once per Q stage, so x2)."""
import pytest

from b200c.errors import BuildError


@pytest.mark.nvcc
def test_stage7_to_8_sass(sm100a_builds):
    from b200c import sass

    try:
        sass.find_cuobjdump()
    except BuildError as e:
        pytest.skip(str(e))
    counts = {}
    for stem in ("07_compute_pipeline", "08_hardware_exp2"):
        counts[stem] = sass.count(sass.disassemble(sm100a_builds[stem].plain.path))
    a, b = counts["07_compute_pipeline"], counts["08_hardware_exp2"]
    assert a["MUFU.EX2"] == b["MUFU.EX2"] > 0
    assert a["FSETP.GEU"] > 0 and b["FSETP.GEU"] == 0
    assert b["FMUL"] < 0.5 * a["FMUL"], (a["FMUL"], b["FMUL"])
    assert b["predicated"] < a["predicated"]


def test_count_parses_sass_lines():
    from b200c.sass import count

    text = """
        /*0010*/                   MUFU.EX2 R3, R2 ;                       /* 0x0000000200037308 */
        /*0020*/              @!P0 FMUL R4, R4, 0.5 ;                      /* 0x3f00000004048820 */
        /*10a30*/                   FSETP.GEU.AND P0, PT, R1, -126, PT ;    /* 0x000000000100780b */
        /*10a40*/                   UTCHMMA gdesc[UR10], gdesc[UR12], tmem[UR4], tmem[UR6], idesc[UR7], UPT ;
    """
    c = count(text)
    assert c["static"] == 4 and c["MUFU.EX2"] == 1 and c["FMUL"] == 1 and c["FSETP.GEU"] == 1
    assert c["predicated"] == 1 and c["UTC*MMA"] == 1
