"""Every `--json` document the `ckpt` command builds, one function per command, built here only.

Checkpoint and run rows come from `core.views` (the Python API's values as JSON); reports that
the use cases and the catalog already give as JSON (`as_dict`, the status, trash and audit
records) are emitted as they are, by the command. The "JSON documents"
paragraph of docs/cli-contract.md is the contract: tests/e2e/test_cli_contract.py checks every
command's real output against it. Fields may be added, never renamed or removed."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ..core.views import checkpoint_json, run_json

if TYPE_CHECKING:
    from ..core.model import Checkpoint, Run
    from ..usecases.verifier import Verdict

Doc = dict[str, Any]


def list_rows(
    found: Iterable[Checkpoint], places: dict[int, tuple[str, str | None]] | None = None
) -> Iterator[Doc]:
    """`ckpt list --json`: one row per checkpoint (a generator: 100k rows are streamed), with
    `versions_kept`: the versions of the file folded under it (see `ckpt list --versions`),
    and `location`/`remote_url` (where its bytes are: `places`, from `Catalog.locations`)."""
    places = places or {}
    for c in found:
        doc = checkpoint_json(c)
        doc["versions_kept"] = c.versions_kept
        doc["location"], doc["remote_url"] = places.get(c.id, ("local", None))
        yield doc


ARTIFACT_FIELDS = ("kind", "path", "bytes", "codec", "hash")


def answer(found: Checkpoint) -> Doc:
    """`ckpt wait --json`, and `best --json`'s row: the row + `preferred_over` and
    `passed_over`."""
    doc = checkpoint_json(found)
    # A file its trainer rewrites (last.ckpt, best.pt) passed over for the stable file of the
    # same moment: {path, why}; None when the answer is the winner itself.
    doc["preferred_over"] = found.details.get("preferred_over")
    # Better candidates passed over because the integrity stage found non-finite weights.
    doc["passed_over"] = [dict(p) for p in found.details.get("passed_over") or []]
    return doc


def best(found: Checkpoint, artifact: dict[str, Any] | None) -> Doc:
    """`ckpt best --json`, with or without `--artifact`: one shape, a row + `artifact`. With an
    artifact, `path` is the artifact's (what the text output prints: what a script loads) and
    `artifact.checkpoint` the checkpoint's; the row's other fields are the checkpoint's."""
    doc = answer(found)
    if artifact is None:
        doc["artifact"] = None
        return doc
    doc["artifact"] = {
        **{name: artifact.get(name) for name in ARTIFACT_FIELDS},
        "checkpoint": found.path,
    }
    doc["path"] = artifact["path"]
    return doc


def latest(found: Checkpoint) -> Doc:
    """`ckpt latest --json`: the row + whether training can resume from it, and why."""
    doc = checkpoint_json(found)
    doc["resumable"] = bool(found.details.get("resumable"))
    doc["resume_reason"] = str(found.details.get("resume_reason") or "")
    # With --resumable: the newer candidates that cannot resume, and why (empty: none).
    doc["passed_over"] = [dict(p) for p in found.details.get("passed_over") or []]
    doc["preferred_over"] = found.details.get("preferred_over")  # as `best --json`'s
    return doc


def runs(found: Iterable[Run]) -> list[Doc]:
    return [run_json(r) for r in found]


def verify(verdicts: Iterable[Verdict]) -> list[Doc]:
    return [dict(v.as_dict()) for v in verdicts]


def split(found: Checkpoint, result: Any) -> Doc:
    """`result`: the `transforms.split.SplitResult` of the artifact written."""
    return {
        "checkpoint": found.path,
        "id": found.id,
        "artifact": str(result.path),
        "kind": "inference",
        "bytes": result.bytes,
        "source_bytes": result.source_bytes,
        "hash": result.hash,
        "datasets": result.datasets,
    }


def compress(found: Checkpoint, result: Any) -> Doc:
    """`result`: the `transforms.compress.CompressResult` of the rewrite (or of the skip)."""
    return {
        "path": str(result.path),
        "id": found.id,
        "codec": result.codec,
        "bytes_before": result.bytes_before,
        "bytes_after": result.bytes_after,
        "hash": result.hash,
        "needs": result.needs,
        "skipped": result.skipped,
    }


def purge(dry_run: bool, purged: list[Doc], failures: list[Doc]) -> Doc:
    return {"dry_run": dry_run, "purged": purged, "failures": failures}
