#include "model/language_model.h"

#include "util/error.h"

namespace ernie {

std::vector<float>& LanguageModel::forward_mtp(const ForwardBatch&, std::span<const float>, bool) {
  fail("this model has no multi-token-prediction head (config.json num_nextn_predict_layers is 0)");
}

std::vector<float> LanguageModel::encode_vision(const ImagePatches&, ThreadPool&) {
  fail("this model takes no images or video (", config().architecture, " is a text model)");
}

}  // namespace ernie
