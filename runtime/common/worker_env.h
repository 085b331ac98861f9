// Environment variables of an actor's spec that the node's prestarted workers understand.
#pragma once

namespace phalanx {

// The job an actor belongs to. A prestarted worker takes it on when the actor is placed on
// it (it sets the variable then), so an actor that sets it still gets a prestarted worker.
inline constexpr char kJobIdEnv[] = "PHALANX_JOB_ID";

// Python actors: modules, comma-separated (e.g. "torch,numpy"), that the worker imports
// before it takes its actor. The list is part of the program's identity for prestarting: the
// node keeps idle workers that have already imported them, so a replacement rank of a torch
// job is ready without paying for `import torch`.
inline constexpr char kWorkerImportsEnv[] = "PHALANX_WORKER_IMPORTS";

}  // namespace phalanx
