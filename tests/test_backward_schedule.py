"""Issue 31: the backward's schedule knobs, their validation, the built-in sm90a backward schedules and their
budget plan (no backward kernel is generated yet). Expected byte and register counts are worked out by hand
in the comments, from the tile shapes."""
from __future__ import annotations

import pytest

import b200c
from b200c.dsl.backward_schedule import BackwardSchedule
from b200c.errors import ResourceError, ScheduleError


def test_the_built_in_backward_schedules_fit_their_budgets():
    plans = {d: b200c.plan_backward(b200c.default_backward_schedule(d)) for d in (64, 128, 256)}
    # head dim 128, 64 x 128 tiles, 2 Q/dO stages: k, v 128x128x2 = 32768 each; q, do 2 x 64x128x2 = 32768
    # each; ds two 128x64x2 = 32768 -> 163840; dq (the two warpgroups' 64 x 64 FP32 halves of the visit's dQ,
    # the bulk reduce-add's source) 64x128x4 = 32768 -> 196608; lse 2x64x4 = 512 (then padded to the next 1024)
    # and dpsum 512 -> 198144; 5 barriers of 8 B (K/V full, Q full and empty per stage) -> 198184; + 1024 B of
    # base realignment -> 199208
    assert plans[128].smem_bytes == 199208
    # head dim 64, FA3's 128 x 128: k, v 128x64x2 = 16384 each; q, do 2 x 128x64x2 = 32768 each; ds two
    # 128x128x2 = 65536 -> 163840; dq: the two warpgroups' 64-row halves of the visit's 128 x 64 FP32 dQ 32768
    # -> 196608; lse 2x128x4 = 1024 and dpsum 1024 -> 198656; 40 B of barriers, 1024 slack -> 199720
    assert plans[64].smem_bytes == 199720
    # head dim 256, 64 x 64, 2 stages: k, v 64x256x2 = 32768 each; q, do 2 x 32768 each; ds two 64x64x2 = 16384
    # -> 212992; lse 512 (padded to 1024) and dpsum 512 -> 214528; 40 B of barriers, 1024 slack -> 215592 (a dq
    # region of 64x256x4 = 65536 would not fit in 232448: dQ is added with red.global.add)
    assert plans[256].smem_bytes == 215592
    assert [p.dq_store for p in plans.values()] == ["bulk", "bulk", "red"]
    assert dict(plans[128].offsets) == {"k": 0, "v": 32768, "q": 65536, "do": 98304, "ds": 131072, "dq": 163840,
                                        "lse": 196608, "dpsum": 197632, "barriers": 198144}
    # accumulators per consumer thread (256 threads in two warpgroups): dK + dV = 2 x block_n x D / 256; S + dP
    # = 2 x 64 x 128 / 256; P^T and dS^T as BF16 pairs (the A operands of dV and dK) half that
    assert dict(plans[128].acc_parts) == {"dK + dV": 128, "S + dP": 64, "P^T + dS^T": 32, "dQ": 32}
    # head dim 64: S + dP = 2 x 128 x 128 / 256; each warpgroup's dQ is its 64 rows x 64 columns: 64 x 64 / 128
    assert dict(plans[64].acc_parts) == {"dK + dV": 64, "S + dP": 128, "P^T + dS^T": 64, "dQ": 32}
    # head dim 256: dK and dV split by columns (64 keys x 128 columns per warpgroup), so each warpgroup computes
    # S and dP of all 64 x 64: 2 x 64 x 64 / 128 = 64; dQ its 128 columns: 64 x 128 / 128 = 64
    assert dict(plans[256].acc_parts) == {"dK + dV": 128, "S + dP": 64, "P^T + dS^T": 32, "dQ": 64}
    # peak: dK + dV + S + dP + P^T in the dS loop (P^T, the dV wgmma's A, lives through it while S and dP die as
    # dS^T is made): 64 + 128 + 32 at 64, 128 + 64 + 16 at 128 and 256; dQ comes after S and dP: 64 + 32 + 64,
    # 128 + 32 + 32 with P^T and dS^T still live; 128 + 64 at 256, where dK completes first (at 64 P^T is packed
    # as dS^T is made, so the count is an upper bound there)
    assert {d: p.acc_regs for d, p in plans.items()} == {64: 224, 128: 208, 256: 208}
    # P^T packed after dS^T where dK + dV, S + dP and P^T with 32 registers beside them exceed 240: 64 + 128 + 32
    # + 32 = 256 at 64; 128 + 64 + 16 + 32 = 240 at 128 and 256
    assert {d: p.dv_late for d, p in plans.items()} == {64: True, 128: False, 256: False}
    # dQ's wgmmas queue behind dK's (P^T, dS^T and dQ live together) where 32 registers stay free beside them:
    # 128 + 32 + 32 + 32 = 224 <= 240 at 128; 128 + 32 + 64 + 32 = 256 > 240 at 256: dK completes first there
    assert {d: p.dk_first for d, p in plans.items()} == {64: False, 128: False, 256: True}
    assert "complete before dQ" in plans[256].describe() and "complete before dQ" not in plans[128].describe()
    assert all(p.reg_pool == (128 * (24 + 2 * 240), 384 * 168) and p.threads == 384 for p in plans.values())
    assert "SMEM k 32768 B" in plans[128].describe()
    assert "dQ split by columns" in plans[128].describe() and "dQ split by rows" in plans[64].describe()
    assert "dK, dV split by keys" in plans[128].describe() and "dK, dV split by columns" in plans[256].describe()


def test_fa3_tiles_fit():
    """FlashAttention-3's sm90 tiles in b200c's layout (K, V, the Q / dO ring, two dS^T tiles, LSE and D; P^T
    and dS^T in registers). 128 x 128 at head dim 64 and 64 x 128 at 128 fit (64 x 128 x 64: dK + dV 64, S + dP
    128 and P^T 32: 224 + 16). Its dense 80 x 128 at 128 does not: dK + dV 128, S + dP 80, P^T 20: 228 + 16 over
    240. Nor does its 64 x 80 at 256: 80 keys do not split into two 64-key warpgroups, so dK and dV split by
    columns (2 x 80 x 256 / 256 = 160) and each warpgroup holds S and dP of every key (2 x 64 x 80 / 128 = 80)
    and P^T (20): 260 + 16 (FA3 keeps P and dS in shared memory with swapped operands instead)."""
    for d, m, n in ((64, 128, 128), (128, 64, 128)):
        b200c.plan_backward(BackwardSchedule(head_dim=d, block_m=m, block_n=n))
    with pytest.raises(ResourceError, match=r"need 228 registers per thread \(dK \+ dV 128, S \+ dP 80, "
                                            r"P\^T \+ dS\^T 40, dQ 40; the peak is dK \+ dV 128 with the larger of "
                                            r"S \+ dP \+ P\^T 100 in the dS loop and dQ 40 \+ P\^T \+ dS\^T 40 "
                                            r"after it\) plus 16 for the rest: 244, over consumer_regs = 240"):
        b200c.plan_backward(BackwardSchedule(head_dim=128, block_m=80, block_n=128))
    with pytest.raises(ResourceError, match=r"need 260 registers per thread \(dK \+ dV 160, S \+ dP 80, "
                                            r"P\^T \+ dS\^T 40, dQ 64; .* dQ 64 after it\)"):
        b200c.plan_backward(BackwardSchedule(head_dim=256, block_m=64, block_n=80, q_stages=1, mma_warpgroups=2))


def test_register_refusal_advises_more_warpgroups_only_where_they_fit():
    """One consumer warpgroup holding dK and dV of a 128-key tile (256 registers per thread at head dim 128): the
    refusal names mma_warpgroups = 2, whose plan fits (the built-in schedule); where the schedule with one more
    warpgroup is itself refused (three warpgroups do not split 128 keys or 128 columns into wgmma's 64-row M
    blocks), it only says to lower the tiles."""
    one = b200c.default_backward_schedule(128).replace(mma_warpgroups=1, name="one")
    with pytest.raises(ResourceError, match=r"over consumer_regs = 240; use mma_warpgroups = 2 \(its budgets fit"):
        b200c.plan_backward(one)
    b200c.plan_backward(one.replace(mma_warpgroups=2))  # the advice holds
    two = BackwardSchedule(head_dim=128, block_m=80, block_n=128)  # FA3's dense 80 x 128: 244 of 240
    with pytest.raises(ResourceError, match=r"over consumer_regs = 240; lower block_n") as e:
        b200c.plan_backward(two)
    assert "mma_warpgroups" not in str(e.value)
    with pytest.raises(ScheduleError, match=r"do not split over 3 warpgroups"):
        b200c.plan_backward(two.replace(mma_warpgroups=3))


@pytest.mark.parametrize("changes, words", [
    (dict(head_dim=96), "head_dim = 96"),
    (dict(block_m=72), "block_m = 72; use a multiple of 16"),
    (dict(block_n=272), "block_n = 272"),
    (dict(block_n=True), "block_n must be an int"),
    (dict(q_stages=3), "q_stages = 3"),
    (dict(mma_warpgroups=4), "mma_warpgroups = 4"),
    (dict(head_dim=64, block_n=48, mma_warpgroups=2), "do not split over 2 warpgroups"),
    (dict(head_dim=64, block_n=32, mma_warpgroups=2), "64-row M blocks"),  # wgmma's M is 64 per warpgroup
    (dict(dq_reduction="ordered"), "dq_reduction = 'ordered'"),
    (dict(consumer_regs=244), "consumer_regs = 244"),
    (dict(producer_regs=16), "producer_regs = 16"),
    (dict(persistent=1), "persistent must be a bool"),
])
def test_invalid_knobs_are_refused_by_name(changes, words):
    with pytest.raises(ScheduleError, match=words.replace("(", r"\(").replace(")", r"\)")):
        BackwardSchedule().replace(**changes).validate()


def test_budgets_are_refused_with_what_to_change():
    # 128 x 128 at head dim 128, 2 stages: 32768 x 2 (k, v) + 65536 x 2 (q, do) + 65536 (two dS^T tiles) = 262144
    with pytest.raises(ResourceError, match="lower block_m, block_n or q_stages"):
        b200c.plan_backward(BackwardSchedule(block_m=128, block_n=128))
    # block_n 256 at head dim 128: dK + dV = 2 x 256 x 128 / 256 = 256 registers per thread; S + dP = 2 x 16 x 256 / 256
    # = 32, P^T + dS^T 16, dQ = 16 x 128 / 256 = 8: 256 + max(32 + 8, 8) = 296
    with pytest.raises(ResourceError, match=r"need 296 registers per thread \(dK \+ dV 256, S \+ dP 32, "
                                            r"P\^T \+ dS\^T 16, dQ 8;"):
        b200c.plan_backward(BackwardSchedule(block_m=16, block_n=256))
    # 128 x (24 + 2 x 248) = 66560 > 384 x 168 = 64512
    with pytest.raises(ResourceError, match="take 66560 registers"):
        b200c.plan_backward(BackwardSchedule(consumer_regs=248))
    with pytest.raises(ScheduleError, match="no backward design yet"):
        b200c.plan_backward(BackwardSchedule(), "sm100a")


def test_default_backward_schedule_refusals_and_json():
    with pytest.raises(ScheduleError, match="only 'sm90a'"):
        b200c.default_backward_schedule(128, target="sm100a")
    with pytest.raises(ScheduleError, match="head dim 80"):
        b200c.default_backward_schedule(80)
    for bad in (True, 128.0, [1], "128"):
        with pytest.raises(ScheduleError, match="use the int 64, 128 or 256"):
            b200c.default_backward_schedule(bad)
    with pytest.raises(ScheduleError, match="takes a BackwardSchedule"):
        b200c.plan_backward(b200c.default_schedule(128, target="sm90a"))
    with pytest.raises(ScheduleError, match="an object of knobs, got list"):
        BackwardSchedule.from_json("[1, 2]")
    s = b200c.default_backward_schedule(256).replace(dq_reduction="deterministic", persistent=True)
    assert BackwardSchedule.from_json(s.to_json()) == s
    with pytest.raises(ScheduleError, match="did you mean 'block_n'"):
        s.replace(blockn=64)
    with pytest.raises(ScheduleError, match="no field 'kv_stages'"):
        BackwardSchedule.from_json('{"kv_stages": 2}')
