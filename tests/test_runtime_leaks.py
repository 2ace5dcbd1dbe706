"""Refused and fallen-back calls keep nothing alive, and the SDPA drop-in never hides a failure of b200c
(issue 33): a refusal is raised as a new exception per call (a cached instance raised again would grow its
traceback by every call's frames and keep their tensors alive); a BuildError reaches the caller with nvcc's
message; every eager fallback says so (CPU only; the fake driver stands in for the GPU)."""
from __future__ import annotations

import dataclasses
import gc
import traceback
import warnings
import weakref

import pytest
import torch

import b200c
from b200c.errors import BuildError, FallbackWarning, ResourceError
from b200c.runtime import fake_driver, op, sdpa

BF16 = torch.bfloat16
D128 = b200c.default_schedule(128)  # two Q stages: cannot hold D = 256 (768 of 512 TMEM columns)


def t(b=1, h=2, s=128, d=128, dtype=BF16):
    return torch.randn(b, h, s, d).to(dtype)


@pytest.fixture
def fd():
    with fake_driver.install() as f:
        yield f


@pytest.fixture(autouse=True)
def _fresh():
    sdpa._warned.clear()
    sdpa.calls.clear()
    yield
    sdpa.calls.clear()


def alive(refs) -> int:
    gc.collect()
    return sum(r() is not None for r in refs)


# ---- refused calls ---------------------------------------------------------------------------


def _refused_attention(q):
    b200c.attention(q, q, q, schedule=D128)


def _refused_op(q):  # through the registered custom op (the dispatcher, the op's real impl)
    torch.ops.b200c.attention(q, q, q, D128.to_json(), 0.1, "auto")


@pytest.mark.parametrize("call", [_refused_attention, _refused_op], ids=["b200c.attention", "torch.ops.b200c"])
def test_refused_calls_keep_no_input_alive(fd, call):
    refs, depths = [], []
    for _ in range(5):
        q = t(d=256)
        refs.append(weakref.ref(q))
        with pytest.raises(ResourceError, match="768 of 512 TMEM columns") as ei:
            call(q)
        depths.append(len(traceback.extract_tb(ei.value.__traceback__)))  # this call's frames only, not grown
        del q, ei
    assert alive(refs) == 0
    assert depths == [depths[0]] * 5, depths
    assert not fd.launches


def test_cached_refusal_is_a_new_exception_per_call():
    j = D128.to_json()
    raised = []
    for _ in range(3):
        try:
            op.specialized_json(j, 256)
        except ResourceError as e:
            raised.append(e)
    a, b, c = raised
    assert a is not b and b is not c
    assert str(a) == str(b) == str(c) and "D = 256" in str(a)
    assert len(traceback.extract_tb(c.__traceback__)) == len(traceback.extract_tb(a.__traceback__))


# ---- fallen-back calls -----------------------------------------------------------------------


def _misaligned(d=128):
    """(1, 2, 128, d) bf16 starting 4 elements (8 bytes) into its storage: b200c's input rules refuse it
    (a LaunchError inside the drop-in's b200c path), torch's SDPA runs it."""
    base = t(d=d + 8)
    return base[..., 4:4 + d]


FALLBACKS = {
    "schedule cannot hold D": (lambda: (t(d=256),) * 3, dict(schedule=D128), "768 of 512 TMEM columns"),
    "input rule (LaunchError)": (lambda: (_misaligned(),) * 3, {}, "16-byte"),
    "dtype": (lambda: (t(dtype=torch.float32),) * 3, {}, "dtype torch.float32"),
}


@pytest.mark.parametrize("name", list(FALLBACKS))
def test_fallen_back_calls_keep_no_input_alive(fd, name):
    make, kw, why = FALLBACKS[name]
    refs = []
    for _ in range(5):
        q, k, v = make()
        refs += [weakref.ref(q), weakref.ref(q._base) if q._base is not None else weakref.ref(q)]
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            out = b200c.scaled_dot_product_attention(q, k, v, **kw)
        msgs = [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]
        assert len(msgs) == 1 and why in msgs[0], msgs
        torch.testing.assert_close(out.float(), torch._C._nn.scaled_dot_product_attention(q, k, v).float())
        del q, k, v, out, rec
    assert alive(refs) == 0
    assert not fd.launches and sum(sdpa.calls.values()) == 5 and "b200c" not in sdpa.calls


# ---- a failure of b200c is raised, not fallen back ---------------------------------------------


def test_a_build_failure_is_raised_by_the_drop_in(fd, monkeypatch):
    def failing_build(*a, **kw):
        raise BuildError("nvcc failed for kernel 'k' (target sm100a): kernel.cu(3): error: identifier \"x\" is "
                         "undefined; generated file: /tmp/k.cu")

    monkeypatch.setattr(op, "kernel_for_generated", failing_build)
    for _ in range(2):  # and again: no later call turns it into a fallback either
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            with pytest.raises(BuildError, match=r"nvcc failed .*error: identifier \"x\" is undefined"):
                b200c.scaled_dot_product_attention(t(), t(), t())
        assert not [w for w in rec if issubclass(w.category, FallbackWarning)]
    assert not sdpa.calls  # neither served nor fallen back


@pytest.mark.nvcc
def test_a_real_nvcc_failure_reaches_the_caller_with_its_message(fd, monkeypatch):
    """The fake driver's loader is replaced by a real build of the generated kernel with an ``#error`` first line:
    nvcc runs and fails; the drop-in raises its BuildError with nvcc's first error line."""
    from b200c.runtime.build import build

    def broken_build(generated, target, device):
        src = "#error b200c_test_broken_kernel\n" + generated.source  # first: nvcc's first error line
        return build(dataclasses.replace(generated, source=src), "sm100a")

    monkeypatch.setattr(op, "kernel_for_generated", broken_build)
    with pytest.raises(BuildError, match=r"nvcc failed for kernel .*b200c_test_broken_kernel"):
        b200c.scaled_dot_product_attention(t(), t(), t())


def test_a_hang_is_raised_by_the_drop_in(fd, monkeypatch):
    def hung(*a, **kw):
        raise b200c.BarrierTimeoutError("bounded mbarrier wait timed out")

    monkeypatch.setattr(op, "kernel_for_generated", hung)
    with pytest.raises(b200c.BarrierTimeoutError):
        b200c.scaled_dot_product_attention(t(), t(), t())


def test_an_unsupported_device_still_falls_back(fd, monkeypatch):
    """Not an error of b200c: the device has no target for the kernel (UnsupportedDeviceError)."""
    def no_target(*a, **kw):
        raise b200c.UnsupportedDeviceError("kernel needs compute capability 10.0; the device has 8.0")

    monkeypatch.setattr(op, "kernel_for_generated", no_target)
    q = t()
    with pytest.warns(FallbackWarning, match="UnsupportedDeviceError: kernel needs compute capability 10.0"):
        out = b200c.scaled_dot_product_attention(q, q, q)
    torch.testing.assert_close(out, torch._C._nn.scaled_dot_product_attention(q, q, q))


# ---- every fallback says so ------------------------------------------------------------------


def _fallback_calls(n):
    q = t(dtype=torch.float32)
    for _ in range(n):
        b200c.scaled_dot_product_attention(q, q, q)  # one calling line: the default filter's dedup key


def test_every_eager_fallback_warns_under_the_default_filter(fd):
    with warnings.catch_warnings(record=True) as rec:
        warnings.resetwarnings()
        warnings.simplefilter("default")  # Python's own action for UserWarning: once per location and text
        _fallback_calls(3)
    got = [w for w in rec if issubclass(w.category, FallbackWarning)]
    assert len(got) == 3
    assert all(w.filename == __file__ for w in got)  # points at the line that called the drop-in
    assert all("dtype torch.float32" in str(w.message) and "every call" in str(w.message) for w in got)
    assert sdpa.calls["dtype:torch.float32"] == 3


@pytest.mark.parametrize("action,shown", [("ignore", 0), ("once", 1), ("error", None)])
def test_fallback_warning_follows_the_filters(fd, action, shown):
    with warnings.catch_warnings(record=True) as rec:
        warnings.resetwarnings()
        warnings.simplefilter(action, FallbackWarning)
        if shown is None:
            with pytest.raises(FallbackWarning, match="dtype torch.float32"):
                _fallback_calls(1)
            return
        _fallback_calls(3)
    assert len([w for w in rec if issubclass(w.category, FallbackWarning)]) == shown


def test_launch_errors_fall_back_but_say_so_each_time(fd):
    with warnings.catch_warnings(record=True) as rec:
        warnings.resetwarnings()
        warnings.simplefilter("default")
        for _ in range(3):
            q = _misaligned()
            b200c.scaled_dot_product_attention(q, q, q)
    msgs = [str(w.message) for w in rec if issubclass(w.category, FallbackWarning)]
    assert len(msgs) == 3 and all("LaunchError" in m for m in msgs), msgs
    assert not fd.launches
