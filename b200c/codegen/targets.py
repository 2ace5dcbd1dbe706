"""Code-generation targets and the backend that serves each.

* ``"sm100a"``: native Blackwell B200, the tcgen05 backend (``codegen/tcgen05``).
* ``"emulate"``: the same tcgen05 kernel built for Hopper with a software
  model of tcgen05 (correctness only); same generated source as sm100a.
* ``"sm90a"``: native Hopper H100/H200, the wgmma backend (``codegen/sm90``).

Spellings with an underscore (``"sm_100a"``, ``"sm_90a"``) are accepted.
"""
from __future__ import annotations

from ..errors import TargetError

BACKENDS = {"sm100a": "tcgen05", "emulate": "tcgen05", "sm90a": "sm90"}
_SPELLINGS = {"sm100a": "sm100a", "sm_100a": "sm100a", "emulate": "emulate", "sm90a": "sm90a", "sm_90a": "sm90a"}
DEFAULT_TARGET = "sm100a"


def canonical_target(target: str) -> str:
    """``"sm100a"``, ``"emulate"`` or ``"sm90a"`` for an accepted spelling.

    Raises:
        TargetError: unknown name (the message lists the accepted ones).
    """
    t = str(target).strip().lower()
    if t not in _SPELLINGS:
        raise TargetError(f"unknown target {target!r}; code is generated for 'sm100a' (B200, also 'sm_100a'), "
                          f"'emulate' (the sm100a kernel emulated on Hopper) and 'sm90a' (H100/H200, also 'sm_90a')")
    return _SPELLINGS[t]


def backend_name(target: str) -> str:
    """The backend folder serving ``target``: ``"tcgen05"`` or ``"sm90"``.

    Raises:
        TargetError: unknown target.
    """
    return BACKENDS[canonical_target(target)]


def schedule_target(schedule) -> str:
    """The native target a schedule is written for: ``"sm90a"`` when its knobs
    pass the Hopper backend's rules but not the tcgen05 ones (block_m=64,
    ``p_storage='registers'``, ``pingpong``: examples/hopper), else ``"sm100a"``.
    ``target="auto"`` uses it to pick the kernel on a Hopper GPU. Never raises
    for bad knobs (generation reports them)."""
    from ..errors import ScheduleError
    from .sm90.knobs import RULES as SM90_RULES
    from .tcgen05.knobs import RULES as TCGEN05_RULES

    def passes(rules) -> bool:
        try:
            for rule in rules:
                rule(schedule)
        except ScheduleError:
            return False
        return True

    return "sm90a" if not passes(TCGEN05_RULES) and passes(SM90_RULES) else "sm100a"
