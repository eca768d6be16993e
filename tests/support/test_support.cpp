#include "support/test_support.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/safetensors.h"
#include "util/error.h"

namespace ernie::testing {

std::string shared_dir() { return ERNIE_SHARED_DIR; }
std::string golden_model_dir(const std::string& name) { return shared_dir() + "/golden/models/" + name; }
std::string ernie_binary() { return ERNIE_BINARY; }
std::string python3() { return ERNIE_PYTHON3; }

std::vector<int32_t> synthetic_token_ids(int seed, int length) {
  std::vector<int32_t> ids;
  for (int i = 0; i < length; ++i) ids.push_back(3 + (seed * 7919 + i * 104729) % 4000);
  return ids;
}

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/ernie-test-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) fail("mkdtemp failed for ", pattern);
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

CommandResult run_shell(const std::string& command, bool include_stderr) {
  CommandResult result;
  FILE* pipe = popen((command + (include_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  if (pipe == nullptr) fail("popen failed for ", command);
  char buffer[4096];
  size_t got;
  while ((got = fread(buffer, 1, sizeof buffer, pipe)) > 0) result.output.append(buffer, got);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string error_message(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  return "(no error)";
}

std::string read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) fail("cannot read ", path);
  std::stringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

void write_file(const std::string& path, const std::string& contents) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) fail("cannot write ", path);
  file << contents;
}

void write_raw_file(const std::string& path, const void* data, size_t bytes) {
  write_file(path, std::string(static_cast<const char*>(data), bytes));
}

std::vector<float> read_f32_file(const std::string& path) {
  const std::string bytes = read_file(path);
  std::vector<float> values(bytes.size() / sizeof(float));
  std::copy_n(bytes.data(), values.size() * sizeof(float), reinterpret_cast<char*>(values.data()));
  return values;
}

std::vector<uint8_t> read_bytes_file(const std::string& path) {
  const std::string bytes = read_file(path);
  return {bytes.begin(), bytes.end()};
}

std::string make_checkpoint(const TempDir& parent, const std::string& name, const SyntheticModelSpec& spec,
                            CheckpointLayout layout, int shards) {
  const std::string dir = parent.file(name);
  std::filesystem::create_directories(dir);
  write_synthetic_checkpoint(dir, spec, layout, shards);
  return dir;
}

std::vector<TensorToWrite> read_all_tensors(const std::string& safetensors_path) {
  const SafetensorsFile file(safetensors_path);
  std::vector<TensorToWrite> tensors;
  for (const TensorInfo& info : file.header().tensors)
    tensors.push_back({info.name, info.dtype, info.shape,
                       std::vector<uint8_t>(file.data(info), file.data(info) + info.size)});
  return tensors;
}

namespace {

std::vector<double> log_softmax(const float* logits, int64_t v) {
  double m = -INFINITY;
  for (int64_t i = 0; i < v; ++i) m = std::max(m, static_cast<double>(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < v; ++i) sum += std::exp(logits[i] - m);
  std::vector<double> out(static_cast<size_t>(v));
  for (int64_t i = 0; i < v; ++i) out[static_cast<size_t>(i)] = logits[i] - m - std::log(sum);
  return out;
}

}  // namespace

double max_abs_difference(std::span<const float> ours, std::span<const float> theirs) {
  EXPECT_EQ(ours.size(), theirs.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(ours.size(), theirs.size()); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(ours[i]) - theirs[i]));
  return worst;
}

Divergence compare_logits(const std::vector<float>& reference, const std::vector<float>& other, int64_t v) {
  Divergence d;
  const int64_t rows = static_cast<int64_t>(reference.size()) / v;
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<double> p = log_softmax(reference.data() + r * v, v), q = log_softmax(other.data() + r * v, v);
    double kl = 0;
    for (int64_t i = 0; i < v; ++i) kl += std::exp(p[static_cast<size_t>(i)]) * (p[static_cast<size_t>(i)] - q[static_cast<size_t>(i)]);
    d.mean_kl += kl / static_cast<double>(rows);
    d.max_kl = std::max(d.max_kl, kl);
    const auto argmax = [&](const float* row) { return std::max_element(row, row + v) - row; };
    d.top1_agree += argmax(reference.data() + r * v) == argmax(other.data() + r * v) ? 1.0 / static_cast<double>(rows) : 0.0;
  }
  return d;
}

}  // namespace ernie::testing
