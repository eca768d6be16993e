// The subcommands of the `ernie` executable. Each parses its own flags from
// argv[2..] and returns the process exit status; errors propagate as ernie::Error.
#pragma once

namespace ernie {

int run_command(int argc, char** argv);     // ernie run
int logits_command(int argc, char** argv);  // ernie logits
int perplexity_command(int argc, char** argv);  // ernie perplexity
int synth_command(int argc, char** argv);   // ernie synth
int quantize_command(int argc, char** argv);  // ernie quantize
int bench_command(int argc, char** argv);   // ernie bench
int serve_command(int argc, char** argv);   // ernie serve
int router_command(int argc, char** argv);  // ernie router

}  // namespace ernie
