"""Golden snapshots: the generated .cu of every example, byte for byte.

Regenerate on purpose with ``pytest tests/test_golden.py --update-golden`` and
review ``git diff -- tests/golden`` like code.
"""
from pathlib import Path

import pytest

from conftest import EXAMPLES

GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_generated_cuda_matches_golden(example, generated, request):
    src = generated[example.stem].source
    golden = GOLDEN / f"{example.stem}.cu"
    if request.config.getoption("--update-golden"):
        GOLDEN.mkdir(exist_ok=True)
        golden.write_text(src)
        pytest.skip(f"rewrote {golden.name}")
    assert golden.exists(), f"no golden file {golden}; run pytest --update-golden and review it"
    expected = golden.read_text()
    if src != expected:
        import difflib

        diff = "".join(list(difflib.unified_diff(expected.splitlines(True), src.splitlines(True),
                                                 "golden", "generated", n=1))[:60])
        pytest.fail(f"{example.name} differs from {golden.name}:\n{diff}")


def test_every_example_has_a_golden_file():
    names = {p.stem for p in EXAMPLES}
    files = {p.stem for p in GOLDEN.glob("*.cu")}
    assert names == files
    assert len(names) == 18
