#include "text/jinja/runtime.h"

#include "util/error.h"

namespace ernie::jinja {

Runtime::~Runtime() { release_namespaces(); }

void Runtime::track_namespace(std::shared_ptr<Object> ns) {
  if (namespaces_.size() >= limits_.max_namespaces) {
    fail("template rendering created more than ", limits_.max_namespaces,
         " namespace() objects; expected a bounded number");
  }
  namespaces_.push_back(std::move(ns));
}

void Runtime::release_namespaces() {
  // Every namespace is still held here while it is emptied, so emptying one never
  // destroys another; afterwards each is destroyed on its own.
  for (const auto& ns : namespaces_) ns->release();
  namespaces_.clear();
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
