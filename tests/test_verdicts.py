"""Cached verifier verdicts (b200c/codegen/verdicts.py): a protocol that passed is
not simulated again, a broken one always is, and a damaged on-disk verdict is a
miss that gets rewritten."""
import pytest
from msgspec.structs import replace

import b200c
from b200c import ProtocolError
from b200c.codegen import ir as shared_ir
from b200c.codegen import make_plan, sm90, tcgen05, verdicts, verify
from b200c.codegen.ir import Arrive, Node
from conftest import ROOT

EXAMPLE = ROOT / "examples/04_warp_specialization.py"


def _ir(path=EXAMPLE):
    s = b200c.load_schedule_file(path)
    return tcgen05.lower(s, make_plan(s))


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty on-disk cache and no verdicts remembered in this process; counts simulations."""
    monkeypatch.setenv("B200C_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("B200C_COMPILE_CACHE", raising=False)
    verdicts._folder.cache_clear()
    verdicts.forget()
    runs = []
    real = verify._check
    monkeypatch.setattr(verify, "_check", lambda ir: (runs.append(ir), real(ir)))
    yield runs
    verdicts._folder.cache_clear()
    verdicts.forget()


def _subclasses(cls):
    for c in cls.__subclasses__():
        yield c
        yield from _subclasses(c)


def test_backend_node_names_do_not_shadow_shared_ones():
    """repr() names node types by class name; the verifier tells the shared ones apart."""
    assert sm90 and tcgen05  # both backends' node classes are defined
    shared = {c.__name__: c for c in _subclasses(Node) if c.__module__ == shared_ir.__name__}
    clash = [c for c in _subclasses(Node) if c.__name__ in shared and shared[c.__name__] is not c]
    assert not clash, clash


def test_pass_is_remembered_in_process_and_on_disk(fresh, tmp_path):
    ir = _ir()
    verify.verify(ir)
    verify.verify(ir)
    assert len(fresh) == 1
    entries = list((tmp_path / "compile").glob("verdicts-*/*"))
    assert len(entries) == 1 and entries[0].name == verdicts.ir_key(ir)
    verdicts.forget()  # a new process: read from disk
    verify.verify(ir)
    assert len(fresh) == 1
    verify.verify(ir, cached=False)
    assert len(fresh) == 2


def test_broken_protocol_is_simulated_every_time(fresh):
    ir = _ir()
    verify.verify(ir)
    roles = tuple(r if r.name != "softmax" else replace(r, body=_drop_arrives(r.body)) for r in ir.roles)
    bad = replace(ir, roles=roles)
    for _ in range(2):
        with pytest.raises(ProtocolError, match="nobody arrives on barrier p_ready"):
            verify.verify(bad)
    assert len(fresh) == 3


def _drop_arrives(body):
    out = []
    for n in body:
        if isinstance(n, Arrive) and n.barrier == "p_ready":
            continue
        if getattr(n, "body", ()):
            n = replace(n, body=_drop_arrives(n.body))
        out.append(n)
    return tuple(out)


@pytest.mark.parametrize("damage", [lambda b: b[:10], lambda b: b"", lambda b: b[:-1] + b"x",
                                    lambda b: b[:32] + b"0" * (len(b) - 32)])
def test_damaged_verdict_is_a_miss_and_rewritten(fresh, tmp_path, damage):
    ir = _ir()
    verify.verify(ir)
    (entry,) = (tmp_path / "compile").glob("verdicts-*/*")
    good = entry.read_bytes()
    entry.write_bytes(damage(good))
    verdicts.forget()
    verify.verify(ir)
    assert len(fresh) == 2
    assert entry.read_bytes() == good


def test_cache_off_keeps_nothing_on_disk(fresh, tmp_path, monkeypatch):
    monkeypatch.setenv("B200C_COMPILE_CACHE", "0")
    verdicts._folder.cache_clear()
    verify.verify(_ir())
    assert not (tmp_path / "compile").exists()
