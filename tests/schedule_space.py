"""The schedule knob space, drawn with hypothesis (issue 19: "the schedule space is sound").

One module owns the space, so the property tests (tests/test_schedule_space.py) and the long
sweep (scripts/schedule_sweep.py) draw from the same thing:

* :data:`KNOB_VALUES`: every knob of :class:`b200c.Schedule` and every value its type and range
  rules admit (b200c/dsl/validate.py), for both targets; ``issue_order`` draws any permutation of
  the Q stages' QK/PV steps with offsets 0/1 (or None).
* :func:`start_points`: every schedule file under examples/, examples/variants/ and
  examples/hopper/, with its native target (:func:`b200c.codegen.targets.schedule_target`).
* :func:`schedules`: a start point with 1..4 knobs changed (sometimes a whole register-budget
  triple at once, since budgets are all-or-nothing), for its native target or, one time in five,
  the other one.
* :func:`outcome`: what b200c does with one (schedule, target): ``("refused", rule, message)``
  when validation or the plan raises a ScheduleError (ResourceError, IssueOrderError), else
  ``("generated", kernel, None)``; anything else (a ProtocolError, a KeyError, a jinja error,
  a ScheduleError raised after the plan accepted) is ``("internal", type, message)``: a bug.
* :func:`compile_outcome`: nvcc of a generated kernel; the property is ``spill_bytes == 0``
  (a stack frame is allowed: runtime-indexed phase-bit arrays live in local memory, see
  ``b200c check``'s footer).

Nothing here is collected by pytest (no ``test_`` names).
"""
from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_FILES = (sorted((ROOT / "examples").glob("[0-9][0-9]_*.py")) + sorted((ROOT / "examples/variants").glob("*.py"))
                 + sorted((ROOT / "examples/hopper").glob("h[0-9][0-9]_*.py")))
TARGETS = ("sm100a", "sm90a")

_REGS = (None, *range(24, 257, 8))
# every knob and the values its type/range rules admit (validate.py); the validator and the target
# rules decide which combinations generate
KNOB_VALUES = {
    "block_m": (64, 128),
    "block_n": tuple(range(16, 257, 16)),
    "head_dim": (64, 128, 256),
    "p_storage": ("smem", "tmem", "registers"),
    "swizzle": ("none", "128B"),
    "warp_specialized": (False, True),
    "q_stages": (1, 2, 3, 4),
    "kv_tokens": ("paired", "separate"),
    "kv_stages": tuple(range(1, 9)),
    "issue_order": None,  # drawn by _issue_orders for the schedule's q_stages
    "pingpong": (False, True),
    "rowsum": ("fp32", "bf16"),
    "exp2": ("expf", "ex2.approx.ftz"),
    "f32x2": (False, True),
    "sw_exp2_per16": (0, 2, 4, 6, 8),
    "s_cache_cols": (0, *range(16, 257, 16)),
    "rescale_threshold": (None, 0.0, 1.0, 4.0, 8.0, 16.0, 64.0),
    "correction_warps": (0, 4),
    "early_pv_cols": (0, *range(16, 113, 16)),
    "persistent": (False, True),
    "s_load_cols": (8, 16, 32),
    "deferred_s_wait": (False, True),
    "rowmax_chains": (1, 2, 4, 8),
    "rowmax_max3": (False, True),
    "o_load_cols": (8, 16, 32),
    "split_rowsum": (False, True),
    "phase_tracking": ("array", "bitmask"),
    "tma_l2_promotion": ("none", "64B", "128B", "256B"),
    "softmax_regs": _REGS,
    "correction_regs": _REGS,
    "other_regs": _REGS,
    "kv_splits": (None, 0, 1, 2, 7, 128, -1, 129),  # None / 0 / 1 / fixed counts, and two refused values
}
KNOBS = tuple(KNOB_VALUES)
# register budgets are all-or-nothing (validate._registers): also drawn as one move
REG_TRIPLES = ((None, None, None), (192, None, 48), (240, None, 24), (184, 96, 48), (200, 80, 48), (192, 64, 32),
               (232, 24, 40), (160, 128, 80))


def _check_knobs_cover_schedule() -> None:
    import dataclasses

    import b200c

    fields = {f.name for f in dataclasses.fields(b200c.Schedule)} - {"name", "blog_stage"}
    assert fields == set(KNOB_VALUES), f"knob space out of date: {sorted(fields ^ set(KNOB_VALUES))}"


@functools.lru_cache(maxsize=None)
def start_points() -> tuple:
    """(key, Schedule, native target) for every example, variant and Hopper schedule file."""
    import b200c
    from b200c.codegen.targets import schedule_target

    _check_knobs_cover_schedule()
    out = []
    for p in EXAMPLE_FILES:
        s = b200c.load_schedule_file(p)
        out.append((p.relative_to(ROOT / "examples").with_suffix("").as_posix(), s, schedule_target(s)))
    return tuple(out)


def _issue_orders(q_stages: int):
    """Strategy: None or an issue order for ``q_stages`` stages (any permutation, offsets 0/1)."""
    from hypothesis import strategies as st

    steps = [(k, q) for q in range(q_stages) for k in ("QK", "PV")]

    @st.composite
    def order(draw):
        perm = draw(st.permutations(steps))
        offs = draw(st.lists(st.integers(0, 1), min_size=len(perm), max_size=len(perm)))
        return " ".join((f"Q{q}K" if k == "QK" else f"P{q}V") + ("(i+1)" if o else "(i)")
                        for (k, q), o in zip(perm, offs))

    return st.one_of(st.none(), order())


def knob_value(knob: str, schedule):
    """Strategy for one knob's value (``issue_order``: orders for the schedule's q_stages, which the
    same draw may have changed, or for another stage count)."""
    from hypothesis import strategies as st

    if knob == "issue_order":
        return st.integers(1, 4).flatmap(
            lambda q: _issue_orders(schedule.q_stages if q <= 2 else q))
    return st.sampled_from(KNOB_VALUES[knob])


def schedules(max_changes: int = 4):
    """Strategy of ``(start key, Schedule, target)``: a start point with 1..``max_changes`` knobs changed."""
    from hypothesis import strategies as st

    @st.composite
    def draw_one(draw):
        key, s, native = draw(st.sampled_from(start_points()))
        knobs = draw(st.lists(st.sampled_from(KNOBS + ("registers",)), min_size=1, max_size=max_changes, unique=True))
        changes = {}
        for knob in knobs:
            cur = s.replace(**changes)
            if knob == "registers":  # budgets are all-or-nothing: a whole triple at once
                triple = draw(st.sampled_from(REG_TRIPLES).filter(
                    lambda t: t != (cur.softmax_regs, cur.correction_regs, cur.other_regs)))
                changes.update(zip(("softmax_regs", "correction_regs", "other_regs"), triple))
            else:
                changes[knob] = draw(knob_value(knob, cur).filter(lambda v, k=knob: v != getattr(cur, k)))
        s = s.replace(**changes)
        # the record's name: a Target compared with a string is never equal (every B200 start point then
        # drew sm100a as its "other" target too)
        other = "sm90a" if native.name == "sm100a" else "sm100a"
        target = other if draw(st.integers(0, 4)) == 0 else native.name
        return key, s, target

    return draw_one()


def changes_of(key: str, s) -> dict:
    """The knobs ``s`` changes relative to its start point ``key`` (for a reproducible repr)."""
    import dataclasses

    base = dict((k, b) for k, b, _ in start_points())[key]
    return {f.name: getattr(s, f.name) for f in dataclasses.fields(s)
            if f.name not in ("name", "blog_stage") and getattr(s, f.name) != getattr(base, f.name)}


def reproducer(key: str, s, target: str) -> str:
    """``examples/<key>.py .replace(...) @target``: how to rebuild a drawn schedule."""
    ch = ", ".join(f"{k}={v!r}" for k, v in changes_of(key, s).items())
    return f"examples/{key}.py .replace({ch}) @{target}"


_FUNC = re.compile(r"^(\w+)")


def rule_of(exc) -> str:
    """The validation rule that refused: the raising function's qualified name (its module and the
    function of the rule), e.g. ``validate._p_and_cache`` or ``sm90.knobs.consumers``; budgets from a plan
    give ``plan:<first words>``."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    for fr in reversed(frames):
        path = Path(fr.filename).as_posix()
        m = re.search(r"b200c/(.*)\.py$", path)
        if not m:
            continue
        mod = m.group(1).replace("/", ".").replace("codegen.", "").replace("dsl.", "")
        if fr.name.startswith("_check") or fr.name in ("_fail", "bad", "need", "_need"):
            continue
        if mod in ("errors",):
            continue
        return f"{type(exc).__name__}:{mod}.{fr.name}"
    return f"{type(exc).__name__}:?"


def outcome(s, target: str):
    """``("refused", rule, message)``, ``("generated", GeneratedKernel, None)`` or
    ``("internal", exception type name, message)``."""
    import b200c
    from b200c.errors import ScheduleError

    try:
        b200c.plan(s, target)
    except ScheduleError as e:  # ResourceError and IssueOrderError are ScheduleErrors
        return "refused", rule_of(e), str(e)
    except Exception as e:  # noqa: BLE001 - anything else from validation or the plan is a bug
        return "internal", type(e).__name__, f"(in plan) {e}"
    try:
        return "generated", b200c.generate(s, target), None
    except Exception as e:  # noqa: BLE001 - the plan accepted it: every failure now is a bug
        return "internal", type(e).__name__, str(e)


def source_key(kernel) -> str:
    return hashlib.sha256(kernel.source.encode()).hexdigest()[:16]


def compile_outcome(kernel, workdir: Path) -> dict:
    """nvcc ``-Xptxas -v`` of a generated kernel for its target: the resources dict (registers,
    spill_bytes, stack_frame) or ``{"error": message}``."""
    from b200c.errors import B200cError
    from b200c.nvcc import compile_cuda

    arch = "sm_90a" if kernel.target == "sm90a" else "sm_100a"
    out = Path(workdir) / f"{source_key(kernel)}.cubin"
    try:
        res = compile_cuda(kernel.source, out, "cubin", arch).resources()
    except B200cError as e:
        return {"error": str(e)}
    finally:
        for p in (out, out.with_suffix(".cu")):
            p.unlink(missing_ok=True)
    return res
