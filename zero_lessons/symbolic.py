"""The same memory and communication model as sympy expressions, for derivations in the lessons.

The notation follows the ZeRO paper: Ψ (`params`), N_d (`gpus`), K (`optimizer_bytes`),
with b_w and b_g for the weight and gradient bytes the paper fixes at 2. No text is ever
handed to sympy's parser: `evaluate` takes expressions built here, never strings.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import sympy as sp

from . import checks, communication, units
from .recipes import Recipe, RecipeLike, get
from .stages import STATES, Stage, StageLike, as_stage

Psi = sp.Symbol("Psi", positive=True)  #: Ψ, the number of parameters
N_d = sp.Symbol("N_d", positive=True, integer=True)  #: N_d, the data-parallel degree
M = sp.Symbol("M", positive=True)  #: memory per GPU in bytes (`gpu_memory`)
#: Bytes per parameter for each state: b_w (weights), b_g (gradients), K (optimizer).
BYTES = {
    "weights": sp.Symbol("b_w", nonnegative=True),
    "gradients": sp.Symbol("b_g", nonnegative=True),
    "optimizer": sp.Symbol("K", nonnegative=True),
}


def numbers(recipe: RecipeLike) -> dict[sp.Symbol, sp.Rational]:
    """The substitution that turns b_w, b_g and K into `recipe`'s numbers."""
    recipe = get(recipe)
    return {BYTES[s]: _rational(recipe.bytes_for(s)) for s in STATES}


def _rational(value: Fraction | int) -> sp.Rational:
    """An exact number as a sympy Rational, built from its numerator and denominator (never from text)."""
    value = Fraction(value)
    return sp.Rational(value.numerator, value.denominator)


def per_gpu_expr(stage: StageLike, recipe: RecipeLike | None = None) -> sp.Expr:
    """Per-GPU model-state bytes: replicated states times Ψ, partitioned ones times Ψ/N_d."""
    stage = as_stage(stage)
    expr = sum(BYTES[s] * Psi / (N_d if stage.partitions(s) else 1) for s in STATES)
    return expr if recipe is None else sp.expand(expr.subs(numbers(recipe)))


def _checked(stage, recipe) -> tuple[Stage, Recipe | None]:
    """Stage and recipe checked before they reach a cache, which would hash them first."""
    return as_stage(stage), None if recipe is None else get(recipe)


def limit_expr(stage: StageLike, recipe: RecipeLike | None = None) -> sp.Expr:
    """Per-GPU bytes as N_d → ∞: what no number of GPUs can remove."""
    return _limit(*_checked(stage, recipe))


def max_params_expr(stage: StageLike, recipe: RecipeLike | None = None) -> sp.Expr:
    """The largest Ψ that fits in M bytes per GPU, solved from per-GPU bytes = M."""
    return _max_params(*_checked(stage, recipe))


def min_gpus_expr(stage: StageLike, recipe: RecipeLike | None = None) -> sp.Expr:
    """The N_d at which per-GPU bytes equal M; round up to get the fewest GPUs that fit."""
    return _min_gpus(*_checked(stage, recipe))


@lru_cache(maxsize=256)  # solving is slow and the answers never change
def _limit(stage: Stage, recipe: Recipe | None) -> sp.Expr:
    return sp.limit(per_gpu_expr(stage, recipe), N_d, sp.oo)


@lru_cache(maxsize=256)
def _max_params(stage: Stage, recipe: Recipe | None) -> sp.Expr:
    (solution,) = sp.solve(sp.Eq(per_gpu_expr(stage, recipe), M), Psi)
    return sp.simplify(solution)


@lru_cache(maxsize=256)
def _min_gpus(stage: Stage, recipe: Recipe | None) -> sp.Expr:
    expr = per_gpu_expr(stage, recipe)
    if not expr.has(N_d):
        raise ValueError(
            f"stage must be 1, 2 or 3: {stage.label} partitions nothing, so the GPU count "
            f"does not change the fit"
        )
    (solution,) = sp.solve(sp.Eq(expr, M), N_d)
    return sp.simplify(solution)


def comm_expr(stage: StageLike, ring: bool = False) -> sp.Expr:
    """Elements one GPU sends per step, in Ψ and (with `ring`) N_d."""
    total = sum(c.multiple for c in communication.collectives(stage)) * Psi
    return total * (N_d - 1) / N_d if checks.flag("ring", ring) else total


#: What `evaluate` may be given a value for, and how each value is checked.
VALUES = {
    "params": (Psi, checks.params),
    "gpus": (N_d, checks.gpus),
    "gpu_memory": (M, lambda v: units.as_bytes("gpu_memory", v)),
}
#: Largest power `evaluate` accepts in an expression: the model's formulas use at most 1/N_d.
MAX_POWER = 4


def evaluate(expr: sp.Expr, recipe: RecipeLike, **values) -> Fraction:
    """Exact value of `expr` for `recipe` and values such as params=…, gpus=…, gpu_memory=….

    `expr` must be a sympy expression, such as `per_gpu_expr(1)`; text is refused, never parsed,
    because sympy's parser runs Python. Its symbols must be this module's, with small powers.
    """
    if isinstance(expr, str) or not isinstance(expr, sp.Expr):
        raise TypeError(
            f"expr must be a sympy expression such as symbolic.per_gpu_expr(1), got {checks.kind(expr)}"
        )
    known = {Psi, N_d, M, *BYTES.values()}
    if not expr.free_symbols <= known:
        raise ValueError(
            f"expr may use only {', '.join(sorted(map(str, known)))}, "
            f"got {', '.join(sorted(map(str, expr.free_symbols - known)))}"
        )
    if any(not (p.exp.is_Integer and abs(p.exp) <= MAX_POWER) for p in expr.atoms(sp.Pow)):
        raise ValueError(f"expr may raise to whole powers from -{MAX_POWER} to {MAX_POWER} only")
    for key in values:
        checks.choice("value name", key, VALUES)
    subs = numbers(recipe) | {VALUES[k][0]: _rational(VALUES[k][1](v)) for k, v in values.items()}
    result = expr.subs(subs)
    if not result.is_Rational:
        raise ValueError(
            f"values must give params=…, gpus=… or gpu_memory=… for each of "
            f"{', '.join(sorted(map(str, result.free_symbols)))}"
        )
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
    heads: tuple[str, str] = ("step", "running total")  #: the two column headings of the table

    @property
    def result(self) -> sp.Expr:
        """The last line's expression."""
        return self.steps[-1].expr

    def __repr__(self) -> str:
        width = max(len(s.label) for s in self.steps)
        return "\n".join([self.title, *(f"  {s.label:<{width}}  {sp.sstr(s.expr)}" for s in self.steps)])

    def _repr_markdown_(self) -> str:
        lines = [f"**{self.title}**", "", f"| {self.heads[0]} | {self.heads[1]} |", "| --- | --- |"]
        return "\n".join(lines + [f"| {s.label} | ${sp.latex(s.expr)}$ |" for s in self.steps])


def bytes_per_param(recipe: RecipeLike) -> Derivation:
    """Add up a recipe's arrays one by one, from the first part to the total times Ψ."""
    recipe = get(recipe)
    running, steps = sp.Integer(0), []
    for part in recipe.parts:
        term = _rational(part.nbytes)
        running += term
        shown = sp.Add(*[_rational(p.nbytes) for p in recipe.parts[: len(steps) + 1]], evaluate=False)
        steps.append(Step(f"+ {part.label} ({part.state})", shown))
    steps.append(Step("bytes per parameter", running))
    steps.append(Step("model state for Ψ parameters", running * Psi))
    return Derivation(f"Bytes per parameter under {recipe.name}", tuple(steps))


def stage_derivation(stage: StageLike, recipe: RecipeLike) -> Derivation:
    """From the general per-GPU formula to `recipe`'s numbers and the N_d → ∞ limit."""
    stage = as_stage(stage)
    general = per_gpu_expr(stage)
    steps = (
        Step("replicate or split each state", general),
        Step(f"substitute {get(recipe).name}", per_gpu_expr(stage, recipe)),
        Step("as N_d → ∞", limit_expr(stage, recipe)),
    )
    return Derivation(
        f"{stage.label} ({stage.paper_name}) per-GPU model state", steps, ("step", "bytes per GPU")
    )


def by_stage(title: str, exprs, head: str) -> Derivation:
    """One expression per stage, in stage order, shown as a table whose second column is headed `head`."""
    checks.instance("title", title, str, "text")
    checks.instance("head", head, str, "text")
    exprs = tuple(exprs) if isinstance(exprs, (list, tuple)) else exprs
    if (
        not isinstance(exprs, tuple)
        or len(exprs) != len(Stage)
        or not all(isinstance(e, sp.Expr) for e in exprs)
    ):
        raise ValueError(
            f"exprs must be a list of {len(Stage)} sympy expressions, one per stage, in stage order"
        )
    return Derivation(
        title, tuple(Step(s.label, e) for s, e in zip(Stage, exprs, strict=True)), ("stage", head)
    )
