// replay_main.cpp — a main() for the fuzz targets without libFuzzer: runs LLVMFuzzerTestOneInput
// once on every file named on the command line (directories: every file inside, recursively).
// The normal build (g++, and the ASan/UBSan build of .ci/sanitizers.sh) uses it to replay the
// committed corpus as ordinary ctest tests, so a fixed crash stays fixed without clang.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

namespace {

void run_file(const std::filesystem::path &p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
}

}  // namespace

int main(int argc, char **argv) {
  size_t files = 0;
  for (int i = 1; i < argc; ++i) {
    std::filesystem::path arg(argv[i]);
    if (std::filesystem::is_directory(arg)) {
      for (const auto &e : std::filesystem::recursive_directory_iterator(arg))
        if (e.is_regular_file()) run_file(e.path()), ++files;
    } else {
      run_file(arg);
      ++files;
    }
  }
  std::printf("replayed %zu inputs\n", files);
  return files > 0 ? 0 : 1;
}
