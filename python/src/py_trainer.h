// PythonTrainer: the C++ Trainer (elastic/trainer.h) that runs a phalanx.train loop.
// The elastic controller drives it like any trainer; it hands each call to
// phalanx.train._runtime in the same process (see there for how a trainer-driven Python loop
// maps onto the controller's steps).
#pragma once

namespace phalanx::python {

// Registers the trainer host of PythonTrainer (the job spec's `trainer: PythonTrainer`).
void RegisterPythonTrainer();

}  // namespace phalanx::python
