// phalanx-job-runner: supervises one job's driver on the head (see gcs/job_manager.h).
//
//   phalanx-job-runner --job-id ID --job-dir DIR --session-dir S -- COMMAND ARGS...
//
// Started by the job manager in a session of its own, with PHALANX_ADDRESS, PHALANX_TOKEN and
// PHALANX_JOB_ID set. It runs COMMAND in its process group with stdout and stderr going to
// DIR/driver.log, reports the start to the GCS, and on SIGTERM (`phalanx job stop`) passes
// SIGTERM to the driver's process group, then SIGKILL after the grace period (DIR/stop_grace,
// default 10 s). When the driver ends it kills what is left of its process group, writes
// DIR/result and reports the result, retrying for up to 10 minutes while the GCS is away.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/files.h"
#include "base/mutex_check.h"
#include "base/process.h"
#include "base/system.h"
#include "base/tls.h"
#include "client/gcs_client.h"

namespace {

using phalanx::gcs::GcsClient;

void AppendLog(const std::string& path, const std::string& line) {
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return;
  ssize_t ignored = ::write(fd, line.data(), line.size());
  (void)ignored;
  ::close(fd);
}

// Sends `report`, retrying while the GCS is unreachable (restarting) for up to `patience`.
void Report(const std::string& address, const std::string& token,
            const phalanx::rpc::ReportJobRequest& report, absl::Duration patience) {
  absl::Time give_up = absl::Now() + patience;
  std::unique_ptr<GcsClient> gcs;
  while (absl::Now() < give_up) {
    if (!gcs) {
      auto client = GcsClient::Connect({address, token, absl::Seconds(20)}, absl::Seconds(5));
      if (client.ok()) gcs = std::move(*client);
    }
    if (gcs) {
      absl::Status s = gcs->ReportJob(report);
      // A GCS that is restarting (or too busy to answer in time) is asked again.
      if (s.ok() || !(absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s))) {
        if (!s.ok()) std::fprintf(stderr, "report: %s\n", std::string(s.message()).c_str());
        return;
      }
    }
    absl::SleepFor(absl::Milliseconds(500));
  }
  std::fprintf(stderr, "gave up reporting to the GCS at %s\n", address.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  phalanx::ConfigureMutexDeadlockCheck();
  CLI::App app{"phalanx-job-runner: supervises one job's driver"};
  std::string job_id, job_dir, session_dir;
  std::vector<std::string> command;
  app.add_option("--job-id", job_id)->required();
  app.add_option("--job-dir", job_dir)->required();
  app.add_option("--session-dir", session_dir);
  app.add_option("command", command)->required();
  app.allow_extras(false);
  CLI11_PARSE(app, argc, argv);

  const char* address_env = std::getenv("PHALANX_ADDRESS");
  const char* token_env = std::getenv("PHALANX_TOKEN");
  std::string address = address_env ? address_env : "";
  std::string token = token_env ? token_env : "";
  std::string log = job_dir + "/driver.log";
  const char* tls_env = std::getenv("PHALANX_TLS_DIR");
  if (absl::Status tls = phalanx::rpc::UseTls(tls_env ? tls_env : ""); !tls.ok()) {
    AppendLog(log,
              absl::StrCat("phalanx: the runner cannot report to the GCS: ", tls.message(), "\n"));
  }

  // Signals arrive through sigtimedwait only (every thread inherits the mask).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  sigaddset(&signals, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  phalanx::SpawnOptions spawn;
  spawn.argv = command;
  spawn.stdout_path = log;
  spawn.new_session = true;      // its own process group: a stop reaches all of it
  spawn.die_with_parent = true;  // a runner that dies takes its driver along
  auto pid = phalanx::Spawn(spawn);
  int exit_code = 0, signal = 0;
  bool stopped = false;
  std::string message;
  int64_t start_ms = phalanx::NowMs();
  if (!pid.ok()) {
    message =
        absl::StrCat("cannot run `", absl::StrJoin(command, " "), "`: ", pid.status().message());
    AppendLog(log, absl::StrCat("phalanx: ", message, "\n"));
    exit_code = 127;
  } else {
    // Report the start off the main thread: a stop must not wait for a restarting GCS.
    std::thread started([job_id, address, token, start_ms, driver = *pid] {
      phalanx::rpc::ReportJobRequest report;
      report.set_job_id(job_id);
      report.set_driver_pid(driver);
      report.set_time_ms(start_ms);
      Report(address, token, report, absl::Minutes(10));
    });
    started.detach();
    absl::Time kill_at = absl::InfiniteFuture();
    while (true) {
      int status = 0;
      pid_t done = ::waitpid(*pid, &status, WNOHANG);
      if (done == *pid) {
        if (WIFEXITED(status)) {
          exit_code = WEXITSTATUS(status);
        } else if (WIFSIGNALED(status)) {
          signal = WTERMSIG(status);
          exit_code = 128 + signal;
        }
        break;
      }
      if (absl::Now() >= kill_at) {
        ::kill(-*pid, SIGKILL);
        kill_at = absl::InfiniteFuture();
      }
      timespec timeout{0, 200'000'000};
      int sig = sigtimedwait(&signals, nullptr, &timeout);
      if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP) {
        if (!stopped) {
          stopped = true;
          double grace_s = 10;
          if (auto text = phalanx::ReadFile(job_dir + "/stop_grace"); text.ok()) {
            (void)absl::SimpleAtod(absl::StripAsciiWhitespace(*text), &grace_s);
          }
          AppendLog(log, absl::StrCat("phalanx: stopping the job: SIGTERM, then SIGKILL after ",
                                      grace_s, " s\n"));
          ::kill(-*pid, SIGTERM);
          kill_at = absl::Now() + absl::Seconds(grace_s);
        } else {
          ::kill(-*pid, SIGKILL);  // a second stop: at once
        }
      }
    }
    // Whatever the driver left in its process group goes with it.
    ::kill(-*pid, SIGKILL);
  }
  phalanx::WriteFile(job_dir + "/result",
                     absl::StrCat(exit_code, " ", signal, " ", stopped ? 1 : 0, "\n"))
      .IgnoreError();
  phalanx::rpc::ReportJobRequest report;
  report.set_job_id(job_id);
  report.set_finished(true);
  report.set_exit_code(exit_code);
  report.set_signal(signal);
  report.set_stopped(stopped);
  report.set_message(message);
  report.set_time_ms(phalanx::NowMs());
  Report(address, token, report, absl::Minutes(10));
  return 0;
}
