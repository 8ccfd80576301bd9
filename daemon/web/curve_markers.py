"""The run page's curve markers as SVG: one element per checkpoint, thousands in a long run, so
written here in one pass rather than by the template, whose lookups and filters per field cost
more than the rest of the page (10,000-checkpoint catalog: 19 of 27 ms of the run page's HTML).

Escaped as the template escapes: every text (a mark's name, the marks, the value's text)
goes through `markupsafe.escape`; the numbers are the geometry's floats and the catalog's ints.
The shapes are those of `templates/run.html`'s legend (`core.history.GLYPHS`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from markupsafe import Markup, escape

from ..core.svg_curve import Curve, Marker
from ..core.text import metric_text


def markers_svg(chart: Curve, marks: Mapping[int, Mapping[str, Any]]) -> Markup:
    """`<g class="marker">` per marker: data-id, data-mark (its shape), data-marks (all of its
    marks: `web.pages`' per checkpoint id, the view's own `demoted` and `remote` included),
    data-epoch, a ring per view mark, the shape, and a title naming all (the value's text as
    the template's `metric` filter writes it: a marker's value is always finite)."""
    out: list[str] = []
    for m in chart.markers:
        found = marks.get(m.id)
        every = list(found["marks"]) if found is not None else [m.mark]
        x, y, mark = m.x, m.y, escape(m.mark)
        out.append(
            f'  <g class="marker mark-{mark}" data-id="{int(m.id)}" data-mark="{mark}"'
            f' data-marks="{escape(" ".join(every))}" data-epoch="{int(m.epoch)}">\n'
        )
        if "demoted" in every:
            out.append(
                f'    <rect class="ring demoted" x="{x - 8}" y="{y - 8}" width="16" height="16"/>\n'
            )
        if "remote" in every:
            out.append(f'    <circle class="ring remote" cx="{x}" cy="{y}" r="9"/>\n')
        out.append(f"    {_shape(m)}\n")
        title = f"#{int(m.id)} epoch {int(m.epoch)}: {metric_text(m.value)} ({', '.join(every)})"
        out.append(f"    <title>{escape(title)}</title>\n  </g>\n")
    return Markup("".join(out))


def _shape(m: Marker) -> str:
    x, y = m.x, m.y
    if m.mark == "best":
        return f'<path d="M{x},{y - 7} l7,7 l-7,7 l-7,-7 z"/>'
    if m.mark == "pinned":
        return f'<path d="M{x},{y - 7} l7,12 l-14,0 z"/>'
    if m.mark == "trashed":
        return f'<circle cx="{x}" cy="{y}" r="5" class="hollow"/>'
    if m.mark == "missing":
        return f'<path class="cross" d="M{x - 5},{y - 5} l10,10 m0,-10 l-10,10"/>'
    if m.mark == "version":
        return f'<path class="hollow" d="M{x},{y - 6} l6,6 l-6,6 l-6,-6 z"/>'
    return f'<circle cx="{x}" cy="{y}" r="5"/>'
