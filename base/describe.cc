#include "base/describe.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/system.h"

namespace phalanx::rpc {

std::string DescribeCause(const DeathCause& cause) {
  switch (cause.kind()) {
    case DeathCause::NONE:
      return "NONE";
    case DeathCause::EXITED:
      return absl::StrCat("EXITED(", cause.exit_code(), ")");
    case DeathCause::SIGNALED:
      return absl::StrCat("SIGNALED(", cause.signal(), ", ", strsignal(cause.signal()), ")");
    case DeathCause::OOM_KILLED:
      return absl::StrCat("OOM_KILLED: peak ", FormatBytes(static_cast<double>(cause.peak_bytes())),
                          " > limit ", FormatBytes(static_cast<double>(cause.limit_bytes())),
                          cause.message().empty() ? "" : absl::StrCat(" (", cause.message(), ")"));
    case DeathCause::NODE_DIED:
      return absl::StrCat("NODE_DIED", cause.message().empty() ? "" : ": ", cause.message());
    case DeathCause::KILLED_BY_USER:
      return "KILLED_BY_USER";
    case DeathCause::CREATION_FAILED:
      return absl::StrCat("CREATION_FAILED: ", cause.message());
    case DeathCause::SCALED_IN:
      return absl::StrCat("SCALED_IN", cause.message().empty() ? "" : ": ", cause.message());
    case DeathCause::INFEASIBLE:
      return absl::StrCat("INFEASIBLE: ", cause.message());
    case DeathCause::LEASE_EXPIRED:
      return absl::StrCat("LEASE_EXPIRED: ", cause.message());
    case DeathCause::OWNER_DIED:
      return absl::StrCat("OWNER_DIED: ", cause.message());
    default:
      return "UNKNOWN";
  }
}

std::string StateName(ActorState state) {
  switch (state) {
    case ACTOR_PENDING:
      return "PENDING";
    case ACTOR_CREATING:
      return "CREATING";
    case ACTOR_ALIVE:
      return "ALIVE";
    case ACTOR_RESTARTING:
      return "RESTARTING";
    case ACTOR_DEAD:
      return "DEAD";
    default:
      return "UNKNOWN";
  }
}

std::string StateName(JobState state) {
  switch (state) {
    case JOB_PENDING:
      return "PENDING";
    case JOB_RUNNING:
      return "RUNNING";
    case JOB_SUCCEEDED:
      return "SUCCEEDED";
    case JOB_FAILED:
      return "FAILED";
    case JOB_STOPPED:
      return "STOPPED";
    default:
      return "UNKNOWN";
  }
}

std::string DescribeActor(const ActorInfo& actor) {
  std::string out = absl::StrCat("actor ", actor.actor_id().substr(0, 8), " (", actor.class_name());
  if (!actor.name().empty()) absl::StrAppend(&out, " '", actor.name(), "'");
  absl::StrAppend(&out, ")");
  return out;
}

Resources FromProto(const ResourceSet& set) {
  Resources r;
  for (const auto& [name, amount] : set.amounts()) r.Set(name, amount);
  return r;
}

ResourceSet ToProto(const Resources& resources) {
  ResourceSet out;
  for (const auto& [name, amount] : resources.ToMap()) (*out.mutable_amounts())[name] = amount;
  return out;
}

}  // namespace phalanx::rpc
