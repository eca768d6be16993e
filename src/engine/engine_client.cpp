#include "engine/engine_client.h"

#include "util/error.h"
#include "util/log.h"

namespace ernie {

void OutputStream::push(RequestOutput output) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    final_pushed_ = final_pushed_ || output.finished();
    queue_.push_back(std::move(output));
  }
  ready_.notify_all();
}

std::optional<RequestOutput> OutputStream::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait(lock, [&] { return !queue_.empty() || final_taken_; });
  return take_front();
}

std::optional<RequestOutput> OutputStream::next_for(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!ready_.wait_for(lock, timeout, [&] { return !queue_.empty() || final_taken_; })) return std::nullopt;
  return take_front();
}

std::optional<RequestOutput> OutputStream::take_front() {
  if (queue_.empty()) return std::nullopt;
  RequestOutput output = std::move(queue_.front());
  queue_.pop_front();
  final_taken_ = final_taken_ || output.finished();
  return output;
}

bool OutputStream::done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return final_taken_;
}

EngineClient::EngineClient(std::unique_ptr<Engine> engine) : engine_(std::move(engine)) {
  stats_ = engine_->stats();
  thread_ = std::thread([this] { run(); });
}

EngineClient::~EngineClient() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  thread_.join();
}

void EngineClient::validate(const GenerateRequest& request) const {
  // Cheap checks here so the caller gets its error at once; the engine re-checks.
  if (request.prompt.empty()) fail("the prompt is empty; at least one token is needed");
  if (static_cast<int64_t>(request.prompt.size()) >= engine_->config().max_model_len)
    fail("the prompt has ", request.prompt.size(), " tokens but --max-model-len is ", engine_->config().max_model_len,
         ", which must leave room for at least one generated token");
  const int vocab = engine_->model_config().vocab_size;
  validate_prompt_tokens(request.prompt, vocab);
  validate_sampling_params(request.params, vocab);
}

std::shared_ptr<OutputStream> EngineClient::submit(GenerateRequest request) {
  auto stream = std::make_shared<OutputStream>();
  submit(std::move(request), [stream](RequestOutput output) { stream->push(std::move(output)); });
  return stream;
}

void EngineClient::submit(GenerateRequest request, OutputSink sink) {
  validate(request);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) fail("the engine is shutting down");
    inbox_.emplace_back(std::move(request), std::move(sink));
  }
  work_.notify_one();
}

void EngineClient::abort(const std::string& request_id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    aborts_.push_back(request_id);
  }
  work_.notify_one();
}

void EngineClient::complete_remote_prefill(const std::string& request_id, bool succeeded) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    remote_outcomes_.emplace_back(request_id, succeeded);
  }
  work_.notify_one();
}

EngineStats EngineClient::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

uint64_t EngineClient::kv_resident_bytes() const { return engine_->kv_pool().resident_bytes(); }

void EngineClient::run() {
  for (;;) {
    std::deque<std::pair<GenerateRequest, OutputSink>> arrived;
    std::deque<std::string> aborted;
    std::deque<std::pair<std::string, bool>> remote_outcomes;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_.wait(lock, [&] {
        return stopping_ || !inbox_.empty() || !aborts_.empty() || !remote_outcomes_.empty() || engine_->has_work();
      });
      if (stopping_) break;
      arrived.swap(inbox_);
      aborted.swap(aborts_);
      remote_outcomes.swap(remote_outcomes_);
    }
    for (const auto& [id, succeeded] : remote_outcomes) engine_->complete_remote_prefill(id, succeeded);
    for (auto& [request, sink] : arrived) {
      const std::string id = request.id;
      try {
        engine_->add_request(std::move(request));
        sinks_[id] = std::move(sink);
      } catch (const Error& error) {
        RequestOutput output;
        output.request_id = id;
        output.finish_reason = FinishReason::kError;
        output.error = error.what();
        sink(std::move(output));
      }
    }
    for (const std::string& id : aborted) {
      if (std::optional<RequestOutput> output = engine_->abort_request(id)) {
        sinks_[id](std::move(*output));
        sinks_.erase(id);
      }
    }
    std::vector<RequestOutput> outputs;
    try {
      outputs = engine_->step();
    } catch (const std::exception& error) {
      // A failed step fails every request in it rather than the process.
      log_warning("engine step failed: ", error.what());
      for (auto& [id, sink] : sinks_) {
        engine_->abort_request(id);
        RequestOutput output;
        output.request_id = id;
        output.finish_reason = FinishReason::kError;
        output.error = "internal error in the engine step";
        output.server_fault = true;
        sink(std::move(output));
      }
      sinks_.clear();
    }
    {
      // Stats first, so a reader that sees a request's final output also sees it counted.
      std::lock_guard<std::mutex> lock(mutex_);
      stats_ = engine_->stats();
    }
    for (RequestOutput& output : outputs) {
      const auto found = sinks_.find(output.request_id);
      if (found == sinks_.end()) continue;
      const bool finished = output.finished();
      found->second(std::move(output));
      if (finished) sinks_.erase(found);
    }
  }
  // Shutting down: every open request ends with "abort".
  for (auto& [id, sink] : sinks_) {
    if (std::optional<RequestOutput> output = engine_->abort_request(id)) sink(std::move(*output));
  }
  sinks_.clear();
}

}  // namespace ernie
