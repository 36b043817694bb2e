"""The advisor's offload step, its DeepSpeed configs (checked by DeepSpeed's own schema), and its CLI."""

import json
import subprocess
import sys
from html import escape

import pytest

from conftest import need_module
from guard import one_line_naming, run_cli
from zero_lessons import GB, Setup, memory
from zero_lessons.planning import ds_config, ds_estimator, ds_scale, offload
from zero_lessons.planning.advice import RULES, advise
from zero_lessons.present import html
from zero_lessons.stages import Stage


def test_offload_only_when_nothing_else_fits():
    assert advise(13 * 10**9, 8, "40GB", cpu_memory="1TB").offload == "none"  # stage 3 fits on the GPUs
    pick = advise(70 * 10**9, 8, "40GB", cpu_memory="2TB")
    # Stage 2 keeps 140 GB of fp16 weights whole; stage 3 with only the optimizer offloaded keeps 35 GB.
    assert (pick.stage, pick.offload, pick.rule) == (Stage.ZERO3, "optimizer", "offload")
    pick = advise(70 * 10**9, 8, "24GB", cpu_memory="2TB")  # the 17.5 GB weight shard fits 24 GB
    assert (pick.stage, pick.offload) == (Stage.ZERO3, "optimizer")
    on_gpu, off_gpu = offload.offloaded(70 * 10**9, 8, 3)
    assert on_gpu.total == 17.5 * GB and off_gpu.total * 8 == 980 * GB  # 14 B per parameter on the host
    pick = advise(70 * 10**9, 8, "16GB", cpu_memory="4TB")  # the weight shard does not fit 16 GB
    assert (pick.stage, pick.offload) == (Stage.ZERO3, "optimizer+parameters")
    on_gpu, off_gpu = offload.offloaded(70 * 10**9, 8, 3, parameters=True)
    assert on_gpu.total == 0 and off_gpu.total * 8 == 1120 * GB


def test_deepspeed_host_accounting_refuses_what_the_papers_count_allows():
    """Issue 14's case: 70B on 8 x 24 GB with 1 TB of host memory per node. ZeRO-3 with the optimizer
    offloaded keeps the 17.5 GB weight shard on each GPU. The package's count (the ZeRO-Offload paper's
    split) puts 14 bytes per parameter on the host (980 GB: it fits); DeepSpeed's own estimator counts 16
    (the gradients in fp32) times its margin of 1.5, 1,680 GB: it does not. Offloading the parameters
    too fits neither count. The advisor recommends nothing, and says why."""
    pick = advise(70 * 10**9, 8, "24GB", cpu_memory="1TB")
    assert (pick.stage, pick.offload, pick.rule) == (None, "none", "does-not-fit")
    (why,) = [r for r in pick.reasons if r.startswith("ZeRO-3 with optimizer offload")]
    assert "980 GB by the package's count" in why and "1680 GB by DeepSpeed's estimator" in why
    assert "does not fit by DeepSpeed's estimator" in why and "gradients on the host in fp32" in why
    assert "(24 bytes per parameter in host memory, where the package counts 14)" in why
    (both,) = [r for r in pick.reasons if r.startswith("ZeRO-3 with optimizer+parameters offload")]
    assert "1120 GB by the package's count" in both and both.endswith("1000 GB: neither count fits")
    estimate = ds_estimator.zero3(70 * 10**9, 0, 8, cpu_offload=True, cpu_offload_params=False)
    assert estimate.cpu_bytes == 1680 * GB
    assert (
        "does not fit by DeepSpeed's estimator"
        in cli(
            "advise", "--params", "70B", "--gpus", "8", "--gpu-memory", "24GB", "--cpu-memory", "1TB"
        ).stdout
    )


def test_the_offload_order_is_stated_once_and_both_counts_are_checked():
    setup = Setup(70 * 10**9, 8, gpu_memory="24GB")
    assert [(p.stage, p.offload) for p in offload.plans(setup, 0, 8)] == list(offload.ORDER)
    assert offload.least(setup, 0, 10**12, 8).offload == "optimizer"  # by the package's count
    assert offload.deepspeed_host(setup, 3, "optimizer", 8) > 10**12  # DeepSpeed's does not


def test_thin_headroom_and_activations_left_at_zero_are_flagged():
    """The warning fires when a pick leaves under 10% free, which only a headroom under 10% allows."""
    pick = advise(7_500_000_000, 4, "16GB", cpu_memory="256GB", headroom=0)  # ZeRO-Offload: 1 GB free
    assert (pick.stage, pick.offload) == (Stage.ZERO2, "optimizer")
    assert any("only 1 GB of 16 GB per GPU is left free, under 10%" in w for w in pick.warnings)
    # the warning names the next choice in offload's order that leaves 10%: ZeRO-3 keeps a 3.75 GB shard
    assert any(w.endswith("; ZeRO-3 with optimizer offload would leave 12.25 GB free") for w in pick.warnings)
    assert any("activations were left at 0" in w for w in pick.warnings)
    host = advise(70 * 10**9, 8, "24GB", cpu_memory="1.8TB")  # DeepSpeed's 1,680 GB of 1,800 GB: 6.7% free
    assert any("120 GB of 1800 GB of host memory per node is left free" in w for w in host.warnings)
    roomy = advise(7_500_000_000, 8, "80GB", activations="10GB")  # 51.25 GB of 80 GB, activations given
    assert roomy.warnings == ()
    tight = advise(7_500_000_000, 8, "44GB", activations="1GB", headroom="3%")  # ZeRO-1: 42.25 GB of 44 GB
    assert [w[:40] for w in tight.warnings] == ["only 1.75 GB of 44 GB per GPU is left fr"]
    assert "warning: only 1.75 GB" in repr(tight) and tight.to_dict()["warnings"] == list(tight.warnings)
    assert tight.warnings[0].endswith("; ZeRO-2 would leave 14.875 GB free")  # 44 - 28.125 - 1
    assert advise(7_500_000_000, 8, "44GB", activations="1GB").stage == Stage.ZERO2  # the default: 10%


def test_a_stage_1_or_2_pick_is_warned_when_deepspeeds_estimator_leaves_too_little():
    """7.5 B on 8 x 32 GB. The paper's ZeRO-2, 2 x 7.5 + 14 x 7.5 / 8 = 28.125 GB, fits the 28.8 GB the 10%
    headroom leaves, so the pick is ZeRO-2. DeepSpeed's estimator adds the fp32 copy of the gradient shard,
    4 x 7.5 / 8 = 3.75 GB: 2 x 7.5 + 18 x 7.5 / 8 = 31.875 GB, which leaves 0.125 GB of 32 GB free."""
    pick = advise(7_500_000_000, 8, "32GB")
    assert (pick.stage, pick.needs[Stage.ZERO2]) == (Stage.ZERO2, 28.125 * GB)
    expected = (
        "by DeepSpeed's estimator this pick needs 31.875 GB per GPU (it adds an fp32 copy of the gradient "
        "shard, made at the optimizer step), leaving 0.125 GB of 32 GB free, under 10%"
    )
    assert pick.warnings[0] == expected and f"warning: {expected}" in repr(pick)
    assert expected in pick.to_dict()["warnings"] and escape(expected) in html.advice_html(pick)
    code, out, _ = run_cli(["advise", "--params", "7.5B", "--gpus", "8", "--gpu-memory", "32GB", "--json"])
    assert code == 0 and expected in json.loads(out)["warnings"]
    code, out, _ = run_cli(["advise", "--params", "7.5B", "--gpus", "8", "--gpu-memory", "32GB"])
    assert code == 0 and f"warning: {expected}" in out
    # 80 GB cards: the pick is ZeRO-1 (41.25 GB by the paper), and DeepSpeed's 31.875 GB leaves 48 GB free
    roomy = advise(7_500_000_000, 8, "80GB")
    assert roomy.stage == Stage.ZERO1 and not any("DeepSpeed's estimator" in w for w in roomy.warnings)


def test_the_estimator_warning_counts_activations_the_headroom_asked_for_and_stage_1():
    # 1 GB of activations, 5% headroom: the paper's 29.125 GB fits 30.4 GB; DeepSpeed's 32.875 GB does not
    over = advise(7_500_000_000, 8, "32GB", activations="1GB", headroom="5%")
    assert over.stage == Stage.ZERO2
    assert over.warnings[-1] == (
        "by DeepSpeed's estimator this pick needs 32.875 GB per GPU with the activations (it adds an fp32 "
        "copy of the gradient shard, made at the optimizer step), more than the 32 GB a GPU holds"
    )
    # stage 1 on 2 GPUs: the paper's 4 + 12/2 = 10 GB per 10^9 parameters fits 10.35 GB (11.5 GB less 10%);
    # DeepSpeed's estimator, shared by its stages 1 and 2, gives 2 + 18/2 = 11 GB: 0.5 GB free
    one = advise(10**9, 2, "11.5GB")
    assert one.stage == Stage.ZERO1 and one.needs[Stage.ZERO1] == 10 * GB
    assert any("needs 11 GB per GPU" in w and "leaving 0.5 GB of 11.5 GB free" in w for w in one.warnings)
    # the estimator counts mixed-precision Adam only: 8-bit Adam's ZeRO-2, 15 + 7.5 GB, is not checked by it
    eight_bit = advise(7_500_000_000, 8, "32GB", recipe="mixed-adam-8bit")
    assert eight_bit.stage == Stage.ZERO2 and not any(
        "DeepSpeed's estimator" in w for w in eight_bit.warnings
    )
    # stage 3 and offload picks are sized by other counts: no such warning
    assert not any("DeepSpeed's estimator this pick" in w for w in advise(7_500_000_000, 8, "20GB").warnings)


def test_the_estimator_warning_uses_deepspeeds_own_function():
    s12 = need_module("deepspeed.runtime.zero.stage_1_and_2")
    for params, gpus in ((7_500_000_000, 8), (10**9, 2), (70 * 10**9 + 1, 24)):
        _, gpu_bytes = s12.estimate_zero2_model_states_mem_needs(params, gpus, 1, cpu_offload=False)
        assert ds_estimator.zero2_gpu(Setup(params, gpus)) == gpu_bytes  # DeepSpeed's int() included
    assert gpu_bytes == ds_estimator.zero2(70 * 10**9 + 1, 24, cpu_offload=False).gpu_bytes
    _, gpu_bytes = s12.estimate_zero2_model_states_mem_needs(7_500_000_000, 8, 1, cpu_offload=False)
    assert gpu_bytes == 31.875 * GB
    assert "needs 31.875 GB per GPU" in advise(7_500_000_000, 8, "32GB").warnings[0]


def test_offload_leaves_the_headroom_free_too():
    """7.5 B on 4 x 16 GB: ZeRO-2 with the optimizer offloaded keeps the 15 GB of whole 16-bit weights,
    6.25% free, so the advice takes the next offload, ZeRO-3's 3.75 GB shard, and says in one reason what it
    passed over."""
    pick = advise(7_500_000_000, 4, "16GB", cpu_memory="256GB")
    assert (pick.stage, pick.offload, pick.rule) == (Stage.ZERO3, "optimizer", "offload")
    assert offload.offloaded(7_500_000_000, 4, 2)[0].total == 15 * GB
    (passed,) = [r for r in pick.reasons if "would leave only" in r]
    assert passed.startswith("ZeRO-2 with optimizer offload would leave only 1 GB (6.3%) free: under 10%")
    # it comes before the offload it chose, as the reader meets them in offload's order
    assert pick.reasons.index(passed) < next(
        i for i, r in enumerate(pick.reasons) if r.startswith("ZeRO-3 with optimizer offload: 3.75 GB")
    )
    assert [w for w in pick.warnings if "per GPU is left free" in w] == []
    # 16 GB cards: stage 3 alone keeps 15 GB (6.25% free); with host memory the advice offloads instead
    sixteen = advise(7_500_000_000, 8, "16GB", cpu_memory="256GB")
    assert (sixteen.stage, sixteen.offload) == (Stage.ZERO3, "optimizer")
    assert "ZeRO-3 would leave only 1 GB (6.3%) free" in str(sixteen)
    assert sum("would leave only" in r for r in sixteen.reasons) == 1  # one line: the lowest choice passed
    bare = advise(7_500_000_000, 8, "16GB")  # without host memory nothing fits with 10% free
    assert (bare.stage, bare.rule) == (None, "does-not-fit") and "ZeRO-3 would leave only 1 GB" in str(bare)
    assert advise(7_500_000_000, 8, "16GB", headroom=0).stage == Stage.ZERO3


def test_the_lowest_offload_that_leaves_the_headroom_is_the_choice():
    """With headroom=0 (the bare rule), ZeRO-2 with optimizer offload fits 4 x 16 GB until 2 GB of
    activations join its 15 GB; then the advice moves to ZeRO-3 by itself. With the default 10% it is
    ZeRO-3 either way."""
    assert advise(7_500_000_000, 4, "16GB", cpu_memory="256GB", headroom=0).stage == Stage.ZERO2
    bare = advise(7_500_000_000, 4, "16GB", cpu_memory="256GB", activations="2GB", headroom=0)
    assert (bare.stage, bare.offload, bare.warnings) == (Stage.ZERO3, "optimizer", ())
    assert bare.needs[Stage.ZERO3] == 32 * GB
    assert "ZeRO-3 with optimizer offload: 5.75 GB per GPU before the gathered layers" in str(bare)
    pick = advise(7_500_000_000, 4, "16GB", cpu_memory="256GB", activations="2GB")
    assert (pick.stage, pick.offload) == (Stage.ZERO3, "optimizer")  # its one warning: the whole 15 GB model
    assert [w.split(":")[0] for w in pick.warnings] == [
        "build the model inside deepspeed.zero.Init, which is code, not a config key"
    ]
    assert not any("would leave only" in r for r in pick.reasons)  # ZeRO-2's 17 GB does not fit at all


def test_stage_3_host_figures_assume_zero_init_and_say_so():
    """DeepSpeed's 1,680 GB for 70B on 8 x 24 GB is its zero_init=1 line; without zero.Init each of the 8
    processes builds the fp32 model first: 4 B x 70e9 x 8 x 1.5 = 3,360 GB. No config key turns it on."""
    pick = advise(70 * 10**9, 8, "24GB", cpu_memory="2TB")
    assert any("1680 GB by DeepSpeed's estimator with zero.Init, of 2000 GB: fits" in r for r in pick.reasons)
    (warning,) = [w for w in pick.warnings if "zero.Init" in w]
    assert "code, not a config key" in warning and "3360 GB per node" in warning
    setup = Setup(70 * 10**9, 8)
    for what in ("optimizer", "optimizer+parameters"):
        bare = offload.deepspeed_host(setup, 3, what, 8, zero_init=False)
        assert bare == 4 * 70 * 10**9 * 8 * 3 // 2 == 3360 * GB
    assert "zero.Init" not in json.dumps(pick.ds_config())  # the config cannot say it
    roomy = advise(70 * 10**9, 8, "24GB", cpu_memory="4TB")  # 3,360 GB fits too: the host needs no zero.Init,
    (gpu,) = [w for w in roomy.warnings if "zero.Init" in w]  # but each 24 GB GPU still does
    assert "host" not in gpu and gpu.endswith(
        "the whole 16-bit model, 140 GB, onto each GPU, more than its 24 GB"
    )


def test_advice_says_which_ranking_it_follows():
    pick = advise(7_500_000_000, 8, "80GB")
    assert pick.ranking.startswith(
        "Ranking: the ZeRO paper's. Stages 0-2 send 2Ψ per GPU per step and stage 3 sends 3Ψ"
    )
    assert "DeepSpeed's defaults differ: ZeRO-1/2 send about 3Ψ" in pick.ranking
    assert "lesson 10" not in pick.ranking and "lesson 11" in pick.ranking
    # every text answer shows the one-line form; the paragraph is kept for whoever asks for it
    assert repr(pick).endswith(pick.ranking_line) and pick.ranking not in repr(pick)
    # a notebook shows many answers, so its view leaves the line out and keeps everything else
    shown = pick._repr_markdown_()
    assert pick.ranking_line not in shown and "Ranking" not in shown
    assert shown.count("\n- ") == len(pick.reasons) + len(pick.warnings) == len(pick.lines()) - 2
    assert pick.to_dict()["ranking"] == pick.ranking and len(pick.ranking_line) < len(pick.ranking) // 3


def test_the_rankings_deepspeed_figures_are_the_traffic_rules_at_real_size():
    """ZeRO-1/2 about 3Ψ and ZeRO-3 about 2.9Ψ for the 7.5 B GPT, by ds_scale's count (default knobs)."""
    sent = [round(row.sent / row.params, 1) for row in ds_scale.predict()]
    assert sent[1] == sent[2] == 3.0 and sent[3] == 2.9
    assert "about 2.9Ψ for a 7.5 B GPT" in advise(7_500_000_000, 8, "80GB").ranking


def test_zero_offload_when_stage_two_with_host_optimizer_fits():
    pick = advise(7_500_000_000, 8, "20GB", cpu_memory="256GB")  # stage 3's 15 GB fits: no offload needed
    assert (pick.stage, pick.offload) == (Stage.ZERO3, "none")
    pick = advise(7_500_000_000, 4, "24GB", cpu_memory="256GB")  # stage 3 needs 30 GB; ZeRO-Offload 15
    assert (pick.stage, pick.offload) == (Stage.ZERO2, "optimizer")


def test_nothing_fits_without_host_memory_or_with_too_little():
    pick = advise(70 * 10**9, 8, "24GB")
    assert (pick.stage, pick.rule) == (None, "does-not-fit")
    assert any("no host memory given" in r for r in pick.reasons)
    pick = advise(70 * 10**9, 8, "10GB", cpu_memory="512GB")
    assert (pick.stage, pick.rule) == (None, "does-not-fit")
    last = "no offload fits: each one that fits the GPU needs more than 512 GB of host memory per node, even "
    assert pick.reasons[-2].startswith(last)
    full = advise(70 * 10**9, 8, "10GB", activations="9.5GB", cpu_memory="4TB")  # 9.5 GB on every GPU
    last = "even with optimizer and parameters offloaded, 9.5 GB per GPU is more than 9 GB, what 10 GB holds"
    assert full.reasons[-2].startswith(last)


def test_nothing_fits_never_recommends_what_it_just_ruled_out():
    """Offload is suggested only when it was not tried; once tried, the advice names what is left."""
    untried, on_host, on_gpu = (
        advise(70 * 10**9, 8, "24GB"),  # no host memory given
        advise(70 * 10**9, 8, "24GB", cpu_memory="1TB"),  # the GPU part fits, DeepSpeed's host count does not
        advise(70 * 10**9, 8, "10GB", cpu_memory="512GB"),  # no host count fits
    )
    assert "offload to host memory" in untried.reasons[-1]
    for pick in (on_host, on_gpu):
        assert not any("offload to" in line for line in pick.lines())
    assert (
        on_host.reasons[-1]
        == "what would help: more GPUs, more host memory per node, or a smaller model or batch"
    )
    assert "Even stage 3 is not enough" in repr(untried) and "offload" not in untried.lines()[0]
    # the first line says what stood in the way once offload was tried: the host, or the GPUs themselves
    assert (untried.blocker, on_host.blocker, on_gpu.blocker) == ("", "host", "host")
    assert on_host.lines()[0].endswith("Offload would fit the GPUs, but not the host memory given.")
    # activations that fill 90% of a card: no number of GPUs leaves 10% free, so more GPUs are not suggested
    full = advise(70 * 10**9, 8, "10GB", activations="9.5GB", cpu_memory="1TB")
    assert full.blocker == "gpu" and full.lines()[0].endswith("Offload does not fit the GPUs either.")
    assert full.to_dict()["explanation"] == full.explanation
    assert full.reasons[-1] == "what would help: a smaller model or batch"


def test_no_offload_fits_names_the_count_that_refused_it():
    """980 GB fits 1 TB by the package's count; DeepSpeed's 1,680 GB not. At 500 GB neither count fits."""
    one_tb = advise(70 * 10**9, 8, "24GB", cpu_memory="1TB").reasons[-2]
    assert one_tb == (
        "no offload fits: ZeRO-3 with optimizer offload fits 1000 GB of host memory per node "
        "by the package's count only, not by DeepSpeed's estimator, which the advice checks"
    )
    small = advise(70 * 10**9, 8, "24GB", cpu_memory="500GB").reasons[-2]
    assert small.endswith("needs more than 500 GB of host memory per node, even by the package's count")


def test_gpu_counts_in_the_reasons_are_where_the_advice_itself_picks_stage_2():
    """13 B on 40 GB cards: stage 2 fits bare on 13 GPUs (48.75 → exactly 40 GB), but leaves 10% free only
    from 19 (26 + 182/19 = 35.6 GB ≤ 36 GB): the count the advice gives, and where it takes stage 2."""
    pick = advise(13 * 10**9, 8, "40GB")
    assert "stage 2 would fit on 19 GPUs, leaving at least 10% of each free" in pick.reasons[-1]
    assert memory.min_gpus(13 * 10**9, "40GB", 2) == 13 and memory.min_gpus(13 * 10**9, "36GB", 2) == 19
    at_19, at_18 = advise(13 * 10**9, 19, "40GB"), advise(13 * 10**9, 18, "40GB")
    assert (at_19.stage, at_18.stage) == (Stage.ZERO2, Stage.ZERO3)
    assert any(r.startswith("ZeRO-2 would leave only 3.889 GB (9.7%) free") for r in at_18.reasons)
    bare = advise(13 * 10**9, 18, "40GB", headroom=0)  # the bare rule takes stage 2, and warns
    assert bare.stage == Stage.ZERO2 and any("under 10%" in w for w in bare.warnings)
    assert "stage 2 would fit on 13 GPUs" in advise(13 * 10**9, 8, "40GB", headroom=0).reasons[-1]


#: Every (stage, offload) the advisor can put in a config.
EMITTED = [(stage, "none") for stage in range(4)] + [
    (1, "optimizer"),
    (2, "optimizer"),
    (3, "optimizer"),
    (3, "optimizer+parameters"),
]


@pytest.mark.parametrize(
    "stage, what",
    EMITTED,
)
def test_config_shape(stage, what):
    zero = ds_config.zero_config(stage, what)["zero_optimization"]
    assert zero["stage"] == stage
    assert ("offload_optimizer" in zero) == (what != "none")
    assert ("offload_param" in zero) == (what == "optimizer+parameters")


@pytest.mark.parametrize(
    "stage, what, words",
    [
        (0, "optimizer", "stage must be 1, 2 or 3"),
        (2, "optimizer+parameters", "parameter offload needs stage 3"),
        (2, "gpu", "offload must be one of"),
    ],
)
def test_config_rejects_impossible_choices(stage, what, words):
    with pytest.raises(ValueError, match=words):
        ds_config.zero_config(stage, what)


def _deepspeed_schema():
    need_module("deepspeed.runtime.zero.config")


@pytest.mark.parametrize(
    "stage, what",
    EMITTED,
)
@pytest.mark.parametrize("nvme", [None, "/local_nvme"])
@pytest.mark.slow  # imports DeepSpeed: seconds per worker, so `make check` leaves it out
def test_every_emitted_config_validates_in_deepspeed(stage, what, nvme):
    _deepspeed_schema()
    parsed = ds_config.validate(ds_config.zero_config(stage, what, nvme_path=nvme))
    assert int(parsed.stage) == stage
    if what != "none":
        assert parsed.offload_optimizer.device == ("nvme" if nvme else "cpu")


@pytest.mark.slow  # imports DeepSpeed: seconds per worker, so `make check` leaves it out
def test_advisor_configs_validate_in_deepspeed():
    _deepspeed_schema()
    for case in [
        (7_500_000_000, 8, "80GB"),
        (13 * 10**9, 8, "40GB"),
        (70 * 10**9, 8, "24GB"),
        (7_500_000_000, 4, "20GB"),
    ]:
        ds_config.validate(advise(*case, cpu_memory="1TB").ds_config())


def test_an_offload_config_names_deepspeeds_optimizer_and_others_do_not():
    """With optimizer offload DeepSpeed refuses a PyTorch optimizer by default, so the advisor's config names
    one; every hyperparameter is written out, and the caller's copy is its own."""
    offloaded = advise(70 * 10**9, 8, "24GB", cpu_memory="2TB").ds_config()
    assert offloaded["optimizer"] == ds_config.ADAMW and offloaded["optimizer"]["type"] == "AdamW"
    assert set(offloaded["optimizer"]["params"]) == {"lr", "betas", "eps", "weight_decay"}
    offloaded["optimizer"]["params"]["lr"] = 3e-4
    assert ds_config.ADAMW["params"]["lr"] == 1e-3  # changing one config leaves the next one as it was
    assert "optimizer" not in advise(7_500_000_000, 8, "80GB").ds_config()


@pytest.mark.slow  # imports DeepSpeed: seconds per worker, so `make check` leaves it out
def test_deepspeed_reads_the_offload_config_as_its_cpu_adam():
    need_module("deepspeed.runtime.config")
    from deepspeed.runtime.config import DeepSpeedConfig

    parsed = DeepSpeedConfig(advise(70 * 10**9, 8, "24GB", cpu_memory="2TB").ds_config())
    assert (parsed.optimizer_name, parsed.optimizer_params) == ("adamw", ds_config.ADAMW["params"])
    assert parsed.zero_force_ds_cpu_optimizer and parsed.zero_config.offload_optimizer.device == "cpu"


@pytest.mark.slow  # imports DeepSpeed: seconds per worker, so `make check` leaves it out
def test_deepspeed_rejects_an_invalid_config():
    _deepspeed_schema()
    config = ds_config.zero_config(2)
    for broken in ({"stage": 5}, {"offload_optimizer": {"device": "gpu"}}, {"bucket_size_typo": 1}):
        with pytest.raises(Exception, match="validation error"):
            ds_config.validate({"zero_optimization": config["zero_optimization"] | broken})


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "zero_lessons", *args], capture_output=True, text=True, timeout=60
    )


def test_cli_advise_json_and_config_file(tmp_path):
    target = tmp_path / "ds.json"
    out = cli(
        "advise",
        "--params",
        "13B",
        "--gpus",
        "8",
        "--gpu-memory",
        "40GB",
        "--json",
        "--ds-config",
        str(target),
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert (data["stage"], data["rule"], data["offload"]) == (3, "stage-3-or-more-gpus", "none")
    assert data["needs_bytes"] == [208 * 10**9, 71_500_000_000, 48_750_000_000, 26 * 10**9]
    assert json.loads(target.read_text()) == data["ds_config"] == ds_config.zero_config(3)


def test_cli_advise_text_and_errors():
    out = cli("advise", "--params", "70B", "--gpus", "8", "--gpu-memory", "24GB", "--cpu-memory", "1TB")
    assert out.returncode == 0 and "with optimizer+parameters offload" in out.stdout
    for args, flag in [
        (["--gpu-memory", "lots"], "--gpu-memory"),
        (["--activations", "-1GB"], "--activations"),
        (["--ds-config", "/nonexistent/dir/ds.json"], "--ds-config"),
    ]:
        bad = cli(
            "advise",
            "--params",
            "13B",
            "--gpus",
            "8",
            *(["--gpu-memory", "40GB"] if args[0] != "--gpu-memory" else []),
            *args,
        )
        assert bad.returncode == 2 and flag in bad.stderr and bad.stderr.count("\n") == 1, bad.stderr


def test_cli_advise_headroom_flag():
    base = ["advise", "--params", "7.5B", "--gpus", "8", "--gpu-memory", "30GB", "--json"]
    picks = {}
    for text in (None, "10%", "0", "0%", "5%", "12.5 %", "90%"):
        code, out, err = run_cli(base + ([] if text is None else ["--headroom", text]))
        assert (code, err) == (0, ""), (text, err)
        picks[text] = json.loads(out)
    assert picks[None] == picks["10%"] and picks[None]["stage"] == 3 and picks[None]["headroom"] == 0.1
    assert [picks[t]["stage"] for t in ("0", "0%", "5%")] == [2, 2, 2]
    assert picks["12.5 %"]["headroom"] == 0.125 and picks["90%"]["stage"] is None
    assert picks["0"] == advise(7_500_000_000, 8, "30GB", headroom=0).to_dict() | {
        "ds_config": ds_config.zero_config(2)
    }


@pytest.mark.parametrize("text", ["95%", "10", "0.1", "-5%", "%", "ten percent", "1e999%", ""])
def test_cli_advise_refuses_a_bad_headroom_in_one_line(text):
    code, out, err = run_cli(
        ["advise", "--params", "7B", "--gpus", "8", "--gpu-memory", "80GB", f"--headroom={text}"]
    )
    assert (code, out) == (2, "") and one_line_naming(err, "--headroom"), err
    assert "from 0% to 90%" in err
    hints = {"10": "(write 10%)", "0.1": "(as a share, 0.1 is 10%)"}  # a number typed without its % sign
    assert (
        err.rstrip().endswith(hints[text]) if text in hints else "(write" not in err and "share," not in err
    )


def test_advice_html_for_the_explorer():
    pick = advise(70 * 10**9, 8, "24GB", cpu_memory="2TB")
    markup = html.advice_html(pick)
    assert markup.startswith("<div class='zero-advice'><b>use ZeRO-3 with optimizer offload</b>")
    # the four stages, "stage 3 would fit on 52 GPUs, ...", the chosen offload, two warnings, the ranking
    assert markup.count("<li>") == len(pick.reasons) + len(pick.warnings) + 1 == 9
    assert (
        "<li>warning: by DeepSpeed&#x27;s estimator, the host fits only if the training script builds"
        in markup
    )


def test_the_zero_init_warning_says_when_the_whole_model_would_not_fit_a_card():
    """Without zero.Init DeepSpeed first moves the whole 16-bit model to each GPU: the warning says so when
    that is more than the card (70 B on 24 GB cards: 140 GB), not when the card holds it (7.5 B, 80 GB)."""
    from zero_lessons.inputs import Setup
    from zero_lessons.planning import host_check

    warned = [w for w in advise(70 * 10**9, 8, "24GB", cpu_memory="2TB").warnings if "zero.Init" in w]
    assert len(warned) == 1 and warned[0].endswith(
        "; and each GPU would first receive the whole 16-bit model, 140 GB, more than its 24 GB"
    )
    show = lambda n: f"{n / 10**9:g} GB"  # noqa: E731
    assert host_check._whole_model(Setup(7_500_000_000, 8, gpu_memory="80GB"), show) == ""
    assert host_check._whole_model(Setup(7_500_000_000, 8), show) == ""  # no card size: nothing to compare


def test_a_stage_3_pick_says_when_the_whole_model_needs_zero_init_on_the_gpu():
    """Without zero.Init DeepSpeed's engine moves the whole 16-bit model onto each GPU before partitioning it:
    a stage-3 pick, offloaded or not, warns when that is more than the headroom leaves, and says whether it
    passes the card itself; no warning when the card holds it with room, nor for a lower stage."""

    def gpu_warnings(pick):
        return [w for w in pick.warnings if w.startswith("build the model inside deepspeed.zero.Init")]

    tight = advise(7_500_000_000, 12, "12GB")  # stage 3: 10 GB of model state, 15 GB whole
    assert tight.stage is Stage.ZERO3 and gpu_warnings(tight)[0].endswith(
        "15 GB, onto each GPU, more than its 12 GB"
    )
    offloaded = advise(7_500_000_000, 8, "16GB", cpu_memory="512GB")
    assert offloaded.offload == "optimizer" and gpu_warnings(offloaded)[0].endswith(
        "more than the 14.4 GB that 10% headroom leaves of 16 GB"
    )
    assert gpu_warnings(advise(7_500_000_000, 8, "24GB")) == []  # 15 GB under 21.6 GB
    assert (
        advise(7_500_000_000, 8, "32GB").stage is Stage.ZERO2
        and gpu_warnings(advise(7_500_000_000, 8, "32GB")) == []
    )
    assert gpu_warnings(advise(7_500_000_000, 8, "16GB", cpu_memory="512GB", headroom=0)) == []  # 15 ≤ 16


def test_host_bytes_per_parameter_say_when_they_add_up_over_nodes():
    """On two nodes the per-parameter host figures count both nodes' memory together, and say so."""
    pick = advise(70 * 10**9, 16, "24GB", cpu_memory="800GB")
    assert pick.rule == "does-not-fit" and pick.blocker == "host"
    assert (
        pick.explanation
        == RULES["does-not-fit"] + " Offload would fit the GPUs, but not the host memory given."
    )
    (why,) = [r for r in pick.reasons if r.startswith("ZeRO-3 with optimizer offload")]
    assert "490 GB by the package's count and 840 GB by DeepSpeed's estimator" in why
    assert why.endswith(
        "(24 bytes per parameter in host memory, all 2 nodes together, where the package counts 14)"
    )
