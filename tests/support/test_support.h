// Shared helpers for the test suites: where the golden data lives, temporary
// directories, running the `ernie` binary, and small file utilities.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/safetensors_writer.h"
#include "model/synthetic_checkpoint.h"

namespace ernie::testing {

// ../shared beside the checkout: golden/ and tools/.
std::string shared_dir();
std::string golden_model_dir(const std::string& name);  // shared/golden/models/NAME
std::string ernie_binary();
std::string python3();

// `length` token ids spread over 3..4002 (inside every golden vocabulary), different for
// each `seed`: prompts for tests that only need distinct sequences.
std::vector<int32_t> synthetic_token_ids(int seed, int length);

// A fresh directory under $TMPDIR, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout, and stderr too unless dropped
};
// Runs `command` through /bin/sh and captures its output.
CommandResult run_shell(const std::string& command, bool include_stderr = true);
// Quotes an argument for /bin/sh.
std::string shell_quote(const std::string& text);

std::string read_file(const std::string& path);

// The message of the ernie::Error that `action` throws, or "(no error)".
std::string error_message(const std::function<void()>& action);
void write_file(const std::string& path, const std::string& contents);
// Raw little-endian bytes, as the numpy references in tools/ read their inputs.
void write_raw_file(const std::string& path, const void* data, size_t bytes);
template <typename T>
void write_raw_file(const std::string& path, const std::vector<T>& values) {
  write_raw_file(path, values.data(), values.size() * sizeof(T));
}
std::vector<float> read_f32_file(const std::string& path);
std::vector<uint8_t> read_bytes_file(const std::string& path);

// How far one set of logits rows ([rows, v], row-major) is from a reference set.
struct Divergence {
  double mean_kl = 0;     // KL(p_reference || p_other), nats, mean over rows
  double max_kl = 0;
  double top1_agree = 0;  // share of rows with the same argmax
};
Divergence compare_logits(const std::vector<float>& reference, const std::vector<float>& other, int64_t v);

// The largest |ours[i] - theirs[i]|; different sizes fail the test.
double max_abs_difference(std::span<const float> ours, std::span<const float> theirs);

// Writes a synthetic checkpoint (weights only) into a new subdirectory of `parent`.
std::string make_checkpoint(const TempDir& parent, const std::string& name, const SyntheticModelSpec& spec,
                            CheckpointLayout layout, int shards = 1);

// Every tensor of one safetensors file, for tests that rewrite a checkpoint with a
// defect (a tensor removed, reshaped or added).
std::vector<TensorToWrite> read_all_tensors(const std::string& safetensors_path);

}  // namespace ernie::testing
