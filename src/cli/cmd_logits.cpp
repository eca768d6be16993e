// ernie logits: the logits of every position of a token sequence, as raw little-endian
// float32 [n_ids, vocab_size]. Reference logits are checked with it.
#include <bit>
#include <charconv>
#include <fstream>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_loading.h"
#include "util/error.h"
#include "util/log.h"

namespace ernie {
namespace {

std::vector<int32_t> parse_id_list(const std::string& text) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    int32_t id = 0;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), id);
    if (item.empty() || error != std::errc() || end != item.data() + item.size())
      fail("--ids expects comma-separated token ids such as 5,17,42; \"", item, "\" is not an integer");
    ids.push_back(id);
    start = comma + 1;
  }
  return ids;
}

}  // namespace

int logits_command(int argc, char** argv) {
  static_assert(std::endian::native == std::endian::little, "the logits file format is little-endian float32");
  const ArgParser parser("ernie logits --model DIR --ids 5,17,42 --out FILE",
                         "Writes the logits of every position as little-endian float32, row-major [n_ids, vocab_size].",
                         {{"model", "DIR", "checkpoint directory (config.json + safetensors)", ""},
                          {"ids", "LIST", "comma-separated token ids, fed at positions 0..n-1 (no BOS added)", ""},
                          {"out", "FILE", "output file", ""},
                          {"threads", "N", "worker threads, 0 = all hardware threads", "0"},
                          {"quantization", "NAME|JSON", "quantize the weights at load, as ernie serve does", ""}});
  const ParsedArgs args = parser.parse(argc, argv, 2);
  if (args.help_requested()) {
    std::fputs(parser.help_text().c_str(), stdout);
    return 0;
  }
  const std::vector<int32_t> ids = parse_id_list(args.get("ids"));
  const std::string out_path = args.get("out");
  ThreadPool pool(thread_count_from_flag(args.get_int("threads")));
  const std::string model_dir = resolve_model_path(args.get("model"));
  auto model = load_model_reporting(model_dir, pool,
                                    quantization_from_flag(model_dir, args.get_optional("quantization").value_or("")));
  auto cache = model->new_kv_cache();

  const std::vector<float> logits = model->forward(single_sequence_batch(*cache, ids, 0, /*all_rows=*/true));

  std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
  if (!out) fail("cannot write ", out_path);
  out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * sizeof(float)));
  if (!out) fail("error while writing ", out_path);
  log_info("wrote ", ids.size(), " x ", model->config().vocab_size, " logits to ", out_path);
  return 0;
}

}  // namespace ernie
