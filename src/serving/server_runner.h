// Runs the OpenAI-compatible server over an engine until SIGINT or SIGTERM, then shuts
// down gracefully: the part of `ernie serve` that comes after loading. The test server
// with a scripted model (tests/e2e) runs the same code.
#pragma once

#include <signal.h>

#include "engine/engine_client.h"
#include "model/config.h"
#include "model/generation_config.h"
#include "serving/serve_config.h"
#include "text/tokenizer.h"

namespace ernie {

// Blocks SIGINT and SIGTERM in this thread (and so in every thread started after it),
// for serve_until_signalled to take them synchronously; ignores SIGPIPE. Call it before
// any thread starts.
sigset_t block_shutdown_signals();

// Returns the exit status.
int serve_until_signalled(const ServeConfig& config, const sigset_t& shutdown_signals, EngineClient& engine,
                          const Tokenizer& tokenizer, LanguageModel& model, const GenerationConfig& generation);

}  // namespace ernie
