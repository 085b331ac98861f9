// main() of test binaries that host actors: in a worker process (started by a node manager)
// it hosts an actor of this binary's classes (phalanx::Init does not return there); otherwise
// it runs the tests.
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "actors/api.h"
#include "gtest/gtest.h"
#include "worker/worker_host.h"

int main(int argc, char** argv) {
  // Test hook: a program that runs a thread before Init (its fork server must refuse).
  if (std::getenv("PHALANX_TEST_THREAD_BEFORE_INIT") != nullptr) {
    std::thread([] { ::pause(); }).detach();
  }
  if (phalanx::worker::InWorkerMode()) phalanx::Init().IgnoreError();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
