"""Paths stored relative to a root's name (core.root_names): round trips, order, ranges."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ckpt_daemon.core.root_names import PathCodec, check_name

CODEC = PathCodec({"shared": "/mnt/a/exp", "other": "/mnt/a/exp2", "deep": "/mnt/a/exp/../x"})
HOST_B = PathCodec({"shared": "/srv/share", "other": "/data/o"})

segment = st.text(alphabet="ab0/._-\u00e9 ", min_size=0, max_size=12)


def test_a_file_below_a_named_root_is_stored_by_name_and_read_back_on_another_host() -> None:
    stored = CODEC.stored("/mnt/a/exp/run-1/ckpt-3.keras")
    assert stored == "@shared/run-1/ckpt-3.keras"
    assert HOST_B.local(stored) == "/srv/share/run-1/ckpt-3.keras"
    assert CODEC.stored("/mnt/a/exp") == "@shared"
    assert HOST_B.local("@shared") == "/srv/share"


def test_a_sibling_folder_with_a_longer_name_is_not_below_the_root() -> None:
    assert CODEC.stored("/mnt/a/exp2/r/x.h5") == "@other/r/x.h5"
    assert CODEC.stored("/mnt/a/expo/x.h5") == "/mnt/a/expo/x.h5"  # no root of ours
    assert CODEC.stored("/elsewhere/x.h5") == "/elsewhere/x.h5"


def test_a_root_this_host_does_not_mount_reads_back_as_stored() -> None:
    assert PathCodec({}).local("@shared/r/x.keras") == "@shared/r/x.keras"
    assert HOST_B.local("@nowhere/r/x.keras") == "@nowhere/r/x.keras"
    assert not PathCodec({})


@given(st.lists(segment, min_size=2, max_size=6))
def test_the_order_below_a_root_and_its_range_bounds_survive_storing(tails: list[str]) -> None:
    """Range queries on the stored column (`p >= dir/ AND p < dir0`) must select what they
    select on local paths: the swap keeps the order of everything below one root."""
    paths = sorted({"/mnt/a/exp/" + t for t in tails} | {"/mnt/a/exp"})
    lower, upper = "/mnt/a/exp/", "/mnt/a/exp0"
    inside = [p for p in paths if lower <= p < upper]
    stored = [CODEC.stored(p) for p in paths]
    assert stored == sorted(stored)
    assert [CODEC.local(s) for s in stored] == paths
    s_lower, s_upper = CODEC.stored(lower), CODEC.stored(upper)
    assert [CODEC.local(s) for s in stored if s_lower <= s < s_upper] == inside


def test_details_have_their_path_strings_stored_and_nothing_else() -> None:
    details = {
        "trash": {"paths": ["/mnt/a/exp/.ckpt-trash/b1/r/x.keras"], "batch": "b1"},
        "artifacts": [{"path": "/mnt/a/exp/r/x.inference.keras", "kind": "inference"}],
        "notes": ["read /mnt/a/exp/r in 3 s"],  # prose: not a path, left as written
        "n": 3,
    }
    stored = CODEC.stored_tree(details)
    assert stored["trash"]["paths"] == ["@shared/.ckpt-trash/b1/r/x.keras"]
    assert stored["artifacts"][0]["path"] == "@shared/r/x.inference.keras"
    assert stored["notes"] == details["notes"] and stored["n"] == 3
    assert HOST_B.local_tree(stored)["trash"]["paths"] == ["/srv/share/.ckpt-trash/b1/r/x.keras"]


def test_root_names_are_plain_words() -> None:
    assert check_name("shared-1.a_b") is None
    for bad in ("", "-x", ".hidden", "a/b", "a b", "@x", "x" * 65):
        assert check_name(bad) is not None, bad
