"""phalanx.collective on numpy arrays and torch tensors: numerics of every op and dtype,
zero copies, reconfiguration by epoch, and a dead peer failing the others at once."""

import os
import signal
import time

import numpy as np
import pytest

import phalanx


@phalanx.remote(max_concurrency=2)
class Member:
    def __init__(self, name):
        from phalanx import collective
        self.group = collective.CollectiveGroup(name, timeout=20)

    def pid(self):
        return os.getpid()

    def reconfigure(self, epoch, rank, world):
        self.group.reconfigure(epoch, rank, world)
        return (self.group.rank, self.group.world_size, self.group.epoch)

    def numpy_ops(self):
        r, w = self.group.rank, self.group.world_size
        out = {}
        for dtype in (np.float32, np.float64, np.float16, np.int32, np.int64):
            a = (np.arange(6) + r).astype(dtype)
            ptr = a.ctypes.data
            self.group.allreduce(a)
            out[f"sum_{np.dtype(dtype).name}"] = (a.tolist(), a.ctypes.data == ptr)
        a = np.full(4, r + 1.0)
        self.group.allreduce(a, "max")
        out["max"] = a.tolist()
        a = np.full(4, r + 1.0)
        self.group.allreduce(a, "avg")
        out["avg"] = a.tolist()
        a = np.full(2, r + 1.0)
        self.group.allreduce(a, "prod")
        out["prod"] = a.tolist()
        gathered = np.zeros(3 * w)
        self.group.allgather(np.full(3, float(r)), gathered)
        out["allgather"] = gathered.tolist()
        scattered = np.zeros(2)
        self.group.reduce_scatter(np.arange(2 * w, dtype=np.float64), scattered)
        out["reduce_scatter"] = scattered.tolist()
        b = np.full(3, 42.0) if r == 0 else np.zeros(3)
        self.group.broadcast(b, root=0)
        out["broadcast"] = b.tolist()
        if r == 0:
            self.group.send(np.array([7.0, 8.0]), dst=1)
        elif r == 1:
            got = np.zeros(2)
            self.group.recv(got, src=0)
            out["recv"] = got.tolist()
        self.group.barrier()
        return out

    def torch_ops(self):
        import torch
        r = self.group.rank
        out = {}
        for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.int64):
            t = (torch.arange(4) + r).to(dtype)
            ptr = t.data_ptr()
            self.group.allreduce(t)
            out[str(dtype)] = (t.float().tolist(), t.data_ptr() == ptr)
        with pytest.raises(ValueError, match="contiguous"):
            self.group.allreduce(torch.zeros(4, 4).t())
        return out

    def data_parallel(self):
        """phalanx.train.DataParallel on a model that starts different on every rank: what
        it holds after the wrap, its averaged gradients, no_sync, and a second wrap."""
        import torch
        from phalanx.train import DataParallel
        r = self.group.rank
        torch.manual_seed(100 + r)
        model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.BatchNorm1d(7),
                                    torch.nn.Linear(7, 1))
        model[1].running_mean.fill_(float(r))
        model[1].num_batches_tracked.fill_(10 + r)
        counting = _Counting(self.group)
        dp = DataParallel(model, counting, bucket_bytes=64)  # several buckets
        out = {"state": [t.detach().flatten().tolist() for t in model.state_dict().values()],
               "keys": list(dp.state_dict())[:2], "buckets": len(dp._buckets)}
        plain = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.BatchNorm1d(7),
                                    torch.nn.Linear(7, 1))
        plain.load_state_dict(model.state_dict())
        x = torch.randn(4, 5, generator=torch.Generator().manual_seed(r))

        def grads(m):
            return torch.cat([p.grad.flatten() for p in m.parameters()])

        plain(x).sum().backward()
        local = grads(plain).clone()
        self.group.allreduce(local_avg := local.clone(), "avg")
        dp(x).sum().backward()
        out["averaged"] = torch.allclose(grads(model), local_avg, atol=1e-6)
        out["collectives"] = counting.allreduces
        model.zero_grad()
        with dp.no_sync():
            dp(x).sum().backward()
        out["no_sync_local"] = torch.allclose(grads(model), local, atol=1e-6)
        out["no_sync_collectives"] = counting.allreduces
        again = _Counting(self.group)
        dp2 = DataParallel(model, again)
        model.zero_grad()
        dp2(x).sum().backward()
        out["rewrap"] = (counting.allreduces, again.allreduces,
                         torch.allclose(grads(model), local_avg, atol=1e-6))
        return out

    def allreduce_forever(self):
        a = np.ones(1 << 16)
        try:
            while True:
                self.group.allreduce(a)
        except phalanx.CollectiveError as e:
            return str(e)


class _Counting:
    """A CollectiveGroup that counts its allreduce calls."""

    def __init__(self, group):
        self.group = group
        self.allreduces = 0
        self.world_size = group.world_size

    def allreduce(self, tensor, op="sum"):
        self.allreduces += 1
        return self.group.allreduce(tensor, op)

    def broadcast(self, tensor, root=0):
        return self.group.broadcast(tensor, root)

    @property
    def epoch(self):
        return self.group.epoch


def make(n, name):
    members = [Member.remote(name) for _ in range(n)]
    phalanx.get([m.reconfigure.remote(1, i, n) for i, m in enumerate(members)], timeout=60)
    return members


def test_numpy_ops_are_right_in_every_dtype_and_in_place(cluster):
    members = make(3, "np-ops")
    results = phalanx.get([m.numpy_ops.remote() for m in members], timeout=60)
    for r, out in enumerate(results):
        for dtype in ("float32", "float64", "float16", "int32", "int64"):
            values, same_buffer = out[f"sum_{dtype}"]
            assert values == [3 * i + 3 for i in range(6)], dtype
            assert same_buffer, f"{dtype}: the array was copied"
        assert out["max"] == [3.0] * 4
        assert out["avg"] == [2.0] * 4
        assert out["prod"] == [6.0] * 2
        assert out["allgather"] == [0.0] * 3 + [1.0] * 3 + [2.0] * 3
        assert out["reduce_scatter"] == [3.0 * (2 * r), 3.0 * (2 * r + 1)]
        assert out["broadcast"] == [42.0] * 3
    assert results[1]["recv"] == [7.0, 8.0]


def test_torch_tensors_without_copies(cluster):
    members = make(2, "torch-ops")
    for out in phalanx.get([m.torch_ops.remote() for m in members], timeout=120):
        for dtype, (values, same_buffer) in out.items():
            assert values == [1.0, 3.0, 5.0, 7.0], dtype
            assert same_buffer, dtype


def test_reconfigure_by_epoch(cluster):
    members = make(3, "epochs")
    # Epoch 2 without the last member: ranks renumbered, the old epoch is gone.
    got = phalanx.get([m.reconfigure.remote(2, i, 2) for i, m in enumerate(members[:2])],
                      timeout=60)
    assert got == [(0, 2, 2), (1, 2, 2)]
    out = phalanx.get([m.numpy_ops.remote() for m in members[:2]], timeout=60)
    assert out[0]["sum_float64"][0] == [2 * i + 1 for i in range(6)]


def test_data_parallel_starts_from_rank_0_and_averages_gradients(cluster):
    members = make(3, "data-parallel")
    outs = phalanx.get([m.data_parallel.remote() for m in members], timeout=120)
    for r, out in enumerate(outs):
        # Rank 0's parameters and buffers everywhere (its running_mean 0, its count 10).
        assert out["state"] == outs[0]["state"], r
        assert out["state"][4] == [0.0] * 7 and out["state"][6] == [10], out["state"]
        assert out["keys"] == ["module.0.weight", "module.0.bias"]  # DDP's keys
        assert out["buckets"] > 1
        assert out["averaged"], r
        assert out["collectives"] == out["buckets"]  # one per bucket per backward()
        assert out["no_sync_local"] and out["no_sync_collectives"] == out["buckets"], out
        # The second wrap's hooks replaced the first's: only the new group is used.
        assert out["rewrap"] == (out["buckets"], 1, True), out


def test_a_dead_peer_fails_the_others_at_once(cluster):
    members = make(3, "peer-death")
    refs = [m.allreduce_forever.remote() for m in members[:2]]
    time.sleep(0.5)
    os.kill(phalanx.get(members[2].pid.remote()), signal.SIGKILL)
    start = time.time()
    errors = phalanx.get(refs, timeout=30)
    assert time.time() - start < 10
    for e in errors:
        assert "rank 2" in e or "peer" in e, e
