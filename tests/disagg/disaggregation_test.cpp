// Prefill/decode disaggregation inside one process: prefill and decode engines, each
// on its own copy of the golden tiny model, talking over ZeroMQ (a Unix socket, or TCP)
// exactly as two `ernie serve` processes do. The reference is a mixed engine: the
// decode instance's tokens must equal it, whatever happens to the prefill instances.
#include "disagg/disaggregation.h"

#include <gtest/gtest.h>

#include <thread>

#include "model/ernie_model.h"
#include "support/test_support.h"
#include "util/error.h"

namespace ernie::disagg {
namespace {

using namespace std::chrono_literals;

constexpr int kBlockSize = 16;
constexpr int kBlocks = 96;

EngineConfig engine_config(int max_num_seqs = 4) {
  EngineConfig config;
  config.block_size = kBlockSize;
  config.max_model_len = 256;
  config.max_num_seqs = max_num_seqs;
  // Small steps: a prompt is computed in several chunks, each exporting its layers.
  config.max_num_batched_tokens = 24;
  return config;
}

// One instance: its own threads and model copy (as a process has), an engine client
// and its role.
struct Instance {
  Instance(const DisaggregationConfig& config, int max_num_seqs = 4)
      : model(ErnieModel::load(testing::golden_model_dir("tiny-dense"), threads)),
        tokenizer(Tokenizer::load(testing::golden_model_dir("tiny-dense"))),
        role(config, max_num_seqs) {
    auto engine = std::make_unique<Engine>(*model, tokenizer, engine_config(max_num_seqs), kBlocks,
                                           std::vector<int32_t>{2});
    role.prepare(*engine);
    client = std::make_unique<EngineClient>(std::move(engine));
    role.attach(*client);
  }
  ~Instance() {
    role.stop();
    client.reset();
  }
  ThreadPool threads{1};
  std::unique_ptr<ErnieModel> model;
  Tokenizer tokenizer;
  Disaggregation role;
  std::unique_ptr<EngineClient> client;
};

DisaggregationConfig prefill_config() {
  DisaggregationConfig config;
  config.role = Role::kPrefill;
  config.host = "127.0.0.1";
  config.engine_worker_queue_port = 0;  // any free port
  return config;
}

DisaggregationConfig decode_config(std::vector<std::string> endpoints) {
  DisaggregationConfig config;
  config.role = Role::kDecode;
  config.decode.prefill_endpoints = std::move(endpoints);
  return config;
}

std::string local(const Instance& prefill) { return prefill_endpoint(std::to_string(prefill.role.prefill_server()->port())); }

GenerateRequest make_request(const std::string& id, int length, int max_tokens, float temperature = 0.0f) {
  GenerateRequest request;
  request.id = id;
  for (int i = 0; i < length; ++i) request.prompt.push_back(40 + (i * 37 + length * 11) % 4000);
  request.params.temperature = temperature;
  request.params.seed = 1234 + length;
  request.params.max_tokens = max_tokens;
  request.params.ignore_eos = true;
  return request;
}

struct Result {
  std::vector<int32_t> tokens;
  RequestOutput last;
};

Result drain(OutputStream& stream) {
  Result result;
  while (std::optional<RequestOutput> output = stream.next()) {
    result.tokens.insert(result.tokens.end(), output->token_ids.begin(), output->token_ids.end());
    result.last = *output;
  }
  return result;
}

// An engine's figures once nothing runs in it: they are taken after each step, so an
// output may reach its reader a moment before the figures count it.
EngineStats idle_stats(const EngineClient& client) {
  const auto until = std::chrono::steady_clock::now() + 2s;
  EngineStats stats = client.stats();
  while ((stats.running + stats.waiting != 0 || stats.blocks_free != stats.blocks_total) &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);
    stats = client.stats();
  }
  return stats;
}

// Lets the decode instance hear from its prefill instances: a few status rounds.
void wait_until_connected() { std::this_thread::sleep_for(3 * kStatusPeriod); }

class DisaggregationTest : public ::testing::Test {
 protected:
  // The reference: the same requests on a mixed instance.
  std::vector<Result> mixed(const std::vector<GenerateRequest>& requests) {
    Instance instance(DisaggregationConfig{});
    std::vector<std::shared_ptr<OutputStream>> streams;
    for (const GenerateRequest& request : requests) streams.push_back(instance.client->submit(request));
    std::vector<Result> results;
    for (auto& stream : streams) results.push_back(drain(*stream));
    return results;
  }
};

TEST_F(DisaggregationTest, DecodeInstanceTokensEqualAMixedInstances) {
  std::vector<GenerateRequest> requests;
  for (int length : {2, 5, 16, 17, 40, 90}) requests.push_back(make_request(str_cat("g", length), length, 12));
  requests.push_back(make_request("seeded", 33, 12, 0.8f));
  GenerateRequest with_prompt_logprobs = make_request("plp", 20, 6);
  with_prompt_logprobs.params.prompt_logprobs = 2;  // computed on the decode instance itself
  requests.push_back(with_prompt_logprobs);
  const std::vector<Result> expected = mixed(requests);

  Instance prefill(prefill_config());
  Instance decode(decode_config({local(prefill)}));
  wait_until_connected();
  std::vector<std::shared_ptr<OutputStream>> streams;
  for (const GenerateRequest& request : requests) streams.push_back(decode.client->submit(request));
  int64_t expected_bytes = 0;
  const int64_t row_bytes = static_cast<int64_t>(decode.model->kv_row_bytes());
  for (size_t i = 0; i < requests.size(); ++i) {
    const Result result = drain(*streams[i]);
    EXPECT_EQ(result.tokens, expected[i].tokens) << requests[i].id;
    EXPECT_EQ(result.last.finish_reason, FinishReason::kLength) << requests[i].id;
    if (requests[i].id != "plp")
      expected_bytes += 2 * row_bytes * decode.model->config().num_hidden_layers *
                        static_cast<int64_t>(requests[i].prompt.size() - 1);
  }
  const TransferStats stats = decode.role.coordinator()->stats();
  EXPECT_EQ(stats.completed, static_cast<int64_t>(requests.size()) - 1) << "all but the prompt-logprobs request";
  EXPECT_EQ(stats.computed_here, 0);
  EXPECT_EQ(stats.retried, 0);
  EXPECT_EQ(stats.bytes, expected_bytes) << "every position but the last, every layer, K and V, exactly once";
  // Nothing is left behind on either side.
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(prefill.role.prefill_server()->tasks_in_flight(), 0);
  const EngineStats prefill_stats = idle_stats(*prefill.client);
  EXPECT_EQ(prefill_stats.running + prefill_stats.waiting, 0u);
  const EngineStats decode_stats = idle_stats(*decode.client);
  EXPECT_EQ(decode_stats.blocks_free, decode_stats.blocks_total);
}

TEST_F(DisaggregationTest, OverTcpAndWithADecodeSidePrefixHitOnlyTheMissingPositionsTravel) {
  const GenerateRequest first = make_request("first", 70, 8);
  const std::vector<Result> expected = mixed({first});
  Instance prefill(prefill_config());
  Instance decode(decode_config({prefill_endpoint(str_cat("127.0.0.1:", prefill.role.prefill_server()->port()))}));
  wait_until_connected();
  EXPECT_EQ(drain(*decode.client->submit(first)).tokens, expected[0].tokens);
  const int64_t bytes_first = decode.role.coordinator()->stats().bytes;
  GenerateRequest again = first;
  again.id = "again";
  const Result second = drain(*decode.client->submit(again));
  EXPECT_EQ(second.tokens, expected[0].tokens);
  EXPECT_EQ(second.last.cached_tokens, 64) << "four full blocks of 16 from the decode instance's prefix cache";
  const int64_t per_position = bytes_first / 69;
  EXPECT_EQ(decode.role.coordinator()->stats().bytes - bytes_first, per_position * (69 - 64));
}

TEST_F(DisaggregationTest, APrefillInstanceThatFallsSilentHasItsTaskRetriedOnAnother) {
  const GenerateRequest request = make_request("r", 50, 10);
  const std::vector<Result> expected = mixed({request});
  Instance first(prefill_config());
  Instance second(prefill_config());
  Instance decode(decode_config({local(first), local(second)}));
  wait_until_connected();
  // The first prefill instance stops answering (as a hung or killed process) just
  // before the task reaches it; both had the same free seats, so the first is chosen.
  first.role.stop();
  const Result result = drain(*decode.client->submit(request));
  EXPECT_EQ(result.tokens, expected[0].tokens);
  const TransferStats stats = decode.role.coordinator()->stats();
  EXPECT_EQ(stats.completed, 1);
  EXPECT_EQ(stats.retried, 1);
  EXPECT_EQ(stats.computed_here, 0);
}

TEST_F(DisaggregationTest, ATaskPastTheTransferTimeoutIsCancelledAndRetriedOnAnother) {
  const GenerateRequest request = make_request("r", 50, 10);
  const std::vector<Result> expected = mixed({request});
  Instance first(prefill_config());
  Instance second(prefill_config());
  DisaggregationConfig config = decode_config({local(first), local(second)});
  config.decode.transfer_timeout = 300ms;
  Instance decode(config);
  wait_until_connected();
  first.role.stop();  // holds the task without a word
  const auto started = std::chrono::steady_clock::now();
  const Result result = drain(*decode.client->submit(request));
  EXPECT_EQ(result.tokens, expected[0].tokens);
  // The timeout, not the silence limit, moved it.
  EXPECT_LT(std::chrono::steady_clock::now() - started, kSilenceLimit);
  EXPECT_EQ(decode.role.coordinator()->stats().retried, 1);
  EXPECT_EQ(decode.role.coordinator()->stats().completed, 1);
}

TEST_F(DisaggregationTest, WithNoPrefillInstanceLeftTheDecodeInstanceComputesThePromptItself) {
  const GenerateRequest request = make_request("r", 50, 10);
  const std::vector<Result> expected = mixed({request});
  Instance prefill(prefill_config());
  Instance decode(decode_config({local(prefill)}));
  wait_until_connected();
  prefill.role.stop();
  const Result result = drain(*decode.client->submit(request));
  EXPECT_EQ(result.tokens, expected[0].tokens);
  EXPECT_EQ(decode.role.coordinator()->stats().computed_here, 1);
  const EngineStats stats = idle_stats(*decode.client);
  EXPECT_EQ(stats.blocks_free, stats.blocks_total);
}

TEST_F(DisaggregationTest, AbortingARequestWhileAPrefillInstanceHasItFreesItsBlocks) {
  Instance prefill(prefill_config());
  Instance decode(decode_config({local(prefill)}));
  wait_until_connected();
  prefill.role.stop();  // it takes the task and never answers
  auto stream = decode.client->submit(make_request("waits", 30, 5));
  std::this_thread::sleep_for(100ms);
  decode.client->abort("waits");
  EXPECT_EQ(drain(*stream).last.finish_reason, FinishReason::kAbort);
  const EngineStats stats = idle_stats(*decode.client);
  EXPECT_EQ(stats.blocks_free, stats.blocks_total);
  EXPECT_EQ(stats.running, 0u);
  EXPECT_EQ(decode.role.coordinator()->stats().computed_here, 0) << "it was sent, then cancelled";
}

TEST_F(DisaggregationTest, APrefillInstanceDropsTasksThatAreCancelledOrWhoseDecodeInstanceFellSilent) {
  Instance prefill(prefill_config(), /*max_num_seqs=*/1);
  // Its only seat is taken by a queue of long local requests (seconds of work), so
  // tasks wait in its engine's queue.
  std::vector<std::shared_ptr<OutputStream>> occupants;
  for (int i = 0; i < 40; ++i) occupants.push_back(prefill.client->submit(make_request(str_cat("occupant", i), 8, 240)));
  ASSERT_TRUE(occupants[0]->next().has_value());
  // A decode instance as raw messages on a DEALER socket.
  zmq::context_t context;
  zmq::socket_t decode(context, zmq::socket_type::dealer);
  decode.set(zmq::sockopt::linger, 0);
  decode.connect(local(prefill));
  zmq::multipart_t probe;
  probe.addstr("status");
  probe.send(decode);
  zmq::multipart_t reply;
  ASSERT_TRUE(reply.recv(decode));
  const StatusMessage status = decode_status(reply);
  EXPECT_EQ(status.free_seats, 0);
  for (const char* id : {"cancelled#1", "orphan#1"}) {
    TaskMessage task;
    task.id = id;
    task.format = status.format;
    task.tokens = make_request(id, 30, 1).prompt;
    encode_task(task).send(decode);
  }
  auto wait_for_tasks = [&](int count, std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (prefill.role.prefill_server()->tasks_in_flight() != count && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(20ms);
    return prefill.role.prefill_server()->tasks_in_flight();
  };
  EXPECT_EQ(wait_for_tasks(2, 1s), 2);
  encode_outcome(kCancel, {"cancelled#1", "", 0}).send(decode);
  EXPECT_EQ(wait_for_tasks(1, 1s), 1);
  zmq::multipart_t outcome;
  ASSERT_TRUE(outcome.recv(decode));
  EXPECT_EQ(outcome.at(0).to_string(), "failed");
  EXPECT_EQ(decode_outcome(outcome).id, "cancelled#1");
  // The decode instance now says nothing: its other task goes too.
  EXPECT_EQ(wait_for_tasks(0, kSilenceLimit + 1s), 0);
  for (int i = 0; i < 40; ++i) prefill.client->abort(str_cat("occupant", i));
  for (auto& occupant : occupants) drain(*occupant);
  const EngineStats stats = idle_stats(*prefill.client);
  EXPECT_EQ(stats.running + stats.waiting, 0u);
  EXPECT_EQ(stats.blocks_free, stats.blocks_total);
}

TEST(PdProtocolTest, MalformedTasksAreRefusedWithTheReason) {
  TaskMessage task;
  task.id = "a#1";
  task.first_position = 0;
  task.tokens = {5, 6, 7};
  zmq::multipart_t good = encode_task(task);
  EXPECT_EQ(decode_task(good).tokens, task.tokens);
  task.first_position = 3;
  zmq::multipart_t past_end = encode_task(task);
  EXPECT_THROW(decode_task(past_end), Error);
  zmq::multipart_t truncated = encode_task(task);
  truncated.remove();
  EXPECT_THROW(decode_task(truncated), Error);
  zmq::multipart_t odd;
  odd.addstr("task");
  odd.addstr(R"({"id":"x","first_position":0,"format":{"kv_layers":1,"row_bytes":2,"model":"m"}})");
  odd.addstr("abc");  // not whole int32 tokens
  EXPECT_THROW(decode_task(odd), Error);
  EXPECT_EQ(request_id_of(task_wire_id("req#with#hash", 3)), "req#with#hash");
  EXPECT_THROW(prefill_endpoint("host:"), Error);
  EXPECT_THROW(prefill_endpoint("70000"), Error);
  EXPECT_EQ(prefill_endpoint("10.0.0.2:7013"), "tcp://10.0.0.2:7013");
}

}  // namespace
}  // namespace ernie::disagg
