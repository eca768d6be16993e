// libFuzzer target: a request body as a client sends it, through the parser and
// validator of both generation routes. Any input must give a request or an ApiException
// (a 400 with a message); never a crash, a hang, a leak or another exception type.
#include <cstddef>
#include <cstdint>
#include <string>

#include "serving/openai_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  for (const ernie::ApiKind kind : {ernie::ApiKind::kChat, ernie::ApiKind::kCompletion}) {
    try {
      const ernie::OpenAiRequest request = ernie::parse_openai_request(kind, body, {});
      // What the server does next with a parsed request: print parts of it back.
      (void)ernie::dump_json(request.messages);
      (void)ernie::dump_json(request.tools);
      (void)ernie::dump_json(request.chat_template_kwargs);
    } catch (const ernie::ApiException& exception) {
      (void)ernie::error_body(exception.error);
    }
  }
  return 0;
}
