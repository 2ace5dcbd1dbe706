"""The target registry: one :class:`Target` record per code-generation target.

A target name is resolved once, where it enters (``b200c.generate``,
``b200c.plan``, ``b200c.attention``, the CLI's ``--target``), by
:func:`resolve` into its record; every other module reads the record's fields
(backend, compute capability, build flags, header, capabilities) instead of
comparing names. Unknown names raise :class:`~b200c.errors.TargetError`, the
same error everywhere.

Registered targets (:data:`REGISTRY`, in order):

* ``sm100a``: native Blackwell B200 (compute capability 10.0), the tcgen05
  backend (``codegen/tcgen05``).
* ``emulate``: the sm100a kernel built for Hopper (9.0) with a software model
  of tcgen05 (``-DB200C_EMULATE``, bounded mbarrier waits): correctness only.
* ``sm90a``: native Hopper H100/H200 (9.0), the wgmma backend (``codegen/sm90``).

A new target is its backend folder plus one :class:`Target` entry in
:data:`REGISTRY` (or a :func:`register` call); docs/new-backend.md lists what
the folder must provide.
"""
from __future__ import annotations

import importlib
from typing import Optional

import msgspec

from ..errors import TargetError

AUTO = "auto"  # not a target: "pick one for the device and schedule" (b200c.attention, the CLI)


class Capabilities(msgspec.Struct, frozen=True):
    """What the kernels of a target compute (the runtime refuses the rest before launching).

    Attributes:
        causal: the bottom-right aligned causal mask.
        gqa: fewer K/V heads than query heads (GQA/MQA).
        lse: the log-sum-exp output.
        varlen: packed variable-length batches (``cu_seqlens``).
        head_dims: head dims the backend generates.
        profile: profiling builds with trace stamps (``b200c bench --profile``).
        mods: score_mod / mask_mod / block masks / attention sinks compiled into the kernels
            (:mod:`b200c.codegen.mod_kernel`).
    """

    causal: bool
    gqa: bool
    lse: bool
    varlen: bool
    head_dims: tuple
    profile: bool
    mods: bool = False


class Target(msgspec.Struct, frozen=True):
    """One code-generation and build target.

    Attributes:
        name: canonical name (``"sm100a"``).
        spellings: other names accepted for it (lower case, e.g. ``"sm_100a"``).
        summary: what it is, for help texts and errors (``"B200, tcgen05"``).
        backend: module of the backend package that generates its source
            (``b200c.codegen.tcgen05``); it provides ``RULES``, ``P_ALIASES_S``,
            ``make_plan``, ``lower`` and ``emit``.
        source: the target whose generated source this one builds (itself for
            a native target; ``emulate`` builds the ``sm100a`` source).
        compute_capability: (major, minor) of the GPUs it runs on.
        devices: those GPUs by name, for messages (``"B200"``).
        arch: the ptxas/cuobjdump architecture (``"sm_100a"``).
        nvcc_flags: architecture and define flags of its nvcc command line.
        header: the helper header inlined into its generated source
            (``b200c/codegen/cuda/<header>``).
        include_headers: its build reads the headers of
            :func:`b200c.codegen.cuda_include_dir` (``-I``; their text joins the
            kernel cache key).
        bounded_waits: ``"always"`` (every build bounds its mbarrier waits),
            ``"debug"`` (only with ``B200C_BOUNDED_WAIT=1``) or ``"never"``.
        emulator_threads: threads added to each CTA for the emulator warp (0: none).
        native: runs at the hardware's speed (False: an emulation, correctness only).
        emulates: for an emulation target, the native target whose kernels it runs.
        sass: the SASS analysis ``b200c check`` runs (``"role_loops"`` per warp
            role, ``"hot_loop"`` of the consumer with wgmma hazards, ``""`` none).
        presets: the family of built-in schedules it runs when a call gives none
            (:data:`b200c.dsl.presets.FAMILIES`).
        backward: the family of its built-in backward schedules
            (:data:`b200c.dsl.presets.BACKWARD_FAMILIES`; ``""``: no backward design yet).
        num_sms: the SM count of its devices, for plans made without a GPU (``b200c compile --emit plan
            --shape``): 132 on an H100 SXM / H200, 148 on a B200.
        stage_format: how a schedule's ``blog_stage`` is named in titles (``"blog stage {stage}"``;
            the Hopper progression's ``"Hopper step h{stage:02d}"``).
        caps: what its kernels compute (:class:`Capabilities`).
    """

    name: str
    spellings: tuple
    summary: str
    backend: str
    source: str
    compute_capability: tuple
    devices: str
    arch: str
    nvcc_flags: tuple
    header: str
    caps: Capabilities
    include_headers: bool = False
    bounded_waits: str = "never"
    emulator_threads: int = 0
    native: bool = True
    emulates: Optional[str] = None
    sass: str = ""
    presets: str = ""
    backward: str = ""
    num_sms: int = 132
    stage_format: str = "blog stage {stage}"

    def backend_module(self):
        """The backend package (imported on first use)."""
        return importlib.import_module(self.backend)

    def default_schedule(self, head_dim: int, mods=False, seq_kv=None):
        """The built-in schedule of this target for ``head_dim`` (:func:`b200c.dsl.presets.default_schedule`).
        ``mods``: a traced ModSet (light mods, :func:`b200c.codegen.mods.light`, take the dense schedule,
        the others the mods one), or truthy for the schedule of calls with mods that are not light.
        ``seq_kv``: a dense call's key length: short ones take smaller K/V tiles where the target has them
        (:func:`b200c.dsl.presets.short_kv_tiles`); None: the head dim's preset. Ignored with ``mods``
        (calls with mods keep their presets).

        Raises:
            ScheduleError: a head dim without one, or a target without built-in schedules.
        """
        from ..dsl.presets import default_schedule
        from ..errors import ScheduleError

        if not self.presets:
            raise ScheduleError(f"target {self.name!r} has no built-in schedules; pass a schedule")
        from ..dsl.mod_records import ModSet

        if isinstance(mods, ModSet):
            from .mods import light

            mods = not light(mods)
            seq_kv = None  # calls with mods keep their presets' tiles (light ones: the dense preset's)
        return default_schedule(head_dim, self.presets, bool(mods), seq_kv)

    def short_kv_preset(self, head_dim: int, seq_kv):
        """The preset a dense call with ``seq_kv`` keys takes because its keys are few
        (:func:`b200c.dsl.presets.short_kv_preset`), or None (also without built-in schedules).

        Raises:
            ScheduleError: ``seq_kv`` not None and not a non-negative integer.
        """
        from ..dsl.presets import short_kv_preset

        return short_kv_preset(head_dim, self.presets, seq_kv) if self.presets else None

    def short_kv_breakpoints(self, head_dim: int) -> tuple:
        """:func:`b200c.dsl.presets.short_kv_breakpoints` of this target's presets (empty without them)."""
        from ..dsl.presets import short_kv_breakpoints

        return short_kv_breakpoints(head_dim, self.presets) if self.presets else ()

    def default_backward_schedule(self, head_dim: int):
        """The built-in backward schedule of this target for ``head_dim``
        (:func:`b200c.dsl.presets.default_backward_schedule` of its :attr:`backward` family).

        Raises:
            ScheduleError: a target with no backward design yet (naming those that have one), or a head
                dim without a built-in backward schedule.
        """
        from ..dsl.presets import default_backward_schedule
        from ..errors import ScheduleError

        if not self.backward:
            have = ", ".join(repr(t.name) for t in REGISTRY if t.backward)
            raise ScheduleError(f"no built-in backward schedule for target {self.name!r}; only {have} has one so far "
                                f"(target {self.name!r} has no backward design yet)")
        return default_backward_schedule(head_dim, self.backward)

    def stage_label(self, stage: int) -> str:
        """The title's name of blog stage ``stage`` of this target's progression (:attr:`stage_format`)."""
        return self.stage_format.format(stage=stage)

    def source_target(self) -> "Target":
        """The record of :attr:`source` (self for a native target)."""
        return self if self.source == self.name else resolve(self.source)

    def __str__(self) -> str:
        return self.name


_TCGEN05_CAPS = Capabilities(causal=True, gqa=True, lse=True, varlen=True, head_dims=(64, 128, 256), profile=False,
                             mods=True)

REGISTRY: list = [
    Target(
        name="sm100a", spellings=("sm_100a", "sm100", "sm_100"), summary="B200, tcgen05",
        backend="b200c.codegen.tcgen05", source="sm100a", compute_capability=(10, 0), devices="B200",
        arch="sm_100a", nvcc_flags=("-arch=sm_100a",), header="b200c_ptx.cuh", caps=_TCGEN05_CAPS,
        sass="role_loops", presets="b200", num_sms=148,
    ),
    Target(
        name="emulate", spellings=(), summary="the sm100a kernel emulated on Hopper, correctness only",
        backend="b200c.codegen.tcgen05", source="sm100a", compute_capability=(9, 0), devices="H100/H200",
        arch="sm_90a", nvcc_flags=("-arch=sm_90a", "-DB200C_EMULATE", "-DB200C_BOUNDED_WAIT"),
        header="b200c_ptx.cuh", caps=_TCGEN05_CAPS, include_headers=True, bounded_waits="always",
        emulator_threads=32, native=False, emulates="sm100a", presets="b200",
    ),
    Target(
        name="sm90a", spellings=("sm_90a", "sm90", "sm_90"), summary="Hopper, wgmma",
        backend="b200c.codegen.sm90", source="sm90a", compute_capability=(9, 0), devices="H100/H200",
        # -arch=sm_90a would also run a plain sm_90 pass, which rejects wgmma
        arch="sm_90a", nvcc_flags=("-gencode=arch=compute_90a,code=sm_90a",), header="b200c_sm90.cuh",
        caps=Capabilities(causal=True, gqa=True, lse=True, varlen=True, head_dims=(64, 128, 256), profile=True,
                          mods=True),
        bounded_waits="debug", sass="hot_loop", presets="hopper", backward="hopper",
        stage_format="Hopper step h{stage:02d}",
    ),
]

# the target whose built-in schedules are shown when none is named (``b200c compile default``,
# :func:`b200c.kernel_source`): the native target of the GPUs b200c has run on (H100/H200)
DEFAULT_NAME = "sm90a"


def _index() -> dict:
    out = {}
    for t in REGISTRY:
        for spelling in (t.name, *t.spellings):
            out[spelling] = t
    return out


_by_name: dict = _index()


def register(target: Target) -> Target:
    """Add ``target`` to the registry (after the built-in ones); returns it.

    Raises:
        TargetError: its name or a spelling is already taken.
    """
    taken = [s for s in (target.name, *target.spellings) if s in _by_name]
    if taken:
        raise TargetError(f"target name {taken[0]!r} is already registered (by {_by_name[taken[0]].name!r})")
    REGISTRY.append(target)
    _by_name.update(_index())
    return target


def unregister(name: str) -> None:
    """Remove the target called ``name`` (tests of :func:`register`)."""
    t = resolve(name)
    REGISTRY.remove(t)
    _by_name.clear()
    _by_name.update(_index())


def names() -> str:
    """The accepted names, for error messages: ``'sm100a' (B200, tcgen05; also 'sm_100a'), ...``."""
    parts = []
    for t in REGISTRY:
        also = f"; also {', '.join(repr(s) for s in t.spellings)}" if t.spellings else ""
        parts.append(f"{t.name!r} ({t.summary}{also})")
    return ", ".join(parts)


def resolve(target) -> Target:
    """The :class:`Target` for a name or spelling (case and surrounding spaces ignored); a Target is
    returned as it is.

    Raises:
        TargetError: an unknown name (the message lists the accepted ones); ``"auto"`` is not a
            target here (the callers that take it pick one first).
    """
    if isinstance(target, Target):
        return target
    t = _by_name.get(target) if isinstance(target, str) else None
    if t is not None:
        return t
    key = str(target).strip().lower()
    t = _by_name.get(key)
    if t is None:
        raise TargetError(f"unknown target {target!r}; targets: {names()}")
    return t


def resolve_or_auto(target):
    """:data:`AUTO` for ``"auto"`` (any case), else :func:`resolve`."""
    if isinstance(target, str) and target.strip().lower() == AUTO:
        return AUTO
    return resolve(target)


def native_targets() -> list:
    """The registered native targets, in registry order."""
    return [t for t in REGISTRY if t.native]


def for_device(capability) -> list:
    """Targets whose kernels run on a GPU of compute ``capability`` (native ones first)."""
    cc = tuple(capability)
    found = [t for t in REGISTRY if t.compute_capability == cc]
    return sorted(found, key=lambda t: not t.native)


def emulation_of(target: Target, capability) -> Optional[Target]:
    """The emulation target that runs ``target``'s kernels on compute ``capability``, if one exists."""
    for t in REGISTRY:
        if t.emulates == target.name and t.compute_capability == tuple(capability):
            return t
    return None


def default_target() -> Target:
    """The record of :data:`DEFAULT_NAME`: the target ``b200c compile default`` shows without ``--target``."""
    return resolve(DEFAULT_NAME)


def for_backend(backend: str) -> Target:
    """The first registered target generated by backend ``backend`` (a plan's ``backend``: ``"sm90"``,
    ``"tcgen05"``; native targets before emulations).

    Raises:
        TargetError: no registered target has that backend.
    """
    for t in sorted(REGISTRY, key=lambda t: not t.native):
        if t.backend.rsplit(".", 1)[-1] == backend:
            return t
    raise TargetError(f"no registered target is generated by backend {backend!r}; targets: {names()}")


def schedule_target(schedule) -> Target:
    """The native target a schedule is written for: the registered native target whose backend's
    knob rules the schedule breaks fewest of (none: a Hopper schedule with block_m=64,
    ``p_storage='registers'`` or ``pingpong`` breaks tcgen05's and passes sm90's: examples/hopper;
    ties: the first in registry order), so a schedule with a mistake is reported against the rules
    of the target it was meant for. ``target="auto"`` uses it. Never raises for bad knobs
    (generation reports them)."""
    from ..errors import ScheduleError

    def broken(t) -> int:
        n = 0
        for rule in t.backend_module().RULES:
            try:
                rule(schedule)
            except ScheduleError:
                n += 1
            except Exception:  # noqa: BLE001 - a knob of the wrong type: validation names it
                n += 1
        return n

    natives = native_targets()
    return min(natives, key=broken)  # min keeps the first of equal counts


__all__ = ["Target", "Capabilities", "REGISTRY", "AUTO", "register", "unregister", "resolve", "resolve_or_auto",
           "names", "native_targets", "for_device", "emulation_of", "schedule_target", "default_target", "for_backend",
           "DEFAULT_NAME"]
