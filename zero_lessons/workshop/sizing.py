"""Design questions about sizing: the cheapest cluster for a model, and why stage 3 can peak above stage 2."""

from __future__ import annotations

from fractions import Fraction

from .. import memory, units
from ..recipes import custom
from ..stages import Stage
from .checkpointing import ADAM
from .model import Question, Spec, first, gb, in_gb, in_gib, parts, rng

CLUSTER = "cheapest-cluster"
#: Cards on offer, by label, with their memory in GB and made-up prices in dollars per GPU-hour to draw from.
CARDS = {
    "24GB": (24, ("0.40", "0.50", "0.60")),
    "48GB": (48, ("0.90", "1.10", "1.30")),
    "80GB": (80, ("1.80", "2.20", "2.60")),
    "141GB": (141, ("3.00", "3.60", "4.20")),
}
CLUSTER_PROMPT = (
    "A model of {psi:,} parameters must train under ZeRO-3 with "
    + ADAM
    + ". With activation checkpointing its "
    "activations take {act} per GPU on any card. The cards on offer, with prices per GPU-hour made up for "
    "this exercise: {offer}. Rule: the cluster is some number of GPUs of one card, each holding its ZeRO-3 "
    "model state plus the activations; pick the cluster that costs least per hour."
)
CLUSTER_WORKING = (
    "Each GPU has its card's memory minus {act} for model state, and ZeRO-3 needs 16Ψ = {total} in all, so "
    "the count is ceil(16Ψ / (card − activations)). {lines}. The cheapest is {gpus} × {card} at "
    "${cost:,.2f} per hour."
)
CLUSTER_SPECS = (
    Spec(
        "card", "which card: " + ", ".join(CARDS), "compare GPU count × price for every card", kind="choice"
    ),
    Spec(
        "gpus",
        "how many GPUs of that card",
        "ceil(16Ψ / (card − activations)) under ZeRO-3",
        unit="GPUs",
        exact=True,
    ),
    Spec(
        "cost_per_hour",
        "what the cluster costs per hour, in dollars",
        "GPU count × price per GPU-hour",
        unit="$/h",
    ),
)
CLUSTER_WHY = {
    "fewest-not-cheapest": "that card needs the fewest GPUs, but more GPUs of a cheaper card cost less "
    "per hour",
    "cheapest-card-not-cluster": "that card is the cheapest per GPU, but it needs so many GPUs that the "
    "cluster costs more",
    "fewest-cost": "that is the cost of the cluster with the fewest GPUs, not of the cheapest one",
}


def cluster_costs(psi: int, act: int, prices: dict, recipe="mixed-adam") -> dict[str, tuple[int, Fraction]]:
    """For each card: the fewest GPUs whose ZeRO-3 model state plus activations fit, and the hourly cost."""
    out = {}
    for label, (size, _) in CARDS.items():
        gpus = memory.min_gpus(psi, size * units.GB - act, Stage.ZERO3, recipe)
        out[label] = (gpus, gpus * prices[label])
    return out


def _cluster_draw(r):
    """A model size, activations per GPU, and a price for each card."""
    prices = {label: Fraction(r.choice(options)) for label, (_, options) in CARDS.items()}
    return r.choice((13, 20, 34, 70, 110, 180)) * 10**9, r.choice((2, 4, 6, 8)) * units.GB, prices


def _cluster_fits(psi, act, prices) -> bool:
    """One cluster is clearly cheapest, and it is not the one with the fewest GPUs."""
    costs = cluster_costs(psi, act, prices)
    cheapest, second = sorted(cost for _, cost in costs.values())[:2]
    fewest = min(costs, key=lambda label: costs[label][0])
    return second > cheapest * Fraction(51, 50) and costs[fewest][1] != cheapest


def _cluster_answers(psi: int, act: int, prices: dict) -> tuple[dict, dict]:
    """The right value of every part, and the value each slip gives."""
    costs = cluster_costs(psi, act, prices)
    card = min(costs, key=lambda label: costs[label][1])
    fewest = min(costs, key=lambda label: costs[label][0])
    blind = memory.min_gpus(psi, CARDS[card][0] * units.GB, Stage.ZERO3)
    no_grads = memory.min_gpus(psi, CARDS[card][0] * units.GB - act, Stage.ZERO3, custom(2, 0, 12))
    values = dict(card=card, gpus=costs[card][0], cost_per_hour=costs[card][1])
    slips = {
        "card": [("fewest-not-cheapest", fewest), ("cheapest-card-not-cluster", min(prices, key=prices.get))],
        "gpus": [("ignored-activations", blind), ("forgot-gradients", no_grads)],
        "cost_per_hour": [("ignored-activations", blind * prices[card]), ("fewest-cost", costs[fewest][1])],
    }
    return values, slips


def cheapest_cluster(seed: int) -> Question:
    """Find the GPU count and card that hold a model under ZeRO-3 for the least money per hour."""
    psi, act, prices = first(rng(CLUSTER, seed), _cluster_draw, _cluster_fits)
    values, slips = _cluster_answers(psi, act, prices)
    costs = cluster_costs(psi, act, prices)
    offer = ", ".join(f"{label[:-2]} GB at ${float(prices[label]):.2f}" for label in CARDS)
    lines = "; ".join(f"{label[:-2]} GB: {n} GPUs, ${float(c):,.2f}/h" for label, (n, c) in costs.items())
    working = CLUSTER_WORKING.format(
        act=gb(act),
        total=gb(16 * psi),
        lines=lines,
        gpus=values["gpus"],
        card=values["card"][:-2] + " GB",
        cost=float(values["cost_per_hour"]),
    )
    given = dict(params=psi, activations_gb=int(in_gb(act)), prices={k: str(p) for k, p in prices.items()})
    prompt = CLUSTER_PROMPT.format(psi=psi, act=gb(act), offer=offer)
    answers = parts(CLUSTER_SPECS, values, slips, CLUSTER_WHY)
    point = "The cheapest cluster is neither the fewest GPUs nor the cheapest card: compare count × price."
    title = "The cheapest cluster"
    return Question(CLUSTER, title, seed, prompt, answers, working, point, tuple(given.items()))


ABOVE = "stage3-above-stage2"
ABOVE_PROMPT = (
    "A colleague trains a model of {psi:,} parameters on {gpus} GPUs with DeepSpeed, bf16 and Adam, and "
    "reports that ZeRO-3 peaked higher than ZeRO-2 (DeepSpeed issues #3734 and #5305 report the same). The "
    "config sets stage3_max_live_parameters = {live:,} and stage3_prefetch_bucket_size = {prefetch:,}, both "
    "in elements. Use this simple model: stage 3's peak is its model state, 16Ψ/N, plus up to (live + "
    "prefetch) gathered parameters of 2 bytes; stage 2's is 2Ψ + 14Ψ/N. Activations and other buffers are "
    "the same under both and left out."
)
ABOVE_WORKING = (
    "Stage 2 keeps {two} and stage 3 {three} per GPU: stage 3 saves {saving}, the weights' 2Ψ(1 − 1/N). "
    "Gathering may hold 2 × ({live:,} + {prefetch:,}) bytes = {gathered}, more than it saves. Stage 3 stays "
    "at or below stage 2 while 2 × (live + {prefetch:,}) ≤ {saving}, so live ≤ {best:,}."
)
ABOVE_SPECS = (
    Spec(
        "saving_gb",
        "how much less model state stage 3 keeps per GPU than stage 2, in GB",
        "stage 3 adds only the weights to what stage 2 splits: 2Ψ − 2Ψ/N",
        unit="GB",
    ),
    Spec(
        "gathered_gb",
        "the most bytes of gathered parameters stage 3 may hold at these settings, in GB",
        "(live parameters + one prefetch bucket) × 2 bytes in bf16",
        unit="GB",
    ),
    Spec(
        "max_live",
        "the largest stage3_max_live_parameters at which stage 3's peak stays at or below stage "
        "2's, in elements",
        "live + prefetch ≤ (stage 2 − stage 3 model state) / 2 bytes",
        unit="elements",
    ),
)
ABOVE_WHY = {
    "compared-with-dp": "that compares stage 3 with plain data parallelism, not with stage 2",
    "fp32-gathered": "gathered parameters are bf16 copies, 2 bytes each, not fp32",
    "forgot-prefetch": "the prefetch bucket counts against the same budget as the live parameters",
}


def _above_draw(r):
    """A model size, a GPU count, and the two stage 3 settings."""
    psi = r.choice((350, 560, 760, 1100, 1300, 1500, 2700)) * 10**6
    return psi, r.choice((2, 4, 8)), r.choice((5, 10, 20)) * 10**8, r.choice((5, 10, 20)) * 10**7


def _saving(psi: int, gpus: int) -> Fraction:
    """Bytes of model state stage 3 keeps less than stage 2, per GPU."""
    return memory.per_gpu(psi, gpus, 2).total - memory.per_gpu(psi, gpus, 3).total


def _above_fits(psi, gpus, live, prefetch) -> bool:
    """At these settings stage 3 can peak higher, and some smaller live setting would stop it."""
    saving = _saving(psi, gpus)
    return 2 * (live + prefetch) > saving and saving // 2 - prefetch >= 10**7


def _above_answers(psi: int, gpus: int, live: int, prefetch: int) -> tuple[dict, dict]:
    """The right value of every part, and the value each slip gives."""
    saving, gathered = _saving(psi, gpus), 2 * (live + prefetch)
    versus_dp = memory.per_gpu(psi, gpus, 0).total - memory.per_gpu(psi, gpus, 3).total
    values = dict(saving_gb=in_gb(saving), gathered_gb=in_gb(gathered), max_live=int(saving // 2) - prefetch)
    slips = {
        "saving_gb": [("compared-with-dp", in_gb(versus_dp)), ("gib-for-gb", in_gib(saving))],
        "gathered_gb": [("fp32-gathered", in_gb(2 * gathered)), ("forgot-prefetch", in_gb(2 * live))],
        "max_live": [("fp32-gathered", int(saving // 4) - prefetch), ("forgot-prefetch", int(saving // 2))],
    }
    return values, slips


def stage3_above_stage2(seed: int) -> Question:
    """Explain a "stage 3 used more memory than stage 2" report, and find the setting that reverses it."""
    psi, gpus, live, prefetch = first(rng(ABOVE, seed), _above_draw, _above_fits)
    values, slips = _above_answers(psi, gpus, live, prefetch)
    two, three = (memory.per_gpu(psi, gpus, s).total for s in (2, 3))
    working = ABOVE_WORKING.format(
        two=gb(two),
        three=gb(three),
        saving=gb(two - three),
        live=live,
        prefetch=prefetch,
        gathered=gb(2 * (live + prefetch)),
        best=values["max_live"],
    )
    prompt = ABOVE_PROMPT.format(psi=psi, gpus=gpus, live=live, prefetch=prefetch)
    given = dict(params=psi, gpus=gpus, max_live=live, prefetch=prefetch)
    return Question(
        ABOVE,
        "Stage 3 above stage 2",
        seed,
        prompt,
        parts(ABOVE_SPECS, values, slips, ABOVE_WHY),
        working,
        "Stage 3 saves only the weights over stage 2, and its gathered parameters can cost more.",
        tuple(given.items()),
    )
