#include "serving/multimodal_input.h"

#include "serving/openai_protocol.h"
#include "util/error.h"
#include "util/json_flag.h"
#include "util/log.h"

namespace ernie {
namespace {

using nlohmann::ordered_json;

constexpr const char* kImageMarker = "<|image@placeholder|>";
constexpr const char* kVideoMarker = "<|video@placeholder|>";


int64_t positive_integer(const char* flag, const std::string& key, const nlohmann::json& value, int64_t most) {
  if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > most)
    fail("--", flag, " key \"", key, "\" must be an integer in 0..", most, ", got ", value.dump());
  return value.get<int64_t>();
}

// A video_url's own sampling options.
void read_video_options(const ordered_json& video, MediaItem& item) {
  if (video.contains("fps")) {
    const ordered_json& fps = video.at("fps");
    if (!fps.is_number() || !(fps.get<double>() > 0) || fps.get<double>() > 1000)
      invalid_field(item.field, item.field + ": video_url.fps must be a number in (0, 1000], got " + fps.dump());
    item.fps = fps.get<double>();
  }
  for (const auto& [key, target] : {std::pair{"min_frames", &item.min_frames}, std::pair{"max_frames", &item.max_frames}}) {
    if (!video.contains(key)) continue;
    const ordered_json& value = video.at(key);
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > 10000)
      invalid_field(item.field, item.field + ": video_url." + key + " must be an integer in 0..10000, got " + value.dump());
    *target = value.get<int>();
  }
}

}  // namespace

MultimodalOptions parse_multimodal_options(const std::string& limit_mm_per_prompt, const std::string& mm_processor_kwargs) {
  MultimodalOptions options;
  // FastDeploy's per-frame video limits (notes §3.1).
  options.video.min_pixels = 299LL * 28 * 28;
  options.video.max_pixels = 1196LL * 28 * 28;
  if (!limit_mm_per_prompt.empty()) {
    const nlohmann::json limits = parse_json_object_flag("limit-mm-per-prompt", limit_mm_per_prompt);
    for (auto it = limits.begin(); it != limits.end(); ++it) {
      const std::string& key = it.key();
      const nlohmann::json& value = it.value();
      const auto count = static_cast<int>(positive_integer("limit-mm-per-prompt", key, value, 1000));
      if (key == "image") options.max_images = count;
      else if (key == "video") options.max_videos = count;
      else fail("--limit-mm-per-prompt key \"", key, "\" is not known (image, video)");
    }
  }
  if (!mm_processor_kwargs.empty()) {
    // A picture may not exceed what the decoder accepts anyway.
    const int64_t most_pixels = options.decode.max_pixels;
    const nlohmann::json kwargs = parse_json_object_flag("mm-processor-kwargs", mm_processor_kwargs);
    for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
      const std::string& key = it.key();
      const nlohmann::json& value = it.value();
      if (key == "image_min_pixels") options.image.min_pixels = positive_integer("mm-processor-kwargs", key, value, most_pixels);
      else if (key == "image_max_pixels") options.image.max_pixels = positive_integer("mm-processor-kwargs", key, value, most_pixels);
      else if (key == "video_min_pixels") options.video.min_pixels = positive_integer("mm-processor-kwargs", key, value, most_pixels);
      else if (key == "video_max_pixels") options.video.max_pixels = positive_integer("mm-processor-kwargs", key, value, most_pixels);
      else if (key == "video_min_frames") options.sampling.min_frames = static_cast<int>(positive_integer("mm-processor-kwargs", key, value, 10000));
      else if (key == "video_max_frames") options.sampling.max_frames = static_cast<int>(positive_integer("mm-processor-kwargs", key, value, 10000));
      else if (key == "video_fps") {
        if (!value.is_number() || !(value.get<double>() > 0) || value.get<double>() > 1000)
          fail("--mm-processor-kwargs key \"video_fps\" must be a number in (0, 1000], got ", value.dump());
        options.sampling.fps = value.get<double>();
      } else
        fail("--mm-processor-kwargs key \"", key,
             "\" is not known (image_min_pixels, image_max_pixels, video_min_pixels, video_max_pixels, video_fps, "
             "video_min_frames, video_max_frames)");
    }
  }
  for (const VisionPreprocessConfig* config : {&options.image, &options.video})
    if (config->min_pixels > config->max_pixels)
      fail("--mm-processor-kwargs: a minimum of ", config->min_pixels, " pixels exceeds the maximum of ", config->max_pixels);
  if (options.sampling.max_frames > 0 && options.sampling.min_frames > options.sampling.max_frames)
    fail("--mm-processor-kwargs: video_min_frames ", options.sampling.min_frames, " exceeds video_max_frames ",
         options.sampling.max_frames);
  return options;
}

std::vector<MediaItem> collect_media(const ordered_json& messages, const MultimodalOptions& options,
                                     bool model_takes_media) {
  std::vector<MediaItem> items;
  int images = 0, videos = 0;
  for (size_t m = 0; m < messages.size(); ++m) {
    const ordered_json& message = messages[m];
    if (!message.is_object() || !message.contains("content") || !message.at("content").is_array()) continue;
    const ordered_json& parts = message.at("content");
    for (size_t p = 0; p < parts.size(); ++p) {
      const ordered_json& part = parts[p];
      const std::string field = "messages[" + std::to_string(m) + "].content[" + std::to_string(p) + "]";
      if (!part.is_object() || !part.contains("type") || !part.at("type").is_string()) continue;
      const std::string type = part.at("type").get<std::string>();
      if (type != "image_url" && type != "video_url") continue;
      if (!model_takes_media)
        invalid_field(field, "this model reads text only; " + type + " parts need an ERNIE-4.5-VL model");
      const ordered_json* url = part.contains(type) ? &part.at(type) : nullptr;
      if (url != nullptr && url->is_object() && url->contains("url")) url = &url->at("url");
      if (url == nullptr || !url->is_string() || url->get<std::string>().empty())
        invalid_field(field, "a " + type + " part needs {\"" + type + "\": {\"url\": \"data:...;base64,... or http(s)://...\"}}");
      MediaItem item;
      item.kind = type == "image_url" ? MediaItem::Kind::kImage : MediaItem::Kind::kVideo;
      item.url = url->get<std::string>();
      item.field = field;
      if (item.kind == MediaItem::Kind::kVideo && part.at(type).is_object()) read_video_options(part.at(type), item);
      const bool image = item.kind == MediaItem::Kind::kImage;
      if ((image ? ++images : ++videos) > (image ? options.max_images : options.max_videos))
        invalid_field(field, std::string("the request has more than ") +
                                 std::to_string(image ? options.max_images : options.max_videos) + (image ? " image" : " video") +
                                 "(s); the server allows at most that many per prompt (--limit-mm-per-prompt)");
      items.push_back(std::move(item));
    }
  }
  return items;
}

VisionFrontend::VisionFrontend(LanguageModel& model, size_t threads) : model_(model), pool_(threads) {
  try {
    font_ = std::make_unique<TimestampFont>();
  } catch (const Error& error) {
    log_warning(error.what(), ": video frames go to the encoder without FastDeploy's timestamps");
  }
}

namespace {

void check_budget(int64_t tokens, int64_t budget, const char* what) {
  if (tokens > budget)
    fail("the ", what, " becomes ", tokens, " tokens, more than the ", budget,
         " left of --max-model-len; send it smaller (or raise the limit)");
}

// The sampled frames, each with its time drawn on it (when the font is there) and then
// resized, as FastDeploy's load_video and add_video do.
ImagePatches video_patches(std::span<const uint8_t> bytes, const MultimodalOptions& options, int64_t budget,
                           const TimestampFont* font) {
  VideoLimits limits;
  limits.frame = options.decode;
  ResizedSize size;
  std::vector<Image> frames;
  const auto on_start = [&](const VideoInfo& info, size_t sampled) {
    // One smart_resize for the whole clip, from its frame size (FastDeploy: frame 0's).
    size = smart_resize(info.height, info.width, options.video);
    const int64_t frames_in = static_cast<int64_t>(sampled + sampled % 2);
    check_budget(visual_token_count({static_cast<int>(frames_in), size.height / 14, size.width / 14}), budget, "video");
  };
  const auto on_frame = [&](Image& frame, double timestamp) {
    if (font != nullptr) font->draw(frame, timestamp);
    frames.push_back(resize_bicubic(frame, size.width, size.height));
  };
  decode_video_frames(bytes, options.sampling, limits, on_start, on_frame);
  return patchify_frames(frames, options.video);
}

}  // namespace

EncodedVisual VisionFrontend::encode(const MediaItem& item, const MultimodalOptions& options, int64_t token_budget) {
  const std::vector<uint8_t> bytes = fetch_media(item.url, options.fetch);
  ImagePatches patches;
  if (item.kind == MediaItem::Kind::kVideo) {
    MultimodalOptions own = options;
    own.sampling.fps = item.fps.value_or(options.sampling.fps);
    own.sampling.min_frames = item.min_frames.value_or(options.sampling.min_frames);
    own.sampling.max_frames = item.max_frames.value_or(options.sampling.max_frames);
    patches = video_patches(bytes, own, token_budget, font_.get());
  } else {
    const Image image = decode_image(bytes, options.decode);
    const ResizedSize size = smart_resize(image.height, image.width, options.image);
    check_budget(visual_token_count({1, size.height / 14, size.width / 14}), token_budget, "image");
    patches = preprocess_image(image, options.image);
  }
  EncodedVisual encoded;
  encoded.grid = {patches.grid_t, patches.grid_h, patches.grid_w};
  encoded.content_hash = visual_content_hash(patches.grid_t, patches.grid_h, patches.grid_w, patches.values);
  std::lock_guard<std::mutex> lock(mutex_);
  encoded.features = model_.encode_vision(patches, pool_);
  return encoded;
}

std::vector<int32_t> tokenize_with_media(const std::string& rendered, const Tokenizer& tokenizer,
                                         const std::vector<MediaItem>& items, const std::vector<EncodedVisual>& encoded,
                                         int32_t placeholder_id) {
  std::vector<int32_t> tokens;
  size_t item = 0, from = 0;
  while (true) {
    const size_t image_at = rendered.find(kImageMarker, from), video_at = rendered.find(kVideoMarker, from);
    const size_t at = std::min(image_at, video_at);
    const std::vector<int32_t> piece = tokenizer.encode(rendered.substr(from, at == std::string::npos ? std::string::npos : at - from));
    tokens.insert(tokens.end(), piece.begin(), piece.end());
    if (at == std::string::npos) break;
    const bool video = at == video_at;
    if (item >= items.size())
      invalid_field("messages", "the chat template placed more image/video placeholders than the request has items");
    if (video != (items[item].kind == MediaItem::Kind::kVideo))
      invalid_field(items[item].field, "the chat template placed a " + std::string(video ? "video" : "image") +
                                           " placeholder where this part is the other kind");
    tokens.insert(tokens.end(), static_cast<size_t>(visual_token_count(encoded[item].grid)), placeholder_id);
    ++item;
    from = at + std::string_view(video ? kVideoMarker : kImageMarker).size();
  }
  if (item != items.size())
    invalid_field("messages", "the chat template placed " + std::to_string(item) + " image/video placeholder(s) for " +
                                  std::to_string(items.size()) + " item(s); does it render image_url / video_url parts?");
  return tokens;
}

}  // namespace ernie
