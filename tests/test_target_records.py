"""Issue 47 items 2, 6 and 7: what differs per target is read from its Target record (no target-name
comparisons outside b200c/codegen/targets.py), the command line's defaults come from those records, it
leaves nothing behind in the temporary folder or the repository, and a KV-cache step refuses inputs that
require grad."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import b200c
from b200c.codegen import targets
from b200c.errors import BackwardNotSupportedError, ScheduleError

ROOT = Path(__file__).resolve().parents[1]
# the issue's own pattern: a name compared with ==/!= or tested with `if`/`in` after a name literal
NAME_TEST = re.compile(r"""[=!]= *['"](sm[0-9]|emul)|['"](sm90a|sm100a|emulate)['"] *(if|in|==|!=)""")


def test_no_target_name_is_compared_outside_the_registry():
    found = []
    for path in sorted((ROOT / "b200c").rglob("*.py")):
        if path == ROOT / "b200c/codegen/targets.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if NAME_TEST.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "target names compared outside codegen/targets.py:\n" + "\n".join(found)


def test_the_pattern_finds_what_it_looks_for():
    """The scan above is not empty by construction: the lines it was written for are found."""
    for line in ('if target != "sm90a":', "return 1 if backend == 'sm9x' else 2", 't = "sm90a" if a else b',
                 'ok = "emulate" in names'):
        assert NAME_TEST.search(line), line
    assert not NAME_TEST.search('def f(target: str = "sm90a"):')


def test_records_carry_what_differs_per_target():
    by = {t.name: t for t in targets.REGISTRY}
    assert (by["sm90a"].num_sms, by["emulate"].num_sms, by["sm100a"].num_sms) == (132, 132, 148)
    assert by["sm90a"].stage_label(7) == "Hopper step h07" and by["sm100a"].stage_label(7) == "blog stage 7"
    assert [t.name for t in targets.REGISTRY if t.backward] == ["sm90a"]
    assert targets.for_backend("sm90") is by["sm90a"] and targets.for_backend("tcgen05") is by["sm100a"]
    assert targets.default_target() is by["sm90a"]


def test_backward_support_is_the_records_field():
    assert b200c.default_backward_schedule(128).name == "hopper_backward_d128"
    for name in ("sm100a", "emulate"):
        with pytest.raises(ScheduleError, match=r"target '%s'.*only 'sm90a'" % name):
            b200c.default_backward_schedule(128, target=name)
        with pytest.raises(ScheduleError, match=r"target '%s' has no backward design yet; use 'sm90a'" % name):
            b200c.plan_backward(b200c.default_backward_schedule(128), name)


def _cli(*args, cwd=None, env=None):
    return subprocess.run([sys.executable, "-m", "b200c", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("target, sms", [("sm100a", 148), ("sm90a", 132), ("emulate", 132)])
def test_plan_shape_uses_the_targets_sm_count(target, sms):
    pytest.importorskip("torch")
    r = _cli("compile", "default", "--emit", "plan", "--shape", "1,32,8,1,32768", "--target", target)
    assert r.returncode == 0, r.stderr
    assert f"on {sms} SMs" in r.stdout
    r = _cli("compile", "default", "--emit", "plan", "--shape", "1,32,8,1,32768", "--target", target, "--sms", "100")
    assert "on 100 SMs" in r.stdout


def test_emit_ptx_without_nvcc_leaves_no_temporary_folder(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    r = _cli("compile", str(ROOT / "examples/07_compute_pipeline.py"), "--emit", "ptx", "-o", str(tmp_path / "k.ptx"),
             env={"B200C_NVCC": str(tmp_path / "no-nvcc"), "TMPDIR": str(tmp)})
    assert r.returncode == 2 and "nvcc not found" in r.stderr
    assert list(tmp.iterdir()) == []


@pytest.mark.parametrize("name", ["my_schedule.svg", "my_schedule.png", "my_schedule.ptx", "my_schedule.cubin",
                                  "07_compute_pipeline.svg", "k07.cu"])
def test_default_outputs_in_the_repository_root_are_ignored(name):
    """What `b200c draw FILE` / `b200c compile FILE --emit ptx|cubin` write without -o (FILE's stem in the
    current folder) is not left as an untracked file in a checkout."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    r = subprocess.run(["git", "check-ignore", "-q", name], cwd=ROOT)
    assert r.returncode == 0, f"{name} in the repository root is not covered by .gitignore"


def test_kvcache_step_refuses_inputs_that_require_grad():
    torch = pytest.importorskip("torch")
    q = torch.randn(1, 1, 4, 64, dtype=torch.bfloat16)
    cache = torch.zeros(1, 32, 2, 64, dtype=torch.bfloat16)
    new = torch.randn(1, 1, 2, 64, dtype=torch.bfloat16)
    cases = {"q": dict(q=q.requires_grad_()), "k_cache": dict(k_cache=cache.clone().requires_grad_()),
             "k": dict(k=new.clone().requires_grad_(), v=new.clone())}
    for name, over in cases.items():
        args = {"q": q.detach(), "k_cache": cache.clone(), "v_cache": cache.clone(), "k": None, "v": None, **over}
        with pytest.raises(BackwardNotSupportedError, match=f"forward-only and {name} requires grad"):
            b200c.attention_with_kvcache(args["q"], args["k_cache"], args["v_cache"], args["k"], args["v"],
                                         cache_seqlens=3)
        with torch.no_grad(), pytest.raises(b200c.LaunchError):  # past the grad rule: the CPU tensors are refused
            b200c.attention_with_kvcache(args["q"], args["k_cache"], args["v_cache"], args["k"], args["v"],
                                         cache_seqlens=3)
