// Render-wide state the builtins share with the interpreter: the resource budget that
// keeps a hostile or broken template (chat templates may come from HTTP clients) from
// exhausting the server, and the objects to release when the render ends.
//
// The budget is charged in proportion to the work done: each loop iteration, call or
// visited item is a step, and every byte of text that is built, copied, scanned or
// compared costs 1/kBytesPerStep of a step. Any single operation is bounded by the size
// caps, so checking the steps (and, every few thousand steps, the clock) between
// operations bounds the whole render.
#pragma once

#include <chrono>
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
  // The rendered text. A million-token prompt is a few MiB; 64 MiB is far past
  // anything legitimate.
  size_t max_output_bytes = size_t{64} << 20;
  // Any one string built while rendering (a {% set %} block, a macro's output, 'a' * n).
  size_t max_string_bytes = size_t{64} << 20;
  // Any one list, tuple, dict or iterator built while rendering (range(), repeats,
  // the characters of a string).
  size_t max_list_items = size_t{1} << 20;
  // Work over the whole render: loop iterations, calls and visited items are one step
  // each; text costs one step per kBytesPerStep bytes built, copied or scanned. A step
  // is about 60 ns of loop on a current x86 core, so the default is a few seconds of
  // work; real chat templates take thousands of steps.
  uint64_t max_steps = 50'000'000;
  // Wall-clock time for the whole render; zero means none.
  std::chrono::milliseconds time_limit{10'000};
  // Macro calls in progress at once: a recursive macro without a base case fails
  // here instead of overflowing the C++ stack.
  int max_call_depth = 100;
  // namespace() objects per render; they live until the render ends (see Runtime).
  size_t max_namespaces = 100000;
};

class Runtime {
 public:
  // Copying or scanning this many bytes costs about as much as one loop iteration.
  static constexpr size_t kBytesPerStep = 64;

  // Becomes the budget that charge_current() and friends charge on this thread, until
  // it is destroyed.
  explicit Runtime(const Limits& limits);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // The render in progress on this thread, or null. Printing, comparing and measuring
  // values are called from everywhere without a Runtime argument; they charge this one.
  static Runtime* current();

  const Limits& limits() const { return limits_; }
  // Spends `n` steps of the render budget; throws once it is exhausted or, checked
  // every kClockInterval steps, once the time limit has passed.
  void step(uint64_t n = 1);
  // Charges for building, copying or scanning `bytes` of text.
  void charge_bytes(size_t bytes);
  // Charges for a value a builtin received or returned: the bytes of a string, the
  // items of a container (not what they hold; whoever walks deeper charges that).
  void charge_shallow(const Value& v);
  // One step for calling a builtin, plus charge_shallow of everything it is given:
  // most builtins scan their string arguments once (length, lower, find, split, in).
  void charge_call(const Value& input, const CallArgs& args);
  // Throws when a string of `bytes` would exceed the cap.
  void check_string(size_t bytes) const;
  void check_list(size_t items) const;
  void check_output(size_t bytes) const;

  // Namespaces are the only values a template can mutate, so every reference cycle
  // (a namespace holding itself) and every unbounded chain of values (ns.x =
  // namespace(y=ns.x) in a loop) runs through them. The runtime keeps each one alive
  // until the render ends and then empties them all before dropping them, so cycles
  // are freed and no chain is ever destroyed recursively. Throws past the limit.
  void track_namespace(std::shared_ptr<Object> ns);
  void release_namespaces();

 private:
  static constexpr uint64_t kClockInterval = 1024;

  void check_clock();

  Limits limits_;
  uint64_t steps_ = 0;
  uint64_t next_clock_check_ = kClockInterval;
  size_t pending_bytes_ = 0;  // charged bytes not yet worth a whole step
  std::chrono::steady_clock::time_point deadline_;
  Runtime* previous_;  // the render this one interrupted on this thread (normally none)
  std::vector<std::shared_ptr<Object>> namespaces_;
};

// The same charges against the render in progress on this thread; no-ops outside one.
void charge_current_steps(uint64_t n);
void charge_current_bytes(size_t bytes);
void check_current_string(size_t bytes);
void check_current_list(size_t items);

}  // namespace ernie::jinja
