"""The Hopper (sm90a) backend at compile time: the example progression (goldens,
one knob step apart, the sections each stage changes), the knobs each target
refuses, the issue-order mapping, the protocol verifier on ping-pong and the
shared K/V ring, and profiling builds."""
import dataclasses
import re
from pathlib import Path

import pytest
from msgspec.structs import replace

import b200c
from b200c import IssueOrderError, ProtocolError, ResourceError, ScheduleError, TargetError
from b200c.codegen import generate, lower, make_plan
from b200c.codegen.ir import Arrive, NamedBarArrive
from b200c.codegen.verify import verify
from b200c.dsl.issue_order import parse_issue_order
from conftest import HOPPER_EXAMPLES
from test_neighbour_diff import sections

GOLDEN = Path(__file__).parent / "golden" / "hopper"
H = {p.stem[:3]: p for p in HOPPER_EXAMPLES}


def _load(key):
    return b200c.load_schedule_file(H[key])


# ---- the progression ------------------------------------------------------------------------

@pytest.mark.parametrize("example", HOPPER_EXAMPLES, ids=lambda p: p.stem)
def test_hopper_golden(example, generated_sm90, request):
    src = generated_sm90[example.stem].source
    golden = GOLDEN / f"{example.stem}.cu"
    if request.config.getoption("--update-golden"):
        GOLDEN.mkdir(parents=True, exist_ok=True)
        golden.write_text(src)
        pytest.skip(f"rewrote hopper/{golden.name}")
    assert golden.exists(), f"no golden file {golden}; run pytest --update-golden and review it"
    if src != golden.read_text():
        import difflib

        diff = "".join(list(difflib.unified_diff(golden.read_text().splitlines(True), src.splitlines(True),
                                                 "golden", "generated", n=1))[:60])
        pytest.fail(f"{example.name} differs from hopper/{golden.name}:\n{diff}")


def test_every_hopper_example_has_a_golden_file():
    assert {p.stem for p in HOPPER_EXAMPLES} == {p.stem for p in GOLDEN.glob("*.cu")}
    assert len(HOPPER_EXAMPLES) >= 8


def test_progression_is_one_replace_apart():
    """Each example loads the previous one and changes the knobs its docstring names."""
    prev = None
    for p in HOPPER_EXAMPLES:
        s = b200c.load_schedule_file(p)
        assert s.blog_stage == int(p.stem[1:3])
        if prev is not None:
            assert f'with_name("{prev.stem}.py")' in p.read_text(), p.name
            changed = {f.name for f in dataclasses.fields(s) if getattr(s, f.name) != getattr(ps, f.name)}
            assert changed - {"name", "blog_stage"}, f"{p.stem} changes nothing"
        prev, ps = p, s


# stage -> sections (besides the header) its change may touch
EXPECTED = {
    2: {"launch", "plan", "role cta", "role load", "role consumer", "entry"},
    3: {"launch", "plan", "role load", "role consumer", "entry"},
    4: {"launch", "plan", "role load", "entry"},
    5: {"plan", "role consumer"},
    6: {"role load", "role consumer"},
    7: {"context", "softmax", "entry"},
    8: {"softmax"},
    9: {"softmax"},
    # softmax at 10 and 11: the masked tile's column compare takes the form ptxas keeps spill-free, relative to the
    # thread's first column for one-CTA-per-item kernels over 128 keys (b200c/codegen/sm90/lower.py)
    10: {"launch", "plan", "mma", "softmax"},
    11: {"launch", "plan", "context", "role load", "role consumer", "entry", "softmax"},  # context: serpentine rounds
}


@pytest.mark.parametrize("i", range(1, len(HOPPER_EXAMPLES)), ids=lambda i: HOPPER_EXAMPLES[i].stem)
def test_hopper_neighbour_diff_is_confined(i, generated_sm90):
    prev, cur = HOPPER_EXAMPLES[i - 1], HOPPER_EXAMPLES[i]
    a, b = sections(generated_sm90[prev.stem].source), sections(generated_sm90[cur.stem].source)
    changed = {k for k in set(a) | set(b) if a.get(k) != b.get(k)} - {"header"}
    assert changed == EXPECTED[int(cur.stem[1:3])], f"{prev.stem} -> {cur.stem} changed {sorted(changed)}"


def test_stage_code_lands_where_the_stage_says():
    src = {p.stem[:3]: generate(b200c.load_schedule_file(p), "sm90a").source for p in HOPPER_EXAMPLES}
    assert "named_bar_sync(NBAR_SLOT_FREE" in src["h01"] and "role_load" not in src["h01"]
    assert "setmaxnreg_inc<240>" in src["h03"] and "setmaxnreg_dec<24>" in src["h03"]
    assert "NBAR_TURN" not in src["h04"] and "named_bar_sync(NBAR_TURN + q" in src["h05"]
    assert "wgmma_wait<1>();  // QK(i+1) done" in src["h06"] and "wgmma_wait<1>" not in src["h05"]
    assert "token K(i + 1)" in src["h06"]  # the producer loads K ahead of V
    assert "ex2_approx_ftz(x)" in src["h07"] and "__expf(x)" in src["h06"]
    assert "exp2_poly(x)" in src["h08"] and "exp2_poly(x)" not in src["h09"]
    assert "if (!st.rescale) return;" in src["h09"] and ">= 8.0f" in src["h09"]
    assert "wgmma_ss_n<176>" in src["h10"] and "for (int work = blockIdx.x; work < c.num_work" in src["h11"]


def test_plan_of_the_last_stage():
    plan = make_plan(_load("h11"), "sm90a")
    assert plan.backend == "sm90" and plan.threads == 384 and plan.tile.block_m == 64
    assert plan.tma.rows == 64 and plan.kv_tma.rows == 176
    assert {b.name for b in plan.barriers} == {"q_full", "q_free", "kv_full", "kv_empty"}
    assert plan.barrier("kv_empty").arrivals == 8 and plan.barrier("kv_empty").ring
    assert plan.named_barrier("turn").threads == 256
    li = generate(_load("h11"), "sm90a").launch
    assert (li.tma_box_rows, li.kv_box_rows, li.block_m, li.q_stages) == (64, 176, 64, 2)
    assert li.grid(2, 16, 16384, 132) == 132 and li.num_work_items(8, 16, 4096) == 8 * 16 * 32


# ---- targets and refusals ----------------------------------------------------------------------

def test_unknown_target():
    with pytest.raises(TargetError, match="unknown target 'sm80'"):
        generate(_load("h01"), "sm80")


def test_default_target_is_unchanged():
    s = b200c.load_schedule_file(Path(__file__).parents[1] / "examples/07_compute_pipeline.py")
    assert generate(s).source == generate(s, "sm100a").source == generate(s, "emulate").source


REFUSED_ON_SM90 = [
    ("p-tmem", dict(p_storage="tmem"), ["p_storage='tmem'", "sm90a", "no Tensor Memory", "p_storage='registers'"]),
    ("correction", dict(correction_warps=4, correction_regs=80), ["correction_warps=4", "sm90a"]),
    ("early-pv", dict(early_pv_cols=32), ["early_pv_cols=32", "sm90a"]),
    ("s-cache", dict(s_cache_cols=64), ["s_cache_cols=64", "sm90a"]),
    ("f32x2", dict(f32x2=True), ["f32x2=True", "sm_100+"]),
    ("max3", dict(rowmax_max3=True), ["rowmax_max3=True"]),
    ("swizzle", dict(swizzle="none"), ["swizzle='none'", "swizzle='128B'"]),
    ("block-m", dict(block_m=128), ["block_m=128", "block_m=64"]),
    ("block-n", dict(block_n=208), ["block_n=208", "192"]),
    ("q-stages", dict(q_stages=3), ["q_stages=3", "65536"]),
    ("regs-missing", dict(softmax_regs=None, other_regs=None), ["q_stages=2", "softmax_regs", "other_regs"]),
    ("paired", dict(kv_tokens="paired", kv_stages=2), ["kv_tokens='paired'", "kv_tokens='separate'"]),
    ("orders-differ", dict(issue_order="Q0K(i+1) P0V(i) P1V(i) Q1K(i+1)"), ["each Q stage", "stage 1"]),
]


@pytest.mark.parametrize("change,needles", [c[1:] for c in REFUSED_ON_SM90], ids=[c[0] for c in REFUSED_ON_SM90])
def test_sm90_refuses(change, needles):
    with pytest.raises(ScheduleError) as e:
        make_plan(_load("h09").replace(**change), "sm90a")
    for n in needles:
        assert n in str(e.value), (n, str(e.value))


REFUSED_ON_SM100 = [
    ("pingpong", dict(pingpong=True), ["pingpong=True", "Hopper"]),
    ("block-n", dict(block_n=176), ["block_n=176", "target='sm90a'"]),
    ("p-registers", dict(p_storage="registers"), ["p_storage='registers'", "p_storage='tmem'"]),
]


@pytest.mark.parametrize("change,needles", [c[1:] for c in REFUSED_ON_SM100], ids=[c[0] for c in REFUSED_ON_SM100])
def test_sm100_refuses_hopper_knobs(change, needles):
    s = b200c.load_schedule_file(Path(__file__).parents[1] / "examples/07_compute_pipeline.py").replace(**change)
    with pytest.raises(ScheduleError) as e:
        make_plan(s)
    for n in needles:
        assert n in str(e.value), (n, str(e.value))


def test_pingpong_needs_two_consumers():
    with pytest.raises(ScheduleError, match="pingpong=True needs q_stages=2"):
        make_plan(_load("h02").replace(pingpong=True), "sm90a")


def test_smem_budget_on_hopper():
    with pytest.raises(ResourceError, match=r"dynamic SMEM needs \d+ of 232448 bytes.*kv_stages <= 4 fits"):
        make_plan(_load("h10").replace(block_n=192, kv_stages=5), "sm90a")


# ---- issue orders ------------------------------------------------------------------------------

def test_qk_ahead_is_legal_only_without_aliasing():
    text = "Q0K(i+1) P0V(i) Q1K(i+1) P1V(i)"
    with pytest.raises(IssueOrderError, match="overwrites S0/P0"):
        parse_issue_order(text, 2, "separate", 4)  # tcgen05: P lives over S in TMEM
    o = parse_issue_order(text, 2, "separate", 4, p_aliases_s=False)
    assert o.load_sequence() == ((("K", 0),), (("K", 1), ("V", 0)), (("V", 0),))
    # tokens in first-use order: K0 K1 V0 K2 V1 ... still fit two slots
    parse_issue_order(text, 2, "separate", 2, p_aliases_s=False)


@pytest.mark.parametrize("order,wait1", [("Q0K(i) P0V(i) Q1K(i) P1V(i)", False),
                                         ("Q0K(i+1) P0V(i) Q1K(i+1) P1V(i)", True),
                                         ("P0V(i) Q0K(i+1) P1V(i) Q1K(i+1)", False)])
def test_three_per_stage_orders(order, wait1):
    s = _load("h05").replace(issue_order=order)
    src = generate(s, "sm90a").source
    assert ("wgmma_wait<1>" in src) == wait1
    assert ("prologue: QK(0)" in src) == (order != "Q0K(i) P0V(i) Q1K(i) P1V(i)")


# ---- the verifier on Hopper protocols -----------------------------------------------------------

def _map(body, fn):
    out = []
    for n in body:
        if getattr(n, "body", ()):
            n = replace(n, body=tuple(_map(n.body, fn)))
        out.extend(fn(n))
    return tuple(out)


def _edit(ir, role, fn):
    return replace(ir, roles=tuple(replace(r, body=_map(r.body, fn)) if r.name == role else r
                                               for r in ir.roles))


def _ir(key):
    s = _load(key)
    from b200c.codegen import sm90

    return sm90.lower(s, make_plan(s, "sm90a"))


@pytest.mark.parametrize("key", sorted(H))
def test_hopper_examples_verify(key):
    verify(_ir(key))


def test_missing_turn_pass_deadlocks():
    """A consumer that never passes the turn after its epilogue PV: the other one waits forever."""
    ir = _ir("h06")
    passes = []

    def find(nodes):
        for n in nodes:
            if isinstance(n, NamedBarArrive) and n.index == "1 - q":
                passes.append(n)
            find(n.children())

    find(next(r for r in ir.roles if r.name == "consumer").body)
    last = passes[-1]  # the epilogue's (nodes are compared by identity below)
    ir = _edit(ir, "consumer", lambda n: [] if n is last else [n])
    with pytest.raises(ProtocolError, match=r"deadlock: .*bar.sync on named barrier turn\[[01]\]"):
        verify(ir)


def test_extra_turn_is_rejected():
    ir = _edit(_ir("h05"), "consumer", lambda n: [n, n] if isinstance(n, NamedBarArrive) and n.index == "0" else [n])
    with pytest.raises(ProtocolError, match="named barrier turn"):
        verify(ir)


def test_consumer_release_dropped_is_rejected():
    ir = _edit(_ir("h04"), "consumer",
               lambda n: [] if isinstance(n, Arrive) and n.barrier == "kv_empty" and n.index == "v_slot" else [n])
    with pytest.raises(ProtocolError, match="kv_empty"):
        verify(ir)


# ---- profiling builds --------------------------------------------------------------------------

def test_profiling_build_has_stamps():
    g = generate(_load("h11"), "sm90a", profile=True)
    assert g.launch.trace_tracks == ("producer (load warp)", "consumer 0", "consumer 1")
    names = {n for n, _ in g.launch.trace_events}
    assert {"wait K", "wait V", "wait turn", "softmax", "wait kv_empty", "epilogue"} <= names
    assert "trace_stamp(trace_writer, trace_track, trace_n," in g.source
    assert "constexpr int TRACE_TRACKS = 3;" in g.source
    plain = generate(_load("h11"), "sm90a").source
    assert "trace_stamp(trace_writer" not in plain and "TRACE_TRACKS" not in plain
    assert g.launch.from_json(g.launch.to_json()) == g.launch


def test_tcgen05_has_no_stamps_yet():
    s = b200c.load_schedule_file(Path(__file__).parents[1] / "examples/14_persistent.py")
    with pytest.raises(TargetError, match="sm90a only"):
        generate(s, "sm100a", profile=True)


def test_ir_text_of_a_hopper_kernel():
    text = lower(_load("h06"), target="sm90a").text()
    assert "role consumer (q=0: warps 4-7, q=1: warps 8-11, setmaxnreg 240)" in text
    assert "bar.sync turn[q]" in text and "fn softmax_tile: expf; always rebase" in text
    assert re.search(r"for i in \[0, w\.n_kv - 1\)\s+// K/V tokens in the consumers' order of use: K\(i\+1\) V\(i\)",
                     text)


# ---- the runtime picks and builds the Hopper kernel (device and build replaced) ----------------

def test_auto_on_hopper_generates_and_builds_sm90a(monkeypatch):
    from b200c.runtime import driver, op

    monkeypatch.setattr(op, "device_capability", lambda dev: ((9, 0), "H200 (stand-in)"))
    seen = {}

    def fake_build(gen, target):
        seen["target"], seen["gen_target"], seen["source"] = target, gen.target, gen.source
        return "built"

    import importlib

    monkeypatch.setattr(importlib.import_module("b200c.runtime.build"), "build", fake_build)
    monkeypatch.setattr(driver, "load", lambda built, dev: ("loaded", built))
    op.generated_kernel.cache_clear()
    op._kernels.clear()
    try:
        lk = op.loaded_kernel(_load("h11").to_json(), "auto", 0)
    finally:
        op.generated_kernel.cache_clear()
        op._kernels.clear()
    assert lk == ("loaded", "built") and seen["target"].name == "sm90a" and seen["gen_target"] == "sm90a"
    assert "wgmma_qk(" in seen["source"]
    # a B200 schedule on Hopper with auto: refused, naming the emulation and how to ask for it; asked for by
    # name, the emulated sm100a kernel (correctness only)
    ex14 = b200c.load_schedule_file(Path(__file__).parents[1] / "examples/14_persistent.py").to_json()
    with pytest.raises(b200c.UnsupportedDeviceError, match="runs only emulated .*pass target='emulate'"):
        op.loaded_kernel(ex14, "auto", 0)
    op.loaded_kernel(ex14, "emulate", 0)
    assert seen["target"].name == "emulate" and seen["gen_target"] != "sm90a"
    # a Hopper schedule named for the emulation target: refused with the knobs that mean nothing there
    with pytest.raises(ScheduleError, match="sm100a"):
        op.loaded_kernel(_load("h11").to_json(), "emulate", 0)
    op._kernels.clear()
    op.generated_kernel.cache_clear()


def test_generated_target_must_match_the_build_target(monkeypatch):
    from b200c import UnsupportedDeviceError
    from b200c.runtime import op

    monkeypatch.setattr(op, "device_capability", lambda dev: ((9, 0), "H200 (stand-in)"))
    g = generate(_load("h07"), "sm90a")
    with pytest.raises(UnsupportedDeviceError, match="generated for target 'sm90a' but the build target is 'emulate'"):
        op.kernel_for_generated(g, "emulate", 0)


def test_tensor_map_rows_per_tensor(monkeypatch):
    """K and V maps use block_n-row boxes, Q maps 64-row boxes."""
    import ctypes

    import torch

    from b200c.runtime import driver

    calls = []

    class FakeCu:
        class CUresult:
            CUDA_SUCCESS = 0

        class CUtensorMapDataType:
            CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9

        class CUtensorMapInterleave:
            CU_TENSOR_MAP_INTERLEAVE_NONE = 0

        class CUtensorMapSwizzle:
            CU_TENSOR_MAP_SWIZZLE_128B = 3

        class CUtensorMapL2promotion:
            CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3

        class CUtensorMapFloatOOBfill:
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0

        cuuint64_t = staticmethod(int)
        cuuint32_t = staticmethod(int)

        @staticmethod
        def cuTensorMapEncodeTiled(*a):
            calls.append(a[5])
            return 0, FakeMap()

    class FakeMap:  # 128 bytes the driver workaround may patch
        buf = ctypes.create_string_buffer(128)

        def getPtr(self):
            return ctypes.addressof(self.buf)

    monkeypatch.setattr(driver, "_cu", lambda: FakeCu)
    monkeypatch.setattr(driver, "driver_version", lambda: 13000)
    li = generate(_load("h10"), "sm90a").launch
    t = torch.zeros(1, 2, 256, 128, dtype=torch.bfloat16)
    for name in ("q", "k", "v"):
        driver.encode_tensor_map(name, t, li)
    assert [c[1] for c in calls] == [64, 176, 176] and all(c[0] == 64 for c in calls)


def test_a_target_refuses_what_its_kernels_do_not_compute():
    """The runtime refuses the features a target's record does not list (here a copy of sm90a's record
    without them; sm90a itself now computes all four), naming each and a target of the device that does."""
    from types import SimpleNamespace

    import msgspec

    from b200c.codegen.targets import resolve
    from b200c.errors import LaunchError
    from b200c.runtime.launcher import check_capabilities

    full = resolve("sm90a")
    assert full.caps.causal and full.caps.gqa and full.caps.lse and full.caps.varlen
    assert full.caps.head_dims == (64, 128, 256)
    dense = msgspec.structs.replace(full, name="dense_only", caps=msgspec.structs.replace(
        full.caps, causal=False, gqa=False, lse=False, varlen=False))
    check_capabilities(SimpleNamespace(target=dense), False, False, False, False)  # dense, non-causal: fine
    for args, word in (((True, False, False, False), "causal=True"), ((False, True, False, False), "return_lse"),
                       ((False, False, True, False), "GQA"), ((False, False, False, True), "varlen")):
        with pytest.raises(LaunchError, match=word) as e:
            check_capabilities(SimpleNamespace(target=dense), *args)
        assert "target='sm90a'" in str(e.value)  # a target of this device that computes it
    check_capabilities(SimpleNamespace(target=full), True, True, True, True)


def test_attention_runs_a_hopper_schedule_on_sm90a():
    """b200c.attention with a Hopper schedule (explicit sm90a and auto) reaches a launch; the schedule check
    before the tensors uses the schedule's own target (the first H200 run failed there: it checked sm100a)."""
    import torch

    from b200c.errors import LaunchError
    from b200c.runtime import fake_driver

    q = torch.zeros(1, 2, 300, 128, dtype=torch.bfloat16)
    h11 = str(Path(__file__).parents[1] / "examples/hopper/h11_persistent.py")
    with fake_driver.install(target="sm90a") as fd:
        for target in ("sm90a", "auto"):
            out = b200c.attention(q, q, q, schedule=h11, target=target)
            assert out.shape == q.shape
        assert len(fd.launches) == 2
        out, lse = b200c.attention(q, q[:, :1], q[:, :1], schedule=h11, target="sm90a", causal=True, return_lse=True)
        assert out.shape == q.shape and lse.shape == (1, 2, 300) and len(fd.launches) == 3
        L = fd.launches[-1]
        assert L.params["causal"] == 1 and L.params["heads_kv"] == 1 and L.params["pack_heads"] == 1  # GQA packed
        assert L.params["lse"] == lse.data_ptr()


def test_kv_maps_are_cached_per_box_rows():
    """Two kernels with different block_n on the same tensors: each gets K/V maps of its own box rows (the
    first H200 hopper job hung at block_n=176: the tensor-map cache handed it the 128-row maps of h09)."""
    import torch

    from b200c.runtime import fake_driver

    q, k, v = (torch.zeros(1, 2, 512, 128, dtype=torch.bfloat16) for _ in range(3))
    ex = Path(__file__).parents[1] / "examples/hopper"
    with fake_driver.install(target="sm90a") as fd:
        for name, rows in (("h09_lazy_rescale.py", 128), ("h10_block_n_176.py", 176)):
            n = len(fd.encodes)
            b200c.attention(q, k, v, schedule=str(ex / name), target="sm90a")
            by_addr = {e[0]: e[4] for e in fd.encodes[n:]}
            assert by_addr.get(k.data_ptr()) == rows and by_addr.get(v.data_ptr()) == rows, (name, fd.encodes[n:])


def test_short_key_sequences_take_smaller_kv_tiles():
    """A dense call without a schedule whose keys the preset's K/V tiles would mostly pad (cross-attention to
    a few hundred text or audio tokens) runs the short-K/V preset: the padded key counts worked out by hand
    (ceil(S_kv / block_n) * block_n; the short tiles when the preset's count is > 1.15x theirs)."""
    import numpy as np

    from b200c import mods
    from b200c.dsl import presets
    from b200c.dsl.mods import trace_mods

    S, F = "short", "few"
    cases = {  # (head dim, S_kv): which preset -- preset tiles 224 / 176 / 80 rows, short ones 128 / 128 / 64;
        # at head dim 64 up to 2 x 128 keys the few-K/V preset (one warpgroup per CTA)
        (64, 251): F,        # 448 against 256 keys, within two 128-row tiles
        (64, 1): F,          # 224 against 128
        (64, 256): F,        # 448 against 256
        (64, 200): None,     # 224 against 256: one of the preset's tiles, no padding to save
        (64, 257): S,        # 448 against 384: past two 128-row tiles
        (64, 1024): None,    # 1120 against 1024
        (64, 512): S,        # 672 against 512
        (64, 1121): None,    # 1344 against 1152, but past 4 of the preset's tiles (896 keys)
        (128, 251): S,       # 352 against 256 (no few-K/V preset at head dim 128)
        (128, 300): None,    # 352 against 384
        (128, 1024): None,   # 1056 against 1024
        (128, 1): S,         # 176 against 128
        (256, 251): S,       # 320 against 256
        (256, 77): None,     # 80 against 128
        (256, 4096): None,   # 4160 against 4096
    }
    for (d, n), kind in cases.items():
        s = b200c.default_schedule(d, target="sm90a", seq_kv=n)
        want = {S: presets.HOPPER_SHORT_KV_PRESETS, F: presets.HOPPER_FEW_KV_PRESETS,
                None: presets.HOPPER_PRESETS}[kind][d]
        assert s == want, (d, n, s.name)
        if kind != F:  # the short presets change the tiles only
            assert s.replace(name="x", block_n=0) == presets.HOPPER_PRESETS[d].replace(name="x", block_n=0)
    few = presets.HOPPER_FEW_KV_PRESETS[64]
    assert (few.block_n, few.warp_specialized, few.q_stages, few.persistent) == (128, False, 1, False)
    for n in (None, 0):
        assert b200c.default_schedule(64, target="sm90a", seq_kv=n) == presets.HOPPER_PRESETS[64]
    assert b200c.default_schedule(64, target="sm90a", seq_kv=np.int64(251)) == presets.HOPPER_FEW_KV_PRESETS[64]
    assert b200c.default_schedule(64, target="sm90a", seq_kv=np.int64(300)) == presets.HOPPER_SHORT_KV_PRESETS[64]
    for bad in (-3, 251.0, "251", True):
        with pytest.raises(ScheduleError, match="seq_kv"):
            b200c.default_schedule(64, target="sm90a", seq_kv=bad)
    assert b200c.default_schedule(64, target="sm90a", mods=True, seq_kv=251) == presets.HOPPER_MOD_PRESETS[64]
    alibi, _ = trace_mods(score_mod=mods.alibi(mods.alibi_slopes(2)))
    alibi = replace(alibi, small_indices=True)  # light: the dense preset, whatever the key length
    assert b200c.default_schedule(64, target="sm90a", mods=alibi, seq_kv=251) == presets.HOPPER_PRESETS[64]
    assert b200c.default_schedule(64, target="sm100a", seq_kv=251) == presets.PRESETS[64]  # B200: one per head dim


def test_short_key_calls_launch_the_short_tiles():
    """The calls without a schedule pick the short-K/V preset from S_kv (attention, the SDPA drop-in, and the
    graph constant under torch.compile); an explicit schedule and calls with a mask keep theirs."""
    import msgspec
    import torch

    from b200c.dsl import presets
    from b200c.runtime import api, fake_driver

    q = torch.zeros(1, 2, 300, 64, dtype=torch.bfloat16)
    short, few, long_ = (torch.zeros(1, 2, n, 64, dtype=torch.bfloat16) for n in (300, 251, 4096))
    with fake_driver.install(target="sm90a") as fd:
        for kv, name in ((short, "hopper_short_kv_d64"), (few, "hopper_few_kv_d64"), (long_, "hopper_default_d64")):
            b200c.attention(q, kv, kv, target="sm90a")
            b200c.scaled_dot_product_attention(q, kv, kv, target="sm90a")
            b200c.attention(q.transpose(1, 2), kv.transpose(1, 2), kv.transpose(1, 2), layout="bshd", target="sm90a")
            assert [L.kernel.name for L in fd.launches[-3:]] == [name] * 3
        b200c.attention(q, few, few, schedule=presets.HOPPER_D64, target="sm90a")
        assert fd.launches[-1].kernel.name == "hopper_default_d64"
        b200c.scaled_dot_product_attention(q, few, few, attn_mask=torch.ones(300, 251, dtype=torch.bool),
                                           target="sm90a")
        assert fd.launches[-1].kernel.name == "hopper_mods_d64"
    traced = msgspec.json.decode(api._traced_json(q, None, "sm90a", 300))
    assert (traced["name"], traced["block_n"]) == ("hopper_short_kv_d64", 128)
    traced = msgspec.json.decode(api._traced_json(q, None, "sm90a", 251))
    assert (traced["name"], traced["block_n"], traced["warp_specialized"]) == ("hopper_few_kv_d64", 128, False)
    assert msgspec.json.decode(api._traced_json(q, None, "sm90a", None))["name"] == "hopper_default_d64"
