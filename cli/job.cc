// `phalanx job list|status|scale|stop`: jobs as the GCS keeps them. Elastic training jobs
// print their conditions, ranks and event history; scale and stop requests go through the
// GCS to the job's controller.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/describe.h"
#include "base/files.h"
#include "base/ids.h"
#include "base/rpc.h"
#include "base/session.h"
#include "base/system.h"
#include "base/tls.h"
#include "base/utf8.h"
#include "cli/commands.h"
#include "client/gcs_client.h"
#include "client/job_status.h"

namespace phalanx::cli {
namespace {

absl::StatusOr<std::unique_ptr<gcs::GcsClient>> Connect(const ClusterFlags& flags) {
  auto cluster = rpc::FindCluster(flags.address, flags.token);
  if (!cluster.ok()) return cluster.status();
  return gcs::GcsClient::Connect({cluster->address, cluster->token}, absl::Seconds(5));
}

int Fail(absl::string_view verb, const absl::Status& status) {
  std::cerr << "phalanx job " << verb << ": " << status.message() << "\n";
  return 1;
}

std::string Duration(int64_t ms) {
  if (ms < 0) ms = 0;
  if (ms < 60'000) return absl::StrFormat("%.1fs", ms / 1000.0);
  if (ms < 3'600'000) return absl::StrFormat("%dm%02ds", ms / 60'000, (ms / 1000) % 60);
  return absl::StrFormat("%dh%02dm", ms / 3'600'000, (ms / 60'000) % 60);
}

std::string FormatDriverJob(const rpc::JobInfo& job) {
  int64_t end = job.end_time_ms() > 0 ? job.end_time_ms() : NowMs();
  std::string out = absl::StrFormat("job %s: %s", job.job_id(), rpc::StateName(job.state()));
  if (job.start_time_ms() > 0) {
    absl::StrAppend(&out, " after ", Duration(end - job.start_time_ms()));
  }
  if (job.end_time_ms() > 0) absl::StrAppend(&out, ", exit code ", job.exit_code());
  absl::StrAppend(&out, "\n  entrypoint: ", absl::StrJoin(job.entrypoint(), " "));
  if (!job.working_dir().empty()) absl::StrAppend(&out, "\n  working dir: ", job.working_dir());
  if (job.driver_pid() > 0) absl::StrAppend(&out, "\n  driver pid: ", job.driver_pid());
  if (!job.log_path().empty()) absl::StrAppend(&out, "\n  logs: ", job.log_path());
  if (!job.message().empty()) absl::StrAppend(&out, "\n  ", job.message());
  return out;
}

}  // namespace

int RunJobList(const ClusterFlags& flags) {
  auto gcs = Connect(flags);
  if (!gcs.ok()) return Fail("list", gcs.status());
  auto jobs = (*gcs)->ListJobs();
  if (!jobs.ok()) return Fail("list", jobs.status());
  if (jobs->empty()) {
    std::cout << "(no jobs)\n";
    return 0;
  }
  std::cout << absl::StrFormat("%-24s %-8s %-10s %-9s %-6s %s\n", "JOB", "KIND", "STATE",
                               "DURATION", "EXIT", "ENTRYPOINT / STATUS");
  int64_t now = NowMs();
  for (const auto& job : *jobs) {
    int64_t start = job.start_time_ms() > 0 ? job.start_time_ms() : job.submit_time_ms();
    int64_t end = job.end_time_ms() > 0 ? job.end_time_ms() : now;
    std::string detail;
    std::string exit = "-";
    if (job.kind() == "elastic") {
      const auto& el = job.elastic();
      detail =
          absl::StrFormat("%s: world size %d, step %d", job.name(), el.world_size(), el.step());
    } else {
      detail = absl::StrJoin(job.entrypoint(), " ");
      if (job.state() == rpc::JOB_SUCCEEDED || job.state() == rpc::JOB_FAILED ||
          job.state() == rpc::JOB_STOPPED) {
        exit = absl::StrCat(job.exit_code());
      }
    }
    if (detail.size() > 60) detail = absl::StrCat(detail.substr(0, 57), "...");
    std::cout << absl::StrFormat("%-24s %-8s %-10s %-9s %-6s %s\n", job.job_id(),
                                 job.kind().empty() ? "driver" : job.kind(),
                                 rpc::StateName(job.state()), Duration(end - start), exit, detail);
  }
  return 0;
}

int RunJobStatus(const ClusterFlags& flags, const std::string& job_id) {
  auto gcs = Connect(flags);
  if (!gcs.ok()) return Fail("status", gcs.status());
  auto job = (*gcs)->GetJob(job_id);
  if (!job.ok()) return Fail("status", job.status());
  if (job->kind() == "elastic") {
    std::cout << FormatStatus(ToStatus(*job)) << "\n";
    return 0;
  }
  std::cout << FormatDriverJob(*job) << "\n";
  return 0;
}

int RunJobScale(const ClusterFlags& flags, const std::string& job_id, int replicas,
                const std::vector<int>& ranks,
                const std::optional<std::vector<std::string>>& nodes) {
  if (replicas < 0 && ranks.empty() && !nodes) {
    return Fail("scale", absl::InvalidArgumentError(
                             "give --replicas N (the new world size), --remove-ranks R,... "
                             "(the ranks to take out) or --nodes N,... (the nodes to use)"));
  }
  auto gcs = Connect(flags);
  if (!gcs.ok()) return Fail("scale", gcs.status());
  if (replicas < 0) {
    auto job = (*gcs)->GetJob(job_id);
    if (!job.ok()) return Fail("scale", job.status());
    replicas = nodes && ranks.empty()
                   ? job->elastic().target_replicas()
                   : job->elastic().world_size() - static_cast<int>(ranks.size());
  }
  rpc::ScaleJobRequest request;
  request.set_job_id(job_id);
  request.set_replicas(replicas);
  for (int r : ranks) request.add_ranks(r);
  if (nodes) {
    request.set_set_nodes(true);
    for (const auto& n : *nodes) request.add_nodes(n);
  }
  if (auto scaled = (*gcs)->ScaleJob(request); !scaled.ok()) {
    return Fail("scale", scaled.status());
  }
  std::cout << "asked job " << job_id << " to scale to " << replicas << " replicas"
            << (ranks.empty() ? "" : absl::StrCat(" without ranks ", absl::StrJoin(ranks, ",")))
            << (!nodes           ? ""
                : nodes->empty() ? " on any node"
                                 : absl::StrCat(" on nodes ", absl::StrJoin(*nodes, ",")))
            << "; `phalanx job status " << job_id << "` shows the progress\n";
  return 0;
}

namespace {

bool Terminal(rpc::JobState state) {
  return state == rpc::JOB_SUCCEEDED || state == rpc::JOB_FAILED || state == rpc::JOB_STOPPED;
}

// Streams the working dir's files to the head (after checking their total size against
// `limit`) in chunks of kUploadChunkBytes, so that neither side holds the whole dir, and
// names the upload in `request`.
constexpr size_t kUploadChunkBytes = 1 << 20;

absl::Status UploadWorkingDir(gcs::GcsClient& gcs, const std::string& dir, int64_t limit,
                              rpc::SubmitJobRequest* request) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--working-dir '", dir, "' is not a directory on this machine"));
  }
  std::vector<fs::path> files;
  int64_t total = 0;
  auto it = fs::recursive_directory_iterator(dir, fs::directory_options::none, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const auto& entry = *it;
    std::string name = entry.path().filename().string();
    if (entry.is_directory(ec) && (name == ".git" || name == "__pycache__")) {
      it.disable_recursion_pending();
      continue;
    }
    if (!entry.is_regular_file(ec)) continue;
    total += static_cast<int64_t>(entry.file_size(ec));
    files.push_back(entry.path());
  }
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("--working-dir '", dir, "' cannot be read: ", ec.message()));
  }
  if (total > limit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--working-dir '", dir, "' holds ", FormatBytes(total), ", over the limit of ",
        FormatBytes(limit),
        ": leave data sets and checkpoints out of it and read them from shared storage"));
  }
  size_t next_file = 0;
  std::ifstream in;
  std::string buffer(kUploadChunkBytes, '\0');
  auto reply = gcs.UploadWorkingDir([&](rpc::UploadChunk* chunk) -> absl::StatusOr<bool> {
    while (true) {
      if (!in.is_open()) {
        if (next_file == files.size()) return false;
        const fs::path& path = files[next_file++];
        in.open(path, std::ios::binary);
        if (!in) {
          return absl::InvalidArgumentError(
              absl::StrCat("--working-dir: cannot read ", path.string()));
        }
        chunk->set_path(fs::relative(path, dir, ec).generic_string());
        chunk->set_mode(static_cast<uint32_t>(fs::status(path, ec).permissions()) & 0777);
      }
      in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      chunk->set_data(buffer.data(), static_cast<size_t>(in.gcount()));
      if (in.eof()) in.close();
      if (!chunk->path().empty() || !chunk->data().empty()) return true;
    }
  });
  if (!reply.ok()) return reply.status();
  request->set_upload_id(reply->upload_id());
  request->set_working_dir(fs::absolute(dir, ec).string());
  return absl::OkStatus();
}

// One status line that stays at the bottom of a terminal while logs scroll above it (and a
// plain line per change when stderr is not a terminal).
class ProgressLine {
 public:
  ProgressLine() : tty_(::isatty(STDERR_FILENO) == 1) {}

  // `key`: what counts as a change when stderr is not a terminal (not the elapsed time).
  void Show(const std::string& line, const std::string& key) {
    absl::MutexLock lock(&mu_);
    if (tty_) {
      std::cerr << "\r\033[K" << line << std::flush;
      shown_ = true;
    } else if (key != last_key_) {
      std::cerr << line << "\n" << std::flush;
    }
    last_ = line;
    last_key_ = key;
  }
  // Clears the line, runs `print`, and redraws it.
  void Above(const std::function<void()>& print) {
    absl::MutexLock lock(&mu_);
    if (tty_ && shown_) std::cerr << "\r\033[K" << std::flush;
    print();
    std::cout << std::flush;
    if (tty_ && shown_) std::cerr << last_ << std::flush;
  }
  void Done() {
    absl::MutexLock lock(&mu_);
    if (tty_ && shown_) std::cerr << "\r\033[K" << std::flush;
    shown_ = false;
  }

 private:
  const bool tty_;
  absl::Mutex mu_;
  bool shown_ = false;
  std::string last_;
  std::string last_key_;
};

std::string ProgressKey(const rpc::JobInfo& job) {
  return absl::StrCat(job.state(), "/", job.elastic().world_size());
}

std::string ProgressText(const rpc::JobInfo& job) {
  int64_t start = job.start_time_ms() > 0 ? job.start_time_ms() : job.submit_time_ms();
  int64_t end = job.end_time_ms() > 0 ? job.end_time_ms() : NowMs();
  std::string line = absl::StrFormat("[job %s] %s %s", job.job_id(), rpc::StateName(job.state()),
                                     Duration(end - start));
  if (job.kind() == "elastic") {
    absl::StrAppendFormat(&line, ", world size %d, step %d", job.elastic().world_size(),
                          job.elastic().step());
  }
  return line;
}

int FinalLine(const rpc::JobInfo& job) {
  std::cout << "Job " << job.job_id() << " " << rpc::StateName(job.state());
  if (job.kind() != "elastic" && Terminal(job.state())) {
    std::cout << " (exit code " << job.exit_code() << ")";
  }
  if (!job.message().empty()) std::cout << ": " << job.message();
  std::cout << "\n";
  return job.state() == rpc::JOB_SUCCEEDED ? 0 : 1;
}

// Follows a driver job: its log on stdout, the progress line on stderr, until it ends.
int FollowDriver(gcs::GcsClient& gcs, const std::string& job_id, int64_t offset) {
  ProgressLine progress;
  std::atomic<bool> done{false};
  std::thread ticker([&] {
    while (!done) {
      auto job = gcs.GetJob(job_id);
      if (job.ok()) progress.Show(ProgressText(*job), ProgressKey(*job));
      for (int i = 0; i < 10 && !done; ++i) absl::SleepFor(absl::Milliseconds(100));
    }
  });
  absl::Status streamed = absl::OkStatus();
  // The stream ends when the job does; a GCS that stays away longer than the client's
  // patience ends it too, so go on until the job's record says it ended.
  for (int attempt = 0; attempt < 100; ++attempt) {
    streamed = gcs.JobLogs(job_id, offset, /*follow=*/true, [&](const rpc::JobLogsChunk& chunk) {
      progress.Above([&] { std::cout.write(chunk.data().data(), chunk.data().size()); });
      offset = chunk.offset() + static_cast<int64_t>(chunk.data().size());
      return true;
    });
    auto job = gcs.GetJob(job_id);
    if (job.ok() && Terminal(job->state())) break;
    if (!streamed.ok() && !absl::IsUnavailable(streamed)) break;
  }
  done = true;
  ticker.join();
  progress.Done();
  if (!streamed.ok() && !absl::IsUnavailable(streamed)) return Fail("logs", streamed);
  auto job = gcs.GetJob(job_id);
  if (!job.ok()) return Fail("status", job.status());
  return FinalLine(*job);
}

// Follows an elastic job: its conditions and events as they come, until it ends.
int FollowElastic(gcs::GcsClient& gcs, const std::string& job_id) {
  ProgressLine progress;
  int conditions = 0, events = 0;
  while (true) {
    auto job = gcs.GetJob(job_id);
    if (!job.ok()) {
      if (absl::IsUnavailable(job.status())) continue;  // a GCS restart: keep following
      return Fail("status", job.status());
    }
    progress.Above([&] {
      for (; conditions < job->conditions_size(); ++conditions) {
        const auto& c = job->conditions(conditions);
        std::cout << absl::StrFormat("[condition] %-10s %-16s %s\n", c.type(), c.reason(),
                                     c.message());
      }
      for (; events < job->events_size(); ++events) {
        const auto& e = job->events(events);
        std::cout << absl::StrFormat("[event]     %-14s %s (world size %d)\n", e.kind(),
                                     e.message(), e.world_size());
      }
    });
    progress.Show(ProgressText(*job), ProgressKey(*job));
    if (Terminal(job->state())) {
      progress.Done();
      std::cout << FormatStatus(ToStatus(*job), false) << "\n";
      return job->state() == rpc::JOB_SUCCEEDED ? 0 : 1;
    }
    absl::SleepFor(absl::Milliseconds(250));
  }
}

}  // namespace

int RunJobSubmit(const JobSubmitOptions& o) {
  rpc::SubmitJobRequest request;
  request.set_submission_id(o.submission_id);
  for (const auto& kv : o.env) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Fail("submit", absl::InvalidArgumentError(
                                absl::StrCat("--env '", kv, "': write it as NAME=VALUE")));
    }
    (*request.mutable_env())[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (!o.spec_file.empty()) {
    if (!o.entrypoint.empty()) {
      return Fail("submit", absl::InvalidArgumentError(
                                "give either -f JOB.yaml (an elastic job) or an entrypoint "
                                "after `--`, not both"));
    }
    auto yaml = ReadFileAtMost(o.spec_file, rpc::kMaxJobSpecBytes);
    if (!yaml.ok()) {
      return Fail("submit",
                  absl::InvalidArgumentError(absl::StrCat(
                      "-f ", o.spec_file, ": ", yaml.status().message(),
                      absl::IsOutOfRange(yaml.status())
                          ? absl::StrCat(" (a job spec is at most ", rpc::kMaxJobSpecBytes >> 10,
                                         " KiB: put large data in files the trainer "
                                         "reads)")
                          : "")));
    }
    // A request carries text as UTF-8 only: a bad byte is named here, with its line and field.
    if (size_t bad = FirstInvalidUtf8(*yaml); bad != absl::string_view::npos) {
      return Fail("submit",
                  absl::InvalidArgumentError(absl::StrCat("-f ", o.spec_file, ": not UTF-8 at ",
                                                          DescribeInvalidUtf8(*yaml, bad),
                                                          ": write the spec as UTF-8 text")));
    }
    // The GCS checks it (errors name the field); relative paths in it (codePath) are
    // relative to the spec file.
    request.set_kind("elastic");
    request.set_spec_yaml(*yaml);
    request.set_spec_dir(std::filesystem::absolute(o.spec_file).parent_path().string());
  } else {
    if (o.entrypoint.empty()) {
      return Fail("submit", absl::InvalidArgumentError(
                                "no entrypoint: put the command after `--`, e.g. `phalanx job "
                                "submit --working-dir . -- python3 train.py` (or -f JOB.yaml "
                                "for an elastic training job)"));
    }
    for (const auto& a : o.entrypoint) request.add_entrypoint(a);
  }
  auto gcs = Connect(o.cluster);
  if (!gcs.ok()) return Fail("submit", gcs.status());
  if (!o.working_dir.empty() && o.spec_file.empty()) {
    int64_t limit = 100ll << 20;
    if (const char* env = std::getenv("PHALANX_MAX_WORKING_DIR_MB"); env && *env) {
      limit = static_cast<int64_t>(std::atof(env) * (1 << 20));
    }
    if (auto s = UploadWorkingDir(**gcs, o.working_dir, limit, &request); !s.ok()) {
      return Fail("submit", s);
    }
  }
  auto job = (*gcs)->SubmitJob(request);
  if (!job.ok() && !o.spec_file.empty()) {
    // The spec's errors name its field: say which file it is in.
    return Fail("submit", absl::Status(job.status().code(),
                                       absl::StrCat(o.spec_file, ": ", job.status().message())));
  }
  if (!job.ok()) return Fail("submit", job.status());
  std::cout << "Job " << job->job_id() << " submitted"
            << (job->kind() == "elastic" ? " (elastic training job " + job->name() + ")" : "")
            << ".\n";
  if (o.no_wait) {
    std::cout << "  phalanx job status " << job->job_id() << "\n"
              << (job->kind() == "elastic" ? ""
                                           : "  phalanx job logs --follow " + job->job_id() + "\n")
              << "  phalanx job stop " << job->job_id() << "\n";
    return 0;
  }
  if (job->kind() == "elastic") return FollowElastic(**gcs, job->job_id());
  return FollowDriver(**gcs, job->job_id(), 0);
}

int RunJobLogs(const ClusterFlags& flags, const std::string& job_id, bool follow) {
  auto gcs = Connect(flags);
  if (!gcs.ok()) return Fail("logs", gcs.status());
  if (follow) {
    auto job = (*gcs)->GetJob(job_id);
    if (!job.ok()) return Fail("logs", job.status());
    // An elastic job's log is its ranks' output (phalanx.train), which may not have begun.
    return FollowDriver(**gcs, job_id, 0);
  }
  auto streamed = (*gcs)->JobLogs(job_id, 0, false, [](const rpc::JobLogsChunk& chunk) {
    std::cout.write(chunk.data().data(), chunk.data().size());
    return true;
  });
  std::cout << std::flush;
  if (!streamed.ok()) return Fail("logs", streamed);
  return 0;
}

int RunJobStop(const ClusterFlags& flags, const std::string& job_id, double grace_s, bool no_wait) {
  auto gcs = Connect(flags);
  if (!gcs.ok()) return Fail("stop", gcs.status());
  auto job = (*gcs)->StopJob(job_id, grace_s);
  if (!job.ok()) return Fail("stop", job.status());
  if (Terminal(job->state())) {
    std::cout << "Job " << job_id << " had already ended: " << rpc::StateName(job->state()) << "\n";
    return 0;
  }
  if (no_wait) {
    std::cout << "Asked job " << job_id << " to stop.\n";
    return 0;
  }
  absl::Time deadline = absl::Now() + absl::Seconds((grace_s > 0 ? grace_s : 10) + 30);
  while (absl::Now() < deadline) {
    auto fresh = (*gcs)->GetJob(job_id);
    if (fresh.ok() && Terminal(fresh->state())) {
      FinalLine(*fresh);
      return 0;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  std::cerr << "phalanx job stop: job " << job_id << " has not stopped yet; "
            << "`phalanx job status " << job_id << "` shows where it is\n";
  return 1;
}

}  // namespace phalanx::cli
