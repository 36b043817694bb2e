"""The step's timeline measured on the lab's ranks, beside the planning model's. No torch.

Two claims, per framework, stage and N:
- at a boundary (start of step, before and after the optimizer step) only persistent state is
  live, and the measured bytes equal the model's exactly once the bytes it leaves out on purpose
  (`left_out`: the batch, Adam's step counters, the frameworks' scalars, FSDP2's mesh) are taken away;
- at every other phase the busiest rank's highest point is at or above the model's, by no more
  than the tolerance: the sum of the `allowances`, each a named buffer the model does not count.
The model describes one rank, the busiest: it is the one that runs out of memory first.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ..planning import timeline
from ..planning.step_parts import Timeline
from .timeline_setup import BUCKET, SPEC, STEP_NAMES, Boundary, Measured, Setup, planning_model
from .timeline_setup import BY_KEY as SETUPS

#: Bytes of the small tensors a step makes besides its buffers: the loss, the gradient backward() seeds
#: it with, DeepSpeed's scaled loss, gradient norms and overflow flags, some released a moment late by
#: gloo's thread. At most 32 B were seen at once; this allows twice that.
SCALARS = 64


def modelled(setup: Setup, gpus: int) -> Timeline:
    """The planning model's timeline of `setup` on `gpus` ranks."""
    return timeline(planning_model(setup), setup.framework, gpus, setup.mode.recipe)


def mesh_bytes(setup: Setup, gpus: int) -> int:
    """FSDP2's DeviceMesh keeps the ranks in two int64 tensors of N elements; other frameworks none."""
    return 2 * 8 * gpus if setup.mode.wrapping and setup.mode.wrapping.wrapper == "fully_shard" else 0


def left_out(setup: Setup, gpus: int, boundary: Boundary) -> int:
    """Bytes live all step that the model leaves out: the batch, FSDP2's mesh, and Adam's step counters and
    the frameworks' scalars as the lab's snapshot counts them."""
    batch = SPEC.batch * SPEC.widths[0] * setup.dtype_bytes
    return batch + boundary.held.step_counters + boundary.held.other + mesh_bytes(setup, gpus)


#: What each allowance is, by the short name `allowances` gives it.
WHY: dict[str, str] = {
    "scalars": "the loss, its seed gradient, gradient norms and overflow flags (and DeepSpeed's scaled loss)",
    "layer output": "the layer's output before a module saves it: the pre-activation, or the logits",
    "previous all-gather": "FSDP2: the previous layer's all-gather output, freed once this one copied in",
    "activation gradients": "the activation gradients flowing into the layer and out of it",
    "gloo bucket": "DeepSpeed: one bucket, gloo's reduce-scatter output (NCCL reduces in place), a "
    "collective's buffer gloo's thread lets go of late, or gradients waiting beside the bucket",
    "last gradients": "DeepSpeed stage 3: the last gradients, before the hook copies them into the bucket",
    "flattened copy": "DeepSpeed stage 3: their flattened copy; DeepSpeed's own linear hands back a weight's "
    "gradient before its bias's, so its buckets close one tensor later than the model's walk",
}


def allowances(setup: Setup, kind: str) -> tuple[tuple[str, int], ...]:
    """The buffers the model does not count that may be live at a phase of this kind, with their bytes.

    Each is named by a key of `WHY`, which says what it is.
    """
    if kind == "boundary":
        return ()
    output = SPEC.batch * SPEC.widths[1] * setup.dtype_bytes
    deepspeed = setup.mode.wrapping is None
    bucket = BUCKET * setup.dtype_bytes
    items = [("scalars", SCALARS)]
    if kind == "forward":
        items.append(("layer output", output))
        if not deepspeed and setup.mode.wrapping.wrapper == "fully_shard":
            items.append(("previous all-gather", sum(SPEC.layers[0]) * setup.dtype_bytes))
    if kind == "backward":
        items.append(("activation gradients", 2 * output))
    if deepspeed and kind in ("backward", "reduction"):
        items.append(("gloo bucket", bucket))
    if deepspeed and setup.framework.stage == 3 and kind == "reduction":
        items += [("last gradients", bucket), ("flattened copy", bucket)]
    return tuple(items)


def spans_of(phase: str) -> tuple[str, ...]:
    """The measured stretches that make up a model phase: a layer's Linear and ReLU, or the phase itself."""
    for way in ("forward", "backward"):
        if phase.startswith(f"{way} layer "):
            number = phase.removeprefix(f"{way} layer ")
            return (f"{way} linear {number}", f"{way} relu {number}")
    return (phase,)


@dataclass(frozen=True)
class Compared:
    """One phase of one setup on N ranks: the model's bytes and each rank's."""

    key: str  #: the setup, e.g. "step_zero3"
    gpus: int  #: N
    phase: str  #: the model's phase name
    kind: str  #: "boundary", "forward", "backward", "reduction" or "optimizer"
    model: int | Fraction  #: the model's bytes at the phase
    #: each rank's bytes there (a boundary's level, else its highest point), less `left_out`
    measured: tuple[int, ...]
    allowances: tuple[tuple[str, int], ...]  #: what the gap may hold, by name

    @property
    def gap(self) -> int | Fraction:
        """How far the busiest rank is above the model."""
        return max(self.measured) - self.model

    @property
    def tolerance(self) -> int:
        """The most the gap may be: the sum of the allowances (0 at a boundary)."""
        return sum(n for _, n in self.allowances)

    @property
    def holds(self) -> bool:
        """Whether the busiest rank is at or above the model, by at most the tolerance."""
        return 0 <= self.gap <= self.tolerance


def compare(measured) -> tuple[Compared, ...]:
    """Every setup's phases at every N, model beside measured, in step order."""
    groups: dict[tuple[str, int], list[Measured]] = {}
    for m in measured:
        groups.setdefault((m.key, m.gpus), []).append(m)
    rows = []
    order = list(STEP_NAMES)
    for (key, gpus), ranks in sorted(groups.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][1])):
        setup = SETUPS[key]
        for phase in modelled(setup, gpus).phases:
            values = []
            for m in sorted(ranks, key=lambda m: m.rank):
                found = [s.peak for s in m.spans if s.name in spans_of(phase.name)]
                if not found:
                    raise ValueError(f"{key} on {gpus} ranks: no measured stretch for {phase.name!r}")
                values.append(max(found) - left_out(setup, gpus, m.boundaries[0]))
            allowed = allowances(setup, phase.kind)
            rows.append(Compared(key, gpus, phase.name, phase.kind, phase.total, tuple(values), allowed))
    return tuple(rows)


def table(rows: tuple[Compared, ...]) -> str:
    """The comparison as text: one line per phase, with the gap and the tolerance."""
    head = f"{'setup':<11}{'N':>2}  {'phase':<24}{'model B':>9}{'measured B':>11}{'gap':>6}{'tol':>6}"
    lines = [head]
    for r in rows:
        lines.append(
            f"{r.key:<11}{r.gpus:>2}  {r.phase:<24}{float(r.model):>9.0f}{max(r.measured):>11}"
            f"{float(r.gap):>6.0f}{r.tolerance:>6}{'' if r.holds else '  NO'}"
        )
    return "\n".join(lines)
