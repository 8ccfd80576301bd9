"""Real `dcp.save` folders whose `.metadata` hides a call (issue 40 item 1), and the honest one
Python 3.11.0-3.11.3 (Debian 12's 3.11.2) writes, pickling an enum through `getattr` (item 9).

    python3 tests/support/hostile_dcp.py OUT MARKER   # in a child: torch is imported

Each folder under OUT is one `dcp.save` of a small model; its `.metadata` is then loaded (our
own file, in this writer) and pickled again (protocol 4, as DCP does) with a value set in
Metadata's `planner_data` field: `touch MARKER` hidden where the old check, which walked the
built object, never looked. Under a real `pickle.load` (what `dcp.load` does) each runs the
command. `popped` is spliced as opcodes (no pickler writes a POP of a computed value).
"""

from __future__ import annotations

import enum
import io
import os
import pathlib
import pickle
import sys
from pathlib import Path
from typing import Any

HIDDEN = ("dict_key", "set_member", "frozenset_member", "arg_65", "popped", "bound_method")
HONEST = ("honest", "debian_getattr")


class _System:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (self.command,))


class _Args65:
    """`PosixPath('a', ... 64 times, os.system(...))`: the 65th argument runs the command."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, ...]:
        return (pathlib.PosixPath, ("a",) * 64 + (_System(self.command),))


class _Touch:
    """`getattr(PosixPath(marker), 'touch')()`: a call of what a getattr of allowed names made."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (pathlib.PosixPath(str(self.marker)).touch, ())


class _Pickler(pickle.Pickler):
    """Pickles enum members as Python 3.11.2 did: `getattr(EnumClass, 'NAME')`."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, enum.Enum):
            return (getattr, (type(obj), obj.name))
        return NotImplemented


def _dump(value: Any, debian: bool = False) -> bytes:
    out = io.BytesIO()
    if debian:
        _Pickler(out, protocol=4).dump(value)
    else:
        pickle.Pickler(out, protocol=4).dump(value)
    return out.getvalue()


def write(out: Path, marker: Path) -> None:
    import torch
    import torch.distributed.checkpoint as dcp

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 3))
    state = {"model": model.state_dict(), "step": 7}
    command = f"touch {marker}"
    planner: dict[str, Any] = {
        "dict_key": {_System(command): 1},
        "set_member": {_System(command)},
        "frozenset_member": frozenset({_System(command)}),
        "arg_65": _Args65(command),
        "bound_method": _Touch(marker),
    }
    for name in (*HIDDEN, *HONEST):
        folder = out / name / "step-7"
        dcp.save(state, checkpoint_id=str(folder))
        path = folder / ".metadata"
        with path.open("rb") as fh:
            metadata = pickle.load(fh)  # our own file, just written
        if name in planner:
            metadata.planner_data = planner[name]
        data = _dump(metadata, debian=name == "debian_getattr")
        if name == "popped":  # os.system(...) computed and POPped before the Metadata
            data = data[:2] + b"cposix\nsystem\n(" + _text(command) + b"tR0" + data[2:]
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)  # newer than the data files: fine (older would be a re-save)


def _text(value: str) -> bytes:
    data = value.encode()
    return b"X" + len(data).to_bytes(4, "little") + data


if __name__ == "__main__":
    write(Path(sys.argv[1]), Path(sys.argv[2]))
