// Render-wide state the builtins share with the interpreter: the resource caps that
// keep a hostile or broken template from exhausting the server, and the objects to
// release when the render ends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "text/jinja/value.h"
#include "util/error.h"

namespace ernie::jinja {

// A render error whose message already starts with its template position
// ("line L, column C: ..."), so enclosing nodes pass it on unchanged.
class LocatedError : public Error {
 public:
  using Error::Error;
};

struct Limits {
  // Any string built while rendering, the output included. A million-token prompt is
  // a few MiB; 64 MiB is far past anything legitimate.
  size_t max_string_bytes = size_t{64} << 20;
  // Any list built while rendering.
  size_t max_list_items = size_t{1} << 20;
  // Loop iterations, macro calls and items visited by filters, over the whole render;
  // building strings costs one step per 4 KiB, so copying text counts as work too.
  uint64_t max_steps = 50'000'000;
  // Macro calls in progress at once: a recursive macro without a base case fails
  // here instead of overflowing the C++ stack.
  int max_call_depth = 100;
  // namespace() objects per render; they live until the render ends (see Runtime).
  size_t max_namespaces = 100000;
};

class Runtime {
 public:
  explicit Runtime(const Limits& limits) : limits_(limits) {}
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const Limits& limits() const { return limits_; }
  // Spends `n` steps of the render budget; throws once it is exhausted.
  void step(uint64_t n = 1);
  // Charges for copying `bytes` of text (one step per 4 KiB).
  void charge_bytes(size_t bytes) { step(bytes >> 12); }
  // Throws when a string of `bytes` would exceed the cap.
  void check_string(size_t bytes) const;
  void check_list(size_t items) const;

  // Namespaces are the only values a template can mutate, so every reference cycle
  // (a namespace holding itself) and every unbounded chain of values (ns.x =
  // namespace(y=ns.x) in a loop) runs through them. The runtime keeps each one alive
  // until the render ends and then empties them all before dropping them, so cycles
  // are freed and no chain is ever destroyed recursively. Throws past the limit.
  void track_namespace(std::shared_ptr<Object> ns);
  void release_namespaces();

 private:
  Limits limits_;
  uint64_t steps_ = 0;
  std::vector<std::shared_ptr<Object>> namespaces_;
};

}  // namespace ernie::jinja
