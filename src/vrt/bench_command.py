"""``vrt bench``: the benchmark runner of vrt's source tree (``bench/``), run from the
package.

The runner starts servers in processes of its own, pins them and the load client to
separate CPUs and compares vrt with bare WebSocket servers; its scenarios and baselines
are development tools that live beside the package rather than in it. From a checkout
installed with ``pip install -e .`` the command runs it; elsewhere it says how to get
it instead of failing obscurely.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Final

__all__ = ["find_runner", "run_bench"]

_HOW: Final = """\
vrt bench: the benchmark runner is not installed: it lives in vrt's source tree
(bench/), beside the package, and this vrt was installed without it ({where}).

To run it, install vrt from its source:
    pip download --no-deps --no-binary :all: vrealtime    # the source archive
    tar xzf vrealtime-*.tar.gz && cd vrealtime-*/
    pip install -e .
    vrt bench --smoke
"""


def find_runner() -> Path | None:
    """The source tree whose ``bench/`` runner belongs to this package, if any."""
    root = Path(__file__).resolve().parents[2]  # src/vrt/bench_command.py -> the tree
    if (root / "bench" / "__main__.py").is_file() and (root / "src" / "vrt").is_dir():
        return root
    return None


def run_bench(args: list[str]) -> int:
    """Run ``python -m bench ARGS`` in the source tree; 2 when there is none."""
    root = find_runner()
    if root is None:
        sys.stderr.write(_HOW.format(where=Path(__file__).resolve().parent))
        return 2
    if args[:1] == ["--"]:
        args = args[1:]
    return subprocess.call([sys.executable, "-m", "bench", *args], cwd=root)
