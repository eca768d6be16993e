#include "vision/timestamp_render.h"

#include <ft2build.h>
#include FT_FREETYPE_H
#include FT_GLYPH_H
#include FT_STROKER_H
#include <hb-ft.h>
#include <hb.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "util/error.h"

namespace ernie {
namespace {

// Pillow's PIXEL(): 26.6 fixed point to whole pixels, rounding half up.
int pixel(long value) { return static_cast<int>(((value + 32) & -64) >> 6); }

struct Glyph {
  unsigned index;
  long x_advance, y_advance, x_offset, y_offset;  // 26.6
};

// One face at one pixel size, with its HarfBuzz font; freed together.
class SizedFace {
 public:
  SizedFace(const std::vector<unsigned char>& bytes, int pixel_size) {
    if (FT_Init_FreeType(&library_) != 0) fail("FreeType could not start");
    if (FT_New_Memory_Face(library_, bytes.data(), static_cast<FT_Long>(bytes.size()), 0, &face_) != 0)
      fail("the timestamp font could not be read");
    if (FT_Set_Pixel_Sizes(face_, 0, static_cast<FT_UInt>(pixel_size)) != 0) fail("the timestamp font has no size ", pixel_size);
    if (FT_Stroker_New(library_, &stroker_) != 0) fail("FreeType's stroker could not start");
    font_ = hb_ft_font_create_referenced(face_);  // after the size: it reads the scale
  }
  ~SizedFace() {
    hb_font_destroy(font_);
    FT_Stroker_Done(stroker_);
    FT_Done_Face(face_);
    FT_Done_FreeType(library_);
  }
  SizedFace(const SizedFace&) = delete;
  SizedFace& operator=(const SizedFace&) = delete;

  // Raqm's layout as Pillow calls it: left to right, Latin, default language and features.
  std::vector<Glyph> shape(const std::string& text) const {
    hb_buffer_t* buffer = hb_buffer_create();
    hb_buffer_add_utf8(buffer, text.data(), static_cast<int>(text.size()), 0, static_cast<int>(text.size()));
    hb_buffer_set_direction(buffer, HB_DIRECTION_LTR);
    hb_buffer_set_script(buffer, HB_SCRIPT_LATIN);
    hb_buffer_set_language(buffer, hb_language_get_default());
    hb_buffer_set_flags(buffer, static_cast<hb_buffer_flags_t>(HB_BUFFER_FLAG_BOT | HB_BUFFER_FLAG_EOT |
                                                                HB_BUFFER_FLAG_REMOVE_DEFAULT_IGNORABLES));
    hb_shape(font_, buffer, nullptr, 0);
    unsigned count = 0;
    const hb_glyph_info_t* info = hb_buffer_get_glyph_infos(buffer, &count);
    const hb_glyph_position_t* position = hb_buffer_get_glyph_positions(buffer, &count);
    std::vector<Glyph> glyphs;
    for (unsigned i = 0; i < count; ++i)
      glyphs.push_back({info[i].codepoint, position[i].x_advance, position[i].y_advance, position[i].x_offset,
                        position[i].y_offset});
    hb_buffer_destroy(buffer);
    return glyphs;
  }

  FT_Face face() const { return face_; }
  FT_Stroker stroker() const { return stroker_; }

 private:
  FT_Library library_ = nullptr;
  FT_Face face_ = nullptr;
  FT_Stroker stroker_ = nullptr;
  hb_font_t* font_ = nullptr;
};

void load(FT_Face face, unsigned index, FT_Int32 flags) {
  if (FT_Load_Glyph(face, index, flags) != 0) fail("the timestamp font has no glyph ", index);
}

// One pass of ImageDraw.text: the mask of the text (outlined by `stroke` pixels when
// > 0), and where its top-left corner goes on the frame.
struct Mask {
  int width = 0, height = 0, left = 0, top = 0;
  std::vector<unsigned char> values;
};

Mask render_pass(const SizedFace& sized, const std::vector<Glyph>& glyphs, int stroke) {
  FT_Face face = sized.face();
  // FreeTypeFont.getsize: the box of the glyphs' control boxes and the pen line.
  long pen = 0;
  int x_min = 0, x_max = 0, y_min = 0, y_max = 0;
  for (const Glyph& g : glyphs) {
    const int px = pixel(pen + g.x_offset), py = pixel(g.y_offset);
    pen += g.x_advance;
    x_max = std::max(x_max, pixel(pen));
    load(face, g.index, FT_LOAD_DEFAULT);
    FT_Glyph glyph;
    if (FT_Get_Glyph(face->glyph, &glyph) != 0) fail("FreeType could not copy a glyph");
    FT_BBox box;
    FT_Glyph_Get_CBox(glyph, FT_GLYPH_BBOX_PIXELS, &box);
    FT_Done_Glyph(glyph);
    x_max = std::max(x_max, static_cast<int>(box.xMax) + px);
    x_min = std::min(x_min, static_cast<int>(box.xMin) + px);
    y_max = std::max(y_max, static_cast<int>(box.yMax) + py);
    y_min = std::min(y_min, static_cast<int>(box.yMin) + py);
  }
  const int ascender = static_cast<int>(face->size->metrics.ascender >> 6);
  Mask mask;
  mask.width = x_max - x_min + 2 * stroke;
  mask.height = y_max - y_min + 2 * stroke;
  mask.left = x_min - stroke;                // anchor "la": the ascender line at y = 0
  mask.top = ascender - y_max - stroke;
  mask.values.assign(static_cast<size_t>(mask.width) * mask.height, 0);

  // font_render: find the origin from the rendered glyphs, then draw each at whole pixels.
  const FT_Int32 flags = stroke > 0 ? FT_LOAD_NO_BITMAP : FT_LOAD_DEFAULT;
  long x = 0, y = 0;
  int render_x_min = 0, render_y_max = 0;
  for (const Glyph& g : glyphs) {
    const int px = pixel(x + g.x_offset), py = pixel(y + g.y_offset);
    load(face, g.index, flags | FT_LOAD_RENDER);
    render_y_max = std::max(render_y_max, face->glyph->bitmap_top + py);
    render_x_min = std::min(render_x_min, face->glyph->bitmap_left + px);
    x += g.x_advance;
    y += g.y_advance;
  }
  x = static_cast<long>(-render_x_min + stroke) * 64;
  y = static_cast<long>(-render_y_max - stroke) * 64;
  for (const Glyph& g : glyphs) {
    const int px = pixel(x + g.x_offset), py = pixel(y + g.y_offset);
    FT_Glyph stroked = nullptr;
    const FT_Bitmap* bitmap = nullptr;
    int left = 0, top = 0;
    if (stroke > 0) {
      load(face, g.index, flags);
      if (FT_Get_Glyph(face->glyph, &stroked) != 0) fail("FreeType could not copy a glyph");
      FT_Stroker_Set(sized.stroker(), static_cast<FT_Fixed>(stroke) * 64, FT_STROKER_LINECAP_ROUND,
                     FT_STROKER_LINEJOIN_ROUND, 0);
      FT_Glyph_Stroke(&stroked, sized.stroker(), 1);
      FT_Vector origin{0, 0};
      FT_Glyph_To_Bitmap(&stroked, FT_RENDER_MODE_NORMAL, &origin, 1);
      const auto* bitmap_glyph = reinterpret_cast<FT_BitmapGlyph>(stroked);
      bitmap = &bitmap_glyph->bitmap;
      left = bitmap_glyph->left;
      top = bitmap_glyph->top;
    } else {
      load(face, g.index, FT_LOAD_DEFAULT | FT_LOAD_RENDER);
      bitmap = &face->glyph->bitmap;
      left = face->glyph->bitmap_left;
      top = face->glyph->bitmap_top;
    }
    const int xx = px + left, yy = -(py + top);
    for (int r = 0; r < static_cast<int>(bitmap->rows); ++r) {
      const int row = yy + r;
      if (row < 0 || row >= mask.height) continue;
      const unsigned char* source = bitmap->buffer + static_cast<ptrdiff_t>(r) * bitmap->pitch;
      for (int c = 0; c < static_cast<int>(bitmap->width); ++c) {
        const int column = xx + c;
        if (column < 0 || column >= mask.width) continue;
        unsigned char& target = mask.values[static_cast<size_t>(row) * mask.width + column];
        target = std::max(target, source[c]);
      }
    }
    if (stroked != nullptr) FT_Done_Glyph(stroked);
    x += g.x_advance;
    y += g.y_advance;
  }
  return mask;
}

// ImageDraw.draw_bitmap: ink over the frame through the mask, Pillow's BLEND/DIV255.
void blend(Image& frame, const Mask& mask, unsigned char ink) {
  for (int r = 0; r < mask.height; ++r) {
    const int y = mask.top + r;
    if (y < 0 || y >= frame.height) continue;
    for (int c = 0; c < mask.width; ++c) {
      const int x = mask.left + c;
      if (x < 0 || x >= frame.width) continue;
      const unsigned m = mask.values[static_cast<size_t>(r) * mask.width + c];
      uint8_t* pixel_rgb = frame.rgb.data() + (static_cast<size_t>(y) * frame.width + x) * 3;
      for (int channel = 0; channel < 3; ++channel) {
        const unsigned t = pixel_rgb[channel] * (255 - m) + ink * m + 128;
        pixel_rgb[channel] = static_cast<uint8_t>(((t >> 8) + t) >> 8);
      }
    }
  }
}

}  // namespace

std::string timestamp_label(double seconds) {
  // FastDeploy's timestamp_converting: f"{int(hours):02d}:{int(mins):02d}:{secs:05.02f}".
  const double hours = std::floor(seconds / 3600);
  const double rest = seconds - hours * 3600;
  const double minutes = std::floor(rest / 60);
  const double secs = rest - minutes * 60;
  char text[64];
  std::snprintf(text, sizeof text, "time: %02d:%02d:%05.2f", static_cast<int>(hours), static_cast<int>(minutes), secs);
  return text;
}

TimestampFont::TimestampFont(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) fail("cannot read the video timestamp font ", path, " (Debian package fonts-roboto-unhinted)");
  font_bytes_.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

TimestampFont::~TimestampFont() = default;

void TimestampFont::draw(Image& frame, double seconds) const {
  const int size = static_cast<int>(std::min(frame.width, frame.height) * 0.1);
  if (size < 1) return;
  const int outline = static_cast<int>(size * 0.1);
  const SizedFace sized(font_bytes_, size);
  const std::vector<Glyph> glyphs = sized.shape(timestamp_label(seconds));
  // Pillow draws the outline first (white), then the text (black) over it.
  if (outline > 0) blend(frame, render_pass(sized, glyphs, outline), 255);
  blend(frame, render_pass(sized, glyphs, 0), 0);
}

}  // namespace ernie
