"""Issue 12 items 2 and 5, the pure parts: `service.metrics_listen` and `hooks:` validated with
the key path; the metrics' byte kinds and histogram; the `new_best` decision; a hook's JSON."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ckpt_daemon.core import observability as obs
from ckpt_daemon.core.errors import ConfigError
from ckpt_daemon.settings import config
from ckpt_daemon.settings.operations import Hook, Listen

BASE = "roots: [/srv/runs]\n"


def parse(text: str) -> config.Config:
    return config.parse(BASE + text, base=Path("/srv"), source="test")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("127.0.0.1:9464", Listen("127.0.0.1", 9464)),
        ("localhost:9464", Listen("localhost", 9464)),
        ("'[::1]:9464'", Listen("::1", 9464)),
        ("0.0.0.0:0", Listen("0.0.0.0", 0)),
        ("null", None),
    ],
)
def test_metrics_listen_takes_host_and_port(value: str, expected: Listen | None) -> None:
    assert parse(f"service:\n  metrics_listen: {value}\n").metrics_listen == expected


def test_metrics_are_off_unless_set() -> None:
    assert parse("").metrics_listen is None
    assert parse("").hooks == ()


@pytest.mark.parametrize(
    "value", ["9464", "localhost", "127.0.0.1:65536", "127.0.0.1:-1", "'[nope]:1'", "a b:1", "[1]"]
)
def test_a_bad_metrics_listen_names_the_key(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(f"service:\n  metrics_listen: {value}\n")
    assert info.value.key == "service.metrics_listen"


def test_hooks_take_events_an_argv_and_a_timeout() -> None:
    # `on:` unquoted is YAML 1.1's boolean true for PyYAML: read as our key all the same.
    cfg = parse(
        "hooks:\n"
        "  - on: [new_best, corrupt, new_best]\n"
        "    command: [/usr/bin/notify, --to, ml]\n"
        "    timeout: 5s\n"
        "  - {'on': disk_pressure, command: [/bin/true]}\n"
    )
    assert cfg.hooks == (
        Hook(("new_best", "corrupt"), ("/usr/bin/notify", "--to", "ml"), 5.0),
        Hook(("disk_pressure",), ("/bin/true",), 30.0),
    )


@pytest.mark.parametrize(
    ("hook", "key", "words"),
    [
        ("{on: [new_best], command: 'notify --file $PATH'}", "hooks[0].command", "shell"),
        ("{on: [new_best], command: []}", "hooks[0].command", "non-empty"),
        ("{on: [new_best], command: [notify, 3]}", "hooks[0].command", "strings"),
        ("{on: [nonsense], command: [notify]}", "hooks[0].on[0]", "unknown event"),
        ("{on: [], command: [notify]}", "hooks[0].on", "list of events"),
        ("{command: [notify]}", "hooks[0].on", "list of events"),
        ("{on: [corrupt], command: [notify], timeout: 0s}", "hooks[0].timeout", "0.01s and 1h"),
        ("{on: [corrupt], command: [notify], timeout: 2h}", "hooks[0].timeout", "0.01s and 1h"),
        ("{on: [corrupt], command: [notify], shell: true}", "hooks[0].shell", "unknown key"),
    ],
)
def test_a_bad_hook_names_the_key(hook: str, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(f"hooks:\n  - {hook}\n")
    assert info.value.key == key
    assert words in str(info.value)


def test_byte_kinds_tell_versions_and_trash_apart() -> None:
    assert obs.byte_kind("/r/run/best.keras", trashed=False) == "checkpoint"
    assert obs.byte_kind("/r/run/.ckpt-versions/best.keras/3.keras", trashed=False) == "version"
    assert obs.byte_kind("/r/run/.ckpt-versions", trashed=False) == "checkpoint"  # a file name
    assert obs.byte_kind("/r/.ckpt-trash/b/run/x.keras", trashed=True) == "trash"


def test_the_latency_histogram_is_cumulative() -> None:
    h = obs.histogram([0.2, 0.5, 3.0, 4000.0, -1.0])
    buckets = dict(h.buckets)
    assert buckets[0.5] == 3  # 0.2, 0.5 (le is inclusive) and the clock-skewed -1 as 0
    assert buckets[5.0] == 4 and buckets[3600.0] == 4 and buckets[math.inf] == 5
    assert (h.count, h.total) == (5, 4003.7)
    assert obs.histogram([]).buckets[-1] == (math.inf, 0)


def test_the_monitored_metric_and_a_new_best() -> None:
    assert obs.monitored_metric(["val_accuracy"], {"val_loss": 1.0}) == "val_accuracy"
    assert obs.monitored_metric([], {"val_loss": 1.0, "loss": 2.0}) == "val_loss"
    assert obs.monitored_metric([], {"loss": 2.0}) is None
    assert obs.is_better(0.9, None, "min")  # the first of its run
    assert obs.is_better(0.9, 1.0, "min") and not obs.is_better(1.0, 1.0, "min")
    assert obs.is_better(0.9, 0.8, "max") and not obs.is_better(0.7, 0.8, "max")
    assert not obs.is_better(math.nan, None, "min")


def test_a_hook_document_has_every_field() -> None:
    doc = obs.hook_document("corrupt", at="2026-12-01T00:00:00.000Z", path="/r/x.h5")
    assert doc == {
        "event": "corrupt",
        "path": "/r/x.h5",
        "run": None,
        "metric": None,
        "value": None,
        "reason": None,
        "at": "2026-12-01T00:00:00.000Z",
    }


def test_not_smaller_is_the_codec_text_artifacts_records() -> None:
    from ckpt_daemon.usecases import artifacts

    assert obs.NOT_SMALLER == artifacts.NOT_SMALLER
