"""What the lab's step timeline runs and records, stated once for the ranks and the comparison. No torch.

The timeline runs its own model, `SPEC`: four Linear layers of 32 × 32 (plus bias) on a batch of 32.
Each layer is a quarter of Ψ and every tensor has 32 rows, so every split the frameworks make on
1, 2 or 4 ranks is even: the planning model's Ψ/N is then exact, with no padding and no tensor
straddling two ranks' slices (tests/test_lab.py pins the uneven splits of the lab's other model).
Bucket and prefetch sizes are set small, about one layer, so the transient buffers come and go
within the step in the order they do at real scale.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..planning import DDP, FSDP2, DeepSpeed, layered_model
from ..planning.step_knobs import Framework
from ..planning.step_model import Layer, Model
from ..stages import Stage
from .model import LabModel
from .modes import Mode, Wrapping
from .results import Held

#: The timeline's model: four 32 × 32 Linear layers with biases (Ψ = 4,224), ReLU between them.
SPEC = LabModel(widths=(32, 32, 32, 32, 32), batch=32, steps=2)
#: Elements per DeepSpeed bucket, a little over one layer's 1,056.
BUCKET = 1_200
#: DDP's bucket cap in MiB: 4,000 bytes, under one layer's 4,224 fp32 bytes.
DDP_BUCKET_MB = 4_000 / 2**20


@dataclass(frozen=True)
class Setup:
    """One framework setup the timeline runs: how the ranks build it and what the planning model calls it."""

    key: str  #: e.g. "step_zero3"
    mode: Mode  #: how the ranks wrap the model or configure DeepSpeed (the lab's own mode type)
    framework: Framework  #: the same knobs, as the planning model takes them

    @property
    def by_module(self) -> bool:
        """Whether each module is a layer of the planning model: DeepSpeed's stage 3 steps through them."""
        return isinstance(self.framework, DeepSpeed) and self.framework.stage == 3

    @property
    def dtype_bytes(self) -> int:
        """Bytes per element of weights and activations: 4 in fp32 (PyTorch), 2 in bf16 (DeepSpeed)."""
        return 4 if self.mode.wrapping else 2


def _deepspeed(stage: int, **zero) -> tuple[Mode, DeepSpeed]:
    """A DeepSpeed stage with buckets of `BUCKET` elements, as the lab's config and as the planning knobs."""
    config = {"reduce_bucket_size": BUCKET, "allgather_bucket_size": BUCKET, **zero}
    knobs = {
        "stage3_prefetch_bucket_size": "prefetch_bucket_size",
        "stage3_max_live_parameters": "max_live_parameters",
        "stage3_max_reuse_distance": "max_reuse_distance",
        "stage3_param_persistence_threshold": "param_persistence_threshold",
    }
    framework = DeepSpeed(
        stage=stage,
        reduce_bucket_size=BUCKET,
        allgather_bucket_size=BUCKET,
        **{knobs.get(name, name): value for name, value in zero.items()},
    )
    return Mode(f"ds_zero{stage}", f"DeepSpeed ZeRO-{stage}", Stage(stage), zero=config), framework


def _setups() -> tuple[Setup, ...]:
    """Every setup, in the order the ranks run them."""
    ddp = Mode("ddp", "DDP", Stage.DP, Wrapping("ddp", bucket_cap_mb=DDP_BUCKET_MB))
    fsdp = Mode("fsdp", "FSDP2 fully_shard", Stage.ZERO3, Wrapping("fully_shard"))
    zero3 = {
        "stage3_param_persistence_threshold": 0,  # every tensor sharded, none kept whole
        "stage3_prefetch_bucket_size": BUCKET,
        "stage3_max_live_parameters": 3 * BUCKET,
        "stage3_max_reuse_distance": BUCKET,
    }
    return (
        Setup("step_ddp", ddp, DDP(bucket_cap_mb=DDP_BUCKET_MB)),
        Setup("step_fsdp", fsdp, FSDP2()),
        *(Setup(f"step_zero{s}", *_deepspeed(s)) for s in (1, 2)),
        Setup("step_zero3", *_deepspeed(3, **zero3)),
    )


SETUPS: tuple[Setup, ...] = _setups()
BY_KEY: dict[str, Setup] = {setup.key: setup for setup in SETUPS}
#: Key -> the name a reader knows, in run order; the keys differ from the lab's modes' keys.
STEP_NAMES: dict[str, str] = {setup.key: setup.mode.name for setup in SETUPS}


def planning_model(setup: Setup, spec: LabModel = SPEC) -> Model:
    """`spec` as the planning model sees it: per layer its weight and bias, and the ReLU output it saves.

    Layer i's Linear saves its input (the previous layer's ReLU output, or the batch) and its
    ReLU saves its output; the two are one tensor, counted once, in the layer that makes it. The
    last layer has no ReLU: its output is the logits, which the model leaves out, as it leaves out
    the batch, which lives all step. For DeepSpeed's stage 3 each module is a layer of its own, as
    its coordinator steps through them: "linear 1", "relu 1", ..., "linear 4".
    """
    name = f"lab MLP {'×'.join(map(str, spec.widths))}"
    saved = [spec.batch * width * setup.dtype_bytes for width in spec.widths[1:-1]]
    if setup.by_module:
        layers = []
        for i, (tensors, relu) in enumerate(zip(spec.layers, [*saved, None], strict=True), 1):
            layers.append(Layer(f"linear {i}", tuple(tensors)))
            if relu is not None:
                layers.append(Layer(f"relu {i}", (), relu))
        return Model(name, tuple(layers))
    return layered_model(spec.layers, [*saved, 0], name=name)


@dataclass(frozen=True)
class Span:
    """One stretch of the measured step: live bytes as it begins and at its highest point."""

    name: str  #: the planning model's phase name ("forward layer 2"), or a stretch it leaves out ("loss")
    level: int  #: bytes live as it begins; for a boundary, the bytes live at that instant
    peak: int  #: most bytes live during it (for a boundary, its level)


@dataclass(frozen=True)
class Boundary:
    """A moment where only persistent state should be live, counted two ways."""

    name: str  #: "start of step", "before optimizer step" or "after optimizer step"
    level: int  #: every live byte the counter tracks
    held: Held  #: the lab's snapshot (`counting.by_field`) at the same instant
    counted: int  #: the counter's bytes for exactly the storages the snapshot names
    batch: int  #: the input batch's bytes, live all step, left out by the model
    #: bytes live beyond the snapshot and the batch, by the op that made them (DDP's buckets, FSDP2's mesh)
    beyond: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Measured:
    """What one rank of one setup held over its last step."""

    key: str  #: the setup
    gpus: int  #: world size N
    rank: int  #: this rank
    spans: tuple[Span, ...]  #: the step's stretches in order, boundaries included
    boundaries: tuple[Boundary, ...]  #: the three persistent-state moments, in order
    unseen: int  #: bytes of storages an op read that the counter never saw made (should be 0)
    seconds: float = 0.0  #: wall time the rank spent measuring this setup, start-up included

    def span(self, name: str) -> Span:
        """The stretch called `name`."""
        for span in self.spans:
            if span.name == name:
                return span
        raise ValueError(f"span must be one of {', '.join(s.name for s in self.spans)}, got {name!r}")

    @property
    def peak(self) -> int:
        """The most bytes live at any point of the step."""
        return max(span.peak for span in self.spans)
