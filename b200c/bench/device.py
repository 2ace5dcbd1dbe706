"""The GPU the benchmark runs on, or a typed refusal."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import UnsupportedDeviceError


@dataclass(frozen=True)
class Device:
    """The CUDA device: ordinal, name, compute capability, SM count."""

    index: int
    name: str
    capability: tuple
    sms: int

    @property
    def arch(self) -> str:
        """``sm_90a`` / ``sm_100a`` style name of the capability."""
        return f"sm_{self.capability[0]}{self.capability[1]}"


def current_device() -> Device:
    """The current CUDA device.

    Raises:
        UnsupportedDeviceError: no CUDA GPU is visible (or torch has no CUDA);
            the benchmark cannot run here.
    """
    try:
        import torch
    except ImportError:
        raise UnsupportedDeviceError("b200c bench needs PyTorch with CUDA; it is not installed") from None
    if not torch.cuda.is_available():
        raise UnsupportedDeviceError(
            "b200c bench needs a CUDA GPU (an H100/H200 for target sm90a, a B200 for sm100a) and none is visible "
            f"(torch {torch.__version__}, CUDA {'built' if torch.version.cuda else 'not built'}); run it on the GPU "
            "machine, or use 'b200c check' here for compile-time numbers"
        )
    i = torch.cuda.current_device()
    p = torch.cuda.get_device_properties(i)
    return Device(i, p.name, (p.major, p.minor), p.multi_processor_count)
