"""The `phalanx` command of a pip-installed phalanx (pyproject.toml's [project.scripts]): it
runs the cluster program the wheel carries (phalanx/_bin), and tells the nodes that program
starts to run their Python workers with this interpreter and this package."""

import os
import sys

PACKAGE = os.path.dirname(os.path.abspath(__file__))


def worker_env():
    """PHALANX_PYTHON and PHALANX_PYTHONPATH for the nodes this process starts,
    where the package is installed whole (its native module beside it, as a wheel puts it);
    {} in a source checkout, whose nodes have its paths built in."""
    from phalanx import _native
    if os.path.dirname(os.path.abspath(_native.__file__)) != PACKAGE:
        return {}
    return {"PHALANX_PYTHON": sys.executable,
            "PHALANX_PYTHONPATH": os.path.dirname(PACKAGE)}


def main():
    from phalanx import _native
    program = os.path.join(_native.BIN_DIR, "phalanx")
    os.environ.update(worker_env())
    os.execv(program, [program] + sys.argv[1:])
