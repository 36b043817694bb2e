"""The advisor's offload step, the DeepSpeed configs it emits (checked by DeepSpeed's own schema), and its CLI."""

import json
import subprocess
import sys

import pytest

from conftest import need_module
from zero_lessons import GB, ds_config, offload
from zero_lessons.advice import advise
from zero_lessons.stages import Stage


def test_offload_only_when_nothing_else_fits():
    assert advise(13 * 10**9, 8, "40GB", cpu_memory="1TB").offload == "none"  # stage 3 fits on the GPUs
    pick = advise(70 * 10**9, 8, "40GB", cpu_memory="1TB")
    # Stage 2 keeps 140 GB of fp16 weights whole; stage 3 with only the optimizer offloaded keeps 35 GB.
    assert (pick.stage, pick.offload, pick.rule) == (Stage.ZERO3, "optimizer", "offload")
    pick = advise(70 * 10**9, 8, "24GB", cpu_memory="1TB")
    assert (pick.stage, pick.offload) == (Stage.ZERO3, "optimizer+parameters")
    on_gpu, off_gpu = offload.offloaded(70 * 10**9, 8, 3, parameters=True)
    assert on_gpu.total == 17.5 * GB and off_gpu.total * 8 == 980 * GB


def test_zero_offload_when_stage_two_with_host_optimizer_fits():
    pick = advise(7_500_000_000, 8, "16GB", cpu_memory="256GB")  # stage 3's 15 GB fits: no offload needed
    assert (pick.stage, pick.offload) == (Stage.ZERO3, "none")
    pick = advise(7_500_000_000, 4, "20GB", cpu_memory="256GB")  # stage 3 needs 30 GB; ZeRO-Offload needs 18.75
    assert (pick.stage, pick.offload) == (Stage.ZERO2, "optimizer")


def test_nothing_fits_without_host_memory_or_with_too_little():
    pick = advise(70 * 10**9, 8, "24GB")
    assert (pick.stage, pick.rule) == (None, "does-not-fit")
    assert any("no host memory given" in r for r in pick.reasons)
    pick = advise(70 * 10**9, 8, "10GB", cpu_memory="512GB")
    assert (pick.stage, pick.rule) == (None, "does-not-fit")


@pytest.mark.parametrize("stage, what", [(0, "none"), (1, "none"), (2, "none"), (3, "none"), (1, "optimizer"),
                                         (2, "optimizer"), (3, "optimizer"), (3, "optimizer+parameters")])
def test_config_shape(stage, what):
    zero = ds_config.zero_config(stage, what)["zero_optimization"]
    assert zero["stage"] == stage
    assert ("offload_optimizer" in zero) == (what != "none")
    assert ("offload_param" in zero) == (what == "optimizer+parameters")


@pytest.mark.parametrize("stage, what, words", [(0, "optimizer", "stage must be 1, 2 or 3"),
                                                (2, "optimizer+parameters", "parameter offload needs stage 3"),
                                                (2, "gpu", "offload must be one of")])
def test_config_rejects_impossible_choices(stage, what, words):
    with pytest.raises(ValueError, match=words):
        ds_config.zero_config(stage, what)


def _deepspeed_schema():
    need_module("deepspeed.runtime.zero.config")


@pytest.mark.parametrize("stage, what", [(0, "none"), (1, "none"), (2, "none"), (3, "none"), (1, "optimizer"),
                                         (2, "optimizer"), (3, "optimizer"), (3, "optimizer+parameters")])
@pytest.mark.parametrize("nvme", [None, "/local_nvme"])
def test_every_emitted_config_validates_in_deepspeed(stage, what, nvme):
    _deepspeed_schema()
    parsed = ds_config.validate(ds_config.zero_config(stage, what, nvme_path=nvme))
    assert int(parsed.stage) == stage
    if what != "none":
        assert parsed.offload_optimizer.device == ("nvme" if nvme else "cpu")


def test_advisor_configs_validate_in_deepspeed():
    _deepspeed_schema()
    for case in [(7_500_000_000, 8, "80GB"), (13 * 10**9, 8, "40GB"), (70 * 10**9, 8, "24GB"), (7_500_000_000, 4, "20GB")]:
        ds_config.validate(advise(*case, cpu_memory="1TB").ds_config())


def test_deepspeed_rejects_an_invalid_config():
    _deepspeed_schema()
    config = ds_config.zero_config(2)
    for broken in ({"stage": 5}, {"offload_optimizer": {"device": "gpu"}}, {"bucket_size_typo": 1}):
        with pytest.raises(Exception, match="validation error"):
            ds_config.validate({"zero_optimization": config["zero_optimization"] | broken})


def cli(*args):
    return subprocess.run([sys.executable, "-m", "zero_lessons", *args], capture_output=True, text=True, timeout=60)


def test_cli_advise_json_and_config_file(tmp_path):
    target = tmp_path / "ds.json"
    out = cli("advise", "--params", "13B", "--gpus", "8", "--gpu-memory", "40GB", "--json", "--ds-config", str(target))
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert (data["stage"], data["rule"], data["offload"]) == (3, "stage-3-or-more-gpus", "none")
    assert data["needs_bytes"] == [208 * 10**9, 71_500_000_000, 48_750_000_000, 26 * 10**9]
    assert json.loads(target.read_text()) == data["ds_config"] == ds_config.zero_config(3)


def test_cli_advise_text_and_errors():
    out = cli("advise", "--params", "70B", "--gpus", "8", "--gpu-memory", "24GB", "--cpu-memory", "1TB")
    assert out.returncode == 0 and "with optimizer+parameters offload" in out.stdout
    for args, flag in [(["--gpu-memory", "lots"], "--gpu-memory"), (["--activations", "-1GB"], "--activations"),
                       (["--ds-config", "/nonexistent/dir/ds.json"], "--ds-config")]:
        bad = cli("advise", "--params", "13B", "--gpus", "8", *(["--gpu-memory", "40GB"] if args[0] != "--gpu-memory" else []),
                  *args)
        assert bad.returncode == 2 and flag in bad.stderr and bad.stderr.count("\n") == 1, bad.stderr


def test_advice_html_for_the_explorer():
    html = advise(70 * 10**9, 8, "24GB", cpu_memory="1TB").to_html()
    assert html.startswith("<div class='zero-advice'><b>use ZeRO-3 with optimizer+parameters offload</b>")
    assert html.count("<li>") == 6
