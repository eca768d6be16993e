// libFuzzer target for the Jinja engine, which renders chat templates that HTTP
// clients may send: any input either renders or fails with an ernie::Error, never a
// crash, hang, leak, stack overflow or undefined behaviour (ASan and UBSan watch).
//
// Input: the template, then a NUL byte, then a JSON object for the context (messages,
// tools, ...). Without a NUL, or with JSON that does not parse to an object, the
// template renders with a small default conversation. Small limits keep every run
// short, so libFuzzer's -timeout finds work the budget fails to charge.
#include <chrono>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "text/jinja/template.h"
#include "util/error.h"

namespace {

using nlohmann::ordered_json;

ordered_json default_context() {
  return ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "Be brief."},
                 {"role": "user", "content": "Hi <b>there</b>"},
                 {"role": "assistant", "content": "Hello!", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
}

ordered_json context_from(std::string_view json) {
  ordered_json context = ordered_json::parse(json, nullptr, /*allow_exceptions=*/false);
  return context.is_object() ? context : default_context();
}

ernie::jinja::Limits fuzz_limits() {
  ernie::jinja::Limits limits;
  limits.time_limit = std::chrono::milliseconds(100);
  limits.max_output_bytes = 1 << 20;
  limits.max_string_bytes = 1 << 20;
  limits.max_list_items = 1 << 16;
  limits.max_steps = 2'000'000;
  return limits;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view source = input.substr(0, nul);
  try {
    const ernie::jinja::Template parsed = ernie::jinja::Template::parse(source);
    const ordered_json context = nul == std::string_view::npos ? default_context() : context_from(input.substr(nul + 1));
    parsed.render(context, fuzz_limits());
  } catch (const ernie::Error&) {
    // Refusing a bad template, or one over its budget, is the expected outcome.
  }
  return 0;
}
