// FastDeploy writes each sampled video frame's time on the frame before it is resized
// (fastdeploy/input/utils/render_timestamp.py; docs/vl-model-notes.md §8.2): "time:
// HH:MM:SS.ss" in Roboto Regular at a tenth of the shorter side, black with a white
// outline a tenth of the font size wide, at the top-left corner. The model was trained on
// frames that carry it. This draws it as Pillow 9.4 does (ImageDraw.text with
// stroke_width, Raqm layout): HarfBuzz shapes with unhinted advances, FreeType renders
// each glyph auto-hinted at whole-pixel pen positions (the outline through FreeType's
// stroker), each pass's glyphs combine by maximum into a mask, and the mask blends into
// the frame with Pillow's rounding.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "vision/image.h"

namespace ernie {

// Debian's fonts-roboto-unhinted, the font FastDeploy ships.
inline constexpr const char* kTimestampFontPath = "/usr/share/fonts/truetype/roboto/unhinted/RobotoTTF/Roboto-Regular.ttf";

// FastDeploy's label for `seconds`: "time: 00:01:23.50".
std::string timestamp_label(double seconds);

class TimestampFont {
 public:
  // Reads the font file; throws ernie::Error naming it when it cannot.
  explicit TimestampFont(const std::string& path = kTimestampFontPath);
  ~TimestampFont();
  TimestampFont(const TimestampFont&) = delete;
  TimestampFont& operator=(const TimestampFont&) = delete;

  // Draws timestamp_label(seconds) on the frame (nothing when its shorter side is below
  // 10 pixels: the font size would be 0). Thread-safe.
  void draw(Image& frame, double seconds) const;

 private:
  std::vector<unsigned char> font_bytes_;
};

}  // namespace ernie
