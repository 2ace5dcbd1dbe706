"""Threads calling b200c at once (a serving process's pattern): 8 threads x 50 calls of mixed shapes,
options and schedules, on the native Hopper target and the emulation target, each result equal to
the same call made on the main thread; a thread whose first CUDA call is a b200c call; and a
thread calling with tensors of a device that is not its current one (skipped with one GPU)."""
import threading
from pathlib import Path

import pytest
import torch

import b200c

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.gpu
HOPPER = str(ROOT / "examples/hopper/h11_persistent.py")
B200 = str(ROOT / "examples/14_persistent.py")


def _need_hopper():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs a compute capability 9.0 GPU (native sm90a and the emulation target)")


def _cases(schedule, target, n):
    """n calls: (q, k, v, kwargs) of mixed shapes, GQA, causal, LSE, layouts."""
    g = torch.Generator(device="cpu").manual_seed(7)
    out = []
    shapes = [(1, 4, 512, 512, 4), (2, 2, 256, 384, 2), (1, 4, 384, 200, 2), (1, 8, 128, 1000, 4)]
    for i in range(n):
        b, h, sq, skv, hkv = shapes[i % len(shapes)]
        q = torch.randn(b, h, sq, 128, generator=g).to("cuda", torch.bfloat16)
        k = torch.randn(b, hkv, skv, 128, generator=g).to("cuda", torch.bfloat16)
        v = torch.randn(b, hkv, skv, 128, generator=g).to("cuda", torch.bfloat16)
        kw = dict(schedule=schedule, target=target, causal=bool(i % 3 == 1), return_lse=bool(i % 2))
        out.append((q, k, v, kw))
    return out


def _run(case):
    q, k, v, kw = case
    r = b200c.attention(q, k, v, **kw)
    return r if isinstance(r, tuple) else (r,)


@pytest.mark.parametrize("schedule, target", [(HOPPER, "sm90a"), (B200, "emulate")], ids=["native", "emulated"])
def test_eight_threads_fifty_calls_equal_single_threaded(schedule, target):
    _need_hopper()
    calls = 50 if target == "sm90a" else 12  # the emulated kernel is slow; 8 x 12 mixed calls still interleave
    cases = _cases(schedule, target, 8 * calls)
    want = [_run(c) for c in cases]  # single-threaded, same inputs
    torch.cuda.synchronize()
    got = [None] * len(cases)
    errors = []

    def worker(t):
        try:
            for i in range(t, len(cases), 8):
                got[i] = _run(cases[i])
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"thread {t}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:3]
    for i, (a, b) in enumerate(zip(want, got)):
        for x, y in zip(a, b):
            assert torch.equal(x, y), f"call {i} differs from the single-threaded result"


def test_first_cuda_call_of_a_thread_is_a_b200c_call():
    """A fresh thread (no CUDA call before) with a schedule and shape new to the process."""
    _need_hopper()
    q = torch.randn(1, 3, 320, 128, device="cuda", dtype=torch.bfloat16)
    want = torch.nn.functional.scaled_dot_product_attention(q, q, q)
    box = {}

    def worker():
        try:
            box["out"] = b200c.attention(q, q, q, schedule=HOPPER, target="sm90a")
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001
            box["error"] = f"{type(e).__name__}: {e}"

    th = threading.Thread(target=worker)
    th.start()
    th.join()
    assert "error" not in box, box.get("error")
    assert (box["out"].float() - want.float()).abs().max().item() < 2e-2


def test_tensors_of_a_device_that_is_not_current():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    _need_hopper()
    q = torch.randn(1, 2, 256, 128, device="cuda:1", dtype=torch.bfloat16)
    with torch.cuda.device(0):
        out = b200c.attention(q, q, q, schedule=HOPPER, target="sm90a")
        assert torch.cuda.current_device() == 0
    want = torch.nn.functional.scaled_dot_product_attention(q, q, q)
    assert out.device == q.device and (out.float() - want.float()).abs().max().item() < 2e-2
