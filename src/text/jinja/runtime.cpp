#include "text/jinja/runtime.h"

#include "util/error.h"

namespace ernie::jinja {

Runtime::~Runtime() {
  for (const auto& weak : tracked_) {
    if (auto object = weak.lock()) object->release();
  }
}

void Runtime::step(uint64_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps) {
    fail("template rendering took more than ", limits_.max_steps,
         " steps (loop iterations, macro calls, filtered items); expected a template that finishes in bounded work");
  }
}

void Runtime::check_string(size_t bytes) const {
  if (bytes > limits_.max_string_bytes) {
    fail("template rendering produced a string of ", bytes, " bytes, over the limit of ", limits_.max_string_bytes,
         " bytes");
  }
}

void Runtime::check_list(size_t items) const {
  if (items > limits_.max_list_items) {
    fail("template rendering produced a list of ", items, " items, over the limit of ", limits_.max_list_items);
  }
}

}  // namespace ernie::jinja
