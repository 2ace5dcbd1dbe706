"""The b200c::attention custom op: registration, fake impl, torch.compile tracing (CPU only)."""
from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

import b200c
import b200c.codegen
from b200c.errors import LaunchError, ScheduleError
from b200c.runtime import api, op

BF16 = torch.bfloat16
SCHED = b200c.Schedule(name="op_test")


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def recording_backend(graphs):
    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward  # runs the traced graph on fake inputs: fake impl only

    return backend


def op_nodes(gm):
    targets = (torch.ops.b200c.attention, torch.ops.b200c.attention.default)
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target in targets]


def test_op_registered_with_schema():
    schema = str(torch.ops.b200c.attention.default._schema)
    assert schema == ("b200c::attention(Tensor q, Tensor k, Tensor v, str schedule_json, float softmax_scale, str target, "
                      "bool causal=False, bool deterministic=False, str backward_schedule=\"\") -> Tensor")
    schema = str(torch.ops.b200c.attention_lse.default._schema)
    assert schema == ("b200c::attention_lse(Tensor q, Tensor k, Tensor v, str schedule_json, float softmax_scale, "
                      "str target, bool causal=False, bool deterministic=False, str backward_schedule=\"\") -> (Tensor, Tensor)")
    schema = str(torch.ops.b200c.attention_varlen.default._schema)
    assert schema == ("b200c::attention_varlen(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "
                      "SymInt max_seqlen_q, SymInt max_seqlen_k, str schedule_json, float softmax_scale, str target, "
                      "bool causal=False, bool return_lse=False, bool check_seqlens=True, bool deterministic=False, "
                      "str backward_schedule=\"\") -> (Tensor, Tensor)")
    assert b200c.runtime.attention is api.attention


def test_fake_impl_shapes_and_layout():
    with FakeTensorMode():
        q = torch.empty(2, 256, 4, 128, dtype=BF16, device="cuda").transpose(1, 2)  # (B,S,H,D) memory
        k = torch.empty(2, 4, 384, 128, dtype=BF16, device="cuda")
        out = torch.ops.b200c.attention(q, k, k, SCHED.to_json(), 0.1, "auto")
        assert isinstance(out, FakeTensor)
        assert out.shape == q.shape and out.stride() == q.stride() and out.device == q.device
        assert out.dtype == BF16


def test_fake_impl_on_meta_tensors():
    q = torch.empty(1, 2, 128, 128, dtype=BF16, device="meta")
    out, lse = torch.ops.b200c.attention_lse(q, q, q, SCHED.to_json(), 0.1, "auto", True)
    assert out.device.type == "meta" and out.shape == q.shape
    assert lse.device.type == "meta" and lse.shape == (1, 2, 128) and lse.dtype == torch.float32


def test_fake_impl_validates_shapes():
    with FakeTensorMode():
        q = torch.empty(1, 2, 128, 96, dtype=BF16, device="cuda")
        with pytest.raises(LaunchError, match="head dim D = 96"):
            torch.ops.b200c.attention(q, q, q, SCHED.to_json(), 0.1, "auto")


def test_compile_fullgraph_traces_without_graph_break():
    graphs = []

    def fn(q, k, v):
        return b200c.attention(q, k, v, schedule=SCHED) * 2

    compiled = torch.compile(fn, fullgraph=True, backend=recording_backend(graphs))
    with FakeTensorMode():
        q = torch.empty(2, 4, 256, 128, dtype=BF16, device="cuda")
        kv = torch.empty(2, 512, 4, 128, dtype=BF16, device="cuda").transpose(1, 2)
        out = compiled(q, kv, kv)
        assert isinstance(out, FakeTensor) and out.shape == (2, 4, 256, 128)
    assert len(graphs) == 1
    (node,) = op_nodes(graphs[0])
    _, _, _, sched_json, scale, target, causal = node.args
    assert causal is False
    assert b200c.Schedule.from_json(sched_json) == SCHED
    assert scale == pytest.approx(128 ** -0.5)
    assert target == "auto"


def test_compile_aot_eager_with_explicit_scale_and_target():
    def fn(q):
        return b200c.attention(q, q, q, schedule=SCHED, softmax_scale=0.25, target="emulate")

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    with FakeTensorMode():
        q = torch.empty(1, 2, 128, 128, dtype=BF16, device="cuda")
        assert compiled(q).shape == q.shape


def test_bshd_layout_is_a_view_under_compile():
    graphs = []

    def fn(q, k, v):
        return b200c.attention(q, k, v, schedule=SCHED, layout="bshd")

    compiled = torch.compile(fn, fullgraph=True, backend=recording_backend(graphs))
    with FakeTensorMode():
        q = torch.empty(2, 256, 4, 128, dtype=BF16, device="cuda")  # (B, S, H, D) contiguous
        out = compiled(q, q, q)
        assert out.shape == (2, 256, 4, 128) and out.stride() == q.stride()
    (node,) = op_nodes(graphs[0])
    arg = node.args[0]
    val = arg.meta.get("example_value", arg.meta.get("val"))
    assert tuple(val.shape) == (2, 4, 256, 128)  # the op sees (B, H, S, D) views


def test_layout_name_is_checked():
    q = torch.zeros(1, 2, 128, 128, dtype=BF16)
    with pytest.raises(LaunchError, match="layout='sbhd'"):
        b200c.attention(q, q, q, schedule=SCHED, layout="sbhd")


def test_schedule_file_path(tmp_path):
    f = tmp_path / "s.py"
    f.write_text("import b200c\nschedule = b200c.Schedule(name='from_file', swizzle='128B')\n")
    assert api._schedule_json(str(f)) == b200c.Schedule(name="from_file", swizzle="128B").to_json()
    assert api._schedule_json(f) == api._schedule_json(str(f))
    with pytest.raises(ScheduleError, match="schedule must be a b200c.Schedule or a schedule file path, got int"):
        api._schedule_json(3)


def test_generated_kernel_cached_per_json(monkeypatch):
    calls = []
    monkeypatch.setattr(b200c.codegen, "generate", lambda s, t: calls.append(s) or ("kernel", s.name))
    op.generated_kernel.cache_clear()
    try:
        j = SCHED.to_json()
        assert op.generated_kernel(j) == ("kernel", "op_test")
        assert op.generated_kernel(j) == ("kernel", "op_test")
        assert len(calls) == 1 and calls[0] == SCHED
        op.generated_kernel(SCHED.replace(name="other").to_json())
        assert len(calls) == 2
    finally:
        op.generated_kernel.cache_clear()


# ---- hang reports (host memory only; no driver) --------------------------------------


def fake_loaded(report):
    from pathlib import Path

    from b200c.codegen.launch import LaunchInfo, WaitSite
    from b200c.runtime.build import BuiltKernel
    from b200c.runtime.driver import LoadedKernel

    li = LaunchInfo(name="hangy", threads=128, dynamic_smem_bytes=0, tmem_cols=0, q_stages=1, block_m=128,
                    block_n=128, head_dim=128, persistent=False, tma_box_inner=8, tma_box_rows=128,
                    tma_swizzle="none", tma_l2_promotion="none",
                    wait_sites=(WaitSite(0, "load", "kv_empty"), WaitSite(3, "softmax", "s_full")))
    built = BuiltKernel(Path("/nonexistent.cubin"), li, "emulate", "0" * 64, False)
    return LoadedKernel(built, 0, None, None, None, 132, 160, hang_report=report)


def test_check_hang_names_role_barrier_parity_cta_iteration():
    from b200c.errors import BarrierTimeoutError
    from b200c.runtime.driver import HangReport, check_hang

    r = HangReport()
    lk = fake_loaded(r)
    check_hang(lk)  # flag 0: nothing
    r.flag, r.site, r.parity, r.cta, r.iter, r.work, r.lane_thread = 1, 3, 1, 17, 5, 40, 130
    with pytest.raises(BarrierTimeoutError) as ei:
        check_hang(lk)
    msg = str(ei.value)
    for part in ("'hangy'", "site 3", "role softmax, barrier s_full", "phase parity 1", "CTA 17", "thread 130",
                 "K/V iteration 5", "work item 40", "restart the process"):
        assert part in msg


def test_check_hang_lists_the_other_stuck_waits():
    from b200c.errors import BarrierTimeoutError
    from b200c.runtime.driver import HangReport, HangSite, check_hang

    r = HangReport()
    r.flag, r.site, r.parity, r.cta, r.iter, r.work, r.lane_thread = 1, 0, 0, 0, 1, 0, 128
    r.more = 1
    r.others[0] = HangSite(3, 1, 0, 0, 0, 0)
    with pytest.raises(BarrierTimeoutError) as ei:
        check_hang(fake_loaded(r))
    msg = str(ei.value)
    assert "role load, barrier kv_empty" in msg
    assert "also stuck: role softmax on s_full (parity 1, CTA 0, K/V iteration 0)" in msg


def test_check_hang_emulator_error_codes():
    from b200c.errors import BarrierTimeoutError
    from b200c.runtime.driver import HangReport, check_hang, emulator_errors

    assert emulator_errors()[-16].startswith("Setup:")
    lk = fake_loaded(HangReport(1, -16, 0, 2, 140, 264, 0, 0))
    with pytest.raises(BarrierTimeoutError, match=r"emulator trapped with error -16 \(Setup: .*CTA 2.*restart"):
        check_hang(lk)


def test_attention_generated_validates_first():
    from b200c.runtime import attention_generated

    q = torch.zeros(1, 2, 128, 128, dtype=BF16)
    with pytest.raises(LaunchError, match="tensor q is on cpu"):
        attention_generated(q, q, q, generated=op.generated_kernel(SCHED.to_json()))
    with pytest.raises(LaunchError, match="dtype torch.float32"):
        attention_generated(q.float(), q, q, generated=None)


def test_schedule_file_cached_until_modified(tmp_path):
    import os

    f = tmp_path / "s2.py"
    f.write_text("import b200c\nschedule = b200c.Schedule(name='v1')\n")
    assert '"name": "v1"' in api._schedule_json(f)
    f.write_text("import b200c\nschedule = b200c.Schedule(name='v2')\n")
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert '"name": "v2"' in api._schedule_json(str(f))
    with pytest.raises(ScheduleError, match="does not exist"):
        api._schedule_json(tmp_path / "missing.py")


# ---- compiles: a lock per kernel key ---------------------------------------------------


@pytest.fixture
def slow_builds(monkeypatch):
    """op.loaded_kernel with generation and build/load replaced: ``builds`` records each (schedule name)
    build; ``hook`` (set by the test) runs inside the build, with no lock of the test held."""
    import types

    state = types.SimpleNamespace(builds=[], hook=lambda name: None)
    monkeypatch.setattr(op, "_kernels", {})
    monkeypatch.setattr(op, "_key_locks", {}, raising=False)
    monkeypatch.setattr(op, "device_capability", lambda dev: ((10, 0), "fake GPU"))
    monkeypatch.setattr(op, "generated_kernel", lambda j, target, mods="": b200c.Schedule.from_json(j).name)

    def build_and_load(gen, target, device):
        state.builds.append(gen)
        state.hook(gen)
        return ("loaded", gen)

    monkeypatch.setattr(op, "kernel_for_generated", build_and_load)
    return state


def _in_threads(*fns, timeout=20):
    import threading

    results, errors = [None] * len(fns), []

    def run(i, fn):
        try:
            results[i] = fn()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i, fn), daemon=True) for i, fn in enumerate(fns)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout)
    assert not any(th.is_alive() for th in threads), "a thread is still stuck in loaded_kernel"
    assert not errors, errors
    return results


def test_different_kernels_compile_in_parallel(slow_builds):
    import threading

    both_inside = threading.Barrier(2, timeout=10)  # broken (an error) unless both builds run at once
    slow_builds.hook = lambda name: both_inside.wait()
    a, b = SCHED.replace(name="kernel_a").to_json(), SCHED.replace(name="kernel_b").to_json()
    got = _in_threads(lambda: op.loaded_kernel(a, "sm100a", 0), lambda: op.loaded_kernel(b, "sm100a", 0))
    assert got == [("loaded", "kernel_a"), ("loaded", "kernel_b")]
    assert sorted(slow_builds.builds) == ["kernel_a", "kernel_b"]


def test_one_kernel_compiles_once_while_others_wait(slow_builds):
    import threading
    import time

    inside, release = threading.Event(), threading.Event()

    def hook(name):
        inside.set()
        assert release.wait(10), "the test never released the build"

    slow_builds.hook = hook
    j = SCHED.replace(name="kernel_once").to_json()
    first = threading.Thread(target=lambda: op.loaded_kernel(j, "sm100a", 0), daemon=True)
    first.start()
    assert inside.wait(10)
    waiter_done = []
    waiter = threading.Thread(target=lambda: waiter_done.append(op.loaded_kernel(j, "sm100a", 0)), daemon=True)
    waiter.start()
    time.sleep(0.2)
    assert not waiter_done  # waits for the one build instead of starting its own
    release.set()
    first.join(10)
    waiter.join(10)
    assert waiter_done == [("loaded", "kernel_once")]
    assert slow_builds.builds == ["kernel_once"]
    got = _in_threads(*[lambda: op.loaded_kernel(j, "sm100a", 0)] * 4)  # cached now
    assert got == [("loaded", "kernel_once")] * 4 and slow_builds.builds == ["kernel_once"]


def test_a_failed_build_is_raised_and_tried_again(slow_builds):
    from b200c.errors import BuildError

    def fail_once(name):
        if len(slow_builds.builds) == 1:
            raise BuildError("nvcc failed for kernel 'kernel_retry': error: boom")

    slow_builds.hook = fail_once
    j = SCHED.replace(name="kernel_retry").to_json()
    with pytest.raises(BuildError, match="error: boom"):
        op.loaded_kernel(j, "sm100a", 0)
    assert op.loaded_kernel(j, "sm100a", 0) == ("loaded", "kernel_retry")  # the key's lock was released
    assert slow_builds.builds == ["kernel_retry", "kernel_retry"]
