"""A corpus of hostile pickles, written opcode by opcode: every opcode that can import or call,
its result hidden in every place a walk of the built object could miss (a dict key, a set or
frozenset member, the 65th argument, the 10,001st item, a value POPped off the stack, a memo
slot never used again, a BUILD state, NEWOBJ_EX's keywords...).

Each entry of `CALLS` is the opcodes of one expression that a real unpickler (`pickle.loads`)
would evaluate by running `touch <marker>`: `hidden(route, call)` puts it in one hiding place
and returns the pickled value (a dict, so a torch reader sees a state dict). `corpus(marker)`
gives every combination; tests check that `pickle_ops.scan` names `posix.system` (or refuses)
for each, and that nothing is ever run (the marker never appears).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

MARKER = "PWNED"


def text(value: str) -> bytes:
    """BINUNICODE."""
    data = value.encode()
    return b"X" + struct.pack("<I", len(data)) + data


def _short(value: str) -> bytes:
    """SHORT_BINUNICODE (protocol 4)."""
    data = value.encode()
    return b"\x8c" + bytes([len(data)]) + data


def _cmd(marker: str) -> bytes:
    return text(f"touch {marker}")


# Each: marker path -> opcodes leaving one value on the stack, built by running the command.
CALLS: dict[str, Callable[[str], bytes]] = {
    # GLOBAL + REDUCE: what `pickle` writes for a `__reduce__` to os.system
    "global_reduce": lambda m: b"cposix\nsystem\n(" + _cmd(m) + b"tR",
    # STACK_GLOBAL from two strings (protocol 4)
    "stack_global": lambda m: _short("posix") + _short("system") + b"\x93(" + _cmd(m) + b"tR",
    # STACK_GLOBAL whose strings come back from the memo
    "stack_global_memo": lambda m: (
        _short("posix") + b"r\x00\x00\x00\x00" + b"0" + _short("system") + b"r\x01\x00\x00\x00"
        b"0" + b"j\x00\x00\x00\x00j\x01\x00\x00\x00\x93(" + _cmd(m) + b"tR"
    ),
    # INST: import and call in one opcode
    "inst": lambda m: b"(" + _cmd(m) + b"iposix\nsystem\n",
    # OBJ: the callable first after the MARK
    "obj": lambda m: b"(cposix\nsystem\n" + _cmd(m) + b"o",
    # a call of what a call returned: getattr(__import__('os'), 'system')(cmd)
    "call_of_call": lambda m: (
        b"cbuiltins\ngetattr\n(cbuiltins\n__import__\n("
        + text("os")
        + b"tR"
        + text("system")
        + b"tR("
        + _cmd(m)
        + b"tR"
    ),
    # NEWOBJ_EX of an allowed-looking class whose keyword argument is the call
    "newobj_ex_kwargs": lambda m: (
        b"cpathlib\nPosixPath\n)}" + text("k") + b"cposix\nsystem\n(" + _cmd(m) + b"tRs\x92"
    ),
}


def _pop(call: bytes) -> bytes:
    return call + b"0N"  # computed, POPped, None left in its place


# Each: (the call's opcodes) -> opcodes leaving one value that holds or hides the call.
ROUTES: dict[str, Callable[[bytes], bytes]] = {
    "dict_value": lambda c: b"}" + text("v") + c + b"s",
    "dict_key": lambda c: b"}" + c + b"K\x01s",
    "set_member": lambda c: b"\x8f(" + c + b"\x90",
    "frozenset_member": lambda c: b"(" + c + b"\x91",
    "tuple_member": lambda c: b"(K\x01" + c + b"t",
    "list_member": lambda c: b"](" + c + b"e",
    "arg_65": lambda c: b"cpathlib\nPosixPath\n(" + text("a") * 64 + c + b"tR",
    "item_10001": lambda c: (
        b"cpathlib\nPosixPath\n)R("
        + b"".join(b"J" + struct.pack("<i", i) + b"K\x00" for i in range(10_000))
        + text("x")
        + c
        + b"u"
    ),
    "popped": lambda c: _pop(c),
    "pop_mark": lambda c: b"(" + c + b"1N",
    "memo_only": lambda c: c + b"r\x07\x00\x00\x000N",
    "build_state": lambda c: b"cpathlib\nPosixPath\n)R}" + text("s") + c + b"sb",
    "persistent_id": lambda c: b"(" + c + b"tQ",
    "deep_250": lambda c: b"]" * 250 + c + b"a" * 250,
}


def hidden(route: str, call: str, marker: str) -> bytes:
    """The protocol-4 pickle of {"w": <route holding the call>}."""
    inner = ROUTES[route](CALLS[call](marker))
    return b"\x80\x04}" + text("w") + inner + b"s."


def corpus(marker: str) -> dict[str, bytes]:
    """Every call in every route, by `route-call`, plus the whole pickle as one bare call."""
    out = {f"{r}-{c}": hidden(r, c, marker) for r in ROUTES for c in CALLS}
    out |= {f"bare-{c}": b"\x80\x04" + CALLS[c](marker) + b"." for c in CALLS}
    return out
