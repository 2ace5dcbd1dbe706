"""The CUDA helper headers of the generated kernels, and their text as a kernel inlines it.

``b200c_ptx.cuh`` (tcgen05: sm100a and its sm_90a emulation) and ``b200c_sm90.cuh`` (Hopper) each
``#include "b200c_common.cuh"``, the helpers both backends share (ids, mbarriers and their bounded
waits, TMA, the softmax math with its NaN rule). Generated sources are self-contained: the emitters
take a header's text from :func:`header_text`, which puts the common header's text in place of that
include line. ``b200c_emulate.cuh`` stays an ``#include`` of the emulated build, found with ``-I``
:func:`b200c.codegen.cuda_include_dir` (whose ``*.cuh`` texts are part of that build's cache key).
"""
from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).parent
COMMON = "b200c_common.cuh"
_INCLUDE = re.compile(r'^#include "(?P<name>b200c_common\.cuh)"[^\n]*$', re.M)


def header_text(name: str) -> str:
    """Text of the helper header ``name`` (``"b200c_ptx.cuh"`` or ``"b200c_sm90.cuh"``) as a kernel
    inlines it: each ``#include "b200c_common.cuh"`` line replaced by that file's text, without the
    trailing newline.

    Raises:
        FileNotFoundError: no header ``name`` in this folder.
        ValueError: ``name`` is not a plain file name of this folder (contains a path separator).
    """
    if Path(name).name != name:
        raise ValueError(f"header name {name!r} must be a file name in {HERE}, not a path")
    text = (HERE / name).read_text()
    common = (HERE / COMMON).read_text().rstrip("\n")
    return _INCLUDE.sub(lambda m: common, text).rstrip("\n")


__all__ = ["COMMON", "HERE", "header_text"]
