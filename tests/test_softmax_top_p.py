"""The ch.11 threshold's top-P rounding (blog ch.9 + ch.11 together): the tile's largest P is taken
into O's normaliser as the exp2 of the column that produced it (a software-exp2 column or not), the
correction is kept apart from the FP32 rowsum (the LSE uses the exact sum), and the f32x2 partial
rowsums are carried across K/V tiles from minor 17 on. Read from ``b200c compile --emit ir`` and the
CUDA; the numerics are checked on the GPU (tests/gpu/test_real_inputs.py)."""
from pathlib import Path

import pytest

import b200c
from b200c.codegen import lower

EX = Path(__file__).resolve().parents[1] / "examples"


def ir(schedule) -> str:
    return lower(schedule, target="sm100a").text()


def ex(name):
    return b200c.load_schedule_file(EX / name)


def test_stage18_picks_the_exp2_of_the_top_column():
    s = ex("18_tma_l2_promotion.py")
    text = ir(s)
    assert text.count("columns 14..15 of every 16 (software exp2) in their own chain") == 2  # steady + masked
    assert text.count("p_top by its column's exp2 (hardware or software)") == 2
    src = b200c.generate(s).source
    assert "select_ge(sw_max, tile_max, exp2_poly_bare(x_top), ex2_approx_ftz(x_top))" in src
    assert "row_sum + row_adj" in src  # O's normaliser
    assert "lg2_approx_ftz(row_sum / (row_sum + row_adj))" in src  # the LSE from the exact rowsum


@pytest.mark.parametrize("per16", [2, 4, 8])
def test_own_chain_follows_the_software_columns(per16):
    s = ex("18_tma_l2_promotion.py").replace(name=f"sw{per16}", sw_exp2_per16=per16)
    assert f"columns {16 - per16}..15 of every 16 (software exp2) in their own chain" in ir(s)


def test_no_software_exp2_no_own_chain():
    s = ex("18_tma_l2_promotion.py").replace(name="hw_only", sw_exp2_per16=0)
    text = ir(s)
    assert "in their own chain" not in text
    assert "p_top by ex2.approx" in text
    assert "sw_max" not in b200c.generate(s).source


def test_no_threshold_no_top_p():
    text = ir(ex("10_register_caching.py"))
    assert "softmax.top_p" not in text and "row_adj" not in text


@pytest.mark.parametrize("name, carried", [("16_split_rowsum.py", False), ("17_phase_bitmasks.py", True),
                                           ("18_tma_l2_promotion.py", True)])
def test_carried_rowsum_from_minor_17(name, carried):
    assert ("rowsum partial sums rs_ab, rs_c2 kept across tiles" in ir(ex(name))) == carried


def test_hopper_threshold_with_software_exp2():
    s = b200c.load_schedule_file(EX / "hopper" / "h09_lazy_rescale.py").replace(name="h_sw", sw_exp2_per16=4)
    src = b200c.generate(s, "sm90a").source
    assert "sw_max[r] >= tile_max[r] ? exp2_poly(x_top) : ex2_approx_ftz(x_top)" in src
    plain = b200c.generate(b200c.load_schedule_file(EX / "hopper" / "h09_lazy_rescale.py"), "sm90a").source
    assert "sw_max" not in plain


def test_threshold_without_warp_specialization_generates():
    # stage 3 (one CTA role) with ch.8's ex2, ch.9's software exp2 and ch.11's threshold: the cta role
    # declares row_adj and rounds the top P too (this combination did not compile before)
    s = ex("03_swizzle.py").replace(name="cta_thr", exp2="ex2.approx.ftz", rescale_threshold=8.0, sw_exp2_per16=2)
    src = b200c.generate(s).source
    assert "float row_adj = 0.f;" in src and "row_adj += bf16_round(p_top) - p_top;" in src
    assert "fmax3_nan" in src or "fmax_nan(" in src  # the software exp2 takes the NaN-propagating row max


def test_nan_row_max_with_software_exp2_only():
    assert "max.NaN (NaN scores make the row NaN)" in ir(ex("09_software_exp2.py"))
    assert "max.NaN" not in ir(ex("08_hardware_exp2.py"))
    src = b200c.generate(ex("18_tma_l2_promotion.py")).source
    assert "const bool rebase = !((m_cand + exp_neg) < 8.0f);" in src  # steady state: a NaN max rebases (max = -exp_neg)
    assert "|| m_cand != m_cand;" in src  # masked tiles: NaN rebases, a row without keys does not
