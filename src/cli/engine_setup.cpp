#include "cli/engine_setup.h"

#include <filesystem>
#include <thread>

#include "cli/model_loading.h"
#include "dist/mpi_communicator.h"
#include "kernels/matmul.h"
#include "model/generation_config.h"
#include "util/error.h"
#include "util/log.h"
#include "util/memory_info.h"
#include "util/process_stats.h"

namespace ernie {
namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::string(value) : fallback;
}

// The speculative config's "model", when it names a checkpoint other than the main one:
// FastDeploy's seed commands pass the MTP model's path, which for the released
// checkpoints is the main directory itself (its mtp_* tensors).
// Ranks of this MPI job on this machine (Open MPI says), 1 outside one.
int ranks_on_this_machine() {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  return local != nullptr ? std::max(1, std::atoi(local)) : 1;
}

std::string mtp_directory(const SpeculativeConfig& speculative, const std::string& model_dir) {
  if (speculative.mtp_drafts() == 0 || speculative.model.empty()) return "";
  const std::string resolved = resolve_model_path(speculative.model);
  std::error_code error;
  if (std::filesystem::equivalent(resolved, model_dir, error)) return "";
  return resolved;
}

}  // namespace

std::vector<OptionSpec> engine_option_specs() {
  return {
      {"max-model-len", "N", "most tokens (prompt + output) of one request", "2048"},
      {"max-num-seqs", "N", "most requests running at once", "8"},
      {"max-num-batched-tokens", "N", "token budget of one engine step (default: 512, or --max-model-len without chunked prefill)", ""},
      {"block-size", "N", "tokens per KV cache block", "64"},
      {"gpu-memory-utilization", "F", "share of this machine's memory for weights, activations and KV cache", "0.9"},
      {"num-gpu-blocks-override", "N", "fix the number of KV blocks instead of sizing them from memory", ""},
      {"kv-cache-ratio", "F", "V0 scheduler (ENABLE_V1_KVCACHE_SCHEDULER=0) only: share of blocks prompts may take at admission", "0.75"},
      {"enable-chunked-prefill", "", "split long prompts over steps (on by default here; FD_DISABLE_CHUNKED_PREFILL=1 turns it off)", ""},
      {"enable-prefix-caching", "", "reuse the KV blocks of shared prompt prefixes (on by default)", ""},
      {"no-enable-prefix-caching", "", "turn prefix caching off", ""},
      {"seed", "S", "seeds the requests that bring no seed of their own", "0"},
      {"threads", "N", "worker threads, 0 = one per hardware thread", "0"},
      {"quantization", "NAME|JSON",
       "quantize the weights at load: wint8, wint4, block_wise_fp8, or mix_quant JSON (docs/quantization.md)", ""},
      {"enable-early-stop", "", "end a request once window_size tokens in a row each had probability above threshold", ""},
      {"speculative-config", "JSON",
       "speculative decoding: {\"method\": \"mtp\" | \"ngram\", \"num_speculative_tokens\": 1..5, ...} "
       "(docs/speculative-decoding.md)", ""},
      {"swap-space", "GB",
       "a second KV tier of this many GB on local disk: evicted prefix-cache blocks move there and come back on "
       "a later prefix hit instead of being recomputed (0: none)",
       "0"},
      {"tensor-parallel-size", "N",
       "shard the model over N MPI ranks (started through mpirun when not already under it; docs/parallelism.md)", "1"},
      {"enable-expert-parallel", "", "with --tensor-parallel-size: place whole routed experts on the ranks", ""},
      {"early-stop-config", "JSON",
       "{\"enable_early_stop\": true, \"strategy\": \"repetition\", \"window_size\": 3000, \"threshold\": 0.99}", ""},
  };
}

EngineConfig engine_config_from_args(const ParsedArgs& args) {
  EngineConfig config;
  config.max_model_len = args.get_int("max-model-len");
  config.max_model_len_given = args.has("max-model-len");
  const int64_t max_seqs = args.get_int("max-num-seqs");
  config.max_num_seqs = static_cast<int>(std::clamp<int64_t>(max_seqs, INT32_MIN, INT32_MAX));
  if (args.has("max-num-batched-tokens")) config.max_num_batched_tokens = args.get_int("max-num-batched-tokens");
  config.block_size = static_cast<int>(args.get_int("block-size"));
  config.gpu_memory_utilization = args.get_double("gpu-memory-utilization");
  if (args.has("num-gpu-blocks-override"))
    config.num_gpu_blocks_override = static_cast<int>(args.get_int("num-gpu-blocks-override"));
  config.kv_cache_ratio = args.get_double("kv-cache-ratio");
  config.seed = static_cast<uint64_t>(args.get_int("seed"));
  if (args.has("quantization")) config.quantization = args.get("quantization");

  if (args.flag("enable-prefix-caching") && args.flag("no-enable-prefix-caching"))
    fail("--enable-prefix-caching and --no-enable-prefix-caching contradict each other");
  config.prefix_caching = !args.flag("no-enable-prefix-caching");

  const std::string v1 = env_or("ENABLE_V1_KVCACHE_SCHEDULER", "1");
  if (v1 != "0" && v1 != "1") fail("ENABLE_V1_KVCACHE_SCHEDULER must be 0 or 1, got \"", v1, "\"");
  config.v1_scheduler = v1 == "1";
  if (config.v1_scheduler && args.has("kv-cache-ratio"))
    log_info("--kv-cache-ratio has no effect under the V1 scheduler (ENABLE_V1_KVCACHE_SCHEDULER=1, the default)");

  const std::string no_chunking = env_or("FD_DISABLE_CHUNKED_PREFILL", "0");
  if (no_chunking != "0" && no_chunking != "1")
    fail("FD_DISABLE_CHUNKED_PREFILL must be 0 or 1, got \"", no_chunking, "\"");
  config.chunked_prefill = no_chunking == "0";
  if (!config.chunked_prefill && args.flag("enable-chunked-prefill"))
    log_info("FD_DISABLE_CHUNKED_PREFILL=1 overrides --enable-chunked-prefill: prompts are prefilled whole");
  config.sampling_class = sampling_class_from_env();
  if (args.has("speculative-config")) config.speculative = parse_speculative_config(args.get("speculative-config"));
  const std::string mtp_hidden = env_or("ERNIE_MTP_HIDDEN", "prenorm");
  if (mtp_hidden != "prenorm" && mtp_hidden != "normed")
    fail("ERNIE_MTP_HIDDEN must be prenorm or normed, got \"", mtp_hidden, "\"");
  config.mtp_normed_hidden = mtp_hidden == "normed";
  config.swap_space_gb = args.get_double("swap-space");
  if (!(config.swap_space_gb >= 0) || config.swap_space_gb > 1 << 20)
    fail("--swap-space must be a number of GB from 0, got ", args.get("swap-space"));
  const int64_t ranks = args.get_int("tensor-parallel-size");
  if (ranks < 1 || ranks > 1024) fail("--tensor-parallel-size must lie in 1..1024, got ", ranks);
  config.tensor_parallel_size = static_cast<int>(ranks);
  config.expert_parallel = args.flag("enable-expert-parallel");
  if (config.expert_parallel && ranks == 1)
    log_info("--enable-expert-parallel with one rank: every expert runs in this process");
  if (ranks > 1 && config.swap_space_gb > 0)
    fail("--swap-space with --tensor-parallel-size ", ranks, " is not supported yet: the second tier holds rank 0's "
         "blocks only; leave --swap-space out");
  if (ranks > 1 && config.speculative.mtp_drafts() > 0)
    fail("MTP drafting (--speculative-config method \"mtp\") runs in one process only; with --tensor-parallel-size ",
         ranks, " use method \"ngram\"");
  config.early_stop = parse_early_stop_config(
      args.flag("enable-early-stop"),
      args.has("early-stop-config") ? std::optional<std::string>(args.get("early-stop-config")) : std::nullopt);
  return config;
}

LoadedEngine load_engine(const std::string& model_dir, const EngineConfig& requested, size_t threads,
                         const std::string& tokenizer_dir, const std::function<void(Engine&)>& prepare) {
  LoadedEngine loaded;
  // Ranks sharing a machine share its cores: each takes its part unless --threads says.
  const size_t hardware = std::max(1u, std::thread::hardware_concurrency());
  if (requested.tensor_parallel_size > 1 && threads == hardware)
    threads = std::max<size_t>(1, hardware / static_cast<size_t>(std::max(1, ranks_on_this_machine())));
  loaded.pool = std::make_unique<ThreadPool>(threads);
  loaded.tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(tokenizer_dir.empty() ? model_dir : tokenizer_dir));
  QuantizationPlan quantization = quantization_from_flag(model_dir, requested.quantization);
  // The engine caches keys and values in bf16 unless told otherwise (FastDeploy's cache
  // dtype; half the memory and read traffic of fp32).
  if (!quantization.kv_cache_named) quantization.kv_cache = KvStorage::kBF16;
  // bf16 weights multiply bf16-rounded activations where the CPU has AVX512-BF16 (twice
  // the fp32 peak); ERNIE_BF16_PRODUCTS=0 keeps fp32 products.
  set_bf16_products(env_or("ERNIE_BF16_PRODUCTS", "1") != "0");
  ShardPlan shard;
  std::string host;
  if (requested.tensor_parallel_size > 1) {
    auto mpi = std::make_unique<MpiCommunicator>();
    if (mpi->size() != requested.tensor_parallel_size)
      fail("--tensor-parallel-size ", requested.tensor_parallel_size, " but the MPI job has ", mpi->size(),
           " ranks; start it with mpirun -np ", requested.tensor_parallel_size, " (or let ernie start mpirun itself)");
    shard = {mpi->rank(), mpi->size(), requested.expert_parallel};
    host = mpi->host();
    set_log_prefix(str_cat("[rank ", shard.rank, "] "));
    loaded.communicator = std::move(mpi);
  }
  try {
    loaded.model = load_model_reporting(model_dir, *loaded.pool, quantization,
                                        mtp_directory(requested.speculative, model_dir), shard, loaded.communicator.get());
    if (shard.sharded()) check_ranks_agree(*loaded.communicator, rank_fingerprint(*loaded.model, requested.quantization), host);
  } catch (const Error& error) {
    if (!shard.sharded()) throw;
    fail("rank ", shard.rank, " on ", host, ": ", error.what());
  }
  EngineConfig config = requested;
  fit_max_model_len(config, loaded.model->config());
  validate_engine_config(config, loaded.model->config());
  if (shard.sharded() && shard.rank != 0) {
    // This rank runs the steps rank 0 plans, until rank 0 stops.
    run_tensor_parallel_worker(*loaded.model, *loaded.communicator, config.kv_layers(loaded.model->config()),
                               config.block_size);
    return loaded;
  }
  const MemoryBudget memory = read_memory_budget();
  log_info("memory for the KV cache planned from ", memory.source, ": ", memory.available >> 20, " MiB available + ",
           memory.own_anonymous >> 20, " MiB held by this process");
  // The ranks on this machine share its memory: each plans with its part of it.
  const uint64_t usable = memory.usable() / static_cast<uint64_t>(std::max(1, ranks_on_this_machine()));
  const int blocks = plan_kv_blocks(config, loaded.model->config(), loaded.model->load_report().weight_bytes,
                                    loaded.model->kv_row_bytes(), usable);
  if (shard.sharded()) {
    loaded.parallel_model = std::make_unique<TensorParallelModel>(*loaded.model, *loaded.communicator);
    loaded.parallel_model->share_kv_blocks(blocks);
  }
  auto engine = std::make_unique<Engine>(loaded.engine_model(), *loaded.tokenizer, config, blocks,
                                         end_token_ids(load_generation_config(model_dir), loaded.model->config()));
  if (prepare) prepare(*engine);
  loaded.client = std::make_unique<EngineClient>(std::move(engine));
  return loaded;
}

}  // namespace ernie
