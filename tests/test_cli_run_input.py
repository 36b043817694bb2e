"""`zero-lessons run` refuses bad input in one line naming the flag and the range, before any rank starts
(fast: nothing here trains; tests/test_cli_run.py trains), and its prediction rules hold on their own."""

import json

import pytest

from zero_lessons.cli import main
from zero_lessons.lab.results import Held
from zero_lessons.planning import ds_config
from zero_lessons.run import predict


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """Run the command line in this process: (exit status, stdout, stderr)."""
    with pytest.raises(SystemExit) as stop:
        main(list(args))
    printed = capsys.readouterr()
    return stop.value.code, printed.out, printed.err


@pytest.fixture
def good(tmp_path):
    """A config the advisor could write: ZeRO-1, bf16."""
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(ds_config.zero_config(1)))
    return str(path)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--ranks", "0"], "argument --ranks: must be a whole number from 1 to 8, got '0'"),
        (["--ranks", "9"], "argument --ranks: must be a whole number from 1 to 8, got '9'"),
        (["--ranks", "two"], "argument --ranks: must be a whole number from 1 to 8, got 'two'"),
        (["--steps", "0"], "argument --steps: must be a whole number from 1 to 100, got '0'"),
        (["--steps", "101"], "argument --steps: must be a whole number from 1 to 100, got '101'"),
        (["--timeout", "3601"], "argument --timeout: must be a whole number from 1 to 3600, got '3601'"),
    ],
)
def test_numbers_out_of_range_are_one_line_errors(capsys, good, flags, message):
    code, out, err = cli(capsys, "run", "--ds-config", good, *flags)
    assert (code, out) == (2, "")
    assert err == f"zero-lessons run: error: {message}\n"


def test_bad_config_files_are_one_line_errors(capsys, tmp_path):
    files = {
        "not-json.json": "{stage: 1",
        "list.json": "[1, 2]",
        "no-zero.json": json.dumps({"bf16": {"enabled": True}}),
        "zero-list.json": json.dumps({"zero_optimization": [3]}),
        "stage-5.json": json.dumps({"zero_optimization": {"stage": 5}}),
        "stage-text.json": json.dumps({"zero_optimization": {"stage": "3"}}),
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    expected = {
        "missing.json": "cannot read {}: No such file or directory",
        "not-json.json": "{} is not JSON: Expecting property name enclosed in double quotes",
        "list.json": "{} must hold a JSON object, got list",
        "no-zero.json": "{} must have a zero_optimization object, got none",
        "zero-list.json": "{} must have a zero_optimization object, got list [3]",
        "stage-5.json": "{}: zero_optimization.stage must be 0, 1, 2 or 3, got 5",
        "stage-text.json": "{}: zero_optimization.stage must be 0, 1, 2 or 3, got '3'",
    }
    for name, message in expected.items():
        path = str(tmp_path / name)
        code, out, err = cli(capsys, "run", "--ds-config", path, "--ranks", "2")
        assert (code, out) == (2, "")
        assert err.startswith(f"zero-lessons run: error: argument --ds-config: {message.format(path)}")
        assert err.count("\n") == 1


def test_two_configs_with_one_name_are_refused_before_training(capsys, tmp_path, good):
    (tmp_path / "sub").mkdir()
    other = tmp_path / "sub" / "ds.json"
    other.write_text(json.dumps(ds_config.zero_config(2)))
    code, out, err = cli(capsys, "run", "--ds-config", good, "--ds-config", str(other))
    assert (code, out) == (2, "")
    assert err.startswith("zero-lessons: error: --ds-config must name files with different names, got ")


def test_the_flag_is_required_and_the_help_shows_the_example(capsys):
    code, _, err = cli(capsys, "run", "--ranks", "2")
    assert code == 2 and "the following arguments are required: --ds-config" in err
    code, out, _ = cli(capsys, "run", "--help")
    assert code == 0
    assert "zero-lessons advise --params 13B --gpus 8 --gpu-memory 40GB --ds-config ds.json" in out
    assert "zero-lessons run --ds-config ds.json --ranks 2" in out


def test_configs_with_no_rule_say_why():
    fp16 = ds_config.zero_config(2) | {"bf16": {"enabled": False}, "fp16": {"enabled": True}}
    nvme = ds_config.zero_config(3, "optimizer", nvme_path="/local_nvme")
    one = ds_config.zero_config(2, "optimizer")
    one["zero_optimization"]["stage"] = 1
    assert predict.unpredicted(ds_config.zero_config(3, "optimizer+parameters")) is None
    assert "not bf16" in predict.unpredicted(fp16)
    assert "async-I/O" in predict.unpredicted(nvme)
    assert "not at stage 1" in predict.unpredicted(one)
    with pytest.raises(ValueError, match="^no prediction: NVMe offload"):
        predict.expected(nvme, 2, 0)


def test_offload_adds_the_buffers_deepspeed_allocates_by_hand_count():
    """The script's model, Ψ = 283,656 in tensors of 16,384, 512, 262,144, 512, 4,096 and 8 elements, on 2
    ranks: each slice is 141,828 elements; rank 0's slice touches the first three tensors, rank 1's the last
    four (the 262,144-element weight straddles the cut)."""
    psi, part, largest = 283_656, 141_828, 262_144
    offload = ds_config.zero_config(2, "optimizer")
    rank0 = 4 + 6 * part + 4 * largest + 8 * 3
    assert predict.expected(offload, 2, 0) == Held(2 * psi, 0, 12 * part, 0, rank0)
    assert predict.expected(offload, 2, 1).other == rank0 + 8
    stage3 = predict.expected(ds_config.zero_config(3, "optimizer"), 2, 0)
    assert (stage3.step_counters, stage3.other) == (0, 4 + 1 + 8 * 6)
    assert stage3 == predict.expected(ds_config.zero_config(3, "optimizer+parameters"), 2, 0)


def reports(path, changed: int = 0):
    """What a two-rank launch of the ZeRO-1 config at `path` would report if each rank held the prediction,
    rank 1's gradients off by `changed` bytes: the comparison and its output, checked without training."""
    from dataclasses import asdict

    from zero_lessons.run import RankReport, RunReport

    config = json.loads(path.read_text())
    out = []
    for rank in (0, 1):
        held = asdict(predict.expected(config, 2, rank))
        held["gradients"] += changed if rank == 1 else 0
        out.append(
            RankReport(path.name, rank, 2, 1, "none", 283_656, (1.0, 0.5), 0, held, 6 - 6 * rank or None)
        )
    return RunReport(tuple(out), 1.0)


@pytest.mark.parametrize("changed", [0, 2])
def test_a_rank_that_holds_other_bytes_fails_the_run_and_says_where(capsys, monkeypatch, good, changed):
    from pathlib import Path

    import zero_lessons.run

    monkeypatch.setattr(zero_lessons.run, "launch", lambda *args, **kwargs: reports(Path(good), changed))
    code, out, err = cli(capsys, "run", "--ds-config", good)
    assert (code, err) == (int(changed > 0), "")
    lines = out.splitlines()
    assert lines[0] == "ds.json: ZeRO-1, 2 ranks, Ψ = 283,656 parameters; bytes per rank"
    assert (
        "  consolidated      zero_to_fp32 rebuilt 6 fp32 tensors on rank 0, equal to the trained weights"
        in lines
    )
    assert any(
        line.startswith("  checkpoint files  ") for line in lines
    )  # the longest label, then two spaces
    verdict = next(line for line in lines if line.startswith("  as predicted"))
    if changed:
        assert verdict.endswith("NO: ds.json rank 1 gradients: measured 533,522, predicted 533,520")
    else:
        assert verdict == "  as predicted      yes"


def deepspeed_constant(module: str, name: str) -> object:
    """A constant from DeepSpeed's file `module` ("runtime/constants.py"), read without importing it."""
    import ast
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("deepspeed")
    if spec is None:
        pytest.skip("needs DeepSpeed (the lab extra)")
    tree = ast.parse((Path(spec.submodule_search_locations[0]) / module).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [name]:
            return ast.literal_eval(node.value)
    raise AssertionError(f"{name} not found in deepspeed/{module}")


def test_the_key_table_shows_deepspeeds_own_defaults_and_the_advisors_values_apart():
    from zero_lessons.run import keys

    table = keys.KeyTable()
    bf16, fp16 = table.get("bf16.enabled"), table.get("fp16.enabled")
    assert bf16.default is deepspeed_constant("runtime/constants.py", "BFLOAT16_ENABLED_DEFAULT") is False
    assert fp16.default is deepspeed_constant("runtime/constants.py", "FP16_ENABLED_DEFAULT") is False
    assert keys.advisor_sets(bf16) == "True" and keys.advisor_sets(fp16) == "—"
    row = table.rows[[k.path for k in table.keys].index("bf16.enabled")]
    assert row[1:3] == ["False", "True"]  # DeepSpeed's default, then what the advisor writes


def test_traffic_under_accumulation_by_the_paper_and_by_deepspeeds_defaults():
    from zero_lessons import communication
    from zero_lessons.run import keys

    psi = 1_000_003
    for stage in (0, 1, 2):
        for m in (1, 2, 4, 7):
            paper = communication.volume_elements(psi, 8, stage, micro_batches=m)
            assert keys.sent(stage, m, "ZeRO paper") * psi == paper
    # DeepSpeed: stage 1 reduces at the step's last micro-batch only, stage 2 after every micro-batch.
    assert [keys.sent(1, m, "DeepSpeed default") for m in (1, 4)] == [3, 3]
    assert [keys.sent(2, m, "DeepSpeed default") for m in (1, 4)] == [3, 9]
    rows = keys.Accumulation(4).cells()
    assert ["ZeRO-1", "DeepSpeed default", "3Ψ", "3Ψ", "0.75Ψ"] in rows
    assert ["ZeRO-2", "ZeRO paper", "2Ψ", "5Ψ", "1.25Ψ"] in rows
    for args, field in [((3, 1, "ZeRO paper"), "stage"), ((1, 0, "ZeRO paper"), "micro_batches")]:
        with pytest.raises(ValueError, match=field):
            keys.sent(*args)
    with pytest.raises(ValueError, match="account"):
        keys.sent(1, 1, "Megatron")


def test_the_summary_shows_the_mean_loss_over_ranks():
    from zero_lessons.run import launcher, summary

    def report(rank: int, losses: tuple[float, ...], world: int = 2) -> launcher.RankReport:
        held = dict.fromkeys(("weights", "gradients", "optimizer", "step_counters", "other"), 0)
        return launcher.RankReport("a.json", rank, world, 3, "none", 1, losses, 0, held, None)

    two = summary.Summary("a.json", (report(0, (1.0, 3.0)), report(1, (2.0, 0.5))), None, "none")
    assert two.mean_losses == (1.5, 1.75)
    assert "mean: 1.5000 1.7500" in dict(two.notes())["losses"]
    one = summary.Summary("a.json", (report(0, (1.0, 3.0), world=1),), None, "none")
    assert "mean" not in dict(one.notes())["losses"]


@pytest.mark.parametrize("changed", [0, 2])
def test_a_rank_whose_bytes_are_as_predicted_gets_one_line(good, changed):
    """ZeRO-1's two ranks hold different bytes (rank 1's slice is the shorter), so each keeps its own line."""
    from pathlib import Path

    from zero_lessons.run import summary

    (found,) = summary.summaries(reports(Path(good), changed), [good])
    rows = found.rows()
    if changed:  # rank 1's gradients differ: its measured and predicted lines apart
        assert [row[:2] for row in rows] == [
            ["0", "measured = predicted"],
            ["1", "measured"],
            ["", "predicted"],
        ]
        assert rows[1][3] != rows[2][3]
    else:
        assert [row[:2] for row in rows] == [["0", "measured = predicted"], ["1", "measured = predicted"]]
        assert rows[0][2:] != rows[1][2:]


def test_ranks_that_held_the_same_share_a_line():
    from zero_lessons.run import launcher, summary

    held = dict.fromkeys(("weights", "gradients", "optimizer", "step_counters", "other"), 4)
    ranks = tuple(launcher.RankReport("a.json", r, 8, 3, "none", 1, (1.0,), 0, held, None) for r in range(8))
    assert summary.Summary("a.json", ranks, None, "none").rows() == [["0–7", "measured", *["4"] * 5, "20"]]
    assert summary.Summary("a.json", ranks[:2], None, "none").rows()[0][0] == "0, 1"
