"""torch's SDPA flash path through b200c on the H200: activate_flash_attention_impl("b200c") with the
flash backend forced; eager, torch.compile(fullgraph=True) and a CUDA graph replay give b200c's
result, and restore_flash_attention_impl() gives torch's kernel back."""
import pytest
import torch
import torch.nn.functional as F

import b200c
from b200c.runtime import torch_flash

pytestmark = pytest.mark.gpu


def test_sdpa_flash_path_runs_b200c():
    if torch.cuda.get_device_capability() != (9, 0) or not torch_flash.available():
        pytest.skip("needs a compute capability 9.0 GPU and a torch with register_flash_attention_impl")
    import torch.nn.attention as tna
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(2, 8, 1024, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(2, 8, 1024, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(2, 8, 1024, 128, device="cuda", dtype=torch.bfloat16)
    want = b200c.attention(q, k, v, causal=True)  # schedule=None: the Hopper preset, natively
    calls = []
    real = torch_flash.flash_forward

    def counted(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    torch_flash.flash_forward = counted
    tna.activate_flash_attention_impl("b200c")
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            got = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            assert calls and torch.equal(got, want)
            fn = torch.compile(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True), fullgraph=True)
            assert torch.equal(fn(q, k, v), want)
            static = [t.clone() for t in (q, k, v)]
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                F.scaled_dot_product_attention(*static, is_causal=True)  # warm (the kernel is loaded)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = F.scaled_dot_product_attention(*static, is_causal=True)
            q2 = torch.randn_like(q)
            static[0].copy_(q2)
            g.replay()
            torch.cuda.synchronize()
            assert torch.equal(out, b200c.attention(q2, k, v, causal=True))
    finally:
        tna.restore_flash_attention_impl()
        torch_flash.flash_forward = real
    n = len(calls)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert len(calls) == n  # torch's own kernel again


def test_readme_training_snippet_is_served_by_b200c():
    """The README's provider snippet, as written (it is exempt from the CPU README test's served-call check:
    on the CPU torch's SDPA never reaches the flash provider): its forward runs b200c's kernel (the profiler
    names it), its backward gives gradients (torch's flash backward on b200c's O and LSE)."""
    if torch.cuda.get_device_capability() != (9, 0) or not torch_flash.available():
        pytest.skip("needs a compute capability 9.0 GPU and a torch with register_flash_attention_impl")
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    (block,) = [b for b in re.findall(r"^```python\n(.*?)^```", readme, flags=re.S | re.M)
                if "activate_flash_attention_impl" in b]
    ns: dict = {"torch": torch}  # the README's blocks share one namespace: its first block imports torch
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        exec(compile(block, "README.md", "exec"), ns)
        torch.cuda.synchronize()
    kernels = {e.name for e in prof.events()}
    assert any(n.startswith("b200c_attention") for n in kernels), sorted(kernels)[:20]
    assert all(t.grad is not None and torch.isfinite(t.grad).all() for t in (ns["qg"], ns["kg"], ns["vg"]))


def test_flash_provider_backward_runs_b200c_kernels():
    """Issue 48 step 4: with the provider active, SDPA's flash backward runs b200c's sm90a backward kernels
    (named in the profiler's kernel list) and its gradients are within FlashAttention's tolerance of FP32
    autograd."""
    if torch.cuda.get_device_capability() != (9, 0) or not torch_flash.available():
        pytest.skip("needs a compute capability 9.0 GPU and a torch with register_flash_attention_impl")
    import torch.nn.attention as tna
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 8, 512, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    dout = torch.randn_like(q)

    def grads(fn, *xs):
        xs = [x.detach().clone().requires_grad_() for x in xs]
        fn(*xs).backward(dout.to(xs[0].dtype))
        return [x.grad for x in xs]

    tna.activate_flash_attention_impl("b200c")
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION), profile(activities=[ProfilerActivity.CUDA]) as prof:
            got = grads(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True), q, k, v)
            torch.cuda.synchronize()
    finally:
        tna.restore_flash_attention_impl()
    names = {e.name for e in prof.events()}
    assert any("b200c_attention_backward" in n for n in names), sorted(names)[:20]
    ref = grads(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True), q.float(), k.float(),
                v.float())
    with sdpa_kernel(SDPBackend.MATH):
        bf = grads(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True), q, k, v)
    for name, g, r, rb in zip(("dQ", "dK", "dV"), got, ref, bf):
        err = float((g.float() - r).abs().max())
        tol = 2 * float((rb.float() - r).abs().max()) + 1e-3 * float(r.abs().max())
        assert err <= tol, f"{name}: max error {err:.4g} over the tolerance {tol:.4g}"
