"""Design questions about time: does offload hide behind compute, and what accumulation costs ZeRO-2."""

from __future__ import annotations

from fractions import Fraction

from .. import communication, memory, units
from ..planning import offload
from .model import Question, Spec, billions, first, gb, in_gb, parts, rng

PAYS = "offload-pays"
PAYS_PROMPT = (
    "A model of {psi:,} parameters trains with ZeRO-2 on {gpus_text}, the optimizer offloaded to the CPU, "
    "with fp16 weights and gradients. Each GPU has its own {bandwidth} GB/s host link (full-duplex: that "
    "rate each way), reaches {tflops} TFLOP/s and processes {tokens:,} tokens per step. Every step each GPU "
    "sends its gradient shard to the host and, after the CPU's update, receives its updated weight shard: "
    "the second transfer waits for the first, so their times add even on a full-duplex link. A step's "
    "compute is about 6Ψ FLOPs per token (2Ψ forward, 4Ψ backward). Assume, as a simplification, that the "
    "transfers overlap fully with compute, and leave the CPU's optimizer step out. A real step does not "
    "grant that: the gradient shard can stream to the host during the backward pass, but the weight shard "
    "comes back only after the CPU's update, which waits for the last gradient; that return hides only if "
    "the next step's compute overlaps it."
)
PAYS_WORKING = (
    "Link: 4 bytes × {psi:,} / {gpus} / {bandwidth} GB/s = {link:.4g} s. Compute: 6 × {psi:,} × {tokens:,} / "
    "{tflops}e12 = {compute:.4g} s. The transfers {verdict}. They hide from {least:,} tokens per GPU per "
    "step: 4Ψ/(N·B) ≤ 6Ψ·T/F gives T ≥ 4F/(6·N·B), whatever Ψ."
)
PAYS_SPECS = (
    Spec(
        "link_s",
        "seconds per step on one GPU's host link",
        "(2 + 2) bytes × Ψ/N: the gradient shard down and the fp16 weight shard back, over one GPU's link",
        unit="s",
    ),
    Spec(
        "compute_s",
        "seconds of forward and backward compute per step on one GPU",
        "about 6Ψ FLOPs per token: 2Ψ forward and 4Ψ backward",
        unit="s",
    ),
    Spec(
        "hidden",
        "can the transfers hide behind compute (link time ≤ compute time)? yes or no",
        "with full overlap, offload slows the step only when the link takes longer than the compute",
        kind="yes/no",
    ),
    Spec(
        "min_tokens",
        "the fewest tokens per GPU per step at which the transfers hide",
        "tokens ≥ link time × throughput / 6Ψ; Ψ cancels, leaving N, bandwidth and throughput",
        unit="tokens",
        exact=True,
    ),
)
PAYS_WHY = {
    "forward-only": "that counts the forward pass only (2Ψ FLOPs per token); the backward pass costs twice "
    "as much again, so 6Ψ in all",
}


def _pays_draw(r):
    """A model size in billions, GPUs, link GB/s, TFLOP/s and tokens per GPU per step."""
    return (
        r.choice((1.3, 2.7, 6.7, 13, 20, 30)),
        r.choice((1, 2, 4, 8)),
        r.choice((12, 16, 25, 32, 50)),
        r.choice((80, 120, 200, 300, 400)),
        r.choice((512, 1024, 2048, 4096, 8192, 16384)),
    )


def _times(size, gpus: int, bandwidth: int, tflops: int, tokens: int) -> tuple[Fraction, Fraction]:
    """Link seconds and compute seconds per step on one GPU."""
    psi = billions(size)
    return (
        offload.link_time(psi, gpus, 2, bandwidth * units.GB),
        offload.compute_time(psi, tokens, tflops * 10**12),
    )


def _pays_fits(size, gpus, bandwidth, tflops, tokens) -> bool:
    """Link and compute time differ by more than a quarter, so rounding never flips the decision."""
    link, compute = _times(size, gpus, bandwidth, tflops, tokens)
    return not Fraction(4, 5) <= link / compute <= Fraction(5, 4)


def offload_pays(seed: int) -> Question:
    """Decide whether ZeRO-2's optimizer offload hides behind compute, for a link and a GPU throughput."""
    size, gpus, bandwidth, tflops, tokens = first(rng(PAYS, seed), _pays_draw, _pays_fits)
    psi, (link, compute) = billions(size), _times(size, gpus, bandwidth, tflops, tokens)
    least = memory.ceil_div(link * tflops * 10**12, 6 * psi)
    values = dict(link_s=link, compute_s=compute, hidden=link <= compute, min_tokens=least)
    slips = {
        "link_s": [("node-not-per-gpu", link * gpus), ("one-direction", link / 2)],
        "compute_s": [("forward-only", compute / 3)],
        "min_tokens": [("forward-only", memory.ceil_div(link * tflops * 10**12, 2 * psi))],
    }
    facts = dict(psi=psi, gpus=gpus, bandwidth=bandwidth, tflops=tflops, tokens=tokens)
    working = PAYS_WORKING.format(
        **facts,
        link=float(link),
        compute=float(compute),
        least=least,
        verdict="hide" if link <= compute else "do not hide",
    )
    gpus_text = f"{gpus} GPU" + ("s" if gpus > 1 else "")
    prompt = PAYS_PROMPT.format(**facts, gpus_text=gpus_text)
    answers = parts(PAYS_SPECS, values, slips, PAYS_WHY)
    point = "Offload pays when its transfers hide behind compute: compare link time with compute time."
    return Question(PAYS, "Does offload pay?", seed, prompt, answers, working, point, tuple(facts.items()))


ACCUMULATION = "accumulation-traffic"
ACCUMULATION_PROMPT = (
    "A model of {psi:,} parameters trains on {gpus} GPUs, each with a {gbit} Gb/s link, in bf16, with "
    "gradient accumulation over {micro_batches} micro-batches per step. Both ZeRO-1 and ZeRO-2 fit. Count "
    "traffic by the ZeRO paper's plan of collectives with the accumulation rule of lesson 03 "
    "(Communication), section 6, as the package's communication module counts it: ZeRO-1 keeps whole "
    "gradients and sums the micro-batches locally, while ZeRO-2 keeps only its gradient shard and must "
    "hand the rest on after every micro-batch. The plans per step: {plans}. A reduce-scatter or an "
    "all-gather of Ψ elements sends Ψ per GPU. That leaves out the ring factor, (N − 1)/N: a ring really "
    "sends that fraction of Ψ, a little less."
)
ACCUMULATION_WORKING = (
    "ZeRO-1: 2Ψ elements per step × 2 B = {one}. ZeRO-2: {micro_batches} reduce-scatters plus one all-gather "
    "= {repeats}Ψ elements × 2 B = {two}. The difference, {gap}, takes {extra:.4g} s at {gbit} Gb/s = "
    "{rate} GB/s."
)
ACCUMULATION_SPECS = (
    Spec(
        "zero1_gb",
        "GB each GPU sends per step under ZeRO-1 (bf16, paper's count)",
        "one reduce-scatter and one all-gather per step, Ψ elements each",
        unit="GB",
    ),
    Spec(
        "zero2_gb",
        "GB each GPU sends per step under ZeRO-2",
        "ZeRO-2 keeps only a gradient shard, so it reduce-scatters after every micro-batch",
        unit="GB",
    ),
    Spec(
        "extra_s",
        "extra seconds per step ZeRO-2 spends sending, with no overlap",
        "the difference in bytes over the link's bytes per second (8 bits to a byte)",
        unit="s",
    ),
)
ACCUMULATION_WHY = {
    "zero1-once": "ZeRO-1 keeps whole gradients, so it accumulates locally and reduces once per step",
    "accumulation-repeats": "ZeRO-2 must reduce-scatter after every micro-batch: no rank keeps the whole "
    "gradient between them",
    "bits-for-bytes": "that reads Gb/s (bits) as GB/s (bytes): divide the bits by 8",
}


def plan_text(stage: int) -> str:
    """The collectives of `stage` by `communication.collectives`, each once per step or per micro-batch."""
    said = [
        f"{'an' if c.op[0] in 'aeiou' else 'a'} {c.op} of the {c.state} "
        + ("after every micro-batch" if c.per_micro_batch else "once per step")
        for c in communication.collectives(stage)
    ]
    return f"ZeRO-{stage}: " + " and ".join(said)


def accumulation_traffic(seed: int) -> Question:
    """Weigh ZeRO-1 against ZeRO-2 when gradients accumulate over several micro-batches."""
    source = rng(ACCUMULATION, seed)
    psi, gpus = billions(source.choice((1.3, 2.7, 6.7, 13, 30, 70))), source.choice((8, 16, 32, 64))
    micro_batches, gbit = source.choice((2, 4, 8, 16)), source.choice((100, 200, 400))
    rate = units.parse_bandwidth(f"{gbit} Gb/s")
    one, two = (communication.volume_elements(psi, gpus, s, micro_batches=micro_batches) * 2 for s in (1, 2))
    extra = (two - one) / rate
    values = dict(zero1_gb=in_gb(one), zero2_gb=in_gb(two), extra_s=extra)
    slips = {
        "zero1_gb": [("zero1-once", in_gb(two)), ("bytes-vs-elements", in_gb(one / 2))],
        "zero2_gb": [("accumulation-repeats", in_gb(one)), ("bytes-vs-elements", in_gb(two / 2))],
        "extra_s": [("bits-for-bytes", extra / 8)],
    }
    facts = dict(psi=psi, gpus=gpus, micro_batches=micro_batches, gbit=gbit)
    working = ACCUMULATION_WORKING.format(
        **facts,
        one=gb(one),
        two=gb(two),
        repeats=micro_batches + 1,
        gap=gb(two - one),
        extra=float(extra),
        rate=units.format_number(rate / units.GB),
    )
    prompt = ACCUMULATION_PROMPT.format(**facts, plans="; ".join(plan_text(s) for s in (1, 2)))
    answers = parts(ACCUMULATION_SPECS, values, slips, ACCUMULATION_WHY)
    point = "Under gradient accumulation ZeRO-2 reduces every micro-batch, ZeRO-1 once per step."
    title = "Accumulation and traffic"
    return Question(ACCUMULATION, title, seed, prompt, answers, working, point, tuple(facts.items()))
