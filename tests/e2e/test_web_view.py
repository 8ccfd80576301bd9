"""The web view in a real headless Chromium, against a live `ckpt serve` indexing a real Keras
training run (the session's cached runs: no model is trained here).

One daemon and one browser for the whole file: the run `best_gaps` (6 checkpoints written by
Keras's ModelCheckpoint with save_best_only, its CSVLogger log), two of them trashed by a
`ckpt prune --keep-last 4` before the daemon starts; the configured retention (keep_last 3,
the scheduled job off) is what the run page's "next prune" column must say. Beside it, runs and
files with hostile names: markup, a `<script>`, control characters, a right-to-left override."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.support import Daemon, Workspace, service_workspace
from tests.support.browser import chromium, png_facts

pytestmark = pytest.mark.slow

RUN = "best_gaps"
# A folder cannot hold "/": the <script> run is two folders, its name the whole text.
SCRIPT_RUN = "<script>window.__pwned=1</script>"
MARKUP_FILE = "<img src=x onerror=window.__pwned=2>e01.keras"
CONTROL_FILE = "rtl\u202eslx.keras\x1b[31m-e02.keras"
TOKEN = "s3cret-token-for-the-test"


def visible(text: str) -> str:
    """What the CLI prints for a name (and the page shows): control characters escaped."""
    from ckpt_daemon.core.text import visible as escape

    return escape(text)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, training_runs: Path) -> Iterator[Any]:
    base = tmp_path_factory.mktemp("web")
    ws = service_workspace(base, extra="  retention: 0\nretention: {keep_last: 3}\n")
    config = ws.config.read_text()
    web = "service:\n  heartbeat: 1s\n  web_listen: 127.0.0.1:0\n"
    ws.config.write_text(config.replace("service:\n  heartbeat: 1s\n", web, 1))
    shutil.copytree(training_runs / "keras3" / RUN, ws.root / RUN)
    some = sorted((ws.root / RUN).glob("*.keras"))[0]
    hostile = ws.root / "<script>window.__pwned=1<" / "script>"
    hostile.mkdir(parents=True)
    shutil.copy(some, hostile / MARKUP_FILE)
    shutil.copy(some, hostile / CONTROL_FILE)
    ws.run("scan")
    ws.run("prune", "--keep-last", "4", "--run", RUN)
    daemon = Daemon(ws, shared=True)
    try:
        daemon.wait_for_log("event=ready", timeout=180)
        port = int(re.search(r"web_listening address=127\.0\.0\.1:(\d+)", daemon.log)[1])
        with chromium() as browser:
            url = f"http://127.0.0.1:{port}"
            yield {"ws": ws, "daemon": daemon, "url": url, "browser": browser}
    finally:
        if daemon.stop() != 0 and daemon.proc.poll() is None:
            daemon.proc.kill()


def page_at(site: Any, path: str) -> Any:
    page = site["browser"].new_page()
    page.goto(site["url"] + path)
    return page


def get(url: str, **headers: str) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        with exc:  # its socket closed here, not by the garbage collector
            return exc.code, exc.read()


def test_the_run_page_draws_the_curve_and_marks_what_list_and_the_plan_say(site: Any) -> None:
    ws: Workspace = site["ws"]
    rows = {r["id"]: r for r in ws.json("list", "--run", RUN, "--all")}
    plan = ws.json("prune", "--dry-run", "--run", RUN)
    decisions = {d["id"]: d for p in plan["runs"] for d in p["decisions"]}
    page = page_at(site, f"/run?run={quote(RUN)}")
    line = page.locator("svg#curve path.line").get_attribute("d")
    assert line is not None and line.count("L") >= 5  # the logged epochs, drawn as one line
    markers = {
        int(g.get_attribute("data-id")): g.get_attribute("data-mark")
        for g in page.locator("svg#curve g.marker").all()
    }
    assert set(markers) == set(rows)
    trashed = {i for i, r in rows.items() if r["status"] == "trashed"}
    assert len(trashed) == 2
    assert {i for i, mark in markers.items() if mark == "trashed"} == trashed
    assert all(markers[i] in ("kept", "best") for i in set(rows) - trashed)
    table = {int(tr.get_attribute("data-id")): tr for tr in page.locator("tr.checkpoint").all()}
    assert set(table) == set(rows)
    places = {i: tr.get_attribute("data-location") for i, tr in table.items()}
    assert places == {i: r["location"] for i, r in rows.items()}  # ckpt list --json's
    assert set(places.values()) == {"local", "none"}  # on disk; trashed without a remote copy
    assert any(d["action"] == "trash" for d in decisions.values())  # the next prune does work
    for cid, decision in decisions.items():
        tr = table[cid]
        assert tr.get_attribute("data-action") == decision["action"]
        reasons = "; ".join(decision["reasons"])
        if decision["action"] == "keep":
            assert tr.locator("td.why").inner_text() == reasons
        else:
            assert tr.locator("td.next").inner_text() == f"{decision['action']}: {reasons}"
    # A long table is cut to its newest rows, with a link to more (no JavaScript needed).
    page.goto(site["url"] + f"/run?run={quote(RUN)}&rows=2")
    newest = [int(tr.get_attribute("data-id")) for tr in page.locator("tr.checkpoint").all()]
    assert newest == [int(i) for i in list(table)[-2:]]
    assert page.locator("#curve g.marker").count() == len(rows)  # the curve: every one
    page.click("#more-rows")
    assert page.locator("tr.checkpoint").count() == min(8, len(rows))
    assert page.locator("#more-rows").count() == (1 if len(rows) > 8 else 0)
    page.close()


def test_the_json_endpoints_are_the_commands_documents(site: Any) -> None:
    ws: Workspace = site["ws"]
    status, body = get(site["url"] + f"/api/run?run={quote(RUN)}")
    doc = json.loads(body)
    assert status == 200
    assert doc["history"] == ws.json("history", "--run", RUN)
    assert doc["prune_plan"] == ws.json("prune", "--dry-run", "--run", RUN)
    runs = {r["name"]: r for r in json.loads(get(site["url"] + "/api/runs")[1])["runs"]}
    for cli_run in ws.json("runs"):
        assert {k: runs[cli_run["name"]][k] for k in cli_run} == cli_run
    assert json.loads(get(site["url"] + "/api/disk")[1])["du"] == ws.json("du")
    events = json.loads(get(site["url"] + "/api/log?limit=5")[1])["events"]
    assert events == ws.json("log", "--limit", "5")


def test_the_view_is_read_only(site: Any) -> None:
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        request = urllib.request.Request(site["url"] + "/", method=method, data=b"x")
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=30)
        with caught.value:
            assert caught.value.code == 405, method
            assert caught.value.headers["Allow"] == "GET, HEAD"


def test_a_checkpoint_saved_meanwhile_appears_without_a_reload(
    site: Any, training_runs: Path
) -> None:
    page = page_at(site, f"/run?run={quote(RUN)}")
    page.wait_for_selector("#live:not([hidden])")
    page.evaluate("window.__same_document = 42")
    before = page.locator("tr.checkpoint").count()
    source = sorted((training_runs / "keras3" / "dash_acc").glob("*.keras"))[-1]
    run = site["ws"].root / RUN
    shutil.copy(source, run / ".saving.tmp")  # as a trainer saves: written, then renamed
    os.rename(run / ".saving.tmp", run / "best-10-0.60.keras")
    deadline = time.monotonic() + 120  # indexed (settle 1 s), then the next poll (2 s)
    while page.locator("tr.checkpoint").count() <= before and time.monotonic() < deadline:
        time.sleep(0.25)  # polled from here: the page's CSP refuses wait_for_function's eval
    assert "best-10-0.60.keras" in page.locator("#checkpoints").inner_text()
    assert page.evaluate("window.__same_document") == 42  # the content moved, not the page
    page.close()


def test_screenshots_are_of_the_pages_drawn(site: Any, tmp_path: Path) -> None:
    committed = Path(__file__).parents[2] / "docs" / "web-run.png"  # the docs' and README's
    (size, colours) = png_facts(committed.read_bytes())
    assert size == (1000, 760) and colours > 50, (size, colours)  # a page drawn, not blank
    for path in ("/", f"/run?run={quote(RUN)}", "/disk"):
        page = page_at(site, path)
        data = page.screenshot()
        (size, colours) = png_facts(data)
        assert size == (1280, 800), path
        assert colours > 50, f"{path}: a blank page ({colours} colours)"
        page.close()


def test_hostile_names_are_shown_as_typed_and_run_nothing(site: Any) -> None:
    page = page_at(site, "/")
    names = page.locator("a.name").all_inner_texts()
    assert SCRIPT_RUN in names
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.locator("main script, main img, main b").count() == 0
    page.close()
    page = page_at(site, f"/run?run={quote(SCRIPT_RUN)}")
    assert page.locator("h1 bdi").inner_text() == SCRIPT_RUN
    paths = page.locator("tr.checkpoint bdi.path").all_inner_texts()
    assert {p.rsplit("/", 1)[-1] for p in paths} == {visible(MARKUP_FILE), visible(CONTROL_FILE)}
    assert "\u202e" not in "".join(paths) and "\x1b" not in "".join(paths)
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.locator("main script, main img").count() == 0
    first = page.locator("tr.checkpoint a").first.inner_text()
    page.close()
    for path in (f"/checkpoint?id={first}", "/disk", f"/log?run={quote(SCRIPT_RUN)}"):
        page = page_at(site, path)
        assert page.evaluate("typeof window.__pwned") == "undefined", path
        assert page.locator("main img, main script").count() == 0, path
        if path == "/disk":  # the run's name, as typed, in the bytes-by-run table
            assert SCRIPT_RUN in page.locator("table.du").first.inner_text()
        page.close()


def test_a_non_loopback_address_needs_a_token(tmp_path: Path, site: Any) -> None:
    ws = Workspace(tmp_path)
    ws.config.write_text(ws.config.read_text() + "service:\n  web_listen: 0.0.0.0:0\n")
    refused = ws.run("serve", check=False)
    assert refused.returncode == 2
    assert "service.web_token_file" in refused.stderr and "loopback" in refused.stderr
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    ws.config.write_text(ws.config.read_text() + f"  web_token_file: {token_file}\n")
    ws.run("scan")
    said = tmp_path / "web.log"
    with open(said, "w") as log:
        web = subprocess.Popen(
            [sys.executable, "-m", "ckpt_daemon", "--config", str(ws.config), "web"],
            stderr=log,
        )
    try:
        deadline = time.monotonic() + 60
        while "ckpt web:" not in said.read_text() and time.monotonic() < deadline:
            assert web.poll() is None, said.read_text()
            time.sleep(0.1)
        line = said.read_text()
        assert "a token is required" in line, line  # said at start
        port = int(re.search(r"http://0\.0\.0\.0:(\d+)/", line)[1])
        url = f"http://127.0.0.1:{port}"
        assert get(url + "/api/runs")[0] == 401
        assert get(url + "/api/runs", Authorization="Bearer wrong")[0] == 401
        assert get(url + "/api/runs", Authorization=f"Bearer {TOKEN}")[0] == 200
        page = site["browser"].new_page()
        page.goto(url + "/")
        assert "token is required" in page.content()
        page.goto(url + f"/?token={TOKEN}")  # once: then a cookie carries it
        assert page.url == url + "/"
        assert page.locator("h1").inner_text() == "Runs"
        page.goto(url + "/disk")
        assert page.locator("h1").inner_text() == "Disk"
        page.close()
    finally:
        web.terminate()
        web.wait(timeout=30)
