"""The key under a stage-3 run's bytes table: what each column holds, as sums a reader can check. No torch."""

from __future__ import annotations

from dataclasses import dataclass

from .. import checks
from ..lab.predict_deepspeed import DEFAULTS, shard
from ..lab.results import Held
from .predict import BF16, FP32, FP64, MODEL

#: DeepSpeed's default: tensors of up to this many elements stay whole on every rank
THRESHOLD = DEFAULTS["stage3_param_persistence_threshold"]
ADAM = 12  #: bytes per element of the fp32 master weights and AdamW's two fp32 moments


@dataclass(frozen=True, repr=False)
class Legend:
    """Each column of a bf16 ZeRO-3 run of the script (no offload) on `ranks` ranks, in bytes per rank."""

    ranks: int = 2  #: the world size, 2 or more (on one rank DeepSpeed keeps no separate whole copies)

    def __post_init__(self):
        checks.whole("ranks", self.ranks, low=2, high=1024)

    @property
    def piece(self) -> int:
        """Elements of the rank's piece of every tensor."""
        return sum(shard(n, self.ranks) for n in MODEL.sizes)

    @property
    def kept(self) -> list[int]:
        """Sizes of the tensors under the persistence threshold, kept whole on every rank."""
        return [n for n in MODEL.sizes if n <= THRESHOLD]

    def held(self) -> Held:
        """The bytes the legend explains, by column."""
        whole = sum(self.ranks * shard(n, self.ranks) for n in self.kept)
        return Held(BF16 * (self.piece + whole), BF16 * self.piece, ADAM * self.piece, FP32, FP64 + 1)

    def lines(self) -> list[tuple[str, str]]:
        """(column, what it holds) for each column of the table."""
        part, held = self.piece, self.held()
        whole = (held.weights - BF16 * part) // BF16
        share = f"Ψ/{self.ranks} = {part:,}"
        return [
            ("weights", f"the rank's bf16 piece of every tensor, {share} elements × {BF16} B, plus the "
             f"{len(self.kept)} tensors under the persistence threshold ({THRESHOLD:,} elements) kept "
             f"whole beside it, {whole:,} elements × {BF16} B: {BF16 * part:,} + {BF16 * whole:,} = "
             f"{held.weights:,}"),
            ("gradients", f"the bf16 gradients of the rank's piece only, {BF16} B × {part:,} = "
             f"{held.gradients:,}"),
            ("optimizer", f"fp32 master weights and AdamW's two moments for the piece, {ADAM} B × {part:,} "
             f"= {held.optimizer:,}"),
            ("step counters", f"AdamW's step count: one fp32 tensor, as DeepSpeed lays the rank's pieces "
             f"end to end in one flat fp32 tensor for the optimizer: {FP32}"),
            ("other", f"DeepSpeed's fp64 gradient norm ({FP64}) and a 1-byte bool flag, stage 3's inf/NaN "
             f"tracker, which it keeps even under bf16: {FP64 + 1}"),
        ]  # fmt: skip

    def __repr__(self) -> str:
        return "\n".join(f"{name}: {text}" for name, text in self.lines())

    def _repr_markdown_(self) -> str:
        head = (
            f"Bytes per rank in the last training step, before `engine.step()` (Ψ = {MODEL.param_count:,}): "
            "*measured* from the rank's tensors, *predicted* by the package."
        )
        return head + "\n\n" + "\n".join(f"- **{name}**: {text}" for name, text in self.lines())
