#!/usr/bin/python3
"""The driver of tests/multihost/test_torch_ddp.py and bench/torch_recovery.py, run on a host
of the cluster: submits examples/python/ddp_digits.py (--program zero_digits: zero_digits.py,
whose rank 0 writes its final weights to OUT/weights.pt) on 3 workers spread over the hosts
(min 2), writes the job id to OUT/job_id, a line per status poll to OUT/progress ("<unix ms>
<agreed step> <world size> <state>"), and OUT/result.json once the job ended. The ranks
write a line per update to OUT/steps ("<unix ms> <rank> <world size> <step>"; the hosts
share this machine's file system)."""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "python"))

import phalanx  # noqa: E402
from phalanx import train  # noqa: E402

import ddp_digits  # noqa: E402
import zero_digits  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--address", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--backend", default="phalanx")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--step-sleep", type=float, default=0.03)
    p.add_argument("--timeout", type=float, default=150)
    p.add_argument("--program", default="ddp_digits", choices=["ddp_digits", "zero_digits"])
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    phalanx.init(args.address, token=args.token)
    out = os.path.abspath(args.out)
    config = {"step_sleep": args.step_sleep, "step_log": os.path.join(out, "steps")}
    if args.program == "zero_digits":
        t = zero_digits.trainer(dict(config, epochs=args.epochs,
                                     weights_out=os.path.join(out, "weights.pt")),
                                workers=(2, 3), name=f"zero-{args.backend}",
                                placement_strategy="SPREAD")
    else:
        t = ddp_digits.trainer(dict(config, lr=0.05, epochs=args.epochs, batch_size=32),
                               workers=(2, 3), name=f"ddp-{args.backend}",
                               placement_strategy="SPREAD")
    t.torch_config = train.TorchConfig(backend=args.backend)
    t.verbose = False
    job_id = t.submit()
    with open(os.path.join(args.out, "job_id"), "w") as f:
        f.write(job_id)
    deadline = time.time() + args.timeout
    with open(os.path.join(args.out, "progress"), "w") as log:
        while True:
            s = train.job_status(job_id)
            log.write(f"{int(time.time() * 1000)} {s.steps} {s.world_size} {s.state}\n")
            log.flush()
            if s.state in ("SUCCEEDED", "FAILED", "STOPPED"):
                break
            if time.time() > deadline:
                from phalanx import _native
                _native.stop_job(job_id)
                break
            time.sleep(0.02)
    s = train.job_status(job_id)
    with open(os.path.join(args.out, "result.json"), "w") as f:
        json.dump({"job_id": job_id, "state": s.state, "message": s.message,
                   "metrics": s.metrics, "recoveries": s.recoveries, "events": s.events}, f)
    phalanx.shutdown()


if __name__ == "__main__":
    main()
