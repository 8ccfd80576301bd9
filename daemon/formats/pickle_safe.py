"""The one place in the package that unpickles, and it never runs a pickle's code.

A pickle is a program: GLOBAL names a callable, REDUCE calls it, BUILD hands it state. Here every
GLOBAL resolves to an inert value of ours: the few names `torch.save` writes for tensors and
containers (the tensor rebuilders, the storage classes, `collections.OrderedDict`, `torch.Size`,
dtypes, `torch.device`, a handful of builtins) become records (dtype, shape, storage key...);
anything else (`os.system`, `builtins.eval`, a user's class, numpy) becomes an `Opaque`
placeholder that remembers its name and does nothing. Nothing is imported, no attribute of a
module is looked up. Storages come through `persistent_load`, which returns a `StorageRef`
descriptor: their bytes are never read here.

Judged before the C unpickler sees a byte, by `pickle_ops.scan` (one pass of
`pickletools.genops`, which only decodes opcodes): the pickle's size, its opcode count, its
memo (the C unpickler would grow its memo array to any index: 4 bytes of `LONG_BINPUT` could ask
for 32 GB), and every global it names and calls, wherever the result would land: `read` returns
them with the object, exact, so no caller judges a pickle by what the walk of the built object
happens to reach. Nesting is bounded where it matters, in `walk`, which never recurses and
visits a bounded number of nodes (a structure shared through the memo a million times over is
not walked a million times).

No state outlives one read: the placeholder class of each global name is made per unpickler,
so a file naming 10,000 globals changes nothing for the next file.
"""

from __future__ import annotations

import io
import math
import pickle
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..core.errors import CorruptCheckpoint
from . import deepspeed_records, pickle_ops
from .pickle_ops import MAX_MEMO, MAX_OPS, MAX_PICKLE_BYTES, Ops

__all__ = ["MAX_MEMO", "MAX_OPS", "MAX_PICKLE_BYTES", "Ops"]
MAX_DEPTH = 200  # state dicts nest < 10 deep
MAX_NODES = 2_000_000

# The storage classes `torch.save` names, and the dtype of their elements (UntypedStorage:
# bytes; the dtype then comes with `_rebuild_tensor_v3`).
STORAGE_DTYPES = {
    "FloatStorage": "float32",
    "DoubleStorage": "float64",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "ShortStorage": "int16",
    "IntStorage": "int32",
    "LongStorage": "int64",
    "BoolStorage": "bool",
    "ComplexFloatStorage": "complex64",
    "ComplexDoubleStorage": "complex128",
    "QInt8Storage": "qint8",
    "QUInt8Storage": "quint8",
    "QInt32Storage": "qint32",
    "UntypedStorage": "uint8",
    "TypedStorage": "uint8",
}
ITEM_SIZES = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "bool": 1,
    "complex32": 4,
    "complex64": 8,
    "complex128": 16,
    "qint8": 1,
    "quint8": 1,
    "qint32": 4,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "float8_e8m0fnu": 1,
}
_DTYPE_ALIASES = {"float": "float32", "double": "float64", "half": "float16", "long": "int64"}
_DTYPE_ALIASES |= {"int": "int32", "short": "int16", "cfloat": "complex64"}


class DtypeName(str):
    """`torch.float16` and friends, as their name."""


class DeviceName(str):
    """`torch.device('cpu')`, as its text."""


class StorageClass(str):
    """`torch.FloatStorage` and friends, as the dtype of their elements."""


@dataclass(frozen=True)
class StorageRef:
    """A storage named by a persistent id: the member `data/<key>` (or a legacy key)."""

    key: str
    dtype: str
    numel: int  # elements of `dtype` (bytes for an untyped storage)
    location: str

    @property
    def nbytes(self) -> int:
        return self.numel * ITEM_SIZES.get(self.dtype, 1)


@dataclass(frozen=True)
class TensorRecord:
    """A tensor as the pickle describes it; its values are in its storage, never read here."""

    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    storage: StorageRef | None
    parameter: bool = False

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * ITEM_SIZES.get(self.dtype, 1)


class RecordedDict(dict[Any, Any]):
    """`collections.OrderedDict`: a dict that also takes BUILD's state (`_metadata`)."""

    def __setstate__(self, state: Any) -> None:
        self.pickle_state = state


class Opaque:
    """Whatever a GLOBAL names that is not ours to know: inert, remembering only its name.

    Calling, constructing (NEWOBJ), BUILD, SETITEM and APPEND on it all succeed and keep what
    they were given, so the rest of the file stays readable; nothing is ever executed.
    """

    global_name = "?"
    args: tuple[Any, ...]
    state: Any
    items: dict[Any, Any]

    def __new__(cls, *args: Any, **kwargs: Any) -> Opaque:
        obj = super().__new__(cls)
        obj.global_name = cls.global_name
        obj.args = args[:64]
        obj.state = None  # NEWOBJ never calls __init__: everything is set here
        obj.items = {}
        return obj

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> Opaque:
        called = Opaque(*args)  # a call of a call: the base class, named on the instance
        called.global_name = f"{self.global_name}()"
        return called

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __setitem__(self, key: Any, value: Any) -> None:
        if len(self.items) < 10_000:
            self.items[key] = value

    def append(self, value: Any) -> None:
        self[len(self.items)] = value

    def extend(self, values: Any) -> None:
        for value in values:
            self.append(value)


def _opaque(name: str, *args: Any) -> Opaque:
    """An inert instance named `name` (what an allowed function makes of arguments it refuses)."""
    obj = Opaque(*args)
    obj.global_name = name
    return obj


def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any, *rest: Any) -> Any:
    ref = storage if isinstance(storage, StorageRef) else None
    dtype = ref.dtype if ref else "?"
    if len(rest) >= 3 and isinstance(rest[2], DtypeName):  # _rebuild_tensor_v3
        dtype = str(rest[2])
    return TensorRecord(dtype, _ints(size), _ints(stride), _int(offset), ref)


def _rebuild_parameter(data: Any, *rest: Any) -> Any:
    if isinstance(data, TensorRecord):
        return TensorRecord(data.dtype, data.shape, data.stride, data.offset, data.storage, True)
    return data


def _codecs_encode(text: Any, encoding: Any = "utf-8", *_: Any) -> Any:
    """How protocol 2 stores `bytes`: `_codecs.encode('\\x00...', 'latin1')`."""
    if isinstance(text, str) and encoding in ("latin1", "latin-1", "utf-8", "utf8", "ascii"):
        return text.encode("latin-1" if encoding.startswith("latin") else encoding, "replace")
    return _opaque("_codecs.encode", text)


def _complex(real: Any = 0.0, imag: Any = 0.0) -> Any:
    if isinstance(real, int | float) and isinstance(imag, int | float):
        return complex(real, imag)
    return _opaque("builtins.complex", real, imag)


def _container(kind: type) -> Any:
    def build(items: Any = ()) -> Any:
        if isinstance(items, list | tuple | set | frozenset):
            try:
                return kind(items)
            except TypeError:  # an unhashable element
                return list(items)
        return _opaque(kind.__name__, items)

    return build


def _device(*args: Any) -> DeviceName:
    return DeviceName(":".join(str(a) for a in args if isinstance(a, str | int)))


_ALLOWED: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): RecordedDict,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch", "Size"): lambda dims=(): _ints(dims),
    ("torch", "device"): _device,
    ("torch.serialization", "_get_layout"): lambda name="": DtypeName(str(name)),
    ("_codecs", "encode"): _codecs_encode,
}
for _module in ("builtins", "__builtin__"):
    _ALLOWED[(_module, "set")] = _container(set)
    _ALLOWED[(_module, "frozenset")] = _container(frozenset)
    _ALLOWED[(_module, "complex")] = _complex
# ZeRO's stage, scaler, flat groups; any other `_rebuild_from_type_v2` (a DTensor) stays inert
_ALLOWED |= deepspeed_records.records(
    _rebuild_tensor, partial(_opaque, "torch._tensor._rebuild_from_type_v2")
)


def resolve_global(module: str, name: str) -> Any:
    """What GLOBAL `module name` means here if it is one of our records, else None."""
    allowed = _ALLOWED.get((module, name))
    if allowed is not None:
        return allowed
    if module in ("torch", "torch.storage", "torch.cuda") and name in STORAGE_DTYPES:
        return StorageClass(STORAGE_DTYPES[name])
    if module == "torch" and (name in ITEM_SIZES or name in _DTYPE_ALIASES):
        return DtypeName(_DTYPE_ALIASES.get(name, name))
    return None


def is_record(name: str) -> bool:
    """Whether the global `module.name` becomes one of our records (not a placeholder)."""
    module, _, attr = name.rpartition(".")
    return resolve_global(module, attr) is not None


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: Any) -> None:
        super().__init__(file)
        self._classes: dict[str, type[Opaque]] = {}  # this read's only: see the module doc

    def find_class(self, module: str, name: str) -> Any:
        found = resolve_global(str(module), str(name))
        if found is not None:
            return found
        key = f"{module}.{name}"
        cls = self._classes.get(key)
        if cls is None:  # a class per name (NEWOBJ needs a type); `scan` bounds their number
            cls = self._classes[key] = type("Opaque", (Opaque,), {"global_name": key})
        return cls

    def persistent_load(self, pid: Any) -> Any:
        # ('storage', storage class, key, location, numel) (+ view metadata in legacy files)
        if isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage":
            kind, key, location, numel = pid[1], pid[2], pid[3], pid[4]
            dtype = str(kind) if isinstance(kind, StorageClass) else "uint8"
            return StorageRef(text(key), dtype, _int(numel), text(location))
        return _opaque("persistent id", pid)


def read(data: bytes) -> tuple[Any, Ops]:
    """The object `data` pickles, with every global inert (see the module doc), and what its
    opcodes name and call (`pickle_ops.scan`: refused when too big, too long or not
    resolvable exactly, before it is unpickled)."""
    ops = pickle_ops.scan(data)
    try:
        return _Unpickler(io.BytesIO(data)).load(), ops
    except (CorruptCheckpoint, MemoryError):
        raise
    except Exception as exc:  # malformed opcodes, a REDUCE on a non-callable: a broken pickle
        raise CorruptCheckpoint(f"pickle does not load: {type(exc).__name__}: {exc}") from exc


def load(data: bytes) -> Any:
    """The object `data` pickles, with every global inert (see the module doc)."""
    return read(data)[0]


def placeholders(ops: Ops) -> list[str]:
    """The globals `data` names that become placeholders here (not our records), sorted."""
    return sorted(n for n in ops.globals if not is_record(n))


@dataclass
class Walked:
    """What `walk` met: every tensor with its dotted path, the opaque names, problems."""

    tensors: list[tuple[str, TensorRecord]] = field(default_factory=list)
    opaque: dict[str, int] = field(default_factory=dict)
    too_deep: bool = False
    too_many: bool = False


def walk(obj: Any, prefix: str = "") -> Walked:
    """Every tensor under `obj` (dicts, lists, tuples, Opaque state), iteratively and bounded:
    depth at most MAX_DEPTH, at most MAX_NODES visits, each container once."""
    out = Walked()
    seen: set[int] = set()
    stack: list[tuple[str, Any, int]] = [(prefix, obj, 0)]
    visits = 0
    while stack:
        path, value, depth = stack.pop()
        visits += 1
        if visits > MAX_NODES:
            out.too_many = True
            break
        if isinstance(value, TensorRecord):
            out.tensors.append((path, value))
            continue
        if isinstance(value, Opaque) or (isinstance(value, type) and issubclass(value, Opaque)):
            out.opaque[value.global_name] = out.opaque.get(value.global_name, 0) + 1
        children = list(_children(value))
        if not children:
            continue
        if id(value) in seen:
            continue
        seen.add(id(value))
        if depth >= MAX_DEPTH:
            out.too_deep = True
            continue
        for key, child in reversed(children):
            stack.append((f"{path}.{text(key)}" if path else text(key), child, depth + 1))
    return out


def _children(value: Any) -> Iterator[tuple[Any, Any]]:
    if isinstance(value, dict):
        yield from value.items()
    elif isinstance(value, list | tuple):
        yield from enumerate(value)
    elif isinstance(value, Opaque):
        yield from enumerate(value.args)
        if value.state is not None:
            yield "state", value.state
        yield from value.items.items()


def text(key: Any) -> str:
    """A key or name of the pickle as text, at a bounded cost: `str` of a tuple of shared
    tuples would unfold it (2**40 parts from 200 bytes), of a huge int is refused by Python."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool | float | DtypeName) or key is None:
        return str(key)
    if isinstance(key, int):
        return str(key) if -(1 << 63) <= key < 1 << 63 else f"<int of {key.bit_length()} bits>"
    if isinstance(key, bytes):
        return key[:200].decode("latin-1")
    return f"<{type(key).__name__}>"


def _int(value: Any) -> int:
    """An int of the pickle, 0 unless it fits 64 bits (a shape of huge ints is no tensor's:
    bounded before any product of them is computed)."""
    if isinstance(value, int) and not isinstance(value, bool) and -(1 << 63) <= value < 1 << 63:
        return value
    return 0


def _ints(values: Any) -> tuple[int, ...]:
    if not isinstance(values, tuple | list):
        return ()
    return tuple(_int(v) for v in values[:64])
