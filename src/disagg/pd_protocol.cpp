#include "disagg/pd_protocol.h"

#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "util/error.h"

namespace ernie::disagg {
namespace {

using nlohmann::json;

json format_json(const KvFormat& format) {
  return {{"kv_layers", format.kv_layers}, {"row_bytes", format.row_bytes}, {"model", format.model}};
}

KvFormat format_from(const json& value) {
  KvFormat format;
  format.kv_layers = value.at("kv_layers").get<int>();
  format.row_bytes = value.at("row_bytes").get<uint64_t>();
  format.model = value.at("model").get<std::string>();
  return format;
}

json parse_body(const zmq::multipart_t& message, size_t frame, std::string_view kind) {
  if (message.size() <= frame) fail("a \"", kind, "\" message has ", message.size(), " frames, expected more than ", frame);
  try {
    return json::parse(message.at(frame).to_string_view());
  } catch (const json::exception& error) {
    fail("a \"", kind, "\" message carries bad JSON: ", error.what());
  }
}

}  // namespace

std::string KvFormat::describe() const {
  return str_cat(model, ", ", kv_layers, " KV layers of ", row_bytes, "-byte rows");
}

zmq::multipart_t encode_task(const TaskMessage& task) {
  zmq::multipart_t message;
  message.addstr(std::string(kTask));
  message.addstr(json{{"id", task.id}, {"first_position", task.first_position}, {"format", format_json(task.format)}}.dump());
  message.addmem(task.tokens.data(), task.tokens.size() * sizeof(int32_t));
  return message;
}

TaskMessage decode_task(zmq::multipart_t& message) {
  const json body = parse_body(message, 1, kTask);
  if (message.size() != 3) fail("a \"task\" message has ", message.size(), " frames, expected 3");
  TaskMessage task;
  try {
    task.id = body.at("id").get<std::string>();
    task.first_position = body.at("first_position").get<int64_t>();
    task.format = format_from(body.at("format"));
  } catch (const json::exception& error) {
    fail("a \"task\" message lacks a field: ", error.what());
  }
  const zmq::message_t& tokens = message.at(2);
  if (tokens.size() % sizeof(int32_t) != 0 || tokens.size() == 0)
    fail("a \"task\" message's token frame has ", tokens.size(), " bytes, not a positive multiple of 4");
  task.tokens.resize(tokens.size() / sizeof(int32_t));
  std::memcpy(task.tokens.data(), tokens.data(), tokens.size());
  if (task.first_position < 0 || task.first_position >= static_cast<int64_t>(task.tokens.size()))
    fail("a \"task\" message asks for positions from ", task.first_position, " of ", task.tokens.size(), " tokens");
  return task;
}

zmq::multipart_t encode_status(const StatusMessage& status) {
  zmq::multipart_t message;
  message.addstr(std::string(kStatus));
  message.addstr(
      json{{"instance", status.instance}, {"free_seats", status.free_seats}, {"format", format_json(status.format)}}.dump());
  return message;
}

StatusMessage decode_status(const zmq::multipart_t& message) {
  const json body = parse_body(message, 1, kStatus);
  StatusMessage status;
  try {
    status.instance = body.at("instance").get<std::string>();
    status.free_seats = body.at("free_seats").get<int>();
    status.format = format_from(body.at("format"));
  } catch (const json::exception& error) {
    fail("a \"status\" message lacks a field: ", error.what());
  }
  return status;
}

zmq::multipart_t encode_outcome(std::string_view kind, const Outcome& outcome) {
  zmq::multipart_t message;
  message.addstr(std::string(kind));
  json body = {{"id", outcome.id}};
  if (!outcome.error.empty()) body["error"] = outcome.error;
  if (outcome.finished_ns != 0) body["finished_ns"] = outcome.finished_ns;
  message.addstr(body.dump());
  return message;
}

Outcome decode_outcome(const zmq::multipart_t& message) {
  const json body = parse_body(message, 1, message.empty() ? "?" : message.at(0).to_string_view());
  try {
    return {body.at("id").get<std::string>(), body.value("error", std::string()), body.value("finished_ns", int64_t{0})};
  } catch (const json::exception& error) {
    fail("an outcome message lacks its id: ", error.what());
  }
}

int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string local_endpoint(int port) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  return str_cat("ipc://", dir, "/ernie-pd-", port, ".ipc");
}

std::string task_wire_id(const std::string& request_id, int attempt) { return str_cat(request_id, "#", attempt); }

std::string request_id_of(const std::string& wire_id) {
  const size_t hash = wire_id.rfind('#');
  return hash == std::string::npos ? wire_id : wire_id.substr(0, hash);
}

std::string new_instance_id() {
  std::random_device device;
  return str_cat(std::hex, device(), device());
}

}  // namespace ernie::disagg
