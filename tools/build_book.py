"""Build the static book from the executed notebooks, with no CDN needed at build time or at view time.

Run: python tools/build_book.py   (or `make book`); the site lands in _build/html.
MathJax, require.js and the ipywidgets HTML manager come from the npm registry as pinned packages:
the first build needs `npm` and the registry (`npm pack`), later builds use the copies in .cache/npm.
They are copied into _build/vendor/_static for Sphinx to publish.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
import tarfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "npm"
STATIC = ROOT / "_build" / "vendor" / "_static"
#: Files published at the site's root as they are: the widget manager's icon fonts, which it requests
#: relative to the page, so beside the lessons (notebooks/@jupyter-widgets/html-manager/dist/).
EXTRA = ROOT / "_build" / "vendor" / "extra"
FONTS = ("@jupyter-widgets/html-manager@1.0.15", "package/dist/", ".woff2")
#: The book's settings as written, and as given to jupyter-book with {repository} filled in.
CONFIG, FILLED = ROOT / "book" / "_config.yml", ROOT / "_build" / "vendor" / "_config.yml"
#: npm package -> (files inside it to publish, where they go under _static)
VENDOR = {
    # only what the pages load: the TeX-to-HTML bundle, its web fonts, and the TeX extensions it autoloads
    "mathjax@3.2.2": [
        ("package/es5/tex-chtml.js", "mathjax/tex-chtml.js"),
        ("package/es5/output/chtml/fonts/woff-v2", "mathjax/output/chtml/fonts/woff-v2"),
        ("package/es5/input/tex/extensions", "mathjax/input/tex/extensions"),
    ],
    "requirejs@2.3.8": [("package/require.js", "require.min.js")],
    "@jupyter-widgets/html-manager@1.0.15": [("package/dist/embed-amd.js", "embed-amd.js")],
}


def tarball(spec: str) -> pathlib.Path:
    """Where the npm tarball for `spec` lies in the cache ("@scope/name@1.0" -> scope-name-1.0.tgz)."""
    name, version = spec.rsplit("@", 1)
    return CACHE / f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"


def npm_missing() -> str | None:
    """What to do when npm is absent and the cache incomplete, or None when the files can be had."""
    absent = [tarball(spec).name for spec in VENDOR if not tarball(spec).exists()]
    if not absent or shutil.which("npm"):
        return None
    return (
        f".cache/npm lacks {', '.join(absent)}: install npm (Debian: apt-get install npm) "
        "and build once with the npm registry reachable"
    )


def fetch(spec: str) -> pathlib.Path:
    """The npm tarball for `spec`, downloaded once into the cache."""
    CACHE.mkdir(parents=True, exist_ok=True)
    if not tarball(spec).exists():
        pack = subprocess.run(
            ["npm", "pack", spec, "--silent", "--pack-destination", str(CACHE)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        if pack.returncode != 0:
            last = (pack.stderr.strip().splitlines() or ["no message"])[-1]
            raise SystemExit(f"build_book: `npm pack {spec}` failed (is the npm registry reachable?): {last}")
    return tarball(spec)


def vendor() -> None:
    """Unpack the pinned front-end files into _build/vendor: _static, and the icon fonts under extra."""
    shutil.rmtree(STATIC, ignore_errors=True)
    shutil.rmtree(EXTRA, ignore_errors=True)
    STATIC.mkdir(parents=True)
    spec, folder, suffix = FONTS
    fonts = EXTRA / "notebooks" / spec.rsplit("@", 1)[0] / "dist"
    fonts.mkdir(parents=True)
    with tarfile.open(fetch(spec)) as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.startswith(folder) and member.name.endswith(suffix):
                (fonts / pathlib.PurePosixPath(member.name).name).write_bytes(tar.extractfile(member).read())
    for spec, files in VENDOR.items():
        with tarfile.open(fetch(spec)) as tar:
            for inside, target in files:
                members = [m for m in tar.getmembers() if m.name == inside or m.name.startswith(inside + "/")]
                for member in members:
                    if member.isfile():
                        dest = (
                            STATIC / target / pathlib.Path(member.name).relative_to(inside)
                            if member.name != inside
                            else STATIC / target
                        )
                        dest.parent.mkdir(parents=True, exist_ok=True)
                        dest.write_bytes(tar.extractfile(member).read())


def fill_config() -> None:
    """Write the book's settings with the repository address wherever the text says {repository}.

    Paths to local extensions are relative to book/, so they are made absolute for the copy.
    """
    import yaml  # jupyter-book brings it; only the build needs it

    config = yaml.safe_load(CONFIG.read_text())
    local = config["sphinx"].get("local_extensions", {})
    config["sphinx"]["local_extensions"] = {k: str((CONFIG.parent / v).resolve()) for k, v in local.items()}
    url = config["repository"]["url"]
    config["html"]["announcement"] = config["html"]["announcement"].replace("{repository}", url)
    FILLED.write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))


def main() -> int:
    """Vendor the assets, build the book, and print how long it took."""
    start = time.perf_counter()
    problem = npm_missing()
    if problem:
        print(f"build_book: npm is not installed, and {problem}", file=sys.stderr)
        return 1
    vendor()
    shutil.copy(ROOT / "book" / "zero.css", STATIC / "zero.css")
    fill_config()
    build = subprocess.run(
        [
            str(pathlib.Path(sys.executable).with_name("jupyter-book")),
            "build",
            str(ROOT),
            "--config",
            str(FILLED),
            "--toc",
            "book/_toc.yml",
            "--path-output",
            str(ROOT),
            "--warningiserror",
            "--quiet",
        ],
        cwd=ROOT,
    )
    site = ROOT / "_build" / "html"
    size = sum(f.stat().st_size for f in site.rglob("*") if f.is_file()) / 10**6
    done = "built" if build.returncode == 0 else "build FAILED (see above)"
    print(f"book {done} in {time.perf_counter() - start:.1f} s ({size:.1f} MB): {site / 'index.html'}")
    return build.returncode


if __name__ == "__main__":
    sys.exit(main())
