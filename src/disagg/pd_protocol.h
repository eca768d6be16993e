// The wire protocol between a decode instance and its prefill instances (prefill/decode
// disaggregation, FastDeploy's "splitwise"), over ZeroMQ: the decode instance's DEALER
// socket talks to each prefill instance's ROUTER socket (its --engine-worker-queue-port),
// over TCP between machines or a Unix socket (ZeroMQ ipc://) on one machine.
//
// Every message is multipart; its first frame names its kind:
//   decode -> prefill   status                        liveness probe, every kStatusPeriod
//                       task   [json] [int32 tokens]  compute these positions' keys and values
//                       cancel [json]                 forget a task
//   prefill -> decode   status [json]                 free seats, instance id, KV format
//                       kv     [id] [KvLayerHeader] [rows]   one layer of a run of positions
//                       done   [json]                 every layer of the task was sent
//                       failed [json]                 the task cannot be done; "error" says why
// A task's id is the request id with its attempt number, so the rows of an abandoned
// attempt can never be taken for a retry's.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>


namespace ernie::disagg {

inline constexpr std::string_view kStatus = "status";
inline constexpr std::string_view kTask = "task";
inline constexpr std::string_view kCancel = "cancel";
inline constexpr std::string_view kKv = "kv";
inline constexpr std::string_view kDone = "done";
inline constexpr std::string_view kFailed = "failed";

// How often the decode instance probes each prefill instance, and the silence after
// which a prefill instance counts as gone (its tasks are retried or computed locally);
// a prefill instance aborts the tasks of a decode instance silent that long.
inline constexpr std::chrono::milliseconds kStatusPeriod{200};
inline constexpr std::chrono::milliseconds kSilenceLimit{2000};
// The largest message a prefill instance accepts from a decode instance (a task is its
// prompt's token ids and a little JSON); a peer sending more is disconnected by ZeroMQ.
inline constexpr int64_t kMaxTaskMessageBytes = 64 << 20;

// What both instances must agree on for transferred keys and values to be the ones the
// decode instance would have computed: the model's shape, its quantization and the KV
// row format. Compared as a whole; `describe` is for error messages.
struct KvFormat {
  int kv_layers = 0;
  uint64_t row_bytes = 0;
  std::string model;  // architecture, shape and quantization

  bool operator==(const KvFormat&) const = default;
  std::string describe() const;
};

// One layer of keys and values for positions [first, first + count): the frame before
// the rows. Both ends are little-endian machines; `magic` catches anything else.
struct KvLayerHeader {
  uint32_t magic = kMagic;
  int32_t layer = 0;
  int64_t first = 0;
  int64_t count = 0;
  static constexpr uint32_t kMagic = 0x31564b45;  // "EKV1"
};

struct TaskMessage {
  std::string id;  // wire id: request id and attempt
  int64_t first_position = 0;
  KvFormat format;
  std::vector<int32_t> tokens;
};

struct StatusMessage {
  std::string instance;  // random per process start: a restarted prefill instance is a new one
  int free_seats = 0;
  KvFormat format;
};

zmq::multipart_t encode_task(const TaskMessage& task);
// Throws ernie::Error naming what is malformed.
TaskMessage decode_task(zmq::multipart_t& message);
zmq::multipart_t encode_status(const StatusMessage& status);
StatusMessage decode_status(const zmq::multipart_t& message);
// done / failed / cancel carry {"id", "error"?, "finished_ns"?}: finished_ns is the
// prefill instance's steady clock when it finished computing (done only).
struct Outcome {
  std::string id;
  std::string error;
  int64_t finished_ns = 0;
};
zmq::multipart_t encode_outcome(std::string_view kind, const Outcome& outcome);
Outcome decode_outcome(const zmq::multipart_t& message);
int64_t steady_now_ns();

// The wire id of a request's attempt, and back.
std::string task_wire_id(const std::string& request_id, int attempt);
std::string request_id_of(const std::string& wire_id);

// Where a prefill instance listening on `port` takes connections from its own machine
// (a Unix socket in $TMPDIR, else /tmp).
std::string local_endpoint(int port);

// A random instance id.
std::string new_instance_id();

}  // namespace ernie::disagg
