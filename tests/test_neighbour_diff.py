"""Neighbouring examples diff like the blog's kernels: the change is non-empty
and confined to the sections (warp roles, plan constants, launch notes) the
blog stage says it changes."""
import re

import pytest

from conftest import EXAMPLES

# stage -> sections (besides the always-changing header) its schedule change may touch
EXPECTED = {
    2: {"plan", "role cta"},                        # P in TMEM: softmax writes P, PV reads A from TMEM
    3: {"plan", "launch"},                          # swizzle: TMA boxes and MMA descriptors only
    4: {"plan", "launch", "entry", "role cta", "role softmax", "role load", "role mma"},
    5: {"plan", "launch", "entry", "role softmax", "role load", "role mma"},
    6: {"plan", "launch", "entry", "role load", "role mma"},
    7: {"role mma"},                                # issue order
    8: {"role softmax"},                            # ex2.approx
    9: {"role softmax"},                            # software exp2
    10: {"plan", "role softmax"},                   # S cache; P moves to the upper half
    11: {"role softmax"},                           # rescale threshold
    12: {"plan", "launch", "entry", "context", "role correction", "role softmax", "role mma", "role load",
         "role spare"},
    13: {"plan", "launch", "entry", "role correction", "role softmax", "role mma"},
    14: {"plan", "launch", "entry", "role correction", "role softmax", "role load", "role mma"},
    15: {"role softmax", "role correction"},  # wide S loads, max3; x32 O rescale loads with deferred waits
    16: {"role softmax"},
    17: {"role load", "role mma", "role softmax"},  # runtime-indexed K/V ring phases (Q-stage ones are constant-indexed);
                                                    # the registers freed carry the softmax's f32x2 rowsum across tiles
    18: {"launch"},                                 # host-side tensor map only
}


def sections(text: str) -> dict:
    out, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"// ==== section: (.*) ====$", line)
        if m:
            cur = m.group(1)
            out.setdefault(cur, [])
            continue
        if line.startswith("// ==== end section"):
            cur = None
            continue
        assert cur is not None, f"line outside any section: {line!r}"
        out[cur].append(line)
    return out


@pytest.mark.parametrize("i", range(1, len(EXAMPLES)), ids=lambda i: EXAMPLES[i].stem)
def test_neighbour_diff_is_confined(i, generated):
    prev, cur = EXAMPLES[i - 1], EXAMPLES[i]
    a, b = sections(generated[prev.stem].source), sections(generated[cur.stem].source)
    changed = {k for k in set(a) | set(b) if a.get(k) != b.get(k)} - {"header"}
    stage = int(cur.stem[:2])
    assert changed, f"{cur.stem} generates the same kernel as {prev.stem}"
    assert changed == EXPECTED[stage], f"{prev.stem} -> {cur.stem} changed {sorted(changed)}"
