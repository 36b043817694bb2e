"""The ZeRO stages, and which training state each one partitions."""

from __future__ import annotations

import numbers
from enum import IntEnum

from . import checks

#: The three kinds of training state, in the order the ZeRO stages partition them: stage k splits the first k.
STATES = ("optimizer", "gradients", "weights")


class Stage(IntEnum):
    """A ZeRO stage; 0 is plain data parallelism, where every GPU holds everything."""

    DP = 0
    ZERO1 = 1
    ZERO2 = 2
    ZERO3 = 3

    @property
    def partitioned(self) -> tuple[str, ...]:
        """The states this stage splits across GPUs: optimizer, then gradients, then weights."""
        return STATES[: int(self)]

    def partitions(self, state: str) -> bool:
        """Whether this stage splits `state` across GPUs rather than copying it to each."""
        return checks.choice("state", state, STATES) in self.partitioned

    @property
    def label(self) -> str:
        """Human name: "data parallel" or "ZeRO-1"."""
        return "data parallel" if self is Stage.DP else f"ZeRO-{int(self)}"

    @property
    def paper_name(self) -> str:
        """The ZeRO paper's name: baseline, P_os, P_os+g or P_os+g+p."""
        return ("baseline", "P_os", "P_os+g", "P_os+g+p")[int(self)]


#: What the model's functions accept as a stage: a Stage, 0-3, or a name such as "ZeRO-2" or "dp".
StageLike = Stage | int | str

_ALIASES = {"dp": 0, "ddp": 0, "data parallel": 0, "baseline": 0}


def as_stage(value: StageLike) -> Stage:
    """Read 0-3, "ZeRO-2", "ZeRO 2", "zero2", "z2", "stage 2", "dp" and the like as a Stage."""
    if isinstance(value, Stage):
        return value
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and 0 <= value <= 3:
        return Stage(int(value))
    if isinstance(value, str):
        key = value.strip().lower().replace("_", "-")
        for prefix in ("zero", "stage", "z"):  # "ZeRO-2", "ZeRO 2", "zero2", "stage 2", "z2"
            if key.startswith(prefix):
                key = key.removeprefix(prefix).lstrip(" -")
                break
        number = _ALIASES.get(value.strip().lower(), key)
        if str(number) in {"0", "1", "2", "3"}:
            return Stage(int(number))
    raise ValueError(
        f"stage must be 0, 1, 2 or 3 (or 'dp', 'ZeRO-1' ... 'ZeRO-3', 'stage 3'), got {checks.shown(value)}"
    )
