#include "serving/router.h"

#include "serving/http_messages.h"
#include "util/error.h"
#include "util/log.h"

namespace ernie {
namespace {

using nlohmann::json;

int port_field(const json& body, const char* name) {
  const auto found = body.find(name);
  if (found == body.end() || !found->is_number_integer() || *found < 1 || *found > 65535)
    fail("\"", name, "\" must be a port number in 1..65535");
  return found->get<int>();
}

HttpResponse json_response(int status, const json& body) { return {status, "application/json", body.dump(), {}}; }

HttpResponse error_response(int status, const std::string& message) {
  return {status, "application/json", http_error_body(message, "invalid_request_error", status), {}};
}

}  // namespace

json RouterRegistry::register_instance(const json& body, const std::string& peer_host) {
  if (!body.is_object()) fail("the body must be a JSON object");
  const auto role_field = body.find("role");
  if (role_field == body.end() || !role_field->is_string()) fail("\"role\" must be prefill, decode or mixed");
  const std::string role = role_field->get<std::string>();
  if (role != "prefill" && role != "decode" && role != "mixed") fail("\"role\" must be prefill, decode or mixed, got \"", role, "\"");
  std::string host = body.value("host", std::string());
  if (host.empty() || host == "0.0.0.0") host = peer_host;
  if (host.size() > 255 || host.find_first_of("/ @?#") != std::string::npos) fail("\"host\" is not a host name or address");
  Instance instance;
  instance.role = role;
  instance.base_url = str_cat("http://", host, ":", port_field(body, "port"));
  if (role == "prefill") instance.prefill_endpoint = str_cat("tcp://", host, ":", port_field(body, "engine_worker_queue_port"));
  instance.last_seen = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  expire();
  const auto existing = instances_.find(instance.base_url);
  if (existing == instances_.end() && instances_.size() >= kMaxInstances)
    fail("the router already has ", instances_.size(), " instances registered, its most");
  if (existing == instances_.end()) {
    log_info("router: ", role, " instance ", instance.base_url, " registered");
  } else {
    instance.in_flight = existing->second.in_flight;
  }
  instances_[instance.base_url] = instance;
  json endpoints = json::array();
  for (const auto& [url, registered] : instances_)
    if (registered.role == "prefill") endpoints.push_back(registered.prefill_endpoint);
  return {{"prefill_endpoints", endpoints}};
}

void RouterRegistry::expire() {
  const auto now = std::chrono::steady_clock::now();
  for (auto instance = instances_.begin(); instance != instances_.end();) {
    if (now - instance->second.last_seen <= kInstanceTtl) {
      ++instance;
      continue;
    }
    log_warning("router: ", instance->second.role, " instance ", instance->first, " stopped sending heartbeats; dropped");
    instance = instances_.erase(instance);
  }
}

std::string RouterRegistry::take_target() {
  std::lock_guard<std::mutex> lock(mutex_);
  expire();
  Instance* best = nullptr;
  for (const char* role : {"decode", "mixed"}) {
    for (auto& [url, instance] : instances_)
      if (instance.role == role && (best == nullptr || instance.in_flight < best->in_flight)) best = &instance;
    if (best != nullptr) break;
  }
  if (best == nullptr) return "";
  ++best->in_flight;
  return best->base_url;
}

void RouterRegistry::release(const std::string& target) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = instances_.find(target);
  if (found != instances_.end() && found->second.in_flight > 0) --found->second.in_flight;
}

void RouterRegistry::forget(const std::string& target) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (instances_.erase(target) != 0) log_warning("router: ", target, " cannot be reached; dropped until it registers again");
}

json RouterRegistry::list() const {
  std::lock_guard<std::mutex> lock(mutex_);
  json out = json::array();
  const auto now = std::chrono::steady_clock::now();
  for (const auto& [url, instance] : instances_) {
    json entry = {{"role", instance.role}, {"url", url}, {"in_flight", instance.in_flight},
                  {"seconds_since_heartbeat", std::chrono::duration<double>(now - instance.last_seen).count()}};
    if (!instance.prefill_endpoint.empty()) entry["prefill_endpoint"] = instance.prefill_endpoint;
    out.push_back(entry);
  }
  return {{"instances", out}};
}

void RouterService::handle(HttpRequest request, std::shared_ptr<HttpResponder> responder) {
  if (request.path == "/register") {
    if (request.method != "POST") return responder->respond(error_response(405, "POST /register"));
    // A registration is a few fields: this parse runs on the IO thread, so it stays tiny.
    if (request.body.size() > 4096) return responder->respond(error_response(413, "a registration is at most 4096 bytes"));
    try {
      const std::string peer = request.remote_address.substr(0, request.remote_address.rfind(':'));
      responder->respond(json_response(200, registry_.register_instance(json::parse(request.body), peer)));
    } catch (const json::exception& error) {
      responder->respond(error_response(400, str_cat("the body is not JSON: ", error.what())));
    } catch (const Error& error) {
      responder->respond(error_response(400, error.what()));
    }
    return;
  }
  if (request.path == "/registered") return responder->respond(json_response(200, registry_.list()));
  if (request.path == "/health") return responder->respond({200, "text/plain", "", {}});
  forward(std::move(request), std::move(responder), 3);
}

void RouterService::forward(HttpRequest request, std::shared_ptr<HttpResponder> responder, int attempts_left) {
  const std::string target = registry_.take_target();
  if (target.empty())
    return responder->respond(error_response(503, "no decode or mixed instance is registered with this router"));
  proxy_.forward(target, std::move(request), std::move(responder), [this, target, attempts_left](HttpProxy::Outcome outcome) {
    registry_.release(target);
    if (outcome.connected) return;
    registry_.forget(target);
    if (attempts_left > 1) return forward(std::move(outcome.request), std::move(outcome.responder), attempts_left - 1);
    outcome.responder->respond(error_response(502, "no registered instance could be reached: " + outcome.error));
  });
}

}  // namespace ernie
