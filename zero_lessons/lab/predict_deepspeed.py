"""What DeepSpeed 0.19.8 holds and sends per rank, in bf16 with Adam, by the rules its code follows. No torch.

This is the paper's 2 + 2 + 12 world: bf16 weights and gradients, fp32 master weights and two fp32
Adam moments. Three layouts show up, and each needs its own count:

- stage 0 keeps one bf16 and one fp32 tensor per parameter, like the paper's plain data parallel;
- stages 1 and 2 flatten every parameter into one bf16 buffer, padded to a multiple of 2N elements
  (4-byte alignment for each of the N partitions), and give rank r the r-th equal slice. After the
  backward pass a rank keeps the gradients of every parameter that *touches* its slice, whole;
- stage 3 cuts every parameter on its own into N flat pieces of ⌈n/N⌉ elements, padded.

What is sent, message by message, follows DeepSpeed's bucket and fetch rules, stated once in
`planning.ds_traffic` so that the same rules predict a 7.5 B model (`planning.ds_scale`). The rules
read the mode's "zero_optimization" settings; a combination no run has shown yet is refused.
"""

from __future__ import annotations

from dataclasses import replace

from .. import memory
from ..planning import ds_traffic
from .model import MODEL, LabModel
from .modes import Mode
from .results import Held, Message, Predicted, Traffic

#: DeepSpeed's defaults for the settings these rules read.
DEFAULTS = {
    "reduce_bucket_size": 500_000_000,
    "use_multi_rank_bucket_allreduce": True,
    "stage3_max_live_parameters": 1_000_000_000,
    "stage3_param_persistence_threshold": 100_000,
    "stage3_prefetch_bucket_size": 50_000_000,
    "stage3_max_reuse_distance": 1_000_000_000,
}
FP32 = 4  #: Adam's step counter and DeepSpeed's fp32 scalars


def setting(mode: Mode, name: str):
    """A "zero_optimization" setting of `mode`, or DeepSpeed's default."""
    return mode.zero.get(name, DEFAULTS[name])


padded_flat = ds_traffic.padded_flat


def slice_len(psi: int, gpus: int) -> int:
    """Elements in each rank's slice of the stage 1/2 flat buffer, padding included."""
    return padded_flat(psi, gpus) // gpus


def shard(n: int, gpus: int) -> int:
    """Elements of one rank's stage 3 piece of an n-element parameter: ⌈n/N⌉, padded."""
    return memory.ceil_div(n, gpus)


touched_gradients = ds_traffic.touched_gradients


def persistent(mode: Mode, model: LabModel = MODEL) -> list[int]:
    """Sizes of the stage 3 parameters kept whole: up to `stage3_param_persistence_threshold` elements."""
    return [n for n in model.sizes if n <= setting(mode, "stage3_param_persistence_threshold")]


def held(mode: Mode, gpus: int, rank: int, model: LabModel = MODEL) -> Held:
    """Bytes this rank holds after the backward pass of a step (before `engine.step()`)."""
    sizes, psi = model.sizes, model.param_count
    weights, grads, optimizer = (int(mode.recipe.bytes_for(s)) for s in ("weights", "gradients", "optimizer"))
    if mode.stage == 0:
        return Held(weights * psi, grads * psi, optimizer * psi, FP32 * len(sizes), 0)
    if mode.stage in (1, 2):  # "other": the global gradient norm, one fp32 scalar
        return Held(
            weights * padded_flat(psi, gpus),
            grads * touched_gradients(sizes, gpus, rank),
            optimizer * slice_len(psi, gpus),
            FP32,
            FP32,
        )
    mine = sum(shard(n, gpus) for n in sizes)
    # Persistent parameters stay whole, padded to N pieces, beside the piece. On one rank DeepSpeed does
    # not gather at all: each parameter is a view of its own piece, so the two are one storage.
    whole = sum(gpus * shard(n, gpus) for n in persistent(mode, model)) if gpus > 1 else 0
    return Held(weights * (mine + whole), grads * mine, optimizer * mine, FP32, 8 + 1)  # fp64 norm, bool flag


def before_reduction(mode: Mode, gpus: int, rank: int, model: LabModel = MODEL) -> Held | None:
    """Stage 1's bytes as it starts reducing, at the end of the backward pass: every bf16 gradient whole
    on every rank, as in the paper's ZeRO-1, beside the padded weights and the optimizer slice. None at
    other stages: stage 0 never splits its gradients, and stages 2 and 3 reduce bucket by bucket."""
    if mode.stage != 1:
        return None
    grads = int(mode.recipe.bytes_for("gradients"))
    return replace(held(mode, gpus, rank, model), gradients=grads * model.param_count)


def _gather_messages(mode: Mode, gpus: int, model: LabModel) -> list[Message]:
    """Stage 3's all-gathers in a steady-state step, on more than one rank."""
    kept = persistent(mode, model)
    if len(kept) == len(model.sizes):  # every parameter whole: each rebuilt after the optimizer step
        return [Message("all_gather", gpus * shard(n, gpus), "bfloat16") for n in model.sizes]
    if kept:
        raise ValueError(
            f"no prediction for mode {mode.key!r}: it keeps some parameters whole and shards others, "
            "which no lab run has measured yet"
        )
    sizes = model.sizes
    gathers = ds_traffic.stage3_gathers(
        model.layers,
        setting(mode, "stage3_prefetch_bucket_size"),
        setting(mode, "stage3_max_live_parameters"),
        setting(mode, "stage3_max_reuse_distance"),
    )
    return [
        Message("all_gather", ds_traffic.pieces([sizes[i] for i in g], gpus), "bfloat16") for g in gathers
    ]


def messages(mode: Mode, gpus: int, model: LabModel = MODEL) -> tuple[Message, ...]:
    """Every collective of one steady-state step."""
    psi, bucket = model.param_count, setting(mode, "reduce_bucket_size")
    if mode.stage == 0:
        return (Message("all_reduce", psi, "bfloat16"),)
    if mode.stage in (1, 2):
        flag = setting(mode, "use_multi_rank_bucket_allreduce")
        reduces = ds_traffic.stage12_reduces(model.layers, int(mode.stage), gpus, bucket, flag)
        control = [Message("all_reduce", 1, "uint8"), Message("all_reduce", 1, "float32")]  # overflow, norm
        gather = [Message("all_gather", padded_flat(psi, gpus), "bfloat16")] if gpus > 1 else []
        return tuple(sorted([Message(op, n, "bfloat16") for op, n in reduces] + control + gather))
    scatters = ds_traffic.stage3_reduce_scatters(model.layers, gpus, bucket)
    out = [Message("reduce_scatter", n, "bfloat16") for n in scatters] + [Message("all_reduce", 1, "float64")]
    # On one rank, DeepSpeed makes each parameter a view of its piece instead of gathering.
    return tuple(sorted(out + (_gather_messages(mode, gpus, model) if gpus > 1 else [])))


def predict(mode: Mode, gpus: int, rank: int, model: LabModel = MODEL) -> Predicted:
    """What one rank of a DeepSpeed mode holds and sends, message by message."""
    return Predicted(
        held(mode, gpus, rank, model),
        Traffic.of(messages(mode, gpus, model)),
        before_reduction(mode, gpus, rank, model),
    )
