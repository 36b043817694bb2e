"""1,200 seeded random command lines: a bad one exits 2 with one line naming its flag; a good one agrees with
the API.

Each argument vector is built from parts whose exact values the test knows, computed here with
Fractions, independently of the parsers. At most one part is bad, so the error must name it.
Every run goes through `cli.main` in this process under a 2 s limit; a few also run as real processes.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from fractions import Fraction

import pytest

from guard import one_line_naming, run_cli
from zero_lessons import checks, memory, recipes, units
from zero_lessons.planning.advice import HEADROOM, advise
from zero_lessons.present.table import stage_table
from zero_lessons.stages import Stage

CASES = 1200
BAD = object()  #: the expected value of a part the CLI must refuse
#: Text that no numeric flag accepts: escapes, markup, code, huge exponents and digit runs, odd digits.
HOSTILE = [
    "",
    " ",
    "\n",
    "a\nb",
    "\x1b[2J\x1b[31mred",
    "<img src=x onerror=alert(1)>",
    "9" * 5000,
    "1e99999999",
    "1e-99999999",
    "__import__('os').system('true')",
    "nan",
    "inf",
    "-inf",
    "🙂",
    "１２",
    "²",
    "0x10",
    "1__0",
    "7BB",
    "1/0",
    "\x00",
    "1" * 60 + ".5",
    "0." + "0" * 400 + "1",
    "-1",
    "1e400",
    "{}",
    "[1]",
    "None",
]
WORDS = {"": 1, "K": 10**3, "k": 10**3, "M": 10**6, "B": 10**9, "b": 10**9, " billion": 10**9, "T": 10**12}


def _decimal(rng: random.Random) -> tuple[str, Fraction]:
    """A random decimal literal and its exact value: "7.5", "1_000", "2.25e3"."""
    places = rng.choice([0, 0, 1, 2, 3])
    digits = rng.randrange(1, 10 ** rng.randint(1, 6))
    text = str(digits) if not places else f"{digits // 10**places}.{digits % 10**places:0{places}d}"
    value = Fraction(digits, 10**places)
    if rng.random() < 0.2:
        power = rng.randint(-3, 12)
        text, value = f"{text}e{power}", value * Fraction(10) ** power
    return text, value


def count(rng):
    """A parameter count: good when whole and from 1 to 10**15."""
    text, value = _decimal(rng)
    word = rng.choice(list(WORDS))
    value *= WORDS[word]
    good = value.denominator == 1 and 1 <= value <= checks.MAX_PARAMS
    return text + word, int(value) if good else BAD


def whole(high):
    """Digits from 1 to `high` (good), or just past either end (bad)."""

    def make(rng):
        value = rng.choice([1, high, rng.randint(1, high), rng.randint(1, min(high, 64)), 0, high + 1])
        return str(value), value if 1 <= value <= high else BAD

    return make


def size(zero=False):
    """A memory size: good from 1 byte (or 0, when `zero`) to 10**18 bytes."""

    def make(rng):
        text, value = _decimal(rng)
        unit = rng.choice(["GB", "GiB", "TB", "MiB", "gb", " kB", "B", "TiB"])
        value *= units.UNITS[{"gb": "GB", " kB": "kB"}.get(unit, unit)]
        if zero and rng.random() < 0.1:
            text, value = "0", Fraction(0)
        good = (value == 0 and zero) or 1 <= value <= checks.MAX_MEMORY
        return text + unit, value if good else BAD

    return make


def bytes_per_param(rng):
    """Bytes per parameter: a decimal or a fraction, good from 0 to 1,024."""
    if rng.random() < 0.3:
        top, bottom = rng.randint(0, 2000), rng.randint(1, 16)
        value = Fraction(top, bottom)
        return f"{top}/{bottom}", value if value <= 1024 else BAD
    text, value = _decimal(rng)
    return text, value if value <= 1024 else BAD


def unit(rng):
    """A display unit, in any letter case (good), or a unit of something else (bad)."""
    text = rng.choice([*units.UNITS, "GHz", "Gb/s", "bytes", "GiB "])
    text = rng.choice([text, text.lower(), text.upper()])
    known = {name.lower(): name for name in units.UNITS} | {"bytes": "B"}  # letter case does not matter
    return text, known.get(text.strip().lower(), BAD)


def recipe(rng):
    """A preset name (good) or a near miss (bad)."""
    name = rng.choice([*recipes.PRESETS, "adam-ish", "Mixed-Adam"])
    return name, name if name in recipes.PRESETS else BAD


def percent(rng):
    """A headroom: a percentage from 0% to 90%, or a bare 0 (good); past 90%, or a bare number (bad)."""
    if rng.random() < 0.1:
        return "0", Fraction(0)
    text, value = _decimal(rng)
    if rng.random() < 0.15:  # no % sign: refused, so 0.1 is never read as 0.1% where a share of 10% was meant
        return text, BAD
    return text + rng.choice(["%", " %"]), value / 100 if value <= 90 else BAD


def mostly_good(make, share=0.75):
    """`make`, retried until good in `share` of the draws, so good and bad command lines both come often."""

    def draw(rng):
        text, value = make(rng)
        for _ in range(30 if rng.random() < share else 0):
            if value is not BAD:
                break
            text, value = make(rng)
        return text, value

    return draw


KINDS = {
    "--params": count,
    "--gpus": whole(checks.MAX_GPUS),
    "--unit": unit,
    "--memory": size(),
    "--gpu-memory": size(),
    "--cpu-memory": size(),
    "--activations": size(zero=True),
    "--gpus-per-node": whole(checks.MAX_GPUS_PER_NODE),
    "--headroom": percent,
    "--recipe": recipe,
    "--weight-bytes": bytes_per_param,
    "--grad-bytes": bytes_per_param,
    "--optimizer-bytes": bytes_per_param,
}
KINDS = {flag: mostly_good(make) for flag, make in KINDS.items()}
REQUIRED = {
    "table": ["--params", "--gpus"],
    "fit": ["--memory", "--gpus"],
    "advise": ["--params", "--gpus", "--gpu-memory"],
}
OPTIONAL = {
    "table": ["--unit"],
    "fit": [],
    "advise": ["--activations", "--cpu-memory", "--gpus-per-node", "--headroom"],
}
CUSTOM = ["--weight-bytes", "--grad-bytes", "--optimizer-bytes"]


def generate(rng: random.Random, tmp) -> tuple[list[str], dict, set[str]]:
    """An argument vector, the values its good parts stand for, the names a refusal must show (none: good)."""
    command = rng.choice(["table", "table", "fit", "advise", "advise"])
    chosen = {flag: KINDS[flag](rng) for flag in REQUIRED[command]}
    chosen |= {flag: KINDS[flag](rng) for flag in OPTIONAL[command] if rng.random() < 0.5}
    recipe_choice = rng.random()
    if recipe_choice < 0.3:
        chosen["--recipe"] = KINDS["--recipe"](rng)
    elif recipe_choice < 0.6:
        chosen |= {flag: KINDS[flag](rng) for flag in CUSTOM}
    switches = [s for s in (["--json"] + (["--padded"] if command == "table" else [])) if rng.random() < 0.5]
    if command == "advise" and rng.random() < 0.3:
        chosen["--ds-config"] = (str(tmp / f"ds{rng.randrange(10**9)}.json"), "file")
    bad = {flag for flag, (_, value) in chosen.items() if value is BAD}
    trouble = rng.random()
    if not bad and trouble < 0.25:  # a hostile text in one flag
        flag = rng.choice(sorted(set(chosen) - {"--ds-config"}))
        chosen[flag], bad = (rng.choice(HOSTILE), BAD), {flag}
    elif not bad and trouble < 0.3 and command == "advise":
        chosen["--ds-config"], bad = (
            (rng.choice(["", "   ", "a\x00b", str(tmp / "no" / "such" / "dir.json")]), BAD),
            {"--ds-config"},
        )
    argv = [command]
    for flag, (text, _) in rng.sample(list(chosen.items()), len(chosen)):
        argv += [flag, text] if rng.random() < 0.8 or text.startswith("-") else [f"{flag}={text}"]
    argv += switches
    if bad:
        return argv, {}, bad
    if trouble < 0.36:  # leave out a required flag
        flag = rng.choice(REQUIRED[command])
        at = (
            argv.index(flag)
            if flag in argv
            else next(i for i, a in enumerate(argv) if a.startswith(flag + "="))
        )
        del argv[at : at + (1 if "=" in argv[at] else 2)]
        return argv, {}, {flag}
    if trouble < 0.42:  # a mistyped or abbreviated flag
        wrong = rng.choice(["--parms", "--param", "--gpu", "--mem", "--jsn", "--recipes", "--weight-byte"])
        argv[1:1] = [wrong, "7"]
        return argv, {}, {repr(wrong)}
    if trouble < 0.46 and not {"--recipe", *CUSTOM} & set(chosen):  # two of the three custom flags only
        given = rng.sample(CUSTOM, 2)
        argv += sum(([flag, "2"] for flag in given), [])
        return argv, {}, set(CUSTOM) - set(given)
    if trouble < 0.49:  # a stray positional, shown with repr
        stray = rng.choice(HOSTILE[1:])
        return argv + [stray], {}, {repr(stray)[:20]}  # a long one is shown shortened
    return argv, {flag: value for flag, (_, value) in chosen.items()} | {s: True for s in switches}, set()


def expected_recipe(values: dict) -> recipes.Recipe:
    """The recipe the good parts name."""
    if "--weight-bytes" in values:
        return recipes.custom(*(values[f] for f in CUSTOM))
    return recipes.get(values.get("--recipe", "mixed-adam"))


def agrees_with_the_api(argv: list[str], values: dict, out: str) -> None:
    """The printed answer equals what the API gives for the same exact values."""
    command, recipe_ = argv[0], expected_recipe(values)
    if command == "table":
        table = stage_table(
            values["--params"],
            values["--gpus"],
            recipe_,
            values.get("--unit", "GB"),
            padded="--padded" in values,
        )
        assert (json.loads(out) == table.to_dict()) if "--json" in values else out == table.to_text() + "\n"
    elif command == "fit":
        largest = [memory.max_params(values["--gpus"], values["--memory"], s, recipe_) for s in Stage]
        if "--json" in values:
            assert [row["max_params"] for row in json.loads(out)["stages"]] == largest
        else:
            assert all((f"({n:,} parameters)" if n is not None else "any size") in out for n in largest)
    else:
        answer = advise(
            values["--params"],
            values["--gpus"],
            values["--gpu-memory"],
            activations=values.get("--activations", 0),
            recipe=recipe_,
            cpu_memory=values.get("--cpu-memory"),
            gpus_per_node=values.get("--gpus-per-node", 8),
            headroom=values.get("--headroom", HEADROOM),
        )
        if "--json" in values:
            assert json.loads(out) == answer.to_dict() | {"ds_config": answer.ds_config()}
        else:
            assert out.startswith(repr(answer) + "\n")
        if "--ds-config" in values:
            path = (
                argv[argv.index("--ds-config") + 1]
                if "--ds-config" in argv
                else next(a for a in argv if a.startswith("--ds-config=")).split("=", 1)[1]
            )
            with open(path) as written:
                assert json.load(written) == answer.ds_config()


def test_fuzzed_command_lines(tmp_path):
    rng = random.Random(20260612)
    good = bad = 0
    for case in range(CASES):
        argv, values, names = generate(rng, tmp_path)
        code, out, err = run_cli(argv)
        if names:
            assert code == 2 and out == "", (case, argv, code, out, err)
            assert one_line_naming(err, *names), (case, argv, err, names)
            bad += 1
        else:
            assert code == 0 and err == "", (case, argv, code, err)
            agrees_with_the_api(argv, values, out)
            good += 1
    assert good >= 300 and bad >= 300 and good + bad == CASES  # both halves really exercised


@pytest.mark.parametrize(
    "argv, code, names",
    [
        (["table", "--params", "7.5B", "--gpus", "8", "--json"], 0, ()),
        (
            "table --params 7.5B --gpus 8 --weight-bytes 1e99999999 --grad-bytes 2 "
            "--optimizer-bytes 12".split(),
            2,
            ("--weight-bytes",),
        ),
        (["table", "--params", "7.5B", "--gpus", "8", "a\nb\x1b[31m"], 2, (repr("a\nb\x1b[31m"),)),
        (["table", "--param", "7B", "--gpus", "8"], 2, ("'--param'",)),
        (["fit", "--memory", "1" * 400 + ".5B", "--gpus", "1"], 2, ("--memory",)),
        (
            ["advise", "--params", "70B", "--gpus", "8", "--gpu-memory", "80GB", "--ds-config", ""],
            2,
            ("--ds-config",),
        ),
    ],
)
def test_a_few_as_real_processes(argv, code, names):
    done = subprocess.run(
        [sys.executable, "-m", "zero_lessons", *argv], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == code
    if code == 0:
        assert done.stderr == "" and json.loads(done.stdout) == stage_table(7_500_000_000, 8).to_dict()
    else:
        assert done.stdout == "" and one_line_naming(done.stderr, *names), done.stderr
