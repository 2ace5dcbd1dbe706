"""Guards of the mods' trace cache (b200c/runtime/mod_call.py): every Python value a score_mod / mask_mod
reads is compared on each call, so a changed value traces again and the kernel and the block mask follow
it; tensors stay kernel arguments (new contents reuse the trace); what cannot be compared is refused.

Each case mutates one kind of read value between two calls and checks that the trace changed, and that
the traced graph, evaluated by the interpreter of tests/test_mods_trace.py, equals an FP32 torch
reference written here from the value the function should see. CPU only (the stand-in driver for the
end-to-end block-mask case)."""
import ctypes
import functools
import sys
import types

import numpy as np
import pytest
import torch

import b200c
import b200c.dsl.mods as dsl_mods
from b200c.codegen.work import WorkDecomposition
from b200c.errors import ScheduleError
from b200c.runtime import block_mask, fake_driver, mod_call
from test_mods_trace import evaluate, index_grid

HOPPER = b200c.default_schedule(128, target="sm90a")


@pytest.fixture
def traces(monkeypatch):
    """Counts the traces prepare() makes (a reused trace adds none)."""
    count = [0]
    real = dsl_mods.trace_mods

    def counting(**kw):
        count[0] += 1
        return real(**kw)

    monkeypatch.setattr(dsl_mods, "trace_mods", counting)
    return count


def _score(fn):
    """prepare()'s graph of score_mod ``fn`` evaluated on the index grid, with the grid's scores."""
    mc = mod_call.prepare(score_mod=fn)
    score, b, h, q, kv = index_grid(seed=3)
    got = evaluate(mc.mods.score_mod, mc.tensors, score, b, h, q, kv)
    return mc, got, (score, b, h, q, kv)


def _check_score(fn, reference):
    """The graph of ``fn`` equals ``reference(score, b, h, q, kv)`` (FP32 torch) on the grid."""
    mc, got, grid = _score(fn)
    want = torch.broadcast_to(reference(*grid).float(), got.shape)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    return mc


def _check_mask(fn, reference):
    mc = mod_call.prepare(mask_mod=fn)
    _, b, h, q, kv = index_grid()
    got = evaluate(mc.mods.mask_mod, mc.tensors, None, b, h, q, kv)
    want = reference(b, h, q, kv)
    got, want = torch.broadcast_tensors(got, want)
    assert got.dtype == torch.bool and torch.equal(got, want)
    return mc


# ---------------------------------------------------------------------------------------------------
# each kind of read value, mutated between two calls

ALPHA = 0.5
CONFIG = {"alpha": 0.5, "layers": [{"scale": 2.0}, {"scale": 3.0}]}
SCALES = [0.25, 4.0]


def test_closure_cell_rebound(traces):
    alpha = 0.5

    def sm(score, b, h, q_idx, kv_idx):
        return score * alpha

    a = _check_score(sm, lambda s, *_: s * 0.5)
    alpha = 0.7  # noqa: F841 - read by sm through its closure cell
    b = _check_score(sm, lambda s, *_: s * 0.7)
    assert a.mods != b.mods and "0.7" in b.mods.score_mod.expression and traces[0] == 2
    _check_score(sm, lambda s, *_: s * 0.7)
    assert traces[0] == 2  # unchanged: the trace is reused


def test_global_rebound(traces):
    global ALPHA

    def sm(score, b, h, q_idx, kv_idx):
        return score * ALPHA

    try:
        _check_score(sm, lambda s, *_: s * 0.5)
        ALPHA = 0.7
        _check_score(sm, lambda s, *_: s * 0.7)
        ALPHA = 3  # an int: another constant type, same value domain
        mc = _check_score(sm, lambda s, *_: s * 3)
        assert mc.mods.score_mod.expression == "score * 3"
    finally:
        ALPHA = 0.5
    assert traces[0] == 3


def test_nested_attribute(traces):
    """The issue's case: cfg.sub.alpha changed in place (one attribute level deeper than the old cache saw)."""
    cfg = types.SimpleNamespace(sub=types.SimpleNamespace(alpha=0.5))

    def sm(score, b, h, q_idx, kv_idx):
        return score * cfg.sub.alpha

    _check_score(sm, lambda s, *_: s * 0.5)
    cfg.sub.alpha = 0.7
    mc = _check_score(sm, lambda s, *_: s * 0.7)
    assert "0.5" not in mc.mods.score_mod.expression
    cfg.sub = types.SimpleNamespace(alpha=0.9)  # a new object in the middle of the chain
    _check_score(sm, lambda s, *_: s * 0.9)
    assert traces[0] == 3


def test_dict_and_list_items(traces):
    def sm(score, b, h, q_idx, kv_idx):
        return score * CONFIG["alpha"] + CONFIG["layers"][1]["scale"] * SCALES[0]

    try:
        _check_score(sm, lambda s, *_: s * 0.5 + 3.0 * 0.25)
        CONFIG["alpha"] = 0.7
        _check_score(sm, lambda s, *_: s * 0.7 + 3.0 * 0.25)
        CONFIG["layers"][1]["scale"] = 5.0  # an item of a dict in a list in a dict
        _check_score(sm, lambda s, *_: s * 0.7 + 5.0 * 0.25)
        SCALES[0] = 0.125  # a list item
        _check_score(sm, lambda s, *_: s * 0.7 + 5.0 * 0.125)
        CONFIG["layers"][0]["scale"] = 9.0  # a value the function does not read: compared all the same
        _check_score(sm, lambda s, *_: s * 0.7 + 5.0 * 0.125)
    finally:
        CONFIG.update(alpha=0.5, layers=[{"scale": 2.0}, {"scale": 3.0}])
        SCALES[:] = [0.25, 4.0]
    assert traces[0] == 5


def test_tuple_items_and_defaults(traces):
    box = [(1.0, 2.0)]

    def sm(score, b, h, q_idx, kv_idx, scale=[0.5]):  # noqa: B006 - a mutable default, mutated below
        return score * box[0][1] * scale[0]

    _check_score(sm, lambda s, *_: s * 2.0 * 0.5)
    box[0] = (1.0, 4.0)
    _check_score(sm, lambda s, *_: s * 4.0 * 0.5)
    sm.__defaults__[0][0] = 0.25
    _check_score(sm, lambda s, *_: s * 4.0 * 0.25)
    assert traces[0] == 3


def test_module_attribute(traces, monkeypatch):
    cfgmod = types.ModuleType("user_mod_config")
    cfgmod.CAP = 30.0
    monkeypatch.setitem(sys.modules, "user_mod_config", cfgmod)
    globals()["user_mod_config"] = cfgmod
    try:
        def sm(score, b, h, q_idx, kv_idx):
            return torch.tanh(score / user_mod_config.CAP) * user_mod_config.CAP  # noqa: F821

        _check_score(sm, lambda s, *_: torch.tanh(s / 30.0) * 30.0)
        cfgmod.CAP = 5.0
        _check_score(sm, lambda s, *_: torch.tanh(s / 5.0) * 5.0)
    finally:
        del globals()["user_mod_config"]
    assert traces[0] == 2


def test_captured_tensor_contents_are_kernel_arguments(traces):
    bias = torch.tensor([0.5, -1.0, 2.0])

    def sm(score, b, h, q_idx, kv_idx):
        return score + bias[h]

    a = _check_score(sm, lambda s, b, h, q, kv: s + bias[h.long()])
    assert a.tensors[0] is bias
    bias.mul_(3.0)  # new contents: read by the kernel at launch, the trace is reused
    b = _check_score(sm, lambda s, b, h, q, kv: s + torch.tensor([1.5, -3.0, 6.0])[h.long()])
    assert b.mods is a.mods and b.tensors[0] is bias and traces[0] == 1
    bias = torch.tensor([7.0, 8.0, 9.0])  # another tensor: traced again (same graph: the same kernel), new input
    c = _check_score(sm, lambda s, b, h, q, kv: s + torch.tensor([7.0, 8.0, 9.0])[h.long()])
    assert c.tensors[0] is bias and c.mods == a.mods and traces[0] == 2


def test_methods_objects_helpers_and_partials(traces):
    class Scaled:
        factor = 2.0  # a class attribute

        def __init__(self):
            self.cfg = types.SimpleNamespace(alpha=0.5)

        def mod(self, score, b, h, q_idx, kv_idx):
            return score * self.cfg.alpha * self.factor

        def __call__(self, score, b, h, q_idx, kv_idx):
            return score - self.factor

    s = Scaled()
    _check_score(s.mod, lambda x, *_: x * 0.5 * 2.0)
    s.cfg.alpha = 0.25
    _check_score(s.mod, lambda x, *_: x * 0.25 * 2.0)
    Scaled.factor = 8.0
    _check_score(s.mod, lambda x, *_: x * 0.25 * 8.0)
    _check_score(s, lambda x, *_: x - 8.0)  # a callable object
    s.factor = 1.0  # an instance attribute shadowing the class one
    _check_score(s, lambda x, *_: x - 1.0)

    knobs = types.SimpleNamespace(shift=1.0)

    def helper(k, score):  # reads k.shift: a name of the helper's code, not of sm's
        return score + k.shift

    def sm(score, b, h, q_idx, kv_idx):
        return helper(knobs, score)

    _check_score(sm, lambda x, *_: x + 1.0)
    knobs.shift = -2.0
    _check_score(sm, lambda x, *_: x - 2.0)

    def scaled(weights, score, b, h, q_idx, kv_idx):
        return score * weights[0]

    w = [3.0]
    p = functools.partial(scaled, w)
    _check_score(p, lambda x, *_: x * 3.0)
    w[0] = 6.0
    _check_score(p, lambda x, *_: x * 6.0)


def test_special_methods_run_without_their_name(traces):
    """`float(w)` runs w.__float__, whose name is nowhere in the mod's code: its reads are guarded too."""
    class Weight:
        def __init__(self, alpha):
            self.alpha = alpha

        def __float__(self):
            return self.alpha * 2.0

    w = Weight(0.5)

    def sm(score, b, h, q_idx, kv_idx):
        return score * float(w)

    _check_score(sm, lambda s, *_: s * 1.0)
    w.alpha = 2.0
    _check_score(sm, lambda s, *_: s * 4.0)
    assert traces[0] == 2


def test_python_control_flow_on_a_read_value(traces):
    flags = {"bias": False}

    def sm(score, b, h, q_idx, kv_idx):
        if flags["bias"]:
            return score + q_idx
        return score

    _check_score(sm, lambda s, *_: s)
    flags["bias"] = True
    _check_score(sm, lambda s, b, h, q, kv: s + q.float())


def test_nn_module_attributes(traces):
    class Cap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cap = 30.0
            self.register_buffer("table", torch.tensor([1.0, 2.0, 3.0]))

        def forward(self, score, b, h, q_idx, kv_idx):
            return torch.tanh(score / self.cap) * self.cap + self.table[h]

    m = Cap()  # its bound forward is the mod (torch.fx would take a call of the module itself for a submodule)
    _check_score(m.forward, lambda s, b, h, q, kv: torch.tanh(s / 30.0) * 30.0 + m.table[h.long()])
    m.cap = 10.0
    _check_score(m.forward, lambda s, b, h, q, kv: torch.tanh(s / 10.0) * 10.0 + m.table[h.long()])
    m.table = torch.tensor([-1.0, 0.0, 1.0])  # a new buffer: the new tensor is the kernel input
    new = torch.tensor([-1.0, 0.0, 1.0])
    mc = _check_score(m.forward, lambda s, b, h, q, kv: torch.tanh(s / 10.0) * 10.0 + new[h.long()])
    assert mc.tensors[0] is m.table


def test_mask_mod_capture_and_numpy_values(traces):
    cfg = types.SimpleNamespace(window=2)
    arr = np.array([1, 3])

    def mm(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx <= cfg.window) & (kv_idx <= q_idx + int(arr[1]))

    _check_mask(mm, lambda b, h, q, kv: (q - kv <= 2) & (kv <= q + 3))
    cfg.window = 4
    _check_mask(mm, lambda b, h, q, kv: (q - kv <= 4) & (kv <= q + 3))
    arr[1] = 0  # a small numpy array compares by value
    _check_mask(mm, lambda b, h, q, kv: (q - kv <= 4) & (kv <= q))
    assert traces[0] == 3


def test_freed_functions_at_reused_addresses_trace_their_own_constants():
    """Lambdas compiled, used and freed in a loop: a new code object may reuse a freed one's address; each
    call still runs its own constant (the cache keeps what it keys by identity alive)."""
    for c in (1.5, 2.5, 3.5, 4.5, 5.5):
        fn = eval(f"lambda score, b, h, q_idx, kv_idx: score * {c}")  # noqa: S307 - a fresh code object each time
        _check_score(fn, lambda s, *_: s * c)
        del fn


# ---------------------------------------------------------------------------------------------------
# end to end under the stand-in driver: the kernel constant and the block mask follow the value


def _ranges_at(ptr: int, n: int) -> torch.Tensor:
    buf = (ctypes.c_int32 * (4 * n)).from_address(ptr)
    return torch.tensor(list(buf), dtype=torch.int32).reshape(n, 4)


def test_block_mask_and_kernel_follow_a_changed_capture():
    cfg = {"mask": types.SimpleNamespace(window=32), "cap": 30.0}  # values in a dict: mutated in place

    def mm(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx <= cfg["mask"].window) & (kv_idx <= q_idx)

    def sm(score, b, h, q_idx, kv_idx):
        return torch.tanh(score / cfg["cap"]) * cfg["cap"]

    q = torch.randn(1, 2, 512, 128).to(torch.bfloat16)
    got = []
    with fake_driver.install(target="sm90a") as fd:
        for window, cap in ((32, 30.0), (300, 30.0), (300, 12.0)):
            cfg["mask"].window, cfg["cap"] = window, cap
            b200c.attention(q, q, q, schedule=HOPPER, score_mod=sm, mask_mod=mm)
            L = fd.launches[-1]
            info = L.kernel
            work = WorkDecomposition(info.block_m, info.block_n, info.q_stages)
            pack = bool(L.params["pack_heads"])
            n = work.num_work(1, 2, 512, pack)
            ranges = _ranges_at(L.params["kv_ranges"], n)

            def reference(b, h, r, c, w=window):  # written here, not the user's function
                return (r - c <= w) & (c <= r)

            want = block_mask.kv_ranges(reference, work, batch=1, heads=2, heads_kv=2, seq_q=512, seq_kv=512,
                                        pack_heads=pack)
            assert torch.equal(ranges, want), window
            got.append(ranges)
        assert not torch.equal(got[0], got[1])  # the wider window visits more K/V tiles
        assert fd.loads == 3  # each new constant is another kernel
        mc = mod_call.prepare(score_mod=sm, mask_mod=mm)
        assert "12.0" in mc.mods.score_mod.expression and "300" in mc.mods.mask_mod.expression


# ---------------------------------------------------------------------------------------------------
# what cannot be guarded, and mask_mods that do not return a bool


def test_unguardable_values_are_refused_with_the_path():
    it = iter([1.0, 2.0])

    def from_iterator(score, b, h, q_idx, kv_idx):
        return score * next(it)

    with pytest.raises(ScheduleError, match=r"an iterator .*score_mod\.it\b.*list or tuple"):
        mod_call.prepare(score_mod=from_iterator)

    class Table:
        def __getitem__(self, i):
            return 2.0

    holder = types.SimpleNamespace(table=Table())

    def from_custom(score, b, h, q_idx, kv_idx):
        return score * holder.table[0]

    with pytest.raises(ScheduleError, match=r"Table object.*__getitem__.*score_mod\.holder\.table"):
        mod_call.prepare(score_mod=from_custom)

    big = np.zeros(5000)

    def from_big(score, b, h, q_idx, kv_idx):
        return score * float(big[3])

    with pytest.raises(ScheduleError, match="numpy array of 5000 elements"):
        mod_call.prepare(score_mod=from_big)


def test_a_captured_tensors_values_read_into_python_are_refused():
    t = torch.tensor([2.0])
    for fn in (lambda score, b, h, q_idx, kv_idx: score * t.item(),
               lambda score, b, h, q_idx, kv_idx: score * float(t)):
        with pytest.raises(ScheduleError, match=r"read into Python.*t\[b \* 0\]"):
            mod_call.prepare(score_mod=fn)
    # its shape is no value: allowed (and guarded by the tensor's shape)
    mc = mod_call.prepare(score_mod=lambda score, b, h, q_idx, kv_idx: score * t.shape[0])
    assert mc.mods.score_mod.expression == "score * 1"


def test_int_mask_mod_is_refused_with_the_fix():
    for fn in (lambda b, h, q, k: q - k, lambda b, h, q, k: (q - k) % 2):
        with pytest.raises(ScheduleError, match=r"returns an int.*must return a bool tensor.*!= 0"):
            mod_call.prepare(mask_mod=fn)
    with pytest.raises(ScheduleError, match="returns a float"):
        mod_call.prepare(mask_mod=lambda b, h, q, k: (q - k) * 0.5)
    _check_mask(lambda b, h, q, k: (q - k) != 0, lambda b, h, q, k: q != k)
