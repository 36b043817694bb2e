"""ZeRO's stages set against their PyTorch equivalents (FSDP2 and kin): what each shards, and the lab modes
that run each side, so a reader can find the bytes lessons 10 and 11 measure for it. No torch."""

from __future__ import annotations

from dataclasses import dataclass

from ..lab import modes

#: (DeepSpeed lab mode, PyTorch setting in words, PyTorch lab mode): each pair is set to the same paper stage
PAIRS = (
    ("ds_zero0", "DDP", "ddp"),
    ("ds_zero1", "DDP + ZeroRedundancyOptimizer", "zero_redundancy_optimizer"),
    ("ds_zero2", "fully_shard(reshard_after_forward=False), like FSDP1's SHARD_GRAD_OP", "fsdp_no_reshard"),
    ("ds_zero3", "fully_shard(), like FSDP1's FULL_SHARD", "fsdp_reshard"),
)
NAMES = {"optimizer": "optimizer state"}
#: Where a PyTorch setting's weights differ from its ZeRO stage's
WEIGHTS_NOTE = {
    "fsdp_no_reshard": ": every layer's whole weights during the step, as in ZeRO-2, but only shards between "
    "steps"
}
#: The one pair that is close, not equal, and runs in neither lab (it needs several machines)
HYBRID = (
    "ZeRO-3 with hpZ (closest, not equal)",
    "hpZ: as ZeRO-3, plus a second copy of the weights sharded within each node; HSDP: all three sharded "
    "within a node and replicated across nodes",
    "fully_shard(mesh=2-D DeviceMesh), hybrid sharding (HSDP)",
    "neither: one machine",
)


@dataclass(frozen=True, repr=False)
class Equivalents:
    """The pairs: the ZeRO stage, what it shards, PyTorch's equivalent, and the lab modes that run them."""

    def cells(self) -> list[list[str]]:
        """The table as strings, one row per stage, then hybrid sharding."""
        rows = []
        for deepspeed, torch, torch_mode in PAIRS:
            stage = modes.get(deepspeed).stage
            sharded = ", ".join(NAMES.get(s, s) for s in stage.partitioned) or "nothing"
            rows.append(
                [stage.label, sharded, torch + WEIGHTS_NOTE.get(torch_mode, ""), f"{deepspeed}, {torch_mode}"]
            )
        return [*rows, list(HYBRID)]

    def __repr__(self) -> str:
        return "\n".join(" | ".join(row) for row in self.cells())

    def _repr_markdown_(self) -> str:
        head = ["ZeRO stage", "sharded across the GPUs", "PyTorch equivalent", "lab modes (lessons 11, 10)"]
        lines = [head, ["---"] * 4, *self.cells()]
        return "\n".join("| " + " | ".join(line) + " |" for line in lines)
