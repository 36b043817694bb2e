"""The workshop: every generated variant is solvable, check() accepts the solution and names every known slip.

The solutions below are written apart from the question generators, from each variant's inputs
(`Question.given`) and the package's formulas, the way a worked solution in a notebook would be.
"""

from __future__ import annotations

import ast
import json
import math
import random
import re
from dataclasses import replace
from fractions import Fraction
from itertools import pairwise
from pathlib import Path

import pytest

from zero_lessons import GB, GiB, format_bytes, workshop
from zero_lessons.communication import multiple, volume_elements
from zero_lessons.inputs import Setup
from zero_lessons.lab.model import MODEL
from zero_lessons.memory import min_gpus, per_gpu
from zero_lessons.planning import ds_estimator, ds_traffic, offload
from zero_lessons.planning.activations import RECOMPUTE, Transformer, activation_bytes
from zero_lessons.recipes import MEGATRON_18, custom
from zero_lessons.stages import Stage
from zero_lessons.workshop import QUESTIONS, answer_key, check, sheet
from zero_lessons.workshop.derivation import by_hand
from zero_lessons.workshop.feedback import NOT_YET, RIGHT
from zero_lessons.workshop.lab_link import (
    FIELDS,
    deepspeed_default,
    from_lab,
    power_of_ten,
    predicted,
    zero_setting,
)
from zero_lessons.workshop.measure import FAMILIES, case, compare
from zero_lessons.workshop.model import TOLERANCE
from zero_lessons.workshop.sheets import question
from zero_lessons.workshop.sizing import cluster_costs
from zero_lessons.workshop.traces import OPTIONS, WHY_RATIO, twins
from zero_lessons.workshop.worked import tensors

SEEDS = range(30)


def solve_checkpointing(g):
    shape = Transformer(g["layers"], g["hidden"], g["heads"], g["seq_len"], g["micro_batch"])
    for recompute in RECOMPUTE:
        act = activation_bytes(shape, recompute)
        needs = [per_gpu(shape.params, g["gpus"], s).total + act for s in Stage]
        fitting = [s for s in Stage if needs[s] <= g["card_gb"] * GB]
        if fitting:
            break
    none = activation_bytes(shape, "none")
    return {
        "activations_gb": float(none / GB),
        "recompute": recompute,
        "stage": f"ZeRO-{fitting[0]}",
        "gb_per_gpu": f"{float(needs[fitting[0]] / GB):.4f} GB",
    }


def solve_host(g):
    psi, act, card, host, n = g["params"], g["activations"], g["card_gb"] * GB, g["host_gb"] * GB, g["gpus"]
    assert psi == 12 * g["layers"] * g["hidden"] ** 2 + 50_257 * g["hidden"]  # the prompt's 12·L·h² + V·h
    for stage, both in ((2, False), (3, False), (3, True)):
        on, off = offload.offloaded(psi, n, stage, parameters=both)
        if on.total + act <= card and off.total * n <= host:
            break
    if stage == 2:
        ds = ds_estimator.zero2(psi, n, 1, cpu_offload=True).cpu_bytes
    else:
        ds = ds_estimator.zero3(psi, 0, n, 1, cpu_offload=True, cpu_offload_params=both).cpu_bytes
    return {
        "stage3_gb": 16 * psi / n / GB,
        "stage": stage,
        "offload": "optimizer+parameters" if both else "optimizer",
        "host_gb": float(off.total * n / GB),
        "deepspeed_host_gib": f"{ds / GiB:.3f} GiB",
        "deepspeed_fits": "yes" if ds <= host else "no",
    }


def solve_cluster(g):
    costs = {}
    for size in (24, 48, 80, 141):
        gpus = min_gpus(g["params"], size * GB - g["activations_gb"] * GB, 3)
        costs[size] = (gpus * Fraction(g["prices"][f"{size}GB"]), gpus)
    size = min(costs, key=costs.get)
    return {"card": f"{size} GB", "gpus": costs[size][1], "cost_per_hour": f"${float(costs[size][0]):.2f}"}


def solve_above(g):
    psi, n = g["params"], g["gpus"]
    three = per_gpu(psi, n, 3).total
    return {
        "saving_gb": float((per_gpu(psi, n, 2).total - three) / GB),
        "gathered_gb": f"{2 * psi / GB} GB",  # reuse keeps every weight: the whole model, never more
        "knob": "stage3_max_reuse_distance",
        "lean_gb": float((three + Fraction(2 * psi, g["layers"])) / GB),  # one layer gathered at a time
    }


def solve_trace(g):
    widths, gpus = tuple(g["widths"]), g["gpus"]
    seen = predicted(g["mode"], gpus, 0, widths)  # what the attendee is shown: the trace and rank 0's bytes
    found = [
        o for o in OPTIONS if (p := predicted(o, gpus, 0, widths)).held == seen.held and p.sent == seen.sent
    ]
    psi = sum(a * b + b for a, b in zip(widths, widths[1:], strict=False))
    sent = sum(multiple(op) * n for op, n in seen.sent.items())
    return {"setting": found[0], "psi": str(psi), "sent_psi": f"{sent / psi:.4f}x"}


def solve_pays(g):
    link = offload.link_time(g["psi"], g["gpus"], 2, f"{g['bandwidth']} GB/s")
    compute = offload.compute_time(g["psi"], g["tokens"], g["tflops"] * 10**12)
    least = math.ceil(
        4 * g["psi"] / g["gpus"] / (g["bandwidth"] * GB) * g["tflops"] * 10**12 / (6 * g["psi"])
    )
    return {
        "link_s": f"{float(link):.5g} s",
        "compute_s": float(compute),
        "hidden": link <= compute,
        "min_tokens": least,
    }


def solve_accumulation(g):
    one, two = (volume_elements(g["psi"], g["gpus"], s, micro_batches=g["micro_batches"]) * 2 for s in (1, 2))
    return {
        "zero1_gb": float(one / GB),
        "zero2_gb": f"{float(two / GB)} GB",
        "extra_s": float((two - one) / (g["gbit"] * 10**9 / 8)),
    }


def solve_formula(g):
    psi, n = g["params"], g["gpus"]
    code = ds_estimator.zero2(psi, min(n, 8), max(1, n // 8), cpu_offload=False).gpu_bytes
    return {
        "docs_stage": "ZeRO-1",
        "split_bytes": 18,
        "code_gb": code / GB,
        "gap_gb": float((code - per_gpu(psi, n, 2).total) / GB),
    }


def solve_4x(g):
    return {"rule_gb": 4 * 2 * g["params"] / GB, "rule_bytes": 8, "missing_bytes": 16 - 8}


def solve_10(g):
    book = per_gpu(g["params"], g["gpus"], 1, custom(2, 0, 8)).total
    return {
        "book_gb": float(book / GB),
        "paper_gb": float(per_gpu(g["params"], g["gpus"], 1).total / GB),
        "left_out": 6,
    }


def solve_tp(g):
    dp, local = g["gpus"] // (g["tp"] * g["pp"]), g["params"] // (g["tp"] * g["pp"])
    right = per_gpu(local, dp, g["stage"], MEGATRON_18).total
    printed = per_gpu(local, g["gpus"], g["stage"], MEGATRON_18).total
    return {"dp_degree": dp, "right_gb": float(right / GB), "gap_gb": float((right - printed) / GB)}


def solve_measure(g):
    record = predicted(g["mode"], g["gpus"], g["rank"])
    return record.held | record.sent


SOLVERS = {
    "stage-and-checkpointing": solve_checkpointing,
    "offload-and-host": solve_host,
    "cheapest-cluster": solve_cluster,
    "stage3-above-stage2": solve_above,
    "traffic-detective": solve_trace,
    "offload-pays": solve_pays,
    "accumulation-traffic": solve_accumulation,
    "audit-deepspeed-formula": solve_formula,
    "audit-4x-rule": solve_4x,
    "audit-10-bytes": solve_10,
    "audit-tp-sharding": solve_tp,
    "measure-pytorch": solve_measure,
    "measure-deepspeed-12": solve_measure,
    "measure-deepspeed-3": solve_measure,
}


def test_there_are_seven_design_questions_four_audits_and_three_measurements():
    assert set(SOLVERS) == set(QUESTIONS)
    audits = [q for q in QUESTIONS if q.startswith("audit-")]
    measured = [q for q in QUESTIONS if q.startswith("measure-")]
    assert len(audits) == 4 and len(measured) == 3 and len(QUESTIONS) - len(audits) - len(measured) == 7


@pytest.mark.parametrize("qid", list(QUESTIONS))
def test_every_variant_is_solved_by_the_package_and_accepted(qid):
    for seed in SEEDS:
        q = question(qid, seed)
        answer = SOLVERS[qid](dict(q.given))
        feedback = check(seed, qid, answer)
        assert feedback.correct, (seed, feedback)
        assert all(m.message == f"{RIGHT}." for m in feedback.marks)
        assert repr(feedback).startswith(f"Correct. All {len(q.parts)} parts are right ({qid}, seed {seed}).")


@pytest.mark.parametrize("qid", list(QUESTIONS))
def test_a_worked_answer_shows_as_plain_data_that_check_accepts_back(qid):
    for seed in SEEDS[:10]:
        q = question(qid, seed)
        shown = sheet(seed, only=[qid]).plain(qid, SOLVERS[qid](dict(q.given)))
        assert shown.keys() == q.answers().keys() and json.loads(json.dumps(shown)) == shown
        assert check(seed, qid, shown).correct, (seed, shown)
    with pytest.raises(ValueError, match="with every part"):
        sheet(0).plain(qid, {})
    first = q.parts[0].name
    with pytest.raises(ValueError, match=f"^{first}: "):
        sheet(0).plain(qid, q.answers() | {first: object()})


@pytest.mark.parametrize("qid", list(QUESTIONS))
def test_every_known_slip_is_rejected_with_its_own_feedback(qid):
    named = 0
    for seed in SEEDS:
        q = question(qid, seed)
        for part in q.parts:
            for slip in part.slips:
                wrong = q.answers() | {
                    part.name: part.__class__(part.name, "", slip.value, "", part.kind).plain()
                }
                feedback = check(seed, qid, wrong)
                mark = next(m for m in feedback.marks if m.part == part.name)
                assert not feedback.correct and not mark.right, (seed, part.name, slip)
                assert mark.slip == slip.key and mark.message == f"{NOT_YET}: {slip.why}.", (seed, mark)
                assert all(m.right for m in feedback.marks if m.part != part.name)
                named += 1
    assert named >= 30  # every question has slips in most of its variants


@pytest.mark.parametrize("qid", list(QUESTIONS))
def test_variants_differ_but_keep_their_point(qid):
    variants = [question(qid, seed) for seed in SEEDS]
    assert len({q.prompt for q in variants}) >= 5, "variants should differ from attendee to attendee"
    assert len({q.point for q in variants}) == 1 and len({q.title for q in variants}) == 1
    assert all(q.working and q.prompt and q.parts for q in variants)
    assert question(qid, 7) is question(qid, 7) and question(qid, 7).prompt == QUESTIONS[qid](7).prompt


def test_a_wrong_answer_with_no_known_slip_names_the_rule():
    q = question("offload-pays", 3)
    feedback = check(3, "offload-pays", q.answers() | {"compute_s": 12345})
    mark = next(m for m in feedback.marks if m.part == "compute_s")
    assert (
        mark.message
        == f"{NOT_YET}: it matches no common slip. This part rests on: {q.part('compute_s').rule}."
    )
    assert repr(feedback).startswith("Not yet: 3 of 4 parts right (offload-pays, seed 3).")
    assert feedback._repr_markdown_().startswith("**Not yet: 3 of 4 parts right")


def test_answers_are_read_in_the_usual_spellings():
    q = question("audit-4x-rule", 0)
    gb = Fraction(q.answers()["rule_gb"]).limit_denominator(10**6)
    for spelling in (float(gb), f"{float(gb)} GB", f"{float(gb * GB / GiB):.4f} GiB", f"{float(gb):,}"):
        assert check(0, "audit-4x-rule", q.answers() | {"rule_gb": spelling}).correct, spelling
    assert check(0, "audit-4x-rule", q.answers() | {"missing_bytes": "8 bytes"}).correct
    yes_no = question("offload-pays", 0).answers()
    for spelling in ("yes", "Yes", "no", True, False):
        verdict = spelling in ("yes", "Yes", True)
        assert check(0, "offload-pays", yes_no | {"hidden": spelling}).correct == (
            verdict == yes_no["hidden"]
        )


def test_unreadable_and_missing_answers_say_what_to_give():
    q = question("audit-10-bytes", 1)
    blank = check(1, "audit-10-bytes", q.blank())
    assert not blank.correct and blank.state == "unanswered"
    assert all(m.message == f"not answered yet: give {q.part(m.part).ask}." for m in blank.marks)
    assert repr(blank).startswith("Not answered yet: replace each None in the answer cell")
    half = check(1, "audit-10-bytes", q.blank() | {"left_out": q.answers()["left_out"]})
    assert half.state == "not yet" and repr(half).startswith(
        "Not yet: 1 of 3 parts right, 2 not answered yet"
    )
    odd = check(1, "audit-10-bytes", q.answers() | {"book_gb": "lots", "paper_gb": [1], "extra": 1})
    assert "could not read it" in odd.marks[0].message and "could not read it" in odd.marks[1].message
    assert odd.note == "ignored extra: this question has no such part."
    huge = check(1, "audit-10-bytes", q.answers() | {"book_gb": "9" * 5000, "left_out": "1e99999"})
    assert not huge.correct and "could not read it" in huge.marks[0].message
    assert "must be a dict" in check(1, "audit-10-bytes", 42).problem


def test_bad_question_or_seed_names_the_field():
    with pytest.raises(ValueError, match="question must be one of"):
        check(1, "no-such-question", {})
    with pytest.raises(TypeError, match="question must be one of"):
        check(1, ["offload-pays"], {})
    with pytest.raises(ValueError, match="seed must be a whole number from 0 to 1,000,000,000"):
        sheet(-1)
    with pytest.raises(TypeError, match="seed must be a whole number"):
        sheet(1.5)
    with pytest.raises(ValueError, match="students must be a whole number from 1 to 1,000"):
        answer_key(0)
    with pytest.raises(TypeError, match="only must be a non-empty list of question ids"):
        sheet(1, only="offload-pays")
    with pytest.raises(ValueError, match="attendee must be letters, digits"):
        sheet(1, attendee="=cmd|' /C calc'!A0")


def test_a_sheet_and_the_key_agree_and_the_key_round_trips_through_json():
    key = json.loads(json.dumps(answer_key(30, seed=4)))
    assert [a["attendee"] for a in key["attendees"]][:2] == ["A01", "A02"] and len(key["attendees"]) == 30
    for entry in key["attendees"][:5]:
        one = sheet(entry["seed"], attendee=entry["attendee"])
        assert entry["seed"] == 4000 + int(entry["attendee"][1:])
        for qid, answer in entry["answers"].items():
            assert one.check(qid, answer).correct
    assert "## 14. Predict, then measure: DeepSpeed stage 3" in sheet(1).markdown()
    assert len(sheet(1, only=["offload-pays", "audit-4x-rule"]).questions) == 2


def test_the_trace_question_always_has_one_answer():
    for seed in SEEDS:
        g = dict(question("traffic-detective", seed).given)
        widths, gpus = tuple(g["widths"]), g["gpus"]
        shown = predicted(g["mode"], gpus, 0, widths)
        same = {
            o
            for o in OPTIONS
            if (p := predicted(o, gpus, 0, widths)).held == shown.held and p.sent == shown.sent
        }
        assert same == {g["mode"], *question("traffic-detective", seed).part("setting").also}, (seed, same)


def test_the_lab_link_leaves_out_deepspeeds_control_messages():
    from zero_lessons.lab import modes, runner
    from zero_lessons.lab.model import MODEL

    found = runner.predict(modes.get("ds_zero1"), 2, 0)
    assert any(m.elements == 1 for m in found.traffic.messages)  # the overflow flag and the gradient norm
    record = from_lab("ds_zero1", 2, 0, found)
    assert record.sent["all_reduce"] == MODEL.param_count and record.sent["all_gather"] == 1508
    assert record.held == {
        "weights": found.held.weights,
        "gradients": found.held.gradients,
        "optimizer": found.held.optimizer,
    }


def test_compare_grades_against_the_measurement_and_says_where_the_prediction_missed():
    q = question("measure-deepspeed-3", 4)
    truth = predicted(*case(q))
    assert compare(q, q.answers(), truth).note == "the lab measured exactly what the package predicts."
    off = replace(truth, held=truth.held | {"weights": truth.held["weights"] + 2})
    feedback = compare(q, q.answers(), off)
    assert not feedback.correct and [m.part for m in feedback.marks if not m.right] == ["weights"]
    assert feedback.note == (
        f"the measurement differs from the package's prediction in weights (predicted "
        f"{truth.held['weights']}, measured {truth.held['weights'] + 2})."
    )


def test_workshop_modules_stay_short():
    for path in sorted(Path(workshop.__file__).parent.glob("*.py")):
        text = path.read_text()
        assert len(text.splitlines()) <= 300, path.name
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef):
                assert node.end_lineno - node.lineno < 40, (path.name, node.name)


def test_right_wrong_and_unanswered_differ_in_words_and_colour_not_only_an_emoji():
    q = question("audit-4x-rule", 2)
    said = {
        state: check(2, "audit-4x-rule", answer)
        for state, answer in (
            ("correct", q.answers()),
            ("not yet", q.answers() | {"missing_bytes": 4}),
            ("unanswered", q.blank()),
        )
    }
    heads = {"correct": "Correct.", "not yet": "Not yet:", "unanswered": "Not answered yet:"}
    colours = {"correct": "#1a7f37", "not yet": "#b42318", "unanswered": "#57606a"}
    for state, feedback in said.items():
        assert feedback.state == state and repr(feedback).startswith(heads[state] + " ")
        page = feedback._repr_html_()
        assert f'<strong style="color: {colours[state]}">{heads[state]}</strong>' in page
        assert f"border-left: 4px solid {colours[state]}" in page
        assert not any(mark in page + repr(feedback) for mark in ("✅", "❌"))
    assert len({repr(f).split(" (")[0] for f in said.values()}) == 3  # three different sentences
    assert "master-only" in said["not yet"].slips[0] and "&lt;" not in said["correct"]._repr_html_()


@pytest.mark.parametrize(
    "spelling", [None, "stage {n}", "ZeRO-{n}", "ZeRO {n}", "zero{n}", "Stage {n}", "z{n}"]
)
def test_stage_parts_accept_natural_spellings(spelling):
    for seed in range(5):
        q = question("stage-and-checkpointing", seed)
        n = q.answers()["stage"]
        answer = q.answers() | {"stage": n if spelling is None else spelling.format(n=n)}
        assert check(seed, "stage-and-checkpointing", answer).correct, (seed, answer["stage"])


def test_a_wrong_stage_names_its_own_numbers_not_a_different_question():
    for seed in SEEDS:
        q = question("stage-and-checkpointing", seed)
        right, card = q.answers()["stage"], dict(q.given)["card_gb"]
        for other in {0, 1, 2, 3} - {right}:
            mark = check(seed, q.id, q.answers() | {"stage": f"stage {other}"}).marks[2]
            assert not mark.right and mark.slip in ("ignored-activations", "does-not-fit", "not-the-lowest")
            label = Stage(other).label
            if other < right:
                assert (
                    mark.message.startswith(f"{NOT_YET}: {label} needs ")
                    and f"not fit in {card} GB" in mark.message
                )
            else:
                assert mark.message.startswith(
                    f"{NOT_YET}: {label} fits too, but {Stage(right).label} is lower and fits"
                )
    for seed in SEEDS:
        q = question("offload-and-host", seed)
        other = 5 - q.answers()["stage"]
        mark = check(seed, q.id, q.answers() | {"stage": f"ZeRO {other}"}).marks[1]
        assert mark.slip == ("does-not-fit" if other == 2 else "not-the-least") and "ZeRO-2" in mark.message


def test_an_unanswered_prediction_is_not_reported_as_a_result():
    q = question("measure-deepspeed-3", 4)
    blank = compare(q, q.blank(), predicted(*case(q)))
    assert blank.state == "unanswered" and "measured exactly" not in repr(blank)
    assert (
        blank.note
        == "the lab has run this case and grades your prediction against its measurement once you give one."
    )


def test_stage3_gathers_at_most_the_whole_model_and_reuse_not_max_live_releases_it():
    for seed in SEEDS:
        q = question("stage3-above-stage2", seed)
        g = dict(q.given)
        assert q.part("gathered_gb").value * GB == 2 * g["params"]  # capped at Ψ elements in bf16
        assert 2 * g["params"] <= deepspeed_default("stage3_max_reuse_distance")  # reuse covers every layer
        assert q.part("knob").value == "max_reuse_distance"
        assert {s.key for s in q.part("knob").slips} == {"live-caps-prefetch", "prefetch-is-not-reuse"}


def test_the_formula_audit_gives_two_gpu_counts_so_the_split_follows_from_the_printout():
    for seed in SEEDS:
        q = question("audit-deepspeed-formula", seed)
        psi, n = dict(q.given)["params"], dict(q.given)["gpus"]
        first, second = (float(x) for x in re.findall(r'prints ([\d.,]+) "GB"', q.prompt))
        split = (first - second) * GiB / (psi / n - psi / (2 * n))
        assert round(split) == 18 and abs(split - 18) < 0.4, (seed, split)


def test_prompts_write_plurals_in_words_and_give_what_they_use():
    for seed in SEEDS:
        assert "GPU(s)" not in sheet(seed).markdown()
        assert "6Ψ FLOPs per token" in question("offload-pays", seed).prompt
        assert "ring factor, (N − 1)/N" in question("accumulation-traffic", seed).prompt
        assert "DeepSpeed" not in question("measure-pytorch", seed).prompt


def test_reuse_distance_zero_is_told_apart_from_gathering_once_and_twice():
    variants = [q for q in map(lambda s: question("measure-deepspeed-3", s), range(60))]
    zero = [q for q in variants if dict(q.given)["mode"] == "ds_zero3_reuse0"]
    assert zero  # some seed draws it
    for q in zero:
        _, gpus, rank = case(q)
        slips = {s.key: s.value for s in q.part("all_gather").slips if s.key.startswith("reuse0")}
        once, twice = (predicted(m, gpus, rank).sent["all_gather"] for m in ("ds_zero3", "ds_zero3_no_reuse"))
        assert slips == {"reuse0-not-once": once, "reuse0-not-twice": twice}
        assert once < q.part("all_gather").value < twice  # between one pass and two


def test_the_host_question_gives_the_activations_it_states_and_the_model_they_come_from():
    for seed in SEEDS:
        q = question("offload-and-host", seed)
        g = dict(q.given)
        # the variant draws its transformer at sequence length 2,048 and micro-batch 1
        shape = Transformer(g["layers"], g["hidden"], g["hidden"] // 128, 2048, 1)
        assert g["params"] == shape.params and g["activations"] == activation_bytes(shape, "full")
        assert f"leaves {format_bytes(g['activations'])} of activations per GPU" in q.prompt


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_by_hand_working_adds_up_to_the_labs_prediction_for_every_case(family):
    """Worked tensor by tensor, every setting, rank count and rank of a family gives the lab's prediction."""
    for mode in FAMILIES[family][1]:
        for gpus in (2, 4):
            for rank in range(gpus):
                hand = by_hand(mode, gpus, rank)
                assert hand.values() == predicted(mode, gpus, rank).values(), (mode, gpus, rank)
                assert all(f"{v:,}" in hand.formulas[k] for k, v in hand.values().items() if v)
                # every part the question asks has a line, those that do not run as "0 (why)"
                assert list(hand.formulas) == [*FIELDS, *FAMILIES[family][2]], (mode, list(hand.formulas))
                idle = [op for op in FAMILIES[family][2] if not hand.sent[op]]
                assert idle and all(hand.formulas[op].startswith("0 (") for op in idle), (mode, idle)
    q = question(family, 45)
    assert q.working.startswith(by_hand(*case(q)).working())  # the worked solution is the by-hand one


def test_the_by_hand_working_names_what_it_refuses():
    with pytest.raises(ValueError, match="gpus must be a whole number from 2 to 1,024"):
        by_hand("ds_zero3", 1, 0)
    with pytest.raises(ValueError, match="rank must be a whole number from 0 to 3, got 4"):
        by_hand("ds_zero3", 4, 4)
    with pytest.raises(ValueError, match="mode must be a setting of a predict-then-measure question"):
        by_hand("ddp", 2, 0)
    with pytest.raises(ValueError, match="mode must reuse everything, nothing, or nothing with prefetch"):
        by_hand("ds_zero3_short_reuse", 2, 0)


def test_the_by_hand_working_explains_the_numbers_the_paper_does_not_give():
    fsdp = by_hand("fsdp_reshard", 2, 1)  # the last rank's own rows are fewer than its padded chunk
    assert (
        fsdp.held["optimizer"] < 2 * fsdp.held["weights"]
        and "the padding has no Adam state" in fsdp.working()
    )
    flat = by_hand("ds_zero2", 2, 1)
    assert flat.held["gradients"] > MODEL.param_count  # more than 2Ψ/N bytes: tensors touching the slice
    assert '"reduce_scatter": true' in flat.working() and '"use_multi_rank_bucket_allreduce": true' in (
        flat.working()
    )
    reuse = by_hand("ds_zero3", 2, 0)
    assert reuse.sent["all_gather"] == reuse.sent["reduce_scatter"]  # one gather: about 2Ψ sent, not 3Ψ
    sent = reuse.sent["all_gather"] + reuse.sent["reduce_scatter"]
    assert abs(sent / MODEL.param_count - 2) < 0.01 and f"{sent / MODEL.param_count:.3f}Ψ" in reuse.working()


def test_the_trace_working_says_why_the_traffic_differs_from_the_papers_stage():
    """Each claim the working makes about a setting's trace, checked on every seed that draws it."""
    for seed in range(120):
        q = question("traffic-detective", seed)
        g = dict(q.given)
        widths, n, mode = tuple(g["widths"]), g["gpus"], g["mode"]
        sent, psi = predicted(mode, n, 0, widths).sent, q.answers()["psi"]
        rows = sum(n * math.ceil(b / n) * (a + 1) for a, b in zip(widths, widths[1:], strict=False))
        pieces = sum(
            n * math.ceil(x / n) for a, b in zip(widths, widths[1:], strict=False) for x in (a * b, b)
        )
        flat = math.ceil(psi / (2 * n)) * 2 * n
        claims = {
            "ddp": sent["all_reduce"] == psi,
            "zero_redundancy_optimizer": sent["all_reduce"] == sent["broadcast"] == psi,
            "fsdp_reshard": sent["reduce_scatter"] == rows and sent["all_gather"] == 2 * rows,
            "fsdp_no_reshard": sent["reduce_scatter"] == sent["all_gather"] == rows,
            "ds_zero1": sent["all_reduce"] == psi and sent["all_gather"] == flat,
            "ds_zero2": sent["all_reduce"] == psi and sent["all_gather"] == flat,
            "ds_zero2_reduce": sent["reduce"] == psi and sent["all_gather"] == flat,
            "ds_zero3": sent["reduce_scatter"] == sent["all_gather"] == pieces,
            "ds_zero3_no_reuse": sent["reduce_scatter"] == pieces and sent["all_gather"] == 2 * pieces,
        }
        assert claims[mode], (seed, mode, sent)
        assert (
            WHY_RATIO[mode].format(padded=sent["reduce_scatter"], flat=sent["all_gather"], psi=psi)
            in q.working
        )


def test_show_working_gives_the_worked_solution_even_before_any_answer():
    """Lesson 20 tells attendees to see their own seed's working this way."""
    for qid in QUESTIONS:
        blank = sheet(17).check(qid, {}, show_working=True)
        assert blank.state == "unanswered" and blank.working == question(qid, 17).working
        assert repr(blank).endswith("Working: " + question(qid, 17).working)


def test_the_trace_question_leaves_out_reuse_distance_zero_because_its_trace_can_be_another_settings():
    """Lesson 20 says why question 5's list lacks ds_zero3_reuse0, which question 14 asks about."""
    assert "ds_zero3_reuse0" in FAMILIES["measure-deepspeed-3"][1] and "ds_zero3_reuse0" not in OPTIONS
    found = set()
    for seed in range(60):
        g = dict(question("traffic-detective", seed).given)
        widths, gpus = tuple(g["widths"]), g["gpus"]
        reuse0 = predicted("ds_zero3_reuse0", gpus, 0, widths)
        same = {o for o in OPTIONS if predicted(o, gpus, 0, widths) == replace(reuse0, mode=o)}
        assert set(twins("ds_zero3_reuse0", gpus, widths)) == same
        found |= same
    assert found == {"ds_zero3", "ds_zero3_no_reuse"}  # on some MLPs it gathers once, on others twice
    assert twins("ds_zero3_reuse0", 2, (10, 13, 5, 9)) == ("ds_zero3",)  # the two MLPs lesson 20 shows
    assert twins("ds_zero3_reuse0", 2, (7, 47, 45, 28)) == ("ds_zero3_no_reuse",)


def test_the_stage3_measurement_says_every_tensor_is_sharded_and_why_that_matters():
    threshold = "stage3_param_persistence_threshold"
    assert all(zero_setting(m, threshold) == 0 for m in FAMILIES["measure-deepspeed-3"][1])
    assert max(MODEL.sizes) <= deepspeed_default(threshold)  # the default would keep every tensor whole
    for seed in range(5):
        assert f"{threshold} = 0, where DeepSpeed's default, {deepspeed_default(threshold):,}" in (
            question("measure-deepspeed-3", seed).prompt
        )


def test_the_ds_zero3_measurement_gives_deepspeeds_own_reuse_default_as_a_power_of_ten():
    """The note reads DeepSpeed's default (10⁹ elements) from the lab's table of defaults."""
    assert power_of_ten(deepspeed_default("stage3_max_reuse_distance")) == "10⁹"
    assert [power_of_ten(n) for n in (1_000, 100_000, 500, 1_200, 50_000_000)] == [
        "10³",
        "10⁵",
        "500",
        "1,200",
        "50,000,000",
    ]
    prompts = [question("measure-deepspeed-3", seed).prompt for seed in range(40)]
    with_note = [p for p in prompts if "stage3_max_reuse_distance keeps" in p]
    assert with_note and all("DeepSpeed's default, 10⁹ elements, far beyond this MLP" in p for p in with_note)
    assert not any("{reuse}" in p or "{threshold" in p for p in prompts)


def test_the_stage3_question_says_max_live_parameters_releases_nothing():
    for seed in SEEDS:
        q = question("stage3-above-stage2", seed)
        live = dict(q.given)["max_live"]
        assert "stage3_max_live_parameters is not a cap on what a rank holds" in q.prompt
        assert f"stage3_max_live_parameters, {live:,} elements here, only stops the prefetcher" in q.working


def test_the_formula_working_derives_the_whole_bytes_from_the_figure_at_n():
    for seed in SEEDS:
        q = question("audit-deepspeed-formula", seed)
        psi, n = dict(q.given)["params"], dict(q.given)["gpus"]
        printed = float(re.findall(r'prints ([\d.,]+) "GB"', q.prompt)[0])
        assert round(printed * GiB / psi - 18 / n) == 2, seed  # a = figure/Ψ − b/N, from the printout
        per_param = 2 + Fraction(18, n)
        assert (
            f"over Ψ is {per_param.numerator / per_param.denominator:g} = a + 18/{n}, so a = 2" in q.working
        )


def test_three_significant_figures_always_pass_and_whole_counts_must_be_exact():
    """Lesson 20 says what check accepts: numbers within 0.5%, so three significant figures; exact counts."""
    assert f"{float(TOLERANCE):.1%}" == "0.5%"
    for qid in QUESTIONS:
        for seed in range(10):
            q = question(qid, seed)
            for part in q.parts:
                if part.kind != "number" or not part.value:
                    continue
                rounded = float(f"{float(part.value):.3g}")
                passes = check(seed, qid, q.answers() | {part.name: rounded}).correct
                assert passes == (not part.exact or rounded == part.value), (qid, seed, part.name)


def test_the_worked_tables_name_the_lab_models_tensors_as_lesson_08_does():
    """Lesson 11 calls layer k's weight Wk and its bias bk, from W0; the worked tables use the same names."""
    lesson = json.loads((Path(__file__).parents[1] / "notebooks" / "11_lab_deepspeed.ipynb").read_text())
    code = "\n".join("".join(c["source"]) for c in lesson["cells"] if c["cell_type"] == "code")
    names = ast.literal_eval(re.search(r"^names = (\[.*\])$", code, re.M).group(1))
    assert [name for name, _ in tensors()] == names == ["W0", "b0", "W1", "b1", "W2", "b2"]
    assert [math.prod(shape) for _, shape in tensors()] == list(MODEL.sizes)
    assert by_hand("ds_zero3", 2, 0).rows[0][0] == "W0"  # W0 is 30 × 13: 390 elements, as in lesson 11


def test_the_host_working_says_what_to_plan_when_deepspeeds_count_does_not_fit():
    """Question 2 plans host memory by DeepSpeed's estimator, as lesson 07 advises: the fewest nodes it names
    fit DeepSpeed's ZeRO-3 count per node, and one node fewer does not."""
    short = 0
    for seed in range(60):
        q = question("offload-and-host", seed)
        g, a = dict(q.given), q.answers()
        if a["deepspeed_fits"]:
            assert q.working.endswith("DeepSpeed's is the one to plan host memory by."), seed
            continue
        short += 1
        nodes = int(re.search(r"on (\d+) such nodes", q.working).group(1))
        both = a["offload"] == "optimizer+parameters"  # a ZeRO-2 pick moves to ZeRO-3, optimizer offloaded

        def per_node(k, both=both, g=g):
            return ds_estimator.zero3(g["params"], 0, g["gpus"], k, cpu_offload=True, cpu_offload_params=both)

        assert per_node(nodes).cpu_bytes <= g["host_gb"] * GB < per_node(nodes - 1).cpu_bytes, seed
        assert f"{format_bytes(per_node(nodes).cpu_bytes)} per node" in q.working, seed
    assert short  # some seeds do not fit DeepSpeed's count


def test_zero1_and_zero2_hold_and_send_the_same_after_backward_on_any_mlp():
    """Question 13's working says so for any model, at the lab's moment: after engine.backward()."""
    source = random.Random(13)
    for _ in range(40):
        widths = tuple(source.randint(2, 60) for _ in range(source.choice((2, 3, 4, 5))))
        gpus = source.choice((2, 3, 4, 8))
        rank = source.randrange(gpus)
        assert predicted("ds_zero1", gpus, rank, widths).values() == (
            predicted("ds_zero2", gpus, rank, widths).values()
        ), (widths, gpus, rank)


def test_the_two_counts_of_traffic_are_named_the_same_way_everywhere():
    """The lab's message trace counts an all-reduce once; the paper's count (lesson 11's "sent") twice."""
    for seed in range(5):
        for qid in ("traffic-detective", *FAMILIES):
            prompt = question(qid, seed).prompt
            assert "the lab's message trace" in prompt and "The paper's count" in prompt, qid
            assert "as the lab counts" not in prompt and "Count as the lab does" not in prompt, qid


def test_the_2psi_bound_between_a_weights_uses_is_worded_and_reasoned_the_same_way():
    """Questions 4 and 14 say the same: fewer than 2Ψ elements, as only the later layers come in between."""
    said = (
        "backward use comes fewer than 2Ψ elements after its forward use (in between, only the later layers'"
    )
    assert said in question("stage3-above-stage2", 0).prompt
    assert said in by_hand("ds_zero3", 2, 0).working()
    for widths in ((13, 30, 30, 5), (7, 47, 45, 28, 9), (40, 3, 50, 2, 60)):
        modules = [(a * b, b) for a, b in zip(widths, widths[1:], strict=False)]
        psi = sum(map(sum, modules))
        # DeepSpeed's release rule (the lab checks it on real ranks): at a reuse distance of 2Ψ and no
        # prefetch, no weight is released between its forward and backward use, so each is gathered once
        gathered = [i for g in ds_traffic.stage3_gathers(modules, 0, 10**18, 2 * psi) for i in g]
        assert sorted(gathered) == list(range(2 * len(modules))), widths


def test_the_host_question_states_the_packages_split_and_plans_by_it():
    """Question 2 gives the split it grades by: the ZeRO-Offload split for mixed-precision Adam, per GPU."""
    said = (
        "ZeRO-2 with the optimizer offloaded: GPU 2Ψ weights, host 2Ψ/N gradients + 12Ψ/N optimizer state; "
        "ZeRO-3 with the optimizer offloaded: GPU 2Ψ/N weights, host 2Ψ/N gradients + 12Ψ/N optimizer state; "
        "ZeRO-3 with the optimizer and parameters offloaded: GPU no model state, host 2Ψ/N weights + 2Ψ/N "
        "gradients + 12Ψ/N optimizer state."
    )
    for seed in SEEDS:
        q = question("offload-and-host", seed)
        g = dict(q.given)
        psi, n, act = g["params"], g["gpus"], g["activations"]
        assert said in q.prompt and "the paper's count" not in q.prompt, seed
        by_hand = {  # (stage, what is offloaded): (GPU bytes with activations, host bytes of the node)
            (Stage.ZERO2, "optimizer"): (2 * psi + act, 14 * psi),
            (Stage.ZERO3, "optimizer"): (Fraction(2 * psi, n) + act, 14 * psi),
            (Stage.ZERO3, "optimizer+parameters"): (act, 16 * psi),
        }
        plans = offload.plans(Setup(psi, n), act, n)
        assert {(p.stage, p.offload): (p.gpu, p.host) for p in plans} == by_hand, seed
        chosen = (q.part("stage").value, q.part("offload").value)
        assert q.part("host_gb").value == Fraction(by_hand[chosen][1], GB), seed


def test_the_tp_audit_says_the_tool_splits_the_slice_by_every_gpu():
    """Question 11's figure is the TP·PP slice divided by all GPUs, not the whole model over all GPUs."""
    for seed in SEEDS:
        q = question("audit-tp-sharding", seed)
        g = dict(q.given)
        psi, total, stage = g["params"], g["gpus"], Stage(g["stage"])
        slice_over_all = per_gpu(psi // (g["tp"] * g["pp"]), total, stage, MEGATRON_18).total
        assert f"prints {format_bytes(slice_over_all)} per GPU" in q.prompt, seed
        assert "divides that slice's ZeRO shards by all" in q.prompt, seed
        whole_over_all = per_gpu(psi, total, stage, MEGATRON_18).total  # the literal misreading
        assert format_bytes(whole_over_all) != format_bytes(slice_over_all), seed


def test_the_trace_question_counts_the_padding_it_says_it_counts():
    """Question 5's answer is the trace's elements, padding included, with an all-reduce counted twice."""
    for seed in range(60):
        q = question("traffic-detective", seed)
        g = dict(q.given)
        sent, psi = predicted(g["mode"], g["gpus"], 0, tuple(g["widths"])).sent, q.answers()["psi"]
        paper = sum(sent.values()) + sent.get("all_reduce", 0)
        assert q.part("sent_psi").value == Fraction(paper, psi), seed
        assert "padding included" in q.prompt and "padding included" in q.part("sent_psi").ask, seed


def test_the_recomputation_question_gives_the_card_in_bytes():
    for seed in SEEDS:
        q = question("stage-and-checkpointing", seed)
        card = dict(q.given)["card_gb"]
        assert f"{card} GB each ({card} × 10⁹ bytes: GB means 10⁹ bytes throughout)" in q.prompt, seed


def test_the_cheapest_cluster_is_never_the_fewest_gpus_but_may_be_the_cheapest_card():
    """The point says what holds on every seed: never the fewest GPUs, only sometimes the cheapest card."""
    cheapest_card_wins = []
    for seed in range(60):
        q = question("cheapest-cluster", seed)
        g = dict(q.given)
        costs = cluster_costs(
            g["params"], g["activations_gb"] * GB, {k: Fraction(p) for k, p in g["prices"].items()}
        )
        card = q.answers()["card"].upper()
        assert costs[card][0] > min(n for n, _ in costs.values()), seed
        cheapest_card_wins.append(card == min(g["prices"], key=lambda k: Fraction(g["prices"][k])))
        assert "the cheapest card does not always" in q.point, seed
    assert any(cheapest_card_wins) and not all(cheapest_card_wins)


def test_a_cluster_sized_with_10_percent_headroom_is_named_as_that_slip():
    """The sheet keeps no headroom; an attendee who keeps lesson 04's 10% is told so, where it changes
    the count, and the prompt says it."""
    named = 0
    for seed in range(40):
        q = question("cheapest-cluster", seed)
        g = dict(q.given)
        assert "within the card's whole memory (this sheet keeps no headroom)" in q.prompt, seed
        card = q.answers()["card"].upper()
        roomy = min_gpus(g["params"], int(card[:-2]) * GB * 9 // 10 - g["activations_gb"] * GB, 3)
        if roomy == q.answers()["gpus"]:
            continue
        mark = next(m for m in check(seed, q.id, q.answers() | {"gpus": roomy}).marks if m.part == "gpus")
        assert not mark.right and mark.slip == "kept-headroom" and "whole memory" in mark.message, seed
        named += 1
    assert named > 10


def test_the_host_question_names_deepspeeds_estimator_and_the_host_formula_it_grades_by():
    """Question 2 names both estimators and lesson 06, and gives the host formula per choice (zero_init on,
    one node); that formula, worked by hand, is the figure the grader expects."""
    for seed in SEEDS:
        q = question("offload-and-host", seed)
        g = dict(q.given)
        psi, n = g["params"], g["gpus"]
        formulas = {
            (Stage.ZERO2, "optimizer"): (f"max(4 B × {n} GPUs of the job, 16 B) × Ψ × 1.5", max(4 * n, 16)),
            (Stage.ZERO3, "optimizer"): ("16 B × Ψ × 1.5", 16),
            (Stage.ZERO3, "optimizer+parameters"): ("18 B × Ψ × 1.5", 18),
        }
        for (stage, what), (formula, _) in formulas.items():
            said = f"{stage.label} with the optimizer{' and parameters' * (what != 'optimizer')} offloaded: "
            assert said + formula in q.prompt, seed
        for name in ("estimate_zero2_model_states_mem_needs", "estimate_zero3_model_states_mem_needs"):
            assert name in q.prompt, seed
        assert "lesson 06 (DeepSpeed's memory estimator)" in q.prompt and "zero_init on" in q.prompt, seed
        per_param = formulas[(q.part("stage").value, q.part("offload").value)][1]
        expected = Fraction(math.floor(Fraction(3 * per_param * psi, 2)), GiB)
        assert q.part("deepspeed_host_gib").value == expected, seed


def test_the_accumulation_question_states_which_stage_reduces_every_micro_batch():
    """Question 7 states the package's rule, ZeRO-2 reduce-scatters every micro-batch and ZeRO-1 once,
    and grades 2Ψ and (k + 1)Ψ bf16 elements."""
    for seed in SEEDS:
        q = question("accumulation-traffic", seed)
        g = dict(q.given)
        psi, k = g["psi"], g["micro_batches"]
        assert (
            "ZeRO-1: a reduce-scatter of the gradients once per step and an all-gather of the weights once "
            "per step; ZeRO-2: a reduce-scatter of the gradients after every micro-batch and an all-gather "
            "of the weights once per step" in q.prompt
        ), seed
        assert "lesson 03 (Communication), section 6" in q.prompt, seed
        assert q.part("zero1_gb").value == Fraction(2 * 2 * psi, GB), seed
        assert q.part("zero2_gb").value == Fraction(2 * (k + 1) * psi, GB), seed


def test_the_fsdp2_prediction_says_padding_counts_for_weights_not_for_adam():
    """Question 12 under FSDP2 says what it counts: padded chunks for weights and gradients, own rows for
    Adam; worked by hand from the MLP's rows, those are the graded bytes."""
    seen = set()
    for seed in range(60):
        q = question("measure-pytorch", seed)
        mode, gpus, rank = case(q)
        if not mode.startswith("fsdp"):
            assert "padding included" not in q.prompt, seed
            continue
        assert "padding included" in q.prompt and "padding left out" in q.prompt, seed
        assert "lesson 10, the PyTorch lab, section 5" in q.prompt, seed
        padded = own = 0
        for fan_in, rows in pairwise(MODEL.widths):
            chunk = -(-rows // gpus)
            mine = max(0, min(chunk, rows - rank * chunk))
            for cols in (fan_in, 1):  # the weight, then the bias
                padded, own = padded + chunk * cols, own + mine * cols
        assert q.part("weights").value == q.part("gradients").value == 4 * padded, seed
        assert q.part("optimizer").value == 8 * own, seed
        seen.add((gpus, rank))
    assert len(seen) >= 3  # ranks that get fewer rows than others are among them


def test_the_reuse_rule_of_question_4_is_stated_once_with_each_use_counted():
    """Question 4 gives one rule for the reuse distance: every use in between counts, twice if used twice."""
    for seed in range(5):
        prompt = question("stage3-above-stage2", seed).prompt
        assert "a layer used twice in between counts twice" in prompt, seed
        assert "in all" not in prompt and "table of knobs" not in prompt, seed
