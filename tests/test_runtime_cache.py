"""Build cache, toolchain discovery and ``b200c build`` (run_build); tiny sources, no GPU."""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import b200c
from b200c.codegen import GeneratedKernel
from b200c.codegen.launch import LaunchInfo, WaitSite
from b200c.errors import BuildError, ScheduleError
from b200c import toolchain
from b200c.runtime import build, build_many, cache
from b200c.runtime.build_cli import run_build

def _real_nvcc():
    try:
        return toolchain.find_nvcc()
    except BuildError:
        return None


REAL_NVCC = _real_nvcc()
REPO = Path(__file__).resolve().parents[1]

LAUNCH = LaunchInfo(
    name="trivial", threads=128, dynamic_smem_bytes=0, tmem_cols=0, q_stages=1, block_m=128, block_n=128,
    head_dim=128, persistent=False, tma_box_inner=8, tma_box_rows=128, tma_swizzle="none",
    tma_l2_promotion="none", wait_sites=(WaitSite(0, "mma", "kv_full"),),
)
SRC = 'extern "C" __global__ void b200c_attention(int* p) {{ if (p) p[threadIdx.x] = {n}; }}\n'


def kernel(n: int = 1, name: str = "trivial") -> GeneratedKernel:
    return GeneratedKernel(SRC.format(n=n), LaunchInfo(**{**LAUNCH.__dict__, "name": name}))


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("B200C_CACHE_DIR", str(root))
    return root


@pytest.fixture
def counting_nvcc(tmp_path, monkeypatch):
    """B200C_NVCC -> a wrapper that logs each compile (not --version) to a file."""
    if REAL_NVCC is None:
        pytest.skip("no nvcc (b200c.toolchain.find_nvcc found none)")
    count = tmp_path / "nvcc_calls"
    count.write_text("")
    wrapper = tmp_path / "nvcc_wrapper.sh"
    wrapper.write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        case "$*" in *--version*) ;; *) echo "$*" >> '{count}' ;; esac
        exec '{REAL_NVCC}' "$@"
        """)
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("B200C_NVCC", str(wrapper))
    return lambda: len(count.read_text().splitlines())


def entries(root: Path) -> list[Path]:
    return [p for p in root.iterdir() if p.is_dir() and len(p.name) == 64]


# ---- toolchain ----------------------------------------------------------------------


def test_build_flags_of_unknown_target():
    with pytest.raises(b200c.TargetError, match="unknown target 'sm_80'; targets: 'sm100a' .*'emulate'"):
        toolchain.nvcc_flags("sm_80")


def test_flags_per_target():
    assert toolchain.nvcc_flags("sm100a") == ["-arch=sm_100a", "-cubin", "-O3", "-std=c++17"]
    emu = toolchain.nvcc_flags("emulate")
    assert emu[0] == "-arch=sm_90a" and "-DB200C_EMULATE" in emu and "-DB200C_BOUNDED_WAIT" in emu
    assert emu[emu.index("-I") + 1] == b200c.codegen.cuda_include_dir()
    assert toolchain.header_digest_text("sm100a") == ""
    assert "b200c_hang_report" in toolchain.header_digest_text("emulate")


def test_nvcc_env_pointing_nowhere(monkeypatch, tmp_path):
    monkeypatch.setenv("B200C_NVCC", str(tmp_path / "no-such-nvcc"))
    with pytest.raises(BuildError, match="nvcc not found: B200C_NVCC=.*set B200C_NVCC"):
        toolchain.find_nvcc()


def test_nvcc_missing_everywhere(monkeypatch, tmp_path, cache_root):
    monkeypatch.delenv("B200C_NVCC", raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # stripped PATH
    monkeypatch.setattr(toolchain, "TOOLKIT_HOMES", ())  # no /usr/local/cuda either
    monkeypatch.setattr(toolchain, "_wheel_nvccs", lambda: [])  # nor pip's compiler wheels
    with pytest.raises(BuildError, match=r"nvcc not found .*or set B200C_NVCC"):
        build(kernel(), "sm100a")


def test_nvcc_from_cuda_home(monkeypatch, tmp_path):
    fake = tmp_path / "cuda" / "bin" / "nvcc"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.delenv("B200C_NVCC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert toolchain.find_nvcc() == str(fake)


# ---- cache primitives (no nvcc) -----------------------------------------------------


def test_cache_key_covers_every_input():
    base = ("src", ["-O3"], "sm100a", "nvcc 13.0", "0.1.0")
    k = cache.cache_key(*base)
    assert len(k) == 64 and k == cache.cache_key(*base)
    for i, changed in enumerate(["src2", ["-O2"], "emulate", "nvcc 13.1", "0.2.0"]):
        args = list(base)
        args[i] = changed
        assert cache.cache_key(*args) != k
    assert cache.cache_key(*base, extra="header v2") != k


def fake_entry(key: str = "a" * 64) -> Path:
    d = cache.entry_dir(key)
    d.mkdir(parents=True)
    for f in cache.ENTRY_FILES:
        (d / f).write_bytes(b"\x7fELF cubin bytes" if f == "kernel.cubin" else b"x")
    cache.write_manifest(d, key)
    return d


def test_incomplete_entry_is_not_a_hit(cache_root):
    d = fake_entry()
    assert cache.is_complete(d)
    assert cache.verify_entry(d)[1] == hashlib.sha256(b"\x7fELF cubin bytes").hexdigest()
    (d / "kernel.cubin").write_text("")
    assert cache.verify_entry(d)[0] == "kernel.cubin does not match its recorded sha256"
    (d / "launch.json").unlink()
    assert not cache.is_complete(d)
    assert cache.verify_entry(cache.entry_dir("b" * 64)) == ("absent", None)


@pytest.mark.parametrize("damage,problem", [
    (lambda d: (d / "kernel.cubin").write_bytes(b"\x7fELF cubin"), "kernel.cubin does not match"),  # truncated
    (lambda d: (d / "kernel.cubin").write_bytes(bytes(17)), "kernel.cubin does not match"),  # zero-filled
    (lambda d: (d / "launch.json").write_bytes(b"{garbage"), "launch.json does not match"),
    (lambda d: (d / "manifest.json").write_bytes(b"\xff\xfe garbage"), "manifest.json is not valid"),
    (lambda d: (d / "manifest.json").write_text('{"format": 1, "key": "other", "sha256": {}}'),
     "manifest.json does not describe this entry"),
    (lambda d: (d / "manifest.json").write_text("[1, 2]"), "manifest.json is not valid"),
    (lambda d: (d / "manifest.json").unlink(), "manifest.json is missing"),
    (lambda d: (d / "build.log").unlink(), "build.log is missing"),
    (lambda d: ((d / "kernel.cubin").unlink(), (d / "kernel.cubin").mkdir()), "kernel.cubin is missing"),
])
def test_damaged_entry_is_named_not_loaded(cache_root, damage, problem):
    d = fake_entry()
    damage(d)
    found, digest = cache.verify_entry(d)
    assert found.startswith(problem) and digest is None


def test_entry_that_is_a_file(cache_root):
    d = cache.entry_dir("c" * 64)
    d.parent.mkdir(parents=True, exist_ok=True)
    d.write_bytes(b"garbage")
    assert cache.verify_entry(d) == ("not a folder", None)
    cache.remove(d)
    assert not d.exists()


def test_cache_dir_that_is_a_file(tmp_path, monkeypatch):
    f = tmp_path / "file"
    f.write_text("x")
    monkeypatch.setenv("B200C_CACHE_DIR", str(f / "sub"))
    with pytest.raises(BuildError, match="kernel cache folder .* cannot be created .*set B200C_CACHE_DIR"):
        cache.cache_dir()


def test_damaged_cubin_never_reaches_the_driver(tmp_path, monkeypatch):
    """driver.load re-checks the cubin's sha256 (recorded at build time) before cuModuleLoadData."""
    from b200c.runtime import driver
    from b200c.runtime.build import BuiltKernel

    cubin = tmp_path / "kernel.cubin"
    cubin.write_bytes(b"\x7fELF good")
    built = BuiltKernel(cubin, LAUNCH, "sm100a", "d" * 64, False, hashlib.sha256(b"\x7fELF good").hexdigest())
    assert driver._verified_image(built) == b"\x7fELF good"
    cubin.write_bytes(bytes(10))
    with pytest.raises(BuildError, match="changed after it was verified .sha256 mismatch.; call again to rebuild"):
        driver._verified_image(built)
    cubin.unlink()
    with pytest.raises(BuildError, match="cannot read cached kernel"):
        driver._verified_image(built)


def test_cache_dir_default_uses_platformdirs(monkeypatch):
    import platformdirs

    monkeypatch.delenv("B200C_CACHE_DIR", raising=False)
    assert cache.cache_dir() == Path(platformdirs.user_cache_dir("b200c"))


# ---- builds (nvcc) ------------------------------------------------------------------


@pytest.mark.nvcc
def test_second_build_does_not_invoke_nvcc(cache_root, counting_nvcc):
    first = build(kernel(), "sm100a")
    assert first.built and counting_nvcc() == 1
    d = first.cubin_path.parent
    assert cache.is_complete(d) and d.parent == cache_root
    assert b200c.codegen.LaunchInfo.from_json((d / "launch.json").read_text()) == first.launch
    assert (d / "kernel.cu").read_text() == SRC.format(n=1)
    second = build(kernel(), "sm100a")
    assert not second.built and second.key == first.key and counting_nvcc() == 1


@pytest.mark.nvcc
def test_changed_source_rebuilds_only_that_kernel(cache_root, counting_nvcc):
    items = [(f"k{i}", kernel(i, f"k{i}")) for i in range(3)]
    assert [r.built for r in build_many(items, "sm100a", progress=False)] == [True] * 3
    assert counting_nvcc() == 3
    items[1] = ("k1", kernel(41, "k1"))
    res = build_many(items, "sm100a", progress=False)
    assert [r.built for r in res] == [False, True, False]
    assert counting_nvcc() == 4
    assert len(entries(cache_root)) == 4


@pytest.mark.nvcc
def test_targets_have_separate_entries(cache_root, counting_nvcc):
    a = build(kernel(), "sm100a")
    b = build(kernel(), "emulate")
    assert a.key != b.key and b.built and b.target == "emulate"
    calls = (cache_root.parent / "nvcc_calls").read_text().splitlines()
    assert "-arch=sm_90a" in calls[1] and "-DB200C_EMULATE" in calls[1]


@pytest.mark.nvcc
def test_incomplete_entry_is_rebuilt(cache_root, counting_nvcc):
    key = build(kernel(), "sm100a").key
    (cache_root / key / "kernel.cubin").unlink()
    again = build(kernel(), "sm100a")
    assert again.built and counting_nvcc() == 2 and cache.is_complete(cache_root / key)


@pytest.mark.nvcc
@pytest.mark.parametrize("damage", ["truncated", "zero-filled", "garbage manifest", "no manifest", "launch.json",
                                    "entry is a file"])
def test_damaged_entry_is_rebuilt_with_one_warning(cache_root, counting_nvcc, caplog, damage):
    first = build(kernel(), "sm100a")
    d = first.cubin_path.parent
    good = first.cubin_path.read_bytes()
    if damage == "truncated":
        first.cubin_path.write_bytes(good[: len(good) // 2])
    elif damage == "zero-filled":
        first.cubin_path.write_bytes(bytes(len(good)))
    elif damage == "garbage manifest":
        (d / "manifest.json").write_bytes(os.urandom(64))
    elif damage == "no manifest":
        (d / "manifest.json").unlink()
    elif damage == "launch.json":
        (d / "launch.json").write_text("{}")
    else:
        shutil.rmtree(d)
        d.write_bytes(b"\0" * 100)
    with caplog.at_level(logging.WARNING, logger="b200c.runtime"):
        again = build(kernel(), "sm100a")
    warnings = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0], warnings
    assert f"kernel cache entry {d} is damaged (" in warnings[0] and "rebuilding it" in warnings[0]
    assert again.built and again.key == first.key and counting_nvcc() == 2
    assert again.cubin_path.read_bytes() == good and cache.is_complete(d)
    assert again.cubin_sha256 == hashlib.sha256(good).hexdigest()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="b200c.runtime"):
        assert not build(kernel(), "sm100a").built  # sound again: a plain hit, no warning
    assert not caplog.records


@pytest.mark.nvcc
def test_duplicate_items_compile_once(cache_root, counting_nvcc):
    res = build_many([("a", kernel()), ("b", kernel())], "sm100a", progress=False)
    assert res[0].key == res[1].key and counting_nvcc() == 1


@pytest.mark.nvcc
def test_compile_error_names_file_and_first_error(cache_root, counting_nvcc):
    bad = GeneratedKernel(SRC.format(n=1) + "int broken = ;\n", LAUNCH)
    with pytest.raises(BuildError) as ei:
        build_many([("bad", bad), ("good", kernel(7))], "sm100a", progress=False)
    msg = str(ei.value)
    assert "kernel 'bad'" in msg and "error" in msg and "expected an expression" in msg
    path = msg.split("generated file: ")[1].split(";")[0]
    assert Path(path).read_text().endswith("int broken = ;\n")
    assert len(entries(cache_root)) == 1  # the good kernel is cached anyway
    assert not build(kernel(7), "sm100a").built


_RACE = """
import sys, b200c
from b200c.codegen import GeneratedKernel
from b200c.codegen.launch import LaunchInfo
from b200c.runtime import build
li = LaunchInfo.from_json(sys.argv[1])
r = build(GeneratedKernel(sys.argv[2], li), "sm100a")
print(r.key)
"""


@pytest.mark.nvcc
def test_two_processes_build_same_kernel(cache_root, counting_nvcc):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [sys.executable, "-c", _RACE, LAUNCH.to_json(), SRC.format(n=99)]
    procs = [subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1] for o in outs]
    keys = {o[0].strip() for o in outs}
    assert len(keys) == 1
    assert [e.name for e in entries(cache_root)] == list(keys)
    assert cache.is_complete(cache_root / keys.pop())
    assert counting_nvcc() == 1  # the second process waited on the lock, then hit
    assert not [p for p in cache_root.iterdir() if p.name.startswith(".build-")]


# ---- run_build (b200c build) --------------------------------------------------------


@pytest.mark.nvcc
def test_run_build_cli(cache_root, counting_nvcc, tmp_path, monkeypatch, capfd):
    import b200c.codegen

    monkeypatch.setattr(b200c.codegen, "generate", lambda s, t: kernel(len(s.name), s.name))
    files = []
    for name in ("a", "bb"):
        f = tmp_path / f"{name}.py"
        f.write_text(f"import b200c\nschedule = b200c.Schedule(name={name!r})\n")
        files.append(str(f))
    assert run_build(files, "sm100a", jobs=2) == 0
    out = capfd.readouterr().out
    assert "[2/2]" in out
    assert f"built  {files[0]}" in out and f"built  {files[1]}" in out
    assert run_build(files, "sm100a", jobs=None) == 0
    out = capfd.readouterr().out
    assert f"cached {files[0]}" in out and f"cached {files[1]}" in out
    assert counting_nvcc() == 2


def test_run_build_bad_files(cache_root, tmp_path):
    good = tmp_path / "good.py"
    good.write_text("import b200c\nschedule = b200c.Schedule()\n")
    bad = [str(tmp_path / "missing.py"), str(tmp_path / "also_missing.py")]
    with pytest.raises(ScheduleError, match=r"missing.py: schedule file .* does not exist .*\(1 more failed: .*also"):
        run_build([str(good), *bad], "sm100a", jobs=1)
    assert not cache_root.exists() or not entries(cache_root)  # nothing built when any file is bad


def test_run_build_unknown_target(cache_root, tmp_path, monkeypatch):
    f = tmp_path / "a.py"
    f.write_text("import b200c\nschedule = b200c.Schedule()\n")
    with pytest.raises(b200c.TargetError, match="unknown target 'sm_75'"):
        run_build([str(f)], "sm_75", jobs=1)
