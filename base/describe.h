// Human-readable forms of the messages users see in errors and tables.
#pragma once

#include <string>

#include "base/proto/common.pb.h"
#include "base/resources.h"

namespace phalanx::rpc {

// "OOM_KILLED: peak 1.9 GiB > limit 1.0 GiB", "EXITED(3)", "SIGNALED(9, Killed)",
// "NODE_DIED: node 3f2a9c1d …", "KILLED_BY_USER", "CREATION_FAILED: <the constructor's error>".
std::string DescribeCause(const DeathCause& cause);

// "PENDING", "ALIVE", …
std::string StateName(ActorState state);

// "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED"
std::string StateName(JobState state);

// "actor 3f2a9c1d (Counter 'name')"
std::string DescribeActor(const ActorInfo& actor);

Resources FromProto(const ResourceSet& set);
ResourceSet ToProto(const Resources& resources);

}  // namespace phalanx::rpc
