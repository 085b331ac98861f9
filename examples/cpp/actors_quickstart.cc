// actors_quickstart: the C++ actor API in one page. Run it against a cluster:
//
//   phalanx start --head
//   build/bin/actors_quickstart
//
// The program is also its own worker: a node manager starts this binary to host each actor
// (phalanx::Init() at the top of main() turns it into the actor's host), so it must be at the
// same path on every node.
#include <cstdio>
#include <string>
#include <vector>

#include "actors/api.h"

class Greeter {
 public:
  explicit Greeter(std::string greeting) : greeting_(std::move(greeting)) {}
  std::string Greet(std::string name) {
    ++count_;
    return greeting_ + ", " + name;
  }
  int Count() const { return count_; }

 private:
  std::string greeting_;
  int count_ = 0;
};

PHALANX_ACTOR(Greeter, std::string);
PHALANX_METHODS(Greeter, Greet, Count);

int main() {
  // First thing: in a worker process this hosts the actor and never returns.
  if (absl::Status s = phalanx::Init(); !s.ok()) {
    std::fprintf(stderr, "cannot connect: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  auto greeter = phalanx::Actor<Greeter>()
                     .SetResources({{"CPU", 0.5}, {"memory", 256.0 * (1 << 20)}})
                     .SetMaxRestarts(2)
                     .SetName("greeter")
                     .Remote("hello");
  if (!greeter.ok()) {
    std::fprintf(stderr, "cannot create the actor: %s\n",
                 std::string(greeter.status().message()).c_str());
    return 1;
  }
  std::vector<phalanx::ObjectRef<std::string>> refs;
  for (const char* name : {"Ada", "Grace", "Barbara"}) {
    refs.push_back(greeter->Task(&Greeter::Greet).Remote(name));
  }
  auto greetings = phalanx::Get(refs, absl::Seconds(30));
  if (!greetings.ok()) {
    std::fprintf(stderr, "%s\n", std::string(greetings.status().message()).c_str());
    return 1;
  }
  for (const auto& g : *greetings) std::printf("%s\n", g.c_str());
  auto count = phalanx::Get(greeter->Task(&Greeter::Count).Remote());
  std::printf("the actor answered %d calls\n", count.value_or(-1));
  phalanx::Shutdown();  // the actors this program created go with it
  return 0;
}
