# Ray Train's fashion-MNIST example (python/ray/train/examples/pytorch/
# torch_fashion_mnist_example.py) with `ray` renamed to `phalanx` and nothing else, except in
# the blocks marked "Phalanx example:": the dataset is synthetic (no torchvision, no download:
# 28x28 images of 10 classes, the shapes FashionMNIST has), tqdm may be missing, and the run
# is small (2 CPU workers, 3 epochs) and checks its result, printing OK.
from typing import Dict

import torch
from torch import nn
from torch.utils.data import DataLoader

# ---- Phalanx example: in place of torchvision, filelock and (when missing) tqdm ----------------
from torch.utils.data import TensorDataset

try:
    from tqdm import tqdm
except ImportError:
    def tqdm(iterable, desc=None):
        return iterable

TRAIN_SIZE, TEST_SIZE = 2048, 512  # FashionMNIST: 60000 and 10000


def synthetic_fashion_mnist(size, seed):
    """Images of FashionMNIST's shape (1x28x28, as ToTensor() then Normalize((0.5,), (0.5,))
    give them: values in [-1, 1]) and labels 0..9: each class a fixed pattern, each image
    its class's pattern under noise. The same on every worker, as the downloaded set is."""
    patterns = torch.rand(10, 1, 28, 28, generator=torch.Generator().manual_seed(1234))
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (size,), generator=g)
    noise = torch.rand(size, 1, 28, 28, generator=g)
    images = (0.6 * patterns[labels] + 0.4 * noise - 0.5) / 0.5
    return TensorDataset(images, labels)
# ---- end of Phalanx example ---------------------------------------------------------------------

import phalanx.train
from phalanx.train import ScalingConfig
from phalanx.train.torch import TorchTrainer


def get_dataloaders(batch_size):
    # ---- Phalanx example: synthetic data in place of the FashionMNIST download -----------------
    training_data = synthetic_fashion_mnist(TRAIN_SIZE, seed=0)
    test_data = synthetic_fashion_mnist(TEST_SIZE, seed=1)
    # ---- end of Phalanx example -----------------------------------------------------------------

    # Create data loaders.
    train_dataloader = DataLoader(training_data, batch_size=batch_size)
    test_dataloader = DataLoader(test_data, batch_size=batch_size)

    return train_dataloader, test_dataloader


# Model Definition
class NeuralNetwork(nn.Module):
    def __init__(self):
        super(NeuralNetwork, self).__init__()
        self.flatten = nn.Flatten()
        self.linear_relu_stack = nn.Sequential(
            nn.Linear(28 * 28, 512),
            nn.ReLU(),
            nn.Dropout(0.25),
            nn.Linear(512, 512),
            nn.ReLU(),
            nn.Dropout(0.25),
            nn.Linear(512, 10),
            nn.ReLU(),
        )

    def forward(self, x):
        x = self.flatten(x)
        logits = self.linear_relu_stack(x)
        return logits


def train_func_per_worker(config: Dict):
    lr = config["lr"]
    epochs = config["epochs"]
    batch_size = config["batch_size_per_worker"]

    # Get dataloaders inside worker training function
    train_dataloader, test_dataloader = get_dataloaders(batch_size=batch_size)

    # [1] Prepare Dataloader for distributed training
    # Shard the datasets among workers and move batches to the correct device
    # =======================================================================
    train_dataloader = phalanx.train.torch.prepare_data_loader(train_dataloader)
    test_dataloader = phalanx.train.torch.prepare_data_loader(test_dataloader)

    model = NeuralNetwork()

    # [2] Prepare and wrap your model with DistributedDataParallel
    # Move the model the correct GPU/CPU device
    # ============================================================
    model = phalanx.train.torch.prepare_model(model)

    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)

    # Model training loop
    for epoch in range(epochs):
        model.train()
        for X, y in tqdm(train_dataloader, desc=f"Train Epoch {epoch}"):
            pred = model(X)
            loss = loss_fn(pred, y)

            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        model.eval()
        test_loss, num_correct, num_total = 0, 0, 0
        with torch.no_grad():
            for X, y in tqdm(test_dataloader, desc=f"Test Epoch {epoch}"):
                pred = model(X)
                loss = loss_fn(pred, y)

                test_loss += loss.item()
                num_total += y.shape[0]
                num_correct += (pred.argmax(1) == y).sum().item()

        test_loss /= len(test_dataloader)
        accuracy = num_correct / num_total

        # [3] Report metrics to Phalanx Train
        # ===============================
        phalanx.train.report(metrics={"loss": test_loss, "accuracy": accuracy})


def train_fashion_mnist(num_workers=2, use_gpu=False):
    global_batch_size = 32

    train_config = {
        "lr": 1e-3,
        "epochs": 3,  # Phalanx example: 10 in Ray's
        "batch_size_per_worker": global_batch_size // num_workers,
    }

    # Configure computation resources
    scaling_config = ScalingConfig(num_workers=num_workers, use_gpu=use_gpu)

    # Initialize a Phalanx TorchTrainer
    trainer = TorchTrainer(
        train_loop_per_worker=train_func_per_worker,
        train_loop_config=train_config,
        scaling_config=scaling_config,
    )

    # [4] Start Distributed Training
    # Run `train_func_per_worker` on all workers
    # =============================================
    result = trainer.fit()
    print(f"Training result: {result}")
    return result  # Phalanx example: for the check below


if __name__ == "__main__":
    # ---- Phalanx example: 2 CPU workers (Ray's: 4 GPU workers), and a check of the result ------
    result = train_fashion_mnist(num_workers=2, use_gpu=False)
    assert set(result.metrics) >= {"loss", "accuracy"}, result.metrics
    assert 0.5 <= result.metrics["accuracy"] <= 1.0, result.metrics  # chance is 0.1
    assert result.error is None, result.error
    print("OK")
