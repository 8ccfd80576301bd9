"""`service.web_listen` / `service.web_token_file`: a view other hosts can reach never starts
without a token; the token file is read whole and checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt_daemon.core.errors import ConfigError
from ckpt_daemon.settings.config import parse
from ckpt_daemon.settings.web_view import is_loopback, read_token


def config(tmp_path: Path, service: str) -> object:
    (tmp_path / "runs").mkdir(exist_ok=True)
    text = f"roots:\n  - path: {tmp_path / 'runs'}\nservice:\n{service}"
    return parse(text, base=tmp_path, source="test")


def test_off_unless_set(tmp_path: Path) -> None:
    assert config(tmp_path, "  heartbeat: 10s\n").web is None  # type: ignore[attr-defined]


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.1", "[::1]", "localhost"])
def test_a_loopback_address_needs_no_token(tmp_path: Path, host: str) -> None:
    view = config(tmp_path, f"  web_listen: '{host}:9465'\n").web  # type: ignore[attr-defined]
    assert view.loopback and view.token_file is None


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.4", "[::]", "gpu-node-7"])
def test_any_other_address_is_refused_without_a_token_file(tmp_path: Path, host: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config(tmp_path, f"  web_listen: '{host}:9465'\n")
    assert "service.web_token_file" in str(caught.value)
    assert "loopback" in str(caught.value)


def test_a_token_file_opens_it_and_is_read_at_start(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("  abc123\n")
    view = config(tmp_path, f"  web_listen: 0.0.0.0:0\n  web_token_file: {token}\n").web  # type: ignore[attr-defined]
    assert not view.loopback and read_token(view) == "abc123"
    token.write_text("\n")
    with pytest.raises(ConfigError, match=r"service\.web_token_file"):
        read_token(view)
    token.unlink()
    with pytest.raises(ConfigError, match="cannot read"):
        read_token(view)


def test_a_bad_address_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"service\.web_listen"):
        config(tmp_path, "  web_listen: nowhere\n")
    with pytest.raises(ConfigError, match=r"service\.web_listen"):
        config(tmp_path, "  web_listen: 127.0.0.1:70000\n")


def test_hostnames_other_than_localhost_count_as_open() -> None:
    assert is_loopback("::1") and not is_loopback("localhost.example.com")
