"""Design questions about sizing: the cheapest cluster for a model, and why stage 3 can peak above stage 2."""

from __future__ import annotations

from fractions import Fraction

from .. import memory, units
from ..planning.headroom import HEADROOM, budget
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
    "this exercise: {offer}. Rule: the cluster is any number of GPUs of one card (not only whole nodes), "
    "each holding its ZeRO-3 model state plus the activations within the card's whole memory (this sheet "
    "keeps no headroom); pick the cluster that costs least per hour."
)
CLUSTER_WORKING = (
    "Each GPU keeps {act} for activations and the rest of its card for model state; "
    "ZeRO-3 needs 16Ψ = {total} in all, so "
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
    "kept-headroom": "that keeps 10% of each card free, as lesson 04's advise does; this question counts "
    "the card's whole memory",
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
    roomy = memory.min_gpus(psi, budget(CARDS[card][0] * units.GB, HEADROOM) - act, Stage.ZERO3)
    values = dict(card=card, gpus=costs[card][0], cost_per_hour=costs[card][1])
    slips = {
        "card": [("fewest-not-cheapest", fewest), ("cheapest-card-not-cluster", min(prices, key=prices.get))],
        "gpus": [("ignored-activations", blind), ("forgot-gradients", no_grads), ("kept-headroom", roomy)],
        "cost_per_hour": [
            ("ignored-activations", blind * prices[card]),
            ("fewest-cost", costs[fewest][1]),
            ("kept-headroom", roomy * prices[card]),
        ],
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
    point = (
        "The fewest GPUs never make the cheapest cluster, and the cheapest card does not always: "
        "compare count × price."
    )
    title = "The cheapest cluster"
    return Question(CLUSTER, title, seed, prompt, answers, working, point, tuple(given.items()))


ABOVE = "stage3-above-stage2"
#: DeepSpeed's stage-3 defaults (runtime/zero/config.py), in elements.
PREFETCH, REUSE = 50_000_000, 1_000_000_000
#: The stage-3 settings a question may ask about, by their names without the "stage3_" prefix.
KNOBS = ("max_live_parameters", "prefetch_bucket_size", "max_reuse_distance")
ABOVE_PROMPT = (
    "A colleague trains a model of {psi:,} parameters, in {layers} layers of equal size, on {gpus} GPUs "
    "with DeepSpeed, bf16 and Adam, and reports that ZeRO-3 peaked higher than ZeRO-2 (DeepSpeed issues "
    "#3734 and #5305 report the same). The config sets stage3_max_live_parameters = {live:,} and leaves "
    "stage3_prefetch_bucket_size (50,000,000) and stage3_max_reuse_distance (1,000,000,000) at "
    "DeepSpeed's defaults, all in elements. Note that stage3_max_live_parameters is not a cap on what a "
    "rank holds: the prefetcher fetches ahead only while fewer than that many elements are gathered, and "
    "the limit releases nothing itself. Use this simple model of lesson 13 (Stage 3's gathered weights): "
    "stage 3's peak is its model state, 16Ψ/N bytes, plus the gathered parameters it holds, whole bf16 "
    "tensors of 2 bytes per element; stage 2's is 2Ψ + 14Ψ/N bytes; activations and other buffers are "
    "the same under both and left out. After a weight's forward use, DeepSpeed keeps it gathered when "
    "its reuse distance is less than stage3_max_reuse_distance, else releases it and gathers it again. "
    "The reuse distance is the parameter elements (not bytes) of every use between the weight's two "
    "uses: a layer used twice in between counts twice. Here every weight's backward use comes fewer than "
    "2Ψ elements after its forward use (in between, only the later layers' weights are used, each twice: "
    "forward, then backward), and 2Ψ = 2 × {psi:,} = {twice:,} elements."
)
ABOVE_POINT = (
    "Stage 3 saves only the weights over stage 2, and weights kept for reuse, up to the whole model, can "
    "cost more: the reuse distance releases them, max_live_parameters barely does."
)
ABOVE_WORKING = (
    "Stage 2 keeps {two} and stage 3 {three} per GPU: stage 3 saves {saving}, the weights' 2Ψ(1 − 1/N) "
    "bytes. Every weight's backward use comes fewer than 2Ψ elements after its forward use, less than "
    "stage3_max_reuse_distance, so every weight gathered in the forward pass stays gathered until its "
    "backward use: "
    "by the last layer's forward the whole model is gathered, Ψ elements of 2 bytes, 2Ψ bytes = "
    "{gathered}, and never more, since there is nothing else to gather. "
    "Stage 3 then peaks {excess} (2Ψ/N bytes) above stage 2. "
    "stage3_max_live_parameters, {live:,} elements here, only stops the prefetcher fetching further ahead "
    "and releases nothing, so the weights that reuse keeps stay gathered even above it; with "
    "stage3_max_reuse_distance = 0 and no prefetch each layer is released after use and "
    "gathered again for the backward pass, so stage 3 holds one layer of Ψ/{layers} elements: {lean}, "
    "below stage 2's {two}. Lesson 13's fuller model adds what this one leaves out (the all-gather buffer "
    "that holds a layer twice, small tensors kept whole, buckets): for its 0.35 B GPT on 2 GPUs those "
    "keep even the lean stage 3 a little above stage 2."
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
        "the most bytes of gathered parameters stage 3 holds at these settings, in GB",
        "reuse keeps every weight from its forward to its backward use, up to the whole model: 2 bytes × Ψ",
        unit="GB",
    ),
    Spec(
        "knob",
        "which setting keeps those weights gathered: " + ", ".join(KNOBS) + " (each stage3_…)",
        "a weight stays gathered while its next use is within stage3_max_reuse_distance elements",
        kind="choice",
    ),
    Spec(
        "lean_gb",
        "stage 3's peak by this model with stage3_max_reuse_distance = 0 and stage3_prefetch_bucket_size "
        "= 0, when it holds one layer gathered at a time, in GB",
        "16Ψ/N plus one layer of Ψ/L elements at 2 bytes",
        unit="GB",
    ),
)
ABOVE_WHY = {
    "compared-with-dp": "that compares stage 3 with plain data parallelism, not with stage 2",
    "fp32-gathered": "gathered parameters are bf16 copies, 2 bytes each, not fp32",
    "gathered-pieces": "gathered parameters are whole tensors: a rank's own pieces are already in 16Ψ/N",
    "live-caps-prefetch": "stage3_max_live_parameters only stops the prefetcher fetching further ahead; it "
    "releases nothing that reuse keeps, so lowering it barely moves the peak (lesson 15's knob table)",
    "prefetch-is-not-reuse": "the prefetch bucket only says how far ahead stage 3 gathers; the weights "
    "reuse keeps stay gathered whatever its size",
    "kept-whole-model": "that still keeps the whole model gathered: with no reuse and no prefetch each "
    "layer is released after its use",
    "forgot-layer": "stage 3 still gathers the layer it is computing: one layer, 2 bytes × Ψ/L",
}


def _above_draw(r):
    """A model size (2Ψ within the default reuse distance), its layers, a GPU count and max_live."""
    psi = r.choice((125, 200, 250, 350, 420, 500)) * 10**6
    return psi, r.choice((8, 12, 16, 24)), r.choice((2, 4, 8)), r.choice((1, 2, 3, 5, 10)) * 10**8


def _saving(psi: int, gpus: int) -> Fraction:
    """Bytes of model state stage 3 keeps less than stage 2, per GPU."""
    return memory.per_gpu(psi, gpus, 2).total - memory.per_gpu(psi, gpus, 3).total


def _above_fits(psi, layers, gpus, live) -> bool:
    """Reuse covers the whole trace, live + prefetch is not the model's size (so that slip shows), and the
    gathered layer is at least 3% of the lean peak (so leaving it out is clearly wrong)."""
    lean = memory.per_gpu(psi, gpus, 3).total + Fraction(2 * psi, layers)
    return 2 * psi <= REUSE and live + PREFETCH != psi and Fraction(2 * psi, layers) >= lean * 3 / 100


def _live_why(psi: int, live: int) -> str:
    """Why (live + prefetch) is not what stage 3 holds, with this variant's numbers."""
    bound = f"live + prefetch = {live + PREFETCH:,} elements"
    if live + PREFETCH > psi:
        return f"{bound} is more than the model: stage 3 cannot gather more than Ψ = {psi:,} elements"
    return f"{bound} is not a cap: {ABOVE_WHY['live-caps-prefetch']}"


def _above_answers(psi: int, layers: int, gpus: int, live: int) -> tuple[dict, dict]:
    """The right value of every part, and the value each slip gives."""
    saving, three = _saving(psi, gpus), memory.per_gpu(psi, gpus, 3).total
    versus_dp = memory.per_gpu(psi, gpus, 0).total - three
    layer = Fraction(2 * psi, layers)
    values = dict(
        saving_gb=in_gb(saving),
        gathered_gb=in_gb(2 * psi),
        knob="max_reuse_distance",
        lean_gb=in_gb(three + layer),
    )
    slips = {
        "saving_gb": [("compared-with-dp", in_gb(versus_dp)), ("gib-for-gb", in_gib(saving))],
        "gathered_gb": [
            ("live-plus-prefetch", in_gb(2 * (live + PREFETCH)), _live_why(psi, live)),
            ("fp32-gathered", in_gb(4 * psi)),
            ("gathered-pieces", in_gb(Fraction(2 * psi, gpus))),
        ],
        "knob": [
            (key, name)
            for key, knob in (("live-caps-prefetch", KNOBS[0]), ("prefetch-is-not-reuse", KNOBS[1]))
            for name in (knob, "stage3_" + knob)
        ],
        "lean_gb": [("kept-whole-model", in_gb(three + 2 * psi)), ("forgot-layer", in_gb(three))],
    }
    return values, slips


def stage3_above_stage2(seed: int) -> Question:
    """Explain a "stage 3 used more memory than stage 2" report, and find the setting that reverses it."""
    psi, layers, gpus, live = first(rng(ABOVE, seed), _above_draw, _above_fits)
    values, slips = _above_answers(psi, layers, gpus, live)
    two, three = (memory.per_gpu(psi, gpus, s).total for s in (2, 3))
    working = ABOVE_WORKING.format(
        two=gb(two),
        three=gb(three),
        saving=gb(two - three),
        gathered=gb(2 * psi),
        excess=gb(three + 2 * psi - two),
        layers=layers,
        lean=gb(three + Fraction(2 * psi, layers)),
        live=live,
    )
    prompt = ABOVE_PROMPT.format(psi=psi, layers=layers, gpus=gpus, live=live, twice=2 * psi)
    given = dict(params=psi, layers=layers, gpus=gpus, max_live=live)
    also = {"knob": ("stage3_max_reuse_distance",)}
    return Question(
        ABOVE,
        "Stage 3 above stage 2",
        seed,
        prompt,
        parts(ABOVE_SPECS, values, slips, ABOVE_WHY, also),
        working,
        ABOVE_POINT,
        tuple(given.items()),
    )
