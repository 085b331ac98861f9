"""Ray Core programs in the shapes of its documentation (examples/ray_core/*.py), each with
only ``import ray`` changed to ``import phalanx as ray``: run unchanged as scripts against a
cluster this machine runs (``ray.init()`` with no address joins it), each printing OK."""

import glob
import os
import subprocess
import sys

import pytest

from conftest import connected_cluster

PROGRAMS = sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                         "..", "examples", "ray_core", "*.py")))
PROGRAM_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with connected_cluster(tmp_path_factory.mktemp("phx"), num_cpus=4) as c:
        yield c


def test_the_programs_are_there():
    assert len(PROGRAMS) >= 5, PROGRAMS


@pytest.mark.parametrize("program", PROGRAMS, ids=os.path.basename)
def test_a_ray_core_program_runs_unchanged(cluster, program):
    env = dict(cluster.env, PYTHONPATH=os.pathsep.join(sys.path))
    env.pop("PHALANX_TLS_DIR", None)  # found from the machine's session, as `ray.init()` does
    out = subprocess.run([sys.executable, program], env=env, capture_output=True, text=True,
                         timeout=PROGRAM_TIMEOUT_S, cwd=os.path.dirname(program))
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), \
        f"{os.path.basename(program)} exited {out.returncode}:\n{out.stdout[-2000:]}\n" \
        f"{out.stderr[-4000:]}"
