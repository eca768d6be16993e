// The images and videos of a chat request for ERNIE-4.5-VL: which content parts carry
// them (image_url, video_url), the limits the server enforces (--limit-mm-per-prompt,
// --mm-processor-kwargs, sizes), turning each into vision-encoder features on the
// request's worker thread, and the prompt's tokens with each item's placeholder run.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/multimodal_prompt.h"
#include "model/language_model.h"
#include "serving/media_fetch.h"
#include "text/tokenizer.h"
#include "util/thread_pool.h"
#include "vision/image.h"
#include "vision/preprocess.h"
#include "vision/timestamp_render.h"
#include "vision/video_decode.h"

namespace ernie {

struct MultimodalOptions {
  int max_images = 16;  // --limit-mm-per-prompt {"image": N, "video": M}
  int max_videos = 2;
  VisionPreprocessConfig image;  // pixel limits from --mm-processor-kwargs
  VisionPreprocessConfig video;
  ImageLimits decode;            // what one encoded image (or video frame) may declare
  VideoSampling sampling;        // video_fps, video_min_frames, video_max_frames
  FetchLimits fetch;
};

// FastDeploy's flags: --limit-mm-per-prompt '{"image": 100, "video": 100}' and
// --mm-processor-kwargs '{"image_min_pixels": ..., "image_max_pixels": ..., "video_min_pixels": ...,
// "video_max_pixels": ..., "video_fps": ..., "video_min_frames": ..., "video_max_frames": ...}'. Empty
// strings keep the defaults. Throws naming the flag and key.
MultimodalOptions parse_multimodal_options(const std::string& limit_mm_per_prompt, const std::string& mm_processor_kwargs);

struct MediaItem {
  enum class Kind { kImage, kVideo } kind = Kind::kImage;
  std::string url;
  std::string field;  // e.g. messages[1].content[0], for error messages
  // A video part's own "fps", "min_frames", "max_frames" (FastDeploy reads them from the
  // item), over the server's --mm-processor-kwargs.
  std::optional<double> fps = std::nullopt;
  std::optional<int> min_frames = std::nullopt, max_frames = std::nullopt;
};

// The image_url and video_url parts of the messages, in order. Throws ApiException (400)
// for a malformed part, or for more items than the limits allow (naming the flag).
std::vector<MediaItem> collect_media(const nlohmann::ordered_json& messages, const MultimodalOptions& options,
                                     bool model_takes_media);

// Runs the vision encoder for the service: one request's items at a time on a pool of its
// own, so encoding never runs on the HTTP IO thread or the engine's thread, and decoding
// keeps going for other requests meanwhile.
class VisionFrontend {
 public:
  VisionFrontend(LanguageModel& model, size_t threads);
  // Fetches, decodes, resizes and encodes the item, refusing it before the vision encoder
  // runs when it would become more than `token_budget` tokens. Throws ernie::Error saying
  // what was wrong with it (the service answers 400 naming item.field).
  EncodedVisual encode(const MediaItem& item, const MultimodalOptions& options, int64_t token_budget);

 private:
  LanguageModel& model_;
  std::unique_ptr<TimestampFont> font_;  // null when the font is missing: frames go undrawn
  std::mutex mutex_;  // one encoding at a time on pool_
  ThreadPool pool_;
};

// The rendered prompt's tokens, with the k-th <|image@placeholder|> or <|video@placeholder|>
// of the text (the VL template writes one between each item's start and end markers)
// replaced by item k's run of <|IMAGE_PLACEHOLDER|> ids. Throws ApiException (400) when the
// template wrote a different number or kind of placeholders than the request has items.
std::vector<int32_t> tokenize_with_media(const std::string& rendered, const Tokenizer& tokenizer,
                                         const std::vector<MediaItem>& items, const std::vector<EncodedVisual>& encoded,
                                         int32_t placeholder_id);

}  // namespace ernie
