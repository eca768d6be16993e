// The `ernie` executable: dispatches to a subcommand and turns every error into one
// clear line on stderr and a non-zero exit status.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "cli/mpi_launch.h"
#include "util/error.h"

namespace {

constexpr const char* kUsage =
    "usage: ernie <command> [flags]\n"
    "\n"
    "commands:\n"
    "  serve     OpenAI-compatible HTTP server (FastDeploy's flags)\n"
    "  router    routes requests to prefill/decode instances on several machines\n"
    "  run       generate text from a prompt, streamed to stdout\n"
    "  logits    write the logits of every position of a token sequence\n"
    "  perplexity  score a text file: the perplexity users compare checkpoints and quantizations by\n"
    "  synth     write a random checkpoint in the real ERNIE 4.5 formats\n"
    "  quantize  write a pre-quantized checkpoint that serve loads with no conversion\n"
    "  bench     offline engine benchmark: throughput, TTFT, time per output token\n"
    "\n"
    "`ernie <command> --help` describes a command's flags.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "--version") {
    std::puts("ernie 0.1.0");
    return 0;
  }
  try {
    if (command == "serve" || command == "bench") ernie::relaunch_under_mpirun_if_needed(argc, argv);
    if (command == "serve") return ernie::serve_command(argc, argv);
    if (command == "router") return ernie::router_command(argc, argv);
    if (command == "run") return ernie::run_command(argc, argv);
    if (command == "logits") return ernie::logits_command(argc, argv);
    if (command == "perplexity") return ernie::perplexity_command(argc, argv);
    if (command == "synth") return ernie::synth_command(argc, argv);
    if (command == "quantize") return ernie::quantize_command(argc, argv);
    if (command == "bench") return ernie::bench_command(argc, argv);
    std::fprintf(stderr, "error: unknown command \"%s\"\n\n%s", command.c_str(), kUsage);
    return 2;
  } catch (const ernie::Error& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "internal error: %s\n", error.what());
    return 3;
  }
}
