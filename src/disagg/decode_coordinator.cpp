#include "disagg/decode_coordinator.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include "util/error.h"
#include "util/log.h"

namespace ernie::disagg {

std::string prefill_endpoint(const std::string& entry) {
  const size_t colon = entry.rfind(':');
  const std::string host = colon == std::string::npos ? "" : entry.substr(0, colon);
  const std::string port_text = colon == std::string::npos ? entry : entry.substr(colon + 1);
  int port = 0;
  const auto [end, error] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (error != std::errc() || end != port_text.data() + port_text.size() || port < 1 || port > 65535 ||
      (colon != std::string::npos && host.empty()))
    fail("--innode-prefill-ports entry \"", entry, "\" is not PORT (a prefill instance on this machine) or HOST:PORT");
  return host.empty() ? local_endpoint(port) : str_cat("tcp://", host, ":", port);
}

DecodeCoordinator::DecodeCoordinator(KvBlockPool& pool, KvFormat format, DecodeOptions options)
    : pool_(pool), format_(std::move(format)), options_(std::move(options)), context_(1),
      wake_pull_(context_, zmq::socket_type::pull), wake_push_(context_, zmq::socket_type::push) {
  for (zmq::socket_t* socket : {&wake_pull_, &wake_push_}) socket->set(zmq::sockopt::linger, 0);
  const std::string wake = str_cat("inproc://decode-wake-", static_cast<const void*>(this));
  wake_pull_.bind(wake);
  wake_push_.connect(wake);
  for (const std::string& endpoint : options_.prefill_endpoints) connect(endpoint);
  log_info("decode role: prompts go to ", prefills_.size(), " prefill instance(s); KV format ", format_.describe());
  thread_ = std::thread([this] { run(); });
}

DecodeCoordinator::~DecodeCoordinator() { stop(); }

void DecodeCoordinator::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void DecodeCoordinator::connect(const std::string& endpoint) {
  Prefill prefill;
  prefill.endpoint = endpoint;
  prefill.socket = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
  prefill.socket->set(zmq::sockopt::linger, 0);
  prefill.socket->set(zmq::sockopt::rcvhwm, 0);
  prefill.socket->set(zmq::sockopt::sndhwm, 0);
  // Queue nothing for a prefill instance that is not connected: a task must never reach
  // a restarted instance after the decode instance has given up on it.
  prefill.socket->set(zmq::sockopt::immediate, 1);
  prefill.socket->connect(endpoint);
  prefills_.push_back(std::move(prefill));
}

void DecodeCoordinator::set_prefill_endpoints(std::vector<std::string> endpoints) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    new_endpoints_ = std::move(endpoints);
  }
}

void DecodeCoordinator::update_prefills() {
  std::optional<std::vector<std::string>> endpoints;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    endpoints.swap(new_endpoints_);
  }
  if (!endpoints) return;
  for (Prefill& prefill : prefills_)
    prefill.listed = std::find(endpoints->begin(), endpoints->end(), prefill.endpoint) != endpoints->end();
  for (const std::string& endpoint : *endpoints) {
    const bool known = std::any_of(prefills_.begin(), prefills_.end(),
                                   [&](const Prefill& prefill) { return prefill.endpoint == endpoint; });
    if (!known) {
      connect(endpoint);
      log_info("decode role: prefill instance ", endpoint, " joined");
    }
  }
}

void DecodeCoordinator::set_outcome_sink(std::function<void(const std::string&, bool)> sink) { sink_ = std::move(sink); }

TransferStats DecodeCoordinator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void DecodeCoordinator::start(RemotePrefillTask task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Transfer transfer;
    transfer.queued = Clock::now();
    const std::string id = task.request_id;
    transfer.task = std::move(task);
    transfers_[id] = std::move(transfer);
  }
  wake_push_.send(zmq::str_buffer("w"), zmq::send_flags::dontwait);
}

void DecodeCoordinator::cancel(const std::string& request_id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = transfers_.find(request_id);
    if (found == transfers_.end()) return;
    if (found->second.prefill >= 0) cancels_.emplace_back(found->second.prefill, found->second.wire_id);
    transfers_.erase(found);
  }
  wake_push_.send(zmq::str_buffer("w"), zmq::send_flags::dontwait);
}

void DecodeCoordinator::run() {
  std::vector<zmq::pollitem_t> items;
  for (;;) {
    update_prefills();
    items.assign(1, {wake_pull_.handle(), 0, ZMQ_POLLIN, 0});
    for (const Prefill& prefill : prefills_) items.push_back({prefill.socket->handle(), 0, ZMQ_POLLIN, 0});
    zmq::poll(items.data(), items.size(), std::chrono::milliseconds(50));
    zmq::message_t signal;
    while (wake_pull_.recv(signal, zmq::recv_flags::dontwait)) {
    }
    std::vector<std::pair<std::string, bool>> outcomes;
    for (size_t index = 0; index < prefills_.size(); ++index) {
      zmq::multipart_t message;
      while (message.recv(*prefills_[index].socket, ZMQ_DONTWAIT)) {
        try {
          on_prefill_message(static_cast<int>(index), message, outcomes);
        } catch (const std::exception& error) {
          log_warning("decode role: a message from ", prefills_[index].endpoint, " was refused: ", error.what());
        }
        message.clear();
      }
    }
    probe_and_expire();
    dispatch(outcomes);
    std::vector<std::pair<int, std::string>> cancels;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) break;
      cancels.swap(cancels_);
    }
    for (const auto& [prefill, wire_id] : cancels)
      encode_outcome(kCancel, {wire_id, "", 0}).send(*prefills_[static_cast<size_t>(prefill)].socket, ZMQ_DONTWAIT);
    for (const auto& [id, succeeded] : outcomes) sink_(id, succeeded);
  }
}

void DecodeCoordinator::on_prefill_message(int prefill, zmq::multipart_t& message,
                                           std::vector<std::pair<std::string, bool>>& outcomes) {
  if (message.empty()) return;
  const std::string kind = message.at(0).to_string();
  if (kind == kStatus) {
    on_status(prefill, message);
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (kind == kKv) {
    if (message.size() != 4) fail("a \"kv\" message has ", message.size(), " frames, expected 4");
    const std::string wire_id = message.at(1).to_string();
    const auto found = transfers_.find(request_id_of(wire_id));
    // Rows of a cancelled or abandoned attempt: nothing of theirs may be written.
    if (found == transfers_.end() || found->second.wire_id != wire_id || found->second.prefill != prefill) return;
    Transfer& transfer = found->second;
    KvLayerHeader header;
    const zmq::message_t& header_frame = message.at(2);
    const zmq::message_t& rows = message.at(3);
    const int64_t end = static_cast<int64_t>(transfer.task.tokens.size());
    bool valid = header_frame.size() == sizeof header;
    if (valid) std::memcpy(&header, header_frame.data(), sizeof header);
    valid = valid && header.magic == KvLayerHeader::kMagic && header.layer >= 0 && header.layer < format_.kv_layers &&
            header.count > 0 && header.first == transfer.next[static_cast<size_t>(header.layer)] &&
            header.first + header.count <= end &&
            rows.size() == static_cast<size_t>(2 * header.count) * static_cast<size_t>(format_.row_bytes);
    if (!valid) {
      retry_or_compute_here(transfer, "it sent key/value rows out of order or malformed");
      return;
    }
    pool_.write_layer_rows(transfer.task.block_table, header.layer, header.first, header.count,
                           static_cast<const uint8_t*>(rows.data()));
    transfer.next[static_cast<size_t>(header.layer)] += header.count;
    transfer.bytes += static_cast<int64_t>(rows.size());
  } else if (kind == kDone || kind == kFailed) {
    const Outcome outcome = decode_outcome(message);
    const auto found = transfers_.find(request_id_of(outcome.id));
    if (found == transfers_.end() || found->second.wire_id != outcome.id || found->second.prefill != prefill) return;
    Transfer& transfer = found->second;
    const int64_t end = static_cast<int64_t>(transfer.task.tokens.size());
    const bool complete = std::all_of(transfer.next.begin(), transfer.next.end(), [&](int64_t next) { return next == end; });
    if (kind == kFailed || !complete) {
      retry_or_compute_here(transfer, kind == kFailed ? outcome.error : "it reported done before sending every row");
      return;
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - transfer.sent).count();
    const double tail = outcome.finished_ns > 0 ? static_cast<double>(steady_now_ns() - outcome.finished_ns) * 1e-9 : 0.0;
    ++stats_.completed;
    stats_.bytes += transfer.bytes;
    stats_.seconds += seconds;
    stats_.tail_seconds += std::max(0.0, tail);
    log_info("decode role: request ", transfer.task.request_id, ": ", end - transfer.task.first_position,
             " positions' keys and values (", static_cast<double>(transfer.bytes) / 1e6, " MB) from ",
             prefills_[static_cast<size_t>(prefill)].endpoint, " in ", seconds * 1e3, " ms; the last arrived ",
             tail * 1e3, " ms after the prefill finished");
    outcomes.emplace_back(transfer.task.request_id, true);
    transfers_.erase(found);
  } else {
    fail("unknown message kind \"", kind, "\"");
  }
}

void DecodeCoordinator::on_status(int index, const zmq::multipart_t& message) {
  const StatusMessage status = decode_status(message);
  Prefill& prefill = prefills_[static_cast<size_t>(index)];
  const bool restarted = !prefill.instance.empty() && status.instance != prefill.instance;
  prefill.instance = status.instance;
  prefill.last_heard = Clock::now();
  prefill.free_seats = status.free_seats;
  const bool was_usable = prefill.usable;
  prefill.usable = status.format == format_;
  if (!prefill.usable && !prefill.format_reported) {
    log_warning("decode role: prefill instance ", prefill.endpoint, " runs ", status.format.describe(),
              " but this instance runs ", format_.describe(), "; it gets no tasks (start both with the same --model and "
              "--quantization)");
    prefill.format_reported = true;
  }
  if (prefill.usable && !was_usable) log_info("decode role: prefill instance ", prefill.endpoint, " is up");
  if (!restarted) return;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [id, transfer] : transfers_)
    if (transfer.prefill == index) retry_or_compute_here(transfer, "it restarted");
}

void DecodeCoordinator::probe_and_expire() {
  const Clock::time_point now = Clock::now();
  for (size_t index = 0; index < prefills_.size(); ++index) {
    Prefill& prefill = prefills_[index];
    if (now - prefill.last_probe >= kStatusPeriod) {
      zmq::multipart_t probe;
      probe.addstr(std::string(kStatus));
      probe.send(*prefill.socket, ZMQ_DONTWAIT);
      prefill.last_probe = now;
    }
    if (prefill.usable && now - prefill.last_heard > kSilenceLimit) {
      prefill.usable = false;
      log_warning("decode role: prefill instance ", prefill.endpoint, " has not answered for ", kSilenceLimit.count(),
                  " ms; its tasks go elsewhere");
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& [id, transfer] : transfers_)
        if (transfer.prefill == static_cast<int>(index)) retry_or_compute_here(transfer, "it fell silent");
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [id, transfer] : transfers_) {
    if (transfer.prefill < 0 || now < transfer.deadline) continue;
    cancels_.emplace_back(transfer.prefill, transfer.wire_id);
    retry_or_compute_here(transfer, str_cat("it took longer than the transfer timeout (",
                                            options_.transfer_timeout.count(), " ms)"));
  }
}

int DecodeCoordinator::pick_prefill(const Transfer& transfer) const {
  int best = -1;
  for (size_t index = 0; index < prefills_.size(); ++index) {
    const Prefill& prefill = prefills_[index];
    if (!prefill.usable || !prefill.listed || prefill.free_seats <= 0 || transfer.tried.count(static_cast<int>(index)) != 0)
      continue;
    if (best < 0 || prefill.free_seats > prefills_[static_cast<size_t>(best)].free_seats) best = static_cast<int>(index);
  }
  return best;
}

void DecodeCoordinator::dispatch(std::vector<std::pair<std::string, bool>>& outcomes) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Transfer*> pending;
  for (auto& [id, transfer] : transfers_)
    if (transfer.prefill < 0) pending.push_back(&transfer);
  std::sort(pending.begin(), pending.end(), [](const Transfer* a, const Transfer* b) { return a->queued < b->queued; });
  const Clock::time_point now = Clock::now();
  std::vector<std::string> computed_here;
  for (Transfer* transfer : pending) {
    const int chosen = pick_prefill(*transfer);
    if (chosen >= 0) {
      Prefill& prefill = prefills_[static_cast<size_t>(chosen)];
      TaskMessage task;
      task.id = task_wire_id(transfer->task.request_id, ++transfer->attempt);
      task.first_position = transfer->task.first_position;
      task.format = format_;
      task.tokens = transfer->task.tokens;
      transfer->tried.insert(chosen);
      if (!encode_task(task).send(*prefill.socket, ZMQ_DONTWAIT)) continue;  // not connected: another next round
      --prefill.free_seats;  // until its next status says otherwise
      transfer->prefill = chosen;
      transfer->wire_id = task.id;
      transfer->next.assign(static_cast<size_t>(format_.kv_layers), transfer->task.first_position);
      transfer->bytes = 0;
      transfer->sent = now;
      transfer->deadline = now + options_.transfer_timeout;
      continue;
    }
    const bool any_untried = std::any_of(prefills_.begin(), prefills_.end(), [&](const Prefill& prefill) {
      return prefill.usable && prefill.listed && transfer->tried.count(static_cast<int>(&prefill - prefills_.data())) == 0;
    });
    std::string why;
    if (options_.changeable) {
      why = "no prefill instance has a free seat (FD_PD_CHANGEABLE=1)";
    } else if (!any_untried && (!transfer->tried.empty() || now - transfer->queued > kSilenceLimit)) {
      why = transfer->tried.empty() ? "no prefill instance is reachable" : "every prefill instance failed it";
    } else {
      continue;  // wait for a free seat, as FastDeploy's decode instance polls for one
    }
    if (!transfer->tried.empty() || !options_.changeable)
      log_warning("decode role: request ", transfer->task.request_id, " is computed here: ", why);
    ++stats_.computed_here;
    computed_here.push_back(transfer->task.request_id);
  }
  for (const std::string& id : computed_here) {
    transfers_.erase(id);
    outcomes.emplace_back(id, false);
  }
}

void DecodeCoordinator::retry_or_compute_here(Transfer& transfer, const std::string& why) {
  // The next dispatch decides between another prefill instance and here.
  log_warning("decode role: request ", transfer.task.request_id, ": attempt ", transfer.attempt, " on ",
              prefills_[static_cast<size_t>(transfer.prefill)].endpoint, " failed: ", why);
  transfer.prefill = -1;
  transfer.wire_id.clear();
  transfer.queued = Clock::now();
  if (transfer.attempt >= options_.max_attempts) {
    // Out of attempts: mark every instance tried so the next dispatch computes it here.
    for (size_t index = 0; index < prefills_.size(); ++index) transfer.tried.insert(static_cast<int>(index));
  } else {
    ++stats_.retried;
  }
}

}  // namespace ernie::disagg
