"""A pickle judged from its opcodes, before any unpickler builds a thing from it.

A pickle can import only through GLOBAL, STACK_GLOBAL, INST and the EXT codes, and can call only
through REDUCE, NEWOBJ, NEWOBJ_EX, OBJ, INST and BUILD (and the `append`/`__setitem__`/`add` of
an object a call made). So the one pass here (`pickletools.genops` decodes opcodes, it runs
nothing) follows the stack symbolically and answers, exactly and wherever the results would
land (a dict key, a set member, the 65th argument, a value POPped and dropped):
- every global the stream names (`Ops.globals`), STACK_GLOBAL's module and name resolved from
  the strings the file itself pushed (directly or through the memo): anything else (a string a
  call returned) is refused, as are the EXT codes (copyreg's registry: torch never writes them);
- every call, by the global it calls; a call of anything but a named global (the result of
  another call, a memo slot holding it) is a finding (`Ops.findings`), so is a BUILD on a
  global itself (it would set attributes of a class);
- `builtins.getattr` in the one form Python 3.11.0-3.11.3 (Debian's 3.11.2) pickles an enum
  member with: `getattr(<a class named by GLOBAL>, '<NAME>')` (`Ops.getattr_forms`); any other
  use is a finding.
`refusals` then checks the globals against an allow-list: what a real unpickler (DCP's, torch's
weights_only) may be handed. Bounds (size, opcodes, memo) are checked in the same pass.
"""

from __future__ import annotations

import io
import pickletools
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import CorruptCheckpoint

MAX_PICKLE_BYTES = 64 << 20  # a Lightning .ckpt of a 7B model pickles ~1 MB of structure
MAX_OPS = 2_000_000  # ~80,000 tensors; pure-Python opcode decoding: ~2 s per million here
MAX_MEMO = 1_000_000
MAX_GLOBALS = 10_000  # distinct globals in one pickle: a torch save names < 100
MAX_KEY_WEIGHT = 100_000  # values a hashed key unfolds to (a tuple hashes as the tree it is)
GETATTR = "builtins.getattr"
_MEMO_PUT = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_MEMO_GET = frozenset({"GET", "BINGET", "LONG_BINGET"})
_UNICODE = frozenset({"UNICODE", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8"})
_EXT = frozenset({"EXT1", "EXT2", "EXT4"})
_HASHING = frozenset({"collections.OrderedDict"}) | {
    f"{m}.{n}" for m in ("builtins", "__builtin__") for n in ("set", "frozenset")
}
_CAP = 1 << 62
_FILL = frozenset({"APPEND", "APPENDS", "SETITEM", "SETITEMS", "ADDITEMS"})
_SPECIAL = (
    _UNICODE | _EXT | {"GLOBAL", "MARK", "EMPTY_TUPLE", "GET", "BINGET", "LONG_BINGET", "STOP"}
)
# Opcodes that take nothing and push one plain value (BININT, NONE, EMPTY_DICT, BINBYTES...).
_PLAIN = frozenset(
    op.name
    for op in pickletools.opcodes
    if not op.stack_before and len(op.stack_after) == 1 and op.name not in _SPECIAL
)
# Each other opcode's stack effect: (items below its MARK it takes, or -1 without a MARK;
# values it takes without a MARK; values it pushes).
_SHAPES = {
    op.name: (
        op.stack_before.index(pickletools.markobject)
        if pickletools.markobject in op.stack_before
        else -1,
        len(op.stack_before),
        len(op.stack_after),
    )
    for op in pickletools.opcodes
}


class Sym:
    """A value on the symbolic stack: its kind ("str", "global", "call", "attr", "tuple",
    "value", "mark"), what it is (the string, the global's name, a tuple's items), the values
    it unfolds to when hashed (`weight`: a tuple's hash is never cached, so a tuple of shared
    tuples costs its unfolded size) and the largest weight among its items (`heaviest`)."""

    __slots__ = ("heaviest", "kind", "weight", "what")

    def __init__(self, kind: str, what: Any = None, weight: int = 1, heaviest: int = 0) -> None:
        self.kind, self.what, self.weight, self.heaviest = kind, what, weight, heaviest

    def holds(self, item: Sym) -> None:
        self.heaviest = max(self.heaviest, item.weight)


_MARK = Sym("mark")


@dataclass
class Ops:
    """What one pickle's opcodes name and call (see the module doc)."""

    globals: dict[str, int] = field(default_factory=dict)  # name -> times named
    calls: dict[str, int] = field(default_factory=dict)  # global called -> times
    getattr_forms: set[tuple[str, str]] = field(default_factory=set)  # (class, attribute)
    findings: list[str] = field(default_factory=list)  # calls of what no global names, ...
    top_call: str | None = None  # the global whose call is the pickle's whole value


def scan(data: bytes) -> Ops:
    """The opcodes of `data`, followed without building anything; CorruptCheckpoint when too
    big, too long, a memo beyond bounds, an EXT code, or a global not resolvable exactly."""
    if len(data) > MAX_PICKLE_BYTES:
        raise CorruptCheckpoint(
            f"pickle of {len(data)} bytes (more than {MAX_PICKLE_BYTES}): refused unread"
        )
    ops = Ops()
    stack: list[Sym] = []
    memo: dict[int, Sym] = {}
    count = 0
    try:
        for opcode, arg, pos in pickletools.genops(data):
            count += 1
            if count > MAX_OPS:
                raise CorruptCheckpoint(f"pickle of more than {MAX_OPS} operations: refused")
            if opcode.name in _PLAIN:  # most opcodes: a number, None, an empty container
                stack.append(Sym("value"))
                continue
            if opcode.name == "STOP":
                top = stack[-1] if stack else _MARK
                ops.top_call = str(top.what) if top.kind == "call" else None
                break
            _step(ops, stack, memo, opcode, arg, data, pos or 0)
    except ValueError as exc:  # a bad opcode, a cut argument
        raise CorruptCheckpoint(f"not a valid pickle: {exc}") from exc
    return ops


def refusals(ops: Ops, allowed: frozenset[str], enums: frozenset[str] = frozenset()) -> list[str]:
    """Why a real unpickler restricted to `allowed` globals must not see this pickle: the
    globals outside the list, the findings, a getattr of other than an enum of `enums`."""
    out = sorted(n for n in ops.globals if n not in allowed and n != GETATTR)
    for cls, name in sorted(ops.getattr_forms):
        if cls not in enums or name.startswith("_") or not name.isidentifier():
            out.append(f"getattr({cls}, {name!r})")
    if GETATTR in ops.globals and GETATTR not in allowed:
        out.append(GETATTR)
    return out + ops.findings


def _step(
    ops: Ops,
    stack: list[Sym],
    memo: dict[int, Sym],
    opcode: pickletools.OpcodeInfo,
    arg: Any,
    data: bytes,
    pos: int,
) -> None:
    name = opcode.name
    if name in _EXT:
        raise CorruptCheckpoint(f"pickle uses the extension registry ({name}): refused")
    if name in _MEMO_PUT or name == "MEMOIZE":
        index = arg if name in _MEMO_PUT else len(memo)
        if not isinstance(index, int) or index > MAX_MEMO or len(memo) >= MAX_MEMO:
            raise CorruptCheckpoint(f"pickle memo of more than {MAX_MEMO} entries: refused")
        memo[index] = _peek(stack)
    elif name in _MEMO_GET:
        stack.append(memo.get(arg) or Sym("value"))
    elif name == "MARK":
        stack.append(_MARK)
    elif name in ("GLOBAL", "INST"):
        found = Sym("global", _named(ops, ".".join(_global_arg(data, pos))))
        stack.append(found if name == "GLOBAL" else _called(ops, found, _tuple(_pop_mark(stack))))
    elif name == "STACK_GLOBAL":
        attr, where = _pop(stack), _pop(stack)
        if where.kind != "str" or attr.kind != "str":
            raise CorruptCheckpoint(
                "pickle STACK_GLOBAL of a module or name the file does not spell out: refused"
            )
        stack.append(Sym("global", _named(ops, f"{where.what}.{attr.what}")))
    elif name in _UNICODE:
        stack.append(Sym("str", arg))
    elif name == "REDUCE":
        args, func = _pop(stack), _pop(stack)
        stack.append(_called(ops, func, args))
    elif name in ("NEWOBJ", "NEWOBJ_EX"):
        if name == "NEWOBJ_EX":
            _pop(stack)
        args, cls = _pop(stack), _pop(stack)
        stack.append(_called(ops, cls, args))
    elif name == "OBJ":
        items = _pop_mark(stack)
        stack.append(_called(ops, items[0] if items else Sym("value"), _tuple(items[1:])))
    elif name == "BUILD":
        _pop(stack)
        if _peek(stack).kind == "global":
            what = _peek(stack).what
            ops.findings.append(f"BUILD on {what} itself (it sets attributes of a class)")
    elif name in ("TUPLE1", "TUPLE2", "TUPLE3", "EMPTY_TUPLE", "TUPLE"):
        if name == "TUPLE":
            items = _pop_mark(stack)
        else:
            size = {"TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3}.get(name, 0)
            items = [_pop(stack) for _ in range(size)][::-1]
        stack.append(_tuple(items))
    elif name == "DUP":
        stack.append(_peek(stack))
    elif name == "POP" and stack and stack[-1] is _MARK:  # as the C unpickler: drops the mark
        stack.pop()
    else:
        _generic(stack, opcode)


def _generic(stack: list[Sym], opcode: pickletools.OpcodeInfo) -> None:
    """Every other opcode by its declared stack effect; the keys and members it hashes (dict
    keys, set members) checked for their cost first; its results are plain values."""
    name = opcode.name
    below_mark, taken, pushed = _SHAPES[name]
    below: list[Sym] = []
    if below_mark >= 0:
        items = _pop_mark(stack)
        below = [_pop(stack) for _ in range(below_mark)][::-1]
    else:
        items = [_pop(stack) for _ in range(taken)][::-1]
    if name in ("SETITEM", "SETITEMS", "DICT"):
        _hashed(items[1::2] if name == "SETITEM" else items[0::2])
    elif name in ("ADDITEMS", "FROZENSET"):
        _hashed(items)
    if name in _FILL:  # the container stays on the stack, holding what it was given
        target = below[0] if below else items.pop(0)
        for item in items:
            target.holds(item)
        stack.append(target)
        return
    for _ in range(pushed):
        stack.append(Sym("value"))
        if name in ("LIST", "DICT"):
            for item in items:
                stack[-1].holds(item)


def _tuple(items: list[Sym]) -> Sym:
    out = Sym("tuple", tuple(items) if len(items) <= 3 else None)
    out.weight = min(_CAP, 1 + sum(item.weight for item in items))
    for item in items:
        out.holds(item)
    return out


def _hashed(keys: list[Sym]) -> None:
    for key in keys:
        if key.weight > MAX_KEY_WEIGHT:
            raise CorruptCheckpoint(
                f"pickle hashes a key of {key.weight:,} values (tuples sharing tuples, more "
                f"than {MAX_KEY_WEIGHT:,}): refused before it is built"
            )


def _named(ops: Ops, name: str) -> str:
    if name not in ops.globals and len(ops.globals) >= MAX_GLOBALS:
        raise CorruptCheckpoint(f"pickle names more than {MAX_GLOBALS} globals: refused")
    ops.globals[name] = ops.globals.get(name, 0) + 1
    return name


def _called(ops: Ops, func: Sym, args: Sym) -> Sym:
    if func.kind != "global":
        what = f"what {func.what} made" if func.kind in ("call", "attr") else "a value"
        ops.findings.append(f"a call of {what}, not of a named global")
        return Sym("call", "?")
    name = str(func.what)
    ops.calls[name] = ops.calls.get(name, 0) + 1
    if name in _HASHING:  # set(items), OrderedDict(pairs): each item hashed
        _hashed([Sym("value", weight=item.heaviest) for item in _items(args)])
    if name == GETATTR:
        items = args.what if args.kind == "tuple" else None
        if items and len(items) == 2 and items[0].kind == "global" and items[1].kind == "str":
            ops.getattr_forms.add((str(items[0].what), str(items[1].what)))
            return Sym("attr", f"{items[0].what}.{items[1].what}")
        ops.findings.append("a getattr of other than a named class and a written name")
    return Sym("call", name)


def _items(args: Sym) -> list[Sym]:
    """The arguments of a call, as far as they are known (a tuple of at most 3)."""
    if args.kind == "tuple" and args.what is not None:
        return list(args.what)
    return [Sym("value", weight=args.heaviest)]


def _global_arg(data: bytes, pos: int) -> tuple[str, str]:
    """GLOBAL's and INST's two lines as the C unpickler reads them (UTF-8, no escapes)."""
    end = data.index(b"\n", pos + 1)
    end2 = data.index(b"\n", end + 1)
    try:
        return data[pos + 1 : end].decode(), data[end + 1 : end2].decode()
    except UnicodeDecodeError as exc:
        raise CorruptCheckpoint(f"pickle GLOBAL not UTF-8: {exc}") from None


def _peek(stack: list[Sym]) -> Sym:
    if not stack or stack[-1] is _MARK:  # the C unpickler's fence: a MARK is no value
        raise CorruptCheckpoint("not a valid pickle: an opcode on an empty stack")
    return stack[-1]


def _pop(stack: list[Sym]) -> Sym:
    value = _peek(stack)
    stack.pop()
    return value


def _pop_mark(stack: list[Sym]) -> list[Sym]:
    for at in range(len(stack) - 1, -1, -1):
        if stack[at] is _MARK:
            items = stack[at + 1 :]
            del stack[at:]
            return items
    raise CorruptCheckpoint("not a valid pickle: no MARK where one is needed")


def split_stream(data: bytes, count: int) -> list[bytes]:
    """The first `count` pickles written one after the other in `data` (a legacy torch file)."""
    out: list[bytes] = []
    stream = io.BytesIO(data)
    try:
        while len(out) < count and stream.tell() < len(data):
            start, end = stream.tell(), None
            for opcode, _arg, pos in pickletools.genops(stream):
                if opcode.name == "STOP":
                    end = (pos or 0) + 1
            if end is None:
                raise CorruptCheckpoint("pickle stream ends without STOP")
            out.append(data[start:end])
            stream.seek(end)
    except ValueError as exc:
        raise CorruptCheckpoint(f"not a valid pickle stream: {exc}") from exc
    return out
