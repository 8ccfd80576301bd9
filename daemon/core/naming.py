"""A run's checkpoint naming scheme, learned from its file names (and its logged metrics).

Names are split into literal and numeric parts (`core.name_parts`); names with the same literals
form a series. In a series of 3 or more, a varying integer part is the epoch (or step/batch, by
label or spacing; `core.name_roles`) or a session part (a run, fold or seed counter: one template
per value), a decimal part a metric, named by its label or by agreeing with the logs at the
printed precision. A configured template wins, then Keras's documented examples, then inference; a
name no scheme reads is parsed by its labels alone (`e03`, `step-500`, `val_loss=0.2`).
Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from .name_parts import (
    FIXED,
    NO_LOGS,
    SCI,
    Logged,
    NameFields,
    Split,
    agreement,
    base_name,
    by_labels,
    fits,
    is_decimal,
    label_before,
    match_logs,
    metric_label,
    resolve_label,
    split_name,
)
from .name_roles import Slot, assign_int_roles
from .training_metrics import INT_FIELDS, FilenameTemplate, compile_template

__all__ = [
    "KERAS_DEFAULTS",
    "NameFields",
    "RunNaming",
    "Scheme",
    "base_name",
    "infer_naming",
    "is_unnamed",
]
# A decimal the names print but neither a label nor the logs name is still read (its text is
# kept) under `unnamed1`, `unnamed2`, ... in the order of the name; never a guessed metric name.
UNNAMED = "unnamed"


def is_unnamed(metric: str) -> bool:
    """Whether a metric name from `NameFields.metrics` is a placeholder (`unnamed1`)."""
    return metric.startswith(UNNAMED) and metric[len(UNNAMED) :].isdigit()


# Keras's own documented filepath examples (and the tutorials everyone copies), read without
# inference. Where each comes from:
KERAS_DEFAULTS: tuple[tuple[str, str], ...] = (
    ("weights.{epoch:02d}-{val_loss:.2f}.hdf5", "tf-keras / Keras 2 ModelCheckpoint docstring"),
    ("weights.{epoch:02d}-{val_loss:.2f}.h5", "the same example with Keras 3's .h5"),
    ("{epoch:02d}-{val_loss:.2f}.keras", "Keras 3 ModelCheckpoint docstring"),
    ("{epoch:02d}-{val_loss:.2f}.weights.h5", "Keras 3 ModelCheckpoint docstring"),
    ("model.{epoch:02d}-{val_loss:.2f}.keras", "Keras 3 migration of the docstring example"),
    ("model.{epoch:02d}-{val_loss:.2f}.h5", "Keras 2 guides"),
    ("saved-model-{epoch:02d}-{val_accuracy:.2f}.hdf5", "widely copied tutorial"),
    ("weights-improvement-{epoch:02d}-{val_accuracy:.2f}.hdf5", "widely copied tutorial"),
    ("weights-improvement-{epoch:02d}-{loss:.4f}.hdf5", "widely copied tutorial (text RNN)"),
    ("cp-{epoch:04d}.weights.h5", "TensorFlow 'Save and load models' tutorial"),
    ("cp-{epoch:04d}.ckpt", "TensorFlow 'Save and load models' tutorial (TF 2.x)"),
    ("mymodel_{epoch}.keras", "keras.io guide 'Training & evaluation with built-in methods'"),
    ("batch{batch:02d}epoch{epoch:02d}.keras", "Keras 3 ModelCheckpoint source example"),
    ("f.batch{batch:02d}epoch{epoch:02d}.h5", "tf-keras ModelCheckpoint source example"),
    ("best-model-{epoch:04d}", "tf-keras SidecarEvaluator docstring"),
    ("ckpt-{step}", "tf.train.CheckpointManager (checkpoint_name='ckpt', numbered by saves)"),
)


@dataclass(frozen=True)
class Scheme:
    template: str  # ModelCheckpoint-style basename template
    origin: str  # "configured" | "keras-default" | "inferred"
    members: int  # how many of the run's names it reads
    evidence: tuple[str, ...]  # one human sentence each


@dataclass(frozen=True)
class RunNaming:
    schemes: tuple[Scheme, ...] = ()
    _readers: tuple[FilenameTemplate, ...] = field(default=(), repr=False, compare=False)
    _known: Mapping[str, NameFields] = field(default_factory=dict, repr=False, compare=False)
    _logged: Logged = field(default_factory=dict, repr=False, compare=False)

    def fields(self, name: str) -> NameFields:
        """Epoch/step/batch and metric texts of any name (also one the run did not have)."""
        known = self._known.get(name) or self._known.get(base_name(name))
        if known is not None:
            return known
        for template in self._readers:
            got = _read(template, name)
            if got is not None:
                return got
        return by_labels(name, self._logged)

    def as_json(self) -> list[dict[str, object]]:
        """[{template, origin, members, evidence}] for `ckpt runs --json`."""
        return [
            {
                "template": s.template,
                "origin": s.origin,
                "members": s.members,
                "evidence": [*s.evidence],
            }
            for s in self.schemes
        ]


def _read(template: FilenameTemplate, name: str) -> NameFields | None:
    for candidate in dict.fromkeys((name, base_name(name))):
        texts = template._texts(candidate)
        if texts is not None:
            return _fields_of(template, texts)
    return None


def _fields_of(template: FilenameTemplate, texts: dict[str, str]) -> NameFields | None:
    try:
        ints = {k: int(v) for k, v in texts.items() if k in INT_FIELDS}
    except ValueError:  # more digits than Python converts
        return None
    metrics = {k: v for k, v in texts.items() if k not in INT_FIELDS}
    return NameFields(ints, metrics, template.text)


# --- series inference -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Inferred:
    templates: dict[tuple[str, ...], str]  # the session parts' texts -> the template
    evidence: list[str]
    values: list[bool]  # which numbers of a name are read as values
    parts: list[int]  # which numbers are session parts (literal within each sub-series)


def _infer_series(splits: list[Split], logged: Logged) -> _Inferred | None:
    """The template(s) of names sharing one skeleton (one per session part value), or None
    when they do not show one."""
    n = len(splits)
    if n < 3:
        return None  # one or two names cannot show growth
    literals = splits[0].literals
    slots = [
        Slot([s.texts[i] for s in splits], label_before(literals[i]))
        for i in range(len(literals) - 1)
    ]
    for slot in slots:
        text, count = Counter(slot.texts).most_common(1)[0]
        decimal = any(map(is_decimal, slot.texts))
        # An integer the same in all names but one (`resnet50` and one `resnet18`) is a literal
        # and the stray falls out; a decimal only when it never changes (a plateau is a value).
        if not (decimal and metric_label(slot.label)) and count >= n - (n >= 4 and not decimal):
            slot.literal, slot.why = text, f"{text!r} is the same in every name: part of the name"
    if not assign_int_roles([s for s in slots if s.literal is None and not _decimal(s)], logged):
        return None
    epoch_slot = next((s for s in slots if s.role == "epoch"), None)
    epochs = [int(t) for t in epoch_slot.texts] if epoch_slot else [None] * n
    taken: set[str] = set()
    unnamed = 0
    floats = [s for s in slots if s.literal is None and _decimal(s)]
    for slot in sorted(floats, key=lambda s: metric_label(s.label) is None):  # labelled first
        word = metric_label(slot.label)
        name, slot.why = (
            resolve_label(word, slot.texts, epochs, logged, True)
            if word
            else match_logs(slot.texts, epochs, logged, taken)
        )
        if name is None or name in taken or name in INT_FIELDS or not name.isidentifier():
            unnamed += 1
            name = f"{UNNAMED}{unnamed}"
        if word or is_unnamed(name):
            slot.why = f"{name}: {slot.why}"
        taken.add(name)
        slot.role, slot.spec = name, _float_spec(slot.texts)
    parts = [i for i, s in enumerate(slots) if s.part]
    templates = {}
    for split in splits:
        key = tuple(split.texts[i] for i in parts)
        if key not in templates:
            templates[key] = _template(
                literals, slots, splits[0].ext, dict(zip(parts, key, strict=True))
            )
    values = [s.literal is None and not s.part for s in slots]
    return _Inferred(templates, [s.why for s in slots if s.why], values, parts)


def _decimal(slot: Slot) -> bool:
    return any(map(is_decimal, slot.texts))


def _float_spec(texts: list[str]) -> str:
    """The narrowest format that reads every text back: `.3f`, `.2e`, else general."""
    shown = [t for t in texts if not t.isalpha()]  # nan / inf fit any spec
    for pattern, spec in ((FIXED, "f"), (SCI, "e")):
        found = [pattern.fullmatch(t) for t in shown]
        if shown and all(found):
            places = {len(m[1] or "") for m in found if m}
            kinds = {m.lastindex == 2 and m[2] for m in found if m}
            if len(places) == 1 and len(kinds) == 1:
                upper = spec == "e" and kinds == {"E"}
                return f".{places.pop()}{spec.upper() if upper else spec}"
    return ""


def _template(
    literals: tuple[str, ...], slots: list[Slot], ext: str, parts: Mapping[int, str]
) -> str:
    def lit(text: str) -> str:
        return text.replace("{", "{{").replace("}", "}}")

    out = [lit(literals[0])]
    for i, (slot, after) in enumerate(zip(slots, literals[1:], strict=True)):
        if slot.literal is not None or i in parts:
            out.append(lit(parts.get(i) or slot.literal or ""))
        else:
            out.append(f"{{{slot.role}:{slot.spec}}}" if slot.spec else f"{{{slot.role}}}")
        out.append(lit(after))
    return "".join(out) + lit(ext)


# --- the run ----------------------------------------------------------------------------------

_POINT = re.compile(r"\d+\.\d+")
_DEFAULTS = tuple((compile_template(text), source) for text, source in KERAS_DEFAULTS)


def infer_naming(
    names: Sequence[str],
    logged: Logged = NO_LOGS,
    configured: Sequence[FilenameTemplate] = (),
) -> RunNaming:
    """The naming schemes of one run's checkpoints (basenames; TF `ckpt-3.index` or `ckpt-3`)."""
    bases = list(dict.fromkeys(base_name(n) for n in names))
    known: dict[str, NameFields] = {}
    schemes: list[Scheme] = []
    readers = list(configured)
    for template in configured:
        read = _read_all(template, bases, known)
        if read:
            known.update(read)
            said = f"configured filename_template; reads {len(read)} of {len(bases)} names"
            schemes.append(Scheme(template.text, "configured", len(read), (said,)))
    for template, source in _DEFAULTS:
        read = _read_all(template, bases, known)
        checks = _default_checks(template, read, logged)
        if checks is None:
            continue  # the logs contradict the example's metric: let inference name it
        readers.append(template)
        if read:
            known.update(read)
            why = (f"Keras's documented example ({source})", *checks)
            schemes.append(Scheme(template.text, "keras-default", len(read), why))
    series: dict[tuple[tuple[str, ...], str], list[tuple[str, Split]]] = {}
    for base in bases:
        split = split_name(base)
        if base not in known and split.texts:
            series.setdefault(split.key, []).append((base, split))
    for members in sorted(series.values(), key=len, reverse=True):
        found = _series_scheme(members, logged)
        if found is None or not set(found[0][1].fields) & INT_FIELDS:
            points = _split_points(members)  # `v2.001`: a version and an epoch, not a decimal
            found = (points and _series_scheme(points, logged)) or found
        for scheme, template, read in found or ():
            schemes.append(scheme)
            readers.append(template)
            known.update(read)
    for base in bases:
        if base not in known:
            known[base] = by_labels(base, logged)
    return RunNaming(tuple(schemes), tuple(readers), known, logged)


def _read_all(
    template: FilenameTemplate, bases: Sequence[str], known: Mapping[str, NameFields]
) -> dict[str, NameFields]:
    head, tail = _ends(template.text)
    read = {}
    for base in bases:
        if base.endswith(tail) and base.startswith(head) and base not in known:
            texts = template._texts(base)  # bases are TF prefixes already
            got = None if texts is None else _fields_of(template, texts)
            if got is not None:
                read[base] = got
    return read


@lru_cache(maxsize=256)
def _ends(text: str) -> tuple[str, str]:
    """The literal text a template's names start and end with (a cheap filter before its regex)."""
    parts = list(string.Formatter().parse(text))
    if len(parts) == 1 and parts[0][1] is None:
        return parts[0][0], ""  # a fixed name: no fields
    tail = parts[-1][0] if parts[-1][1] is None else ""
    return parts[0][0], tail  # Formatter.parse has already turned `{{` into `{`


def _default_checks(
    template: FilenameTemplate, read: Mapping[str, NameFields], logged: Logged
) -> tuple[str, ...] | None:
    """What the logs say of a Keras example's metric in these names; None: they contradict it."""
    out = []
    for metric in (f for f in template.fields if f not in INT_FIELDS):
        texts = [f.metrics[metric] for f in read.values()]
        epochs = [f.ints.get("epoch") for f in read.values()]
        agree, checked = agreement(texts, epochs, logged, metric)
        if checked and not fits(agree, checked, checked > 2):
            return None
        if checked:
            out.append(f"{metric} agrees with the logs in {agree} of {checked} names")
    return tuple(out)


def _split_points(members: list[tuple[str, Split]]) -> list[tuple[str, Split]] | None:
    """The series again with each `A.B` whose A is the same in every name read as two integers
    (None when there is none): the greedy split takes `v2.001` for one decimal."""
    first = members[0][1]
    cut = [
        i
        for i in range(len(first.texts))
        if all(_POINT.fullmatch(s.texts[i]) for _, s in members)
        and len({s.texts[i].split(".")[0] for _, s in members}) == 1
    ]
    if not cut:
        return None
    out = []
    for base, split in members:
        literals, texts = [split.literals[0]], []
        for i, text in enumerate(split.texts):
            pieces = text.split(".") if i in cut else [text]
            texts += pieces
            literals += ["."] * (len(pieces) - 1) + [split.literals[i + 1]]
        out.append((base, Split(tuple(literals), tuple(texts), split.ext)))
    return out


_Found = list[tuple[Scheme, FilenameTemplate, dict[str, NameFields]]]


def _series_scheme(members: list[tuple[str, Split]], logged: Logged) -> _Found | None:
    """The inferred scheme of one series (one per session part value), if it reads its names
    back (all but one stray)."""
    inferred = _infer_series([split for _, split in members], logged)
    if inferred is None:
        return None
    groups: list[tuple[FilenameTemplate, dict[str, NameFields]]] = []
    for key, text in inferred.templates.items():
        try:
            template = compile_template(text)
        except ValueError:
            return None
        read = {}
        for base, split in members:
            if tuple(split.texts[i] for i in inferred.parts) != key:
                continue
            got = template._texts(base)
            values = zip(split.texts, inferred.values, strict=True)
            if got is not None and list(got.values()) == [t for t, value in values if value]:
                fields = _fields_of(template, got)
                if fields is not None:
                    read[base] = fields
        if read:
            groups.append((template, read))
    total = sum(len(read) for _, read in groups)
    if total < max(3, len(members) - 1):
        return None  # the templates do not read their own names back: no scheme
    said = f"reads {total} of {len(members)} names of this skeleton"
    return [
        (Scheme(t.text, "inferred", len(read), (*inferred.evidence, said)), t, read)
        for t, read in groups
    ]
