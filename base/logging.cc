#include "base/logging.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>

#include "spdlog/sinks/basic_file_sink.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace phalanx {

void InitLogging(const std::string& component, const std::string& log_file) {
  std::shared_ptr<spdlog::logger> logger;
  if (log_file.empty()) {
    logger = std::make_shared<spdlog::logger>(component,
                                              std::make_shared<spdlog::sinks::stderr_sink_mt>());
  } else {
    // Private whatever the umask: a log may name the cluster's secrets' paths and its jobs.
    int fd = ::open(log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) {
      ::fchmod(fd, 0600);
      ::close(fd);
    }
    logger = std::make_shared<spdlog::logger>(
        component, std::make_shared<spdlog::sinks::basic_file_sink_mt>(log_file, false));
  }
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n %P] [%l] %v");
  const char* level = std::getenv("PHALANX_LOG_LEVEL");
  logger->set_level(level ? spdlog::level::from_str(level) : spdlog::level::info);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

}  // namespace phalanx
