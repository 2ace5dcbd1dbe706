"""Typed errors raised by b200c.

Every error message says what was wrong, the limit or rule, and what to change.
The CLI prints ``str(err)`` on one line and exits non-zero; it never shows a
Python traceback for these. :class:`FallbackWarning` is the one warning
category: the SDPA drop-in says with it why it ran torch's SDPA instead.
"""


class B200cError(Exception):
    """Base class of every error b200c raises on purpose."""


class ScheduleError(B200cError, ValueError):
    """A schedule knob has an invalid value or contradicts another knob.

    Raised by :meth:`b200c.Schedule.validate` and by the schedule-file loader.
    """


class ResourceError(ScheduleError):
    """A valid-looking schedule needs more of a hardware budget than exists.

    The message names the budget (TMEM columns, dynamic SMEM bytes, threads per
    CTA, register pool) and both numbers, e.g. "needs 768 of 512 TMEM columns".
    """


class IssueOrderError(ScheduleError):
    """The schedule's MMA issue order cannot be parsed or breaks a dependency.

    The message names the offending step (e.g. ``Q0K(i+1)``) and the dependency
    it breaks (blog chapter 7: PV needs P from softmax, QK needs its K token, a
    K/V slot is refilled only after its last consumer, S/P is overwritten only
    after its PV).
    """


class ProtocolError(B200cError, RuntimeError):
    """The generated kernel's barrier protocol is inconsistent: a wait without a
    matching arrive, a wrong arrival count per phase, a wrong phase parity.

    Raised by the protocol verifier in every ``generate()`` before any code is
    emitted; the message names the barrier, the warp role and the step. It
    points at a bug in a backend's lowering (or a hand-edited IR), not at the
    schedule.
    """


class TargetError(B200cError, ValueError):
    """An unknown code-generation target name (``b200c.generate(schedule,
    target=...)``; the message lists the known targets), or a generation
    option the target does not offer (e.g. profiling stamps on tcgen05)."""


class BuildError(B200cError, RuntimeError):
    """nvcc/ptxas/ninja failed or is missing; the message names the generated
    file and the first compiler error line."""


class DrawError(B200cError, ValueError):
    """``b200c draw`` cannot make the picture: an option out of range, an
    output format it does not write, or matplotlib missing (the message says
    to ``pip install "b200c[draw]"``)."""


class LaunchError(B200cError, RuntimeError):
    """Inputs or the device do not fit the kernel; raised before any launch.

    The message names the tensor, the rule and the offending value.
    """


class UnsupportedDeviceError(LaunchError):
    """The GPU's compute capability does not match the kernel's target."""


class DriverError(LaunchError):
    """A CUDA driver call b200c made failed (loading, configuring or launching one of its kernels, or
    binding its context): the message names the call and the driver's error (``cuLaunchKernel failed:
    CUDA_ERROR_ILLEGAL_ADDRESS``). Not an input rule: the SDPA drop-in raises it instead of falling back
    to torch (a sticky error leaves the CUDA context unusable for torch too)."""


class BackwardNotSupportedError(B200cError, NotImplementedError):
    """A gradient was requested through b200c for an input its backward kernels do not cover yet (a
    device other than sm_90a, a gradient into a returned LSE, mods), or a backward schedule the generator
    does not cover yet; the message names which.

    Raised when the backward pass runs (``loss.backward()``), not when the
    forward runs: a call on inputs that require grad works, in eager mode and
    under ``torch.compile``. The exceptions: calls with mods (score_mod,
    mask_mod, sinks) whose tensors require grad, and a ``softmax_scale``
    tensor that requires grad, are refused when they run, since their result
    would carry no gradient for those tensors; and b200c's gradients are
    first order only (differentiating them again raises).
    """


class BarrierTimeoutError(LaunchError):
    """A bounded mbarrier wait in a debug/emulation build timed out.

    The message names the warp role, barrier, phase parity, CTA and K/V
    iteration recorded by the device before it trapped.
    """


class FallbackWarning(UserWarning):
    """``b200c.scaled_dot_product_attention`` ran ``torch.nn.functional.scaled_dot_product_attention``
    instead of a b200c kernel; the message says why. Issued on every eager call that falls back (the
    warning filters decide what is shown: ``warnings.filterwarnings("ignore", category=FallbackWarning)``
    silences it, ``"once"`` shows each message once); under torch.compile once per reason, when traced."""


class UntestedCompilerWarning(UserWarning):
    """The nvcc b200c found is not the release its spill-free builds and pinned SASS counts are checked
    with (:data:`b200c.toolchain.TESTED_NVCC`; ``pip install -e ".[nvcc]"`` installs it): kernels still
    build and run, but ptxas may spill registers where the tested release does not. Given once per process
    and nvcc."""


class PerformanceWarning(UserWarning):
    """A b200c call took a path slower than its fast one (e.g. a paged KV cache whose pages are smaller
    than the kernel's K/V tile, gathered into a contiguous copy first), or a native kernel was built with
    register spills or serialized wgmmas (a schedule of one's own, usually); the message says which and why."""
