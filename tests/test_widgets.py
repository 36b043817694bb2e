"""The explorer's wiring, driven in-process without a browser: views always equal the pure model."""

import random
from html import escape

import pytest

from zero_lessons import units
from zero_lessons.explorer import Explorer
from zero_lessons.explorer.views import (
    PRESETS,
    SUMMARY,
    Settings,
    advice_html,
    compute_view,
    plot_memory_bars,
)


def shown_matches_model(app: Explorer) -> None:
    """Every view equals what `compute_view` gives for the settings the app last accepted."""
    expected = compute_view(app.view.settings)
    assert app.table.value == expected.table.to_html()
    assert app.verdict.value == f"<b class='zero-verdict'>{escape(expected.verdict, quote=False)}</b>"
    assert app.bars.value == plot_memory_bars(expected)
    assert app.advice.value == advice_html(expected)


def test_starts_on_the_article():
    app = Explorer()
    assert app.view.settings == Settings()
    assert "ZeRO-1 (41.25 GB of 80 GB)" in app.verdict.value
    shown_matches_model(app)


def test_typing_a_model_size_updates_every_view():
    app = Explorer()
    app.params_text.value = "13B"
    assert app.view.settings.params == 13 * 10**9
    assert app.table.value == compute_view(Settings(params=13 * 10**9)).table.to_html()
    assert abs(app.params_slider.value - 13e9) < 1
    shown_matches_model(app)


def test_sliders_drive_the_text_and_the_views():
    app = Explorer()
    app.gpus_slider.value = 12
    assert app.gpus_text.value == "12" and app.view.settings.gpus == 12
    app.params_slider.value = 10**10.5
    assert app.params_text.value == "31.6B" and app.view.settings.params == 31_600_000_000
    shown_matches_model(app)


def test_bad_input_is_marked_and_views_keep_their_last_good_state():
    app = Explorer()
    before = app.table.value
    app.gpu_memory.value = "lots"
    assert "cannot read 'lots'" in app.errors["gpu_memory"].value
    assert "last valid settings" in app.status.value
    assert app.table.value == before
    app.gpu_memory.value = "24 GiB"
    assert app.errors["gpu_memory"].value == "" and app.status.value == ""
    assert app.view.settings.gpu_memory == 24 * 2**30


def test_typing_activations_updates_the_views_and_bad_text_is_marked_under_the_box():
    app = Explorer()
    assert app.activations.value == "0 GB"
    app.activations.value = "45GB"
    assert app.view.settings.activations == 45 * 10**9 and app.errors["activations"].value == ""
    assert "28.125 GB model state + 45 GB activations = 73.125 GB" in app.verdict.value
    shown_matches_model(app)
    before = app.verdict.value
    app.activations.value = "a lot"
    assert "activations: cannot read 'a lot' as a size" in app.errors["activations"].value
    assert "last valid settings" in app.status.value and app.verdict.value == before
    app.activations.value = "0"
    assert app.errors["activations"].value == "" and app.view.settings == Settings()


def test_custom_recipe_controls():
    app = Explorer()
    assert all(box.disabled for box in app.custom.values())
    app.recipe.value = "custom"
    app.custom["grad_bytes"].value = "4"
    assert app.view.settings.recipe.total_bytes == 18
    app.custom["optimizer_bytes"].value = "nan"
    assert "optimizer_bytes must be a number" in app.errors["optimizer_bytes"].value
    assert app.view.settings.recipe.total_bytes == 18


def test_presets_jump_to_their_case():
    app = Explorer()
    for name, case in PRESETS.items():
        app.preset.value = name
        assert app.view.settings == Settings(**case)
        shown_matches_model(app)


def test_gpu_text_beyond_the_slider_is_used_and_not_clamped():
    app = Explorer()
    app.gpus_text.value = "5000"
    assert app.view.settings.gpus == 5000 and app.gpus_slider.value == 4096  # nearest stop, position only
    app.gpus_text.value = "0"
    assert "gpus must be a whole number from 1" in app.errors["gpus"].value
    assert app.view.settings.gpus == 5000


TEXTS = {
    "params_text": [
        "7.5B",
        "13B",
        "175 billion",
        "70M",
        "1T",
        "1_000_000",
        "abc",
        "",
        "-5B",
        "7.5",
        "1e999",
        "2**30",
    ],
    "gpus_text": ["1", "8", "64", "1000000", "0", "-3", "2.5", "many", "1000001"],
    "gpu_memory": ["80GB", "80 GiB", "16GB", "1 TB", "0GB", "lots", "80"],
    "bandwidth": ["100 Gb/s", "25 GB/s", "900GB/s", "0 Gb/s", "fast"],
    "activations": ["0", "12GB", "45 GB", "80GB", "lots", "-1GB"],
}


@pytest.mark.parametrize("seed", [0, 1])
def test_random_control_changes_never_raise_and_views_stay_consistent(seed):
    rng = random.Random(seed)
    app = Explorer()
    moves = [
        lambda: setattr(getattr(app, rng.choice(list(TEXTS))), "value", ""),
        lambda: (lambda k: setattr(getattr(app, k), "value", rng.choice(TEXTS[k])))(rng.choice(list(TEXTS))),
        lambda: setattr(app.params_slider, "value", 10 ** rng.uniform(8, 15)),
        lambda: setattr(app.gpus_slider, "value", rng.choice(app.gpus_slider.options)),
        lambda: setattr(app.recipe, "value", rng.choice(app.recipe.options)),
        lambda: setattr(
            app.custom[rng.choice(list(app.custom))], "value", rng.choice(["2", "0.5", "-1", "x", "12"])
        ),
        lambda: setattr(app.unit, "value", rng.choice(["GB", "GiB"])),
        lambda: setattr(app.dtype, "value", rng.choice(app.dtype.options)),
        lambda: setattr(app.preset, "value", rng.choice(app.preset.options)),
    ]
    for _ in range(250):
        rng.choice(moves)()
        assert "could not update" not in app.status.value
        shown_matches_model(app)
        settings, errors = app.read()
        if settings is not None:  # everything readable: the views show exactly these settings
            assert app.view.settings == settings and not errors and app.status.value == ""
        else:  # something unreadable: it is marked, and the views kept the last good settings
            assert errors and all(app.errors[k].value for k in errors)
    assert units.parse_count(units.format_count(app.view.settings.params)) > 0


def test_slider_snapping_in_the_browser_does_not_change_the_model():
    # A browser snaps the log slider to its 0.01 grid: 7.5e9 comes back as 10**9.88.
    # That is not a user's move.
    app = Explorer()
    app.params_slider.value = 10**9.88
    assert app.view.settings.params == 7_500_000_000 and app.params_text.value == "7.5B"
    app.params_slider.value = 10**9.9  # two steps away: a real move
    assert app.view.settings.params == 7_940_000_000


def test_a_page_without_widgets_shows_a_summary_not_the_repr():
    bundle = Explorer()._repr_mimebundle_()
    assert bundle["text/plain"] == SUMMARY and "VBox" not in bundle["text/plain"]
    assert "application/vnd.jupyter.widget-view+json" in bundle


def test_each_error_sits_under_its_own_box_in_a_fixed_width():
    app = Explorer()
    boxes = {
        "params": app.params_text,
        "gpu_memory": app.gpu_memory,
        "bandwidth": app.bandwidth,
        "activations": app.activations,
    }
    for key, box in boxes.items():
        model, training = app.widget.children[1].children
        holder = next(v for v in model.children + training.children if box in getattr(v, "children", ()))
        assert holder.children == (box, app.errors[key])  # the control, then its own error area under it
        assert app.errors[key].layout.width == box.layout.width == "360px"


def test_presets_show_their_size_readably_and_exactly():
    app = Explorer()
    app.preset.value = "GPT-2 XL (1.56 B) on 4 × 16 GB"
    assert app.params_text.value == "1,557,611,200" and app.view.settings.params == 1_557_611_200
    app.preset.value = "The article: 7.5 B on 8 × 80 GB"
    assert app.params_text.value == "7.5B"
