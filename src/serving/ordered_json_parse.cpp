#include "serving/ordered_json_parse.h"

#include <string>
#include <unordered_map>
#include <vector>

namespace ernie {
namespace {

using ordered_json = nlohmann::ordered_json;
using Members = std::vector<std::pair<const std::string, ordered_json>>;

// Builds the value with a stack of the open containers. A container's earlier children
// are finished before it grows, so pointers to the open ones stay valid.
class OrderedBuilder : public nlohmann::json_sax<ordered_json> {
 public:
  ordered_json root;

  bool null() override { return put(nullptr); }
  bool boolean(bool value) override { return put(value); }
  bool number_integer(number_integer_t value) override { return put(value); }
  bool number_unsigned(number_unsigned_t value) override { return put(value); }
  bool number_float(number_float_t value, const string_t&) override { return put(value); }
  bool string(string_t& value) override { return put(std::move(value)); }
  bool binary(binary_t& value) override { return put(ordered_json::binary(std::move(value))); }
  bool start_object(std::size_t) override { return open(ordered_json::object()); }
  bool start_array(std::size_t) override { return open(ordered_json::array()); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& key) override {
    Open& object = open_.back();
    Members& members = static_cast<Members&>(object.value->get_ref<ordered_json::object_t&>());
    const auto [found, inserted] = object.keys.try_emplace(key, members.size());
    if (inserted) members.emplace_back(std::move(key), nullptr);
    next_ = &members[found->second].second;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& error) override {
    throw nlohmann::json::parse_error::create(101, 0, error.what(), nullptr);
  }

 private:
  struct Open {
    ordered_json* value;
    std::unordered_map<std::string, size_t> keys;  // objects: each key's place
  };

  // Where the next value goes: the root, the member just keyed, or the open array's end.
  ordered_json* slot() {
    if (open_.empty()) return &root;
    if (open_.back().value->is_object()) return next_;
    open_.back().value->push_back(nullptr);
    return &open_.back().value->back();
  }
  bool put(ordered_json value) {
    *slot() = std::move(value);
    return true;
  }
  bool open(ordered_json empty) {
    ordered_json* target = slot();
    *target = std::move(empty);
    open_.push_back({target, {}});
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }

  std::vector<Open> open_;
  ordered_json* next_ = nullptr;
};

}  // namespace

ordered_json parse_ordered_json(std::string_view text) {
  OrderedBuilder builder;
  ordered_json::sax_parse(text, &builder);
  return std::move(builder.root);
}

}  // namespace ernie
