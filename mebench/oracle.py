"""The only door to the victim (contract §1, §4.1, §14.1).

An answer goes victim -> answer transforms -> output mode: the frozen victim's logits, an
:class:`AnswerPipeline` of transforms (temperature, then the run's defense), then :class:`Oracle`'s
probabilities (``soft_prob``) or top-1 label (``hard_top1``); detectors see every answered batch and
change nothing. ``Oracle.query(x)`` charges one query per image, whatever the transforms do; a batch
that would overdraw the budget (``BudgetExhausted``) or is malformed (``OracleInputError``) is
neither answered nor counted. See docs/contract.md (§1, §4.1).
"""
# An answer goes victim -> answer transforms -> output mode:
#
# 1. the frozen victim (``FrozenVictim``: eval + no_grad) gives logits;
# 2. an :class:`AnswerPipeline` applies its transforms, first those on logits,
#    then a softmax, then those on probabilities. Temperature (the ``tempered``
#    oracle profile) is the first such transform; the run's defense
#    (``mebench.defenses``) follows it;
# 3. :class:`Oracle` returns the probabilities (``soft_prob``) or their top-1
#    label (``hard_top1``).
#
# Detectors (``mebench.defenses.detection``) see every answered batch through
# ``AnswerPipeline.observe`` and change nothing.
#
# ``Oracle.query(x)`` checks the batch and charges the budget one query per
# image, whatever the transforms do. A batch that would overdraw the budget
# raises ``BudgetExhausted`` and nothing is answered or counted; a malformed
# batch (wrong shape or dtype, values outside [0, 1], NaN or inf) raises
# ``OracleInputError`` and is not counted either.

from __future__ import annotations

from typing import Literal, Sequence, Union

import torch

from mebench.errors import BudgetExhausted, OracleInputError
from mebench.types import OUTPUT_MODES, OracleOutput
from mebench.support.inference import chunked
from mebench.victims.wrapper import FrozenVictim


class AnswerTransform:
    """One step between the victim and the answer.

    ``space`` says what ``apply`` receives and returns: ``"logits"`` (before
    the softmax) or ``"probs"`` (after it; rows must stay probability vectors).
    ``reference`` says whether the benchmark's metrics compare substitutes
    with the answers *after* this step: true for an oracle profile such as
    temperature (the tempered victim is the victim), false for a defense,
    whose perturbations the metrics look past.
    """

    name: str = "transform"
    space: Literal["logits", "probs"] = "probs"
    reference: bool = False

    def apply(self, scores: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Transform one batch of scores; ``x`` is the queried batch (pixels in [0, 1])."""
        raise NotImplementedError

    def observe(self, x: torch.Tensor, probs: torch.Tensor) -> None:
        """See one answered batch of the oracle's stream (``x`` and the answers returned); a no-op
        except for detectors (``mebench.defenses.detection``), which score the stream."""

    def describe(self) -> dict:
        """What the run's summary records about this step."""
        return {"name": self.name, "space": self.space}


class AnswerPipeline:
    """A frozen victim followed by answer transforms; ``probs(x)`` is what the oracle answers."""

    def __init__(self, victim: FrozenVictim, transforms: Sequence[AnswerTransform] = ()) -> None:
        spaces = [t.space for t in transforms]
        if spaces != sorted(spaces, key=("logits", "probs").index):
            raise ValueError(f"transforms on logits come before those on probabilities, got {spaces}")
        self.victim = victim
        self.transforms = tuple(transforms)

    def probs(self, x: torch.Tensor, reference_only: bool = False) -> torch.Tensor:
        """Answers to one batch; ``reference_only`` applies only the transforms the metrics include."""
        steps = [t for t in self.transforms if t.reference or not reference_only]
        z = self.victim.logits(x)
        for t in steps:
            if t.space == "logits":
                z = t.apply(z, x)
        p = torch.softmax(z, dim=1)
        for t in steps:
            if t.space == "probs":
                p = t.apply(p, x)
        return p

    def reference_probs(self, x: torch.Tensor, batch_size: int = 2048) -> torch.Tensor:
        """The victim's answers the metrics compare with (test split; not charged to any budget)."""
        return chunked(lambda xb: self.probs(xb, reference_only=True), x, self.victim.device, batch_size)

    def observe(self, x: torch.Tensor, probs: torch.Tensor) -> None:
        """Show every transform one answered batch of the oracle's stream, in order."""
        for t in self.transforms:
            t.observe(x, probs)

    def describe(self) -> list[dict]:
        return [t.describe() for t in self.transforms]


_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


class Oracle:
    """Budgeted black-box access to a victim."""

    def __init__(self, victim: Union[AnswerPipeline, FrozenVictim], output_mode: str, budget: int,
                 input_shape: tuple[int, int, int]) -> None:
        if output_mode not in OUTPUT_MODES:
            raise ValueError(f"output_mode must be one of {OUTPUT_MODES}, got {output_mode!r}")
        if budget < 0:
            raise ValueError("budget must be >= 0")
        self.answers = victim if isinstance(victim, AnswerPipeline) else AnswerPipeline(victim)
        self.output_mode = output_mode
        self.budget = int(budget)
        self.input_shape = tuple(input_shape)
        self.queries_used = 0

    @property
    def victim(self) -> FrozenVictim:
        """The frozen victim at the start of the answer pipeline."""
        return self.answers.victim

    @property
    def budget_left(self) -> int:
        return self.budget - self.queries_used

    def _check(self, x: torch.Tensor) -> int:
        if not isinstance(x, torch.Tensor):
            raise OracleInputError(f"query must be a torch.Tensor, got {type(x).__name__}")
        if x.dtype not in _FLOAT_DTYPES:
            raise OracleInputError(f"query dtype must be floating point in [0, 1], got {x.dtype}")
        if x.dim() != 4 or tuple(x.shape[1:]) != self.input_shape:
            raise OracleInputError(
                f"query shape must be [N, {', '.join(map(str, self.input_shape))}], got {list(x.shape)}")
        n = int(x.shape[0])
        if n == 0:
            raise OracleInputError("query batch is empty")
        lo, hi = torch.stack(torch.aminmax(x)).tolist()  # one device-to-host read (a GPU syncs once)
        if not (lo >= 0 and hi <= 1):  # NaN fails both comparisons
            if not bool(torch.isfinite(x).all()):
                raise OracleInputError("query contains NaN or infinite values")
            raise OracleInputError(f"query pixels must lie in the range [0, 1], got min {lo:.4g}, max {hi:.4g}")
        return n

    def query(self, x: torch.Tensor) -> OracleOutput:
        """Answer ``x`` (``[N, C, H, W]`` float in [0, 1]); charges N queries."""
        n = self._check(x)
        if n > self.budget_left:
            raise BudgetExhausted(
                f"query of {n} images would overdraw the budget ({self.budget_left} of {self.budget} left)")
        probs = self.answers.probs(x)
        self.queries_used += n
        self.answers.observe(x, probs)
        if self.output_mode == "soft_prob":
            return OracleOutput("soft_prob", probs)
        return OracleOutput("hard_top1", probs.argmax(dim=1))
