"""1,000 seeded random explorer changes, hostile text included, driven in-process without a browser.

After every change: nothing escaped (no "could not update"), and either every view equals what the
pure functions give for the settings the controls now hold, or (when a control cannot be read)
that control is marked and every view still shows the last good state, all of them. Typed
markup never reaches a view unescaped, and no change takes more than 2 s.
"""

from __future__ import annotations

import functools
import random
from html import escape

from guard import deadline
from zero_lessons.explorer import Explorer
from zero_lessons.explorer import views as explorer

CHANGES = 1000
MARKUP = [
    "<img src=x onerror=alert(1)>",
    "<script>alert(1)</script>",
    "</span><b>x</b>",
    "a & b",
    "'\"><svg onload=1>",
]
#: Text no numeric box accepts, and text at the very edge of what they accept.
HOSTILE = [
    *MARKUP,
    "",
    " ",
    "\n",
    "\x1b[2J",
    "🙂",
    "1e99999999",
    "9" * 5000,
    "nan",
    "-1",
    "0",
    "1/0",
    "__import__('os').system('true')",
    "0." + "0" * 400 + "1 b/s",
    "1" + "0" * 400 + "GB",
    "1e17 GB",
    "1e15 GB",
    "1e18 B",
    "1 b/s",
    "1.1 TB/s",
    "1000 TB/s",
    "1001 TB/s",
    "1024",
    "1025",
    "1e-99",
    "2e15",
    "1e15",
    "1000000",
    "1000001",
]
TEXTS = {
    "params_text": ["7.5B", "13B", "175 billion", "70M", "1T", "1", "1_000_000", "1e15", "999999999999999"],
    "gpus_text": ["1", "8", "64", "4096", "1000000"],
    "gpu_memory": ["80GB", "80 GiB", "16GB", "1 TB", "1 B", "1e18 B", "0.5 GB", "24gib"],
    "bandwidth": ["100 Gb/s", "25 GB/s", "900GB/s", "1 b/s", "1000 TB/s", "0.001 Gb/s"],
    "activations": ["0", "0 GB", "12GB", "45 GB", "79GB", "80GB", "1 TB", "512 MiB"],
}
CUSTOM = ["2", "0.5", "1/3", "12", "0", "1024", "1e-9", "3/7"]
VIEWS = ("verdict", "table", "bars", "scaling", "comm_chart", "comm_table", "advice")


@functools.cache
def pure_views(settings: explorer.Settings) -> dict[str, str]:
    """What every view must show for `settings`, from the pure functions alone."""
    view = explorer.compute_view(settings)
    return {
        "verdict": f"<b class='zero-verdict'>{escape(view.verdict, quote=False)}</b>",
        "table": view.table.to_html(),
        "bars": explorer.plot_memory_bars(view),
        "scaling": explorer.plot_scaling(view),
        "comm_chart": explorer.plot_comm(view),
        "comm_table": explorer.comm_html(view),
        "advice": explorer.advice_html(view),
    }


def change(app: Explorer, rng: random.Random) -> None:
    """One random move a learner could make."""
    move = rng.random()
    marked = [key for key, label in app.errors.items() if label.value]
    if marked and move < 0.3:  # a learner usually fixes what is marked
        key = rng.choice(marked)
        if key in app.custom:
            app.custom[key].value = rng.choice(CUSTOM)
        else:
            name = {"params": "params_text", "gpus": "gpus_text"}.get(key, key)
            getattr(app, name).value = rng.choice(TEXTS[name])
    elif move < 0.55:
        name = rng.choice([*TEXTS, "custom"])
        box = app.custom[rng.choice(list(app.custom))] if name == "custom" else getattr(app, name)
        pool = CUSTOM if name == "custom" else TEXTS[name]
        box.value = rng.choice(pool) if rng.random() < 0.6 else rng.choice(HOSTILE)
    elif move < 0.65:
        app.params_slider.value = 10 ** rng.uniform(8, 15)
    elif move < 0.72:
        app.gpus_slider.value = rng.choice(app.gpus_slider.options)
    elif move < 0.82:
        app.recipe.value = rng.choice(app.recipe.options)
    elif move < 0.88:
        app.unit.value = rng.choice(app.unit.options)
    elif move < 0.94:
        app.dtype.value = rng.choice(app.dtype.options)
    else:
        app.preset.value = rng.choice(app.preset.options)


def shown(app: Explorer) -> dict[str, str]:
    """What every view shows now."""
    return {name: getattr(app, name).value for name in VIEWS}


def test_random_changes_keep_every_view_consistent():
    rng = random.Random(20260612)
    app = Explorer()
    last_good, kept, updated = shown(app), 0, 0
    for step in range(CHANGES):
        with deadline(2):
            change(app, rng)
        assert "could not update" not in app.status.value, (step, app.status.value)
        now = shown(app)
        every_html = [*now.values(), app.status.value, *(label.value for label in app.errors.values())]
        assert not any(raw in html for raw in MARKUP for html in every_html), step  # typed markup is escaped
        settings, errors = app.read()
        if settings is not None:
            assert app.view.settings == settings and app.status.value == "", step
            assert not any(label.value for label in app.errors.values()), step
            assert now == pure_views(settings), step
            last_good, updated = now, updated + 1
        else:
            assert errors and all(app.errors[key].value for key in errors), step
            assert "last valid settings" in app.status.value, step
            assert now == last_good, step  # all views kept, together
            assert shown_for_view(app) == now, step
            kept += 1
    assert updated >= 300 and kept >= 200  # both outcomes really exercised


def shown_for_view(app: Explorer) -> dict[str, str]:
    """The views `app.view` stands for: the last good state is one state, not a mix."""
    return pure_views(app.view.settings)
