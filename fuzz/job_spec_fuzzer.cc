// Fuzzes the elastic job spec parser (elastic/job_spec.h) with arbitrary YAML.
//
// Properties checked besides "no crash, no sanitizer report":
//   - a refused spec is InvalidArgument (the submitter's fault, never an internal error);
//   - an accepted spec passes ValidateJobSpec, and its JobSpecToYaml parses back to a spec
//     that prints the same (the controller reads the spec back from that YAML).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "elastic/job_spec.h"

namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "job_spec fuzzer: %s\n%s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace phalanx::elastic;
  const std::string yaml(reinterpret_cast<const char*>(data), size);

  // The byte-size parser on its own (a field value is short; longer inputs are YAML).
  if (size <= 64) {
    auto bytes = ParseBytes(yaml);
    if (bytes.ok() && *bytes < 0) Fail("ParseBytes gave a negative size", yaml);
  }

  auto spec = ParseJobSpec(yaml);
  if (!spec.ok()) {
    if (!absl::IsInvalidArgument(spec.status())) {
      Fail("a refused spec is not InvalidArgument", spec.status().ToString());
    }
    return 0;
  }
  if (auto s = ValidateJobSpec(*spec); !s.ok()) Fail("accepted but invalid", s.ToString());
  for (const auto& policy : spec->policies) {
    if (policy.max_memory_step < 0 || policy.memory_cap < 0) {
      Fail("a negative memory size was accepted", yaml);
    }
  }

  const std::string printed = JobSpecToYaml(*spec);
  auto again = ParseJobSpec(printed);
  if (!again.ok())
    Fail("JobSpecToYaml does not parse back", again.status().ToString() + "\n" + printed);
  if (JobSpecToYaml(*again) != printed) {
    Fail("the round trip changed the spec", printed + "\n---\n" + JobSpecToYaml(*again));
  }

  // What the controller computes from a spec.
  (void)spec->TotalSteps();
  (void)spec->ControllerLeaseSeconds();
  (void)DumpOnDeath(*spec);
  for (const char* event : {"oom", "nodeDied", "straggler", "hang", "exited"}) {
    (void)MatchPolicy(*spec, event, /*exit_code=*/1, /*signal=*/9);
  }
  return 0;
}
