"""Pickles judged from their opcodes (formats/pickle_ops, issue 40 items 1-3): every global and
call is found wherever its result would land, the DCP allow-list refuses each hostile pickle of
the corpus (tests/support/hostile_pickles.py: 98 pickles, each runs a command under a real
`pickle.loads`), no state outlives one read, and cheap pickles that cost a reader minutes
(a dict key that unfolds to 2**40 values, a hyper-parameter DAG) are refused or bounded first."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ckpt_daemon.core.errors import CorruptCheckpoint
from ckpt_daemon.core.model import Format
from ckpt_daemon.formats import dcp_folder, pickle_allowed, pickle_ops, pickle_safe, torch_state
from tests.support import hostile_pickles as hp
from tests.support import hostile_torch as ht

CORPUS = hp.corpus(f"/nonexistent/{hp.MARKER}")
# What one item of the corpus names: the command itself, or the import that reaches it.
EVIL = {"posix.system", "builtins.__import__"}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_every_hostile_pickle_names_its_call_wherever_it_hides(name: str) -> None:
    data = CORPUS[name]
    ops = pickle_ops.scan(data)
    assert EVIL & set(ops.globals), (name, ops.globals)
    assert set(dcp_folder.foreign_globals(data)) & EVIL, name  # refused for a real load
    if name.startswith("bare-"):
        return
    try:  # the inert reader builds it (nothing runs); its placeholders are exact
        _obj, read_ops = pickle_safe.read(data)
    except CorruptCheckpoint:
        return
    assert EVIL & set(pickle_safe.placeholders(read_ops)), name


@pytest.mark.parametrize(
    "route", ["dict_key", "set_member", "frozenset_member", "arg_65", "item_10001", "popped"]
)
def test_a_call_the_walk_of_the_built_object_misses_is_refused_for_dcp(route: str) -> None:
    """The issue's five escapes: `foreign_globals` judged the walk of the built object, which
    never reached these (the DCP load then ran the command)."""
    data = hp.hidden(route, "global_reduce", "/nonexistent/x")
    walked = pickle_safe.walk(pickle_safe.load(data))
    assert "posix.system" not in walked.opaque  # what the old check relied on
    assert "posix.system" in dcp_folder.foreign_globals(data)


def _stack_global(module: str, name: str) -> bytes:
    return (
        b"\x8c"
        + bytes([len(module)])
        + module.encode()
        + b"\x8c"
        + bytes([len(name)])
        + (name.encode() + b"\x93")
    )


def test_getattr_is_allowed_only_as_python_3_11_2_pickles_an_enum_member() -> None:
    enum = "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING"
    module, cls = enum.rsplit(".", 1)
    honest = b"\x80\x04" + _stack_global("builtins", "getattr") + _stack_global(module, cls)
    honest += b"\x8c\x17TORCH_CONTIGUOUS_FORMAT\x86R."
    assert dcp_folder.foreign_globals(honest) == []
    private = honest.replace(b"\x8c\x17TORCH_CONTIGUOUS_FORMAT", b"\x8c\x08__init__")
    assert dcp_folder.foreign_globals(private) == [f"getattr({enum}, '__init__')"]
    other = b"\x80\x04" + _stack_global("builtins", "getattr") + _stack_global("pathlib", "Path")
    other += b"\x8c\x05touch\x86R."
    refused = set(dcp_folder.foreign_globals(other))
    assert refused == {"getattr(pathlib.Path, 'touch')", "pathlib.Path"}
    called = honest[:-1] + b")R."  # calling what getattr returned
    assert any("a call of what" in r for r in dcp_folder.foreign_globals(called))


def test_stack_global_of_strings_the_file_does_not_spell_out_is_refused() -> None:
    # the module name is what `_codecs.encode` returns: only running the pickle would tell
    data = b"\x80\x04" + _stack_global("_codecs", "encode") + b"\x8c\x02os\x85R"
    data += b"\x8c\x06system\x93."
    with pytest.raises(CorruptCheckpoint, match="does not spell out"):
        pickle_ops.scan(data)


@pytest.mark.parametrize("code", [b"\x82\x01", b"\x83\x01\x00", b"\x84\x01\x00\x00\x00"])
def test_extension_codes_are_refused(code: bytes) -> None:
    with pytest.raises(CorruptCheckpoint, match="extension registry"):
        pickle_safe.load(b"\x80\x02" + code + b".")


def _metadata_like() -> bytes:
    """A pickle naming a class by NEWOBJ, as a DCP `.metadata` does."""
    return (
        b"\x80\x04"
        + _stack_global("torch.distributed.checkpoint.metadata", "Metadata")
        + (b")\x81}b.")
    )


def test_no_state_outlives_one_read() -> None:
    """A file naming 10,001 globals once filled a process-wide class cache: every later read
    then saw unknown globals as `?` (a good DCP folder recorded `corrupt`)."""
    for count in (10_001, 9_999):  # refused, then read: neither changes the next read
        filler = b"".join(b"cm\ng%d\n)\x810" % i for i in range(count))
        try:
            pickle_safe.load(b"\x80\x02" + filler + b"N.")
        except CorruptCheckpoint as exc:
            assert count > 10_000 and "more than 10000 globals" in str(exc)
    record = pickle_safe.load(_metadata_like())
    assert isinstance(record, pickle_safe.Opaque)
    assert record.global_name == "torch.distributed.checkpoint.metadata.Metadata"


def _tuple_dag(levels: int) -> bytes:
    """A tuple of two references to the tuple below, `levels` deep: 2**levels values unfolded,
    in 7 bytes a level."""
    out = [b")q\x000"]
    for i in range(levels):
        out.append(b"h" + bytes([i]) + b"h" + bytes([i]) + b"\x86q" + bytes([i + 1]))
        out.append(b"0" if i < levels - 1 else b"")
    return b"".join(out)


@pytest.mark.parametrize(
    "template",
    [
        b"\x80\x02}%sK\x01s.",
        b"\x80\x04\x8f(%s\x90.",
        b"\x80\x04(%s\x91.",
        b"\x80\x02}(%sK\x01u.",
        b"\x80\x02c__builtin__\nset\n]%sa\x85R.",
    ],
)
def test_a_key_that_unfolds_to_2_to_the_40_values_is_refused_before_it_is_hashed(
    template: bytes,
) -> None:
    data = template.replace(b"%s", _tuple_dag(40))
    started = time.monotonic()
    with pytest.raises(CorruptCheckpoint, match="hashes a key of"):
        pickle_safe.load(data)
    assert time.monotonic() - started < 1.0
    pickle_safe.load(template.replace(b"%s", _tuple_dag(10)))  # 1,024 values: fine


def test_a_hyper_parameter_dag_is_copied_within_a_node_budget() -> None:
    """`plain` copied a DAG of shared references as the tree it unfolds to: 50**5 here."""
    level = [b"\x80\x02}q\x000"]  # memo 0: the leaf dict
    for depth in range(1, 6):
        level.append(b"}(")
        level += [b"K" + bytes([k]) + b"h" + bytes([depth - 1]) for k in range(50)]
        level.append(b"uq" + bytes([depth]) + b"0")
    top = b"}(" + hp.text("pytorch-lightning_version") + hp.text("2.6.6")
    top += hp.text("hyper_parameters") + b"h\x05u."
    obj = pickle_safe.load(b"".join(level) + top)
    started = time.monotonic()
    info = torch_state.interpret(obj, Format.TORCH_ZIP)
    assert time.monotonic() - started < 2.0
    assert info.training_config is not None
    assert "..." in str(info.training_config["hyper_parameters"])


def test_huge_ints_and_shared_tuple_keys_become_bounded_text() -> None:
    assert pickle_safe.text(1 << 100_000) == "<int of 100001 bits>"
    assert pickle_safe.text(((), ())) == "<tuple>"
    # a shape of huge ints is no tensor's: each dimension outside 64 bits reads as 0
    data = b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n(NK\x00\x8a\x10" + bytes(15) + b"\x01"
    data += b"\x85K\x01\x85\x89Nt" + b"R."
    record = pickle_safe.load(data)
    assert isinstance(record, pickle_safe.TensorRecord) and record.shape == (0,)


def test_the_torch_load_children_judge_a_file_by_the_same_opcodes(tmp_path: Path) -> None:
    """`verify --load` of a torch file: its pickles checked against torch's own weights_only
    list (given here as the child reads it from torch) before `torch.load` sees a byte."""
    allowed = {"collections.OrderedDict", "torch._utils._rebuild_tensor_v2", "builtins.set"}
    allowed |= {"torch.FloatStorage"}
    honest = tmp_path / "ok.pt"
    ht.torch_zip(honest, ht.tensor_pickle({"w": ("FloatStorage", "0", 4)}), {"0": bytes(16)})
    assert pickle_allowed.torch_file_refusals(str(honest), allowed) == []
    as_protocol_2 = tmp_path / "set.pt"  # `__builtin__.set`: builtins.set under its old name
    ht.torch_zip(as_protocol_2, b"\x80\x02c__builtin__\nset\n]\x85R.")
    assert pickle_allowed.torch_file_refusals(str(as_protocol_2), allowed) == []
    for name, data in {"hidden": hp.hidden("set_member", "global_reduce", "/x")}.items():
        evil = ht.torch_zip(tmp_path / f"{name}.pt", data)
        assert "posix.system" in pickle_allowed.torch_file_refusals(str(evil), allowed)
    legacy = ht.legacy_reduce_to_system(tmp_path, tmp_path)
    assert "posix.system" in pickle_allowed.torch_file_refusals(str(legacy), allowed)
