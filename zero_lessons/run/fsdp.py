"""ZeRO's stages set against their PyTorch equivalents (FSDP2 and kin), with the bytes of the paper's three
model states (weights, gradients, optimizer state) that rank 0 holds in the lab's runs: the lab's predictions,
which lessons 08 and 09 measure equal on real ranks and print. Adam's step counters and the framework's other
scalars (a gradient norm, a flag) are left out here, as in those lessons' summaries. No torch."""

from __future__ import annotations

from dataclasses import dataclass

from ..lab import modes, predict_deepspeed, predict_torch

#: (ZeRO stage, DeepSpeed lab mode, PyTorch setting in words, PyTorch lab mode or None where unmeasured)
PAIRS = (
    ("ZeRO-0", "ds_zero0", "DDP: nothing sharded", "ddp"),
    ("ZeRO-1", "ds_zero1", "DDP + ZeroRedundancyOptimizer", "zero_redundancy_optimizer"),
    ("ZeRO-2", "ds_zero2", "fully_shard(reshard_after_forward=False), SHARD_GRAD_OP-like", "fsdp_no_reshard"),
    ("ZeRO-3", "ds_zero3", "fully_shard(), FULL_SHARD", "fsdp_reshard"),
    ("ZeRO-3 with hpZ", None, "fully_shard(mesh=2-D DeviceMesh): hybrid sharding, HSDP", None),
)


@dataclass(frozen=True, repr=False)
class Equivalents:
    """The pairs, with each lab mode's model-state bytes held by rank 0 of `gpus` ranks."""

    gpus: int = 2  #: world size the bytes are for

    def held(self, key: str | None) -> str:
        """Rank 0's weights, gradients and optimizer bytes under the lab mode `key`, or "not in the lab"."""
        if key is None:
            return "not in the lab"
        mode = modes.get(key)
        rule = predict_torch if mode.framework == modes.PYTORCH else predict_deepspeed
        return f"{rule.held(mode, self.gpus, 0).states:,}"

    def cells(self) -> list[list[str]]:
        """The table as strings."""
        return [[zero, self.held(ds), torch, self.held(pt)] for zero, ds, torch, pt in PAIRS]

    def __repr__(self) -> str:
        return "\n".join(" | ".join(row) for row in self.cells())

    def _repr_markdown_(self) -> str:
        head = [
            "ZeRO stage",
            "DeepSpeed: B after backward (bf16)",
            "PyTorch equivalent",
            "PyTorch: B after the step (fp32)",
        ]
        lines = [head, ["---"] * 4, *self.cells()]
        return "\n".join("| " + " | ".join(line) + " |" for line in lines)
