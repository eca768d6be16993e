// Turns an OpenAI-style conversation into the prompt text a model was trained on, by
// rendering the model's Hugging Face chat template (tokenizer_config.json
// "chat_template" or chat_template.jinja) the way transformers and FastDeploy do.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "text/jinja/template.h"

namespace ernie {

// What the server passes for one request.
struct ChatTemplateInputs {
  nlohmann::ordered_json messages;  // OpenAI messages array (content may be string or list of parts)
  nlohmann::ordered_json tools;     // null or array
  bool add_generation_prompt = true;
  nlohmann::ordered_json extra;  // chat_template_kwargs, copied into the context (e.g. enable_thinking)
};

// The resource budget of one render.
using ChatTemplateLimits = jinja::Limits;

class ChatTemplate {
 public:
  // `special_tokens` come from the tokenizer: bos_token, eos_token, unk_token,
  // pad_token, cls_token, sep_token, mask_token, ... as strings. Throws ernie::Error
  // when the template does not parse.
  ChatTemplate(std::string source, std::map<std::string, std::string> special_tokens);

  // The template's variables: `messages` (content given as a list of only text parts
  // is joined into one string, as the ERNIE text templates expect a string), `tools`
  // (only when not null), `add_generation_prompt`, every special token, then each key
  // of `extra` not already present (as FastDeploy copies chat_template_kwargs).
  // Throws ernie::Error on template errors, including raise_exception() messages, and
  // when the render exceeds `limits` (time, output size, string and list sizes, total
  // work; see jinja::Limits for the defaults). A server rendering templates that
  // clients send should pass its own time limit and output cap.
  std::string render(const ChatTemplateInputs& inputs, const ChatTemplateLimits& limits = ChatTemplateLimits{}) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::map<std::string, std::string> special_tokens_;
  jinja::Template template_;
};

}  // namespace ernie
