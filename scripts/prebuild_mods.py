"""Build the kernels of tests/gpu/test_mods.py into the kernel cache on a machine without a GPU: its
calls are replayed on CPU tensors under the stand-in driver (b200c.runtime.fake_driver) for each
target, every kernel they would load is recorded, then built with nvcc (b200c.runtime.build.build_many).
Carry the cache folder (B200C_CACHE_DIR) to the GPU machine and the suite only launches.

A replay is not a test run: with test_mods.PREBUILD set the test functions skip their references and
checks, so this script calls them itself (never through pytest) and reports kernels, not passes; under
pytest the module's torch fixture skips any test while PREBUILD is set ("prebuild replay, nothing
checked").

    B200C_CACHE_DIR=/tmp/prebuild python scripts/prebuild_mods.py
"""
import argparse
import inspect
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "gpu"))
sys.path.insert(0, str(ROOT / "scripts"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="sm90a,emulate", help="comma-separated targets to replay (default: both)")
    args = ap.parse_args()
    import torch

    import b200c
    import test_mods as tm
    from b200c.runtime import fake_driver, op
    from b200c.runtime.build import build_many

    tm.PREBUILD, tm.DEV = True, "cpu"
    seen = {}
    for target in args.targets.split(","):
        with fake_driver.install(target=target):
            load = op.kernel_for_generated

            def record(gen, tgt, device, load=load, target=target):
                seen.setdefault(target, {})[gen.source] = gen
                return load(gen, tgt, device)

            op.kernel_for_generated = record
            from b200c.codegen.targets import resolve
            from b200c.runtime import api

            # CPU tensors have no device to ask: schedule=None with target="auto" takes the replayed target's presets
            # (the GPU machine's native ones); "auto" never picks the emulation, so that replay skips the drop-in
            native = resolve(target)
            orig_default = api._default
            api._default = lambda dev, tgt, d, mods=False, seq_kv=None, *, native=native: (
                native.default_schedule(d, mods, seq_kv) if tgt == "auto" else orig_default(dev, tgt, d, mods, seq_kv))
            if native.native:  # scripts/bench_mods.py's b200c calls (the device's presets, head dim 128)
                import bench_mods

                x = torch.randn(1, 2, 256, 128).bfloat16()
                for row in bench_mods.rows(torch, 1, 2, 256, "cpu"):
                    b200c.attention(x, x, x, **row[1])
            for name, fn in inspect.getmembers(tm, inspect.isfunction):
                if name.startswith("test_") and not (name == "test_sdpa_attn_mask" and not native.native):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        fn(torch, [target])  # (torch, targets): the fixtures' values
            api._default = orig_default
    for target, gens in seen.items():
        print(f"{target}: {len(gens)} kernels (replayed, nothing checked: run the GPU suite for that)")
        build_many([(f"{g.launch.name}_{i}", g) for i, g in enumerate(gens.values())], target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
