// libphalanx.so is the runtime's static libraries linked whole (sdk/CMakeLists.txt); this
// file only gives the target a source of its own.
namespace phalanx::sdk {
extern const char kSdkVersion[];
const char kSdkVersion[] = "phalanx " PHALANX_VERSION;
}  // namespace phalanx::sdk
