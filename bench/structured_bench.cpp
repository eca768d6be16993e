// Time to compute one step's allowed-token mask for a grammar constraint, at ERNIE's
// vocabulary size (103,424 tokens). The vocabulary is synthetic: byte strings with the
// length mix of a SentencePiece vocabulary (mostly 2-8 bytes, a leading space on many,
// some multi-byte UTF-8), so the trie has the shape a real one has.
//   BM_JsonMask/<state>: one mask with nothing cached, for any JSON value after a prefix
//     that leaves the state named: 0 between values (few tokens fit), 1 inside a string
//     (nearly every token fits), 2 inside a number. Parsing the prefix is included.
//   BM_JsonGeneration: 300 constrained steps taking random allowed tokens; the mask
//     time per step (p50, p99), caches warming as a real request's would.
//   BM_SchemaGeneration/<0|1>: the mask time per step (p50, p99) along random
//     generations of a function-calling schema, cold (0) and with the states of earlier
//     requests cached (1).
//   BM_CompileToolSchema: that schema compiled to a ready matcher.
// Run: build/bench/structured_bench
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "structured/json_schema.h"
#include "structured/matcher.h"
#include "structured/token_mask.h"

namespace ernie::structured {
namespace {



std::vector<std::string> synthetic_vocab(size_t size) {
  std::mt19937 random(11);
  const std::string letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,:;\"'{}[]()-_/\\ ";
  std::vector<std::string> vocab(size);
  for (size_t id = 1; id < size; ++id) {
    std::string token = random() % 2 ? " " : "";
    const int length = 1 + static_cast<int>(random() % 8);
    for (int i = 0; i < length; ++i) {
      if (random() % 20 == 0) token += "\xe4\xb8\xad";  // a CJK character
      else token += letters[random() % letters.size()];
    }
    vocab[id] = token;
  }
  return vocab;
}

const std::vector<std::string>& vocab() {
  static const std::vector<std::string> instance = synthetic_vocab(103424);
  return instance;
}
const TokenTrie& trie() {
  static const TokenTrie instance(vocab(), {0});
  return instance;
}
// Any JSON value (the schema `true`).
const Grammar& json_grammar() {
  static const Grammar instance = compile_json_schema(nlohmann::ordered_json(true));
  return instance;
}

// One mask with a fresh matcher (nothing cached: the first time a state is met).
void BM_JsonMask(benchmark::State& state) {
  const char* prefixes[] = {"{\"name\": \"x\", ", "{\"name\": \"some te", "{\"count\": 12"};
  std::vector<uint32_t> mask;
  for (auto _ : state) {
    GrammarMatcher matcher(json_grammar());
    const MatchState at = matcher.step(matcher.start(), prefixes[state.range(0)]);
    trie().allowed(matcher, at, mask);
    benchmark::DoNotOptimize(mask.data());
  }
  const TokenTrie& trie = ernie::structured::trie();
  size_t allowed = 0;
  for (uint32_t word : mask) allowed += static_cast<size_t>(__builtin_popcount(word));
  state.counters["allowed"] = static_cast<double>(allowed);
  state.counters["trie_nodes"] = static_cast<double>(trie.node_count());
}
BENCHMARK(BM_JsonMask)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);

// A whole constrained generation: 300 steps, each computing the mask and taking a
// random allowed token (a fixed seed), as a decode loop would; the per-step mask time's
// median and 99th percentile over all steps of all iterations.
void BM_JsonGeneration(benchmark::State& state) {
  std::vector<double> times;
  std::vector<uint32_t> mask;
  std::mt19937 random(5);
  for (auto _ : state) {
    GrammarMatcher matcher(json_grammar());
    MatchState current = matcher.start();
    for (int step = 0; step < 300; ++step) {
      const auto begin = std::chrono::steady_clock::now();
      trie().allowed(matcher, current, mask);
      times.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - begin).count());
      std::vector<int32_t> allowed;
      for (size_t id = 1; id < vocab().size(); ++id)
        if ((mask[id >> 5] >> (id & 31)) & 1u) allowed.push_back(static_cast<int32_t>(id));
      if (allowed.empty()) break;
      current = matcher.step(current, vocab()[static_cast<size_t>(allowed[random() % allowed.size()])]);
    }
  }
  std::sort(times.begin(), times.end());
  state.counters["p50_us"] = times[times.size() / 2];
  state.counters["p99_us"] = times[times.size() * 99 / 100];
  state.counters["steps"] = static_cast<double>(times.size());
}
BENCHMARK(BM_JsonGeneration)->Unit(benchmark::kMillisecond)->Iterations(3);

const nlohmann::ordered_json& tool_schema();

// Mask time per step along random constrained generations of the tool-call schema
// below (nested object, patterns, a date, an enum, an array, a string of up to 200
// characters): range 0 with a fresh matcher per generation (a server's first request
// with this schema: every state is met for the first time), range 1 with one matcher
// for all (the requests after it, whose states were met before).
void BM_SchemaGeneration(benchmark::State& state) {
  const Grammar grammar = compile_json_schema(tool_schema());
  std::vector<double> times;
  std::vector<uint32_t> mask;
  std::mt19937 random(9);
  GrammarMatcher shared(grammar);
  for (auto _ : state) {
    for (int generation = 0; generation < 8; ++generation) {
      GrammarMatcher fresh(grammar);
      GrammarMatcher& matcher = state.range(0) == 0 ? fresh : shared;
      int32_t current = matcher.intern(matcher.start());
      for (int step = 0; step < 400 && current != GrammarMatcher::kDead; ++step) {
        const auto begin = std::chrono::steady_clock::now();
        const std::vector<uint32_t>& allowed_mask = trie().mask(matcher, current);
        times.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - begin).count());
        std::vector<int32_t> allowed;
        for (size_t id = 1; id < vocab().size(); ++id)
          if ((allowed_mask[id >> 5] >> (id & 31)) & 1u) allowed.push_back(static_cast<int32_t>(id));
        if (allowed.empty()) break;  // only the end token: the document is complete
        // Half the time a token that closes something, so documents end within the steps.
        std::vector<int32_t> closing;
        for (int32_t id : allowed)
          if (vocab()[static_cast<size_t>(id)].find_first_of("\"}]") != std::string::npos) closing.push_back(id);
        const std::vector<int32_t>& from = !closing.empty() && random() % 2 ? closing : allowed;
        for (char c : vocab()[static_cast<size_t>(from[random() % from.size()])])
          current = matcher.step_id(current, static_cast<uint8_t>(c));
      }
    }
  }
  std::sort(times.begin(), times.end());
  state.counters["p50_us"] = times[times.size() / 2];
  state.counters["p99_us"] = times[times.size() * 99 / 100];
  state.counters["steps"] = static_cast<double>(times.size());
}
BENCHMARK(BM_SchemaGeneration)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(2);

// Compiling a typical tool-call schema to a ready matcher (issue 17's target: < 50 ms).
void BM_CompileToolSchema(benchmark::State& state) {
  for (auto _ : state) {
    GrammarMatcher matcher(compile_json_schema(tool_schema()));
    benchmark::DoNotOptimize(matcher.start().frontier.data());
  }
}
BENCHMARK(BM_CompileToolSchema)->Unit(benchmark::kMillisecond);

const nlohmann::ordered_json& tool_schema() {
  static const auto schema = nlohmann::ordered_json::parse(R"({
    "type": "object", "properties": {
      "name": {"const": "search_flights"},
      "arguments": {"type": "object", "properties": {
        "from": {"type": "string", "pattern": "^[A-Z]{3}$"}, "to": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "date": {"type": "string", "format": "date"}, "passengers": {"type": "integer"},
        "cabin": {"enum": ["economy", "premium", "business", "first"]},
        "flexible": {"type": "boolean"}, "airlines": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
        "notes": {"type": ["string", "null"], "maxLength": 200}},
        "required": ["from", "to", "date", "passengers"]}},
    "required": ["name", "arguments"]})");
  return schema;
}

}  // namespace
}  // namespace ernie::structured

BENCHMARK_MAIN();
