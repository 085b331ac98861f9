#include "base/ids.h"

#include <sys/random.h>

#include <cstdint>
#include <random>
#include <vector>

namespace phalanx {

std::string RandomHex(int bytes) {
  std::vector<uint8_t> buf(bytes);
  size_t got = 0;
  while (got < buf.size()) {
    ssize_t n = getrandom(buf.data() + got, buf.size() - got, 0);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  if (got < buf.size()) {  // getrandom is unavailable: fall back to random_device
    std::random_device rd;
    for (size_t i = got; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(rd());
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * buf.size());
  for (uint8_t b : buf) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

}  // namespace phalanx
