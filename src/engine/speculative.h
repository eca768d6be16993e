// Speculative decoding's settings (FastDeploy's --speculative-config) and the n-gram
// proposer. How drafts are verified lives in the engine (engine.cpp): every draft is a
// single token the target model must sample itself for it to be accepted, so a request
// emits exactly the tokens it would emit without speculation (docs/speculative-decoding.md).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ernie {

inline constexpr int kMaxSpeculativeTokens = 5;  // FastDeploy's limit on drafts per step
// Most decode rows (requests plus their drafts) one step verifies.
inline constexpr int kMaxVerifyRows = 64;
// A request whose drafts were all rejected this many verifications in a row makes none
// for the next kDraftPauseSteps steps.
inline constexpr int kDraftMissesBeforePause = 3;
inline constexpr int kDraftPauseSteps = 8;

// Whether drafting pays, learnt while serving. A CPU step reads every weight once however
// many rows it has, so while reading weights dominates a few more rows cost little;
// once the step is bound by compute each draft row is paid in full. The planner keeps the
// measured time of decode-only steps by their number of rows and the recent acceptance,
// and gives each request the number of drafts j that maximises the expected tokens per
// second: d * (1 + a + ... + a^j) over the time of d * (1 + j) rows. A row count never
// measured is assumed to cost what the plain step costs, so it is tried once.
class DraftPlanner {
 public:
  // Drafts per request (0..max_drafts) for a step with `decoding` requests. While it
  // plans none, every kProbeEvery-th call drafts one anyway, so that acceptance and cost
  // measured in a bad stretch do not stop drafting for good.
  int plan(int decoding, int max_drafts);
  // A decode-only step with `rows` rows took `seconds`.
  void record_step(int rows, double seconds);
  // A verification of `drafts` drafts accepted `accepted`.
  void record_verification(int drafts, int accepted);
  double acceptance() const { return acceptance_; }

 private:
  static constexpr double kWeight = 0.1;  // of the newest sample in each moving average
  static constexpr int kProbeEvery = 32;
  int plain_plans_ = 0;  // plans in a row that drafted nothing
  std::vector<double> step_seconds_;       // by rows; 0: not measured yet
  double acceptance_ = 0.8;                // optimistic until measured
};

enum class SpeculativeMethod {
  kNone,
  kMtp,    // the checkpoint's multi-token-prediction head drafts (model spec §4)
  kNgram,  // prompt lookup: the tail of the context matched against earlier context
};

struct SpeculativeConfig {
  SpeculativeMethod method = SpeculativeMethod::kNone;
  int num_speculative_tokens = 1;  // drafts per request and step, 1..5
  int num_model_steps = 1;         // MTP passes per step (each drafts one token), <= num_speculative_tokens
  bool mtp_with_ngram = false;     // mtp_strategy "with_ngram": n-gram drafts fill up after the MTP's
  int max_ngram_size = 5;
  int min_ngram_size = 2;
  std::string model;  // a directory with the MTP weights; empty: the main checkpoint's mtp_* tensors
  int max_verify_rows = kMaxVerifyRows;  // decode rows a step verifies at most (not a FastDeploy key)
  bool adaptive = true;  // the DraftPlanner decides the drafts; false: always num_speculative_tokens (tests)

  bool enabled() const { return method != SpeculativeMethod::kNone; }
  // Drafts the MTP head makes per step (0 unless method is kMtp).
  int mtp_drafts() const { return method == SpeculativeMethod::kMtp ? num_model_steps : 0; }
};

// Parses --speculative-config's JSON as FastDeploy does: method "mtp", "ngram" (or 2.2's
// "ngram_match"), num_speculative_tokens 1..5, num_model_steps, mtp_strategy "default" |
// "with_ngram", max_ngram_size / min_ngram_size, model. FastDeploy's tuning keys for its
// GPU verifier are accepted and have no effect here (see the docs). Throws ernie::Error
// naming the key, the value and the valid choices.
SpeculativeConfig parse_speculative_config(const std::string& json_text);
const char* speculative_method_name(SpeculativeMethod method);

// Prompt lookup: for n from max_n down to min_n, finds the most recent earlier place where
// the last n tokens of `context` occur and proposes up to `count` tokens that followed
// it there. Empty when no n-gram recurs.
std::vector<int32_t> propose_ngram_drafts(std::span<const int32_t> context, int count, int min_n, int max_n);

}  // namespace ernie
