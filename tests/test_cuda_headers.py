"""One header for what the two backends share (issue 33, item 5): b200c_ptx.cuh (tcgen05) and
b200c_sm90.cuh (Hopper) include b200c_common.cuh and define none of its helpers again; the generated
sources inline it once (self-contained .cu files); it is packaged and part of the emulated build's
cache key. Text checks only (the numerics run on the GPU: tests/gpu/test_special_values.py)."""
import re
from pathlib import Path

import pytest

from conftest import EXAMPLES, HOPPER_EXAMPLES

CUDA = Path(__file__).resolve().parents[1] / "b200c" / "codegen" / "cuda"
INCLUDE = '#include "b200c_common.cuh"'
# a function definition at the start of a line: `__device__ ... name(...) {` (templates included)
_DEF = re.compile(r"^(?:template\s*<[^>]*>\s*)?(?:__\w+__\s+)+[\w:<>,\s\*&]*?\b(\w+)\s*\([^;{]*\)\s*\{", re.M)
_GLOBAL = re.compile(r"^__device__\s+[\w:\*\s]+?\b(\w+)\s*;", re.M)


def _defined(text: str) -> set:
    return set(_DEF.findall(text)) | set(_GLOBAL.findall(text)) | set(re.findall(r"^struct (\w+)", text, re.M))


def _text(name: str) -> str:
    return (CUDA / name).read_text()


def test_definition_parser_finds_known_helpers():
    common = _defined(_text("b200c_common.cuh"))
    for name in ("mbar_wait", "report_hang", "exp2_poly", "fmax_nan", "elect_one", "tma_load_4d", "lane_id",
                 "HangReport", "b200c_hang_report", "named_bar_sync", "ex2_approx_ftz", "pack_bf16x2"):
        assert name in common, name
    assert "exp2_poly_x2" in _defined(_text("b200c_ptx.cuh"))
    assert "wgmma_fence" in _defined(_text("b200c_sm90.cuh"))


@pytest.mark.parametrize("name", ["b200c_ptx.cuh", "b200c_sm90.cuh"])
def test_backend_headers_include_common_and_do_not_redefine_it(name):
    text = _text(name)
    assert text.count(INCLUDE) == 1, f"{name} must include b200c_common.cuh once"
    again = _defined(text) & _defined(_text("b200c_common.cuh"))
    assert not again, f"{name} defines helpers of b200c_common.cuh again: {sorted(again)}"
    for macro in ("B200C_WAIT_SPIN_MASK", "B200C_WAIT_TIMEOUT_MS"):
        assert f"#define {macro}" not in text, f"{name} defines {macro} again"
    assert "spin & 1023u" not in text and "spin & 255u" not in text, f"{name} has a spin mask of its own"
    assert "fmaxf(x, -127" not in text, f"{name} clamps the exp2 polynomial with fmaxf (drops NaN)"


def test_one_spin_mask_and_one_nan_keeping_polynomial():
    common = _text("b200c_common.cuh")
    assert common.count("(spin & B200C_WAIT_SPIN_MASK) == B200C_WAIT_SPIN_MASK") == 1
    bare = common[common.index("float exp2_poly_bare(float x)"):]
    bare = bare[:bare.index("\n}\n")]
    assert "fmax_nan(x, kExp2PolyMin)" in bare  # the clamp keeps a NaN
    body = common[common.index("float exp2_poly(float x)"):]
    body = body[:body.index("\n}\n")]
    assert "__fmaf_rn(fmax_nan(x, kExp2PolyMin), 0.f, exp2_poly_bare(x))" in body  # the last step carries it
    ptx = _text("b200c_ptx.cuh")
    pair = ptx[ptx.index("float2 exp2_poly_x2(float2 x)"):]
    pair = pair[:pair.index("\n}\n")]
    for piece in ("fmax_nan(x.x, kExp2PolyMin)", "kExp2PolyMagic", "kExp2PolyC3", "kExp2PolyC2", "kExp2PolyC1",
                  "exp2_poly_join(p.x, r.x)"):
        assert piece in pair, piece
    assert not re.search(r"\d\.\d{3}f", pair), "the pair repeats a coefficient instead of using kExp2PolyC*"
    # the pair (the sm_100a P pass) does not carry a NaN: the rebase makes the rowsum NaN instead
    assert "make_float2(0.f, 0.f)" not in pair
    import b200c

    src = b200c.generate(b200c.load_schedule_file(EXAMPLES[-1])).source
    assert src.count("rescale = fmaf(neg_new, 0.f, ex2_approx_ftz(-exp_neg - m_cand));") == 2  # steady + masked


def test_header_text_inlines_common_once():
    from b200c.codegen.cuda import header_text

    common = _text("b200c_common.cuh").rstrip("\n")
    for name in ("b200c_ptx.cuh", "b200c_sm90.cuh"):
        t = header_text(name)
        assert INCLUDE not in t and t.count(common) == 1, name
    with pytest.raises(ValueError, match="file name"):
        header_text("../cuda/b200c_ptx.cuh")
    with pytest.raises(FileNotFoundError):
        header_text("b200c_missing.cuh")


def test_generated_sources_are_self_contained(generated, generated_sm90):
    """The emitters take the header text from b200c.codegen.cuda.header_text: no source includes the
    common header by name (a native sm_100a / sm_90a build has no -I), each holds its text once."""
    marker = "#define B200C_COMMON_CUH"
    for kind, gens in (("sm100a", [generated[p.stem] for p in EXAMPLES[:1] + EXAMPLES[-1:]]),
                       ("sm90a", [generated_sm90[p.stem] for p in HOPPER_EXAMPLES[:1]])):
        for g in gens:
            assert INCLUDE not in g.source, f"a generated {kind} source includes b200c_common.cuh by name"
            assert g.source.count(marker) == 1, kind


def test_common_header_is_packaged_and_in_the_emulated_cache_key():
    import tomllib

    from b200c.toolchain import header_digest_text

    data = tomllib.loads((CUDA.parents[2] / "pyproject.toml").read_text())
    globs = data["tool"]["setuptools"]["package-data"]["b200c"]
    assert any(Path("codegen/cuda/b200c_common.cuh").match(g) for g in globs), globs
    key = header_digest_text("emulate")
    assert "// b200c_common.cuh\n" in key and _text("b200c_common.cuh") in key
