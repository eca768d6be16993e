// Prefill/decode disaggregation as the engine sees it; the transport between instances
// lives in disagg/. A decode instance hands the prompts of new requests to a
// RemotePrefill and decodes once their keys and values are in its blocks; a prefill
// instance computes a prompt with a KvExport attached, which receives the keys and
// values of each layer as soon as the layer is computed, so sending overlaps the rest of
// the prefill.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/kv_block_pool.h"

namespace ernie {

// What a decode instance asks a prefill instance for: the keys and values of `tokens`
// at positions [first_position, tokens.size()), to be written into `block_table`. The
// tokens are the prompt without its last token: the decode instance computes that one
// itself, in its next decode step, and samples the first token there, so sampling,
// grammars, logprobs and seeds stay in one place and the output equals a mixed
// instance's. Positions below first_position are already in the decode instance's
// prefix cache.
struct RemotePrefillTask {
  std::string request_id;
  std::vector<int32_t> tokens;
  int64_t first_position = 0;
  std::vector<BlockId> block_table;  // the request's blocks in the decode instance's pool
};

// Decode role. Both calls come from the engine thread and must not block.
class RemotePrefill {
 public:
  virtual ~RemotePrefill() = default;
  // Starts computing the task elsewhere; the engine later hears the outcome through
  // Engine::complete_remote_prefill.
  virtual void start(RemotePrefillTask task) = 0;
  // The request ended first (aborted, or the server stops): when this returns, nothing
  // writes into its blocks any more.
  virtual void cancel(const std::string& request_id) = 0;
};

// Prefill role: attached to a request whose keys and values go to another instance.
class KvExport {
 public:
  virtual ~KvExport() = default;
  // Layer `layer` of positions [first, first + count) is final in `block_table`'s blocks
  // (and every position before `first` is too). Called on the engine thread between two
  // layers of the forward pass: copy what is needed and return.
  virtual void layer_computed(KvBlockPool& pool, const std::vector<BlockId>& block_table, int layer, int64_t first,
                              int64_t count) = 0;
};

}  // namespace ernie
