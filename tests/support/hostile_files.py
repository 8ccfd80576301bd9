"""Hostile files for a checkpoint root: plain functions that build each kind in a folder.

Shared by tests/e2e/test_trust_hostile.py and bench/hostile_corpus.py. Each builder takes the
run folder to build in (inside a root) and a folder outside every root (for link targets,
canaries) and returns the path the scan should report on. `KINDS` lists them with what a scan
must make of each: a catalog status, or "skipped", and a word its reason must contain.

"Reads outside the roots" are observed, not assumed: `OpenWatch` records every open of a file
in the outside folder (inotify IN_OPEN, which fires for root too), and outside link targets
are FIFOs where a blocking open would hang the reader.
"""

from __future__ import annotations

import json
import os
import threading
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from tests.support import hostile_torch as ht

WEIGHTS = "model.weights.h5"


@dataclass(frozen=True)
class Hostile:
    build: Callable[[Path, Path], Path]
    expect: str  # catalog status, or "skipped" (reported by the scan, not catalogued)
    reason: str  # a word the reason must contain (case-insensitive)
    slow: bool = False  # takes seconds to build: the bench builds it, the fast test does not


# ---- small valid files, to be damaged ----


def keras_weights(path: Path, **extra: object) -> Path:
    """A small valid Keras 3 `.weights.h5` (one Dense layer)."""
    with h5py.File(path, "w", libver="latest" if extra else None) as f:
        variables = f.create_group("layers/dense/vars")
        variables.create_dataset("0", data=np.ones((4, 2), "float32"))
        variables.create_dataset("1", data=np.zeros(2, "float32"))
        f.create_group("vars")
        for key, value in extra.items():
            f.attrs[key] = value  # type: ignore[assignment]
    return path


def _keras_archive(path: Path, weights: bytes, *, deflate: bool = False) -> Path:
    config = b'{"class_name": "Sequential", "config": {"name": "s", "layers": []}}'
    kind = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("metadata.json", b'{"keras_version": "3.10.0"}')
        z.writestr("config.json", config)
        z.writestr(WEIGHTS, weights, compress_type=kind)
    return path


def _zeros_member(z: zipfile.ZipFile, name: str, size: int) -> None:
    """`size` zero bytes, deflated as they are written (never held in memory)."""
    info = zipfile.ZipInfo(name)
    info.compress_type = zipfile.ZIP_DEFLATED
    block = bytes(1 << 20)
    with z.open(info, "w", force_zip64=True) as member:
        for _ in range(size >> 20):
            member.write(block)


# ---- the kinds ----


def empty(folder: Path, _outside: Path) -> Path:
    path = folder / "empty.h5"
    path.write_bytes(b"")
    return path


def random_bytes(folder: Path, _outside: Path) -> Path:
    path = folder / "random.keras"
    path.write_bytes(np.random.default_rng(7).bytes(100_000))
    return path


def truncated(folder: Path, _outside: Path) -> Path:
    path = keras_weights(folder / "truncated.weights.h5")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def huge_attribute(folder: Path, _outside: Path) -> Path:
    return keras_weights(folder / "huge_attr.weights.h5", big=np.zeros(20 << 20, "uint8"))


def many_attributes(folder: Path, _outside: Path) -> Path:
    path = folder / "many_attrs.weights.h5"
    with h5py.File(path, "w", libver="latest") as f:
        group = f.create_group("layers")
        for i in range(101_000):
            group.attrs[f"a{i}"] = i
    return path


def many_links(folder: Path, _outside: Path) -> Path:
    """210,000 hard links to one tiny dataset."""
    path = folder / "many_links.weights.h5"
    with h5py.File(path, "w", libver="latest") as f:
        group = f.create_group("layers")
        group.create_dataset("d", data=np.int8(0))
        for i in range(210_000):
            group.id.links.create_hard(b"l%d" % i, group.id, b"d")
    return path


def many_tiny_datasets(folder: Path, _outside: Path) -> Path:
    """20,000 real datasets: within the limits, it must be read, and quickly."""
    path = folder / "many_datasets.weights.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f.create_group("vars")
        for layer in range(200):
            variables = f.create_group(f"layers/dense_{layer}/vars")
            for i in range(100):
                variables.create_dataset(str(i), data=np.float32(i))
    return path


def deep_nesting(folder: Path, _outside: Path) -> Path:
    """20,000 nested groups (a 20 MB file): libhdf5 recursed into SIGSEGV on it."""
    path = folder / "deep.weights.h5"
    with h5py.File(path, "w") as f:
        group = f.create_group("layers")
        for _ in range(20_000):
            group = group.create_group("g")
    return path


def external_link_to_fifo(folder: Path, outside: Path) -> Path:
    fifo = outside / "link_target.fifo"
    if not fifo.exists():
        os.mkfifo(fifo)
    path = keras_weights(folder / "ext_link_fifo.weights.h5")
    with h5py.File(path, "a") as f:
        f["layers/dense/vars/2"] = h5py.ExternalLink(str(fifo), "/x")
        f["layers/linked"] = h5py.ExternalLink(str(fifo), "/")
    return path


def external_link_outside(folder: Path, outside: Path) -> Path:
    canary = keras_weights(outside / "canary_link.h5")
    path = keras_weights(folder / "ext_link.weights.h5")
    with h5py.File(path, "a") as f:
        f["layers/secret"] = h5py.ExternalLink(str(canary), "/layers/dense")
    return path


def external_storage(folder: Path, outside: Path) -> Path:
    canary = outside / "canary_raw.bin"
    canary.write_bytes(np.arange(8, dtype="float32").tobytes())
    fifo = outside / "raw_target.fifo"
    if not fifo.exists():
        os.mkfifo(fifo)
    path = keras_weights(folder / "ext_storage.weights.h5")
    with h5py.File(path, "a") as f:
        variables = f["layers/dense/vars"]
        variables.create_dataset("2", shape=(8,), dtype="float32", external=[(str(canary), 0, 32)])
        # `/optimizer/vars/0` is the iteration count, a scalar a reader reads: from a FIFO.
        opt = f.create_group("optimizer/vars")
        opt.create_dataset("0", shape=(), dtype="int64", external=[(str(fifo), 0, 8)])
    return path


def virtual_dataset(folder: Path, outside: Path) -> Path:
    source = keras_weights(outside / "canary_vds.h5")
    path = keras_weights(folder / "vds.weights.h5")
    layout = h5py.VirtualLayout(shape=(2,), dtype="float32")
    layout[:] = h5py.VirtualSource(str(source), "layers/dense/vars/1", shape=(2,))
    with h5py.File(path, "a") as f:
        f["layers/dense/vars"].create_virtual_dataset("2", layout, fillvalue=0)
        f.create_group("optimizer/vars").create_virtual_dataset("0", layout, fillvalue=0)
    return path


def zip_bomb_config(folder: Path, outside: Path) -> Path:
    """A `.keras` whose config.json is 1 GiB of zeros, deflated to ~1 MB."""
    path = folder / "bomb_config.keras"
    weights = keras_weights(outside / "bomb_weights.h5").read_bytes()
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("metadata.json", b"{}")
        _zeros_member(z, "config.json", 1 << 30)
        z.writestr(WEIGHTS, weights)
    return path


def zip_bomb_weights(folder: Path, _outside: Path) -> Path:
    """A `.keras` whose model.weights.h5 is deflated: 1 GiB of zeros in ~1 MB."""
    path = folder / "bomb_weights.keras"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("metadata.json", b"{}")
        z.writestr("config.json", b"{}")
        _zeros_member(z, WEIGHTS, 1 << 30)
    return path


def zip_many_members(folder: Path, _outside: Path) -> Path:
    path = folder / "many_members.keras"
    with zipfile.ZipFile(path, "w") as z:
        for i in range(100_000):
            z.writestr(f"m{i}", b"")
    return path


def zip_path_traversal(folder: Path, outside: Path) -> Path:
    weights = keras_weights(outside / "traversal_weights.h5").read_bytes()
    path = _keras_archive(folder / "traversal.keras", weights)
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("../../../../tmp/ckpt-escaped.txt", b"escaped")
        z.writestr("/etc/ckpt-escaped.txt", b"escaped")
    return path


def deflated_inner_weights(folder: Path, outside: Path) -> Path:
    """A `zip -9`'d `.keras`: legal, read from memory (bounded), never extracted to /tmp."""
    weights = keras_weights(outside / "deflated_weights.h5").read_bytes()
    return _keras_archive(folder / "deflated.keras", weights, deflate=True)


def fifo_named_h5(folder: Path, _outside: Path) -> Path:
    path = folder / "fifo.h5"
    os.mkfifo(path)
    return path


def symlink_loop(folder: Path, _outside: Path) -> Path:
    (folder / "loop_dir").symlink_to(".", target_is_directory=True)  # relative: still loops
    (folder / "loop_a.h5").symlink_to("loop_b.h5")  # when the folder is moved
    (folder / "loop_b.h5").symlink_to("loop_a.h5")
    return folder / "loop_a.h5"


def symlink_out(folder: Path, outside: Path) -> Path:
    target = keras_weights(outside / "canary_symlinked.h5")
    (folder / "escape.h5").symlink_to(target)
    return folder / "escape.h5"


def non_utf8_name(folder: Path, _outside: Path) -> Path:
    raw = os.fsencode(folder) + b"/caf\xe9.weights.h5"
    keras_weights(Path(os.fsdecode(raw)))
    return Path(os.fsdecode(raw))


def markup_name(folder: Path, _outside: Path) -> Path:
    """A path that reads `.../[red]x[/].weights.h5`: rich markup, if anything renders it raw."""
    (folder / "[red]x[").mkdir()
    return keras_weights(folder / "[red]x[" / "].weights.h5")


KINDS: dict[str, Hostile] = {
    "empty": Hostile(empty, "corrupt", "empty"),
    "random_bytes": Hostile(random_bytes, "corrupt", "neither"),
    "truncated": Hostile(truncated, "corrupt", "truncated"),
    "huge_attribute": Hostile(huge_attribute, "corrupt", "attribute"),
    "many_attributes": Hostile(many_attributes, "corrupt", "attributes", slow=True),
    "many_links": Hostile(many_links, "corrupt", "objects"),
    "many_tiny_datasets": Hostile(many_tiny_datasets, "ok", "", slow=True),
    "deep_nesting": Hostile(deep_nesting, "corrupt", "nested"),
    "external_link_to_fifo": Hostile(external_link_to_fifo, "ok", "outside"),
    "external_link_outside": Hostile(external_link_outside, "ok", "outside"),
    "external_storage": Hostile(external_storage, "ok", "outside"),
    "virtual_dataset": Hostile(virtual_dataset, "ok", "outside"),
    "zip_bomb_config": Hostile(zip_bomb_config, "corrupt", "config.json", slow=True),
    "zip_bomb_weights": Hostile(zip_bomb_weights, "corrupt", WEIGHTS, slow=True),
    "zip_many_members": Hostile(zip_many_members, "corrupt", "members", slow=True),
    "zip_path_traversal": Hostile(zip_path_traversal, "ok", ""),
    "deflated_inner_weights": Hostile(deflated_inner_weights, "ok", ""),
    "fifo_named_h5": Hostile(fifo_named_h5, "skipped", "FIFO"),
    "symlink_loop": Hostile(symlink_loop, "skipped", "symlink"),
    "symlink_out": Hostile(symlink_out, "skipped", "symlink"),
    "non_utf8_name": Hostile(non_utf8_name, "unreadable", "UTF-8"),
    "markup_name": Hostile(markup_name, "ok", ""),
    # torch-family files (hostile_torch.py): pickles are read by an unpickler that runs nothing
    "torch_reduce_to_system": Hostile(ht.reduce_to_system, "ok", ""),
    "torch_legacy_reduce_to_system": Hostile(ht.legacy_reduce_to_system, "ok", ""),
    "torch_one_call": Hostile(ht.one_call, "corrupt", "one call of posix.system"),
    "torch_legacy_one_call": Hostile(ht.legacy_one_call, "corrupt", "one call of posix.system"),
    "torch_plain_pickle": Hostile(ht.plain_pickle, "corrupt", "neither"),
    "torch_deep_pickle": Hostile(ht.deep_pickle, "corrupt", "nested"),
    "torch_shared_pickle": Hostile(ht.shared_pickle, "ok", ""),
    "torch_huge_memo_index": Hostile(ht.huge_memo_index, "corrupt", "memo"),
    "torch_many_memo_entries": Hostile(ht.many_memo_entries, "corrupt", "memo"),
    "torch_storage_bomb": Hostile(ht.storage_bomb, "corrupt", "compressed"),
    "torch_missing_storage": Hostile(ht.missing_storage, "corrupt", "missing"),
    "safetensors_huge_header": Hostile(ht.safetensors_huge_header, "corrupt", "claims"),
    "safetensors_truncated": Hostile(ht.safetensors_truncated, "corrupt", "truncated"),
}


def build_corpus(root: Path, outside: Path, *, slow: bool = True) -> dict[str, Path]:
    """Every kind in its own run folder under `root`: {kind: the path a scan reports on}."""
    built = {}
    for name, kind in KINDS.items():
        if kind.slow and not slow:
            continue
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        built[name] = kind.build(folder, outside)
    return built


class OpenWatch:
    """Every file opened in `folder` while it runs (inotify IN_OPEN; fires for root too)."""

    def __init__(self, folder: Path) -> None:
        from watchdog.events import FileOpenedEvent, FileSystemEventHandler
        from watchdog.observers.inotify import InotifyObserver

        self.opened: list[str] = []
        lock = threading.Lock()
        opened = self.opened

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event: object) -> None:
                if isinstance(event, FileOpenedEvent):
                    with lock:
                        opened.append(str(event.src_path))

        self._observer = InotifyObserver()
        self._observer.schedule(Handler(), str(folder), recursive=True)

    def __enter__(self) -> OpenWatch:
        self._observer.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._observer.stop()
        self._observer.join(timeout=10)


# ---- legacy Keras `.h5` files whose weights a `fill` builds (the rewrite paths' cases) ----


def keras_looking_h5(path: Path, fill: Callable[[h5py.Group], None]) -> Path:
    """A legacy Keras full-model .h5 as our readers accept it, `fill` building its weights."""
    config = {"class_name": "Sequential", "config": {"name": "s", "layers": []}}
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        f.attrs["model_config"] = json.dumps(config)
        f.attrs["keras_version"], f.attrs["backend"] = "2.15.0", "tensorflow"
        weights = f.create_group("model_weights")
        weights.attrs["layer_names"] = np.array([b"g"])
        layer = weights.create_group("g")
        layer.attrs["weight_names"] = np.array([], dtype="S1")
        fill(layer)
        f.create_group("optimizer_weights")["iteration:0"] = np.int64(3)
    return path


def deep_chain(layer: h5py.Group) -> None:
    """Groups nested 2000 deep: deeper than any reader or transform may recurse."""
    for _ in range(2000):
        layer = layer.create_group("g")
    layer["w"] = np.zeros(10, np.float32)
