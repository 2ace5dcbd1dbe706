"""The plumbing of a third target: the stub in tests/stub_sm120/ (a package beside this file) is
registered at run time and then resolves by name and spelling, generates through its own emit,
compiles (nvcc, sm_120a), appears in the CLI and is refused by a device of another compute
capability, without any file of b200c/ naming it.

What this does not show (docs/new-backend.md says so): that a real backend needs nothing more. The
stub borrows sm90's rules, plan and lowering, and its kernel is not an attention kernel: the entry
signature and the shared work decomposition, each warp role only counted in a comment (no role code
is compiled or run; test_the_stub_kernel_has_no_role_code pins that, so the docs cannot drift)."""
import subprocess
from pathlib import Path

import pytest

import b200c
from b200c.codegen import targets
from b200c.codegen.targets import Capabilities, Target

ROOT = Path(__file__).resolve().parents[1]
STUB = Path(__file__).with_name("stub_sm120")
HOPPER = ROOT / "examples/hopper/h11_persistent.py"

ENTRY = Target(  # the one registry entry
    name="sm120a", spellings=("sm_120a",), summary="stub consumer Blackwell (tests)", backend="stub_sm120",
    source="sm120a", compute_capability=(12, 0), devices="RTX 50xx", arch="sm_120a",
    nvcc_flags=("-arch=sm_120a",), header="", caps=Capabilities(causal=True, gqa=True, lse=False, varlen=True,
                                                              head_dims=(128,), profile=False),
)


@pytest.fixture
def stub():
    targets.register(ENTRY)
    try:
        yield ENTRY
    finally:
        targets.unregister("sm120a")


def test_the_stub_needs_only_its_folder():
    """Which files the stub's plumbing needed: its own folder (and this test's registry entry); no file
    of the package mentions it (the registry is open: nothing in b200c/ lists targets by name)."""
    assert sorted(p.relative_to(STUB).as_posix() for p in STUB.rglob("*") if p.is_file() and "__pycache__" not in
                  p.parts) == ["__init__.py", "templates/kernel.cu.j2"]
    found = subprocess.run(["git", "grep", "-il", "sm120", "--", "b200c"], cwd=ROOT, capture_output=True, text=True)
    assert found.stdout == "", found.stdout


def test_registered_target_generates_and_resolves(stub):
    assert targets.resolve("SM_120A") is stub and "sm120a" in targets.names()
    g = b200c.generate(b200c.load_schedule_file(HOPPER), "sm120a")
    assert g.target == "sm120a" and "decode_work(c, (int)blockIdx.x)" in g.source
    from b200c.toolchain import nvcc_flags

    assert nvcc_flags("sm120a")[0] == "-arch=sm_120a"
    from b200c.errors import TargetError

    with pytest.raises(TargetError, match="already registered"):
        targets.register(stub)


def test_registered_target_reaches_the_cli_and_the_device_check(stub, capsys):
    from b200c import cli
    from b200c.errors import UnsupportedDeviceError
    from b200c.runtime import driver

    assert cli.main(["compile", str(HOPPER), "--target", "sm120a", "-o", "-"]) == 0
    assert "stub sm120a kernel" in capsys.readouterr().out
    assert "sm120a: stub consumer Blackwell" in cli.make_parser()._subparsers._group_actions[0].choices[
        "compile"].format_help()
    with pytest.raises(UnsupportedDeviceError, match=r"'sm120a' needs compute capability 12\.0 .*has 9\.0"):
        driver.check_arch("sm120a", (9, 0), "H200")
    assert driver.resolve_target("sm120a", (12, 0)).name == "sm120a"


@pytest.mark.nvcc
def test_registered_target_compiles_with_its_flags(stub, tmp_path):
    from b200c.nvcc import compile_cuda

    g = b200c.generate(b200c.load_schedule_file(HOPPER), "sm120a")
    res = compile_cuda(g.source, tmp_path / "k.cubin", "cubin", "sm120a")
    assert res.path.stat().st_size > 0


def test_the_stub_kernel_has_no_role_code(stub):
    """The limit stated in docs/new-backend.md: the stub's kernel runs no warp role (each role is a
    comment); a stub that gains role code must change the docs' sentence with this test."""
    g = b200c.generate(b200c.load_schedule_file(HOPPER), "sm120a")
    roles = [line for line in g.source.splitlines() if line.startswith("// role ")]
    assert roles and all(line.endswith("(not compiled)") for line in roles)
    assert "mbar_arrive_sm120" not in g.source and "wgmma" not in g.source
    assert "no role code is compiled or run" in (ROOT / "docs/new-backend.md").read_text()
