"""Each warp role's steady-state loop, from the real sm_100a SASS (issue 9).

tests/golden/sass_loops.json pins the static instruction counts of every
example's and variant's K/V loops, computed by b200c.sass.roles from the
cubins that nvcc builds here; regenerate it on purpose with
``pytest tests/test_sass_loops.py --update-golden`` and review the diff. The
counts depend on ptxas: the file records the nvcc release it was made with,
and the comparison is skipped (with that reason) under another release.
"""
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import EXAMPLES, VARIANTS, schedule_key
from b200c.errors import BuildError

GOLDEN = Path(__file__).parent / "golden" / "sass_loops.json"
ABOUT = ("static SASS instructions of each warp role's steady-state (K/V) loop body per K/V tile, "
         "sm_100a, from b200c.sass.roles; regenerate with: pytest tests/test_sass_loops.py --update-golden")


def _need_disassembler():
    from b200c.sass import find_cuobjdump

    try:
        find_cuobjdump()
    except BuildError as e:
        pytest.skip(str(e))


def _nvcc_release() -> str:
    from b200c.toolchain import find_nvcc, nvcc_version

    return next((l.strip() for l in nvcc_version(find_nvcc()).splitlines() if "release" in l), "unknown")


@pytest.fixture(scope="session")
def listings(sm100a_builds):
    """{key: (nvdisasm -gi -hex listing of the -lineinfo cubin, same of the plain cubin)}."""
    from b200c.sass.loops import disassemble_lines

    _need_disassembler()

    def one(key):
        b = sm100a_builds[key]
        return key, (disassemble_lines(b.lines.path, encodings=True), disassemble_lines(b.plain.path, encodings=True))

    with ThreadPoolExecutor(max_workers=2) as ex:
        return dict(ex.map(one, sm100a_builds))


@pytest.fixture(scope="session")
def measured(sm100a_builds, listings):
    """{key: {role: counts}} of every example and variant, without the source line."""
    from b200c.sass.roles import role_loops

    out = {}
    for key, b in sm100a_builds.items():
        rows = role_loops(b.source, listings[key][0])
        out[key] = {role: {k: v for k, v in c.items() if k != "line"} for role, c in rows.items()}
    return out


def _dump(data: dict) -> str:
    """JSON with one line per role, so a review diff shows whole rows."""
    out = []
    for key, value in data.items():
        if isinstance(value, dict):
            roles = [f"  {json.dumps(r)}: {json.dumps(c)}" for r, c in value.items()]
            out.append(f" {json.dumps(key)}: {{\n" + ",\n".join(roles) + "\n }")
        else:
            out.append(f" {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(out) + "\n}\n"


def _diff(golden: dict, now: dict) -> list:
    lines = []
    for key in sorted(set(golden) | set(now)):
        if key not in now:
            lines.append(f"{key}: in the golden file, not measured")
            continue
        if key not in golden:
            lines.append(f"{key}: measured, not in the golden file")
            continue
        g, n = golden[key], now[key]
        for role in list(dict.fromkeys([*g, *n])):
            if role not in n or role not in g:
                lines.append(f"{key} {role}: " + ("no longer found" if role not in n else "new role loop"))
                continue
            changed = [f"{c} {g[role].get(c)} -> {n[role].get(c)}" for c in dict.fromkeys([*g[role], *n[role]])
                       if g[role].get(c) != n[role].get(c)]
            if changed:
                lines.append(f"{key} {role}: " + ", ".join(changed))
    return lines


@pytest.mark.nvcc
def test_lineinfo_keeps_the_instruction_stream(sm100a_builds, listings):
    """check compiles with -lineinfo; the SASS must be the one the build runs:
    the same instructions (opcodes, guards, operands) with the same encodings."""
    from b200c.sass.loops import encoding_stream, opcode_stream

    bad = []
    for key, b in sm100a_builds.items():
        with_lines, plain = (opcode_stream(t) for t in listings[key])
        assert len(plain) > 1000, key
        if with_lines != plain:
            i = next((k for k, (x, y) in enumerate(zip(with_lines, plain)) if x != y), min(len(with_lines), len(plain)))
            bad.append(f"{key}: instruction {i} differs ({len(plain)} vs {len(with_lines)} instructions)")
        words = [encoding_stream(t) for t in listings[key]]
        if len(words[1]) != 2 * len(plain) or words[0] != words[1]:
            bad.append(f"{key}: instruction encodings differ ({len(words[1])} vs {len(words[0])} 64-bit words)")
        if b.lines.resources() != b.plain.resources():
            bad.append(f"{key}: ptxas resources {b.plain.resources()} vs {b.lines.resources()} with -lineinfo")
    assert not bad, "\n".join(bad)


@pytest.mark.nvcc
def test_loop_counts_match_golden(measured, request):
    release = _nvcc_release()
    if request.config.getoption("--update-golden"):
        GOLDEN.write_text(_dump({"_about": ABOUT, "_nvcc": release, **measured}))
        pytest.skip(f"rewrote {GOLDEN.name}")
    assert GOLDEN.exists(), f"no golden file {GOLDEN}; run pytest --update-golden and review it"
    golden = json.loads(GOLDEN.read_text())
    if golden.get("_nvcc") != release:
        pytest.skip(f"{GOLDEN.name} was made with nvcc {golden.get('_nvcc')!r}, this is {release!r}")
    golden = {k: v for k, v in golden.items() if not k.startswith("_")}
    diff = _diff(golden, measured)
    assert not diff, ("steady-state loops differ from tests/golden/sass_loops.json (golden -> now); "
                      "if intended, rerun with --update-golden and review:\n" + "\n".join(diff))


def test_golden_covers_every_example_and_variant():
    golden = json.loads(GOLDEN.read_text())
    assert {k for k in golden if not k.startswith("_")} == {schedule_key(p) for p in EXAMPLES + VARIANTS}
    assert len(EXAMPLES) == 18 and VARIANTS


@pytest.mark.nvcc
def test_every_warp_role_with_a_kv_loop_is_reported(measured):
    """Roles follow the entry's call order; the softmax template gives one row per Q stage."""
    assert list(measured["18_tma_l2_promotion"]) == ["softmax", "correction", "load", "mma"]
    assert list(measured["05_two_q_tiles"]) == ["softmax", "load", "mma"]
    assert list(measured["01_baseline"]) == ["cta"]
    assert list(measured["variants/one_q_pipelined"]) == ["softmax", "load", "mma"]
    for key, roles in measured.items():
        mma = [c for r, c in roles.items() if r in ("mma", "cta")]
        assert mma and all(c["UTC*MMA"] > 0 for c in mma), key
        assert all(c["MUFU.EX2"] > 0 for r, c in roles.items() if r.startswith(("softmax", "cta"))), key


@pytest.mark.nvcc
def test_mix_classifier_finds_the_same_loops(measured, listings):
    """scripts/fa4_loops.py attributes FA4's loops by instruction mix; on our
    warp-specialized kernels that must pick the loops the line info picks."""
    from b200c.sass.loops import loops_by_mix, parse_listing

    for key in ("12_split_correction", "18_tma_l2_promotion", "variants/ring4"):
        by_mix = loops_by_mix(parse_listing(listings[key][0]))
        for role, c in measured[key].items():
            inner = [len(l.body) for l in by_mix[role.split("[")[0]].steady]
            assert c["static"] in inner, (key, role, c["static"], inner)
