"""The hot loop of a kernel's SASS and the wgmma register-hazard check, without a GPU.

``hot_loop`` finds the smallest backward-branch loop that issues MMAs
(HGMMA on sm_90a, UTC*MMA on sm_100a): the steady-state K/V loop of a
consumer warpgroup or MMA warp. Its size is the number the Hopper progression
reports per stage ("loop" in ``b200c check --target sm90a``); ``steady``
leaves out the masking block of a partial last K/V tile (a forward-branched
run of FSELs that every other iteration skips).

``async_register_hazards`` walks a loop body twice (it wraps around) and
lists every instruction that touches a register an in-flight HGMMA group
still owns (its accumulator, or its A fragment): a wgmma group is closed by
the HGMMA marked ``gsb0`` (``wgmma.commit_group``) and retired by
``WARPGROUP.DEPBAR.LE gsb0, n`` (``wgmma.wait_group n``, PTX ISA 9.7.15.7).
An empty list is the expected answer; the generated kernels fence every
accumulator read behind the wait (``reg_fence``), and this checks that ptxas
kept it so.
"""
from __future__ import annotations

import re

_INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);")
_MMA = re.compile(r"HGMMA|UTC\w*MMA")


def instructions(sass: str) -> list:
    """``(address, text)`` of every SASS instruction."""
    return [(int(m.group(1), 16), m.group(2).strip()) for m in _INSN.finditer(sass)]


def hot_loop(sass: str) -> dict | None:
    """The smallest loop with an MMA: ``{"instructions", "steady", "mma", "mufu_ex2",
    "ffma", "fmul", "fadd", "fmnmx", "f2fp", "body"}`` or None if there is none."""
    ins = instructions(sass)
    best = None
    for i, (addr, text) in enumerate(ins):
        m = re.search(r"\bBRA\b.*?(0x[0-9a-f]+)", text)
        if not m:
            continue
        target = int(m.group(1), 16)
        if target >= addr:
            continue
        # the branch's own function: addresses restart at each kernel of a module, so walk back only while
        # they fall (a loop never spans two kernels)
        j = i
        while j > 0 and ins[j][0] > target and ins[j - 1][0] < ins[j][0]:
            j -= 1
        if ins[j][0] != target:
            continue
        body = [x for _, x in ins[j:i + 1]]
        if any(re.search(r"\b(EXIT|RET)\b", x) for x in body):
            continue  # out-of-line wait blocks after the EXITs jump back into the loop: not loops
        if any(_MMA.search(x) for x in body) and (best is None or len(body) < best[2]):
            best = (j, i, len(body))
    if best is None:
        return None
    lo, hi, _ = best
    body = ins[lo:hi + 1]
    hi = body[-1][0]

    def count(pattern, seq=body):
        return sum(bool(re.search(pattern, x)) for _, x in seq)

    skipped = 0
    for a, x in body:
        m = re.search(r"^@!?U?P\d.*\bBRA\b.*?(0x[0-9a-f]+)", x)
        if m and a < int(m.group(1), 16) <= hi:
            region = [(b, y) for b, y in body if a < b < int(m.group(1), 16)]
            if count(r"\bFSEL\b", region) >= 8 and not count(r"HGMMA|MUFU", region):
                skipped += len(region)
    return {"instructions": len(body), "steady": len(body) - skipped, "mma": count(_MMA.pattern),
            "mufu_ex2": count(r"MUFU\.EX2"), "ffma": count(r"\bFFMA\b"), "fmul": count(r"\bFMUL\b"),
            "fadd": count(r"\bFADD\b"), "fmnmx": count(r"FMNMX"), "f2fp": count(r"F2FP"),
            "body": [x for _, x in body]}


def async_register_hazards(body: list) -> list:
    """Instructions of a loop body touching registers owned by an unretired HGMMA group (module docstring)."""
    groups: list = []  # committed groups, oldest first
    open_group: set = set()
    hazards = []
    for rnd in range(2):
        for x in body:
            m = re.match(r"(?:@!?P\d\s+)?HGMMA\.64x(\d+)x16\S*\s+R(\d+),\s*(R(\d+)|gdesc)", x)
            if m:
                n, d = int(m.group(1)), int(m.group(2))
                regs = set(range(d, d + n // 2))
                if m.group(4):
                    regs |= set(range(int(m.group(4)), int(m.group(4)) + 4))
                for g in groups:
                    if g & regs and rnd == 1:
                        hazards.append("HGMMA reuses registers of an in-flight group: " + x)
                open_group |= regs
                if x.rstrip().endswith("gsb0") or "gsb0" in x.split(",")[-1]:
                    groups.append(open_group)
                    open_group = set()
                continue
            m = re.match(r"(?:@!?P\d\s+)?WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*0x([0-9a-f]+)", x)
            if m:
                keep = int(m.group(1), 16)
                groups = groups[len(groups) - keep:] if keep else []
                continue
            used = {int(r) for r in re.findall(r"\bR(\d+)\b", x)}
            busy = set().union(*groups) if groups else set()
            if used & busy and rnd == 1:
                hazards.append(x)
    return hazards
