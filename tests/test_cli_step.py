"""`zero-lessons step`: JSON equal to the package's own timeline built here, text that shows the peak and its
reasons, folding that never hides a high point, and one-line errors that name the flag and its range."""

import json
import subprocess
import sys
from fractions import Fraction
from types import SimpleNamespace

import pytest

from zero_lessons import units
from zero_lessons.cli import main
from zero_lessons.planning import activations
from zero_lessons.planning.step import (
    DDP,
    FSDP2,
    DeepSpeed,
    Paper,
    layered_model,
    timeline,
    transformer_model,
)
from zero_lessons.present.step_text import fold

# The article's 7.5 B as a 32-block GPT (Ψ = 7,493,452,032 with biases and norms), written out here.
ARTICLE_SHAPE = activations.Transformer(layers=32, hidden=4352, heads=32, seq_len=2048, micro_batch=1)
ARTICLE = transformer_model(ARTICLE_SHAPE)


@pytest.fixture
def cli(capsys):
    """Run the command line's entry point in this process; return its exit status and what it printed."""

    def run(*args: str) -> SimpleNamespace:
        try:
            code = main(["step", *args])
        except SystemExit as stop:
            code = stop.code
        printed = capsys.readouterr()
        return SimpleNamespace(returncode=code or 0, stdout=printed.out, stderr=printed.err)

    return run


#: (flags, the framework they mean, gpus, recipe, checkpointing): one or more cases per framework.
CASES = [
    ("--stage 3", DeepSpeed(stage=3), 8, "mixed-adam", False),
    ("--stage 2 --checkpointing", DeepSpeed(stage=2), 8, "mixed-adam", True),
    (
        "--stage 1 --reduce-bucket-size 200M --overlap-comm --no-contiguous-gradients "
        "--allgather-bucket-size 1e8",
        DeepSpeed(
            stage=1,
            reduce_bucket_size=200_000_000,
            overlap_comm=True,
            contiguous_gradients=False,
            allgather_bucket_size=10**8,
        ),
        4,
        "mixed-adam",
        False,
    ),
    (
        "--stage 3 --prefetch-bucket-size 1e7 --max-live-parameters 3e8 --max-reuse-distance 0 "
        "--param-persistence-threshold 0 --sub-group-size 1e8 --no-overlap-comm",
        DeepSpeed(
            stage=3,
            prefetch_bucket_size=10**7,
            max_live_parameters=3 * 10**8,
            max_reuse_distance=0,
            param_persistence_threshold=0,
            sub_group_size=10**8,
            overlap_comm=False,
        ),
        16,
        "megatron-18",
        False,
    ),
    ("--framework paper --stage 0", Paper(stage=0), 8, "mixed-adam", False),
    ("--framework paper", Paper(stage=3), 2, "mixed-adam", True),
    (
        "--framework ddp --bucket-cap-mb 12.5 --gradient-as-bucket-view",
        DDP(bucket_cap_mb=Fraction(25, 2), gradient_as_bucket_view=True),
        8,
        "mixed-adam",
        False,
    ),
    ("--framework fsdp2", FSDP2(), 8, "mixed-adam", False),
    (
        "--framework fsdp2 --no-reshard-after-forward",
        FSDP2(reshard_after_forward=False),
        3,
        "fp32-adam",
        False,
    ),
]


def flags(case) -> list[str]:
    """The command line of one CASES entry."""
    text, _, gpus, recipe, kept = case
    return [*text.split(), "--gpus", str(gpus), "--recipe", recipe, *(["--checkpointing"] if kept else [])]


def expected(case):
    """The same case's timeline, built directly through the package."""
    _, framework, gpus, recipe, kept = case
    return timeline(ARTICLE, framework, gpus, recipe, checkpointing=kept)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_json_is_the_package_timeline(cli, case):
    out = cli(*flags(case), "--json")
    assert out.returncode == 0 and out.stderr == ""
    assert json.loads(out.stdout) == expected(case).to_dict()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_text_marks_the_peak_and_gives_each_part_its_reason(cli, case):
    out = cli(*flags(case))
    line = expected(case)
    assert out.returncode == 0 and out.stderr == ""
    marked = [row for row in out.stdout.splitlines() if row.endswith("← peak")]
    assert len(marked) == 1 and marked[0].startswith(line.peak.name + " ")
    total = units.format_number(units.in_unit(line.peak.total, "GB"), 3)
    assert f"peak: {line.peak.name}, {total}" in out.stdout
    for part in line.peak.parts:
        assert part.reason in out.stdout
    assert line.framework.label in out.stdout.splitlines()[0]


def test_the_article_at_stage_3_beside_the_paper_table(cli):
    out = cli("--gpus", "8", "--stage", "3").stdout
    assert "the paper's table (ZeRO-3): 14.987 GB" in out  # 16 B × 7,493,452,032 / 8
    assert "peak: backward block 32, 49.132 GB per rank (34.145 GB above the paper's table)" in out
    assert "⋮ 24 phases, forward block 5 to forward block 28: each +0.974 activations" in out


def test_all_phases_shows_every_row(cli):
    folded = cli("--gpus", "8", "--stage", "2").stdout
    every = cli("--gpus", "8", "--stage", "2", "--all-phases").stdout
    names = [p.name for p in timeline(ARTICLE, DeepSpeed(stage=2), 8).phases]
    assert "⋮" in folded and "⋮" not in every
    rows = every.split("\n\n")[1].splitlines()[1:]  # the table, under its heading
    assert len(rows) == len(names)
    assert all(row.startswith(name + " ") for row, name in zip(rows, names, strict=True))


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_folding_keeps_each_runs_high_point(case):
    line = expected(case)
    totals = [p.total for p in line.phases]
    shown = fold(line, [[i] for i in range(len(totals))], str)
    kept = [row[0] for row in shown if not isinstance(row, str)]
    assert line.peak_index in kept
    for a, b in zip(kept, kept[1:], strict=False):
        if b - a > 1:  # a folded gap: the run's first two rows end at a, its last two start at b
            assert max(totals[a + 1 : b]) <= max(totals[a - 1], totals[a], totals[b], totals[b + 1])


def test_a_plain_model_from_params(cli):
    out = cli("--params", "7B", "--layers", "7", "--layer-activations", "2GB", "--layer-input", "1MB",
              "--gpus", "8", "--stage", "3", "--checkpointing", "--json")  # fmt: skip
    model = layered_model([(10**9,)] * 7, [2 * 10**9] * 7, [10**6] * 7, name="7B params in 7 layers")
    assert json.loads(out.stdout) == timeline(model, DeepSpeed(stage=3), 8, checkpointing=True).to_dict()


def test_shape_flags_change_the_named_model(cli):
    out = cli("--model", "gpt2-xl", "--micro-batch", "4", "--attention", "flash", "--gpus", "4", "--json")
    shape = activations.Transformer(layers=48, hidden=1600, heads=25, seq_len=1024, micro_batch=4)
    model = transformer_model(shape, attention="flash")
    assert json.loads(out.stdout) == timeline(model, DeepSpeed(stage=2), 4).to_dict()


def test_gib_is_named_gib(cli):
    out = cli("--gpus", "8", "--stage", "3", "--unit", "GiB").stdout
    line = timeline(ARTICLE, DeepSpeed(stage=3), 8)
    assert f"{units.format_number(units.in_unit(line.peak.total, 'GiB'))} GiB per rank" in out
    assert "in GiB" in out and " GB" not in out


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ("--framework ddp --stage 2", "--stage applies to paper and deepspeed only"),
        ("--framework fsdp2 --stage 3", "--stage applies to paper and deepspeed only"),
        ("--framework fsdp2 --reduce-bucket-size 5", "--reduce-bucket-size is a DeepSpeed knob"),
        ("--bucket-cap-mb 5", "--bucket-cap-mb is a PyTorch DDP knob; it does not apply to deepspeed"),
        ("--framework ddp --no-reshard-after-forward", "--reshard-after-forward is a PyTorch FSDP2 knob"),
        (
            "--framework paper --overlap-comm",
            "--overlap-comm is a DeepSpeed knob; it does not apply to paper",
        ),
        ("--prefetch-bucket-size 5", "--prefetch-bucket-size applies to DeepSpeed stage 3 only, got stage 2"),
        ("--stage 1 --sub-group-size 5", "--sub-group-size applies to DeepSpeed stage 3 only, got stage 1"),
        ("--stage 0", "stage must be 1, 2 or 3 for DeepSpeed"),
        ("--reduce-bucket-size 0", "--reduce-bucket-size must be a whole number from 1 to"),
        ("--max-live-parameters 2e15", "--max-live-parameters must be a whole number from 0 to"),
        ("--framework ddp --bucket-cap-mb 0", "--bucket-cap-mb must be a number > 0, got 0"),
        (
            "--framework ddp --bucket-cap-mb 2000000",
            "--bucket-cap-mb must be a number > 0 and at most 1,048,576",
        ),
        ("--hidden 4350", "--hidden (4350) must be divisible by heads (32)"),
        ("--params 7B --hidden 4096", "--hidden describes a transformer; it does not combine with --params"),
        ("--params 7B --model 7b", "--model describes a transformer"),
        ("--params 7B --attention flash", "--attention describes a transformer"),
        ("--layer-activations 1GB", "--layer-activations describes a --params model; add --params"),
        ("--layer-input 0", "--layer-input describes a --params model; add --params"),
        ("--params 10 --layers 20", "--layers must be a whole number from 1 to 10, got 20"),
        ("--json --unit GiB", "--unit shapes the text; --json gives every phase in exact bytes"),
        ("--json --all-phases", "--all-phases shapes the text"),
        (
            "--params 7B --loss-copies 3",
            "--loss-copies describes a transformer; it does not combine with --params",
        ),
        ("--params 7B --head", "--head describes a transformer; it does not combine with --params"),
    ],
)
def test_a_flag_that_does_not_apply_or_is_out_of_range_is_one_line(cli, args, words):
    out = cli(*args.split(), "--gpus", "8")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and words in out.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ("--gpus 0", "argument --gpus: must be a whole number from 1 to 1,000,000, got 0"),
        ("--gpus 8 --stage 4", "argument --stage: must be 0, 1, 2 or 3, got '4'"),
        ("--gpus 8 --layers 1001", "argument --layers: must be a whole number from 1 to 1,000, got 1,001"),
        (
            "--gpus 8 --reduce-bucket-size lots",
            "argument --reduce-bucket-size: cannot read 'lots' as a count",
        ),
        ("--gpus 8 --unit XB", "argument --unit: must be one of B, kB"),
        ("--gpus 8 --framework jax", "argument --framework: invalid choice: 'jax'"),
        ("--gpus 8 --attention fused", "argument --attention: invalid choice: 'fused'"),
        ("--stage 3", "the following arguments are required: --gpus"),
        ("--gpus 8 --loss-copies 0", "argument --loss-copies: must be a whole number from 1 to 1,000, got 0"),
        (
            "--gpus 8 --loss-copies 2.5",
            "argument --loss-copies: must be a whole number from 1 to 1,000, got '2.5'",
        ),
    ],
)
def test_unreadable_values_are_named_with_their_range(cli, args, words):
    out = cli(*args.split())
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and words in out.stderr


#: A cross-entropy's 3 fp32 copies of the 7.5 B GPT's logits, one sequence of 2,048 tokens over 50,257 words.
LOSS = 3 * 2_048 * 50_257 * 4


def test_the_loss_counted_after_the_forward_pass(cli):
    """--loss-copies adds the loss to the last forward phase, as lesson 14 does, and keeps the larger peak."""
    line = timeline(ARTICLE, DeepSpeed(stage=2), 8)
    out = cli("--gpus", "8", "--stage", "2", "--loss-copies", "3").stdout.splitlines()
    held = line.phase("forward block 32").total + LOSS
    assert held > line.peak.total  # without checkpointing the loss tops stage 2's peak
    assert round(float(held) / 10**9, 3) == 58.634  # lesson 14's stage-2 peak with the loss
    assert (
        out[-2]
        == "the loss: 3 fp32 copies of the logits, held after forward block 32: 57.399 + 1.235 = 58.634 GB"
    )
    assert out[-1] == "peak, loss counted: the loss, 58.634 GB per rank"
    kept = cli("--gpus", "8", "--stage", "2", "--loss-copies", "3", "--checkpointing").stdout.splitlines()
    peak = timeline(ARTICLE, DeepSpeed(stage=2), 8, checkpointing=True).peak
    assert round(float(peak.total) / 10**9, 3) == 33.721 and peak.name == "optimizer step"
    assert kept[-1] == "peak, loss counted: still optimizer step, 33.721 GB per rank"


def test_the_loss_in_json(cli):
    line = timeline(ARTICLE, DeepSpeed(stage=3), 8)
    out = json.loads(cli("--gpus", "8", "--stage", "3", "--loss-copies", "3", "--json").stdout)
    assert out.pop("loss") == {
        "copies": 3,
        "bytes": LOSS,
        "after_phase": "forward block 32",
        "peak_phase": "the loss",
        "peak_total_bytes": line.phase("forward block 32").total + LOSS,
    }
    assert out == line.to_dict()  # the rest is the timeline as it is
    one = json.loads(cli("--gpus", "8", "--stage", "2", "--loss-copies", "1", "--json").stdout)["loss"]
    stage2 = timeline(ARTICLE, DeepSpeed(stage=2), 8).peak
    assert one["bytes"] == LOSS // 3 and one["peak_phase"] == "backward block 32"  # one copy tops nothing
    assert one["peak_total_bytes"] == stage2.total


def peak_of(cli, *args: str) -> Fraction:
    """The peak total the text reports, in GB, exactly as printed."""
    line = next(row for row in cli(*args).stdout.splitlines() if row.startswith("peak: "))
    return Fraction(line.split(", ")[1].split()[0])


def test_the_examples_say_what_the_model_computes(cli):
    stage3, stage2 = peak_of(cli, "--gpus", "8", "--stage", "3"), peak_of(cli, "--gpus", "8", "--stage", "2")
    assert stage2 > stage3  # at 7.5 B, stage 3 gathers less than it saves by splitting the weights
    assert peak_of(cli, "--gpus", "8", "--stage", "3", "--checkpointing") < stage3
    ddp = peak_of(cli, "--gpus", "8", "--framework", "ddp")
    assert peak_of(cli, "--gpus", "8", "--framework", "ddp", "--bucket-cap-mb", "100") == ddp
    fsdp2 = peak_of(cli, "--gpus", "8", "--framework", "fsdp2")
    assert peak_of(cli, "--gpus", "8", "--framework", "fsdp2", "--no-reshard-after-forward") > fsdp2


def test_help_lists_every_knob_and_the_worked_examples(cli):
    out = cli("--help")
    assert out.returncode == 0
    for knob in ("--bucket-cap-mb", "--max-reuse-distance", "--no-reshard-after-forward", "--overlap-comm"):
        assert knob in out.stdout
    assert "zero-lessons step --gpus 8 --stage 3  " in out.stdout  # the 7.5 B on 8 GPUs at stage 3
    assert "DeepSpeed knobs (only with --framework deepspeed)" in out.stdout


def test_as_a_user_runs_it_without_heavy_imports():
    code = (
        "import sys; from zero_lessons.cli import run; "
        "run(['step', '--gpus', '8', '--stage', '3']); "
        "print(sorted(m for m in ('matplotlib', 'ipywidgets', 'sympy', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stderr == ""
    assert out.stdout.splitlines()[-1] == "[]"
    assert "peak: backward block 32, 49.132 GB per rank" in out.stdout


def test_head_counts_the_tied_output_layers_gradient_through_the_backward_pass(cli):
    """--head is `transformer_model(shape, head=True)`: the article's GPT at stage 2 peaks in block 32's
    backward pass, 0.44 GB higher, with the gradient's reason among the parts."""
    out = cli("--framework", "deepspeed", "--stage", "2", "--gpus", "8", "--head", "--json")
    headed = transformer_model(ARTICLE_SHAPE, head=True)
    assert out.returncode == 0 and json.loads(out.stdout) == timeline(headed, DeepSpeed(stage=2), 8).to_dict()
    text = cli("--framework", "deepspeed", "--stage", "2", "--gpus", "8", "--head").stdout
    assert "the output layer's gradient for embedding's tied weight" in text
