"""Every `ckpt` command the documentation shows, as the argv lists a test runs (issue 41: a
documented command that crashes fails CI; sqlite-utils' habit of docs that test themselves).

Where commands are shown:
- the shell blocks (```sh, bash, shell, console) of README.md and docs/*.md: every line, a
  `\\`-continued line joined; other blocks (```text, yaml, plain) only their lines that start
  with `ckpt `;
- the inline code spans of those pages that start with `ckpt ` and are a command, not a synopsis
  (no `[...]`, `|`, `...`, and no upper-case placeholder left once REF, RUN, M and NAME are
  given values from the workspace);
- the `Example:` part of every command's `--help` (docs/cli.md is those helps, so it is read
  from the commands themselves, not from the page).

A line is cut into commands at `&&`, `||`, `;` and `|`; `$(ckpt ...)` inside it is a command of
its own, whose output replaces it (as the shell does) before the outer command runs. Programs
other than `ckpt` are never run here: each must be named in `NOT_RUN` with why.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHELL_INFO = {"sh", "bash", "shell", "console"}
# Programs the pages show beside `ckpt` that this test does not run, and why. A page that shows
# a new one fails the test until it is named here (or the step becomes a `ckpt` command).
NOT_RUN = {
    ".": "`. .venv/bin/activate`: a shell builtin, the test's environment is already set up",
    "python3": "installs (pip: no network in CI) or the user's own training scripts (TensorFlow)",
    "python": "the user's own scripts in the --help examples (eval.py, predict.py, resume.py)",
    "pip": "installs packages: no network in CI; test_packaging installs for real",
    "pipx": "installs packages: no network in CI",
    "mkdir": "coreutils: the workspace's folders exist",
    "sudo": "root steps of the system service (apt-get, venv under /opt, useradd, install, "
    "systemctl): test_packaging and test_readme run them against temporary copies",
    "systemctl": "needs systemd as PID 1 (not in CI): test_systemd_units checks the units",
    "journalctl": "needs journald",
    "install": "copies the config and units into place: the workspace has its config",
    "ln": "the install's link: test_packaging makes it",
    "$EDITOR": "a person edits the config",
    "sudoedit": "a person edits the config or the unit",
    "jq": "reads what `ckpt ... --json` printed: the ckpt part runs",
    ".ci/system-packages": "installs Debian packages: CI's own first step",
    "ruff": "the lint step of the README's test line: CI runs it",
    "mypy": "the type check of the README's test line: CI runs it",
    "codespell": "the spell check of the README's test line: CI runs it",
    "mkdocs": "builds the docs site: test_docs_site builds it",
    "while": "the shell loop of `ckpt wait`'s example: its `ckpt wait` runs",
    "do": "the shell loop of `ckpt wait`'s example: its body is the user's script",
    "done": "the end of that loop",
    "export": "sets CKPT_TEST_FIXTURES for the suite (docs/development.md)",
    "kill": "signals a running daemon by pid: test_service sends them",
    "git": "clones and updates the repository",
    "apt-get": "installs Debian packages",
    "bench/wait_latency.py": "a benchmark of minutes: docs/performance.md's numbers",
    "~/.local/share/ckpt/bin/pip": "the user service's install (pip: no network in CI)",
}

# `ckpt` commands shown that this test does not run, and why: keep it small.
CKPT_NOT_RUN = {
    ("ckpt", "verify", "--load"): "loads every checkpoint of the catalog in TensorFlow and torch "
    "children (minutes of CPU); test_trust_cards, test_hf_split and test_torch_cli run it",
    **{
        ("ckpt", "split", ref, "--layout", "json+h5"): "checks the export by loading it in a "
        "Keras child (~20 s of TensorFlow each); test_json_h5_legacy runs it"
        for ref in ("exp1/e03.keras", "runs/exp1/e07.keras")
    },
}


@dataclass(frozen=True)
class Shown:
    """One place a command line is shown: the page (or `ckpt NAME --help`) and the text."""

    where: str
    text: str
    inline: bool = False


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def from_pages() -> Iterator[Shown]:
    for page in pages():
        if page.name == "cli.md":  # generated from the --help texts, read below
            continue
        where = page.relative_to(REPO).as_posix()
        text = page.read_text(encoding="utf-8")
        outside: list[str] = []
        for chunk, info, body in _fences(text):
            outside.append(chunk)
            if body is None:
                continue
            shell = info in SHELL_INFO
            for line in _joined(body.splitlines()):
                if shell or line.lstrip().startswith("ckpt "):
                    yield Shown(where, line)
        for span in re.findall(r"`(ckpt [^`]+)`", "".join(outside)):
            yield Shown(where, span.replace("\\|", "|"), inline=True)


def _fences(text: str) -> Iterator[tuple[str, str, str | None]]:
    """(the text before a fenced block, the block's info string, its body); the last item is
    the rest of the page with body None."""
    pos = 0
    pattern = re.compile(r"^(`{3,})([^\n`]*)\n(.*?)^\1[ \t]*$", re.M | re.S)
    for m in pattern.finditer(text):
        yield text[pos : m.start()], m[2].strip().split(" ")[0], m[3]
        pos = m.end()
    yield text[pos:], "", None


def _joined(lines: list[str]) -> Iterator[str]:
    buffer = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            buffer += line.rstrip()[:-1] + " "
            continue
        yield buffer + line
        buffer = ""
    if buffer:
        yield buffer


def from_help() -> Iterator[Shown]:
    """The `Example:` lines of every command's --help, the loop of `ckpt wait` as one line."""
    from ckpt_daemon.cli.main import all_commands

    for name, command in all_commands():
        text = command.help or ""
        if "Example:" not in text:
            continue
        example = text.split("Example:", 1)[1].replace("\b", "")
        lines = [line.strip() for line in example.splitlines() if line.strip()]
        joined: list[str] = []
        for line in lines:
            if joined and joined[-1].rstrip().endswith("do"):
                joined[-1] += " " + line  # a `while ...; do` loop goes on
            else:
                joined.append(line)
        for line in joined:
            yield Shown(f"ckpt {name} --help", line)


# Placeholders of the inline spans that name a thing of the test's workspace.
PLACEHOLDERS = {"REF": "exp1/e03.keras", "RUN": "exp1", "M": "val_loss", "NAME": "val_loss"}
_SYNOPSIS = re.compile(r"\[|\]|\||\.\.\.|…")
_PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*(\.\.\.)?$|^[A-Z]+\.[a-z]+$")


def inline_argv(span: str) -> list[str] | None:
    """The argv of an inline `ckpt ...` span, None for a synopsis."""
    if _SYNOPSIS.search(span):
        return None
    words = [PLACEHOLDERS.get(w, w) for w in shlex.split(span)]
    if any(_PLACEHOLDER.match(w) for w in words[1:]):
        return None
    return words


_SUBSTITUTION = re.compile(r"\$\((ckpt [^()]*)\)")
_SEPARATORS = {"&&", "||", ";", "|", "&"}


def commands(line: str) -> Iterator[list[str]]:
    """The commands of one shell line, in order, `$(...)` left in the words as they are (the
    caller runs them first: `substitutions`). Comments are dropped."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words: list[str] = []
    for token in lexer:
        if token in _SEPARATORS:
            if words:
                yield words
            words = []
            continue
        words.append(token)
    if words:
        yield words


def substitutions(line: str) -> list[str]:
    """The `$(ckpt ...)` commands inside a line, in order."""
    return _SUBSTITUTION.findall(line)


def substitute(line: str, outputs: dict[str, str]) -> str:
    return _SUBSTITUTION.sub(lambda m: outputs.get(m[1], ""), line)


def is_ckpt_command(argv: list[str]) -> bool:
    """`ckpt` followed by an option or one of its commands (not `ckpt (cli)` of a diagram)."""
    from ckpt_daemon.cli.main import all_commands

    names = {name.split()[0] for name, _command in all_commands()}
    rest = [w for w in argv[1:] if w]
    return argv[0] == "ckpt" and (not rest or rest[0].startswith("-") or rest[0] in names)
