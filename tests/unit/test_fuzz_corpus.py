"""The fuzzing harness's short run (issue 40 item 4): every reader of hostile bytes
(tests/support/fuzz_targets.py) on the committed corpus (tests/fuzz_corpus/: seeds written by
torch, DCP, safetensors, TensorBoard, Orbax and TensorFlow, and each finding of the long run,
bench/fuzz_readers.py) and on deterministic mutations of it, each input within its budget of
CPU time and memory for its size and answered with a reader's error or a result, never
another exception. CPU time, not wall time: the budget holds with the other core busy."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.support import fuzz_targets as ft

MUTATIONS = 60  # per seed: ~1,000 inputs in all


@pytest.mark.parametrize("target", sorted(ft.TARGETS))
def test_every_reader_keeps_its_budget_on_the_corpus_and_its_mutations(
    target: str, tmp_path: Path
) -> None:
    seeds = ft.seeds(target)
    assert seeds, f"tests/fuzz_corpus/{target}/ is empty"
    findings = []
    for name, seed in seeds.items():
        rng = random.Random(f"fuzz-{target}-{name}")  # the same inputs every run, a seed's own
        inputs = [seed]
        for _ in range(MUTATIONS):
            inputs.append(ft.mutate(inputs[rng.randrange(len(inputs))], rng))
        for number, data in enumerate(inputs):
            outcome = ft.run(target, data, tmp_path / "scratch")
            if outcome.finding:
                findings.append(f"{name} #{number} ({len(data)} bytes): {outcome.finding}")
        outcome = ft.run(target, seed, tmp_path / "scratch")
        assert outcome.finding is None, outcome
    assert findings == []


def test_the_budget_catches_a_reader_that_pays_before_it_bounds(tmp_path: Path) -> None:
    """The harness can fail: a safetensors header of 50,000 dims of 2**61-1 cost `math.prod`
    ~70 s before the bound; the regression input is in the corpus, and measured here."""
    data = (ft.CORPUS / "torch_file" / "regress-safetensors-dims").read_bytes()
    outcome = ft.run("torch_file", data, tmp_path / "scratch", measure_memory=False)
    assert outcome.finding is None and "dimensions" in outcome.answer, outcome
