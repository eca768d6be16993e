// Videos for ERNIE-4.5-VL, decoded with FFmpeg's libavformat/libavcodec from the bytes a
// client sent, sampled as FastDeploy samples them (docs/vl-model-notes.md §8.1): 2 frames
// a second, clamped to 16..180 frames spread evenly over the clip ("leading" frame of
// each span). Every input is bounded: the encoded size (by the caller), the frame size
// (checked from the stream header before any frame is decoded) and the frame count.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "vision/image.h"

namespace ernie {

struct VideoSampling {
  double fps = 2.0;      // frames per second of video to keep (FastDeploy's video_fps)
  int min_frames = 16;   // video_min_frames
  int max_frames = 180;  // video_max_frames
};

struct VideoLimits {
  ImageLimits frame;                 // each frame's size
  int64_t max_source_frames = 1000000;  // frames the clip may declare
};

struct VideoInfo {
  int width = 0;
  int height = 0;
  int64_t num_frames = 0;  // as the container declares them (counted when it does not)
  double fps = 0;          // average frame rate
  double duration() const { return fps > 0 ? static_cast<double>(num_frames) / fps : 0; }
};

// FastDeploy's choice of frame indices for a clip of `num_frames` frames at `fps`.
std::vector<int64_t> sample_frame_indices(int64_t num_frames, double fps, const VideoSampling& sampling);

// Reads the clip's header and calls on_start(info, frames to be sampled) - which may throw
// to refuse the clip before anything is decoded - then decodes the sampled frames in
// order, handing each to on_frame with its timestamp in seconds (index · duration /
// frames, as FastDeploy renders it). Returns the clip's info. Throws ernie::Error saying
// what was wrong (not a video, no video stream, a frame or clip too large, corrupt data).
VideoInfo decode_video_frames(std::span<const uint8_t> bytes, const VideoSampling& sampling, const VideoLimits& limits,
                              const std::function<void(const VideoInfo& info, size_t sampled_frames)>& on_start,
                              const std::function<void(Image& frame, double timestamp)>& on_frame);

}  // namespace ernie
