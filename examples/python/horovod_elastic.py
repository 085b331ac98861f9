"""A Horovod elastic program in the shape of Horovod's pytorch_synthetic_benchmark_elastic.py:
a model, DistributedOptimizer, TorchState with a reset callback that scales the learning rate
by the world size, and @hvd.elastic.run. Written for Horovod; runs unchanged under

    phalanx run --horovod -np 2 --min-np 1 --max-np 4 \\
        --host-discovery-script ./discover_hosts.sh python horovod_elastic.py

Rank 0 prints a line per batch: `step E.B size=N lr=X t=UNIX`, and at the end `done`.
"""

import argparse
import time

import torch
import torch.nn.functional as F
import torch.optim as optim

import horovod.torch as hvd

parser = argparse.ArgumentParser(description="PyTorch synthetic benchmark, elastic",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
parser.add_argument("--fp16-allreduce", action="store_true", default=False,
                    help="use fp16 compression during allreduce")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size")
parser.add_argument("--lr", type=float, default=0.01, help="learning rate for a single worker")
parser.add_argument("--num-batches-per-commit", type=int, default=1,
                    help="number of batches per commit of the elastic state object")
parser.add_argument("--num-batches-per-epoch", type=int, default=20)
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--step-s", type=float, default=0.0, help="sleep after each batch")
args = parser.parse_args()

hvd.init()
torch.manual_seed(0)

model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
# By default, Adasum doesn't need scaling up learning rate.
lr_scaler = hvd.size()
optimizer = optim.SGD(model.parameters(), lr=args.lr * lr_scaler, momentum=0.9)
compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                     compression=compression, op=hvd.Average)

# Set up fixed fake data.
data = torch.randn(args.batch_size, 64)
target = torch.randn(args.batch_size, 1)


def benchmark_step(state):
    optimizer.zero_grad()
    output = model(data)
    loss = F.mse_loss(output, target)
    loss.backward()
    optimizer.step()
    if args.step_s:
        time.sleep(args.step_s)
    if hvd.rank() == 0:
        print(f"step {state.epoch}.{state.batch} size={hvd.size()} "
              f"lr={optimizer.param_groups[0]['lr']:.6f} t={time.time():.3f}", flush=True)


@hvd.elastic.run
def run_benchmark(state):
    for state.epoch in range(state.epoch, args.epochs):
        for state.batch in range(state.batch, args.num_batches_per_epoch):
            benchmark_step(state)
            if state.batch % args.num_batches_per_commit == 0:
                state.commit()
        state.batch = 0


def on_state_reset():
    # Horovod: adjust learning rate on reset
    for param_group in optimizer.param_groups:
        param_group["lr"] = args.lr * hvd.size()


state = hvd.elastic.TorchState(model, optimizer, batch=0, epoch=0)
state.register_reset_callbacks([on_state_reset])
run_benchmark(state)
if hvd.rank() == 0:
    print("done", flush=True)
