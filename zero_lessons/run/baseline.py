"""The example the config-key table's numbers start from, stated once: model, batch, precision, GPUs, knobs.

Every value is read from what `keys` computes with (its shape, its GPU count, the step model's default
recipe and DeepSpeed's default knobs), so the statement cannot drift from the numbers. No torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .. import units
from ..planning import ds_config
from ..planning.step import DeepSpeed, Timeline, transformer_model
from ..recipes import MIXED_ADAM, get
from . import stage3_plan
from .example import GPUS, SHAPE, example_step, loss_bytes
from .keys import markdown

#: The DeepSpeed knobs the advisor's config writes (`planning.ds_config.zero_config`), besides the stage.
SET = ("overlap_comm", "contiguous_gradients")


def knobs(stage: int, advisor: bool) -> DeepSpeed:
    """DeepSpeed's knobs at `stage`: its defaults, or with the advisor's values for SET."""
    if not advisor:
        return DeepSpeed(stage=stage)
    zero = ds_config.zero_config(stage)["zero_optimization"]
    return DeepSpeed(stage=stage, **{k: zero[k] for k in SET})


def _gb(value) -> str:
    """Bytes as decimal GB with two decimals."""
    return f"{float(Fraction(value) / units.GB):.2f} GB"


@dataclass(frozen=True, repr=False)
class Baseline:
    """The example's settings and its peak per GPU with the loss at stages 2 and 3 (stage 3's with DeepSpeed's
    own count of gathered weights, `stage3_plan`), as a two-column table. `head_line` and `advisor_line`
    give the peaks with the output layer and under the advisor's config, which the lesson prices later."""

    def peak(self, stage: int, advisor: bool = False):
        """The peak phase of one step at `stage` (2 or 3): every knob at DeepSpeed's default, or, with
        `advisor`, the knobs in SET as the advisor's config sets them."""
        return self.step(stage, advisor).peak

    def step(self, stage: int, advisor: bool = False, head: bool = False) -> Timeline:
        """One step at `stage` (2 or 3), DeepSpeed's defaults or the advisor's knobs: `keys`' example step;
        with `head`, the tied output layer's gradient counted too."""
        if stage not in (2, 3):
            raise ValueError(f"stage must be 2 or 3, got {stage!r}")
        return example_step(SHAPE, knobs(stage, advisor), head=head)

    @property
    def loss(self) -> int:
        """The loss's bytes on top of the forward pass: a cross-entropy's fp32 copies of the logits."""
        return loss_bytes(SHAPE)

    def advisor_differs(self, stage: int) -> dict[str, tuple[object, object]]:
        """Where the advisor's config leaves DeepSpeed's default at `stage`: knob → (default, advisor's)."""
        ours, theirs = knobs(stage, True), knobs(stage, False)
        return {
            k: (getattr(theirs, k), getattr(ours, k)) for k in SET if getattr(ours, k) != getattr(theirs, k)
        }

    def cells(self) -> list[list[str]]:
        """The settings, then the two peaks, as strings."""
        recipe = get(MIXED_ADAM)
        psi = transformer_model(SHAPE).params
        overlap = [DeepSpeed(stage=s).overlap_comm for s in (2, 3)]
        rows = [
            ["model", f"GPT, {SHAPE.layers} blocks × {SHAPE.hidden:,}, {SHAPE.heads} heads: Ψ = {psi:,}"],
            ["batch", f"micro-batch {SHAPE.micro_batch} × sequence {SHAPE.seq_len:,} tokens per GPU"],
            ["activations", "all kept for backward (no activation checkpointing)"],
            ["GPUs", f"{GPUS}; no card size: the numbers are what one GPU must hold"],
            ["precision", f"bf16.enabled true: {recipe.weight_bytes} + {recipe.grad_bytes} B of bf16 weights "
             f"and gradients, {recipe.optimizer_bytes} B of fp32 master weights and AdamW moments"],
            ["other keys", f"DeepSpeed's defaults; overlap_comm's default, None, makes it {overlap[0]} at "
             f"stage 2 and {overlap[1]} at stage 3"],
        ]  # fmt: skip
        rows.append(
            ["peak per GPU with the loss, stage 2", f"{_peak_at(self.step(2), self.loss)} (step model)"]
        )
        counted = stage3_plan.at_loss(knobs(3, False))
        rows.append(
            ["peak per GPU with the loss, stage 3",
             f"{_gb(counted.plan)}, at the loss, gathered weights counted by DeepSpeed's rules, "
             "matrix by matrix (section 2)"]
        )  # fmt: skip
        return rows

    def head_line(self) -> str:
        """Both peaks with the loss once the output layer, which the step model leaves out, is counted: its
        bf16 logits beside the loss, and the tied weight's gradient held through the backward pass."""
        loss = loss_bytes(SHAPE, head=True)
        three = stage3_plan.deepspeed_count(self.step(3, head=True), SHAPE, head=True)
        return "; ".join(
            f"stage {s}: {_peak_at(line, loss)}" for s, line in ((2, self.step(2, head=True)), (3, three))
        )

    def advisor_line(self, stage: int) -> str:
        """How the advisor's config differs from the baseline at `stage`, and its peak with the loss."""
        changed = self.advisor_differs(stage)
        what = (
            ", ".join(f"{k} {new} (default {old})" for k, (old, new) in changed.items()) or "no key differs"
        )
        top = stage3_plan.planned(knobs(stage, True))
        return f"stage {stage}: {what}, peak with the loss {_gb(top)}"

    def __repr__(self) -> str:
        return "\n".join(" | ".join(row) for row in self.cells())

    def _repr_markdown_(self) -> str:
        return markdown([["setting", "value"], *self.cells()])


def _peak_at(line: Timeline, loss: int) -> str:
    """`line`'s peak with a loss of `loss` bytes counted, and where it falls: "58.63 GB, at the loss"."""
    return f"{_gb(line.peak_with_loss(loss))}, at {line.peak_name_with_loss(loss)}"
