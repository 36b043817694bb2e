"""Every reproducer of issue 12 (items 1-8) and of issue 11 item 4, as a named test.

Each asserts a one-line error that names the field, or the correct result, within 1 s (in this
process, under a SIGALRM limit). The closed-pipe and full-disk cases need a real process and a
real file descriptor; those run as subprocesses, whose Python start-up the 1 s does not include.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

from guard import deadline, one_line_naming, run_cli, timed
from zero_lessons import checks, memory, recipes, symbolic, units
from zero_lessons.explorer import Explorer
from zero_lessons.explorer import views as explorer
from zero_lessons.planning import ds_estimator
from zero_lessons.planning.activations import activation_bytes
from zero_lessons.planning.advice import advise, advise_model
from zero_lessons.present.table import stage_table
from zero_lessons.stages import as_stage
from zero_lessons.workshop import check
from zero_lessons.workshop.sheets import question

FAST = 1.0
ARTICLE = ["--params", "7.5B", "--gpus", "8"]


def refused(call, error, *words):
    """`call()` raises `error` within 1 s, on one line that contains every one of `words`."""
    outcome, seconds = timed(call, FAST)
    assert isinstance(outcome, error), outcome
    message = str(outcome)
    assert seconds < FAST and "\n" not in message and all(word in message for word in words), message
    return message


def cli_refuses(argv, *names):
    """The CLI, in this process, exits 2 within 1 s with one line on stderr naming one of `names`."""
    code, out, err = run_cli(argv, FAST)
    assert code == 2 and out == "" and one_line_naming(err, *names), (code, out, err)
    return err


# Issue 12, item 1: a hang on a huge exponent in any bytes-per-parameter field.


@pytest.mark.parametrize("exponent", ["1e99999999", "1e9999999"])
def test_item1_cli_weight_bytes_with_a_huge_exponent_fails_at_once(exponent):
    err = cli_refuses(["table", *ARTICLE, "--weight-bytes", exponent], "--weight-bytes")
    assert "argument --weight-bytes: " in err and "Exceeds the limit" not in err


#: A workshop question with a numeric part, and its right answers.
QUESTION = "stage-and-checkpointing"
ANSWERS = question(QUESTION, 1).answers()


def test_item1_exercise_answer_with_a_huge_exponent_is_read_at_once():
    answer = ANSWERS | {"activations_gb": "1e99999999"}
    feedback, seconds = timed(lambda: check(1, QUESTION, answer), FAST)
    (mark,) = [m for m in feedback.marks if m.part == "activations_gb"]
    assert seconds < FAST and not feedback.correct and "cannot read '1e99999999'" in mark.message


def test_item1_explorer_byte_box_with_a_huge_exponent_is_marked_at_once():
    app = Explorer()
    app.recipe.value = "custom"
    with deadline(FAST):
        app.custom["weight_bytes"].value = "1e99999999"
    assert "weight_bytes" in app.errors["weight_bytes"].value


# Issue 12, item 2: OverflowError on valid or extreme input; the bounds, and exact formatting.


def test_item2_json_of_a_huge_byte_count_is_a_named_refusal_and_fractions_print():
    cli_refuses(
        "table --params 7 --gpus 3 --weight-bytes 1e400 --grad-bytes 0 --optimizer-bytes 0 --json".split(),
        "--weight-bytes",
    )
    code, out, err = run_cli(
        "table --params 7 --gpus 3 --weight-bytes 1/3 --grad-bytes 1024 --optimizer-bytes 0 --json".split(),
        FAST,
    )
    assert code == 0 and err == ""
    data = json.loads(out)
    assert data["recipe"]["weight_bytes"] == 1 / 3 and data["stages"][3]["bytes"]["weights"] == 7 / 9


def test_item2_fit_with_four_hundred_digits_is_refused_naming_memory():
    cli_refuses(["fit", "--memory", "1" * 400 + ".5B", "--gpus", "1"], "--memory")


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("gpu_memory", 2 * 10**317, ("gpu_memory must be at most 10**18 bytes", "a 318-digit number")),
        ("bandwidth", Fraction(1, 10**300), ("bandwidth must be at least 1 bit/s", "1e-300")),
        ("bandwidth", 10**16, ("bandwidth must be at most 10**15 bytes/s",)),
        ("gpu_memory", Fraction(1, 2), ("gpu_memory must be at least 1 byte",)),
    ],
)
def test_item2_explorer_settings_past_the_bounds_are_refused(field, value, words):
    refused(lambda: explorer.Settings(**{field: value}), ValueError, *words)


def test_item2_ds_estimator_buffer_factor_is_bounded():
    refused(
        lambda: ds_estimator.zero2(10**15, additional_buffer_factor=10**400).line(),
        ValueError,
        "additional_buffer_factor must be at most 1,000",
    )
    line, seconds = timed(lambda: ds_estimator.zero2(10**15, additional_buffer_factor=1000).line(), FAST)
    assert line.endswith("| offload_optimizer=cpu ") and seconds < FAST


CORNERS = [
    dict(params=p, gpus=n, gpu_memory=b, bandwidth=r, recipe=c)
    for p in (1, checks.MAX_PARAMS)
    for n in (1, checks.MAX_GPUS)
    for b in (1, checks.MAX_MEMORY)
    for r in (checks.MIN_BANDWIDTH, checks.MAX_BANDWIDTH)
    for c in (recipes.custom(1024, 1024, 1024), recipes.custom(Fraction(1, 10**99), 0, 0))
]


@pytest.mark.parametrize("corner", CORNERS, ids=range(len(CORNERS)))
def test_item2_every_view_renders_at_the_corners_of_the_bounds(corner):
    with deadline(FAST):
        view = explorer.compute_view(explorer.Settings(**corner))
        parts = [
            view.table.to_html(),
            view.table.to_text(),
            json.dumps(view.table.to_dict()),
            view.verdict,
            explorer.plot_memory_bars(view),
            explorer.plot_scaling(view),
            explorer.plot_comm(view),
            explorer.comm_html(view),
            explorer.advice_html(view),
            json.dumps(view.advice.to_dict()),
        ]
    assert all(parts) and "inf" not in parts[2] and "NaN" not in parts[2]


def test_item2_format_number_is_exact_and_never_a_float():
    assert units.format_number(Fraction(10**40 + 1, 10**3)) == "10000000000000000000000000000000000000.001"
    assert units.format_number(Fraction(1, 3), 30) == "0." + "3" * 30
    assert units.format_number(10**4400) == "a 4,401-digit number"
    assert units.json_number(Fraction(1, 3)) == 1 / 3 and units.json_number(10**30) == 10**30


# Issue 12, item 3: explorer views that disagree.


@pytest.mark.parametrize(
    "control, text",
    [
        ("bandwidth", "0." + "0" * 400 + "1 b/s"),
        ("gpu_memory", "1" + "0" * 400 + "GB"),
        ("gpu_memory", "1e17 GB"),
        ("bandwidth", "1001 TB/s"),
    ],
)
def test_item3_an_extreme_value_changes_no_view_and_marks_its_control(control, text):
    app = Explorer()
    views = ("verdict", "table", "bars", "scaling", "comm_chart", "comm_table", "advice")
    before, view = {name: getattr(app, name).value for name in views}, app.view
    with deadline(FAST):
        getattr(app, control).value = text
    assert {name: getattr(app, name).value for name in views} == before and app.view is view
    assert app.errors[control].value and "last valid settings" in app.status.value


# Issue 12, item 4 and issue 11 item 4: a closed stdout, a full disk.


def _zero_lessons(*args: str, stdout=subprocess.PIPE, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m zero_lessons args` as a real process."""
    return subprocess.run(
        [sys.executable, "-m", "zero_lessons", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=30,
        env=os.environ | (env or {}),
    )


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize(
    "args", [["table", *ARTICLE], ["table", *ARTICLE, "--json"], ["--help"], ["recipes"]]
)
def test_item4_a_reader_that_closed_the_pipe_ends_quietly_with_status_0(args, unbuffered):
    read, write = os.pipe()
    os.close(read)  # gone before the first byte, as with `| (exec 0<&-; sleep 1)`
    try:
        done = _zero_lessons(*args, stdout=write, env={"PYTHONUNBUFFERED": "1"} if unbuffered else {})
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (0, "")


def test_item4_the_shell_pipelines_of_the_issues():
    script = (
        f'"{sys.executable}" -m zero_lessons table --params 7.5B --gpus 8 | (exec 0<&-; sleep 0.3); '
        'echo "status ${PIPESTATUS[0]}"; '
        f'"{sys.executable}" -m zero_lessons table --params 7.5B --gpus 8 | head -c 10 >/dev/null; '
        'echo "status ${PIPESTATUS[0]}"'
    )
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert done.stdout.splitlines() == ["status 0", "status 0"] and done.stderr == ""


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
def test_item4_a_full_disk_is_one_line_about_the_output_and_status_1(unbuffered):
    with open("/dev/full", "w") as full:
        done = _zero_lessons(
            "table", *ARTICLE, stdout=full, env={"PYTHONUNBUFFERED": "1"} if unbuffered else {}
        )
    assert done.returncode == 1
    assert done.stderr == "zero-lessons: error: cannot write the output: No space left on device\n"


# Issue 12, item 5: text that reaches an evaluator.


def test_item5_evaluate_never_parses_text(tmp_path):
    marker = tmp_path / "marker"
    refused(
        lambda: symbolic.evaluate(
            f"__import__('pathlib').Path({str(marker)!r}).touch() or Psi", "mixed-adam", params=7
        ),
        TypeError,
        "expr must be a sympy expression",
    )
    assert not marker.exists()
    assert symbolic.evaluate(
        symbolic.per_gpu_expr(1), "mixed-adam", params=7, gpus=2
    ) == 7 * 4 + 7 * 12 / Fraction(2)
    refused(lambda: symbolic.evaluate(symbolic.Psi**10**9, "mixed-adam", params=7), ValueError, "expr")
    refused(lambda: symbolic.evaluate(symbolic.Psi, "mixed-adam", params="1e99999999"), TypeError, "params")


# Issue 12, item 6: typed text goes into HTML unescaped.


def test_item6_typed_markup_is_escaped_in_every_view():
    app = Explorer()
    app.params_text.value = "<img src=x onerror=alert(1)>"
    assert "&lt;img src=x onerror=alert(1)&gt;" in app.errors["params"].value
    assert "<img" not in app.errors["params"].value
    named = recipes.custom(2, 2, 12, name="<script>alert(1)</script>")
    html = stage_table(7_500_000_000, 8, named, gpu_memory="80GB").to_html()
    assert "<script>" not in html and "&lt;script&gt;" in html


# Issue 12, item 7: messages that name no field.

BIG = 10**4400


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: checks.params(BIG), ValueError, ("params", "a 4,401-digit number")),
        (lambda: checks.amount("memory", BIG), ValueError, ("memory", "a 4,401-digit number")),
        (lambda: as_stage(BIG), ValueError, ("stage", "a 4,401-digit number")),
        (lambda: recipes.get(BIG), TypeError, ("recipe", "a 4,401-digit number")),
        (lambda: memory.per_gpu(7, 1, 1, recipe=["mixed-adam"]), TypeError, ("recipe", "list")),
        (lambda: check(1, [QUESTION], ANSWERS), TypeError, ("question must be one of", "['stage-")),
        (lambda: recipes.get(Decimal("sNaN")), TypeError, ("recipe",)),
        (lambda: units.as_bytes("memory", Decimal("sNaN")), ValueError, ("memory", "finite")),
        (lambda: checks.gpus(Decimal("sNaN")), TypeError, ("gpus",)),
        (
            lambda: advise_model(None, 8, "80GB"),
            TypeError,
            ("model must be an activations.Transformer", "None"),
        ),
        (lambda: activation_bytes(explorer.Settings()), TypeError, ("model",)),
        (lambda: explorer.compute_view(None), TypeError, ("settings must be an explorer.Settings",)),
        (lambda: explorer.plot_comm(explorer.Settings()), TypeError, ("view",)),
        (lambda: Explorer(None), TypeError, ("settings",)),
        (
            lambda: units.format_number(1, digits=10**8),
            ValueError,
            ("digits must be a whole number from 0 to 30",),
        ),
        (lambda: units.format_number(1, digits=-1), ValueError, ("digits",)),
        (lambda: units.format_number(1, digits="3"), TypeError, ("digits",)),
        (lambda: units.format_number(1, digits=None), TypeError, ("digits",)),
    ],
)
def test_item7_every_message_names_its_field(call, error, words):
    refused(call, error, *words)


def test_item7_numpy_scalars_are_read_like_python_numbers():
    assert memory.max_params(np.int64(8), np.float64(80e9), np.int64(3)) == 40_000_000_000
    assert memory.per_gpu(np.int64(7_500_000_000), 8, 1).total == Fraction("41.25") * 10**9
    exact = ANSWERS["activations_gb"]
    for number in (np.float64(exact), np.float32(exact), Decimal(str(exact))):
        assert check(1, QUESTION, ANSWERS | {"activations_gb": number}).correct, number
    refused(lambda: memory.per_gpu(7, np.float64(8.0), 1), TypeError, "gpus", "floats are not exact")


# Issue 12, item 8: inconsistent limits.


def test_item8_gpus_per_node_has_one_bound_on_every_path():
    cli_refuses(
        ["advise", "--params", "7B", "--gpus", "8", "--gpu-memory", "80GB", "--gpus-per-node", "1025"],
        "--gpus-per-node",
    )  # stage 1 fits here: the advisor never reaches offload
    refused(lambda: advise(7 * 10**9, 8, "80GB", gpus_per_node=1025), ValueError, "gpus_per_node", "1,024")
    assert advise(70 * 10**9, 8, "24GB", cpu_memory="2TB", gpus_per_node=1024).offload == "optimizer"


def test_item8_activations_zero_and_zero_gb_agree_and_text_is_accepted():
    answers = [
        run_cli(
            [
                "advise",
                "--params",
                "7B",
                "--gpus",
                "8",
                "--gpu-memory",
                "80GB",
                "--activations",
                zero,
                "--json",
            ],
            FAST,
        )
        for zero in ("0", "0GB", "0 GiB")
    ]
    assert all(code == 0 and err == "" for code, _, err in answers)
    assert len({out for _, out, _ in answers}) == 1
    assert advise(7 * 10**9, 8, "80GB", activations="12GB") == advise(
        7 * 10**9, 8, "80GB", activations=12 * 10**9
    )
    refused(lambda: advise(7 * 10**9, 8, "80GB", activations="-1GB"), ValueError, "activations")


@pytest.mark.parametrize("stray", ["a\nb", "\x1b[31mred\x1b[0m", "x\ty", "\x00"])
def test_item8_unrecognized_arguments_are_shown_with_repr_on_one_line(stray):
    err = cli_refuses(["table", *ARTICLE, stray], repr(stray))
    assert "\x1b" not in err and "unrecognized arguments" in err


@pytest.mark.parametrize("name", ["", "   "])
def test_item8_an_empty_ds_config_name_is_an_error_naming_the_flag(name):
    cli_refuses(
        ["advise", "--params", "13B", "--gpus", "8", "--gpu-memory", "40GB", "--ds-config", name],
        "--ds-config",
    )


# Issue 11, item 4: the command line, tightened.


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["table", "--param", "7B", "--gpus", "8"], "'--param'"),
        (["table", "--parms", "7B", "--gpus", "8"], "'--parms'"),
        (["advise", "--params", "7B", "--gpus", "8", "--gpu-mem", "40GB"], "'--gpu-mem'"),
        (["fit", "--mem", "80GB", "--gpus", "8"], "'--mem'"),
        (["table", *ARTICLE, "--weight", "2"], "'--weight'"),
    ],
)
def test_issue11_no_abbreviations_and_a_typo_is_named_as_unrecognized(argv, flag):
    err = cli_refuses(argv, flag)
    assert "unrecognized arguments" in err and "required" not in err


def test_issue11_advise_reads_as_sentences_and_names_flags():
    code, out, err = run_cli(["advise", "--params", "70B", "--gpus", "8", "--gpu-memory", "80GB"], FAST)
    assert code == 0 and err == ""
    first = out.splitlines()[0]
    assert first.startswith("No stage fits. ") and first.endswith(".") and "fits: " not in first.lower()
    assert "--cpu-memory" in out and "cpu_memory" not in out


def test_issue11_no_name_is_repeated_in_an_error():
    err = cli_refuses(["table", "--params", "7BB", "--gpus", "8"], "--params")
    assert err.startswith("zero-lessons table: error: argument --params: cannot read '7BB'")
    for argv in (
        ["table", "--params", "0", "--gpus", "8"],
        ["table", *ARTICLE[:2], "--gpus", "0"],
        ["fit", "--memory", "0GB", "--gpus", "8"],
        ["table", *ARTICLE, "--unit", "GHz"],
    ):
        err = cli_refuses(argv, "argument --")
        flag = err.split("argument ")[1].split(":")[0]
        assert err.count(flag.lstrip("-").replace("-", "_")) == 1, err
