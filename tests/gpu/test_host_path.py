"""The cached host path on a real GPU (emulation target on the H200): the direct eager path,
the custom op, torch.compile and CUDA graphs give the same numbers; new pointers, views and
streams are honoured; backward raises the typed error.

    python -m pytest -q -m gpu tests/gpu/test_host_path.py
"""
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

EX = Path(__file__).resolve().parents[2] / "examples" / "07_compute_pipeline.py"


@pytest.fixture(scope="module")
def setup():
    import torch

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the emulation target needs a compute capability 9.0 GPU")
    return str(EX)


def rand(*shape):
    import torch

    return torch.randn(*shape, device="cuda").to(torch.bfloat16)


def sdpa_close(out, q, k, v):
    import torch.nn.functional as F

    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
    err = (out.float() - ref).abs().max().item()
    assert err < 3e-2, err


def test_direct_path_equals_op_and_sdpa(setup):
    import torch

    import b200c

    q, k, v = rand(1, 2, 256, 128), rand(1, 2, 384, 128), rand(1, 2, 384, 128)
    direct = b200c.attention(q, k, v, schedule=setup, target="emulate")
    s = b200c.load_schedule_file(setup)
    via_op = torch.ops.b200c.attention(q, k, v, s.to_json(), 128 ** -0.5, "emulate")
    torch.cuda.synchronize()
    assert torch.equal(direct, via_op)
    sdpa_close(direct, q, k, v)


def test_new_tensors_views_and_scales(setup):
    import torch.nn.functional as F

    import b200c

    for i in range(4):  # new pointers each time
        q, k, v = rand(1, 1 + i, 256, 128), rand(1, 1 + i, 256, 128), rand(1, 1 + i, 256, 128)
        sdpa_close(b200c.attention(q, k, v, schedule=setup, target="emulate"), q, k, v)
    qkv = rand(2, 256, 3, 4, 128)  # packed (B, S, 3, H, D): q, k, v are strided views
    q, k, v = qkv.unbind(2)
    out = b200c.attention(q, k, v, schedule=setup, target="emulate", layout="bshd")
    assert out.shape == (2, 256, 4, 128)
    sdpa_close(out.transpose(1, 2), q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    out2 = b200c.attention(q, k, v, schedule=setup, target="emulate", layout="bshd", softmax_scale=0.05)
    ref = F.scaled_dot_product_attention(*(t.transpose(1, 2).float() for t in (q, k, v)), scale=0.05)
    assert (out2.transpose(1, 2).float() - ref).abs().max().item() < 3e-2


def test_side_stream(setup):
    import torch

    import b200c

    q, k, v = rand(1, 2, 256, 128), rand(1, 2, 256, 128), rand(1, 2, 256, 128)
    ref = b200c.attention(q, k, v, schedule=setup, target="emulate")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        out = b200c.attention(q, k, v, schedule=setup, target="emulate")
    s.synchronize()
    torch.cuda.synchronize()
    assert torch.equal(out, ref)


def test_cuda_graph_replay_with_new_data(setup):
    import torch

    import b200c

    q, k, v = rand(1, 2, 256, 128), rand(1, 2, 256, 128), rand(1, 2, 256, 128)
    b200c.attention(q, k, v, schedule=setup, target="emulate")  # load outside capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = b200c.attention(q, k, v, schedule=setup, target="emulate")
    for _ in range(3):
        for t in (q, k, v):
            t.copy_(torch.randn_like(t, dtype=torch.float32))
        g.replay()
        torch.cuda.synchronize()
        sdpa_close(out, q, k, v)


def test_torch_compile_matches_eager(setup):
    import torch

    import b200c

    s = b200c.load_schedule_file(setup)

    def fn(q, k, v):
        return b200c.attention(q, k, v, schedule=s, target="emulate") * 2

    pytest.importorskip("triton")  # inductor's GPU backend
    q, k, v = rand(1, 2, 256, 128), rand(1, 2, 256, 128), rand(1, 2, 256, 128)
    eager = fn(q, k, v)
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True)
    assert torch.equal(compiled(q, k, v), eager)


def test_forward_and_backward_with_grad_inputs(setup):
    """Inputs that require grad: the emulated forward, then b200c's sm90a backward kernels (head dim 128),
    eager and under torch.compile, against FP32 torch autograd."""
    import torch

    import b200c

    q, k, v = (rand(1, 2, 256, 128).requires_grad_() for _ in range(3))
    out = b200c.attention(q, k, v, schedule=setup, target="emulate")
    sdpa_close(out.detach(), q.detach(), k.detach(), v.detach())
    out.float().sum().backward()
    qf, kf, vf = (x.detach().float().requires_grad_() for x in (q, k, v))
    torch.nn.functional.scaled_dot_product_attention(qf, kf, vf).sum().backward()
    for got, ref in ((q.grad, qf.grad), (k.grad, kf.grad), (v.grad, vf.grad)):
        assert float((got.float() - ref).abs().max()) <= 2e-2 * float(ref.abs().max()) + 1e-3
    grads = (q.grad.clone(), k.grad.clone(), v.grad.clone())
    for x in (q, k, v):
        x.grad = None
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k, v: b200c.attention(q, k, v, schedule=setup, target="emulate"),
                             fullgraph=True, backend="aot_eager")
    out = compiled(q, k, v)
    sdpa_close(out.detach(), q.detach(), k.detach(), v.detach())
    out.float().sum().backward()
    assert torch.equal(k.grad, grads[1]) and torch.equal(v.grad, grads[2])  # one CTA per K/V tile: fixed order
    assert float((q.grad.float() - grads[0].float()).abs().max()) <= 1e-2 * float(grads[0].float().abs().max())


def test_driver_version_and_tma_workaround_applied(setup):
    from b200c.runtime import driver, launcher

    import b200c

    assert driver.driver_version() >= 12000
    q = rand(1, 1, 128, 128)  # 32 KiB: under CUTLASS's 128 KiB limit
    b200c.attention(q, q, q, schedule=setup, target="emulate")
    maps = [m for key, m in launcher._maps.items() if key[0] == q.data_ptr()]
    assert maps
    bit = int.from_bytes(maps[0][8:16], "little") >> 21 & 1
    if driver.driver_version() <= driver.TMA_WORKAROUND_MAX_DRIVER:
        assert bit == 0


def test_native_kernel_cached_launch_in_every_mode():
    """The one-step launch of a cached entry (Entry.call: the output from PyTorch's caching
    allocator on the current device, the pointer written, cuLaunchKernel) with a native sm90a
    kernel, which takes it (emulated kernels clear TMEM masks first and take the general path):
    new data at the same pointers, new pointers, bshd views, a side stream, a CUDA graph and
    torch.compile all match SDPA."""
    import torch

    import b200c
    from b200c.runtime import launcher

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the native sm90a kernel needs a compute capability 9.0 GPU")
    s = b200c.load_schedule_file(str(EX.parent / "hopper" / "h11_persistent.py"))

    def run(q, k, v, **kw):
        return b200c.attention(q, k, v, schedule=s, target="sm90a", **kw)

    q, k, v = rand(2, 3, 384, 128), rand(2, 3, 512, 128), rand(2, 3, 512, 128)
    before = set(launcher._entries)  # this worker's earlier tests left entries of their own (split-KV ones too)
    sdpa_close(run(q, k, v), q, k, v)
    new = [e for key, e in launcher._entries.items() if key not in before]
    ptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr())
    entry = new[0] if len(new) == 1 else next(e for key, e in launcher._entries.items() if key[5:8] == ptrs)
    assert entry.lk.built.target == "sm90a" and entry._plain  # the kernel the one-step launch is for
    for _ in range(3):
        for t in (q, k, v):
            t.copy_(torch.randn_like(t, dtype=torch.float32))
        sdpa_close(run(q, k, v), q, k, v)
    sdpa_close(run(q[:, :, 100:], k, v), q[:, :, 100:], k, v)  # another pointer and shape
    qs, ks, vs = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    out = run(qs, ks, vs, layout="bshd")
    assert out.shape == qs.shape and out.stride() == qs.stride()
    sdpa_close(out.transpose(1, 2), q, k, v)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = run(q, k, v)
    torch.cuda.current_stream().wait_stream(side)
    sdpa_close(out, q, k, v)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = run(q, k, v)
    for t in (q, k, v):
        t.copy_(torch.randn_like(t, dtype=torch.float32))
    g.replay()
    torch.cuda.synchronize()
    sdpa_close(out, q, k, v)
    pytest.importorskip("triton")  # inductor's GPU backend
    compiled = torch.compile(lambda q, k, v: run(q, k, v), fullgraph=True)
    assert torch.equal(compiled(q, k, v), run(q, k, v))
