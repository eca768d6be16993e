#include "text/jinja/runtime.h"

#include "util/error.h"

namespace ernie::jinja {

namespace {

thread_local Runtime* current_runtime = nullptr;

// "10 s", "250 ms": how a limit reads in an error message.
std::string duration_text(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0) return str_cat(d.count() / 1000, " s");
  return str_cat(d.count(), " ms");
}

}  // namespace

Runtime::Runtime(const Limits& limits)
    : limits_(limits),
      deadline_(std::chrono::steady_clock::now() + limits.time_limit),
      previous_(current_runtime) {
  current_runtime = this;
}

Runtime::~Runtime() {
  current_runtime = previous_;
  release_namespaces();
}

Runtime* Runtime::current() { return current_runtime; }

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
    fail("template rendering exceeded its limit of ", limits_.max_steps,
         " steps (loop iterations, calls, visited items, and text built or scanned at ", kBytesPerStep,
         " bytes a step); expected a template that finishes in bounded work");
  }
  if (steps_ >= next_clock_check_) {
    next_clock_check_ = steps_ + kClockInterval;
    check_clock();
  }
}

void Runtime::check_clock() {
  if (limits_.time_limit.count() > 0 && std::chrono::steady_clock::now() > deadline_) {
    fail("template rendering exceeded its time limit of ", duration_text(limits_.time_limit));
  }
}

void Runtime::charge_bytes(size_t bytes) {
  pending_bytes_ += bytes;
  const size_t whole = pending_bytes_ / kBytesPerStep;
  pending_bytes_ %= kBytesPerStep;
  step(whole);
}

void Runtime::charge_shallow(const Value& v) {
  switch (v.type()) {
    case Value::Type::String: charge_bytes(v.as_string().size()); return;
    case Value::Type::List: step(v.as_list().items.size()); return;
    case Value::Type::Dict: step(v.as_dict().size()); return;
    case Value::Type::Iterator: step(v.as_iterator().items.size()); return;
    default: return;
  }
}

void Runtime::charge_call(const Value& input, const CallArgs& args) {
  step();
  charge_shallow(input);
  for (const Value& v : args.positional) charge_shallow(v);
  for (const auto& kv : args.keyword) charge_shallow(kv.second);
}

void Runtime::check_string(size_t bytes) const {
  if (bytes > limits_.max_string_bytes) {
    fail("template rendering built a string of ", bytes, " bytes, over the limit of ", limits_.max_string_bytes,
         " bytes on any one string");
  }
}

void Runtime::check_list(size_t items) const {
  if (items > limits_.max_list_items) {
    fail("template rendering built a list of ", items, " items, over the limit of ", limits_.max_list_items,
         " items on any one list or dict");
  }
}

void Runtime::check_output(size_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    fail("template output of ", bytes, " bytes is over the limit of ", limits_.max_output_bytes, " bytes");
  }
}

void charge_current_steps(uint64_t n) {
  if (Runtime* runtime = Runtime::current()) runtime->step(n);
}

void charge_current_bytes(size_t bytes) {
  if (Runtime* runtime = Runtime::current()) runtime->charge_bytes(bytes);
}

void check_current_string(size_t bytes) {
  if (const Runtime* runtime = Runtime::current()) runtime->check_string(bytes);
}

void check_current_list(size_t items) {
  if (const Runtime* runtime = Runtime::current()) runtime->check_list(items);
}

}  // namespace ernie::jinja
