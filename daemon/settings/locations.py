"""Where `ckpt` finds its config file, in this order (the first that names or finds a file wins):

1. `--config PATH`, 2. `$CKPT_CONFIG`: named explicitly, so a missing file is an error, never
   a silent fallback to some other config (and an empty new catalog somewhere else);
3. `./config.yaml` in the working folder;
4. `$XDG_CONFIG_HOME/ckpt/config.yaml` (`~/.config/ckpt/config.yaml` when the variable is unset);
5. `/etc/ckpt/config.yaml`;
6. else the built-in default (the bundled reference config).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ..core.errors import ConfigError

BUILT_IN = "<built-in default>"
FILE_NAME = "config.yaml"
# System-wide config folders, searched after the user's. A constant, not an environment
# variable: what the system path is must not depend on who runs `ckpt`.
SYSTEM_DIRS: tuple[Path, ...] = (Path("/etc/ckpt"),)


def user_dir(env: Mapping[str, str]) -> Path | None:
    """`$XDG_CONFIG_HOME/ckpt`, else `$HOME/.config/ckpt`. The XDG spec says a relative value
    is invalid and must be ignored; with no home either, there is no user folder."""
    xdg = env.get("XDG_CONFIG_HOME", "")
    if os.path.isabs(xdg):
        return Path(xdg) / "ckpt"
    home = env.get("HOME", "")
    if not os.path.isabs(home):
        try:
            home = str(Path.home())  # from the password database
        except (RuntimeError, KeyError):
            return None
    return Path(home) / ".config" / "ckpt"


def search_path(env: Mapping[str, str] | None = None) -> list[Path]:
    """The files looked for when no config is named explicitly, in order."""
    env = os.environ if env is None else env
    found = [Path(FILE_NAME)]
    user = user_dir(env)
    if user is not None:
        found.append(user / FILE_NAME)
    return found + [folder / FILE_NAME for folder in SYSTEM_DIRS]


def find_config_file(explicit: str | None, env: Mapping[str, str] | None = None) -> Path | None:
    """The config file to use; None means the built-in default."""
    env = os.environ if env is None else env
    if explicit is not None:
        return _named(explicit, "--config")
    if env.get("CKPT_CONFIG"):  # set but empty counts as unset, as in most tools
        return _named(env["CKPT_CONFIG"], "$CKPT_CONFIG")
    for candidate in search_path(env):
        if candidate.is_file():
            return candidate
    return None


def _named(given: str, key: str) -> Path:
    if not given.strip():
        raise ConfigError(key, f"an empty path: name a config file, or leave {key} out")
    path = Path(given)
    if not path.is_file():
        what = "is not a file" if path.exists() else "no such file"
        raise ConfigError(key, f"{given}: {what} (a config named explicitly must exist)")
    return path
