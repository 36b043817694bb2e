"""A run's reports, one summary per config: each rank's bytes held beside the prediction, its losses, and
the checkpoint's round trip. Text for the command line, HTML for a lesson, plain data for JSON. No torch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from html import escape
from itertools import groupby
from pathlib import Path

from ..lab.results import FIELDS, Held
from ..present.html import table_row, table_start
from . import predict
from .launcher import RankReport, RunReport, read_configs

#: Column names of the bytes-held table.
HEAD = ("ranks", "source", "weights", "gradients", "optimizer", "step counters", "other", "total")
#: What a successful report proves about the checkpoint: `train.round_trip` asserts it on every rank. With the
#: optimizer offloaded, DeepSpeed's CPU Adam gives the next step to 1e-4 of its size, not bit for bit.
ROUND_TRIP = "saved; resumed into a fresh engine with equal weights and {} next step on every rank"
NEXT_STEP = {False: "an equal", True: "the same (to 1e-4 of the step: CPU Adam's bias correction)"}


@dataclass(frozen=True, repr=False)
class Summary:
    """One config's run: every rank's report, and what the package predicts each rank holds."""

    config: str  #: the config file's name
    ranks: tuple[RankReport, ...]  #: one report per rank, in rank order
    predicted: tuple[Held, ...] | None  #: per rank; None where the package has no rule for the config
    why_not: str | None  #: why there is no prediction, if there is none

    @property
    def stage(self) -> int:
        """The config's ZeRO stage."""
        return self.ranks[0].stage

    @property
    def title(self) -> str:
        """E.g. "ds.json: ZeRO-2 with optimizer offloaded, 2 ranks, Ψ = 283,656 parameters; bytes per rank"
        (the table's cells are bytes)."""
        first = self.ranks[0]
        offload = "" if first.offload == "none" else f" with {first.offload} offloaded"
        return (
            f"{self.config}: ZeRO-{self.stage}{offload}, {first.world} ranks, "
            f"Ψ = {first.params:,} parameters; bytes per rank"
        )

    @property
    def differences(self) -> list[str]:
        """Each field a rank held other than predicted: "rank 1 gradients: measured 0, predicted 533,520"."""
        if self.predicted is None:
            return []
        return [
            f"{self.config} rank {r.rank} {field}: measured {r.held[field]:,}, "
            f"predicted {getattr(p, field):,}"
            for r, p in zip(self.ranks, self.predicted, strict=True)
            for field in FIELDS
            if r.held[field] != getattr(p, field)
        ]

    @property
    def as_predicted(self) -> bool:
        """Whether every rank held what the package predicts (True when there is nothing to compare)."""
        return not self.differences

    @property
    def mean_losses(self) -> tuple[float, ...]:
        """Each step's loss averaged over the ranks: the loss whose gradient the step takes, since the
        ranks average their gradients."""
        return tuple(sum(step) / len(step) for step in zip(*(r.losses for r in self.ranks), strict=True))

    @property
    def consolidation(self) -> str:
        """What DeepSpeed's zero_to_fp32 rebuilt, in words."""
        count = self.ranks[0].consolidated
        if count is None:
            return "none: a stage-0 checkpoint has no ZeRO shards for zero_to_fp32 to read"
        return f"zero_to_fp32 rebuilt {count} fp32 tensors on rank 0, equal to the trained weights"

    def rows(self) -> list[list[str]]:
        """The bytes-held table: per rank a measured line and a predicted one, or one "measured = predicted"
        line where they agree; ranks in a row whose lines are the same share them ("0, 1", "0–7")."""
        lines = []
        for i, r in enumerate(self.ranks):
            measured = (*(f"{r.held[f]:,}" for f in FIELDS), f"{r.total:,}")
            if self.predicted is None:
                lines.append(((("measured", *measured),), r.rank))
                continue
            p = self.predicted[i]
            predicted = (*(f"{getattr(p, f):,}" for f in FIELDS), f"{sum(getattr(p, f) for f in FIELDS):,}")
            pair = (("measured", *measured), ("predicted", *predicted))
            lines.append(((("measured = predicted", *measured),) if measured == predicted else pair, r.rank))
        groups = [(held, [rank for _, rank in run]) for held, run in groupby(lines, key=lambda line: line[0])]
        return [
            [_ranks(ranks) if j == 0 else "", *line] for held, ranks in groups for j, line in enumerate(held)
        ]

    def notes(self) -> list[tuple[str, str]]:
        """The lines under the table: losses, skipped steps, checkpoint, consolidation, verdict."""
        per_rank = [(f"rank {r.rank}", r.losses) for r in self.ranks]
        shown = [*per_rank, ("mean", self.mean_losses)] if len(self.ranks) > 1 else per_rank
        losses = " | ".join(f"{name}: " + " ".join(f"{x:.4f}" for x in xs) for name, xs in shown)
        skipped = ", ".join(f"rank {r.rank}: {r.skipped_steps}" for r in self.ranks)
        verdict = "yes" if self.as_predicted else "NO: " + "; ".join(self.differences)
        return [
            ("losses", losses),
            ("skipped steps", skipped),
            ("checkpoint", ROUND_TRIP.format(NEXT_STEP["optimizer" in self.ranks[0].offload])),
            ("checkpoint files", ", ".join(self.ranks[0].files or ()) or "not listed"),
            ("consolidated", self.consolidation),
            ("as predicted", f"not predicted: {self.why_not}" if self.predicted is None else verdict),
        ]

    def to_text(self) -> str:
        """Aligned plain text: the title, the table, then the notes."""
        grid = [list(HEAD), *self.rows()]
        widths = [max(len(line[i]) for line in grid) for i in range(len(HEAD))]
        table = [
            "  "
            + "  ".join(
                c.rjust(w) if i != 1 else c.ljust(w)
                for i, (c, w) in enumerate(zip(line, widths, strict=True))
            ).rstrip()
            for line in grid
        ]
        labelled = self.notes()
        width = max(len(name) for name, _ in labelled) + 2  # the longest label and two spaces
        notes = [f"  {name:<{width}}{text}" for name, text in labelled]
        return "\n".join([self.title, *table, *notes])

    def __repr__(self) -> str:
        return self.to_text()

    def _repr_html_(self) -> str:
        body = "".join(table_row(line, left=2) for line in self.rows())
        notes = "".join(f"<li><b>{name}</b>: {escape(text)}</li>" for name, text in self.notes())
        head = table_row(list(HEAD), left=2, header=True)
        return f"{table_start('zero-run', self.title)}{head}{body}</table><ul>{notes}</ul>"

    def to_dict(self) -> dict:
        """Plain data for JSON: each rank's report and prediction, and the verdict."""
        predicted = [asdict(p) for p in self.predicted] if self.predicted is not None else None
        return {
            "config": self.config,
            "ranks": [asdict(r) | {"total": r.total} for r in self.ranks],
            "predicted": predicted,
            "not_predicted": self.why_not,
            "differences": self.differences,
            "as_predicted": self.as_predicted,
        }


def _ranks(ranks: list[int]) -> str:
    """A run of consecutive ranks as the table names it: "1", "0, 1" or "0–7"."""
    return ", ".join(map(str, ranks)) if len(ranks) < 3 else f"{ranks[0]}–{ranks[-1]}"


def summarize(reports: Sequence[RankReport], config: dict) -> Summary:
    """The summary of one config's rank reports, with the package's prediction where it has one."""
    why = predict.unpredicted(config)
    if len(reports[0].losses) < 2:
        why = "one step only: its snapshot comes before the first optimizer step creates Adam's state"
    predicted = None if why else tuple(predict.expected(config, r.world, r.rank) for r in reports)
    return Summary(reports[0].config, tuple(reports), predicted, why)


def summaries(report: RunReport, paths: Sequence[str | Path]) -> tuple[Summary, ...]:
    """One summary per config file of a launch, in the order given."""
    configs = read_configs(paths)
    return tuple(summarize(report.of(path.name), config) for path, config in configs.items())


def to_text(found: Sequence[Summary]) -> str:
    """Every summary as text, a blank line apart."""
    return "\n\n".join(s.to_text() for s in found)
