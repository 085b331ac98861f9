"""The `phalanx` backend of torch.distributed (phalanx.distributed): every op and dtype gives
what torch's own Gloo backend gives on the same inputs, in the same processes; an abort fails
every pending op at once, naming its reason."""

import os
import signal
import time

import pytest

import phalanx

from conftest import _free_port

torch = pytest.importorskip("torch")
pytest.importorskip("phalanx._native_torch")

WORLD = 3


def _inputs(rank, dtype, n=10):
    """Deterministic, rank-dependent values small enough for PRODUCT in every dtype."""
    base = torch.arange(n, dtype=torch.int64) % 3 + rank + 1
    if dtype == torch.bool:
        return (torch.arange(n) + rank) % 2 == 0
    return base.to(dtype)


def _name(op):
    import torch.distributed as dist
    for n in ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "AVG"):
        if op == getattr(dist.ReduceOp, n):
            return n
    return str(op)


@phalanx.remote(max_concurrency=2)
class DistMember:
    """One process with two torch.distributed groups: the default one on torch's Gloo (a
    TCPStore on `port`) and a `phalanx` one made with dist.new_group(backend="phalanx")."""

    def __init__(self, rank, world, port):
        import torch.distributed as dist
        import phalanx.distributed  # noqa: F401 - registers the backend
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        phalanx.distributed.register()
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world)
        self.ph = dist.new_group(backend="phalanx")
        self.rank, self.world = rank, world

    def pid(self):
        return os.getpid()

    def backend_name(self):
        import torch.distributed as dist
        return dist.get_backend(self.ph), self.ph.size(), self.ph.rank()

    def compare(self):
        """Every op and dtype on both groups; returns the mismatches (empty: all equal) and
        how many comparisons ran."""
        import torch.distributed as dist
        R = dist.ReduceOp
        bad, ran = [], 0
        dtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
                  torch.int64, torch.int16, torch.int8, torch.uint8, torch.bool]

        def same(name, a, b):
            nonlocal ran
            ran += 1
            if a.dtype != b.dtype or a.shape != b.shape:
                bad.append(f"{name}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}")
                return
            if a.is_floating_point():
                ok = torch.allclose(a.double(), b.double(), rtol=1e-2, atol=1e-2)
            else:
                ok = torch.equal(a, b)
            if not ok:
                bad.append(f"{name}: phalanx {a.tolist()} vs gloo {b.tolist()}")

        def both(name, fn, make, compare=True):
            """fn(tensors, group) on a fresh copy for each group; gloo's error skips it."""
            gloo_t = make()
            try:
                fn(gloo_t, None)
            except RuntimeError:
                return None  # Gloo has no such op or dtype: checked below by hand, if at all
            ph_t = make()
            fn(ph_t, self.ph)
            if not compare:
                return ph_t
            if isinstance(gloo_t, (list, tuple)):
                for i, (p, g) in enumerate(zip(ph_t, gloo_t)):
                    same(f"{name}[{i}]", p, g)
            else:
                same(name, ph_t, gloo_t)
            return ph_t

        r, w = self.rank, self.world
        for dt in dtypes:
            ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX]  # printed by name in a mismatch
            if not (dt.is_floating_point or dt == torch.bool):
                ops += [R.BAND, R.BOR, R.BXOR]
            for op in ops:
                both(f"all_reduce {_name(op)} {dt}",
                     lambda t, g, op=op: dist.all_reduce(t, op=op, group=g),
                     lambda dt=dt: _inputs(r, dt))
                # Only the root's result is defined (Gloo leaves partial sums elsewhere).
                both(f"reduce {_name(op)} {dt}",
                     lambda t, g, op=op: dist.reduce(t, dst=1, op=op, group=g),
                     lambda dt=dt: _inputs(r, dt), compare=r == 1)
            both(f"broadcast {dt}", lambda t, g: dist.broadcast(t, src=2, group=g),
                 lambda dt=dt: _inputs(r, dt, 7))
            both(f"all_gather {dt}",
                 lambda ts, g: dist.all_gather(ts[1:], ts[0], group=g),
                 lambda dt=dt: [_inputs(r, dt, 5)] + [_inputs(0, dt, 5) for _ in range(w)])
            both(f"_all_gather_base {dt}",
                 lambda ts, g: dist._all_gather_base(ts[1], ts[0], group=g),
                 lambda dt=dt: [_inputs(r, dt, 5), _inputs(0, dt, 5 * w)])
            both(f"gather {dt}",
                 lambda ts, g: dist.gather(ts[0], ts[1:] if r == 0 else None, dst=0, group=g),
                 lambda dt=dt: [_inputs(r, dt, 3)] + [_inputs(0, dt, 3) for _ in range(w)])
            both(f"scatter {dt}",
                 lambda ts, g: dist.scatter(ts[0], ts[1:] if r == 1 else None, src=1, group=g),
                 lambda dt=dt: [_inputs(0, dt, 3)] + [_inputs(i + 7, dt, 3) for i in range(w)])
            both(f"all_to_all_single {dt}",
                 lambda ts, g: dist.all_to_all_single(ts[1], ts[0], group=g),
                 lambda dt=dt: [_inputs(r, dt, 2 * w), _inputs(0, dt, 2 * w)])
            # Uneven splits: rank r sends j + 1 rows to rank j, receives r + 1 from each.
            both(f"all_to_all_single uneven {dt}",
                 lambda ts, g: dist.all_to_all_single(
                     ts[1], ts[0], output_split_sizes=[r + 1] * w,
                     input_split_sizes=[j + 1 for j in range(w)], group=g),
                 lambda dt=dt: [_inputs(r, dt, sum(range(1, w + 1))), _inputs(0, dt, (r + 1) * w)])
            both(f"all_to_all {dt}",
                 lambda ts, g: dist.all_to_all(ts[w:], ts[:w], group=g),
                 lambda dt=dt: [_inputs(r * w + j, dt, 2) for j in range(w)] +
                               [_inputs(0, dt, 2) for _ in range(w)])
            if r == 0:
                both(f"send {dt}", lambda t, g: dist.send(t, dst=2, group=g),
                     lambda dt=dt: _inputs(5, dt, 9))
            elif r == 2:
                both(f"recv {dt}", lambda t, g: dist.recv(t, src=0, group=g),
                     lambda dt=dt: _inputs(0, dt, 9))
            # Gloo 1.13 has no reduce_scatter: the expected values reduced here, from every
            # rank's inputs (which are known), in a wide dtype and cast back.
            for op in (R.SUM, R.MAX):
                full = torch.cat([_inputs(r + i, dt, 4) for i in range(w)])
                every = torch.stack([torch.cat([_inputs(q + i, dt, 4) for i in range(w)])
                                     .double() for q in range(w)])
                expect = (every.sum(0) if op == R.SUM else every.max(0).values)
                expect = (expect != 0) if dt == torch.bool else expect.to(dt)
                out = _inputs(0, dt, 4)
                dist.reduce_scatter(out, [_inputs(r + i, dt, 4) for i in range(w)], op=op,
                                    group=self.ph)
                same(f"reduce_scatter {_name(op)} {dt}", out, expect[4 * r:4 * r + 4])
                out = _inputs(0, dt, 4)
                dist._reduce_scatter_base(out, full.clone(), op=op, group=self.ph)
                same(f"_reduce_scatter_base {_name(op)} {dt}", out, expect[4 * r:4 * r + 4])
            if dt.is_floating_point:
                # Gloo 1.13 has no AVG: the mean of every rank's inputs, here.
                t = _inputs(r, dt)
                dist.all_reduce(t, op=R.AVG, group=self.ph)
                mean = sum(_inputs(q, dt).double() for q in range(w)) / w
                same(f"all_reduce AVG {dt}", t, mean.to(dt))
        dist.barrier(group=self.ph)
        # An async op's Work and future, as DDP's reducer uses them.
        t = torch.ones(1000) * (r + 1)
        work = dist.all_reduce(t, group=self.ph, async_op=True)
        fut = work.get_future()
        got = fut.wait()
        same("async all_reduce", got[0], torch.ones(1000) * sum(range(1, w + 1)))
        if not work.is_completed() or not work.is_success():
            bad.append("async all_reduce: the work is not completed and successful")
        # Object collectives (pickles in uint8 tensors, sizes in int64).
        objs = [None] * w
        dist.all_gather_object(objs, {"rank": r, "name": "x" * r}, group=self.ph)
        if objs != [{"rank": i, "name": "x" * i} for i in range(w)]:
            bad.append(f"all_gather_object: {objs}")
        box = [{"from": 1}] if r == 1 else [None]
        dist.broadcast_object_list(box, src=1, group=self.ph)
        if box != [{"from": 1}]:
            bad.append(f"broadcast_object_list: {box}")
        return bad, ran

    def zero_steps(self, steps):
        """DDP and torch's ZeroRedundancyOptimizer (ZeRO-1: each rank keeps the Adam state of
        its share of the parameters) on the phalanx group; (weights' checksum, the share of
        the optimizer state this rank holds)."""
        import torch.distributed as dist
        from torch.distributed.optim import ZeroRedundancyOptimizer
        from torch.nn.parallel import DistributedDataParallel as DDP
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 4))
        ddp = DDP(model, process_group=self.ph)
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam,
                                      lr=0.01, process_group=self.ph)
        gen = torch.Generator().manual_seed(self.rank)
        for _ in range(steps):
            x = torch.randn(8, 16, generator=gen)
            loss = ddp(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        held = sum(s["exp_avg"].numel() for s in opt.optim.state.values())
        total = sum(p.numel() for p in model.parameters())
        dist.barrier(group=self.ph)
        return float(sum(p.double().sum() for p in model.parameters())), held / total

    def wedge(self, skip):
        """An all_reduce that this rank makes unless it is `skip`: the others wait in it (as
        for a stopped peer) until an abort; returns (seconds waited, the error)."""
        import torch.distributed as dist
        if self.rank == skip:
            return 0.0, ""
        t = torch.ones(4)
        start = time.time()
        try:
            dist.all_reduce(t, group=self.ph)
            return time.time() - start, ""
        except RuntimeError as e:
            self.failed_at = time.time()
            return time.time() - start, str(e)

    def failed_time(self):
        return getattr(self, "failed_at", None)

    def abort(self, reason):
        self.ph.abort(reason)
        return time.time()


@pytest.fixture(scope="module")
def members(cluster):
    port = _free_port()
    ms = [DistMember.remote(r, WORLD, port) for r in range(WORLD)]
    phalanx.get([m.pid.remote() for m in ms], timeout=120)
    yield ms
    for m in ms:
        try:
            os.kill(phalanx.get(m.pid.remote(), timeout=10), signal.SIGKILL)
        except Exception:  # noqa: BLE001 - already gone (the kill test)
            pass


def test_the_backend_is_registered_as_phalanx(members):
    for r, (name, size, rank) in enumerate(phalanx.get([m.backend_name.remote() for m in members],
                                                       timeout=60)):
        assert (name.lower(), size, rank) == ("phalanx", WORLD, r)


def test_every_op_and_dtype_matches_torchs_gloo(members):
    results = phalanx.get([m.compare.remote() for m in members], timeout=300)
    for r, (bad, ran) in enumerate(results):
        assert not bad, f"rank {r}: " + "\n".join(bad)
        assert ran > 200, f"rank {r} compared only {ran} results"


def test_zero_redundancy_optimizer_runs_on_the_phalanx_backend(members):
    results = phalanx.get([m.zero_steps.remote(5) for m in members], timeout=120)
    sums = {round(s, 9) for s, _ in results}
    assert len(sums) == 1, results  # every rank ends with the same weights
    shares = [share for _, share in results]
    assert all(0 < s < 1 for s in shares) and abs(sum(shares) - 1) < 1e-9, shares


def test_an_abort_fails_every_pending_op_at_once_with_its_reason(members):
    """Ranks 1 and 2 wait in an all_reduce that rank 0 never makes (a stopped peer, as far as
    they can tell); an abort ends each within milliseconds, its error giving the reason."""
    pending = [m.wedge.remote(0) for m in members[1:]]
    time.sleep(1.0)  # they are waiting in it now
    reason = "rank 0 (actor test) died in step 7"
    # Both at once, as the controller aborts the survivors.
    aborted_at = phalanx.get([m.abort.remote(reason) for m in members[1:]], timeout=30)
    errors = []
    for i, p in enumerate(pending):
        waited, error = phalanx.get(p, timeout=30)
        failed_at = phalanx.get(members[1 + i].failed_time.remote(), timeout=30)
        assert failed_at is not None, f"rank {i + 1}'s all_reduce did not fail ({waited:.2f} s)"
        ms = (failed_at - min(aborted_at)) * 1000
        print(f"rank {i + 1}: the pending all_reduce failed {ms:.1f} ms after the abort")
        # Bounded loosely: the point is "not the group's timeout" (load cannot fail it).
        assert ms < 5000, ms
        errors.append(error)
    # Every survivor's error names the reason: one that fails first on the other's closed
    # connections waits (kAbortReasonWait) for its own abort, which brings the reason.
    assert all(reason in e for e in errors), errors
