#include "elastic/job_spec.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <regex>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/rpc.h"
#include "base/utf8.h"

namespace phalanx::elastic {
namespace {

absl::Status Bad(const std::string& field, const std::string& value, const std::string& fix) {
  return absl::InvalidArgumentError(
      absl::StrCat("job spec field '", field, "': ", value, " — ", fix));
}

const std::set<std::string> kEvents = {"oom", "nodeDied", "straggler", "hang", "exited"};

absl::StatusOr<Action> ParseAction(const std::string& field, const std::string& text) {
  if (text == "restart") return Action::kRestart;
  if (text == "reschedule") return Action::kReschedule;
  if (text == "respawnLarger") return Action::kRespawnLarger;
  if (text == "shrink") return Action::kShrink;
  if (text == "failJob") return Action::kFailJob;
  return Bad(field, absl::StrCat("'", text, "' is not an action"),
             "use restart, reschedule, respawnLarger, shrink or failJob");
}

std::string Scalar(const YAML::Node& n) { return n && n.IsScalar() ? n.Scalar() : ""; }

// Reads a field of a map node with the conversion `parse`; absent fields keep *out.
template <typename T, typename Parse>
absl::Status Read(const YAML::Node& node, const std::string& key, const std::string& field,
                  const std::string& want, Parse parse, T* out) {
  YAML::Node v = node[key];
  if (!v) return absl::OkStatus();
  if (!v.IsScalar() || !parse(v.Scalar(), out)) {
    return Bad(field,
               absl::StrCat("'",
                            v.IsScalar() ? v.Scalar()
                                         : std::string("(a ") + (v.IsMap() ? "map" : "list") + ")",
                            "' is not ", want),
               absl::StrCat("give ", want));
  }
  return absl::OkStatus();
}

bool ToInt(const std::string& s, int* out) { return absl::SimpleAtoi(s, out); }
bool ToInt64(const std::string& s, int64_t* out) { return absl::SimpleAtoi(s, out); }
bool ToDouble(const std::string& s, double* out) {
  return absl::SimpleAtod(s, out) && std::isfinite(*out);
}
bool ToBool(const std::string& s, bool* out) {
  std::string l = absl::AsciiStrToLower(s);
  if (l == "true" || l == "yes" || l == "1") return *out = true, true;
  if (l == "false" || l == "no" || l == "0") return *out = false, true;
  return false;
}
bool ToBytes(const std::string& s, int64_t* out) {
  auto b = ParseBytes(s);
  if (!b.ok()) return false;
  *out = *b;
  return true;
}

std::vector<FaultPolicy> DefaultPolicies() {
  FaultPolicy oom;
  oom.event = "oom";
  oom.action = Action::kRespawnLarger;
  FaultPolicy node;
  node.event = "nodeDied";
  node.action = Action::kReschedule;
  FaultPolicy straggler;
  straggler.event = "straggler";
  straggler.action = Action::kReschedule;
  FaultPolicy hang;
  hang.event = "hang";
  hang.action = Action::kRestart;
  FaultPolicy exited;
  exited.event = "exited";
  exited.action = Action::kRestart;
  return {oom, node, straggler, hang, exited};
}

const std::set<std::string> kTopLevel = {"name",
                                         "trainer",
                                         "codePath",
                                         "language",
                                         "preimports",
                                         "nodes",
                                         "replicas",
                                         "minReplicas",
                                         "maxReplicas",
                                         "resources",
                                         "faultTolerantPolicy",
                                         "restartLimit",
                                         "restartTimeLimit",
                                         "failPolicy",
                                         "checkpoint",
                                         "snapshot",
                                         "straggler",
                                         "hang",
                                         "phases",
                                         "data",
                                         "steps",
                                         "dataEpochs",
                                         "config",
                                         "placementStrategy",
                                         "scaleOutDebounceSeconds",
                                         "stepCallMs"};

}  // namespace

const char* ActionName(Action action) {
  switch (action) {
    case Action::kRestart:
      return "restart";
    case Action::kReschedule:
      return "reschedule";
    case Action::kRespawnLarger:
      return "respawnLarger";
    case Action::kShrink:
      return "shrink";
    case Action::kFailJob:
      return "failJob";
  }
  return "?";
}

absl::StatusOr<int64_t> ParseBytes(const std::string& text) {
  std::string t(absl::StripAsciiWhitespace(text));
  static const std::pair<const char*, double> kUnits[] = {
      {"Ki", 1024.0}, {"Mi", 1048576.0}, {"Gi", 1073741824.0}, {"Ti", 1099511627776.0},
      {"K", 1e3},     {"M", 1e6},        {"G", 1e9},           {"T", 1e12}};
  double scale = 1;
  for (const auto& [suffix, factor] : kUnits) {
    if (absl::EndsWith(t, suffix)) {
      t = t.substr(0, t.size() - std::string(suffix).size());
      scale = factor;
      break;
    }
  }
  double value;
  if (!absl::SimpleAtod(t, &value) || !std::isfinite(value) || value < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' is not a size; give bytes or a number with Ki, Mi, Gi (e.g. 512Mi)"));
  }
  // 2^63 bytes and up do not fit an int64_t: llround would give a negative size.
  if (value * scale >= 0x1p63) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' is too large a size (2^63 bytes or more); give e.g. 512Mi or 64Gi"));
  }
  return static_cast<int64_t>(std::llround(value * scale));
}

double JobSpec::ControllerLeaseSeconds() const {
  if (controller_lease_s > 0) return controller_lease_s;
  double lease = std::min(hang_timeout_s / 2, 10.0);
  // A stopped controller is then found about when a stopped rank is: a rank is probed from
  // 4 × a call's time (at least 0.1 s) into a call and found after silentSeconds more, about
  // 1.2 s with the defaults. Not closer: the lease is renewed every quarter of itself, and
  // 1.5 s leaves a renewal 1.1 s of delay before a live controller is taken for stopped.
  if (hang_silent_s > 0) lease = std::min(lease, std::max(1.0, 1.5 * hang_silent_s));
  return lease;
}

double JobSpec::ControllerRunningLeaseSeconds() const {
  return std::max(ControllerLeaseSeconds(), hang_timeout_s);
}

int64_t JobSpec::TotalSteps() const {
  if (steps > 0) return steps;
  if (data_epochs > 0 && global_batch > 0) {
    return data_epochs * ((num_samples + global_batch - 1) / global_batch);
  }
  return 0;
}

namespace {

// The spec's `phases`: each phase's bound in seconds.
absl::Status ReadPhases(const YAML::Node& ph, JobSpec* spec_out) {
  if (!ph) return absl::OkStatus();
  JobSpec& spec = *spec_out;
  if (!ph.IsMap()) {
    return Bad("phases", "not a map", "give e.g. {startSeconds: 120, formSeconds: 120}");
  }
  const std::vector<std::pair<std::string, double*>> phases = {
      {"placeSeconds", &spec.place_timeout_s},
      {"startSeconds", &spec.start_timeout_s},
      {"formSeconds", &spec.form_timeout_s},
      {"syncSeconds", &spec.sync_timeout_s},
      {"checkpointSeconds", &spec.checkpoint_timeout_s}};
  for (const auto& kv : ph) {
    std::string key = kv.first.as<std::string>();
    if (std::none_of(phases.begin(), phases.end(), [&](const auto& p) { return p.first == key; }))
      return Bad(absl::StrCat("phases.", key), "unknown field",
                 "use placeSeconds, startSeconds, formSeconds, syncSeconds or "
                 "checkpointSeconds (stepping is bounded by hang.timeoutSeconds)");
  }
  for (const auto& [key, field] : phases) {
    if (auto s =
            Read(ph, key, absl::StrCat("phases.", key), "a number of seconds", ToDouble, field);
        !s.ok())
      return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JobSpec> ParseSpecNode(const YAML::Node& root);

namespace {

// A spec's nodes as a reader that follows every alias sees them. Anchors and aliases let a
// few lines stand for billions of nodes (a "billion laughs" document); a spec past this is
// refused before anything walks it.
constexpr int64_t kMaxSpecNodes = 100000;

// Counts `node` and what it holds into *count, and stops once it passes kMaxSpecNodes.
void CountNodes(const YAML::Node& node, int64_t* count) {
  if (++*count > kMaxSpecNodes) return;
  if (node.IsMap()) {
    for (const auto& kv : node) {
      CountNodes(kv.first, count);
      CountNodes(kv.second, count);
      if (*count > kMaxSpecNodes) return;
    }
  } else if (node.IsSequence()) {
    for (const auto& item : node) {
      CountNodes(item, count);
      if (*count > kMaxSpecNodes) return;
    }
  }
}

}  // namespace

absl::StatusOr<JobSpec> ParseJobSpec(const std::string& yaml) {
  if (yaml.size() > rpc::kMaxJobSpecBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job spec of ", yaml.size(), " bytes: a spec is at most ", rpc::kMaxJobSpecBytes >> 10,
        " KiB (put large data in files the trainer reads, and name them in config)"));
  }
  try {
    YAML::Node root = YAML::Load(yaml);
    int64_t nodes = 0;
    CountNodes(root, &nodes);
    if (nodes > kMaxSpecNodes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job spec expands to more than ", kMaxSpecNodes,
          " YAML nodes once its aliases (*name) are followed: write the values out, or put "
          "large data in files the trainer reads"));
    }
    return ParseSpecNode(root);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("job spec is not valid YAML (line ",
                                                   e.mark.line + 1, ", column ", e.mark.column + 1,
                                                   "): ", e.msg));
  }
}

namespace {

// The names listed under `key` of the spec (preimports, nodes).
absl::Status ReadNames(const YAML::Node& root, const std::string& key, const std::string& fix,
                       const std::string& item_fix, std::vector<std::string>* out) {
  YAML::Node list = root[key];
  if (!list) return absl::OkStatus();
  if (!list.IsSequence()) return Bad(key, "not a list", fix);
  for (const auto& item : list) {
    if (!item.IsScalar()) return Bad(key, "an item that is not a name", item_fix);
    out->push_back(item.as<std::string>());
  }
  return absl::OkStatus();
}

// The sizes and limits at the top level: replicas (and their bounds), restarts, steps, epochs.
absl::Status ReadCounts(const YAML::Node& root, JobSpec* spec) {
  if (auto s = Read(root, "replicas", "replicas", "a whole number", ToInt, &spec->replicas);
      !s.ok())
    return s;
  spec->min_replicas = spec->replicas;
  spec->max_replicas = spec->replicas;
  if (auto s =
          Read(root, "minReplicas", "minReplicas", "a whole number", ToInt, &spec->min_replicas);
      !s.ok())
    return s;
  if (auto s =
          Read(root, "maxReplicas", "maxReplicas", "a whole number", ToInt, &spec->max_replicas);
      !s.ok())
    return s;
  if (auto s =
          Read(root, "restartLimit", "restartLimit", "a whole number", ToInt, &spec->restart_limit);
      !s.ok())
    return s;
  if (auto s = Read(root, "restartTimeLimit", "restartTimeLimit", "a number of seconds", ToDouble,
                    &spec->restart_time_limit_s);
      !s.ok())
    return s;
  if (auto s = Read(root, "steps", "steps", "a whole number", ToInt64, &spec->steps); !s.ok())
    return s;
  if (auto s =
          Read(root, "dataEpochs", "dataEpochs", "a whole number", ToInt64, &spec->data_epochs);
      !s.ok())
    return s;
  if (auto s = Read(root, "scaleOutDebounceSeconds", "scaleOutDebounceSeconds",
                    "a number of seconds", ToDouble, &spec->scale_out_debounce_s);
      !s.ok())
    return s;
  return absl::OkStatus();
}

absl::Status ReadResources(const YAML::Node& root, JobSpec* spec) {
  if (YAML::Node r = root["resources"]) {
    if (!r.IsMap()) return Bad("resources", "not a map", "give e.g. {CPU: 1, memory: 1Gi}");
    for (const auto& kv : r) {
      std::string name = kv.first.as<std::string>();
      std::string value = Scalar(kv.second);
      std::string field = absl::StrCat("resources.", name);
      if (name == "memory") {
        auto bytes = ParseBytes(value);
        if (!bytes.ok())
          return Bad(field, std::string(bytes.status().message()), "e.g. memory: 1Gi");
        spec->resources[name] = static_cast<double>(*bytes);
      } else {
        double amount;
        if (!ToDouble(value, &amount))
          return Bad(field, absl::StrCat("'", value, "' is not a number"), "e.g. CPU: 1");
        spec->resources[name] = amount;
      }
    }
  }
  return absl::OkStatus();
}

// The optional sections of settings: data, checkpoint, straggler, hang, phases, failPolicy.
absl::Status ReadSections(const YAML::Node& root, JobSpec* spec) {
  if (YAML::Node d = root["data"]) {
    if (!d.IsMap()) return Bad("data", "not a map", "give {numSamples: N, globalBatch: B}");
    if (auto s =
            Read(d, "numSamples", "data.numSamples", "a whole number", ToInt64, &spec->num_samples);
        !s.ok())
      return s;
    if (auto s = Read(d, "globalBatch", "data.globalBatch", "a whole number", ToInt64,
                      &spec->global_batch);
        !s.ok())
      return s;
    if (auto s = Read(d, "seed", "data.seed", "a whole number", ToInt64, &spec->seed); !s.ok())
      return s;
  }
  if (YAML::Node c = root["checkpoint"]) {
    spec->checkpoint_dir = Scalar(c["dir"]);
    if (Scalar(c["intervalSteps"]) == "auto") {
      spec->checkpoint_interval = kAutoCheckpointInterval;
    } else if (auto s = Read(c, "intervalSteps", "checkpoint.intervalSteps",
                             "a whole number, or auto", ToInt64, &spec->checkpoint_interval);
               !s.ok()) {
      return s;
    }
    int64_t keep = 0;
    if (auto s = Read(c, "numToKeep", "checkpoint.numToKeep", "a whole number", ToInt64, &keep);
        !s.ok())
      return s;
    if (keep < 0 || keep > 1000000) {
      return Bad("checkpoint.numToKeep", absl::StrCat(keep),
                 "give how many of the newest checkpoints to keep (1 or more), or 0 for all");
    }
    spec->checkpoint_keep = static_cast<int>(keep);
    if (auto s =
            Read(c, "atEnd", "checkpoint.atEnd", "true or false", ToBool, &spec->checkpoint_at_end);
        !s.ok())
      return s;
  }
  if (YAML::Node sn = root["snapshot"]) {
    if (!sn.IsMap()) {
      return Bad("snapshot", "not a map", "give {enabled: true, peerCopy: true, peerMBps: 200}");
    }
    for (const auto& kv : sn) {
      std::string key = kv.first.as<std::string>();
      if (key != "enabled" && key != "peerCopy" && key != "peerMBps") {
        return Bad(absl::StrCat("snapshot.", key), "unknown field",
                   "snapshot takes enabled, peerCopy and peerMBps");
      }
    }
    if (auto s = Read(sn, "enabled", "snapshot.enabled", "true or false", ToBool,
                      &spec->snapshot_enabled);
        !s.ok())
      return s;
    if (auto s = Read(sn, "peerCopy", "snapshot.peerCopy", "true or false", ToBool,
                      &spec->snapshot_peer_copy);
        !s.ok())
      return s;
    if (auto s = Read(sn, "peerMBps", "snapshot.peerMBps", "a number", ToDouble,
                      &spec->snapshot_peer_mbps);
        !s.ok())
      return s;
    if (!(spec->snapshot_peer_mbps > 0)) {
      return Bad("snapshot.peerMBps", absl::StrCat(spec->snapshot_peer_mbps),
                 "give a rate above 0 (megabytes a second), or peerCopy: false");
    }
  }
  if (YAML::Node st = root["straggler"]) {
    if (auto s =
            Read(st, "check", "straggler.check", "true or false", ToBool, &spec->straggler_check);
        !s.ok())
      return s;
    if (auto s =
            Read(st, "factor", "straggler.factor", "a number", ToDouble, &spec->straggler_factor);
        !s.ok())
      return s;
  }
  if (YAML::Node h = root["hang"]) {
    if (auto s = Read(h, "timeoutSeconds", "hang.timeoutSeconds", "a number of seconds", ToDouble,
                      &spec->hang_timeout_s);
        !s.ok())
      return s;
    if (auto s = Read(h, "controllerLeaseSeconds", "hang.controllerLeaseSeconds",
                      "a number of seconds", ToDouble, &spec->controller_lease_s);
        !s.ok())
      return s;
    if (auto s = Read(h, "silentSeconds", "hang.silentSeconds", "a number of seconds", ToDouble,
                      &spec->hang_silent_s);
        !s.ok())
      return s;
  }
  if (auto s = ReadPhases(root["phases"], spec); !s.ok()) return s;
  if (auto s = Read(root, "stepCallMs", "stepCallMs", "a number of milliseconds", ToDouble,
                    &spec->step_call_ms);
      !s.ok())
    return s;
  if (YAML::Node f = root["failPolicy"]) {
    if (auto s = Read(f, "belowMinTimeoutSeconds", "failPolicy.belowMinTimeoutSeconds",
                      "a number of seconds", ToDouble, &spec->below_min_timeout_s);
        !s.ok())
      return s;
  }
  return absl::OkStatus();
}

absl::Status ReadConfig(const YAML::Node& root, JobSpec* spec) {
  if (YAML::Node c = root["config"]) {
    if (!c.IsMap()) return Bad("config", "not a map", "give key: value pairs");
    for (const auto& kv : c) {
      std::string key = kv.first.as<std::string>();
      if (!kv.second.IsScalar() && !kv.second.IsNull()) {
        // Its value would be dropped (the trainer reads strings), and an alias bomb hides here.
        return Bad(absl::StrCat("config.", key), kv.second.IsMap() ? "a map" : "a list",
                   "give a string (a trainer reads its config as strings), e.g. key: \"1,2,3\"");
      }
      spec->config[key] = Scalar(kv.second);
    }
  }
  return absl::OkStatus();
}

// One rule of faultTolerantPolicy (`field` names it in errors).
absl::StatusOr<FaultPolicy> ReadPolicy(const YAML::Node& e, const std::string& field) {
  if (!e.IsMap()) return Bad(field, "not a map", "give {event: oom, action: respawnLarger}");
  FaultPolicy policy;
  std::string codes = Scalar(e["exitCodes"]);
  policy.event = Scalar(e["event"]);
  if (codes.empty() == policy.event.empty()) {
    return Bad(field, "needs exactly one of exitCodes and event",
               "e.g. {exitCodes: \"129,101\", action: restart} or {event: oom, action: "
               "respawnLarger}");
  }
  for (absl::string_view c : absl::StrSplit(codes, ',', absl::SkipWhitespace())) {
    int code;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(c), &code) || code < 0 || code > 255) {
      return Bad(field + ".exitCodes", absl::StrCat("'", codes, "'"),
                 "give comma-separated exit codes 0..255, e.g. \"129,101\"");
    }
    policy.exit_codes.push_back(code);
  }
  if (!policy.event.empty() && !kEvents.count(policy.event)) {
    return Bad(field + ".event", absl::StrCat("'", policy.event, "'"),
               "use oom, nodeDied, straggler, hang or exited");
  }
  auto action = ParseAction(field + ".action", Scalar(e["action"]));
  if (!action.ok()) return action.status();
  policy.action = *action;
  if (auto s = Read(e, "memoryGrowth", field + ".memoryGrowth", "a number", ToDouble,
                    &policy.memory_growth);
      !s.ok())
    return s;
  if (auto s = Read(e, "maxMemoryStep", field + ".maxMemoryStep", "a size like 8Gi", ToBytes,
                    &policy.max_memory_step);
      !s.ok())
    return s;
  if (auto s = Read(e, "memoryCap", field + ".memoryCap", "a size like 64Gi", ToBytes,
                    &policy.memory_cap);
      !s.ok())
    return s;
  if (auto s = Read(e, "dump", field + ".dump", "true or false", ToBool, &policy.dump); !s.ok())
    return s;
  return policy;
}

absl::Status ReadPolicies(const YAML::Node& root, JobSpec* spec) {
  YAML::Node p = root["faultTolerantPolicy"];
  if (!p) return absl::OkStatus();
  if (!p.IsSequence()) {
    return Bad("faultTolerantPolicy", "not a list", "give a list of {exitCodes|event, action}");
  }
  for (size_t i = 0; i < p.size(); ++i) {
    auto policy = ReadPolicy(p[i], absl::StrCat("faultTolerantPolicy[", i, "]"));
    if (!policy.ok()) return policy.status();
    spec->policies.push_back(*policy);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JobSpec> ParseSpecNode(const YAML::Node& root) {
  if (!root.IsMap()) {
    return absl::InvalidArgumentError("job spec must be a YAML map (name: …, trainer: …)");
  }
  for (const auto& kv : root) {
    std::string key = kv.first.as<std::string>();
    if (!kTopLevel.count(key)) {
      return Bad(
          key, "unknown field",
          absl::StrCat(
              "remove it, or use one of: ",
              absl::StrJoin(std::vector<std::string>(kTopLevel.begin(), kTopLevel.end()), ", ")));
    }
  }
  JobSpec spec;
  spec.name = Scalar(root["name"]);
  spec.trainer = Scalar(root["trainer"]);
  spec.code_path = Scalar(root["codePath"]);
  if (root["language"]) spec.language = Scalar(root["language"]);
  spec.placement_strategy =
      root["placementStrategy"] ? Scalar(root["placementStrategy"]) : spec.placement_strategy;
  for (auto s : {ReadNames(root, "preimports", "give a list of module names, e.g. [torch, numpy]",
                           "give module names, e.g. torch", &spec.preimports),
                 ReadNames(root, "nodes",
                           "give a list of node ids, hostnames or IP addresses, e.g. [host-a, "
                           "host-b]",
                           "give node ids, hostnames or IP addresses", &spec.nodes)}) {
    if (!s.ok()) return s;
  }
  for (auto read : {ReadCounts, ReadResources, ReadSections, ReadConfig, ReadPolicies}) {
    if (auto s = read(root, &spec); !s.ok()) return s;
  }
  if (auto s = ValidateJobSpec(spec); !s.ok()) return s;
  return spec;
}

absl::Status CheckNodeNames(const std::vector<std::string>& nodes, const std::string& field) {
  if (nodes.size() > kMaxJobNodes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", nodes.size(), " nodes; give at most ", kMaxJobNodes));
  }
  for (const auto& n : nodes) {
    if (n.empty() || n.size() > 253 || n.find_first_of(":, \t\n") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": '", n.substr(0, 64),
                       "' is not a node name; give node ids (`phalanx status`), hostnames or IPv4 "
                       "addresses, of at most 253 characters, without ':', ',' or spaces"));
    }
  }
  return absl::OkStatus();
}

namespace {

// The spec's texts: the name, the trainer and its language, preimports, nodes.
absl::Status ValidateNames(const JobSpec& spec) {
  if (spec.name.empty()) return Bad("name", "missing", "name the job, e.g. name: regression");
  // A spec is text: the job kind passes it on as YAML (JobSpecToYaml), which must read back
  // as the same spec.
  std::vector<std::pair<std::string, const std::string*>> texts = {
      {"trainer", &spec.trainer},
      {"codePath", &spec.code_path},
      {"checkpoint.dir", &spec.checkpoint_dir}};
  for (const auto& [name, amount] : spec.resources) texts.push_back({"resources", &name});
  for (const auto& [key, value] : spec.config) {
    texts.push_back({"config", &key});
    texts.push_back({absl::StrCat("config.", key), &value});
  }
  for (const auto& [field, text] : texts) {
    if (FirstInvalidUtf8(*text) != absl::string_view::npos) {
      return Bad(field, absl::StrCat("'", absl::CHexEscape(*text), "' is not UTF-8"),
                 "write the spec as UTF-8 text");
    }
  }
  if (spec.name.size() > kMaxJobNameLength) {
    return Bad("name", absl::StrCat(spec.name.size(), " characters"),
               absl::StrCat("use at most ", kMaxJobNameLength,
                            " (the job id is the name and 7 more characters, at most 64)"));
  }
  for (char c : spec.name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      return Bad("name", absl::StrCat("'", spec.name, "'"),
                 "use letters, digits, '-', '_' and '.' only");
    }
  }
  if (spec.trainer.empty()) {
    return Bad("trainer", "missing", "name a class registered with PHALANX_TRAINER");
  }
  if (spec.language != "cpp" && spec.language != "python") {
    return Bad("language", absl::StrCat("'", spec.language, "'"),
               "give cpp (a C++ trainer in codePath) or python (phalanx.train)");
  }
  for (const auto& module : spec.preimports) {
    static const std::regex kModule(R"([A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*)");
    if (!std::regex_match(module, kModule)) {
      return Bad("preimports", absl::StrCat("'", module, "'"),
                 "give Python module names, e.g. torch or torch.nn");
    }
  }
  if (!spec.preimports.empty() && spec.language != "python") {
    return Bad("preimports", absl::StrJoin(spec.preimports, ","),
               "remove it: only Python trainers (language: python) import modules");
  }
  if (auto s = CheckNodeNames(spec.nodes, "nodes"); !s.ok()) return s;
  return absl::OkStatus();
}

// The spec's numbers: replicas, resources, data, steps, restarts.
absl::Status ValidateSizes(const JobSpec& spec) {
  // A Python trainer runs its own loop over its own data until it returns.
  const bool trainer_driven = spec.language == "python";
  if (spec.replicas < 1) return Bad("replicas", std::to_string(spec.replicas), "give 1 or more");
  if (spec.min_replicas < 1 || spec.min_replicas > spec.replicas) {
    return Bad("minReplicas", std::to_string(spec.min_replicas),
               absl::StrCat("give 1 <= minReplicas <= replicas (", spec.replicas, ")"));
  }
  if (spec.max_replicas < spec.replicas) {
    return Bad("maxReplicas", std::to_string(spec.max_replicas),
               absl::StrCat("give maxReplicas >= replicas (", spec.replicas, ")"));
  }
  for (const auto& [name, amount] : spec.resources) {
    if (amount < 0) {
      return Bad(absl::StrCat("resources.", name), std::to_string(amount), "give 0 or more");
    }
  }
  if (trainer_driven && spec.num_samples == 0 && spec.global_batch == 0) {
    // no data section: the trainer's ElasticSampler splits its data
  } else if (spec.num_samples <= 0) {
    return Bad("data.numSamples", std::to_string(spec.num_samples), "give the dataset size (> 0)");
  }
  if (trainer_driven && spec.num_samples == 0) {
  } else if (spec.global_batch <= 0 || spec.global_batch > spec.num_samples) {
    return Bad("data.globalBatch", std::to_string(spec.global_batch),
               absl::StrCat("give 1 <= globalBatch <= numSamples (", spec.num_samples, ")"));
  }
  if (spec.num_samples > 0 && spec.global_batch < spec.max_replicas) {
    return Bad("data.globalBatch", std::to_string(spec.global_batch),
               absl::StrCat("give at least maxReplicas (", spec.max_replicas,
                            ") so that every rank gets a sample"));
  }
  if (spec.steps <= 0 && spec.data_epochs <= 0 && !trainer_driven) {
    return Bad("steps", "missing", "give steps: N or dataEpochs: N");
  }
  if (spec.restart_limit < 0) {
    return Bad("restartLimit", std::to_string(spec.restart_limit), "give 0 or more");
  }
  if (spec.restart_time_limit_s <= 0) {
    return Bad("restartTimeLimit", std::to_string(spec.restart_time_limit_s),
               "give a window in seconds (> 0)");
  }
  return absl::OkStatus();
}

// The spec's times and switches: checkpoints, stragglers, hangs, phases, placement.
absl::Status ValidateTimes(const JobSpec& spec) {
  if (spec.checkpoint_interval < kAutoCheckpointInterval ||
      (spec.checkpoint_interval != 0 && spec.checkpoint_dir.empty())) {
    return Bad("checkpoint", absl::StrCat("intervalSteps ", spec.checkpoint_interval),
               "give checkpoint.dir with intervalSteps > 0 (or auto), or leave both out");
  }
  if (spec.checkpoint_at_end && spec.checkpoint_dir.empty()) {
    return Bad("checkpoint.atEnd", "true", "give checkpoint.dir, where the final state goes");
  }
  if (spec.straggler_factor <= 1) {
    return Bad("straggler.factor", std::to_string(spec.straggler_factor), "give a factor > 1");
  }
  if (spec.hang_timeout_s <= 0) {
    return Bad("hang.timeoutSeconds", std::to_string(spec.hang_timeout_s), "give seconds > 0");
  }
  if (spec.controller_lease_s < 0 ||
      (spec.controller_lease_s > 0 && spec.controller_lease_s >= spec.hang_timeout_s)) {
    return Bad("hang.controllerLeaseSeconds", std::to_string(spec.controller_lease_s),
               "give seconds > 0 and below hang.timeoutSeconds (a hung controller must be "
               "replaced within the hang timeout), or leave it out");
  }
  if (!(spec.hang_silent_s >= 0)) {
    return Bad("hang.silentSeconds", std::to_string(spec.hang_silent_s),
               "give seconds >= 0 (0: only the hang timeout finds hung ranks)");
  }
  for (const auto& [field, value] : std::vector<std::pair<const char*, double>>{
           {"phases.startSeconds", spec.start_timeout_s},
           {"phases.formSeconds", spec.form_timeout_s},
           {"phases.syncSeconds", spec.sync_timeout_s},
           {"phases.checkpointSeconds", spec.checkpoint_timeout_s}}) {
    if (!(value > 0 && value < 1e9)) {
      return Bad(field, std::to_string(value), "give seconds > 0, or leave it out (120)");
    }
  }
  if (!(spec.place_timeout_s >= 0 && spec.place_timeout_s < 1e9)) {
    return Bad("phases.placeSeconds", std::to_string(spec.place_timeout_s),
               "give seconds > 0, or leave it out (failPolicy.belowMinTimeoutSeconds)");
  }
  if (!(spec.step_call_ms >= 0)) {
    return Bad("stepCallMs", std::to_string(spec.step_call_ms),
               "give milliseconds >= 0 (0: one step per call)");
  }
  if (spec.placement_strategy != "PACK" && spec.placement_strategy != "SPREAD" &&
      spec.placement_strategy != "STRICT_PACK" && spec.placement_strategy != "STRICT_SPREAD") {
    return Bad("placementStrategy", absl::StrCat("'", spec.placement_strategy, "'"),
               "use PACK, SPREAD, STRICT_PACK or STRICT_SPREAD");
  }
  return absl::OkStatus();
}

absl::Status ValidatePolicies(const JobSpec& spec) {
  for (size_t i = 0; i < spec.policies.size(); ++i) {
    const auto& p = spec.policies[i];
    std::string field = absl::StrCat("faultTolerantPolicy[", i, "]");
    if (p.memory_growth < 1) {
      return Bad(field + ".memoryGrowth", std::to_string(p.memory_growth), "give a factor >= 1");
    }
    if (p.dump && spec.checkpoint_dir.empty()) {
      return Bad(field + ".dump", "true",
                 "give checkpoint: {dir: …}: the dying gasp is written there");
    }
    if (p.action == Action::kRespawnLarger && spec.resources.count("memory") == 0) {
      return Bad(field + ".action", "respawnLarger",
                 "give resources.memory (the limit to grow), or another action");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJobSpec(const JobSpec& spec) {
  for (auto validate : {ValidateNames, ValidateSizes, ValidateTimes, ValidatePolicies}) {
    if (auto s = validate(spec); !s.ok()) return s;
  }
  return absl::OkStatus();
}

bool DumpOnDeath(const JobSpec& spec) {
  for (const auto& p : spec.policies) {
    if (p.dump) return true;
  }
  return false;
}

FaultPolicy MatchPolicy(const JobSpec& spec, const std::string& event, int exit_code, int signal) {
  auto matches = [&](const FaultPolicy& p) {
    if (!p.event.empty()) return p.event == event;
    for (int code : p.exit_codes) {
      if (event == "exited" && code == exit_code) return true;
      if (signal > 0 && code == 128 + signal) return true;
    }
    return false;
  };
  for (const auto& p : spec.policies) {
    if (matches(p)) return p;
  }
  for (const auto& p : DefaultPolicies()) {
    if (matches(p)) return p;
  }
  FaultPolicy restart;
  restart.action = Action::kRestart;
  return restart;
}

namespace {

// Free text as a YAML scalar that reads back the same: with a control character in it (a
// carriage return, a tab) it is double-quoted, where the characters are escaped; a plain
// scalar would lose them to YAML's line and space folding.
struct Text {
  const std::string& s;
};
YAML::Emitter& operator<<(YAML::Emitter& out, Text t) {
  bool control = std::any_of(t.s.begin(), t.s.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
  });
  if (control) out << YAML::DoubleQuoted;
  return out << t.s;
}

// YAML reads a key written on its own ("key: value") only up to 1,024 characters; a longer
// one must be an explicit key ("? key" then ": value"). yaml-cpp's emitter makes a key of
// more than 1,024 bytes explicit itself, but counts the bytes before escaping them; past
// this many bytes the key as printed (a byte escaped as "\x00" takes 4, and the quotes 2)
// might be longer.
constexpr size_t kLongestImplicitKey = 1024;
constexpr size_t kLongestImplicitKeyBytes = (kLongestImplicitKey - 2) / 4;

// Free text as a map's key, read back the same however long it is.
struct KeyText {
  const std::string& s;
};
YAML::Emitter& operator<<(YAML::Emitter& out, KeyText k) {
  // (Asking again for a key yaml-cpp makes explicit itself leaves every key after it
  // explicit, in yaml-cpp 0.7.)
  if (k.s.size() > kLongestImplicitKeyBytes && k.s.size() <= kLongestImplicitKey) {
    out << YAML::LongKey;
  }
  return out << YAML::Key << Text{k.s};
}

// JobSpecToYaml's parts: the fault-tolerant policies, and the recovery's limits, checks and
// phase bounds.
void EmitPolicies(const JobSpec& spec, YAML::Emitter& out) {
  out << YAML::Key << "faultTolerantPolicy" << YAML::Value << YAML::BeginSeq;
  for (const auto& p : spec.policies) {
    out << YAML::BeginMap;
    if (!p.event.empty()) {
      out << YAML::Key << "event" << YAML::Value << p.event;
    } else {
      std::vector<std::string> codes;
      for (int c : p.exit_codes) codes.push_back(std::to_string(c));
      out << YAML::Key << "exitCodes" << YAML::Value << absl::StrJoin(codes, ",");
    }
    out << YAML::Key << "action" << YAML::Value << ActionName(p.action);
    out << YAML::Key << "memoryGrowth" << YAML::Value << p.memory_growth;
    out << YAML::Key << "maxMemoryStep" << YAML::Value << p.max_memory_step;
    out << YAML::Key << "memoryCap" << YAML::Value << p.memory_cap;
    if (p.dump) out << YAML::Key << "dump" << YAML::Value << true;
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
}

void EmitRecovery(const JobSpec& spec, YAML::Emitter& out) {
  out << YAML::Key << "restartLimit" << YAML::Value << spec.restart_limit;
  out << YAML::Key << "restartTimeLimit" << YAML::Value << spec.restart_time_limit_s;
  out << YAML::Key << "failPolicy" << YAML::Value << YAML::BeginMap << YAML::Key
      << "belowMinTimeoutSeconds" << YAML::Value << spec.below_min_timeout_s << YAML::EndMap;
  if (!spec.checkpoint_dir.empty()) {
    out << YAML::Key << "checkpoint" << YAML::Value << YAML::BeginMap << YAML::Key << "dir"
        << YAML::Value << Text{spec.checkpoint_dir} << YAML::Key << "intervalSteps";
    if (spec.checkpoint_interval == kAutoCheckpointInterval) {
      out << YAML::Value << "auto";
    } else {
      out << YAML::Value << spec.checkpoint_interval;
    }
    out << YAML::Key << "atEnd" << YAML::Value << spec.checkpoint_at_end << YAML::Key << "numToKeep"
        << YAML::Value << spec.checkpoint_keep << YAML::EndMap;
  }
  out << YAML::Key << "snapshot" << YAML::Value << YAML::BeginMap << YAML::Key << "enabled"
      << YAML::Value << spec.snapshot_enabled << YAML::Key << "peerCopy" << YAML::Value
      << spec.snapshot_peer_copy << YAML::Key << "peerMBps" << YAML::Value
      << spec.snapshot_peer_mbps << YAML::EndMap;
  out << YAML::Key << "straggler" << YAML::Value << YAML::BeginMap << YAML::Key << "check"
      << YAML::Value << spec.straggler_check << YAML::Key << "factor" << YAML::Value
      << spec.straggler_factor << YAML::EndMap;
  out << YAML::Key << "hang" << YAML::Value << YAML::BeginMap << YAML::Key << "timeoutSeconds"
      << YAML::Value << spec.hang_timeout_s;
  if (spec.controller_lease_s > 0) {
    out << YAML::Key << "controllerLeaseSeconds" << YAML::Value << spec.controller_lease_s;
  }
  out << YAML::Key << "silentSeconds" << YAML::Value << spec.hang_silent_s;
  out << YAML::EndMap;
  out << YAML::Key << "phases" << YAML::Value << YAML::BeginMap;
  if (spec.place_timeout_s > 0) {
    out << YAML::Key << "placeSeconds" << YAML::Value << spec.place_timeout_s;
  }
  out << YAML::Key << "startSeconds" << YAML::Value << spec.start_timeout_s;
  out << YAML::Key << "formSeconds" << YAML::Value << spec.form_timeout_s;
  out << YAML::Key << "syncSeconds" << YAML::Value << spec.sync_timeout_s;
  out << YAML::Key << "checkpointSeconds" << YAML::Value << spec.checkpoint_timeout_s;
  out << YAML::EndMap;
}

}  // namespace

std::string JobSpecToYaml(const JobSpec& spec) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << spec.name;
  out << YAML::Key << "trainer" << YAML::Value << Text{spec.trainer};
  if (!spec.code_path.empty()) {
    out << YAML::Key << "codePath" << YAML::Value << Text{spec.code_path};
  }
  if (spec.language != "cpp") out << YAML::Key << "language" << YAML::Value << spec.language;
  if (!spec.preimports.empty()) {
    out << YAML::Key << "preimports" << YAML::Value << YAML::Flow << spec.preimports;
  }
  out << YAML::Key << "replicas" << YAML::Value << spec.replicas;
  out << YAML::Key << "minReplicas" << YAML::Value << spec.min_replicas;
  out << YAML::Key << "maxReplicas" << YAML::Value << spec.max_replicas;
  if (!spec.resources.empty()) {
    out << YAML::Key << "resources" << YAML::Value << YAML::BeginMap;
    for (const auto& [k, v] : spec.resources) out << KeyText{k} << YAML::Value << v;
    out << YAML::EndMap;
  }
  out << YAML::Key << "data" << YAML::Value << YAML::BeginMap << YAML::Key << "numSamples"
      << YAML::Value << spec.num_samples << YAML::Key << "globalBatch" << YAML::Value
      << spec.global_batch << YAML::Key << "seed" << YAML::Value << spec.seed << YAML::EndMap;
  if (spec.steps > 0) out << YAML::Key << "steps" << YAML::Value << spec.steps;
  if (spec.data_epochs > 0) out << YAML::Key << "dataEpochs" << YAML::Value << spec.data_epochs;
  if (!spec.policies.empty()) EmitPolicies(spec, out);
  EmitRecovery(spec, out);
  out << YAML::Key << "placementStrategy" << YAML::Value << spec.placement_strategy;
  if (!spec.nodes.empty()) {
    out << YAML::Key << "nodes" << YAML::Value << YAML::Flow << spec.nodes;
  }
  out << YAML::Key << "scaleOutDebounceSeconds" << YAML::Value << spec.scale_out_debounce_s;
  out << YAML::Key << "stepCallMs" << YAML::Value << spec.step_call_ms;
  if (!spec.config.empty()) {
    out << YAML::Key << "config" << YAML::Value << YAML::BeginMap;
    for (const auto& [k, v] : spec.config) out << KeyText{k} << YAML::Value << Text{v};
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  return out.c_str();
}

}  // namespace phalanx::elastic
