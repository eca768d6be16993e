// ChatTemplate with the ERNIE 4.5 templates of the golden checkpoints: the exact prompts
// given in shared/golden/README.md and shared/reference/ernie45-model-spec.md §7, and
// how the server's inputs (tools, chat_template_kwargs, content parts, special tokens)
// reach the template.
#include "text/chat_template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "support/test_support.h"
#include "text/tokenizer_trainer.h"
#include "util/error.h"

namespace ernie {
namespace {

using nlohmann::ordered_json;
using ::testing::HasSubstr;

// The template and special tokens as the tokenizer would hand them over.
ChatTemplate load_template(const std::string& model) {
  const ordered_json config = ordered_json::parse(testing::read_file(testing::golden_model_dir(model) + "/tokenizer_config.json"));
  std::map<std::string, std::string> tokens;
  for (const char* name : {"bos_token", "eos_token", "unk_token", "pad_token", "cls_token", "sep_token", "mask_token"}) {
    if (config.contains(name) && config[name].is_string()) tokens[name] = config[name].get<std::string>();
  }
  return ChatTemplate(config.at("chat_template").get<std::string>(), tokens);
}

ordered_json four_turns() {
  return ordered_json::parse(R"([
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "2+2 equals 4."},
    {"role": "user", "content": "And 3+3?"}])");
}

ChatTemplateInputs inputs(ordered_json messages) {
  ChatTemplateInputs in;
  in.messages = std::move(messages);
  return in;
}

TEST(ErnieTextChatTemplate, RendersTheGoldenExample) {
  const ChatTemplate t = load_template("tiny-dense");
  EXPECT_EQ(t.render(inputs(four_turns())),
            "<|begin_of_sentence|>You are a helpful assistant.\nUser: What is 2+2?\nAssistant: 2+2 equals "
            "4.<|end_of_sentence|>User: And 3+3?\nAssistant: ");
}

TEST(ErnieTextChatTemplate, WithoutGenerationPrompt) {
  const ChatTemplate t = load_template("tiny-dense");
  ChatTemplateInputs in = inputs(four_turns());
  in.add_generation_prompt = false;
  EXPECT_EQ(t.render(in),
            "<|begin_of_sentence|>You are a helpful assistant.\nUser: What is 2+2?\nAssistant: 2+2 equals "
            "4.<|end_of_sentence|>User: And 3+3?\n");
}

TEST(ErnieTextChatTemplate, DropsToolMessagesAndDefinitions) {
  const ChatTemplate t = load_template("tiny-dense");
  ChatTemplateInputs in = inputs(ordered_json::parse(R"([
    {"role": "user", "content": "Weather?"},
    {"role": "tool", "content": "{\"temperature\": 21}"}])"));
  in.tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather"}}])");
  EXPECT_EQ(t.render(in), "<|begin_of_sentence|>User: Weather?\nAssistant: ");
}

TEST(ErnieTextChatTemplate, JoinsTextContentParts) {
  const ChatTemplate t = load_template("tiny-dense");
  const auto messages = ordered_json::parse(R"([
    {"role": "user", "content": [{"type": "text", "text": "What is "}, {"type": "text", "text": "2+2?"}]}])");
  EXPECT_EQ(t.render(inputs(messages)), "<|begin_of_sentence|>User: What is 2+2?\nAssistant: ");
}

// Ours for ERNIE-4.5-VL renders spec §7.3's example: pictures counted across the
// conversation, an empty thought opened by default, <think> alone when thinking is on.
TEST(ErnieVlChatTemplate, RendersTheSpecExample) {
  const ChatTemplate t(std::string(ernie_vl_chat_template()), {});
  const auto messages = ordered_json::parse(R"([
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}, {"type": "text", "text": "Describe the image."}]},
    {"role": "assistant", "content": "A cat on a sofa."},
    {"role": "user", "content": [{"type": "text", "text": "And this? "}, {"type": "image_url", "image_url": {"url": "data:,"}},
                                 {"type": "video_url", "video_url": {"url": "data:,"}}]}])");
  const std::string conversation =
      "<|begin_of_sentence|>You are a helpful assistant.\n"
      "User: Picture 1:<|IMAGE_START|><|image@placeholder|><|IMAGE_END|>Describe the image."
      "\nAssistant: A cat on a sofa.<|end_of_sentence|>"
      "User: And this? Picture 2:<|IMAGE_START|><|image@placeholder|><|IMAGE_END|>"
      "Video 1:<|VIDEO_START|><|video@placeholder|><|VIDEO_END|>\nAssistant: ";
  EXPECT_EQ(t.render(inputs(messages)), conversation + "<think>\n\n</think>\n\n");
  ChatTemplateInputs thinking = inputs(messages);
  thinking.extra["enable_thinking"] = true;
  EXPECT_EQ(t.render(thinking), conversation + "<think>");
}

// The golden tiny-thinking template, and ours that `ernie synth --thinking-markers`
// writes: both render spec §7.2's examples.
std::vector<ChatTemplate> thinking_templates() {
  std::vector<ChatTemplate> templates;
  templates.push_back(load_template("tiny-thinking"));
  templates.emplace_back(std::string(ernie_thinking_chat_template()), std::map<std::string, std::string>{});
  return templates;
}

TEST(ErnieThinkingChatTemplate, RendersTheSpecExample) {
  for (const ChatTemplate& t : thinking_templates()) {
    EXPECT_EQ(t.render(inputs(four_turns())),
              "<|im_start|>system\n<system_setting>\nYou are a helpful assistant.\n</system_setting>\n\n"
              "<global_setting>\nthink_mode=True\n</global_setting><|im_end|>\n\n"
              "<|im_start|>user\nWhat is 2+2?<|im_end|>\n\n"
              "<|im_start|>assistant\n<response>\n2+2 equals 4.\n</response>\n<|im_end|>\n\n"
              "<|im_start|>user\nAnd 3+3?<|im_end|>\n\n"
              "<|im_start|>assistant\n<think>\n");
  }
}

TEST(ErnieThinkingChatTemplate, RendersToolsAndToolCalls) {
  for (const ChatTemplate& t : thinking_templates()) {
    ChatTemplateInputs in = inputs(ordered_json::parse(R"([
      {"role": "user", "content": "Weather in Beijing?"},
      {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Beijing\"}"}}]},
      {"role": "tool", "content": "{\"temperature\": 21}"}])"));
    in.tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
    EXPECT_EQ(t.render(in),
              "<|im_start|>system\n<tool_list>\n"
              R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", )"
              R"("properties": {"city": {"type": "string"}}}}}])"
              "\n</tool_list>\n\n<global_setting>\nthink_mode=True\n</global_setting><|im_end|>\n\n"
              "<|im_start|>user\nWeather in Beijing?<|im_end|>\n\n"
              "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Beijing\"}}\n"
              "</tool_call>\n<|im_end|>\n\n"
              "<|im_start|>tool\n{\"temperature\": 21}<|im_end|>\n\n"
              "<|im_start|>assistant\n<think>\n");
  }
}

TEST(ErnieThinkingChatTemplate, ToolCallArgumentsAsObject) {
  for (const ChatTemplate& t : thinking_templates()) {
    const auto messages = ordered_json::parse(R"([
      {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "lookup", "arguments": {"q": "北京", "n": 2}}}]}])");
    EXPECT_THAT(t.render(inputs(messages)),
                HasSubstr("<tool_call>\n{\"name\": \"lookup\", \"arguments\": {\"q\": \"北京\", \"n\": 2}}\n</tool_call>"));
  }
}

// --- what the context holds ----------------------------------------------------------------

std::string render_probe(const std::string& source, const ChatTemplateInputs& in,
                         std::map<std::string, std::string> tokens = {}) {
  return ChatTemplate(source, std::move(tokens)).render(in);
}

TEST(ChatTemplateContext, ToolsOnlyWhenGiven) {
  const std::string probe = "{{ tools is defined }}|{{ tools|length if tools is defined else '-' }}";
  ChatTemplateInputs in = inputs(ordered_json::array());
  EXPECT_EQ(render_probe(probe, in), "False|-");
  in.tools = ordered_json::array();
  EXPECT_EQ(render_probe(probe, in), "True|0");
}

TEST(ChatTemplateContext, SpecialTokensAndGenerationPrompt) {
  ChatTemplateInputs in = inputs(ordered_json::array());
  in.add_generation_prompt = false;
  EXPECT_EQ(render_probe("{{ bos_token }}{{ eos_token }}{{ cls_token }}|{{ add_generation_prompt }}|{{ mask_token is defined }}",
                         in, {{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"cls_token", "<cls>"}}),
            "<s></s><cls>|False|False");
}

TEST(ChatTemplateContext, ExtraKwargsDoNotOverrideWhatIsThere) {
  ChatTemplateInputs in = inputs(ordered_json::parse(R"([{"role": "user", "content": "hi"}])"));
  in.extra = ordered_json::parse(R"({"enable_thinking": false, "messages": "ignored", "bos_token": "ignored",
                                     "add_generation_prompt": false, "options": {"mode": "x"}})");
  EXPECT_EQ(render_probe("{{ enable_thinking }} {{ messages|length }} {{ bos_token }} {{ add_generation_prompt }} "
                         "{{ options.mode }}",
                         in, {{"bos_token", "<s>"}}),
            "False 1 <s> True x");
}

TEST(ChatTemplateContext, KeepsPartListsThatAreNotAllText) {
  const auto messages = ordered_json::parse(R"([{"role": "user", "content": [
    {"type": "image_url", "image_url": {"url": "x"}}, {"type": "text", "text": "What is this?"}]}])");
  EXPECT_EQ(render_probe("{% for p in messages[0].content %}{{ p.type }};{% endfor %}", inputs(messages)),
            "image_url;text;");
}

// --- errors ----------------------------------------------------------------------------------

TEST(ChatTemplateErrors, BrokenTemplateFailsAtConstruction) {
  try {
    ChatTemplate("{% for m in messages %}{{ m.role }}", {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("invalid chat template: line 1"));
    EXPECT_THAT(e.what(), HasSubstr("endfor"));
  }
}

TEST(ChatTemplateErrors, RaiseExceptionReachesTheCaller) {
  const ChatTemplate t(
      "{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}"
      "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
      "{% endfor %}ok",
      {});
  EXPECT_EQ(t.render(inputs(ordered_json::parse(R"([{"role": "user", "content": "a"}])"))), "ok");
  try {
    t.render(inputs(ordered_json::parse(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])")));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("chat template error: "));
    EXPECT_THAT(e.what(), HasSubstr("Conversation roles must alternate user/assistant/user/assistant/..."));
  }
}

TEST(ChatTemplateErrors, RejectsMalformedInputs) {
  const ChatTemplate t("{{ messages|length }}", {});
  EXPECT_THROW(t.render(inputs(ordered_json::object())), Error);
  EXPECT_THROW(t.render(inputs(ordered_json::parse("[1]"))), Error);
  ChatTemplateInputs in = inputs(ordered_json::array());
  in.tools = "not a list";
  EXPECT_THROW(t.render(in), Error);
  in.tools = nullptr;
  in.extra = ordered_json::array();
  EXPECT_THROW(t.render(in), Error);
}

}  // namespace
}  // namespace ernie
