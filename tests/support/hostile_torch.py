"""Hostile torch-family files, built without torch: pickles written opcode by opcode.

Each builder takes the run folder to build in and a folder outside every root, and returns the
path a scan reports on (the style of hostile_files.py, which lists them in its `KINDS`). The
pickles that would run code write `MARKER` in the outside folder if anything ever executed them:
the tests check that it never appears.
"""

from __future__ import annotations

import pickle
import struct
import zipfile
from pathlib import Path

MARKER = "PWNED"
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


def _text(value: str) -> bytes:
    data = value.encode()
    return b"X" + struct.pack("<I", len(data)) + data


def tensor_pickle(tensors: dict[str, tuple[str, str, int]], extra: bytes = b"") -> bytes:
    """A protocol-2 pickle of {name: float32 tensor}, exactly as `torch.save` writes one:
    `_rebuild_tensor_v2(persistent ('storage', FloatStorage, key, 'cpu', numel), 0, (n,), (1,),
    False, OrderedDict())`. `tensors`: name -> (storage class, key, numel); `extra`: more
    key/value opcodes for the same dict."""
    out = [b"\x80\x02}("]
    for name, (storage, key, numel) in tensors.items():
        out += [
            _text(name),
            b"ctorch._utils\n_rebuild_tensor_v2\n(",
            b"(" + _text("storage") + f"ctorch\n{storage}\n".encode(),
            _text(key) + _text("cpu") + b"J" + struct.pack("<i", numel) + b"tQ",
            b"K\x00J" + struct.pack("<i", numel) + b"\x85K\x01\x85\x89",
            b"ccollections\nOrderedDict\n)RtR",
        ]
    out.append(extra + b"u.")
    return b"".join(out)


def system_call(command: str) -> bytes:
    """The opcodes of `os.system(command)`, as `pickle` writes a `__reduce__` to it (written
    out here: this module never even names the function)."""
    return b"cposix\nsystem\n(" + _text(command) + b"tR"


def torch_zip(path: Path, data_pkl: bytes, storages: dict[str, bytes] | None = None) -> Path:
    """A `torch.save`-shaped zip: `<stem>/data.pkl`, `<stem>/data/<key>`, `<stem>/version`."""
    prefix = path.stem
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{prefix}/data.pkl", data_pkl)
        z.writestr(f"{prefix}/byteorder", b"little")
        for key, data in (storages or {}).items():
            z.writestr(f"{prefix}/data/{key}", data)
        z.writestr(f"{prefix}/version", b"3\n")
    return path


def reduce_to_system(folder: Path, outside: Path) -> Path:
    """A state dict beside an `os.system` call that would write the marker outside the root."""
    evil = _text("evil") + system_call(f"touch {outside / MARKER}")
    data = tensor_pickle({"w": ("FloatStorage", "0", 4)}, extra=evil)
    return torch_zip(folder / "evil.pt", data, {"0": bytes(16)})


def legacy_reduce_to_system(folder: Path, outside: Path) -> Path:
    """The pre-1.6 stream (magic, protocol, sys info, object, keys) whose object, a dict, holds
    a value that runs a command."""
    evil = b"\x80\x02}" + _text("evil") + system_call(f"touch {outside / MARKER}") + b"s."
    return _legacy(folder / "evil_legacy.pth", evil)


def _legacy(path: Path, obj_pickle: bytes) -> Path:
    header = [LEGACY_MAGIC, 1001, {"protocol_version": 1001, "little_endian": True}]
    parts = [*(pickle.dumps(p, protocol=2) for p in header), obj_pickle]
    path.write_bytes(b"".join([*parts, pickle.dumps([], protocol=2)]))
    return path


def one_call(folder: Path, outside: Path) -> Path:
    """A torch zip whose whole pickle is one `os.system(...)`: no state dict, no tensor."""
    data = b"\x80\x02" + system_call(f"touch {outside / MARKER}") + b"."
    return torch_zip(folder / "one_call.pt", data)


def legacy_one_call(folder: Path, outside: Path) -> Path:
    """The legacy stream whose object pickle is one `os.system(...)`."""
    data = b"\x80\x02" + system_call(f"touch {outside / MARKER}") + b"."
    return _legacy(folder / "one_call_legacy.pth", data)


def plain_pickle(folder: Path, outside: Path) -> Path:
    """`pickle.dump(os.system(...))` named `.pt`: not a torch file at all, never unpickled."""
    path = folder / "plain.pt"
    path.write_bytes(b"\x80\x04" + system_call(f"touch {outside / MARKER}") + b".")
    return path


def deep_pickle(folder: Path, _outside: Path) -> Path:
    """100,000 lists nested in each other (EMPTY_LIST x N, APPEND x N-1)."""
    depth = 100_000
    data = b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b"."
    return torch_zip(folder / "deep.pt", data)


def shared_pickle(folder: Path, _outside: Path) -> Path:
    """A billion laughs: 40 levels, each a list holding the level below twice (2^40 paths)."""
    ops = [b"\x80\x02]q\x00"]
    for level in range(1, 41):
        below = b"h" + bytes([level - 1])
        ops.append(b"]" + below + b"a" + below + b"a")
        ops.append(b"q" + bytes([level]))
    return torch_zip(folder / "laughs.pt", b"".join([*ops, b"."]))


def huge_memo_index(folder: Path, _outside: Path) -> Path:
    """One LONG_BINPUT at index 2^32-16: a C unpickler would grow its memo to 32 GB."""
    data = b"\x80\x02Nr" + struct.pack("<I", 0xFFFFFFF0) + b"."
    return torch_zip(folder / "memo_index.pt", data)


def many_memo_entries(folder: Path, _outside: Path) -> Path:
    """1.1 million memo entries: one NONE memoized again and again (protocol 4's MEMOIZE)."""
    return torch_zip(folder / "memo_many.pt", b"\x80\x04N" + b"\x94" * 1_100_000 + b".")


def storage_bomb(folder: Path, _outside: Path) -> Path:
    """A storage member deflated from 64 MiB of zeros to 64 KiB (torch stores them raw)."""
    path = folder / "bomb.pt"
    numel = 16 << 20
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("bomb/data.pkl", tensor_pickle({"w": ("FloatStorage", "0", numel)}))
        info = zipfile.ZipInfo("bomb/data/0")
        info.compress_type = zipfile.ZIP_DEFLATED
        with z.open(info, "w") as member:
            block = bytes(1 << 20)
            for _ in range(64):
                member.write(block)
        z.writestr("bomb/version", b"3\n")
    return path


def missing_storage(folder: Path, _outside: Path) -> Path:
    return torch_zip(folder / "no_storage.pt", tensor_pickle({"w": ("FloatStorage", "0", 4)}))


def safetensors_huge_header(folder: Path, _outside: Path) -> Path:
    """A safetensors header length of 2^60 bytes in a 64-byte file."""
    path = folder / "huge.safetensors"
    path.write_bytes(struct.pack("<Q", 1 << 60) + b'{"a": {"dtype": "F32"}}'.ljust(56))
    return path


def safetensors_truncated(folder: Path, _outside: Path) -> Path:
    """A valid header whose last tensor lacks 4 of its bytes (a cut copy of a shard)."""
    header = b'{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}'
    path = folder / "short.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(12))
    return path
