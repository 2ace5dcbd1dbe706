"""Calls with mods (score_mod / mask_mod / attention sinks): the traced functions (cached, guarded by
every Python value they read), the kernel token and each launch's values of the mods' kernel parameters.

A :class:`ModCall` holds what one call adds to the plain attention call: the
:class:`~b200c.dsl.mod_records.ModSet` (part of the kernel's identity: the traced graph, not the
function's name or the captured values), the captured tensors and the sink logits (kernel
arguments, written per launch, so new values never recompile) and the mask function the block mask
is computed from (:mod:`b200c.runtime.block_mask`, cached per traced mask graph, captured tensors,
shapes and tile shape: the graph holds every Python value the mask read, so a changed value that the
guard traces again gives another graph and so another block mask).
"""
from __future__ import annotations

import collections
import functools
import itertools
import os
import sys
import sysconfig
import threading
import types
import weakref
from collections import OrderedDict

import torch

from ..codegen.mods import SMALL_INDEX, kv_indexed_dims
from ..codegen.mods import light as _light_of
from ..errors import LaunchError
from . import block_mask, mask_ranges

_TORCH_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "i32": torch.int32,
                 "i64": torch.int64, "bool": torch.bool}
_traced: "OrderedDict" = OrderedDict()  # (root, names version, guard) -> (ModSet, tensors, objects kept)
_traced_lock = threading.Lock()
_MAX_TRACED = 32  # each entry keeps what its guard names by identity (tensors, code objects) alive
_light: dict = {}  # ModSet JSON -> b200c.codegen.mods.light of it (~140 us to compute: not per call)
_kv_dims_of: dict = {}  # ModSet JSON -> b200c.codegen.mods.kv_indexed_dims of it
_specialized: dict = {}  # (ModSet JSON, small_indices, unit_dims) -> ModCall.for_sizes's (ModSet, its JSON)
_uncached = collections.deque(maxlen=64)  # block masks computed for one call only, alive until 64 later ones


class ModCall:
    """The mods of one call.

    Attributes:
        mods: the :class:`~b200c.dsl.mod_records.ModSet` compiled into the kernel.
        mods_json: its canonical JSON (the kernel token's second half).
        tensors: the captured tensors, in ``mods.captured`` order (kernel parameters ``cap{k}``).
        sinks: FP32 (H,) sink logits on the call's device, or None.
        mask_fn: the mask_mod (evaluated with torch ops for the block mask), or None.
        mask_uses: the mask_mod's arguments that its value depends on.
        mask_tensor: the mask_mod's values as a 4-D bool tensor broadcastable to (B, H, S_q, S_kv) (an SDPA
            boolean ``attn_mask``: the block mask is computed from it by
            :func:`b200c.runtime.block_mask.tensor_ranges`), or None.
    """

    __slots__ = ("mods", "mods_json", "tensors", "sinks", "mask_fn", "mask_uses", "mask_tensor")

    def __init__(self, mods, tensors, sinks, mask_fn, mask_uses, mods_json=None, mask_tensor=None):
        self.mods = mods
        self.mods_json = mods.to_json() if mods_json is None else mods_json  # given: the caller's cached JSON
        self.tensors = tuple(tensors)
        self.sinks = sinks
        self.mask_fn = mask_fn
        self.mask_uses = mask_uses
        self.mask_tensor = mask_tensor

    def for_sizes(self, *sizes) -> "ModCall":
        """This call's mods specialised to its sizes and captured tensors (each another kernel, cached
        like any): :attr:`~b200c.dsl.mod_records.ModSet.small_indices` set when every size (B, H, S_q,
        S_kv; varlen: the longest sequences) is below 2^21 (the kernel may then convert index sums to
        float without the I2F), and per captured tensor the
        :attr:`~b200c.dsl.mod_records.CapturedTensor.unit_dims`: the dimensions the score_mod indexes by
        key that this tensor has with stride 1 (its keys are read at constant offsets from one address per
        tile)."""
        small = not self.mods.small_indices and all(0 <= int(s) < SMALL_INDEX for s in sizes)
        dims = _memo(_kv_dims_of, self.mods_json, lambda: kv_indexed_dims(self.mods))
        caps = self.mods.captured
        units = tuple(tuple(d for d in dd if t.stride(d) == 1) for dd, t in zip(dims, self.tensors))
        if not small and all(u == c.unit_dims for u, c in zip(units, caps)):
            return self

        def specialise():  # per ModSet and specialisation, not per call (a replace and its JSON: ~15 us)
            import msgspec

            captured = tuple(c if u == c.unit_dims else msgspec.structs.replace(c, unit_dims=u)
                             for u, c in zip(units, caps))
            mods = msgspec.structs.replace(self.mods, small_indices=self.mods.small_indices or small,
                                           captured=captured)
            return mods, mods.to_json()

        mods, mods_json = _memo(_specialized, (self.mods_json, small, units), specialise)
        return ModCall(mods, self.tensors, self.sinks, self.mask_fn, self.mask_uses, mods_json, self.mask_tensor)

    @property
    def light(self) -> bool:
        """:func:`b200c.codegen.mods.light` of :attr:`mods` (whether the built-in schedule keeps the dense
        K/V tiles), computed once per ModSet."""
        return _memo(_light, self.mods_json, lambda: _light_of(self.mods))

    def check(self, q, heads: int) -> None:
        """The captured tensors and the sinks are usable with query ``q`` (H = ``heads``).

        Raises:
            LaunchError: a tensor on another device, or sinks that are not (H,) real numbers.
        """
        for k, t in enumerate(self.tensors):
            if t.device != q.device:
                raise LaunchError(f"the mods capture a tensor on {t.device} (captured tensor {k}, shape "
                                  f"{tuple(t.shape)}) but q is on {q.device}; move it to {q.device}")
        if self.sinks is not None and tuple(self.sinks.shape) != (heads,):
            raise LaunchError(f"sinks has shape {tuple(self.sinks.shape)}; it must be (H,) = ({heads},): one logit "
                              "per query head")

    def values(self, entry, causal: bool, cu_seqlens=None, check_seqlens: bool = True) -> dict:
        """The mods' kernel parameter values for one launch of ``entry`` (a
        :class:`b200c.runtime.launcher.Entry`): captured pointers and strides, sinks, block mask
        (``cu_seqlens``: a varlen call's two prefix-sum tensors; ``check_seqlens``: False skips the block
        mask's check of their values, which reads them back from the device)."""
        out = {}
        for k, t in enumerate(self.tensors):
            out[f"cap{k}"] = t.data_ptr()
            for d, st in enumerate(t.stride()):
                out[f"cap{k}_stride{d}"] = st
        if self.mods.sinks:
            out["sinks"] = self.sinks.data_ptr()
        if self.mods.mask_mod is not None:
            out["kv_ranges"] = self.ranges(entry, causal, cu_seqlens, check_seqlens).data_ptr()
        return out

    def ranges(self, entry, causal: bool, cu_seqlens=None, check_seqlens: bool = True) -> torch.Tensor:
        """The block mask of this call (:func:`b200c.runtime.block_mask.kv_ranges`), cached."""
        p = entry.problem
        info = entry.lk.built.launch
        work = info.work()
        device = entry.torch_device
        inputs = self.tensors + (tuple(cu_seqlens) if cu_seqlens is not None else ())
        # a view made per call (an SDPA mask of fewer than 4 dimensions, reshaped) is its base tensor's data:
        # the identity check compares the tensors that own the memory (pointer, shape, strides and the
        # shared version counter are in the key)
        owners = tuple(t if t._base is None else t._base for t in inputs)
        cuda = device.type == "cuda"
        stream = torch.cuda.current_stream(device) if cuda else None

        def compute():
            if self.mask_tensor is not None and cu_seqlens is None and not causal:
                block_mask.check_mask_tensor(self.mask_tensor, (p.batch, p.heads, p.seq_q, p.seq_kv))
                if (work.num_work(p.batch, p.heads, p.seq_q, entry.pack_heads) > 0
                        and mask_ranges.usable(entry.lk, work, p.seq_kv, device)):  # one launch
                    ranges = mask_ranges.launch(entry.lk, self.mask_tensor, work, batch=p.batch, heads=p.heads,
                                                seq_q=p.seq_q, seq_kv=p.seq_kv, pack_heads=entry.pack_heads)
                else:
                    ranges = block_mask.tensor_ranges(self.mask_tensor, work, batch=p.batch, heads=p.heads, seq_q=p.seq_q,
                                           seq_kv=p.seq_kv, pack_heads=entry.pack_heads)
            else:
                ranges = block_mask.kv_ranges(self.mask_fn, work, batch=p.batch, heads=p.heads, heads_kv=p.heads_kv,
                                   seq_q=p.seq_q, seq_kv=p.seq_kv, causal=causal, pack_heads=entry.pack_heads,
                                   cu_seqlens_q=None if cu_seqlens is None else cu_seqlens[0],
                                   cu_seqlens_k=None if cu_seqlens is None else cu_seqlens[1], device=device,
                                   uses=self.mask_uses, check_seqlens=check_seqlens)
            done = None
            if cuda:
                done = torch.cuda.Event()
                done.record(stream)
            # weak references to the inputs are kept with the result: a pointer and version seen again belong
            # to the same tensors only while they are alive (a freed block reused by new values would otherwise
            # hit), and the cache must not keep them alive (strong references kept a model's last 64 masks:
            # 2.1 GB of the padded decoder's (2, 1, 4096, 4096) masks)
            return ranges, tuple(weakref.ref(t) for t in owners), stream, done

        if any(t.is_inference() for t in inputs):
            # made under torch.inference_mode: no version counter, so a write in place could not be told from
            # the tensor seen before; computed for this call only, and kept alive past its launch (the caller
            # keeps only the pointer; freed before the launch is enqueued, the block could be reused and
            # written first)
            ranges = compute()[0]
            _uncached.append(ranges)
            return ranges
        caps = tuple((t.data_ptr(), t._version, tuple(t.shape), t.stride()) for t in self.tensors)
        seqs = None if cu_seqlens is None else tuple((t.data_ptr(), t._version) for t in cu_seqlens)
        key = (self.mods_json, caps, seqs, work.block_m, work.block_n, work.q_stages, p.batch, p.heads, p.heads_kv,
               p.seq_q, p.seq_kv, causal, entry.pack_heads, str(device))
        ranges, kept, made_on, done = block_mask.cached_kv_ranges(key, compute)
        if any(a() is not b for a, b in zip(kept, owners)):  # other tensors at the same addresses: compute again
            hit = compute()
            block_mask._CACHE.put(key, hit)
            ranges, kept, made_on, done = hit
        if cuda and made_on != stream:  # computed on another stream: wait for it, and keep it alive for this one
            stream.wait_event(done)
            ranges.record_stream(stream)
        return ranges


def _memo(table: dict, key, make):
    """``table[key]``, else ``make()`` stored under ``key`` (the table is emptied past 256 entries): the
    per-ModSet facts a call needs (a graph walk, a replace and its JSON), computed once, not per call."""
    hit = table.get(key)
    if hit is None:
        hit = make()
        if len(table) > 256:
            table.clear()
        table[key] = hit
    return hit


# ---------------------------------------------------------------------------------------------------
# guards: every Python value a traced function reads, compared on each call before its trace is reused
#
# A trace compiles the Python numbers a mod reads into the kernel as constants and takes the tensors it
# indexes as kernel arguments, so a trace may be reused only while every value it read is unchanged.
# The guard of a call is a fingerprint of what the functions can read: per function its code, defaults,
# closure cells and the globals its code names; per value, recursively, its items (tuples, lists, dicts,
# sets) and the attributes of the names the reached code uses (attribute names, global names and string
# constants of every code object met, nested ones included: what `obj.name`, `getattr(obj, "name")` or
# `d["name"]` can read). Numbers, strings, None and dtypes compare by value; tensors by identity, dtype,
# shape, strides and device (their contents are kernel arguments: new values reuse the trace);
# torch's, numpy's and the standard library's functions, classes and modules by identity. What the
# fingerprint names by identity is kept alive by the cache entry, so an equal id is the same object.
# Values that cannot be listed (an iterator, a user class with __getitem__ / __iter__, a large array)
# are refused with a ScheduleError naming the path to them.

_LIBRARY = frozenset(sys.stdlib_module_names) | {"torch", "numpy", "builtins", "msgspec"}
_ALWAYS = ("__call__", "forward")  # how a callable object and an nn.Module run
_MAX_VALUES = 10_000  # Python values one guard may compare (each call)
_MAX_ARRAY = 4096  # elements of a numpy array compared by value
_PLAIN = frozenset({type(None), bool, int, str, bytes, complex, type(Ellipsis), torch.dtype, torch.device,
                    torch.layout, torch.memory_format})
_BUILTIN_CALLABLES = (types.BuiltinFunctionType, types.BuiltinMethodType, types.WrapperDescriptorType,
                      types.MethodWrapperType, types.MethodDescriptorType, types.ClassMethodDescriptorType)
_EMPTY_CELL = ("empty cell",)
# what a class's dict holds about itself, not values its methods read
_CLASS_BOOKKEEPING = frozenset({"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__annotations__",
                                "__slots__", "__orig_bases__", "__parameters__", "__match_args__",
                                "__dataclass_fields__", "__dataclass_params__", "__firstlineno__",
                                "__static_attributes__"})
_MISSING = object()
_STDLIB = tuple({os.path.abspath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib")})
_frozen_of: dict = {}  # names tuple -> its frozenset
_library_of: dict = {}  # module name -> it belongs to torch, numpy or the standard library
_walk_of: dict = {}  # type -> the _Guard method that walks its values
_dynamic_of: dict = {}  # type -> its attributes may be computed (__getattr__ / __getattribute__)
_names_of: dict = {}  # id(code) -> (code, the names it and its nested code objects use)
_plans: dict = {}  # the functions' root (codes / types) -> (root objects, names, version)
_versions = itertools.count()


class _Unguardable(Exception):
    """A value the guard cannot compare: ``what`` it is, ``fix`` what to write instead, ``path`` the steps
    from the function to it (innermost first)."""

    def __init__(self, what: str, fix: str):
        super().__init__(what)
        self.what, self.fix, self.path = what, fix, []


def _library(module_name) -> bool:
    """Whether ``module_name`` (a ``__module__`` / ``__name__``) is torch's, numpy's or the standard
    library's (its file lies in the standard library's folder, or it is built into the interpreter): their
    functions, classes and modules are compared by identity, not walked."""
    if not isinstance(module_name, str):
        return False
    hit = _library_of.get(module_name)
    if hit is None:
        top = module_name.partition(".")[0]
        if top in ("torch", "numpy", "msgspec", "builtins"):
            hit = True
        elif top not in sys.stdlib_module_names:
            hit = False
        else:  # a user module may be called like a standard one ("test", "code"): its file says
            f = getattr(sys.modules.get(top), "__file__", None)
            hit = (top in sys.builtin_module_names if f is None else
                   os.path.abspath(f).startswith(_STDLIB) and "site-packages" not in f)
        _library_of[module_name] = hit
    return hit


def _frozen(names: tuple) -> frozenset:
    hit = _frozen_of.get(names)
    if hit is None:
        if len(_frozen_of) > 256:
            _frozen_of.clear()
        hit = _frozen_of[names] = frozenset(names)
    return hit


def _code_names(code) -> frozenset:
    """The attribute / global names and string constants of ``code`` and the code objects nested in it."""
    hit = _names_of.get(id(code))
    if hit is not None and hit[0] is code:
        return hit[1]
    out = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, str):
            out.add(c)
        elif isinstance(c, types.CodeType):
            out |= _code_names(c)
        elif isinstance(c, (tuple, frozenset)):
            out.update(x for x in c if isinstance(x, str))
    names = frozenset(out)
    if len(_names_of) > 4096:
        _names_of.clear()
    _names_of[id(code)] = (code, names)
    return names


def _get(obj, name: str):
    """``getattr(obj, name)``; an attribute that raises compares as the exception's type."""
    try:
        return getattr(obj, name, _MISSING)
    except Exception as e:  # noqa: BLE001 - a property that raises: its outcome is the value compared
        return ("raises", type(e).__name__)


class _Guard:
    """One walk over what the mods can read (:func:`_guard_key`); ``collect``: also gather the code objects
    met and the objects the fingerprint names by identity (tracing time, not per call)."""

    __slots__ = ("names", "names_set", "keep", "codes", "seen", "left")

    def __init__(self, names: tuple, collect: bool = False):
        self.names = names
        self.names_set = _frozen(names)
        self.keep = [] if collect else None
        self.codes = {} if collect else None
        self.seen: dict = {}
        self.left = _MAX_VALUES

    def at(self, step, v):
        """The fingerprint of ``v``, reached by ``step`` (an attribute name, an index, a (dict key,))."""
        try:
            return self.value(v)
        except _Unguardable as e:
            e.path.append(step)
            raise

    def _kept(self, v, fp):
        if self.keep is not None:
            self.keep.append(v)
        return fp

    def value(self, v):
        t = type(v)
        if t in _PLAIN:
            return (t, v)
        if t is float:
            return (t, v) if v == v else (t, "nan")
        self.left -= 1
        if self.left < 0:
            raise _Unguardable(f"more than {_MAX_VALUES} Python values", "read fewer Python values: put a large "
                               "table in a tensor (a kernel argument, indexed by the mod's arguments)")
        i = id(v)
        seen = self.seen.get(i)
        if seen is not None:
            return ("seen", seen)
        self.seen[i] = len(self.seen)
        walk = _walk_of.get(t)
        if walk is None:
            if len(_walk_of) > 4096:
                _walk_of.clear()
            walk = _walk_of[t] = _walk_for(t)
        return walk(self, v, t)

    def tensor(self, v, t):
        try:
            strides = v.stride()
        except RuntimeError:  # a sparse tensor
            strides = None
        return self._kept(v, ("tensor", id(v), v.dtype, v.shape, strides, v.device))

    def sequence(self, v, t):
        return (t, tuple([self.at(k, x) for k, x in enumerate(v)]))

    def dictionary(self, v, t):
        return (t, tuple([(self.value(k), self.at((k,), x)) for k, x in v.items()]))

    def method(self, v, t):
        return ("method", self.at("__func__", v.__func__), self.at("__self__", v.__self__))

    def builtin(self, v, t):
        owner = getattr(v, "__self__", None)
        if owner is None or isinstance(owner, (types.ModuleType, type)):
            return self._kept(v, ("id", id(v)))
        return ("bound", getattr(v, "__name__", ""), self.at("__self__", owner))

    def partial(self, v, t):
        return ("partial", self.at("func", v.func), self.at("args", v.args), self.at("keywords", v.keywords))

    def module(self, v, t):
        if _library(v.__name__):
            return self._kept(v, ("id", id(v)))
        d = vars(v)
        return self._kept(v, ("module", id(v), tuple([(n, self.at(n, d[n])) for n in self.names if n in d])))

    def wrapped(self, v, t):  # staticmethod, classmethod
        return (t, self.at("__func__", v.__func__))

    def prop(self, v, t):
        return (t, self.at("fget", v.fget))

    def array(self, v, t):
        if v.size > _MAX_ARRAY:
            raise _Unguardable(f"a numpy array of {v.size} elements (more than {_MAX_ARRAY})",
                               "convert it to a tensor outside the function and index it with the mod's arguments "
                               "(a kernel argument)")
        return ("ndarray", str(v.dtype), v.shape, v.tobytes())

    def numpy_scalar(self, v, t):
        return (t, v.item())

    def scalar_like(self, v, t):
        return (t, v) if v == v else (t, "nan")

    def span(self, v, t):  # range, slice (a slice is not hashable before Python 3.12)
        return (t, self.value(v.start), self.value(v.stop), self.value(v.step))

    def sequence_like(self, v, t):  # a namedtuple, torch.Size, a subclass of tuple / list
        return ("sequence", self.at("type", t), tuple([self.at(k, x) for k, x in enumerate(v)]), self.attributes(v, t))

    def mapping_like(self, v, t):
        return ("mapping", self.at("type", t), tuple([(self.value(k), self.at((k,), x)) for k, x in v.items()]),
                self.attributes(v, t))

    def set_like(self, v, t):
        return (t, frozenset([self.value(x) for x in v]))

    def buffer(self, v, t):
        return (t, bytes(v))

    def iterator(self, v, t):
        raise _Unguardable(f"an iterator ({t.__qualname__}): reading it changes it",
                           "pass a list or tuple of the values")

    def container(self, v, t):
        raise _Unguardable(f"a {t.__qualname__} object: it defines __getitem__ / __iter__, so the items the function "
                           "may read cannot be listed and compared", "convert it to a dict, list or tuple, or read "
                           "the value into a Python number before making the mod")

    def obj(self, v, t):
        return ("object", self.at("type", t), self.attributes(v, t))

    def function(self, f, t=None):
        if _library(f.__module__):
            return self._kept(f, ("id", id(f)))
        code = f.__code__
        if self.codes is not None:
            self.codes[id(code)] = code
            self.keep.append(code)
        cells = ()
        if f.__closure__:
            cells = tuple([self.cell(name, c) for name, c in zip(code.co_freevars, f.__closure__)])
        g = f.__globals__
        glob = tuple([(n, self.at(n, g[n])) for n in self.names if n in g])
        fd = f.__dict__
        attrs = tuple([(n, self.at(n, fd[n])) for n in self.names if n in fd]) if fd else ()
        return ("function", id(code), self.at("__defaults__", f.__defaults__),
                self.at("__kwdefaults__", f.__kwdefaults__), cells, glob, attrs)

    def cell(self, name: str, c):
        try:
            x = c.cell_contents
        except ValueError:  # an empty cell (a variable assigned after the function was made)
            return _EMPTY_CELL
        return self.at(name, x)

    def cls(self, c, t=None):
        """A class: the attributes of the names and every special method (``__mul__``, ``__float__``, ...: run
        without their name in the code) of its own and its user-defined bases' dicts; torch's, numpy's and the
        standard library's classes (and what they define) by identity."""
        if _library(getattr(c, "__module__", None)):
            return self._kept(c, ("id", id(c)))
        out = []
        done = set()
        for k in c.__mro__:
            if _library(getattr(k, "__module__", None)):
                continue
            for n, x in k.__dict__.items():
                if n in done or n in _CLASS_BOOKKEEPING:
                    continue
                if n in self.names_set or (n[:2] == "__" and n[-2:] == "__"):
                    done.add(n)
                    out.append((n, self.at(n, x)))
        return self._kept(c, ("class", id(c), tuple(out)))

    def nn_module(self, m, t):
        d = m.__dict__
        stores = (d.get("_parameters") or {}, d.get("_buffers") or {}, d.get("_modules") or {}, d)
        out = []
        for n in self.names:
            for s in stores:
                if n in s:
                    out.append((n, self.at(n, s[n])))
                    break
        items = ()
        if _defines(t, "__getitem__"):  # ModuleList, ModuleDict, Sequential, ParameterList: every item
            items = (self.at("_modules", stores[2]), self.at("_parameters", stores[0]))
        return ("nn.Module", self.at("type", t), tuple(out), items, m.training)

    def attributes(self, v, t) -> tuple:
        """The instance attributes of ``v`` among the names (class-level ones are in the class's fingerprint;
        properties and slots are read)."""
        d = getattr(v, "__dict__", None)
        dynamic = _dynamic_of.get(t)
        if dynamic is None:
            if len(_dynamic_of) > 4096:
                _dynamic_of.clear()
            dynamic = _dynamic_of[t] = _defines(t, "__getattr__") or t.__getattribute__ is not object.__getattribute__
        mro = t.__mro__
        out = []
        for n in self.names:
            if d is not None and n in d:
                out.append((n, self.at(n, d[n])))
                continue
            for k in mro:
                desc = k.__dict__.get(n, _MISSING)
                if desc is not _MISSING:
                    break
            if desc is _MISSING:
                if not dynamic:
                    continue
            elif not hasattr(type(desc), "__set__"):  # a method / class attribute: in the class's fingerprint
                continue
            x = _get(v, n)  # a property, a slot, an attribute a C type or __getattr__ computes
            if x is not _MISSING:
                out.append((n, self.at(n, x)))
        return tuple(out)


def _walk_for(t):
    """The :class:`_Guard` method that walks values of type ``t`` (decided once per type)."""
    G = _Guard
    exact = {tuple: G.sequence, list: G.sequence, dict: G.dictionary, types.FunctionType: G.function,
             types.MethodType: G.method, functools.partial: G.partial}
    if t in exact:
        return exact[t]
    checks = ((torch.Tensor, G.tensor), (_BUILTIN_CALLABLES, G.builtin), (types.ModuleType, G.module), (type, G.cls),
              ((staticmethod, classmethod), G.wrapped), (property, G.prop), (torch.nn.Module, G.nn_module))
    for base, walk in checks:
        if issubclass(t, base):
            return walk
    if issubclass(t, (int, float, str, bytes, complex)):  # an IntEnum member, numpy.float64, a str subclass
        return G.scalar_like
    if t is range or t is slice:
        return G.span
    if getattr(t, "__module__", None) == "numpy":
        if t.__name__ == "ndarray":
            return G.array
        if hasattr(t, "item") and hasattr(t, "ndim"):
            return G.numpy_scalar
    for base, walk in (((tuple, list), G.sequence_like), ((dict, types.MappingProxyType), G.mapping_like),
                       ((set, frozenset), G.set_like), ((bytearray, memoryview), G.buffer)):
        if issubclass(t, base):
            return walk
    if _defines(t, "__next__") or issubclass(t, (types.GeneratorType, types.CoroutineType)):
        return G.iterator
    if _defines(t, "__getitem__") or _defines(t, "__iter__"):
        return G.container
    return G.obj


def _defines(t, name: str) -> bool:
    """Whether instances of ``t`` have the special method ``name`` (its MRO, not its metaclass: an Enum's
    members are not iterable although the Enum class is)."""
    return any(name in k.__dict__ for k in t.__mro__)


def _root(fn):
    """What fixes the names a guard of ``fn`` walks: its code (or its type for a callable object)."""
    if fn is None:
        return None
    if type(fn) is types.FunctionType:
        return id(fn.__code__)
    if type(fn) is types.MethodType:
        return ("method", _root(fn.__func__))
    if type(fn) is functools.partial:
        return ("partial", _root(fn.func))
    return ("object", id(type(fn)))


def _root_objects(fn) -> tuple:
    """The objects :func:`_root` names by id (kept alive with the names, so that the id stays theirs)."""
    if fn is None:
        return ()
    if type(fn) is types.FunctionType:
        return (fn.__code__,)
    if type(fn) is types.MethodType:
        return _root_objects(fn.__func__)
    if type(fn) is functools.partial:
        return _root_objects(fn.func)
    return (type(fn),)


def _guard_key(score_mod, mask_mod, names: tuple, collect: bool = False):
    """The fingerprint of what ``score_mod`` and ``mask_mod`` read, with attribute ``names``
    (``collect``: also the walk, for its codes and kept objects)."""
    g = _Guard(names, collect)
    key = []
    for kind, fn in (("score_mod", score_mod), ("mask_mod", mask_mod)):
        try:
            key.append(None if fn is None else g.value(fn))
        except _Unguardable as e:
            raise _refusal(kind, e) from None
    return (tuple(key), g) if collect else tuple(key)


def _guard_plan(score_mod, mask_mod) -> tuple:
    """``(names, key, kept objects)`` of a trace just made: the names of every code object the walk reaches
    (grown until no new code is met), the fingerprint with them and what it names by identity."""
    names = frozenset(_ALWAYS)
    for _ in range(16):
        ordered = tuple(sorted(names))
        key, g = _guard_key(score_mod, mask_mod, ordered, collect=True)
        grown = names.union(*(_code_names(c) for c in g.codes.values()))
        if grown == names:
            break
        names = grown
    return ordered, key, g.keep


def _refusal(kind: str, e: _Unguardable):
    from ..errors import ScheduleError

    where = kind
    for step in reversed(e.path):
        where += f"[{step[0]!r}]" if isinstance(step, tuple) else f"[{step}]" if isinstance(step, int) else f".{step}"
    return ScheduleError(
        f"{kind} reads {e.what} (at {where}); b200c compiles the Python values a mod reads into its kernel and "
        f"must compare them on every call to know when to trace again, and it cannot compare this one; {e.fix}")


def _needs_grad(fn, depth: int = 3) -> bool:
    """Whether a tensor ``fn`` reads (through its closure, defaults, the globals its code names, one
    level into objects' attributes, an ``nn.Module``'s parameters, nested functions) requires
    grad: the kernel reads it, but its result would carry no gradient for it."""
    if fn is None or depth == 0:
        return False
    seen = []
    owner = getattr(fn, "__self__", None)
    if owner is not None:
        seen.append(owner)
    fn = getattr(fn, "__func__", fn)
    seen += _reads(fn) + list(getattr(fn, "__defaults__", None) or ())
    if getattr(fn, "__code__", None) is None:  # a callable object: its attributes
        seen.append(fn)
    for v in seen:
        if isinstance(v, (torch.Tensor, torch.nn.Module)):
            if _holds_grad(v):
                return True
        elif callable(v) and getattr(v, "__code__", None) is not None:
            if _needs_grad(v, depth - 1):
                return True
        elif hasattr(v, "__dict__") and not isinstance(v, (type, type(torch))):
            if any(_holds_grad(a) for a in vars(v).values()):
                return True
    return False


def _holds_grad(v) -> bool:
    """A tensor that requires grad, or an ``nn.Module`` with a parameter that does."""
    if isinstance(v, torch.Tensor):
        return v.requires_grad
    return isinstance(v, torch.nn.Module) and any(t.requires_grad for t in v.parameters())


def _reads(fn) -> list:
    """The objects a plain function reads besides its arguments: its closure cells' contents and the
    globals its code names (what :func:`_identity` keys a trace by and :func:`_needs_grad` looks through)."""
    values = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ()) if _filled(c)]
    code = getattr(fn, "__code__", None)
    glb = getattr(fn, "__globals__", {})
    return values + [glb[n] for n in (code.co_names if code is not None else ()) if n in glb]


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018
        return True
    except ValueError:  # an empty cell (a variable assigned after the function was made)
        return False


def prepare(score_mod=None, mask_mod=None, sinks=None, q=None) -> ModCall:
    """Trace ``score_mod`` / ``mask_mod`` and check ``sinks``. A trace is reused only while every Python value
    the functions read is unchanged (the guard: closure cells, defaults, globals and, at any depth, the items
    and attributes the code can reach, compared on each call); a changed value traces again (the same graph
    gives the same kernel: no recompile). Tensors are kernel arguments: new contents never trace again.

    Args:
        score_mod: ``(score, b, h, q_idx, kv_idx) -> score`` or None.
        mask_mod: ``(b, h, q_idx, kv_idx) -> bool`` or None.
        sinks: per-head sink logits, a real tensor (H,) on q's device (converted to FP32), or None.
        q: the call's query (for the sinks' device), or None.

    Raises:
        ScheduleError: a function cannot be traced or uses an op outside the table
            (:func:`b200c.dsl.mods.trace_mods`); or it reads a Python value the guard cannot compare (an
            iterator, an object with its own __getitem__ / __iter__, a numpy array of more than 4096 elements,
            more than 10,000 values in all): the message names the path to it and what to write instead.
        LaunchError: sinks that are not a real floating tensor.
    """
    from ..dsl.mods import trace_mods, uses

    if sinks is not None:
        if not isinstance(sinks, torch.Tensor) or not sinks.is_floating_point() or sinks.dim() != 1:
            raise LaunchError(f"sinks must be a 1-D floating tensor of one logit per query head (H,), got "
                              f"{type(sinks).__name__}" + (f" of shape {tuple(sinks.shape)}, dtype {sinks.dtype}"
                                                           if isinstance(sinks, torch.Tensor) else ""))
        if q is not None and sinks.device != q.device:
            raise LaunchError(f"sinks is on {sinks.device} but q is on {q.device}; move it to {q.device}")
        sinks = sinks.detach().to(torch.float32).contiguous()
    root = (_root(score_mod), _root(mask_mod), sinks is not None)
    with _traced_lock:
        plan = _plans.get(root)
    hit = None
    if plan is not None:  # the guard: what the functions read now, walked with the names of the code they run
        key = (root, plan[2], _guard_key(score_mod, mask_mod, plan[1]))
        with _traced_lock:
            hit = _traced.get(key)
            if hit is not None:
                _traced.move_to_end(key)
    if hit is not None:
        mods, tensors = hit[0], hit[1]
    else:
        mods, tensors = trace_mods(score_mod=score_mod, mask_mod=mask_mod, sinks=sinks)
        names, guard, kept = _guard_plan(score_mod, mask_mod)
        with _traced_lock:
            plan = _plans.get(root)
            if plan is None or plan[1] != names:  # new names: fingerprints walked with the old ones never match
                if len(_plans) > 256:
                    _plans.clear()
                plan = _plans[root] = (_root_objects(score_mod) + _root_objects(mask_mod), names, next(_versions))
            # the entry keeps what its key names by identity alive: while it is cached no other object has those ids
            _traced[(root, plan[2], guard)] = (mods, tensors, kept)
            while len(_traced) > _MAX_TRACED:
                _traced.popitem(last=False)
    mask_uses = uses(mods.mask_mod) if mods.mask_mod is not None else frozenset()
    return ModCall(mods, tensors, sinks, mask_mod, mask_uses)


def check_no_grad(score_mod=None, mask_mod=None, sinks=None) -> None:
    """Calls with mods are forward-only: with grad mode on, a tensor the mods read that requires grad (a
    learned bias table, learnable sink logits) would get no gradient from the call's result.

    Raises:
        BackwardNotSupportedError: such a tensor, with grad mode on.
    """
    if not torch.is_grad_enabled():
        return
    what = None
    if isinstance(sinks, torch.Tensor) and sinks.requires_grad:
        what = "sinks requires grad"
    elif _needs_grad(score_mod) or _needs_grad(mask_mod):
        what = "a tensor the score_mod / mask_mod reads requires grad (a learned table, an nn.Parameter)"
    if what:
        from ..errors import BackwardNotSupportedError

        raise BackwardNotSupportedError(
            f"b200c attention with mods is forward-only and {what}: the result would carry no gradient for it; "
            "call it under torch.no_grad() / torch.inference_mode(), or use torch's flex_attention to train it")


__all__ = ["ModCall", "check_no_grad", "prepare"]
