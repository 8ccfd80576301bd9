"""The restricted unpickler runs nothing and is bounded (formats.pickle_safe): hostile pickles
built opcode by opcode (tests/support/hostile_torch.py), never with torch."""

from __future__ import annotations

import pickle
import struct
from pathlib import Path

import pytest

from ckpt_daemon.core.errors import CorruptCheckpoint
from ckpt_daemon.formats import detect, pickle_safe
from ckpt_daemon.formats.pickle_safe import Opaque, RecordedDict, StorageRef, TensorRecord
from tests.support import hostile_torch as ht


class _Eval:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (eval, ("__import__('os').system('touch /tmp/never')",))


class UserThing:
    def __init__(self) -> None:
        self.value = 3


def test_a_reduce_to_os_system_becomes_a_named_placeholder_and_runs_nothing(
    tmp_path: Path,
) -> None:
    data = b"\x80\x02" + ht.system_call(f"touch {tmp_path / ht.MARKER}") + b"."
    obj = pickle_safe.load(data)
    assert isinstance(obj, Opaque)
    assert obj.global_name == "posix.system" and obj.args == (f"touch {tmp_path / ht.MARKER}",)
    assert not (tmp_path / ht.MARKER).exists()


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_eval_and_user_classes_are_placeholders_in_every_protocol(protocol: int) -> None:
    obj = pickle_safe.load(pickle.dumps({"e": _Eval(), "u": UserThing()}, protocol=protocol))
    assert isinstance(obj["e"], Opaque) and obj["e"].global_name in (
        "builtins.eval",
        "__builtin__.eval",
    )
    user = obj["u"]
    assert isinstance(user, Opaque)
    assert any(name.endswith("UserThing") for name in pickle_safe.walk(obj).opaque)
    assert user.state == {"value": 3}  # BUILD kept the state, ran no __setstate__ of theirs


def test_a_torch_tensor_pickle_gives_inert_records() -> None:
    data = ht.tensor_pickle(
        {"a.weight": ("HalfStorage", "0", 6), "a.bias": ("LongStorage", "1", 3)}
    )
    obj = pickle_safe.load(data)
    assert set(obj) == {"a.weight", "a.bias"}
    w = obj["a.weight"]
    assert isinstance(w, TensorRecord)
    assert (w.dtype, w.shape, w.stride, w.offset) == ("float16", (6,), (1,), 0)
    assert w.storage == StorageRef("0", "float16", 6, "cpu") and w.nbytes == 12
    assert obj["a.bias"].dtype == "int64" and obj["a.bias"].nbytes == 24


def test_ordered_dict_takes_builds_state() -> None:
    data = b"\x80\x02ccollections\nOrderedDict\n)R}" + ht._text("_metadata") + b"}sb."
    obj = pickle_safe.load(data)
    assert isinstance(obj, RecordedDict) and obj.pickle_state == {"_metadata": {}}


def test_a_memo_index_of_four_billion_is_refused_before_unpickling() -> None:
    with pytest.raises(CorruptCheckpoint, match="memo"):
        pickle_safe.load(b"\x80\x02Nr" + struct.pack("<I", 0xFFFFFFF0) + b".")


def test_a_pickle_bigger_than_the_bound_is_refused_unread() -> None:
    with pytest.raises(CorruptCheckpoint, match="refused unread"):
        pickle_safe.load(bytes(pickle_safe.MAX_PICKLE_BYTES + 1))


def test_a_pickle_of_too_many_operations_is_refused_before_unpickling() -> None:
    data = b"\x80\x02" + b"N0" * (pickle_safe.MAX_OPS // 2 + 1) + b"N."
    with pytest.raises(CorruptCheckpoint, match="operations"):
        pickle_safe.load(data)


def test_garbage_is_a_corrupt_pickle_not_a_crash() -> None:
    for data in (b"\x80\x02", b"\x80\x02R.", b"\xff\xfe", b"\x80\x02(t"):
        with pytest.raises(CorruptCheckpoint):
            pickle_safe.load(data)


def test_walk_is_bounded_in_depth_and_visits_shared_parts_once() -> None:
    deep: list[object] = []
    node = deep
    for _ in range(1000):
        child: list[object] = []
        node.append(child)
        node = child
    assert pickle_safe.walk(deep).too_deep
    shared: list[object] = []
    for _ in range(60):  # 2^60 paths, 60 containers
        shared = [shared, shared]
    walked = pickle_safe.walk(shared)
    assert not walked.too_many and not walked.too_deep


@pytest.mark.parametrize(
    ("build", "reason"),
    [
        (ht.deep_pickle, "nested"),
        (ht.huge_memo_index, "memo"),
        (ht.many_memo_entries, "memo"),
        (ht.storage_bomb, "compressed"),
        (ht.missing_storage, "missing"),
        (ht.safetensors_huge_header, "claims"),
        (ht.safetensors_truncated, "truncated"),
        (ht.plain_pickle, "neither"),
    ],
)
def test_hostile_torch_files_are_refused_with_a_reason(
    tmp_path: Path, build: object, reason: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    path = build(tmp_path, outside)  # type: ignore[operator]
    with pytest.raises(CorruptCheckpoint, match=reason):
        detect.read_checkpoint(path)
    assert not (outside / ht.MARKER).exists()


@pytest.mark.parametrize("build", [ht.reduce_to_system, ht.legacy_reduce_to_system])
def test_a_torch_file_calling_os_system_is_indexed_with_a_note(
    tmp_path: Path, build: object
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    info = detect.read_checkpoint(build(tmp_path, outside))  # type: ignore[operator]
    assert any("posix.system" in note and "never run" in note for note in info.notes)
    assert not (outside / ht.MARKER).exists()


def test_a_bin_that_is_no_checkpoint_is_not_called_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "vocab.bin"
    path.write_bytes(b"\x00\x01 not a model")
    from ckpt_daemon.core.errors import NotACheckpoint

    with pytest.raises(NotACheckpoint):
        detect.read_checkpoint(path)
