"""A running service re-derives epochs and metrics when SIGHUP brings new naming settings,
without reading the checkpoint again (issue 10, item 5)."""

from __future__ import annotations

import json
import re
import shutil
import signal
from pathlib import Path

from tests.support.daemon import Daemon, service_workspace

ZIP_CKPT = "k3/run_zip/e01-vl1.683.keras"
NAME = "final-7-0.913.keras"  # one file: no series to learn from, no label, no Keras default


def _row(ws, path: Path) -> dict | None:
    return next((r for r in ws.json("list") if r["path"] == str(path)), None)


def test_sighup_with_a_new_template_rederives_the_run(tmp_path: Path, keras_checkpoints: Path):
    ws = service_workspace(tmp_path)
    no_templates = re.sub(r"    filename_template:(\n      - .*)+\n", "", ws.config.read_text())
    assert "filename_template" not in no_templates
    ws.config.write_text(no_templates)
    run = ws.root / "odd"
    run.mkdir()
    target = run / NAME
    shutil.copy2(keras_checkpoints / ZIP_CKPT, target)
    daemon = Daemon(ws)
    try:
        daemon.wait_for_log("event=ready", timeout=120)  # its catalog exists: reads never make one
        daemon.wait_until(lambda: _row(ws, target) is not None, 60, "the checkpoint indexed")
        before = _row(ws, target)
        assert before is not None
        assert (before["epoch"], before["metrics"]) == (None, {})
        indexed_at = before["indexed_at"]

        template = json.dumps("final-{epoch}-{val_accuracy:.3f}.keras")
        ws.config.write_text(
            no_templates.replace(
                f"  - path: {ws.root}\n",
                f"  - path: {ws.root}\n    filename_template: {template}\n",
            )
        )
        daemon.signal(signal.SIGHUP)
        daemon.wait_for_log("event=reloaded")

        def rederived() -> bool:
            row = _row(ws, target)
            return row is not None and row["epoch"] == 7

        daemon.wait_until(rederived, 60, "the run re-derived with the new template")
        after = _row(ws, target)
        assert after is not None
        assert after["metrics"] == {"val_accuracy": 0.913}
        assert after["indexed_at"] == indexed_at  # its bytes were not read again
        shown = ws.json("show", str(target))
        assert shown["epoch_source"] == "file name (final-{epoch}-{val_accuracy:.3f}.keras)"
        runs = {r["name"]: r for r in ws.json("runs")}
        assert runs["odd"]["naming"][0]["origin"] == "configured"
    finally:
        assert daemon.stop() == 0
