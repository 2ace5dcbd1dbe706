"""b200c.attention's arguments, schedule-file caching (every file a schedule was built from),
the autograd formula (forward-only, eager and torch.compile) and its documentation (CPU only)."""
from __future__ import annotations

import os
import textwrap

import pytest
import torch

import b200c
from b200c.errors import BackwardNotSupportedError, LaunchError, ResourceError, ScheduleError
from b200c.runtime import api, fake_driver

BF16 = torch.bfloat16
INFEASIBLE = b200c.Schedule(p_storage="tmem", warp_specialized=True, q_stages=3)


def t(b=1, h=2, s=256, d=128, **kw):
    return torch.randn(b, h, s, d).to(BF16).requires_grad_(kw.get("grad", False))


def write(path, text):
    path.write_text(textwrap.dedent(text))
    return path


def bump(path, ns=10**9):
    """Move the mtime forward (edits within one timestamp tick are tested separately)."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + ns))


# ---- arguments ----------------------------------------------------------------------


@pytest.mark.parametrize("scale", ["x", "0.1", b"1", [0.1], True, 1j])
def test_softmax_scale_must_be_a_real_number(scale):
    with pytest.raises(LaunchError, match=r"softmax_scale=.* must be a real number in natural-log units"):
        b200c.attention(t(), t(), t(), schedule=b200c.Schedule(), softmax_scale=scale)


@pytest.mark.parametrize("scale", [float("nan"), float("inf")])
def test_softmax_scale_must_be_finite(scale):
    with pytest.raises(LaunchError, match="softmax_scale=.* must be finite"):
        b200c.attention(t(), t(), t(), schedule=b200c.Schedule(), softmax_scale=scale)


def test_softmax_scale_int_is_accepted():
    with fake_driver.install() as fd:
        q = t()
        b200c.attention(q, q, q, schedule=b200c.Schedule(), softmax_scale=1)
        assert fd.launches[0].scale == 1.0


def test_infeasible_schedule_reported_before_cpu_tensors():
    with pytest.raises(ResourceError, match="need 768 of 512 TMEM columns"):
        b200c.attention(t(), t(), t(), schedule=INFEASIBLE)


def test_infeasible_schedule_file_reported_before_cpu_tensors(tmp_path):
    f = write(tmp_path / "bad.py", """\
        import b200c
        schedule = b200c.Schedule(p_storage="tmem", warp_specialized=True, q_stages=3)
        """)
    with pytest.raises(ResourceError, match="need 768 of 512 TMEM columns"):
        b200c.attention(t(), t(), t(), schedule=str(f))


def test_valid_schedule_on_cpu_tensors_names_the_device():
    with pytest.raises(LaunchError, match="tensor q is on cpu; b200c kernels need a CUDA tensor"):
        b200c.attention(t(), t(), t(), schedule=b200c.Schedule())


def test_schedule_json_made_once_per_object(monkeypatch):
    s = b200c.Schedule(name="cached_obj")
    text = api._schedule_json(s)
    assert text == s.to_json()
    monkeypatch.setattr(b200c.Schedule, "to_json", lambda self: pytest.fail("recomputed"))
    assert api._schedule_json(s) is text  # the JSON the immutable Schedule was made with, validated once
    monkeypatch.undo()
    bad = b200c.Schedule(name="bad_knob", kv_stages={2})  # JSON cannot hold a set: validate() names the knob
    assert bad._json is None
    with pytest.raises(ScheduleError, match="kv_stages"):
        api._schedule_json(bad)


def test_unknown_schedule_field_at_construction():
    with pytest.raises(ScheduleError, match="Schedule has no field 'warp_specialised'; did you mean 'warp_specialized'"):
        b200c.Schedule(warp_specialised=True)
    with pytest.raises(ScheduleError, match="has no field 'kv_stage'; did you mean 'kv_stages'"):
        b200c.Schedule().replace(kv_stage=4)
    assert b200c.Schedule(kv_stages=2).kv_stages == 2


def test_help_is_the_full_docstring():
    doc = b200c.attention.__doc__
    for part in ("Args:", "q:", "schedule:", "softmax_scale:", "layout:", "target:", "Returns:", "Raises:",
                 "BackwardNotSupportedError", "torch.compile"):
        assert part in doc
    assert len(doc.splitlines()) > 30
    assert api.attention.__doc__ == doc and b200c.runtime.attention.__doc__ == doc


# ---- schedule files: every file a schedule was built from ------------------------------------


@pytest.fixture
def base_derived(tmp_path):
    base = write(tmp_path / "base.py", """\
        import b200c
        schedule = b200c.Schedule(name="base", kv_stages=1)
        """)
    derived = write(tmp_path / "derived.py", """\
        from pathlib import Path
        import b200c
        schedule = b200c.load_schedule_file(Path(__file__).with_name("base.py")).replace(name="derived")
        """)
    return base, derived


def test_editing_the_base_of_a_derived_schedule_is_seen(base_derived):
    base, derived = base_derived
    assert '"swizzle": "none"' in api._schedule_json(str(derived))
    write(base, """\
        import b200c
        schedule = b200c.Schedule(name="base", swizzle="128B")
        """)
    bump(base)
    assert '"swizzle": "128B"' in api._schedule_json(str(derived))


def test_next_call_runs_the_edited_base_kernel(base_derived):
    base, derived = base_derived
    with fake_driver.install() as fd:
        q = t()
        b200c.attention(q, q, q, schedule=str(derived))
        b200c.attention(q, q, q, schedule=str(derived))
        assert fd.loads == 1 and fd.encodes[-1][3] == 8  # unswizzled: 8-element TMA boxes
        write(base, """\
            import b200c
            schedule = b200c.Schedule(name="base", swizzle="128B")
            """)
        bump(base)
        b200c.attention(q, q, q, schedule=str(derived))
        assert fd.loads == 2 and len(fd.launches) == 3
        assert fd.encodes[-1][3] == 64  # the third launch used the 128B-swizzled kernel's maps


def test_edit_within_one_timestamp_tick_is_seen(base_derived):
    """Same size, same mtime (an edit inside one filesystem timestamp tick): contents decide."""
    base, derived = base_derived
    assert '"kv_stages": 1' in api._schedule_json(str(derived))
    st = base.stat()
    base.write_text(base.read_text().replace("kv_stages=1", "kv_stages=2"))
    os.utime(base, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert base.stat().st_size == st.st_size
    with pytest.raises(ScheduleError, match="kv_stages=2 needs warp_specialized"):
        api._schedule_json(str(derived))  # the edit is seen (and this base is infeasible)


def test_helper_module_next_to_the_schedule_is_followed(tmp_path):
    helper = write(tmp_path / "b200c_test_helper_knobs.py", "STAGES = 1\n")
    f = write(tmp_path / "uses_helper.py", """\
        import b200c
        from b200c_test_helper_knobs import STAGES
        schedule = b200c.Schedule(name="helper", kv_stages=STAGES)
        """)
    assert '"kv_stages": 1' in api._schedule_json(str(f))
    helper.write_text("STAGES = 22\n")
    bump(helper)
    with pytest.raises(ScheduleError, match="kv_stages=22"):
        api._schedule_json(str(f))
    import sys

    assert "b200c_test_helper_knobs" not in sys.modules


def test_unchanged_files_are_not_run_again(base_derived, monkeypatch):
    base, derived = base_derived
    for p in base_derived:
        bump(p, -10 * 10**9)  # well in the past: no content hashing either
    api._schedule_json(str(derived))
    from b200c.runtime import schedule_files

    monkeypatch.setattr(schedule_files, "_load_file", lambda *a: pytest.fail("loaded again"))
    monkeypatch.setattr(schedule_files, "_digest", lambda path: pytest.fail("hashed"))
    api._schedule_json(str(derived))
    api._schedule_json(str(derived))


def test_load_with_dependencies_lists_every_file(base_derived):
    base, derived = base_derived
    s, files = b200c.dsl.load_with_dependencies(derived)
    assert s.name == "derived"
    assert [p for p, _ in files] == sorted([str(base.resolve()), str(derived.resolve())])
    assert all(isinstance(st, os.stat_result) for _, st in files)


def test_relative_path_follows_the_current_folder(tmp_path, monkeypatch):
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        write(tmp_path / d / "s.py", f"import b200c\nschedule = b200c.Schedule(name='{d}')\n")
    monkeypatch.chdir(tmp_path / "a")
    assert '"name": "a"' in api._schedule_json("s.py")
    monkeypatch.chdir(tmp_path / "b")
    assert '"name": "b"' in api._schedule_json("s.py")


def test_deleted_file_is_reported(base_derived):
    base, derived = base_derived
    api._schedule_json(str(derived))
    derived.unlink()
    with pytest.raises(ScheduleError, match="does not exist"):
        api._schedule_json(str(derived))


# ---- autograd (the kernels run on sm_90a only; tests/test_backward_autograd.py checks the formula) ----


def test_backward_off_sm90_raises_a_typed_error_naming_the_device():
    with fake_driver.install():
        q, k, v = t(grad=True), t(grad=True), t(grad=True)
        out = b200c.attention(q, k, v, schedule=b200c.Schedule())
        assert out.requires_grad
        with pytest.raises(BackwardNotSupportedError, match="backward kernels run on sm_90a"):
            out.float().sum().backward()


def test_compile_with_grad_requiring_inputs():
    """Issue 11: fullgraph compile of a function whose inputs require grad (AOT autograd traces the
    backward op through its fake impl; on the CPU its launch layer refuses the device by name)."""
    torch._dynamo.reset()
    s = b200c.Schedule()

    def fn(q, k, v):
        return b200c.attention(q, k, v, schedule=s) * 2

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    try:
        with fake_driver.install() as fd:
            q, k, v = t(grad=True), t(s=384, grad=True), t(s=384, grad=True)
            out = compiled(q, k, v)  # compiles (AOT autograd traces the backward too) and runs the forward
            assert out.shape == q.shape and len(fd.launches) == 1
            assert fd.launches[0].sizes == (1, 2, 256, 384)
            with pytest.raises(BackwardNotSupportedError, match="backward kernels run on sm_90a"):
                out.float().sum().backward()
    finally:
        torch._dynamo.reset()


# ---- the README's schedule example runs from anywhere ----------------------------------------


def test_readme_schedule_example_from_another_folder(tmp_path, monkeypatch):
    from conftest import ROOT

    readme = (ROOT / "README.md").read_text()
    assert "pip install -e . && b200c compile examples/07_compute_pipeline.py -o k07.cu" in readme
    assert 'pip install -e ".[dev]" && python -m pytest -q' in readme
    code = "# my_schedule.py" + readme.split("```python\n# my_schedule.py")[1].split("```")[0]
    checkout = tmp_path / "checkout"  # the README puts the file in the repository root, next to examples/
    checkout.mkdir()
    (checkout / "examples").symlink_to(ROOT / "examples")
    (checkout / "my_schedule.py").write_text(code)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    s = b200c.load_schedule_file(checkout / "my_schedule.py")
    assert s.name == "ring4" and s.kv_stages == 4


def test_explicit_target_the_schedule_cannot_take_is_a_schedule_error_before_the_tensors():
    from conftest import ROOT

    q = torch.randn(1, 1, 128, 128).to(torch.bfloat16)  # CPU: the tensor rule would fail next
    hopper = str(ROOT / "examples" / "hopper" / "h11_persistent.py")
    for target in ("sm100a", "emulate"):
        with pytest.raises(ScheduleError, match="block_m=64: target sm100a"):
            b200c.attention(q, q, q, schedule=hopper, target=target)
    with pytest.raises(ScheduleError, match="on target sm90a"):
        b200c.attention(q, q, q, schedule=b200c.Schedule(), target="sm_90a")
    with pytest.raises(LaunchError, match="tensor q is on cpu"):  # the schedule's own target: the tensors next
        b200c.attention(q, q, q, schedule=hopper, target="sm90a")
    with pytest.raises(b200c.TargetError, match="unknown target 'gpu'"):
        b200c.attention(q, q, q, schedule=hopper, target="gpu")
