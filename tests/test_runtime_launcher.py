"""The per-call host path with the CUDA driver stubbed (b200c.runtime.fake_driver): what each
launch receives, what is cached by what, when the dispatcher is skipped, the TMA driver workaround."""
from __future__ import annotations

import threading

import pytest
import torch

import b200c
from b200c.errors import BarrierTimeoutError, LaunchError
from b200c.runtime import api, driver, fake_driver, launcher, op

BF16 = torch.bfloat16
SCHED = b200c.Schedule(name="launcher_test")


def t(b=1, h=2, s=256, d=128):
    return torch.randn(b, h, s, d).to(BF16)


@pytest.fixture
def fd():
    with fake_driver.install() as f:
        yield f


def words(m: bytes) -> list[int]:
    return [int.from_bytes(m[i:i + 8], "little") for i in range(0, 128, 8)]


# ---- what one launch receives -------------------------------------------------------


@pytest.fixture
def fd_emulate():
    """The stand-in driver of a Hopper GPU loading kernels for the emulation target (asked for by name)."""
    with fake_driver.install(target="emulate") as f:
        yield f


def test_launch_parameters(fd_emulate):
    fd = fd_emulate
    q, k, v = t(s=384), t(s=256), t(s=256)
    out = b200c.attention(q, k, v, schedule=SCHED, target="emulate")
    (L,) = fd.launches
    info = op.generated_kernel(SCHED.to_json()).launch
    assert L.grid == info.grid(1, 2, 384, 132) and L.block == info.threads + 32  # emulator warp
    assert L.smem == info.dynamic_smem_bytes and L.stream == 7
    assert L.out_ptr == out.data_ptr() and out.shape == q.shape and out.stride() == q.stride()
    assert L.out_strides == (2 * 384 * 128, 384 * 128, 128)
    assert L.sizes == (1, 2, 384, 256)
    assert L.scale == pytest.approx(128 ** -0.5)
    assert [words(m)[0] for m in L.maps] == [q.data_ptr(), k.data_ptr(), v.data_ptr()]
    assert fd.encodes[0] == (q.data_ptr(), (128, 384, 2, 1), (256, 384 * 256, 2 * 384 * 256), info.tma_box_inner,
                             info.tma_box_rows)
    assert fd.memsets == 1  # emulator: TMEM alloc masks cleared before the launch
    b200c.attention(q, k, v, schedule=SCHED, softmax_scale=0.5, target="emulate")
    assert fd.launches[-1].scale == 0.5 and fd.launches[-1].out_ptr != 0


def test_bshd_layout_passes_logical_strides_without_copies(fd):
    x = t(b=2, h=3, s=256).transpose(1, 2).contiguous()  # (B, S, H, D) storage
    out = b200c.attention(x, x, x, schedule=SCHED, layout="bshd")
    assert out.shape == x.shape and out.stride() == x.stride()
    (L,) = fd.launches
    assert L.sizes == (2, 3, 256, 256)
    assert L.out_strides == (256 * 3 * 128, 128, 3 * 128)  # (B, H, S) strides of the (B, S, H, D) output
    assert fd.encodes[0][:3] == (x.data_ptr(), (128, 256, 3, 2), (3 * 128 * 2, 128 * 2, 256 * 3 * 128 * 2))


def test_native_target_has_no_memset():
    with fake_driver.install(target="sm100a") as fd:
        b200c.attention(t(), t(), t(), schedule=SCHED)
        assert len(fd.launches) == 1 and fd.memsets == 0
        assert fd.launches[0].block == op.generated_kernel(SCHED.to_json()).launch.threads


# ---- what is cached by what ---------------------------------------------------------


def test_repeated_call_only_launches(fd):
    q, k, v = t(), t(), t()
    for _ in range(5):
        b200c.attention(q, k, v, schedule=SCHED)
    assert len(fd.launches) == 5 and fd.loads == 1 and len(fd.encodes) == 3 and len(launcher._entries) == 1
    assert fd.ctx_sets == 1  # made current once per thread


def test_new_pointer_shape_or_strides_rebuild_what_depends_on_them(fd):
    q, k, v = t(), t(), t()
    b200c.attention(q, k, v, schedule=SCHED)
    k2 = t()
    b200c.attention(q, k2, v, schedule=SCHED)  # new k pointer: only k's map is encoded again
    assert [e[0] for e in fd.encodes] == [q.data_ptr(), k.data_ptr(), v.data_ptr(), k2.data_ptr()]
    assert words(fd.launches[-1].maps[1])[0] == k2.data_ptr()
    q3 = q[:, :1]  # same pointer, other shape
    b200c.attention(q3, k[:, :1], v[:, :1], schedule=SCHED)
    assert fd.launches[-1].sizes == (1, 1, 256, 256) and len(launcher._entries) == 3
    qt = q.transpose(0, 1)  # same pointer and numel, other strides: (2, 1, 256, 128)
    kt, vt = k.transpose(0, 1), v.transpose(0, 1)
    b200c.attention(qt, kt, vt, schedule=SCHED)
    assert fd.launches[-1].sizes == (2, 1, 256, 256) and fd.encodes[-1][2][2] == 256 * 128 * 2
    assert fd.loads == 1  # one kernel throughout


def test_cached_entry_never_skips_validation_of_a_changed_tensor(fd):
    q, k, v = t(), t(), t()
    b200c.attention(q, k, v, schedule=SCHED)
    with pytest.raises(LaunchError, match="tensor q has dtype torch.float16"):
        b200c.attention(q.view(torch.float16), k, v, schedule=SCHED)  # same pointer, shape, strides
    with pytest.raises(LaunchError, match="tensor q has head dim D = 96"):
        b200c.attention(q[..., :96], k[..., :96], v[..., :96], schedule=SCHED)
    assert len(fd.launches) == 1


def test_schedule_target_and_layout_are_part_of_the_key(fd):
    q = t(h=128, s=128)
    b200c.attention(q, q, q, schedule=SCHED)
    b200c.attention(q, q, q, schedule=SCHED.replace(name="other"))
    b200c.attention(q, q, q, schedule=SCHED, target="sm100a")
    b200c.attention(q, q, q, schedule=SCHED, layout="bshd")  # (1, 128, 128, 128): same numbers, other meaning
    assert fd.launches[0].out_strides != fd.launches[-1].out_strides
    assert len(launcher._entries) == 4 and fd.loads == 3  # "auto" and "sm100a" are separate kernel-cache keys


def test_entry_cache_is_bounded(fd, monkeypatch):
    monkeypatch.setattr(launcher, "MAX_ENTRIES", 4)
    xs = [t(h=1, s=128) for _ in range(10)]
    for x in xs:
        b200c.attention(x, x, x, schedule=SCHED)
    assert len(launcher._entries) <= 4 and len(fd.launches) == 10


def test_empty_problems_do_not_launch(fd):
    out = b200c.attention(t(b=0), t(b=0), t(b=0), schedule=SCHED)
    assert out.shape == (0, 2, 256, 128)
    out = b200c.attention(t(), t(s=0), t(s=0), schedule=SCHED)
    assert torch.count_nonzero(out) == 0
    assert not fd.launches and not launcher._entries


def test_threads_do_not_share_a_parameter_block_mid_launch(fd):
    q, k, v = t(), t(), t()
    outs = []

    def work():
        for _ in range(50):
            outs.append(b200c.attention(q, k, v, schedule=SCHED))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(L.out_ptr for L in fd.launches) == sorted(o.data_ptr() for o in outs)
    assert fd.ctx_sets == 4  # once per thread


# ---- errors at launch ----------------------------------------------------------------


def test_failed_launch_names_kernel_and_error(fd, monkeypatch):
    from cuda.bindings import driver as real

    q, k, v = t(), t(), t()
    b200c.attention(q, k, v, schedule=SCHED)
    e = next(iter(launcher._entries.values()))
    monkeypatch.setattr(e, "_launch", lambda *a: (real.CUresult.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,))
    with pytest.raises(LaunchError, match=r"cuLaunchKernel of 'launcher_test' \(grid 4, block \d+, \d+ B SMEM\) failed"):
        b200c.attention(q, k, v, schedule=SCHED)


def test_context_changed_by_someone_else_is_restored(fd, monkeypatch):
    from cuda.bindings import driver as real

    q, k, v = t(), t(), t()
    b200c.attention(q, k, v, schedule=SCHED)
    e = next(iter(launcher._entries.values()))
    results = [(real.CUresult.CUDA_ERROR_INVALID_CONTEXT,), (real.CUresult.CUDA_SUCCESS,)]
    monkeypatch.setattr(e, "_launch", lambda *a: results.pop(0))
    b200c.attention(q, k, v, schedule=SCHED)
    assert not results and fd.ctx_sets == 2


def test_earlier_hang_is_reported_before_launching(fd_emulate):
    q, k, v = t(), t(), t()
    b200c.attention(q, k, v, schedule=SCHED, target="emulate")
    e = next(iter(launcher._entries.values()))
    e.hang.flag, e.hang.site = 1, 0
    with pytest.raises(BarrierTimeoutError, match="bounded mbarrier wait timed out"):
        b200c.attention(q, k, v, schedule=SCHED, target="emulate")
    assert len(fd_emulate.launches) == 1


# ---- direct path or dispatcher ----------------------------------------------------------


@pytest.fixture
def op_calls(monkeypatch):
    calls = []
    real = api._call_op
    monkeypatch.setattr(api, "_call_op", lambda *a: calls.append(a) or real(*a))
    return calls


def test_plain_eager_call_skips_the_dispatcher(fd, op_calls):
    assert api.DIRECT_PATH  # this torch has every internal the direct-path check reads
    q = t()
    b200c.attention(q, q, q, schedule=SCHED)
    assert not op_calls and len(fd.launches) == 1


def test_inputs_requiring_grad_go_through_the_op(fd, op_calls):
    q = t().requires_grad_()
    out = b200c.attention(q, q.detach(), q.detach(), schedule=SCHED)
    assert len(op_calls) == 1 and out.grad_fn is not None and len(fd.launches) == 1
    with torch.no_grad():
        b200c.attention(q, q, q, schedule=SCHED)
    assert len(op_calls) == 1 and len(fd.launches) == 2  # no grad needed: direct again


def test_dispatch_modes_and_subclasses_go_through_the_op(fd, op_calls):
    from conftest import op_recording_mode

    q = t()
    with op_recording_mode() as mode:
        b200c.attention(q, q, q, schedule=SCHED)
    assert len(op_calls) == 1 and "b200c.attention.default" in mode.ops  # the mode saw the op
    b200c.attention(torch.nn.Parameter(q, requires_grad=False), q, q, schedule=SCHED)
    assert len(op_calls) == 2


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_forward_mode_ad_goes_through_the_op(fd, op_calls):
    import torch.autograd.forward_ad as fwAD

    q = t()
    with fwAD.dual_level():
        dual = fwAD.make_dual(q, torch.ones_like(q))
        try:
            b200c.attention(dual, q, q, schedule=SCHED)
        except RuntimeError:
            pass  # torch: no forward-AD formula for the op; never a result without its tangent
    assert len(op_calls) == 1


def test_attention_generated_refuses_grad_inputs(fd):
    from b200c.runtime import attention_generated

    gk = op.generated_kernel(SCHED.to_json())
    q = t()
    out = attention_generated(q, q, q, gk)
    assert fd.launches[-1].out_ptr == out.data_ptr()
    with pytest.raises(b200c.BackwardNotSupportedError, match="attention_generated has no autograd formula"):
        attention_generated(q.requires_grad_(), q, q, gk)


def test_op_called_directly_uses_the_same_cache(fd):
    q, k, v = t(), t(), t()
    b200c.attention(q, k, v, schedule=SCHED)
    out = torch.ops.b200c.attention(q, k, v, SCHED.to_json(), 0.25, "auto")
    assert len(fd.launches) == 2 and fd.launches[-1].out_ptr == out.data_ptr() and fd.launches[-1].scale == 0.25
    assert len(fd.encodes) == 3 and len(launcher._entries) == 1


# ---- TMA descriptor workaround (CUTLASS, driver <= 13.1, tensors under 128 KiB) ----------


def test_tma_workaround_condition():
    span = driver.tensor_span_bytes
    assert span((1, 1, 128, 128), (16384, 16384, 128, 1)) == 32768
    assert span((2, 3, 256, 128), (98304, 128, 384, 1)) == 2 * (1 + 98304 + 2 * 128 + 255 * 384 + 127)
    ones = bytes([0xFF] * 128)
    for version, nbytes, cleared in [(13010, 128 * 1024 - 2, True), (13000, 32768, True), (12080, 2, True),
                                     (13010, 128 * 1024, False), (13020, 32768, False), (13100, 2, False)]:
        desc = bytearray(ones)
        assert driver.apply_tma_driver_workaround(desc, nbytes, version) is cleared
        w = words(bytes(desc))
        assert w[1] == (0xFFFFFFFFFFFFFFFF & ~(1 << 21) if cleared else 0xFFFFFFFFFFFFFFFF)
        assert desc[:8] == ones[:8] and desc[16:] == ones[16:]  # nothing else touched


@pytest.mark.parametrize("version,s,cleared", [(13010, 256, True), (13020, 256, False), (13000, 512, False)])
def test_tma_workaround_uses_the_runtime_driver_version(version, s, cleared):
    # (1, 2, 256, 128) bf16 spans 128 KiB exactly -> not under the limit; S = 256 with H = 1 is 64 KiB
    with fake_driver.install(version=version) as fd:
        x = t(h=1, s=s)
        b200c.attention(x, x, x, schedule=SCHED)
        bit = words(fd.launches[0].maps[0])[1] >> 21 & 1
        assert bit == (0 if cleared else 1)
