#include "text/chat_template.h"

#include <algorithm>
#include <utility>

#include "util/error.h"

namespace ernie {

namespace {

using nlohmann::ordered_json;

jinja::Template parse_chat_template(const std::string& source) {
  try {
    return jinja::Template::parse(source);
  } catch (const Error& e) {
    fail("invalid chat template: ", e.what());
  }
}

bool is_text_part(const ordered_json& part) {
  return part.is_object() && part.value("type", "") == "text" && part.contains("text") && part["text"].is_string();
}

// OpenAI lets content be a list of parts. Text-only lists become one string (parts
// concatenated in order, as the ERNIE VL template joins parts), because the text
// templates concatenate `content` with strings; lists with other parts (images) are
// left for templates that understand them.
ordered_json normalize_messages(const ordered_json& messages) {
  if (!messages.is_array()) fail("chat messages must be a JSON array of message objects, got ", messages.type_name());
  ordered_json out = messages;
  for (auto& message : out) {
    if (!message.is_object()) fail("each chat message must be a JSON object, got ", message.type_name());
    auto content = message.find("content");
    if (content == message.end() || !content->is_array() || content->empty()) continue;
    if (!std::all_of(content->begin(), content->end(), is_text_part)) continue;
    std::string text;
    for (const auto& part : *content) text += part["text"].get<std::string>();
    *content = std::move(text);
  }
  return out;
}

}  // namespace

ChatTemplate::ChatTemplate(std::string source, std::map<std::string, std::string> special_tokens)
    : source_(std::move(source)), special_tokens_(std::move(special_tokens)), template_(parse_chat_template(source_)) {}

std::string ChatTemplate::render(const ChatTemplateInputs& inputs, const ChatTemplateLimits& limits) const {
  ordered_json context = ordered_json::object();
  context["messages"] = normalize_messages(inputs.messages);
  if (!inputs.tools.is_null()) {
    if (!inputs.tools.is_array()) fail("chat tools must be null or a JSON array, got ", inputs.tools.type_name());
    context["tools"] = inputs.tools;
  }
  context["add_generation_prompt"] = inputs.add_generation_prompt;
  for (const auto& [name, text] : special_tokens_) context[name] = text;
  if (!inputs.extra.is_null()) {
    if (!inputs.extra.is_object()) {
      fail("chat_template_kwargs must be a JSON object, got ", inputs.extra.type_name());
    }
    for (const auto& [key, value] : inputs.extra.items()) {
      if (!context.contains(key)) context[key] = value;
    }
  }
  try {
    return template_.render(context, limits);
  } catch (const Error& e) {
    fail("chat template error: ", e.what());
  }
}

}  // namespace ernie
