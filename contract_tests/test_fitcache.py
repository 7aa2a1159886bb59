"""Models fitted once per node per code identity, however many processes ask (issue 37; contract §10: a loaded model equals the fitted one).

Ray tasks on one node, ``-n`` workers and later runs share transferability's reference models and a
defense's fitted models through ``mebench.support.fitcache``: one process fits a missing entry under the
entry's ``flock``, the others wait and load it. Here several spawned processes ask for the same
entry at once (each fit sleeps, so they overlap) and every fit appends one line to a counter file.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path
from typing import Optional

import pytest
import torch

from mebench.support import cachedir, fitcache
from mebench.probes.transferability import refcache
from mebench.defenses.misinformation import AdaptiveMisinformation
from mebench.testing import register_synthetic
from mebench.training.track_a import TrackATrainer
from mebench.run.plan import resolve, site

from test_adaptive_misinformation import _context, _victim
from test_transfer_fidelity import _data, _spec

PROCESSES = 4


def _count(counter: Path) -> None:
    with open(counter, "a") as f:  # O_APPEND: one whole line per fit, whatever the interleaving
        f.write(f"{os.getpid()}\n")
    time.sleep(0.3)  # long enough that the other processes ask while this one fits


def _digest(model: torch.nn.Module) -> str:
    return repr([(k, v.sum().item()) for k, v in sorted(model.state_dict().items())])


def _counting(counter: Path, set_attr=setattr) -> None:
    """Make every Track A training and every Adaptive Misinformation fit append a line to ``counter``."""
    real = TrackATrainer.train
    set_attr(TrackATrainer, "train", lambda self, *a, **k: _count(counter) or real(self, *a, **k))
    real_fit = AdaptiveMisinformation._fit.__func__
    set_attr(AdaptiveMisinformation, "_fit", classmethod(lambda cls, *a: _count(counter) or real_fit(cls, *a)))


def _child(target, barrier, result: Path, counter: Path, code_identity: Optional[str]) -> None:
    """A spawned process: a fresh interpreter, so it registers SYNTH and counts fits itself."""
    register_synthetic()
    _counting(counter)
    if code_identity is not None:
        refcache.identity.code_identity = lambda: code_identity
    target(barrier, result)


def _ask_together(target, out: Path, counter: Path, code_identity: Optional[str] = None) -> list[str]:
    """Run ``target(barrier, out/i)`` in PROCESSES processes at once; their results. The processes are
    spawned, not forked: a fork after CUDA or autograd threads exist is unsafe (issue 51)."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    procs = [ctx.Process(target=_child, args=(target, barrier, out / f"r{i}", counter, code_identity))
             for i in range(PROCESSES)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * PROCESSES
    return [(out / f"r{i}").read_text() for i in range(PROCESSES)]


@pytest.fixture
def counter(monkeypatch, tmp_path) -> Path:
    monkeypatch.setenv(cachedir.ENV, str(tmp_path / "cache"))
    path = tmp_path / "fits"
    path.touch()
    _counting(path, monkeypatch.setattr)
    return path


def _reference(barrier, result: Path) -> None:
    torch.set_num_threads(1)
    x, y = _data()
    barrier.wait()
    result.write_text(_digest(refcache.load_or_train(_spec(), "cpu", x, y)))


def test_concurrent_tasks_train_a_reference_once_per_code_identity(counter, tmp_path):
    # contract §10: one training per node per code identity; the others load the same weights
    first = _ask_together(_reference, tmp_path, counter)
    assert len(counter.read_text().splitlines()) == 1
    assert len(set(first)) == 1
    again = _ask_together(_reference, tmp_path, counter)  # a later run on the node: all hits
    assert len(counter.read_text().splitlines()) == 1 and again == first
    _ask_together(_reference, tmp_path, counter, code_identity="0.0+src.changed")
    assert len(counter.read_text().splitlines()) == 2  # a code change: exactly one more


def _misinformation(barrier, result: Path) -> None:
    torch.set_num_threads(1)
    ctx = _context(_victim())
    barrier.wait()
    model = fitcache.fit_defense(AdaptiveMisinformation, AdaptiveMisinformation.Params(epochs=0.1), ctx,
                                 {"dataset": "SYNTH", "victim": "tiny"})
    record = {k: v for k, v in model.outlier_record.items() if k != "fit_seconds"}
    result.write_text(_digest(model) + repr(sorted(record.items())) + str(model.training))


def test_concurrent_tasks_fit_a_defense_once_and_keep_its_record(counter, tmp_path):
    results = _ask_together(_misinformation, tmp_path, counter)
    assert len(counter.read_text().splitlines()) == 1
    assert len(set(results)) == 1 and "synthetic_blobs" in results[0] and results[0].endswith("False")


def test_a_corrupt_or_partial_defense_entry_is_fitted_again(counter, tmp_path):
    ctx, params = _context(_victim()), AdaptiveMisinformation.Params(epochs=0.1, tau=0.5)
    ident = {"dataset": "SYNTH", "victim": "tiny"}
    first = fitcache.fit_defense(AdaptiveMisinformation, params, ctx, ident)
    key = fitcache.defense_key(AdaptiveMisinformation, params, ctx, ident)
    path = cachedir.entry_path(fitcache.DEFENSE_KIND, key, ".pt")
    assert path.is_file() and path.with_name(path.name + ".lock").is_file()
    path.write_bytes(b"not a torch file")
    ctx2 = _context(_victim())  # another process's victim object: no in-process reuse
    second = fitcache.fit_defense(AdaptiveMisinformation, params, ctx2, ident)
    assert len(counter.read_text().splitlines()) == 2 and _digest(second) == _digest(first)
    torch.save({"weights": second.state_dict()}, path)  # readable, but without the outlier record
    fitcache.fit_defense(AdaptiveMisinformation, params, _context(_victim()), ident)
    assert len(counter.read_text().splitlines()) == 3


def test_a_defense_without_fit_key_is_not_cached(tmp_path, monkeypatch):
    from mebench.defenses.mad import Mad as MAD

    monkeypatch.setenv(cachedir.ENV, str(tmp_path / "cache"))
    assert MAD.fit_key(MAD.Params()) is None
    fitcache.fit_defense(MAD, MAD.Params(), _context(_victim()), {})
    assert not (tmp_path / "cache").exists()


def test_a_second_process_meets_the_same_fitted_defense_without_fitting(make_cfg, counter):
    # what a Ray task on the node sees: a fresh Prepared (another process) loads the fit from the disk
    from mebench.run import engine

    cfg = make_cfg(defense={"name": "adaptive_misinformation", "params": {"tau": 0.8, "epochs": 0.5}},
                   cache={"enabled": False})
    x = torch.rand(16, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    answers = [engine.make_oracle(resolve(cfg, 0), engine.prepare(resolve(cfg), site(cfg))).answers.probs(x) for _ in range(2)]
    assert len(counter.read_text().splitlines()) == 1
    assert torch.equal(answers[0], answers[1])
