"""What a lab run finds, typed: per rank, bytes held and traffic sent, measured and predicted. No torch.

The ranks build these same classes and send them to the parent, so no name changes between processes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields

from .. import communication


@dataclass(frozen=True)
class Held:
    """Bytes one rank holds, by what they are, each storage counted once."""

    weights: int  #: parameters, padding included
    gradients: int  #: gradients, padding included
    optimizer: int  #: optimizer state: Adam's moments, and DeepSpeed's fp32 master weights
    step_counters: int  #: Adam's scalar `step` counters, one per parameter tensor it updates
    other: int  #: anything else a framework keeps beside them, such as DeepSpeed's gradient norm

    @property
    def states(self) -> int:
        """Bytes of the paper's three model states: weights, gradients and optimizer state."""
        return self.weights + self.gradients + self.optimizer


#: Held's fields, in the report's column order.
FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Held))


@dataclass(frozen=True, order=True)
class Message:
    """One collective call."""

    op: str  #: "all_reduce", "all_gather", "reduce_scatter", "broadcast" or "reduce"
    elements: int  #: elements of the full tensor (all ranks' parts), not of this rank's part
    dtype: str  #: torch's dtype name, e.g. "bfloat16"


@dataclass(frozen=True)
class Traffic:
    """What one rank's collectives move in one training step."""

    elements: dict[
        str, int
    ]  #: elements per collective, full-tensor sizes (before the paper's ×2 for all-reduce)
    messages: tuple[Message, ...] | None = (
        None  #: every call, sorted; None where a prediction stops at totals
    )
    nbytes: dict[str, int] | None = None  #: bytes per collective, as measured; None in predictions

    @classmethod
    def of(cls, messages: Iterable[Message], nbytes: dict[str, int] | None = None) -> Traffic:
        """The traffic of these calls, with their elements added up per collective."""
        messages = tuple(sorted(messages))
        totals: Counter = Counter()
        for message in messages:
            totals[message.op] += message.elements
        return cls(dict(totals), messages, nbytes)

    @property
    def paper_elements(self) -> int:
        """Elements sent per rank by the paper's count: an all-reduce twice its size, the others once."""
        return sum(communication.multiple(op) * n for op, n in self.elements.items())


@dataclass(frozen=True)
class Measured:
    """What one rank of one mode really held and sent, counted inside the rank."""

    held: Held  #: at the snapshot of the last step
    traffic: Traffic  #: in the last step
    first_step: Traffic  #: in the first step, before DeepSpeed's stage 3 knows the order of the layers
    #: DeepSpeed's stage 1 only: held in the last step as it starts reducing its gradients (its peak)
    before_reduction: Held | None = None


@dataclass(frozen=True)
class Predicted:
    """What the package predicts one rank of one mode holds and sends."""

    held: Held  #: at the snapshot
    traffic: Traffic  #: in a steady-state step; DeepSpeed's predictions list every message
    before_reduction: Held | None = None  #: DeepSpeed's stage 1 only, as `Measured.before_reduction`


@dataclass(frozen=True)
class Row:
    """One rank of one mode at one world size: measured and predicted side by side."""

    mode: str  #: key of the mode, e.g. "ds_zero3"
    gpus: int  #: world size N
    rank: int  #: this rank
    measured: Measured  #: counted on the rank
    predicted: Predicted  #: from the mode's prediction module

    @property
    def matches(self) -> bool:
        """Whether the bytes held (at each snapshot) and elements sent equal the prediction, and each message
        where predicted."""
        measured, predicted = self.measured, self.predicted
        messages = (
            predicted.traffic.messages is None or predicted.traffic.messages == measured.traffic.messages
        )
        return (
            measured.held == predicted.held
            and measured.before_reduction == predicted.before_reduction
            and measured.traffic.elements == predicted.traffic.elements
            and messages
        )


@dataclass(frozen=True)
class Results:
    """A lab run's rows, sorted by mode, world size and rank, with lookups."""

    rows: tuple[Row, ...]  #: one per mode, world size and rank
    #: the step timelines measured in the same ranks (`timeline_setup.Measured`), in the order asked for
    timelines: tuple = ()

    def __iter__(self) -> Iterator[Row]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def ranks(self, mode: str, gpus: int) -> tuple[Row, ...]:
        """Every rank's row of `mode` on `gpus` ranks, in rank order."""
        found = tuple(row for row in self.rows if row.mode == mode and row.gpus == gpus)
        if not found:
            raise ValueError(
                f"this run has no mode {mode!r} on gpus={gpus!r}; it has modes "
                f"{', '.join(dict.fromkeys(r.mode for r in self.rows))} on gpus "
                f"{', '.join(map(str, sorted({r.gpus for r in self.rows})))}"
            )
        return found

    def get(self, mode: str, gpus: int, rank: int = 0) -> Row:
        """The row of `rank` (rank 0 unless given) of `mode` on `gpus` ranks."""
        found = self.ranks(mode, gpus)
        if not isinstance(rank, int) or not 0 <= rank < len(found):
            raise ValueError(f"rank must be a whole number from 0 to {len(found) - 1}, got {rank!r}")
        return found[rank]

    def of(self, modes: Iterable[str]) -> Results:
        """The rows of these modes only (one key, or several such as `lab.DEEPSPEED_NAMES`), in order."""
        keep = {modes} if isinstance(modes, str) else set(modes)
        return Results(tuple(row for row in self.rows if row.mode in keep))

    @property
    def matches(self) -> bool:
        """Whether every rank of every mode matches its prediction."""
        return all(row.matches for row in self.rows)
