"""Build the static book from the executed notebooks, with no CDN needed at build time or at view time.

Run: python tools/build_book.py   (or `make book`); the site lands in _build/html.
MathJax, require.js and the ipywidgets HTML manager come from the npm registry as pinned packages,
cached in .cache/npm, and are copied into _build/vendor/_static for Sphinx to publish.
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


def fetch(spec: str) -> pathlib.Path:
    """The npm tarball for `spec`, downloaded once into the cache."""
    CACHE.mkdir(parents=True, exist_ok=True)
    name = spec.rsplit("@", 1)[0].lstrip("@").replace("/", "-") + "-" + spec.rsplit("@", 1)[1] + ".tgz"
    if not (CACHE / name).exists():
        subprocess.run(["npm", "pack", spec, "--silent", "--pack-destination", str(CACHE)], check=True,
                       stdout=subprocess.DEVNULL)
    return CACHE / name


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
                        dest = STATIC / target / pathlib.Path(member.name).relative_to(inside) \
                            if member.name != inside else STATIC / target
                        dest.parent.mkdir(parents=True, exist_ok=True)
                        dest.write_bytes(tar.extractfile(member).read())


def main() -> int:
    """Vendor the assets, build the book, and print how long it took."""
    start = time.perf_counter()
    vendor()
    build = subprocess.run([str(pathlib.Path(sys.executable).with_name("jupyter-book")), "build", str(ROOT), "--config", "book/_config.yml",
                            "--toc", "book/_toc.yml", "--path-output", str(ROOT), "--warningiserror", "--quiet"],
                           cwd=ROOT)
    print(f"book built in {time.perf_counter() - start:.1f} s: {ROOT / '_build' / 'html' / 'index.html'}")
    return build.returncode


if __name__ == "__main__":
    sys.exit(main())
