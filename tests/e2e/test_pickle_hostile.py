"""No file's code runs (issue 40 items 1, 9): real `dcp.save` folders whose `.metadata` hides
`touch MARKER` where the old check (a walk of the built object) never looked (a dict key, a
set and a frozenset member, the 65th argument, a POPped value, a call of a getattr), and the
corpus of hostile pickles (tests/support/hostile_pickles.py: every opcode that imports or
calls, in every hiding place) as torch zips, through `scan`, `serve --once`, `describe`,
`verify --load` and `split`: the marker outside the root never appears, each hostile DCP
folder is refused with the global it names, and the honest folders load, the one Python
3.11.2 writes (an enum through `getattr`) among them."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import Workspace, forked_python
from tests.support import hostile_dcp as hd
from tests.support import hostile_pickles as hp
from tests.support import hostile_torch as ht

SCRIPT = Path(hd.__file__).resolve()


def _write_dcp(out: Path, marker: Path) -> None:
    """The folders of tests/support/hostile_dcp.py, written by torch in a child."""
    cmd = [sys.executable, str(SCRIPT), str(out), str(marker)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    done = forked_python.run(cmd, timeout=300, env=env)
    assert done.returncode == 0, done.stderr


def _subset(corpus: dict[str, bytes]) -> dict[str, bytes]:
    """Every route with the plain call, every call in a set and bare: 27 of the 105 (each of
    the 105 is judged in tests/unit/test_pickle_ops.py; here the commands' paths are proven)."""
    return {
        k: v
        for k, v in corpus.items()
        if k.endswith("-global_reduce") or k.startswith(("set_member-", "bare-"))
    }


@pytest.fixture
def outside() -> Iterator[Path]:
    """A folder outside every root that anyone may write, the load child's user (`nobody`)
    included: a command run there leaves its marker (in pytest's 0700 tmp_path it could not,
    and a run command would go unseen)."""
    with tempfile.TemporaryDirectory(prefix="ckpt-outside-") as folder:
        os.chmod(folder, 0o777)
        yield Path(folder)


def test_hostile_pickles_never_run_and_honest_dcp_folders_load(
    workspace: Workspace, outside: Path
) -> None:
    ws = workspace
    marker = outside / hp.MARKER
    _write_dcp(ws.root / "dcp", marker)
    corpus = ws.root / "corpus"
    corpus.mkdir()
    for name, data in _subset(hp.corpus(str(marker))).items():
        ht.torch_zip(corpus / f"{name}.pt", data)

    scanned = ws.run("scan", check=False)
    assert scanned.returncode in (0, 3), scanned.stderr
    rows = {r["path"]: r for r in ws.json("list", "--all")}
    dcp = {v: rows[str(ws.root / "dcp" / v / "step-7")] for v in (*hd.HIDDEN, *hd.HONEST)}
    assert all(r["status"] == "ok" for r in dcp.values()), dcp
    pickles = [r for p, r in rows.items() if p.startswith(str(corpus))]
    assert len(pickles) == len(_subset(hp.corpus("x")))
    bare = {r["path"]: r for r in pickles if Path(r["path"]).name.startswith("bare-")}
    assert all(r["status"] == "corrupt" for r in bare.values()), bare
    one_call = bare[str(corpus / "bare-global_reduce.pt")]["reason"]
    assert "one call of posix.system" in one_call, one_call
    assert ws.run("serve", "--once", check=False).returncode in (0, 3)

    card = ws.run("describe", str(dcp["set_member"]["id"])).stdout
    assert "posix.system" in card and "never run" in card, card
    hidden_pt = rows[str(corpus / "set_member-global_reduce.pt")]
    card = ws.run("describe", str(hidden_pt["id"]), "--format", "json").stdout
    assert "posix.system" in card, card

    # the hidden ones are refused from their opcodes before a child starts; one child loads
    # the Debian folder (the plain one loads in test_async_saves), one torch's weights_only
    ids = [str(dcp[v]["id"]) for v in (*hd.HIDDEN, "debian_getattr")]
    torch_ids = [str(rows[str(corpus / "set_member-global_reduce.pt")]["id"])]
    loaded = ws.run("verify", "--load", "--json", *ids, *torch_ids, check=False)
    verdicts = {v["path"]: v for v in json.loads(loaded.stdout) if "load" in v["detail"]}
    for variant in hd.HIDDEN:
        detail = verdicts[dcp[variant]["path"]]["detail"]
        assert "load refused, nothing of the file run" in detail, (variant, detail)
    assert "posix.system" in verdicts[dcp["dict_key"]["path"]]["detail"]
    verdict = verdicts[dcp["debian_getattr"]["path"]]  # an enum through getattr: loads
    assert verdict["ok"] and "loads with torch" in verdict["detail"], verdict
    detail = verdicts[str(corpus / "set_member-global_reduce.pt")]["detail"]
    assert "refused" in detail and "posix.system" in detail, detail

    split = ws.run("split", torch_ids[0], check=False)
    assert split.returncode != 0 and "Traceback" not in split.stderr, split.stderr
    assert not marker.exists()
    assert list(outside.iterdir()) == []
