"""The same memory and communication model as sympy expressions, for derivations in the lessons.

The notation follows the ZeRO paper: Ψ (`params`), N_d (`gpus`), K (`optimizer_bytes`),
with b_w and b_g for the weight and gradient bytes the paper fixes at 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from fractions import Fraction

import sympy as sp

from . import communication
from .recipes import STATES, Recipe, get
from .stages import Stage, as_stage

Psi = sp.Symbol("Psi", positive=True)  #: Ψ, the number of parameters
N_d = sp.Symbol("N_d", positive=True, integer=True)  #: N_d, the data-parallel degree
M = sp.Symbol("M", positive=True)  #: per-GPU memory budget in bytes
#: Bytes per parameter for each state: b_w (weights), b_g (gradients), K (optimizer).
BYTES = {"weights": sp.Symbol("b_w", nonnegative=True), "gradients": sp.Symbol("b_g", nonnegative=True),
         "optimizer": sp.Symbol("K", nonnegative=True)}


def numbers(recipe: Recipe | str) -> dict[sp.Symbol, sp.Rational]:
    """The substitution that turns b_w, b_g and K into `recipe`'s numbers."""
    recipe = get(recipe)
    return {BYTES[s]: sp.Rational(str(Fraction(recipe.bytes_for(s)))) for s in STATES}


def per_gpu_expr(stage: Stage | int | str, recipe: Recipe | str | None = None) -> sp.Expr:
    """Per-GPU model-state bytes: replicated states times Ψ, partitioned ones times Ψ/N_d."""
    stage = as_stage(stage)
    expr = sum(BYTES[s] * Psi / (N_d if stage.partitions(s) else 1) for s in STATES)
    return expr if recipe is None else sp.expand(expr.subs(numbers(recipe)))


@lru_cache(maxsize=256)  # solving is slow and the answers never change
def limit_expr(stage: Stage | int | str, recipe: Recipe | str | None = None) -> sp.Expr:
    """Per-GPU bytes as N_d → ∞: what no number of GPUs can remove."""
    return sp.limit(per_gpu_expr(stage, recipe), N_d, sp.oo)


@lru_cache(maxsize=256)  # solving is slow and the answers never change
def max_params_expr(stage: Stage | int | str, recipe: Recipe | str | None = None) -> sp.Expr:
    """The largest Ψ that fits in M bytes per GPU, solved from per-GPU bytes = M."""
    (solution,) = sp.solve(sp.Eq(per_gpu_expr(stage, recipe), M), Psi)
    return sp.simplify(solution)


@lru_cache(maxsize=256)  # solving is slow and the answers never change
def min_gpus_expr(stage: Stage | int | str, recipe: Recipe | str | None = None) -> sp.Expr:
    """The N_d at which per-GPU bytes equal M; round up to get the fewest GPUs that fit."""
    expr = per_gpu_expr(stage, recipe)
    if not expr.has(N_d):
        raise ValueError(f"{as_stage(stage).label} partitions nothing, so the GPU count does not change the fit")
    (solution,) = sp.solve(sp.Eq(expr, M), N_d)
    return sp.simplify(solution)


def comm_expr(stage: Stage | int | str, ring: bool = False) -> sp.Expr:
    """Elements one GPU sends per step, in Ψ and (with `ring`) N_d."""
    total = sum(c.multiple for c in communication.collectives(stage)) * Psi
    return total * (N_d - 1) / N_d if ring else total


def evaluate(expr: sp.Expr, recipe: Recipe | str, **values) -> Fraction:
    """Exact value of `expr` for `recipe` and values such as params=…, gpus=…, memory=…."""
    names = {"params": Psi, "gpus": N_d, "memory": M}
    subs = numbers(recipe) | {names[k]: sp.Rational(str(Fraction(v))) for k, v in values.items()}
    result = sp.sympify(expr).subs(subs)
    if not result.is_Rational:
        raise ValueError(f"give a value for each of {sorted(map(str, result.free_symbols))}")
    return Fraction(int(result.p), int(result.q))


@dataclass(frozen=True)
class Step:
    """One line of a derivation: what is added, and the running expression."""

    label: str  #: the reason for this line, e.g. "fp32 momentum"
    expr: sp.Expr  #: the expression after this line


@dataclass(frozen=True, repr=False)
class Derivation:
    """A worked derivation that a notebook shows line by line."""

    title: str  #: what is being derived
    steps: tuple[Step, ...]  #: the lines, first to last

    @property
    def result(self) -> sp.Expr:
        """The last line's expression."""
        return self.steps[-1].expr

    def __repr__(self) -> str:
        width = max(len(s.label) for s in self.steps)
        return "\n".join([self.title, *(f"  {s.label:<{width}}  {sp.sstr(s.expr)}" for s in self.steps)])

    def _repr_markdown_(self) -> str:
        lines = [f"**{self.title}**", "", "| step | running total |", "| --- | --- |"]
        return "\n".join(lines + [f"| {s.label} | ${sp.latex(s.expr)}$ |" for s in self.steps])


def bytes_per_param(recipe: Recipe | str) -> Derivation:
    """Add up a recipe's arrays one by one, from the first part to the total times Ψ."""
    recipe = get(recipe)
    running, steps = sp.Integer(0), []
    for part in recipe.parts:
        term = sp.Rational(str(Fraction(part.nbytes)))
        running += term
        shown = sp.Add(*[sp.Rational(str(Fraction(p.nbytes))) for p in recipe.parts[: len(steps) + 1]],
                       evaluate=False)
        steps.append(Step(f"+ {part.label} ({part.state})", shown))
    steps.append(Step("bytes per parameter", running))
    steps.append(Step("model state for Ψ parameters", running * Psi))
    return Derivation(f"Bytes per parameter under {recipe.name}", tuple(steps))


def stage_derivation(stage: Stage | int | str, recipe: Recipe | str) -> Derivation:
    """From the general per-GPU formula to `recipe`'s numbers and the N_d → ∞ limit."""
    stage = as_stage(stage)
    general = per_gpu_expr(stage)
    steps = (Step("replicate or split each state", general),
             Step(f"substitute {get(recipe).name}", per_gpu_expr(stage, recipe)),
             Step("as N_d → ∞", limit_expr(stage, recipe)))
    return Derivation(f"{stage.label} ({stage.paper_name}) per-GPU model state", steps)
