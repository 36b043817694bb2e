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
#: npm package -> (files inside it to publish, where they go under _static)
VENDOR = {
    "mathjax@3.2.2": [("package/es5", "mathjax")],
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
    """Unpack the pinned front-end files into _build/vendor/_static."""
    shutil.rmtree(STATIC, ignore_errors=True)
    STATIC.mkdir(parents=True)
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


def main() -> int:
    """Vendor the assets, build the book, and print how long it took."""
    start = time.perf_counter()
    problem = npm_missing()
    if problem:
        print(f"build_book: npm is not installed, and {problem}", file=sys.stderr)
        return 1
    vendor()
    build = subprocess.run(
        [
            str(pathlib.Path(sys.executable).with_name("jupyter-book")),
            "build",
            str(ROOT),
            "--config",
            "book/_config.yml",
            "--toc",
            "book/_toc.yml",
            "--path-output",
            str(ROOT),
            "--warningiserror",
            "--quiet",
        ],
        cwd=ROOT,
    )
    print(f"book built in {time.perf_counter() - start:.1f} s: {ROOT / '_build' / 'html' / 'index.html'}")
    return build.returncode


if __name__ == "__main__":
    sys.exit(main())
