"""Training logs as Keras writes them, for the metrics parsers and the metrics join."""

from __future__ import annotations

import csv
import io


def keras_csv(rows: list[dict[str, object]], sep: str = ",") -> str:
    """What Keras's CSVLogger writes: DictWriter, excel dialect, header epoch + sorted keys."""
    keys = sorted({k for r in rows for k in r if k != "epoch"})

    class Dialect(csv.excel):
        delimiter = sep

    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=["epoch", *keys], dialect=Dialect)
    writer.writeheader()
    for row in rows:
        writer.writerow({"epoch": row["epoch"], **{k: row.get(k, "NA") for k in keys}})
    return out.getvalue()
