// A read-only memory mapping of a whole file. Checkpoint tensors are served straight
// from the mapping (zero-copy); the page cache keeps them shared between processes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace ernie {

class MappedFile {
 public:
  // Maps `path` read-only; throws ernie::Error naming the path and the OS reason.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ernie
