#include "disagg/prefill_server.h"

#include <cstdlib>
#include <filesystem>

#include "util/error.h"
#include "util/log.h"

namespace ernie::disagg {

// Sends each layer's rows of the task's positions as soon as the layer is computed.
class PrefillServer::LayerExport final : public KvExport {
 public:
  LayerExport(PrefillServer& server, std::string decode, std::string wire_id, int kv_layers, int64_t first, int64_t end)
      : server_(server), decode_(std::move(decode)), wire_id_(std::move(wire_id)),
        next_(static_cast<size_t>(kv_layers), first), end_(end) {}

  void layer_computed(KvBlockPool& pool, const std::vector<BlockId>& block_table, int layer, int64_t first,
                      int64_t count) override {
    int64_t& next = next_[static_cast<size_t>(layer)];
    const int64_t until = std::min(first + count, end_);
    if (until <= next) return;
    const int64_t rows = until - next;
    zmq::message_t payload(static_cast<size_t>(2 * rows) * pool.row_bytes());
    pool.read_layer_rows(block_table, layer, next, rows, static_cast<uint8_t*>(payload.data()));
    KvLayerHeader header;
    header.layer = layer;
    header.first = next;
    header.count = rows;
    zmq::multipart_t message;
    message.addstr(std::string(kKv));
    message.addstr(wire_id_);
    message.addtyp(header);
    message.add(std::move(payload));
    server_.send_from_engine(decode_, std::move(message));
    next = until;
  }

  // Every layer reached the end of the task.
  bool complete() const {
    for (int64_t next : next_)
      if (next < end_) return false;
    return true;
  }

 private:
  PrefillServer& server_;
  std::string decode_;
  std::string wire_id_;
  std::vector<int64_t> next_;  // per layer, the first position not sent yet
  int64_t end_;
};

PrefillServer::PrefillServer(const std::string& host, int port, int max_num_seqs)
    : max_num_seqs_(max_num_seqs), context_(1),
      router_(context_, zmq::socket_type::router), pull_(context_, zmq::socket_type::pull),
      push_(context_, zmq::socket_type::push) {
  for (zmq::socket_t* socket : {&router_, &pull_, &push_}) {
    socket->set(zmq::sockopt::linger, 0);
    // Keys and values of every task in flight may queue; a vanished peer's queue is dropped.
    socket->set(zmq::sockopt::sndhwm, 0);
    socket->set(zmq::sockopt::rcvhwm, 0);
  }
  // Port 0: any free port (tests); port() tells which.
  router_.set(zmq::sockopt::maxmsgsize, kMaxTaskMessageBytes);
  const std::string tcp = str_cat("tcp://", host == "0.0.0.0" ? "*" : host, ":", port == 0 ? "*" : std::to_string(port));
  try {
    router_.bind(tcp);
    const std::string bound = router_.get(zmq::sockopt::last_endpoint);
    port_ = std::stoi(bound.substr(bound.rfind(':') + 1));
  } catch (const zmq::error_t& error) {
    fail("--engine-worker-queue-port ", port, ": cannot listen for decode instances on ", tcp, ": ", error.what());
  }
  const std::string ipc = local_endpoint(port_);
  try {
    ipc_path_ = ipc.substr(6);
    std::filesystem::remove(ipc_path_);  // left by a process that did not exit cleanly
    router_.bind(ipc);
  } catch (const zmq::error_t& error) {
    fail("--engine-worker-queue-port ", port_, ": cannot listen for decode instances on ", ipc, ": ", error.what());
  }
  pull_.bind("inproc://prefill-out");
  push_.connect("inproc://prefill-out");
  log_info("prefill role: decode instances connect to port ", port_, " (TCP) and ", ipc);
}

void PrefillServer::start(EngineClient& engine, const KvFormat& format) {
  engine_ = &engine;
  format_ = format;
  thread_ = std::thread([this] { run(); });
}

PrefillServer::~PrefillServer() {
  stop();
  if (!ipc_path_.empty()) std::filesystem::remove(ipc_path_);
}

void PrefillServer::stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
}

int PrefillServer::tasks_in_flight() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(tasks_.size());
}

void PrefillServer::reply(const std::string& decode, zmq::multipart_t message) {
  message.pushstr(decode);
  message.send(router_);
}

void PrefillServer::send_from_engine(const std::string& decode, zmq::multipart_t message) {
  if (stopping_) return;
  message.pushstr(decode);
  message.send(push_);
}

void PrefillServer::run() {
  zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0}, {pull_.handle(), 0, ZMQ_POLLIN, 0}};
  while (!stopping_) {
    zmq::poll(items, 2, std::chrono::milliseconds(100));
    zmq::multipart_t message;
    while (message.recv(router_, ZMQ_DONTWAIT)) {
      try {
        on_decode_message(message);
      } catch (const std::exception& error) {
        log_warning("prefill role: a message from a decode instance was refused: ", error.what());
      }
      message.clear();
    }
    while (message.recv(pull_, ZMQ_DONTWAIT)) {
      message.send(router_);  // routed by its first frame; dropped if that decode is gone
      message.clear();
    }
    abort_tasks_of_silent_decodes();
  }
}

void PrefillServer::on_decode_message(zmq::multipart_t& message) {
  if (message.size() < 2) return;
  const std::string decode = message.popstr();
  const std::string kind = message.at(0).to_string();  // left in place for the decoders
  {
    std::lock_guard<std::mutex> lock(mutex_);
    last_heard_[decode] = std::chrono::steady_clock::now();
  }
  if (kind == kStatus) {
    const EngineStats stats = engine_->stats();
    const int busy = std::max(static_cast<int>(stats.running + stats.waiting), tasks_in_flight());
    reply(decode, encode_status({instance_, std::max(0, max_num_seqs_ - busy), format_}));
  } else if (kind == kTask) {
    start_task(decode, message);
  } else if (kind == kCancel) {
    const std::string wire_id = decode_outcome(message).id;
    std::string engine_id;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto found = tasks_.find(wire_id);
      if (found == tasks_.end() || found->second.decode != decode) return;
      engine_id = found->second.engine_id;
    }
    engine_->abort(engine_id);
  } else {
    fail("unknown message kind \"", kind, "\"");
  }
}

void PrefillServer::start_task(const std::string& decode, zmq::multipart_t& message) {
  TaskMessage task;
  try {
    task = decode_task(message);
  } catch (const Error& error) {
    // Without a readable id the decode instance learns of it by its timeout.
    log_warning("prefill role: a malformed task was refused: ", error.what());
    return;
  }
  auto refuse = [&](const std::string& why) { reply(decode, encode_outcome(kFailed, {task.id, why})); };
  if (task.format != format_) {
    refuse(str_cat("the prefill instance runs ", format_.describe(), " but the decode instance ", task.format.describe()));
    return;
  }
  GenerateRequest request;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (tasks_.count(task.id) != 0) return;  // a duplicate: the first one runs
    // Decode instances send only to free seats; a queue past this is a misbehaving peer.
    const size_t most = 4 * static_cast<size_t>(max_num_seqs_);
    if (tasks_.size() >= most) {
      refuse(str_cat("the prefill instance already holds ", tasks_.size(), " tasks, its most (4 x --max-num-seqs)"));
      return;
    }
    request.id = str_cat("pd-", next_engine_id_++, "-", task.id);
    tasks_[task.id] = {decode, request.id};
  }
  // One greedy token: the engine computes every position's keys and values on the way;
  // the decode instance samples the real first token itself.
  const int64_t end = static_cast<int64_t>(task.tokens.size());
  request.prompt = std::move(task.tokens);
  request.params.max_tokens = 1;
  request.params.temperature = 0.0f;
  request.params.ignore_eos = true;
  auto layer_export = std::make_shared<LayerExport>(*this, decode, task.id, format_.kv_layers, task.first_position, end);
  request.kv_export = layer_export;
  const std::string wire_id = task.id;
  try {
    engine_->submit(std::move(request), [this, decode, wire_id, layer_export](RequestOutput output) {
      if (!output.finished()) return;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        tasks_.erase(wire_id);
      }
      std::string error = output.error;
      if (error.empty() && output.finish_reason == FinishReason::kAbort) error = "the prefill instance aborted the task";
      if (error.empty() && !layer_export->complete()) error = "internal: not every layer was sent";
      send_from_engine(decode, error.empty() ? encode_outcome(kDone, {wire_id, "", steady_now_ns()})
                                             : encode_outcome(kFailed, {wire_id, error}));
    });
  } catch (const Error& error) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      tasks_.erase(wire_id);
    }
    refuse(error.what());
  }
}

void PrefillServer::abort_tasks_of_silent_decodes() {
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::string> aborted;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto heard = last_heard_.begin(); heard != last_heard_.end();) {
      if (now - heard->second <= kSilenceLimit) {
        ++heard;
        continue;
      }
      for (const auto& [wire_id, task] : tasks_)
        if (task.decode == heard->first) aborted.push_back(task.engine_id);
      heard = last_heard_.erase(heard);
    }
  }
  if (!aborted.empty())
    log_warning("prefill role: a decode instance fell silent for ", kSilenceLimit.count(), " ms; aborting its ",
                aborted.size(), " task(s)");
  for (const std::string& engine_id : aborted) engine_->abort(engine_id);
}

}  // namespace ernie::disagg
