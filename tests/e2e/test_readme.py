"""The README tells the truth: its test command is CI's, it is a lobby (at most 10 kB) whose
links land on docs pages, and the CLI contract page documents every command."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from ckpt_daemon.cli.main import all_commands
from tests.support.doc_links import heading_anchors

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
CONTRACT = (REPO / "docs" / "cli-contract.md").read_text()
README_MAX_BYTES = 10_000


def test_first_lines_are_the_install_and_test_commands() -> None:
    block = README.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    assert len(block) == 2
    assert "ckpt" in block[0] and "install" in block[0]
    ci_lines = (REPO / ".ci" / "run").read_text().splitlines()
    assert ci_lines[-1] == block[1]
    # The pages that show the test command show CI's, and it installs the system packages too.
    assert block[1].startswith(".ci/system-packages && "), block[1]
    for page in ("development.md", "getting-started.md"):
        assert f"\n{block[1]}\n" in (REPO / "docs" / page).read_text(), page


def test_every_command_is_documented() -> None:
    listed = [f"ckpt {name}" for name, cmd in all_commands() if not hasattr(cmd, "commands")]
    assert len(listed) >= 8
    for command in listed:
        assert f"`{command}" in CONTRACT, command


def test_the_readme_is_a_lobby() -> None:
    size = len(README.encode())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes: move the detail into docs/"


IMAGE = re.compile(r"!\[[^\]]*\]\(([^)]+)\)")
MAX_IMAGE_BYTES = 200_000


def test_every_readme_image_is_a_small_committed_png() -> None:
    """The tour's screenshot: in docs/ (MkDocs shows it too), a real PNG, small."""
    images = IMAGE.findall(README)
    assert images, "the README's tour shows a screenshot"
    for image in images:
        data = (REPO / image).read_bytes()
        assert image.startswith("docs/") and data.startswith(b"\x89PNG\r\n\x1a\n"), image
        assert len(data) <= MAX_IMAGE_BYTES, f"{image}: {len(data)} bytes"


def test_every_readme_link_lands_on_a_docs_page_and_heading() -> None:
    links = re.findall(r"\]\(([^)]+)\)", IMAGE.sub("", README))
    assert len(links) >= 15, links
    pages = set()
    for link in links:
        path, _, anchor = link.partition("#")
        assert path.startswith("docs/") and path.endswith(".md"), link
        target = REPO / path
        assert target.is_file(), link
        pages.add(path)
        if anchor:
            assert anchor in heading_anchors(target.read_text()), link
    in_docs = {p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md")}
    assert pages == in_docs, f"pages the README does not link: {sorted(in_docs - pages)}"


def test_the_install_steps_work_on_an_externally_managed_python() -> None:
    """Debian 12 / Ubuntu 23.04+ refuse `pip install` outside a venv (PEP 668): no documented
    shell step installs with `sudo pip` or `pip --user`, and the service's steps make a venv
    under /opt (or use pipx). Looked for in the README and the docs/ pages it moves into."""
    pages = {p: p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]}
    steps = [
        line
        for text in pages.values()
        for block in text.split("```sh\n")[1:]
        for line in block.split("```", 1)[0].splitlines()
    ]
    bad = [
        s
        for s in steps
        if re.search(r"\bpip3? install\b", s)
        and (s.startswith("sudo python3 -m pip") or " --user" in s or s.startswith("sudo pip"))
    ]
    assert bad == []
    assert any(s.startswith("sudo python3 -m venv /opt/ckpt") for s in steps)
    assert any(s.startswith("sudo /opt/ckpt/bin/pip install .") for s in steps)
    assert any(s.startswith("sudo ln -s /opt/ckpt/bin/ckpt /usr/local/bin/ckpt") for s in steps)
    assert any("pipx install ." in text for text in pages.values())


def test_the_first_command_makes_its_venv_and_says_where_serve_remembers_its_config() -> None:
    """Issue 41: on Debian/Ubuntu's system Python the first line's `pip install` failed (PEP
    668); it makes and activates a venv first, and the tour's second terminal activates it.
    `ckpt serve` writes its config's path where every other `ckpt` looks (the README says it)."""
    first = README.split("```sh\n", 1)[1].splitlines()[0]
    assert first.startswith("python3 -m venv .venv && . .venv/bin/activate && python3 -m pip")
    assert first.endswith(" && ckpt serve"), first
    lobby = README.split("## A one-minute tour", 1)[0]
    assert "in a virtualenv" in lobby and "PEP 668" in lobby and "pipx install ." in lobby
    assert "~/.local/state/ckpt/serve-config" in lobby
    tour = README.split("## A one-minute tour", 1)[1].split("```sh\n", 1)[1].splitlines()
    assert tour[0].startswith(". .venv/bin/activate ")
    getting_started = (REPO / "docs" / "getting-started.md").read_text()
    assert f"\n{first}\n" in getting_started and "serve-config" in getting_started
    from ckpt_daemon.settings.locations import REMEMBERED_NAME

    assert REMEMBERED_NAME == "serve-config"


def _service_steps() -> list[str]:
    page = (REPO / "docs" / "service.md").read_text()
    block = page.split("## Run as a service", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines()]


def test_the_service_steps_create_the_group_and_user_they_use(tmp_path: Path) -> None:
    """Issue 41: `useradd --groups trainers ckpt` assumed a `trainers` group. The documented
    groupadd/useradd/usermod lines run for real, on a copy of the account files (shadow's
    `--prefix`): each succeeds in order, the daemon's user is in the group the system unit
    names, and a training user joins it."""
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "passwd").write_text(
        "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/bash\n"
    )
    (etc / "group").write_text("root:x:0:\nalice:x:1000:\n")
    (etc / "shadow").write_text("root:*:19000:0:99999:7:::\nalice:*:19000:0:99999:7:::\n")
    (etc / "gshadow").write_text("root:*::\nalice:!::\n")
    for name in ("shadow", "gshadow"):
        (etc / name).chmod(0o600)
    accounts = [
        s for s in _service_steps() if s.split()[:2][-1] in ("groupadd", "useradd", "usermod")
    ]
    assert [s.split()[1] for s in accounts] == ["groupadd", "useradd", "usermod"], accounts
    for step in accounts:
        words = shlex.split(step)
        assert words[0] == "sudo", step
        done = subprocess.run(
            [words[1], "--prefix", str(tmp_path), *words[2:]],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, (step, done.stderr)
    groups = {line.split(":")[0]: line.split(":") for line in (etc / "group").read_text().split()}
    users = {line.split(":")[0]: line.split(":") for line in (etc / "passwd").read_text().split()}
    unit = (REPO / "systemd" / "ckpt-daemon.service").read_text()
    group = re.search(r"^Group=(\S+)$", unit, re.M)
    user = re.search(r"^User=(\S+)$", unit, re.M)
    assert group and user and group[1] in groups and user[1] in users
    assert users[user[1]][3] == groups[group[1]][2]  # the daemon's primary group: the unit's
    assert "alice" in groups[group[1]][3].split(",")  # a trainer joined it


def test_the_service_steps_say_what_the_trainer_side_must_do() -> None:
    """Group-writable, setgid run folders and trainers with umask 002: said, and made by steps."""
    steps = _service_steps()
    assert any(s.startswith("sudo install -d") and "-m 2775" in s for s in steps), steps
    assert any("chmod g+s" in s for s in steps) and any("g+rwX" in s for s in steps)
    page = (REPO / "docs" / "service.md").read_text()
    assert "**`umask 002`**" in page and "UMask=0002" in page
    assert "ReadWritePaths=/srv/training" in (REPO / "systemd" / "ckpt-daemon.service").read_text()
