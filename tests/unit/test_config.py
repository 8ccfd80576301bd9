"""Configuration: the reference file is valid, bad values are refused with the key path."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt_daemon.core.errors import ConfigError
from ckpt_daemon.settings import config

REPO = Path(__file__).resolve().parents[2]


def parse(text: str, base: Path = Path("/srv")) -> config.Config:
    return config.parse(text, base=base, source="test")


def test_reference_config_is_valid_and_is_the_embedded_default(tmp_path: Path) -> None:
    reference = (REPO / "config.yaml").read_text()
    assert config.PACKAGED_DEFAULT.read_text() == reference
    loaded = parse(reference, base=tmp_path)
    assert loaded.roots[0].path == tmp_path / "runs"
    assert loaded.state_dir == tmp_path / ".ckpt"
    assert loaded.database == f"sqlite:///{tmp_path / '.ckpt' / 'catalog.db'}"


def test_every_reference_key_is_commented() -> None:
    lines = (REPO / "config.yaml").read_text().splitlines()
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "-")) or ":" not in stripped:
            continue
        before = [x.strip() for x in lines[max(0, i - 12) : i]]
        assert "#" in line or any(b.startswith("#") for b in before), line


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        ("roots: [{path: /a}]\nretension: {}\n", "retension", "unknown key"),
        ("roots: [{path: /a, observer: fanotify}]\n", "roots[0].observer", "not one of"),
        ("roots: []\n", "roots", "non-empty"),
        ("roots: [{path: /a}, {path: /a/b}]\n", "roots[1].path", "overlaps"),
        (
            "roots: [{path: /a, filename_template: ['{epoch}{step}']}]\n",
            "roots[0].filename_template[0]",
            "",
        ),
        (
            "roots: [{path: /a}]\ncompletion: {settle_seconds: soon}\n",
            "completion.settle_seconds",
            "duration",
        ),
        ("roots: [{path: /a}]\nlog_level: loud\n", "log_level", "not one of"),
        (
            "roots: [{path: /a}]\nretention: {keep_last: 2, tier_after: 1d}\n",
            "retention.tier_after",
            "no `remote:` is configured",
        ),
        (
            "roots: [{path: /a}]\nremote: {url: 's3://b/p'}\n"
            "retention: {keep_last: 2, keep_local: {best: 1}}\n",
            "retention.keep_local.best",
            "needs a keep_best rule",
        ),
        (
            "roots: [{path: /a, retention: {keep_last: 2, tier_after: 1d}}, {path: /b}]\n"
            "runs: [{match: x, retention: {keep_last: 1}}]\n",
            "roots[0].retention.tier_after",
            "no `remote:`",
        ),
        (
            "roots: [{path: /a}]\nremote: {url: 's3://b/p'}\n"
            "retention: {keep_last: 2, keep_local: {last: 0}}\n",
            "retention.keep_local.last",
            "from 1 to",
        ),
        ("roots: [{observer: auto}]\n", "roots[0].path", "required"),
        ("roots: {path: /a}\n", "roots", "list"),
        ("roots: [{path: /a}]\n  bad indent: [\n", "(file)", "YAML"),
    ],
)
def test_bad_config_is_refused_with_key_and_reason(text: str, key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(text)
    assert info.value.key == key
    assert reason in info.value.reason
    assert "\n" not in str(info.value)


def test_durations_and_relative_paths(tmp_path: Path) -> None:
    loaded = parse("roots: [runs]\ncompletion: {settle_seconds: 2m}\nstate_dir: st\n", tmp_path)
    assert loaded.settle_seconds == 120
    assert loaded.roots[0].path == tmp_path / "runs"
    assert loaded.database == f"sqlite:///{tmp_path / 'st' / 'catalog.db'}"


def test_database_override_is_relative_to_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    loaded = config.parse(
        "roots: [/a]\n", base=Path("/srv"), source="t", database_override="sqlite:///x.db"
    )
    assert loaded.database == f"sqlite:///{tmp_path / 'x.db'}"
    monkeypatch.setenv("CKPT_DB", "postgresql+psycopg://h/db")
    assert parse("roots: [/a]\n").database == "postgresql+psycopg://h/db"


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        ("roots: [{path: /a, name: 'a b'}]", "roots[0].name", "letters, digits"),
        ("roots: [{path: /a, name: 7}]", "roots[0].name", "expected a name"),
        ("roots: [{path: /a, name: x}, {path: /b, name: x}]", "roots[1].name", "roots[0]"),
        ("roots: [/a]\nservice: {lease_ttl: 1s}", "service.lease_ttl", "between 4s and 1d"),
        ("roots: [/a]\nservice: {lease_ttl: 30d}", "service.lease_ttl", "between 4s and 1d"),
    ],
)
def test_fleet_keys_are_refused_with_their_key(text: str, key: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(text)
    assert info.value.key == key and reason in str(info.value), str(info.value)


def test_named_roots_and_lease_ttl_are_read() -> None:
    loaded = parse("roots: [{path: /a, name: shared}, /b]\nservice: {lease_ttl: 30s}")
    assert loaded.named_roots() == {"shared": "/a"}
    assert loaded.lease_seconds == 30.0
    assert parse("roots: [/a]").lease_seconds == 120.0


# ---- item 12 of issue 20: every numeric key has bounds, on one path ----------------------------

# Where each numeric field of the parsed config comes from in config.yaml. A new numeric field
# fails the walk below until it is named here, and its key is given bounds in settings.bounds.
NUMERIC_FIELDS = {
    ("Config", "settle_seconds"): "completion.settle_seconds",
    ("Config", "min_age_seconds"): "completion.min_age_seconds",
    ("Config", "abandoned_after_seconds"): "completion.abandoned_after",
    ("Config", "read_timeout_seconds"): "completion.read_timeout",
    ("Config", "heartbeat_seconds"): "service.heartbeat",
    ("Config", "purge_after_seconds"): "trash.purge_after",
    ("Config", "lease_seconds"): "service.lease_ttl",
    **{("Schedule", job): f"schedule.{job}" for job in ("rescan", "retention", "purge")},
    **{("Schedule", job): f"schedule.{job}" for job in ("verify", "artifacts", "misfire_grace")},
    **{("Schedule", job): f"schedule.{job}" for job in ("remote_verify", "remote_sample")},
    ("RootConfig", "poll_interval"): "roots[].poll_interval",
    ("Artifacts", "split_after"): "artifacts.split_after",
    ("Artifacts", "compress_after"): "artifacts.compress_after",
    ("Artifacts", "timeout"): "artifacts.timeout",
    ("Versions", "keep_previous"): "versions.keep_previous",
    **{("Policy", k): f"retention.{k}" for k in ("keep_last", "keep_every", "keep_within")},
    **{("Policy", k): f"retention.{k}" for k in ("keep_hourly", "keep_daily", "keep_weekly")},
    ("Policy", "max_bytes"): "retention.max_bytes",
    ("Policy", "tier_after"): "retention.tier_after",
    **{("KeepLocal", k): f"retention.keep_local.{k}" for k in ("last", "best")},
    ("KeepBest", "n"): "retention.keep_best[].n",
    ("Hook", "timeout"): "hooks[].timeout",
    ("Stage", "timeout_seconds"): "pipeline[].timeout",
    ("Stage", "retries"): "pipeline[].retries",
    ("Stage", "concurrency"): "pipeline[].concurrency",
    ("Trigger", "every"): "pipeline[].on.every",
    ("Trigger", "quiet_seconds"): "pipeline[].on.final",
    ("Listen", "port"): "service.metrics_listen service.web_listen",
    # the top-level one, each root's, and the reserve of our own copies
    ("MinFree", "bytes"): "min_free roots[].min_free versions.reserve versions.budget",
    ("MinFree", "percent"): "min_free roots[].min_free versions.reserve versions.budget",
}


def numeric_fields(cls: type, seen: set[type] | None = None) -> set[tuple[str, str]]:
    """(class, field) of every int or float field reachable from the dataclass `cls`."""
    import dataclasses
    import typing

    seen = set() if seen is None else seen
    if cls in seen:
        return set()
    seen.add(cls)
    found: set[tuple[str, str]] = set()
    for name, hint in typing.get_type_hints(cls).items():
        if name not in {f.name for f in dataclasses.fields(cls)}:
            continue
        stack, kinds = [hint], set()
        while stack:
            t = stack.pop()
            stack += typing.get_args(t)
            kinds.add(t)
        if kinds & {int, float}:
            found.add((cls.__name__, name))
        for t in kinds:
            if dataclasses.is_dataclass(t) and isinstance(t, type):
                found |= numeric_fields(t, seen)
    return found


def test_every_numeric_key_of_the_config_has_bounds() -> None:
    from ckpt_daemon.settings.bounds import NUMERIC_KEYS

    walked = numeric_fields(config.Config)
    assert walked == set(NUMERIC_FIELDS), sorted(walked ^ set(NUMERIC_FIELDS))
    assert {k for keys in NUMERIC_FIELDS.values() for k in keys.split()} == set(NUMERIC_KEYS)


@pytest.mark.parametrize(
    ("text", "key", "said"),
    [
        ("min_free: 1e-9%", "min_free", "between 0.01% and 99%"),
        ("min_free: 100B", "min_free", "between 1 MiB and 2**63-1 bytes"),
        ("versions: {keep_previous: 12345678901234567890}", "versions.keep_previous", "1,000"),
        ("retention: {keep_last: 1000001}", "retention.keep_last", "from 1 to 1,000,000"),
        ("completion: {settle_seconds: 2d}", "completion.settle_seconds", "between 0s and 1d"),
        ("completion: {read_timeout: 0.5s}", "completion.read_timeout", "between 1s and 1h"),
        ("schedule: {rescan: 0.5}", "schedule.rescan", "0 (off) or between 1s and 36500d"),
        ("service: {metrics_listen: '127.0.0.1:99999'}", "service.metrics_listen", "0 to 65535"),
        ("pipeline: [{name: e, uses: verify, timeout: 0}]", "pipeline[0].timeout", "1s and 7d"),
        ("pipeline: [{name: e, uses: split, retries: 101}]", "pipeline[0].retries", "0 to 100"),
        ("pipeline: [{name: e, uses: tier, on: {every: 0}}]", "pipeline[0].on.every", "1 to"),
        ("pipeline: [{name: e, uses: tier, on: {final: 0}}]", "pipeline[0].on.final", "1s and 30d"),
    ],
)
def test_bounds_are_said_with_the_key(text: str, key: str, said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(f"roots: [/a]\n{text}\n")
    assert caught.value.key == key and said in str(caught.value), str(caught.value)
