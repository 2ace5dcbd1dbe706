"""The GPU suite's deliberately broken kernel (tests/gpu/broken.py) is built on the CPU too, so its
helper cannot rot unseen again (it called dataclasses.replace on IR nodes after they became msgspec
Structs, and the GPU test that a hung kernel names its stuck roles had not run since): the IR it
makes lacks the arrive, the verifier rejects that IR naming the barrier, and the source it emits
has no arrival on p_ready."""
from pathlib import Path

import pytest

import b200c
from b200c.codegen import make_plan, verify
from b200c.codegen.targets import resolve
from b200c.errors import ProtocolError
from gpu.broken import broken_kernel, drop_arrive

STAGE4 = Path(__file__).resolve().parents[1] / "examples/04_warp_specialization.py"


def test_broken_kernel_drops_the_arrive_and_the_verifier_names_it():
    s = b200c.load_schedule_file(STAGE4)
    backend = resolve("sm100a").backend_module()
    ir = backend.lower(s, make_plan(s))
    broken = drop_arrive(ir, "softmax", "p_ready")
    assert broken != ir and "arrive p_ready" in ir.text() and "arrive p_ready" not in broken.text()
    with pytest.raises(ProtocolError, match="p_ready"):
        verify.verify(broken)
    good = b200c.generate(s).source
    bad = broken_kernel(STAGE4, "softmax", "p_ready").source
    arrive = "mbar_arrive(c.bar(BAR_P_READY"
    assert good.count(arrive) == 2 and bad.count(arrive) == 0  # the steady-state and the masked tiles' copies
    with pytest.raises(ValueError, match="has no arrive on 'nope'"):
        drop_arrive(ir, "softmax", "nope")
