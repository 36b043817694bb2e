"""The table renderers and the command line: in this process for speed, and a few runs as a user runs them."""

import json
import subprocess
import sys
from fractions import Fraction
from types import SimpleNamespace

import pytest

from zero_lessons import GB
from zero_lessons.cli import main
from zero_lessons.memory import per_gpu
from zero_lessons.present import stage_table

PSI = 7_500_000_000


@pytest.fixture
def cli(capsys):
    """Run the command line's entry point in this process; return its exit status and what it printed."""

    def run(*args: str) -> SimpleNamespace:
        try:
            code = main(list(args))
        except SystemExit as stop:
            code = stop.code
        printed = capsys.readouterr()
        return SimpleNamespace(returncode=code or 0, stdout=printed.out, stderr=printed.err)

    return run


def real_cli(*args: str) -> subprocess.CompletedProcess:
    """Run `python -m zero_lessons` with `args` in its own process, and capture what it prints."""
    return subprocess.run(
        [sys.executable, "-m", "zero_lessons", *args], capture_output=True, text=True, timeout=60
    )


def test_table_renders_the_article_numbers_everywhere():
    table = stage_table(PSI, 8)
    totals = [row.held.total / GB for row in table.rows]
    assert totals == [120, Fraction("41.25"), Fraction("28.125"), 15]
    for text in (table.to_text(), table.to_markdown(), table._repr_html_()):
        for number in ("120", "41.25", "28.125", "15"):
            assert number in text
    assert table.to_markdown().count("\n| ") == 6  # header, rule and four stages
    assert table._repr_html_().count("<tr") == 5


def test_table_marks_what_fits_the_budget():
    table = stage_table(PSI, 8, gpu_memory="32GB")
    assert [row.fits for row in table.rows] == [False, False, True, True]
    assert table.to_html().count("class='fits'") == 2


@pytest.mark.parametrize("run", ["in-process", "subprocess"])
def test_cli_text_reproduces_the_article(cli, run):
    args = ("table", "--params", "7.5B", "--gpus", "8")
    out = cli(*args) if run == "in-process" else real_cli(*args)
    assert out.returncode == 0 and out.stderr == ""
    totals = [line.split()[-3] for line in out.stdout.splitlines()[2:]]
    assert totals == ["120", "41.25", "28.125", "15"]


def test_cli_json_shape(cli):
    out = cli("table", "--params", "7.5B", "--gpus", "8", "--json")
    data = json.loads(out.stdout)
    assert {"params", "gpus", "recipe", "unit", "stages"} <= data.keys()
    assert data["recipe"] == {"name": "mixed-adam", "weight_bytes": 2, "grad_bytes": 2, "optimizer_bytes": 12}
    assert [s["stage"] for s in data["stages"]] == [0, 1, 2, 3]
    assert [s["bytes"]["total"] for s in data["stages"]] == [
        120 * 10**9,
        41_250_000_000,
        28_125_000_000,
        15 * 10**9,
    ]
    assert all(isinstance(s["bytes"]["total"], int) for s in data["stages"])
    assert data["stages"][2]["partitioned"] == ["optimizer", "gradients"]
    assert [s["communication_elements"] for s in data["stages"]] == [2 * PSI, 2 * PSI, 2 * PSI, 3 * PSI]
    assert set(data["stages"][0]) >= {"stage", "name", "partitioned", "bytes", "communication_elements"}


def test_cli_custom_bytes_and_gib(cli):
    out = cli(
        "table",
        "--params",
        "13B",
        "--gpus",
        "8",
        "--weight-bytes",
        "2",
        "--grad-bytes",
        "4",
        "--optimizer-bytes",
        "12",
        "--unit",
        "GiB",
        "--json",
    )
    data = json.loads(out.stdout)
    assert data["unit"] == "GiB" and data["recipe"]["grad_bytes"] == 4
    assert data["stages"][0]["bytes"]["total"] == 18 * 13 * 10**9
    assert data["stages"][0]["in_unit"]["total"] == pytest.approx(18 * 13 * 10**9 / 2**30)


def test_cli_fit(cli):
    data = json.loads(cli("fit", "--memory", "32GB", "--gpus", "64", "--json").stdout)
    assert [s["max_params"] for s in data["stages"]] == [
        2 * 10**9,
        7_641_791_044,
        14_422_535_211,
        128 * 10**9,
    ]
    assert per_gpu(7_641_791_044, 64, 1).total <= 32 * GB < per_gpu(7_641_791_045, 64, 1).total
    assert "ZeRO-3" in cli("fit", "--memory", "80GiB", "--gpus", "8").stdout


def test_cli_help_shows_examples(cli):
    out = cli("--help")
    assert out.returncode == 0 and "examples:" in out.stdout and "--params 7.5B" in out.stdout
    assert "--optimizer-bytes" in cli("table", "--help").stdout


@pytest.mark.parametrize(
    "args, flag",
    [
        (["table", "--params", "7.5B", "--gpus", "0"], "--gpus"),
        (["table", "--params", "7.5B", "--gpus", "-8"], "--gpus"),
        (["table", "--params", "7.5B", "--gpus", "2.5"], "--gpus"),
        (["table", "--params", "7.5B", "--gpus", "nan"], "--gpus"),
        (["table", "--params", "0", "--gpus", "8"], "--params"),
        (["table", "--params", "-7B", "--gpus", "8"], "--params"),
        (["table", "--params", "inf", "--gpus", "8"], "--params"),
        (["table", "--params", "__import__('os')", "--gpus", "8"], "--params"),
        (["table", "--params", "9" * 400, "--gpus", "8"], "--params"),
        (["table", "--params", "7.5B", "--gpus", "8", "--unit", "GHz"], "--unit"),
        (["table", "--params", "7.5B", "--gpus", "8", "--recipe", "adam-ish"], "--recipe"),
        (
            "table --params 7.5B --gpus 8 --weight-bytes -2 --grad-bytes 2 --optimizer-bytes 12".split(),
            "--weight-bytes",
        ),
        (
            "table --params 7.5B --gpus 8 --weight-bytes nan --grad-bytes 2 --optimizer-bytes 1".split(),
            "--weight-bytes",
        ),
        (["table", "--params", "7.5B", "--gpus", "8", "--grad-bytes", "2"], "--weight-bytes"),
        (
            "table --params 7.5B --gpus 8 --recipe fp32-adam "
            "--weight-bytes 1 --grad-bytes 1 --optimizer-bytes 1".split(),
            "--recipe",
        ),
        (["table", "--gpus", "8"], "--params"),
        (["fit", "--memory", "80", "--gpus", "8"], "--memory"),
        (["fit", "--memory", "-80GB", "--gpus", "8"], "--memory"),
        (["fit", "--memory", "0GB", "--gpus", "8"], "--memory"),
        (["stage5"], "table"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_two(cli, args, flag):
    out = cli(*args)
    assert out.returncode == 2
    assert out.stdout == "" and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert flag in out.stderr


def test_bad_input_in_a_real_process_is_one_line_and_exit_two():
    out = real_cli("fit", "--memory", "80", "--gpus", "8")
    assert (
        out.returncode == 2 and out.stdout == "" and out.stderr.count("\n") == 1 and "--memory" in out.stderr
    )


def test_readme_shows_what_the_cli_prints():
    import pathlib

    readme = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    command = "$ zero-lessons table --params 7.5B --gpus 8\n"
    shown = readme[readme.index(command) + len(command) :].split("```")[0]
    assert shown == real_cli("table", "--params", "7.5B", "--gpus", "8").stdout
