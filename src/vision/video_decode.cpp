#include "vision/video_decode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libavutil/log.h>
#include <libswscale/swscale.h>
}

#include "util/error.h"

namespace ernie {
namespace {

// Reads the client's bytes through libavformat's custom IO.
struct MemoryReader {
  std::span<const uint8_t> bytes;
  int64_t position = 0;

  static int read(void* opaque, uint8_t* buffer, int size) {
    auto& reader = *static_cast<MemoryReader*>(opaque);
    const int64_t left = static_cast<int64_t>(reader.bytes.size()) - reader.position;
    if (left <= 0) return AVERROR_EOF;
    const int count = static_cast<int>(std::min<int64_t>(size, left));
    std::memcpy(buffer, reader.bytes.data() + reader.position, static_cast<size_t>(count));
    reader.position += count;
    return count;
  }
  static int64_t seek(void* opaque, int64_t offset, int whence) {
    auto& reader = *static_cast<MemoryReader*>(opaque);
    const auto size = static_cast<int64_t>(reader.bytes.size());
    if ((whence & ~AVSEEK_FORCE) == AVSEEK_SIZE) return size;
    int64_t target = offset;
    if ((whence & ~AVSEEK_FORCE) == SEEK_CUR) target += reader.position;
    else if ((whence & ~AVSEEK_FORCE) == SEEK_END) target += size;
    if (target < 0 || target > size) return AVERROR(EINVAL);
    reader.position = target;
    return target;
  }
};

std::string av_message(int code) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, text, sizeof text);
  return text;
}

// Owns the libav objects of one decode.
struct Demuxer {
  MemoryReader reader;
  AVIOContext* io = nullptr;
  AVFormatContext* format = nullptr;
  AVCodecContext* codec = nullptr;
  SwsContext* scaler = nullptr;
  AVPacket* packet = av_packet_alloc();
  AVFrame* frame = av_frame_alloc();
  int stream = -1;

  ~Demuxer() {
    sws_freeContext(scaler);
    av_frame_free(&frame);
    av_packet_free(&packet);
    avcodec_free_context(&codec);
    avformat_close_input(&format);
    if (io != nullptr) av_freep(&io->buffer);
    avio_context_free(&io);
  }

  void open(std::span<const uint8_t> bytes) {
    // FFmpeg's own log lines would go to stderr for every client's bad file; the errors
    // reach the client (and our log) through the exceptions instead.
    static std::once_flag quiet;
    std::call_once(quiet, [] { av_log_set_level(AV_LOG_QUIET); });
    reader.bytes = bytes;
    constexpr int kBufferSize = 64 * 1024;
    auto* buffer = static_cast<uint8_t*>(av_malloc(kBufferSize));
    io = avio_alloc_context(buffer, kBufferSize, 0, &reader, &MemoryReader::read, nullptr, &MemoryReader::seek);
    format = avformat_alloc_context();
    if (io == nullptr || format == nullptr || packet == nullptr || frame == nullptr) fail("out of memory opening a video");
    format->pb = io;
    format->flags |= AVFMT_FLAG_CUSTOM_IO;
    if (const int code = avformat_open_input(&format, nullptr, nullptr, nullptr); code < 0)
      fail("not a video FFmpeg can read (", av_message(code), ")");
    if (const int code = avformat_find_stream_info(format, nullptr); code < 0)
      fail("the video's streams could not be read (", av_message(code), ")");
    const AVCodec* decoder = nullptr;
    stream = av_find_best_stream(format, AVMEDIA_TYPE_VIDEO, -1, -1, &decoder, 0);
    if (stream < 0 || decoder == nullptr) fail("the file has no video stream FFmpeg can decode");
    codec = avcodec_alloc_context3(decoder);
    if (codec == nullptr) fail("out of memory opening a video");
    avcodec_parameters_to_context(codec, format->streams[stream]->codecpar);
    codec->thread_count = 1;  // the caller's thread; other requests keep theirs
    if (const int code = avcodec_open2(codec, decoder, nullptr); code < 0)
      fail("the video's codec could not be opened (", av_message(code), ")");
  }

  // The next decoded frame of the stream, or false at the end.
  bool next_frame() {
    while (true) {
      const int received = avcodec_receive_frame(codec, frame);
      if (received == 0) return true;
      if (received == AVERROR_EOF) return false;
      if (received != AVERROR(EAGAIN)) fail("the video is corrupt (", av_message(received), ")");
      const int read = av_read_frame(format, packet);
      if (read < 0) {
        avcodec_send_packet(codec, nullptr);  // drain
        continue;
      }
      if (packet->stream_index == stream) {
        const int sent = avcodec_send_packet(codec, packet);
        if (sent < 0 && sent != AVERROR(EAGAIN)) {
          av_packet_unref(packet);
          fail("the video is corrupt (", av_message(sent), ")");
        }
      }
      av_packet_unref(packet);
    }
  }

  Image to_rgb() {
    scaler = sws_getCachedContext(scaler, frame->width, frame->height, static_cast<AVPixelFormat>(frame->format),
                                  frame->width, frame->height, AV_PIX_FMT_RGB24, SWS_BICUBIC, nullptr, nullptr, nullptr);
    if (scaler == nullptr) fail("the video's pixel format cannot be converted to RGB");
    Image image;
    image.width = frame->width;
    image.height = frame->height;
    image.rgb.resize(static_cast<size_t>(image.width) * image.height * 3);
    uint8_t* planes[1] = {image.rgb.data()};
    const int strides[1] = {image.width * 3};
    sws_scale(scaler, frame->data, frame->linesize, 0, frame->height, planes, strides);
    return image;
  }
};

// Packets of the video stream, when the container does not say how many frames it has.
int64_t count_frames(std::span<const uint8_t> bytes, int64_t most) {
  Demuxer counter;
  counter.open(bytes);
  int64_t frames = 0;
  while (av_read_frame(counter.format, counter.packet) >= 0) {
    frames += counter.packet->stream_index == counter.stream ? 1 : 0;
    av_packet_unref(counter.packet);
    if (frames > most) break;
  }
  return frames;
}

}  // namespace

std::vector<int64_t> sample_frame_indices(int64_t num_frames, double fps, const VideoSampling& sampling) {
  if (num_frames <= 0) return {};
  const double duration = fps > 0 ? static_cast<double>(num_frames) / fps : 0;
  // frames_to_extract = int(duration * fps); outside [min, max] a fixed count is spread
  // evenly instead (np.linspace(0, vlen, n + 1).astype(int), the start of each span).
  const auto to_extract = static_cast<int64_t>(duration * sampling.fps);
  int64_t target = -1;
  if (sampling.min_frames > 0 && to_extract < sampling.min_frames) target = sampling.min_frames;
  if (sampling.max_frames > 0 && to_extract > sampling.max_frames) target = sampling.max_frames;
  std::vector<int64_t> indices;
  if (target > 0 || fps <= 0) {
    const int64_t count = std::min(target > 0 ? target : num_frames, num_frames);
    const double step = static_cast<double>(num_frames) / static_cast<double>(count);
    for (int64_t i = 0; i < count; ++i) indices.push_back(static_cast<int64_t>(static_cast<double>(i) * step));
    return indices;
  }
  // np.arange(0, duration, 1 / fps), rounded half to even, times the clip's rate.
  const double delta = 1.0 / sampling.fps;
  const auto steps = static_cast<int64_t>(std::ceil(duration / delta));
  for (int64_t k = 0; k < steps; ++k) {
    const auto index = static_cast<int64_t>(std::nearbyint(static_cast<double>(k) * delta * fps));
    if (index < num_frames) indices.push_back(index);
  }
  return indices;
}

VideoInfo decode_video_frames(std::span<const uint8_t> bytes, const VideoSampling& sampling, const VideoLimits& limits,
                              const std::function<void(const VideoInfo& info, size_t sampled_frames)>& on_start,
                              const std::function<void(Image& frame, double timestamp)>& on_frame) {
  Demuxer demuxer;
  demuxer.open(bytes);
  const AVStream* stream = demuxer.format->streams[demuxer.stream];
  VideoInfo info;
  info.width = demuxer.codec->width;
  info.height = demuxer.codec->height;
  if (info.width < 1 || info.height < 1) fail("the video declares a frame of ", info.width, "x", info.height, " pixels");
  if (info.width > limits.frame.max_side || info.height > limits.frame.max_side ||
      static_cast<int64_t>(info.width) * info.height > limits.frame.max_pixels)
    fail("the video's frames are ", info.width, "x", info.height, " pixels; the limit is ", limits.frame.max_pixels,
         " pixels and ", limits.frame.max_side, " per side");
  const AVRational rate = stream->avg_frame_rate.num > 0 ? stream->avg_frame_rate : stream->r_frame_rate;
  info.fps = rate.num > 0 && rate.den > 0 ? av_q2d(rate) : 0;
  info.num_frames = stream->nb_frames > 0 ? stream->nb_frames : count_frames(bytes, limits.max_source_frames);
  if (info.num_frames < 1) fail("the video has no frames");
  if (info.num_frames > limits.max_source_frames)
    fail("the video has more than ", limits.max_source_frames, " frames (the limit)");

  const std::vector<int64_t> wanted = sample_frame_indices(info.num_frames, info.fps, sampling);
  on_start(info, wanted.size());
  size_t next = 0;
  int64_t index = 0;
  for (; next < wanted.size() && demuxer.next_frame(); ++index) {
    if (demuxer.frame->width != info.width || demuxer.frame->height != info.height)
      fail("the video changes its frame size mid-stream (", info.width, "x", info.height, " to ", demuxer.frame->width,
           "x", demuxer.frame->height, ")");
    if (index != wanted[next]) continue;
    Image image = demuxer.to_rgb();
    const double timestamp = static_cast<double>(index) * info.duration() / static_cast<double>(info.num_frames);
    // A declared count above the real one may repeat an index: each wanted entry gets a frame.
    while (next < wanted.size() && wanted[next] == index) {
      Image copy = image;
      on_frame(copy, timestamp);
      ++next;
    }
  }
  if (next == 0) fail("no frame of the video could be decoded");
  return info;
}

}  // namespace ernie
