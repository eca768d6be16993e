// The resource budget of a render (jinja::Limits): templates can come from HTTP
// clients, so every way to spend time, memory or stack must end in an ernie::Error that
// names the limit, quickly, and never in a crash. Each case here used to run for
// minutes, exhaust memory or overflow the stack.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "text/chat_template.h"
#include "text/jinja/template.h"
#include "util/error.h"

namespace ernie::jinja {
namespace {

using nlohmann::ordered_json;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

struct Outcome {
  std::string error;  // empty when the render succeeded
  double seconds = 0;
};

Outcome run(std::string_view source, const Limits& limits = Limits{}, const ordered_json& context = ordered_json::object()) {
  const auto start = Clock::now();
  Outcome outcome;
  try {
    Template::parse(source).render(context, limits);
  } catch (const Error& e) {
    outcome.error = e.what();
  }
  outcome.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return outcome;
}

// The reported defect: a 60 MB string read 100000 times. Strings are shared, so the
// reads copy nothing, but each |length scans 60 MB.
TEST(JinjaBudget, RepeatedWorkOnAHugeStringFailsFast) {
  const Outcome o = run("{% set s = 'a' * 60000000 %}{% for i in range(100000) %}{{ s|length }}{% endfor %}");
  EXPECT_THAT(o.error, HasSubstr("exceeded its limit of 50000000 steps"));
  EXPECT_LT(o.seconds, 2.0);
}

TEST(JinjaBudget, EveryKindOfTextWorkIsCharged) {
  Limits limits;
  limits.max_steps = 1'000'000;  // 64 MB of text
  const char* sources[] = {
      "{% set s = 'a' * 1000000 %}{% for i in range(1000) %}{% if s == s ~ '' %}{% endif %}{% endfor %}",
      "{% set s = 'a' * 1000000 %}{% for i in range(1000) %}{% if 'b' in s %}{% endif %}{% endfor %}",
      "{% set s = 'a' * 1000000 %}{% for i in range(1000) %}{% set t = s.upper() %}{% endfor %}",
      "{% set s = 'a' * 1000000 %}{% for i in range(1000) %}{% set t = s.split('b') %}{% endfor %}",
      "{% set s = 'a' * 1000000 %}{% for i in range(1000) %}{% set t = s < s %}{% endfor %}",
      "{% for i in range(1000) %}{% set t = ''.center(1000000) %}{% endfor %}",
      "{% for i in range(1000) %}{% set t = '%s' % ('a' * 1000000) %}{% endfor %}",
      "{% set l = ['a' * 1000000] %}{% for i in range(1000) %}{% set t = l|join %}{% endfor %}",
      "{% set l = ['a' * 1000000] %}{% for i in range(1000) %}{% set t = l|tojson %}{% endfor %}",
      "{% set l = ['a'] * 1000000 %}{% for i in range(1000) %}{% set t = l|length %}{% endfor %}",
      "{% set s = 'a' * 1000000 %}{% for i in range(1000) %}{% set t = s[::-1] %}{% endfor %}",
  };
  for (const char* source : sources) {
    const Outcome o = run(source, limits);
    EXPECT_THAT(o.error, HasSubstr("steps")) << source;
    EXPECT_LT(o.seconds, 2.0) << source;
  }
}

TEST(JinjaBudget, TimeLimit) {
  Limits limits;
  limits.time_limit = std::chrono::milliseconds(50);
  const char* endless = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
  const Outcome o = run(endless, limits);
  EXPECT_THAT(o.error, HasSubstr("exceeded its time limit of 50 ms"));
  EXPECT_LT(o.seconds, 1.0);
  limits.time_limit = std::chrono::seconds(2);
  limits.max_steps = uint64_t{1} << 60;
  EXPECT_THAT(run(endless, limits).error, HasSubstr("exceeded its time limit of 2 s"));
}

TEST(JinjaBudget, OutputLimit) {
  Limits limits;
  limits.max_output_bytes = 1000;
  EXPECT_THAT(run("{% for i in range(201) %}hello{% endfor %}", limits).error,
              HasSubstr("template output of 1005 bytes is over the limit of 1000 bytes"));
  // A string may be bigger than the output cap as long as it is not printed.
  EXPECT_EQ(run("{% set s = 'x' * 5000 %}{{ s|length }}", limits).error, "");
}

// A list holding one sublist twice is built in one step and prints twice as long:
// 60 doublings would print 2^60 characters.
TEST(JinjaBudget, SharedSublistsCannotPrintExponentially) {
  const std::string doubled =
      "{% set ns = namespace(a=['xxxxxxxx']) %}{% for i in range(60) %}{% set ns.a = [ns.a, ns.a] %}{% endfor %}";
  Limits limits;
  limits.max_string_bytes = 1 << 20;
  for (const char* use : {"{{ ns.a }}", "{{ ns.a|tojson }}", "{{ ns.a|string|length }}", "{{ ns.a ~ '' }}"}) {
    const Outcome o = run(doubled + use, limits);
    EXPECT_THAT(o.error, HasSubstr("over the limit of 1048576 bytes on any one string")) << use;
    EXPECT_LT(o.seconds, 2.0) << use;
  }
  limits = Limits{};
  limits.max_steps = 1'000'000;
  EXPECT_THAT(run(doubled + "{{ ns.a == ns.a }}", limits).error, HasSubstr("steps"));
}

TEST(JinjaBudget, IteratingAHugeStringIsCappedBeforeAllocating) {
  EXPECT_THAT(run("{% for c in 'a' * 60000000 %}{% endfor %}").error,
              HasSubstr("list of 60000000 items, over the limit of 1048576"));
  EXPECT_THAT(run("{{ ('a' * 60000000)|list|length }}").error, HasSubstr("over the limit of 1048576"));
}

// string_view::find compares the whole needle at every position; these searches
// would take about 10^12 compares.
TEST(JinjaBudget, SubstringSearchIsLinear) {
  const std::string setup = "{% set hay = 'a' * 2000000 %}{% set needle = 'a' * 1000000 ~ 'b' %}";
  for (const char* use : {"{{ needle in hay }}", "{{ hay.find(needle) }}", "{{ hay.rfind(needle) }}",
                          "{{ hay.count(needle) }}", "{{ hay.split(needle)|length }}", "{{ hay.rsplit(needle)|length }}",
                          "{{ hay.replace(needle, '')|length }}", "{{ hay.partition(needle)|length }}",
                          "{{ hay.rpartition(needle)|length }}", "{{ hay.strip(needle)|length }}"}) {
    const Outcome o = run(setup + use);
    EXPECT_EQ(o.error, "") << use;
    EXPECT_LT(o.seconds, 2.0) << use;
  }
  EXPECT_EQ(Template::parse(setup + "{{ hay.find(needle) }} {{ (hay ~ 'b').find(needle) }} {{ (hay ~ 'b').rfind(needle) }}")
                .render(ordered_json::object()),
            "-1 1000000 1000000");
}

TEST(JinjaBudget, LongChainsAreRefusedNotAStackOverflow) {
  auto chain = [](const std::string& first, const std::string& link, int n) {
    std::string s = "{{ " + first;
    for (int i = 0; i < n; ++i) s += link;
    return s + " }}";
  };
  const std::string sources[] = {
      chain("1", " + 1", 100000),      chain("1", " * 1", 100000),   chain("1", " ** 1", 100000),
      chain("x", " or x", 100000),     chain("x", " and x", 100000), chain("x", ".y", 100000),
      chain("x", "[0]", 100000),       chain("x", "|e", 100000),     chain("x", "()", 100000),
      chain("x", " if x else x", 100000),
      "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}",
      "{{ " + std::string(100000, '[') + std::string(100000, ']') + " }}",
      chain("", "not ", 100000) + "",
  };
  for (const std::string& source : sources) {
    EXPECT_THAT(run(source).error, HasSubstr("nests more than")) << source.substr(0, 40);
  }
  std::string blocks;
  for (int i = 0; i < 100000; ++i) blocks += "{% if true %}{% for x in y %}";
  EXPECT_THAT(run(blocks).error, HasSubstr("nests more than"));
  // What real templates write still parses: a chain of 50 links inside 20 blocks.
  std::string nested;
  for (int i = 0; i < 20; ++i) nested += "{% if true %}";
  nested += chain("1", " + 1", 50);
  for (int i = 0; i < 20; ++i) nested += "{% endif %}";
  EXPECT_EQ(run(nested).error, "");
}

TEST(JinjaBudget, DeepRecursionAndDeepData) {
  EXPECT_THAT(run("{% macro r(k) %}{{ r(k + 1) }}{% endmacro %}{{ r(0) }}").error, HasSubstr("nested more than"));
  EXPECT_THAT(run("{% for x in [[1]] recursive %}{{ loop([[x]]) }}{% endfor %}").error, HasSubstr("nested more than"));
  ordered_json deep = ordered_json::array();
  for (int i = 0; i < 2000; ++i) deep = ordered_json::array({deep});
  EXPECT_THAT(run("{{ x|tojson }}", Limits{}, {{"x", deep}}).error, HasSubstr("levels deep"));
}

// A JSON object with many keys converts in linear time (it used to search the keys
// converted so far for each new one).
TEST(JinjaBudget, BigJsonObjectsConvertInLinearTime) {
  // nlohmann's ordered_json searches its keys on every insert too, so the test fills
  // the object's underlying vector directly.
  ordered_json big = ordered_json::object();
  auto& entries = static_cast<std::vector<std::pair<const std::string, ordered_json>>&>(
      big.get_ref<ordered_json::object_t&>());
  for (int i = 0; i < 200000; ++i) entries.emplace_back(std::to_string(i), i);
  const Outcome o = run("{{ x|length }}", Limits{}, {{"x", big}});
  EXPECT_EQ(o.error, "");
  EXPECT_LT(o.seconds, 2.0);
}

TEST(ChatTemplateBudget, LimitsReachTheRender) {
  const ChatTemplate chat("{% for i in range(100000) %}{% for m in messages %}{{ m.content }}{% endfor %}{% endfor %}",
                          {});
  ChatTemplateInputs inputs;
  inputs.messages = ordered_json::parse(R"([{"role": "user", "content": "hello"}])");
  ChatTemplateLimits limits;
  limits.time_limit = std::chrono::milliseconds(20);
  try {
    chat.render(inputs, limits);
    ADD_FAILURE() << "expected a time limit error";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("chat template error"));
    EXPECT_THAT(std::string(e.what()), HasSubstr("exceeded its time limit of 20 ms"));
  }
  limits = ChatTemplateLimits{};
  limits.max_output_bytes = 100;
  EXPECT_THROW(chat.render(inputs, limits), Error);
}

}  // namespace
}  // namespace ernie::jinja
