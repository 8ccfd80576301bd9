"""Where `ckpt` finds its config file, in this order (the first that names or finds a file wins):

1. `--config PATH`, 2. `$CKPT_CONFIG`: named explicitly, so a missing file is an error, never
   a silent fallback to some other config (and an empty new catalog somewhere else);
3. `./config.yaml` in the working folder;
4. `$XDG_CONFIG_HOME/ckpt/config.yaml` (`~/.config/ckpt/config.yaml` when the variable is unset):
   the user unit's;
5. `/etc/ckpt/config.yaml`: the system unit's;
6. the config the last `ckpt serve` of this user found in its working folder (the README's
   first command: `ckpt serve` in a clone, on its `./config.yaml`), remembered by that serve in
   `$XDG_STATE_HOME/ckpt/serve-config` (`~/.local/state/ckpt/...`), while that file exists:
   so `ckpt list` from any folder reads the catalog that daemon fills;
7. else the built-in default (the bundled reference config).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ..core.errors import ConfigError

BUILT_IN = "<built-in default>"
FILE_NAME = "config.yaml"
REMEMBERED_NAME = "serve-config"  # in the user's state folder: see step 6
# System-wide config folders, searched after the user's. A constant, not an environment
# variable: what the system path is must not depend on who runs `ckpt`.
SYSTEM_DIRS: tuple[Path, ...] = (Path("/etc/ckpt"),)


def user_dir(env: Mapping[str, str]) -> Path | None:
    """`$XDG_CONFIG_HOME/ckpt`, else `$HOME/.config/ckpt`."""
    return _xdg_dir(env, "XDG_CONFIG_HOME", ".config")


def _xdg_dir(env: Mapping[str, str], variable: str, default: str) -> Path | None:
    """`$VARIABLE/ckpt`, else `$HOME/DEFAULT/ckpt`. The XDG spec says a relative value is
    invalid and must be ignored; with no home either, there is no such folder."""
    xdg = env.get(variable, "")
    if os.path.isabs(xdg):
        return Path(xdg) / "ckpt"
    home = env.get("HOME", "")
    if not os.path.isabs(home):
        try:
            home = str(Path.home())  # from the password database
        except (RuntimeError, KeyError):
            return None
    return Path(home) / default / "ckpt"


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
    return remembered_config(env)


def state_dir(env: Mapping[str, str]) -> Path | None:
    """`$XDG_STATE_HOME/ckpt`, else `$HOME/.local/state/ckpt`."""
    return _xdg_dir(env, "XDG_STATE_HOME", ".local/state")


def remembered_file(env: Mapping[str, str] | None = None) -> Path | None:
    """Where `ckpt serve` remembers the config it found in its working folder (step 6)."""
    folder = state_dir(os.environ if env is None else env)
    return None if folder is None else folder / REMEMBERED_NAME


def remembered_config(env: Mapping[str, str] | None = None) -> Path | None:
    """The config the last `ckpt serve` found in its working folder, if that file still is."""
    record = remembered_file(env)
    try:
        text = record.read_text(encoding="utf-8").strip() if record is not None else ""
    except (OSError, UnicodeDecodeError):
        return None
    path = Path(text)
    return path if text and path.is_absolute() and path.is_file() else None


def worth_remembering(source: str, explicit: str | None, env: Mapping[str, str]) -> Path | None:
    """The absolute path `ckpt serve` remembers for step 6: only a config it found in its
    working folder. One named by --config or $CKPT_CONFIG is known to whoever named it, and the
    user's and the system's configs are found from any folder anyway."""
    if explicit is not None or env.get("CKPT_CONFIG") or source != FILE_NAME:
        return None
    return Path(source).resolve()


def looked_at(explicit: str | None, env: Mapping[str, str] | None = None) -> list[str]:
    """What `find_config_file` looked at, in order, as a person reads it (for an error)."""
    env = os.environ if env is None else env
    if explicit is not None:
        return [f"--config {explicit}"]
    if env.get("CKPT_CONFIG"):
        return [f"$CKPT_CONFIG {env['CKPT_CONFIG']}"]
    shown = [f"./{FILE_NAME}", *(str(p) for p in search_path(env)[1:])]
    record = remembered_file(env)
    if record is not None:
        shown.append(f"the config the last `ckpt serve` found ({record})")
    return shown


def _named(given: str, key: str) -> Path:
    if not given.strip():
        raise ConfigError(key, f"an empty path: name a config file, or leave {key} out")
    path = Path(given)
    if not path.is_file():
        what = "is not a file" if path.exists() else "no such file"
        raise ConfigError(key, f"{given}: {what} (a config named explicitly must exist)")
    return path
