"""`phalanx start --object-store-dir DIR` (Ray's --plasma-directory) keeps a node's object
store in DIR, for a tmpfs mounted with huge pages: values are written there and read the
same way (mapped, by the driver and by actors), /dev/shm keeps a link to it, and a stopped
node leaves neither behind."""

import os

import numpy as np

import phalanx
from phalanx import _objects
from conftest import connected_cluster


@phalanx.remote
def total(x):
    return float(x.sum())


def test_the_store_lives_in_the_directory_given_and_goes_with_the_node(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    with connected_cluster(tmp_path / "phx", num_cpus=2,
                           extra_args=("--object-store-dir", str(store))) as c:
        ref = phalanx.put(np.full(1 << 20, 2.0))  # 8 MiB: a file of the store
        link = _objects._store_root(ref._obj.node)
        assert os.path.islink(link) and os.readlink(link).startswith(str(store)), link
        kept = store / os.path.basename(link) / ref._obj.owner / ref._obj.id
        assert kept.is_file() and kept.stat().st_size > 8 << 20
        assert float(phalanx.get(ref).sum()) == 2.0 * (1 << 20)
        assert phalanx.get(total.remote(ref), timeout=60) == 2.0 * (1 << 20)
        out = c.cli("start", "--head", "--object-store-dir", str(tmp_path / "nowhere"))
        assert out.returncode != 0 and "--object-store-dir" in out.stdout + out.stderr
        del ref
    assert not os.path.lexists(link)
    assert not any(p.name.startswith("phalanx-objects-") for p in store.iterdir())
