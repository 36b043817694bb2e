"""The DeepSpeed config keys that matter beyond the stage: what each changes in memory or traffic, with
numbers from the package's models for one example model. No torch.

Defaults come from the package's knob table (`planning.step_knobs.DeepSpeed`, read from DeepSpeed
0.19.8's `runtime/zero/config.py`) where it has the knob; the others are DeepSpeed's documented defaults.
Each key is tried at one other value, and the number shown is the package's answer for both.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from functools import cached_property

from .. import communication, memory, units
from ..inputs import Setup
from ..planning import offload
from ..planning.activations import Transformer
from ..planning.step import DeepSpeed, timeline, transformer_model
from ..stages import Stage
from .precision import largest

#: The example: a 6.65B-parameter GPT (32 layers of 4096), sequences of 2048 tokens, 8 GPUs.
SHAPE = Transformer(layers=32, hidden=4096, heads=32, seq_len=2048, micro_batch=1)
GPUS = 8
KNOBS = DeepSpeed()  #: the package's DeepSpeed knobs at their defaults (stage 2)


@dataclass(frozen=True)
class Key:
    """One config key: where it sits, its default, what it changes, and a second value to compare."""

    path: str  #: where it sits in the config, e.g. "zero_optimization.reduce_bucket_size"
    default: object  #: DeepSpeed's default
    tried: object  #: the other value the numbers compare with the default
    changes: str  #: "memory", "traffic", "memory and traffic", "numerics" or "host memory"
    effect: str  #: what it changes, in one sentence
    knob: str | None = None  #: the `planning.step.DeepSpeed` knob that models it, if one does
    stage: int = 2  #: the stage its numbers are computed at


KEYS: tuple[Key, ...] = (
    Key("train_micro_batch_size_per_gpu", 1, 2, "memory", "samples per GPU per forward pass: activations "
        "grow with it; model state does not"),
    Key("gradient_accumulation_steps", 1, 4, "traffic", "micro-batches per optimizer step: a larger batch "
        "with the same activations; stage 2 and 3 reduce gradients every micro-batch, stage 0-1 once"),
    Key("bf16.enabled", True, False, "memory and traffic", "16-bit weights and gradients (2 B instead of "
        "4 B), with fp32's exponent range: no loss scaling needed"),
    Key("fp16.enabled", False, True, "numerics", "16-bit with a 5-bit exponent: needs loss scaling "
        "(fp16.loss_scale 0 = dynamic, starting at 2**initial_scale_power = 2**16); overflowing steps are "
        "skipped"),
    Key("zero_optimization.overlap_comm", KNOBS.overlap_comm, True, "memory", "reduce gradients while the "
        "backward pass runs; at stages 1-2 it doubles the contiguous gradient bucket (DeepSpeed turns it on "
        "by default at stage 3 only; the advisor's configs turn it on)", "overlap_comm"),
    Key("zero_optimization.contiguous_gradients", KNOBS.contiguous_gradients, False, "memory", "copy each "
        "gradient into one preallocated bucket: less fragmentation, one bucket more", "contiguous_gradients"),
    Key("zero_optimization.reduce_bucket_size", KNOBS.reduce_bucket_size, 50_000_000, "memory and traffic",
        "elements reduced per call: a smaller bucket holds less but is reduced sooner, so the rank's "
        "gradient partition is allocated earlier in the backward pass", "reduce_bucket_size"),
    Key("zero_optimization.allgather_bucket_size", KNOBS.allgather_bucket_size, 50_000_000, "traffic",
        "stages 1-2: elements per weight all-gather; splits traffic, not memory", "allgather_bucket_size"),
    Key("zero_optimization.offload_optimizer.device", "none", "cpu", "memory and traffic", "keep the "
        "optimizer state and its step on the host: GPU memory drops, every step crosses the host link"),
    Key("zero_optimization.offload_optimizer.pin_memory", False, True, "host memory", "page-locked host "
        "buffers: faster copies over the link, but that host memory can never be swapped out"),
    Key("zero_optimization.stage3_prefetch_bucket_size", KNOBS.prefetch_bucket_size, 0, "memory", "stage 3: "
        "elements fetched ahead of use", "prefetch_bucket_size", 3),
    Key("zero_optimization.stage3_max_live_parameters", KNOBS.max_live_parameters, 100_000_000, "memory",
        "stage 3: gathered elements at which prefetching stops", "max_live_parameters", 3),
    Key("zero_optimization.stage3_max_reuse_distance", KNOBS.max_reuse_distance, 0, "memory and traffic",
        "stage 3: keep a gathered weight if it is used again within this many elements",
        "max_reuse_distance", 3),
    Key("zero_optimization.stage3_param_persistence_threshold", KNOBS.param_persistence_threshold,
        20_000_000, "memory and traffic", "stage 3: tensors up to this many elements stay whole on every "
        "GPU, never gathered", "param_persistence_threshold", 3),
    Key("zero_optimization.sub_group_size", KNOBS.sub_group_size, 100_000_000, "memory", "stage 3: "
        "elements the optimizer steps at a time (its fp32 temporaries)", "sub_group_size", 3),
)  # fmt: skip


def peak(key: Key, value: object) -> Fraction:
    """Peak bytes per GPU over one step of the example, with `key` at `value`."""
    shape = replace(SHAPE, micro_batch=value) if key.path == "train_micro_batch_size_per_gpu" else SHAPE
    knobs = {key.knob: value} if key.knob else {}
    return timeline(transformer_model(shape), DeepSpeed(stage=key.stage, **knobs), GPUS).peak.total


def _shown(value: object) -> str:
    """A key's value as a reader types it: whole numbers with thousands separators."""
    return f"{value:,}" if type(value) is int else str(value)


def _gb(value) -> str:
    """Bytes as decimal GB with two decimals."""
    return f"{float(Fraction(value) / units.GB):.2f} GB"


def _per_micro_batch(psi: int, stage: int, key: Key) -> str:
    """Elements one GPU sends per micro-batch, in Ψ, at the default and the tried accumulation."""
    counts = (key.default, key.tried)
    sent = [communication.elements_sent(Setup(psi, GPUS), Stage(stage), micro_batches=m) / m for m in counts]
    return " → ".join(f"{float(s / psi):g}Ψ" for s in sent) + " sent per micro-batch"


def numbers(key: Key) -> str:
    """The package's numbers for the example at the default and at the tried value, in a few words."""
    psi = transformer_model(SHAPE).params
    if key.path == "gradient_accumulation_steps":
        return "; ".join(f"stage {stage}: {_per_micro_batch(psi, stage, key)}" for stage in (1, 2))
    if key.path in ("bf16.enabled", "fp16.enabled"):
        mixed, fp32 = (memory.per_gpu(psi, GPUS, Stage(2), r).total for r in ("mixed-adam", "fp32-adam"))
        if key.path == "fp16.enabled":
            return (
                f"same bytes as bf16; largest value {largest('float16'):,} in fp16, "
                f"{float(largest('bfloat16')):.3g} in bf16"
            )
        return f"stage 2 model state per GPU: {_gb(mixed)} (bf16) → {_gb(fp32)} (fp32 weights and gradients)"
    if key.path.endswith("offload_optimizer.device"):
        gpu, host = offload.offloaded(psi, GPUS, Stage(2))
        held = memory.per_gpu(psi, GPUS, Stage(2)).total
        link = offload.link_bytes(psi, GPUS, Stage(2))
        return (
            f"stage 2 model state per GPU: {_gb(held)} → {_gb(gpu.total)}; {_gb(link)} over the link per step"
        )
    if key.path.endswith("pin_memory"):
        return "no change on the GPU; the host buffers are page-locked"
    return f"peak per GPU at stage {key.stage}: {_gb(peak(key, key.default))} → {_gb(peak(key, key.tried))}"


HEAD = ("key", "default", "tried", "changes", "what it does", "numbers (6.65B GPT, 8 GPUs)")


@dataclass(frozen=True, repr=False)
class KeyTable:
    """The keys as a table, with the package's numbers for the example model."""

    keys: tuple[Key, ...] = KEYS  #: the rows

    @cached_property
    def rows(self) -> list[list[str]]:
        """Every key as strings, computed once (each number is a step timeline or two)."""
        return [
            [k.path, _shown(k.default), _shown(k.tried), k.changes, k.effect, numbers(k)] for k in self.keys
        ]

    def get(self, path: str) -> Key:
        """The key at `path`."""
        found = [k for k in self.keys if k.path == path]
        if not found:
            raise ValueError(f"path must be one of {', '.join(k.path for k in self.keys)}, got {path!r}")
        return found[0]

    def __repr__(self) -> str:
        return "\n".join(" | ".join(row) for row in [list(HEAD), *self.rows])

    def _repr_markdown_(self) -> str:
        lines = [list(HEAD), ["---"] * len(HEAD), *self.rows]
        return "\n".join(
            "| " + " | ".join(cell.replace("|", "\\|") for cell in line) + " |" for line in lines
        )
