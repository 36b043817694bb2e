"""The pieces of a step's timeline: named parts of a rank's memory, phases in order, the whole timeline."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .. import checks, units
from ..recipes import Recipe
from ..stages import STATES
from .step_knobs import knob_values
from .step_model import Model

#: Buffers that come and go within a step, in the order a rank meets them.
TRANSIENT = (
    "activations",
    "gathered parameters",
    "unreduced gradients",
    "gradient buckets",
    "fp32 gradients",
    "optimizer temporaries",
)
#: Every kind of part: the three model states the paper counts, then the transient buffers.
KINDS = STATES + TRANSIENT
#: Kinds of phase: a boundary holds only what persists between steps or phases.
PHASE_KINDS = ("boundary", "forward", "backward", "reduction", "optimizer")
#: Where the peak is when a loss counted after the forward pass tops the step model's own peak.
AT_THE_LOSS = "the loss"
#: Who holds a gathered weight: its module (gathered for its own use), a prefetch it was copied out of, an
#: earlier use it was kept from, or an all-gather buffer it is still in. Every other part is its own holder.
HOLDERS = ("own", "prefetched", "kept", "buffers")


@dataclass(frozen=True)
class Part:
    """Bytes one rank holds for one reason at one phase."""

    kind: str  #: one of KINDS, e.g. "gathered parameters"
    nbytes: int | Fraction  #: bytes, exact (a Fraction when Ψ/N is not whole)
    reason: str  #: one line a learner can read: "block 3's weights, gathered for its forward: 2 B × 201M"
    holder: str = "own"  #: one of HOLDERS; stage 3 sets it on the gathered weights it holds for others

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.holder not in HOLDERS:
            raise ValueError(f"holder must be one of {', '.join(HOLDERS)}, got {self.holder!r}")
        if self.nbytes < 0:
            raise ValueError(f"nbytes of {self.kind} must be ≥ 0, got {self.nbytes}")


@dataclass(frozen=True)
class Phase:
    """One moment of the step, at its highest point, and every part a rank holds then."""

    name: str  #: e.g. "forward block 3" or "optimizer step"
    kind: str  #: one of PHASE_KINDS
    parts: tuple[Part, ...]  #: what the rank holds, in KINDS order

    @property
    def total(self) -> int | Fraction:
        """All bytes the rank holds at this phase."""
        return sum((p.nbytes for p in self.parts), 0)

    @property
    def model_state(self) -> int | Fraction:
        """Bytes of weights, gradients and optimizer state: what the paper's table counts."""
        return sum((p.nbytes for p in self.parts if p.kind in STATES), 0)

    def bytes_of(self, kind: str) -> int | Fraction:
        """Bytes of one kind of part at this phase (0 when there is none)."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        return sum((p.nbytes for p in self.parts if p.kind == kind), 0)

    def to_dict(self) -> dict:
        """Plain data for JSON (see `planning.step` for the shape)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "total_bytes": units.json_number(self.total),
            "parts": [
                {"kind": p.kind, "bytes": units.json_number(p.nbytes), "reason": p.reason} for p in self.parts
            ],
        }


@dataclass(frozen=True)
class Timeline:
    """Per-rank memory over one training step, phase by phase, for one framework and its knobs."""

    framework: object  #: the knobs it ran under: a Paper, DDP, DeepSpeed or FSDP2
    model: Model  #: the layers the step walks through
    gpus: int  #: data-parallel degree N
    recipe: Recipe  #: bytes per parameter of each state
    checkpointing: bool  #: whether every layer is checkpointed (recomputed in backward)
    phases: tuple[Phase, ...]  #: in the order the step runs them
    #: What is held as the loss runs, where it is counted another way than the last forward phase (e.g. stage
    #: 3's gathered weights by DeepSpeed's own rules, `run.stage3_plan.deepspeed_count`); None: that phase.
    at_loss: Phase | None = None

    @property
    def peak_index(self) -> int:
        """Position of the first phase whose total is the highest."""
        totals = [phase.total for phase in self.phases]
        return totals.index(max(totals))

    @property
    def peak(self) -> Phase:
        """The phase where the rank holds the most: its name, its total and its parts."""
        return self.phases[self.peak_index]

    @property
    def after_forward_index(self) -> int:
        """Position of the last forward phase: what is held as the loss runs."""
        return max(i for i, phase in enumerate(self.phases) if phase.kind == "forward")

    @property
    def after_forward(self) -> Phase:
        """The last forward phase: what is held as the loss runs, before the backward pass frees anything."""
        return self.phases[self.after_forward_index]

    @property
    def as_loss_runs(self) -> Phase:
        """What is held as the loss runs, before the backward pass frees anything: `at_loss` where given,
        else the last forward phase."""
        return self.after_forward if self.at_loss is None else self.at_loss

    def loss_is_peak(self, loss: int) -> bool:
        """Whether a loss holding `loss` bytes, run after the forward pass beside all it holds, tops the step
        model's own peak."""
        return self.as_loss_runs.total + checks.byte_count("loss", loss) > self.peak.total

    def phase_with_loss(self, loss: int) -> tuple[Phase, int]:
        """The phase the peak stands on once a loss holding `loss` bytes is counted, and the loss's bytes on
        top of it: the forward pass's end and `loss` where the loss tops the step, else the step model's own
        peak and 0. The other `*_with_loss` answers read this one."""
        return (self.as_loss_runs, loss) if self.loss_is_peak(loss) else (self.peak, 0)

    def peak_with_loss(self, loss: int) -> int | Fraction:
        """The peak once a loss holding `loss` bytes is counted: the larger of the forward pass's end plus
        the loss, and the step model's own peak."""
        phase, on_top = self.phase_with_loss(loss)
        return phase.total + on_top

    def peak_name_with_loss(self, loss: int) -> str:
        """Where the peak is once a loss holding `loss` bytes is counted: `AT_THE_LOSS`, or the step model's
        peak phase."""
        phase, on_top = self.phase_with_loss(loss)
        return AT_THE_LOSS if on_top else phase.name

    def phase(self, name: str) -> Phase:
        """The phase called `name`, e.g. "before optimizer step"."""
        for phase in self.phases:
            if phase.name == name:
                return phase
        raise ValueError(f"phase must be one of {', '.join(p.name for p in self.phases)}, got {name!r}")

    def to_dict(self) -> dict:
        """Plain data for JSON, in the shape `planning.step` documents."""
        peak = self.peak
        knobs = {
            k: units.json_number(v) if isinstance(v, Fraction) else v
            for k, v in knob_values(self.framework).items()
        }
        return {
            "framework": self.framework.label,
            "knobs": knobs,
            "model": self.model.name,
            "params": self.model.params,
            "layers": len(self.model.layers),
            "gpus": self.gpus,
            "recipe": self.recipe.name,
            "checkpointing": self.checkpointing,
            "peak": {
                "index": self.peak_index,
                "phase": peak.name,
                "total_bytes": units.json_number(peak.total),
            },
            "phases": [phase.to_dict() for phase in self.phases],
        }
