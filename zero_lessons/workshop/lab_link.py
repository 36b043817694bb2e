"""The workshop's one link to the lab: its settings, its predictions, and a run of one case.

Every function that knows how the lab names, predicts and reports things lives here, so that a
change to the lab's API is a change to this module only. No torch: `measure` starts the lab's
ranks, which import it in their own processes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

FIELDS = ("weights", "gradients", "optimizer")
COLLECTIVES = ("all_reduce", "reduce", "broadcast", "reduce_scatter", "all_gather")


@dataclass(frozen=True)
class Record:
    """What one rank holds and sends in one steady-state step, as the lab measures or predicts it."""

    mode: str  #: the lab's setting, e.g. "ds_zero1"
    gpus: int  #: ranks in the run
    rank: int  #: this rank
    held: dict[str, int]  #: bytes by kind of state: weights, gradients, optimizer
    sent: dict[str, int]  #: elements per collective in one step, training tensors only

    def values(self) -> dict[str, int]:
        """Every number a predict-then-measure exercise asks for, by part name."""
        return self.held | self.sent


def lab_mode(key: str):
    """The lab's description of a setting: its name, nearest stage, recipe and framework."""
    from ..lab import modes

    return modes.get(key)


def lab_model() -> tuple[tuple[int, ...], int]:
    """The lab model's layer widths and its parameter count Ψ."""
    from ..lab.model import MODEL

    return MODEL.widths, MODEL.param_count


def owners(sizes: list[int], gpus: int) -> list[int]:
    """The rank ZeroRedundancyOptimizer gives each parameter's optimizer state to (the lab's rule)."""
    from ..lab.predict_torch import zero_redundancy_owner

    return zero_redundancy_owner(sizes, gpus)


def zero_setting(mode: str, name: str) -> int:
    """A DeepSpeed setting's "zero_optimization" value, or DeepSpeed's default (the lab's table)."""
    from ..lab.predict_deepspeed import setting

    return setting(lab_mode(mode), name)


def deepspeed_default(name: str) -> int:
    """DeepSpeed's default for a "zero_optimization" setting the lab's predictions read."""
    from ..lab.predict_deepspeed import DEFAULTS

    return DEFAULTS[name]


def power_of_ten(number: int) -> str:
    """`number` as a reader writes it: "10⁹" for a power of ten of 1,000 or more, else with commas."""
    digits = len(str(number)) - 1
    if number >= 1_000 and number == 10**digits:
        return "10" + str(digits).translate(str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹"))
    return f"{number:,}"


def with_defaults(note: str) -> str:
    """`note` with DeepSpeed's defaults filled in: {threshold} (the persistence threshold, a number) and
    {reuse} (the max reuse distance, as `power_of_ten` writes it)."""
    return note.format(
        threshold=deepspeed_default("stage3_param_persistence_threshold"),
        reuse=power_of_ten(deepspeed_default("stage3_max_reuse_distance")),
    )


def from_lab(mode: str, gpus: int, rank: int, found) -> Record:
    """Read one rank's lab result (a `lab.results.Measured` or `Predicted`) as a Record.

    DeepSpeed's one-element control messages (overflow flag, gradient norm) are left out: only its
    bf16 messages count. The lab's PyTorch runs send training tensors only.
    """
    held = {f: int(getattr(found.held, f)) for f in FIELDS}
    if lab_mode(mode).framework == "deepspeed":
        sent: Counter = Counter()
        for message in found.traffic.messages:
            sent[message.op] += message.elements if message.dtype == "bfloat16" else 0
    else:
        sent = Counter(found.traffic.elements)
    return Record(mode, gpus, rank, held, {op: int(sent[op]) for op in COLLECTIVES})


def predicted(mode: str, gpus: int, rank: int, widths: tuple[int, ...] | None = None) -> Record:
    """The package's prediction for one rank of a lab setting, for the lab's model or an MLP of any widths."""
    from ..lab import runner
    from ..lab.model import MODEL, LabModel

    setting = lab_mode(mode)
    model = LabModel(widths=tuple(widths)) if widths else MODEL
    return from_lab(mode, gpus, rank, runner.PREDICTIONS[setting.framework](setting, gpus, rank, model))


def measure_many(cases, timeout: float = 120) -> dict[tuple[str, int, int], Record]:
    """Run the lab once per rank count for every (setting, ranks, rank) case, all settings of one rank
    count in the same ranks: their start-up (importing torch and DeepSpeed) is paid once, not per case."""
    from .. import lab

    out = {}
    for gpus in sorted({case[1] for case in cases}):
        modes = tuple(sorted({mode for mode, world, _ in cases if world == gpus}))
        results, _ = lab.run(ranks=(gpus,), modes=modes, timeout=timeout)
        for mode, world, rank in cases:
            if world == gpus:
                out[mode, world, rank] = from_lab(mode, world, rank, results.get(mode, world, rank).measured)
    return out
