// Time to compute one step's allowed-token mask for a grammar constraint, at ERNIE's
// vocabulary size (103,424 tokens). The vocabulary is synthetic: byte strings with the
// length mix of a SentencePiece vocabulary (mostly 2-8 bytes, a leading space on many,
// some multi-byte UTF-8), so the trie has the shape a real one has.
//   BM_JsonMask/<state>: a JSON grammar after a prefix that leaves the state named:
//     0 between values (few tokens fit), 1 inside a string (nearly every token fits),
//     2 inside a number.
// Run: build/bench/structured_bench
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "structured/ebnf.h"
#include "structured/matcher.h"
#include "structured/token_mask.h"

namespace ernie::structured {
namespace {

constexpr const char* kJsonGrammar = R"(
root   ::= value
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( "," ws member )* )? "}" ws
member ::= string ":" ws value
array  ::= "[" ws ( value ( "," ws value )* )? "]" ws
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\"" ws
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )? ws
ws     ::= [ \t\n]*
)";

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

void BM_JsonMask(benchmark::State& state) {
  static const std::vector<std::string> vocab = synthetic_vocab(103424);
  static const TokenTrie trie(vocab, {0});
  static const Grammar grammar = parse_ebnf(kJsonGrammar);
  GrammarMatcher matcher(grammar);
  const char* prefixes[] = {"{\"name\": \"x\", ", "{\"name\": \"some te", "{\"count\": 12"};
  const MatchState at = matcher.step(matcher.start(), prefixes[state.range(0)]);
  std::vector<uint32_t> mask;
  for (auto _ : state) {
    trie.allowed(matcher, at, mask);
    benchmark::DoNotOptimize(mask.data());
  }
  size_t allowed = 0;
  for (uint32_t word : mask) allowed += static_cast<size_t>(__builtin_popcount(word));
  state.counters["allowed"] = static_cast<double>(allowed);
  state.counters["trie_nodes"] = static_cast<double>(trie.node_count());
}
BENCHMARK(BM_JsonMask)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace ernie::structured

BENCHMARK_MAIN();
