#include "text/jinja/args.h"

#include <algorithm>

#include "util/error.h"

namespace ernie::jinja {

BoundArgs::BoundArgs(std::string_view callee, const CallArgs& args, std::vector<std::string_view> params)
    : callee_(callee), params_(std::move(params)), values_(params_.size()), given_(params_.size(), false) {
  if (args.positional.size() > params_.size()) {
    fail(callee_, "() takes at most ", params_.size(), " argument(s) (", args.positional.size(), " given)");
  }
  for (size_t i = 0; i < args.positional.size(); ++i) {
    values_[i] = args.positional[i];
    given_[i] = true;
  }
  for (const auto& [key, value] : args.keyword) {
    const auto it = std::find(params_.begin(), params_.end(), key);
    if (it == params_.end()) fail(callee_, "() got an unexpected keyword argument '", key, "'");
    const auto i = static_cast<size_t>(it - params_.begin());
    if (given_[i]) fail(callee_, "() got multiple values for argument '", key, "'");
    values_[i] = value;
    given_[i] = true;
  }
}

const Value& BoundArgs::required(size_t i) const {
  if (!given_[i]) fail(callee_, "() missing required argument '", params_[i], "'");
  return values_[i];
}

int64_t BoundArgs::get_int(size_t i, int64_t fallback) const {
  if (!given_[i]) return fallback;
  return expect_int(values_[i], str_cat(callee_, "() argument '", params_[i], "'"));
}

bool BoundArgs::get_truthy(size_t i, bool fallback) const { return given_[i] ? truthy(values_[i]) : fallback; }

std::optional<std::string> BoundArgs::get_string(size_t i) const {
  if (!given_[i] || values_[i].is_none()) return std::nullopt;
  return expect_string(values_[i], str_cat(callee_, "() argument '", params_[i], "'"));
}

int64_t expect_int(const Value& v, std::string_view what) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_integral()) fail(what, " must be an integer, got '", type_name(v), "'");
  return v.as_int();
}

const std::string& expect_string(const Value& v, std::string_view what) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_string()) fail(what, " must be a string, got '", type_name(v), "'");
  return v.as_string();
}

}  // namespace ernie::jinja
