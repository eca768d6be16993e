// The two palette-era formats: GIF's first frame (giflib) and uncompressed BMP (parsed
// here: the layout is a header and rows). Both end as Pillow's convert("RGB") gives them:
// palette colours, transparency ignored.
#include <gif_lib.h>

#include <cstring>

#include "util/error.h"
#include "vision/image_decode_formats.h"

namespace ernie {
namespace {

struct GifSource {
  std::span<const uint8_t> bytes;
  size_t offset = 0;
};

int read_gif_bytes(GifFileType* gif, GifByteType* out, int count) {
  auto* source = static_cast<GifSource*>(gif->UserData);
  const size_t available = source->bytes.size() - source->offset;
  const size_t taken = std::min(available, static_cast<size_t>(std::max(count, 0)));
  std::memcpy(out, source->bytes.data() + source->offset, taken);
  source->offset += taken;
  return static_cast<int>(taken);
}

class GifFile {
 public:
  explicit GifFile(GifSource& source) {
    int error = 0;
    gif_ = DGifOpen(&source, read_gif_bytes, &error);
    if (gif_ == nullptr) fail("the GIF image could not be read: ", GifErrorString(error));
  }
  ~GifFile() {
    int error = 0;
    DGifCloseFile(gif_, &error);
  }
  GifFile(const GifFile&) = delete;
  GifFile& operator=(const GifFile&) = delete;
  GifFileType* operator->() const { return gif_; }
  GifFileType* get() const { return gif_; }
  [[noreturn]] void fail_with(const char* what) const {
    fail("the GIF image could not be decoded (", what, "): ", GifErrorString(gif_->Error));
  }

 private:
  GifFileType* gif_ = nullptr;
};

uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t le32(const uint8_t* p) { return le16(p) | (static_cast<uint32_t>(le16(p + 2)) << 16); }

}  // namespace

Image decode_gif(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  GifSource source{bytes};
  GifFile gif(source);
  check_image_size(gif->SWidth, gif->SHeight, limits, "GIF");
  // The canvas is the logical screen, in the background colour; the first frame is drawn
  // at its offset, which for nearly every file covers the whole screen.
  const int width = gif->SWidth, height = gif->SHeight;
  std::vector<uint8_t> indices(static_cast<size_t>(width) * height, static_cast<uint8_t>(gif->SBackGroundColor));
  const ColorMapObject* palette = gif->SColorMap;
  for (bool drawn = false; !drawn;) {
    GifRecordType record;
    if (DGifGetRecordType(gif.get(), &record) == GIF_ERROR) gif.fail_with("record");
    if (record == TERMINATE_RECORD_TYPE) fail("the GIF image has no frame");
    if (record == EXTENSION_RECORD_TYPE) {
      int code = 0;
      GifByteType* extension = nullptr;
      if (DGifGetExtension(gif.get(), &code, &extension) == GIF_ERROR) gif.fail_with("extension");
      while (extension != nullptr)
        if (DGifGetExtensionNext(gif.get(), &extension) == GIF_ERROR) gif.fail_with("extension");
      continue;
    }
    if (record != IMAGE_DESC_RECORD_TYPE) continue;
    if (DGifGetImageDesc(gif.get()) == GIF_ERROR) gif.fail_with("frame header");
    const GifImageDesc& frame = gif->Image;
    if (frame.Left < 0 || frame.Top < 0 || frame.Width <= 0 || frame.Height <= 0 ||
        frame.Left + frame.Width > width || frame.Top + frame.Height > height)
      fail("the GIF image's first frame (", frame.Width, "x", frame.Height, " at ", frame.Left, ",", frame.Top,
           ") lies outside its ", width, "x", height, " screen");
    if (frame.ColorMap != nullptr) palette = frame.ColorMap;
    std::vector<GifPixelType> line(static_cast<size_t>(frame.Width));
    // Interlaced frames arrive in four passes of rows.
    const int starts[] = {0, 4, 2, 1}, steps[] = {8, 8, 4, 2};
    const int passes = frame.Interlace ? 4 : 1;
    for (int pass = 0; pass < passes; ++pass) {
      for (int y = frame.Interlace ? starts[pass] : 0; y < frame.Height; y += frame.Interlace ? steps[pass] : 1) {
        if (DGifGetLine(gif.get(), line.data(), frame.Width) == GIF_ERROR) gif.fail_with("pixels");
        std::copy(line.begin(), line.end(), indices.begin() + static_cast<std::ptrdiff_t>(frame.Top + y) * width + frame.Left);
      }
    }
    drawn = true;
  }
  if (palette == nullptr || palette->ColorCount <= 0) fail("the GIF image has no colour table");
  Image image;
  image.width = width;
  image.height = height;
  image.rgb.resize(indices.size() * 3);
  for (size_t i = 0; i < indices.size(); ++i) {
    const int index = indices[i] < palette->ColorCount ? indices[i] : 0;
    image.rgb[i * 3] = palette->Colors[index].Red;
    image.rgb[i * 3 + 1] = palette->Colors[index].Green;
    image.rgb[i * 3 + 2] = palette->Colors[index].Blue;
  }
  return image;
}

Image decode_bmp(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  if (bytes.size() < 14 + 40) fail("the BMP image is truncated: ", bytes.size(), " bytes hold no full header");
  const uint8_t* data = bytes.data();
  const uint32_t pixel_offset = le32(data + 10), header_size = le32(data + 14);
  if (header_size < 40) fail("this BMP variant (a ", header_size, "-byte OS/2 header) is not supported");
  const int64_t width = static_cast<int32_t>(le32(data + 18));
  const int64_t signed_height = static_cast<int32_t>(le32(data + 22));
  const uint16_t bits = le16(data + 28);
  const uint32_t compression = le32(data + 30);
  const bool top_down = signed_height < 0;
  const int64_t height = top_down ? -signed_height : signed_height;
  check_image_size(width, height, limits, "BMP");
  constexpr uint32_t kRgb = 0, kBitfields = 3;
  if (!(bits == 8 || bits == 24 || bits == 32) || !(compression == kRgb || (compression == kBitfields && bits == 32)))
    fail("this BMP variant (", bits, " bits per pixel, compression ", compression,
         ") is not supported; 8-bit palette, 24- and 32-bit uncompressed BMPs are");
  if (compression == kBitfields) {
    // Only the usual masks: blue, green, red in the low three bytes.
    if (bytes.size() < 14 + 52 || le32(data + 54) != 0x00FF0000 || le32(data + 58) != 0x0000FF00 || le32(data + 62) != 0x000000FF)
      fail("this BMP variant (32-bit with unusual colour masks) is not supported");
  }
  const size_t row_bytes = ((static_cast<size_t>(width) * bits + 31) / 32) * 4;
  if (pixel_offset > bytes.size() || bytes.size() - pixel_offset < row_bytes * static_cast<size_t>(height))
    fail("the BMP image is truncated: its ", width, "x", height, " pixels need ", row_bytes * height, " bytes after offset ",
         pixel_offset, ", the file has ", bytes.size());
  std::vector<uint8_t> palette;  // BGRx quads
  if (bits == 8) {
    uint32_t colors = le32(data + 46);
    if (colors == 0 || colors > 256) colors = 256;
    const size_t start = 14 + header_size;
    if (start + colors * 4 > pixel_offset) fail("the BMP image's colour table is truncated");
    palette.assign(data + start, data + start + colors * 4);
  }
  Image image;
  image.width = static_cast<int>(width);
  image.height = static_cast<int>(height);
  image.rgb.resize(static_cast<size_t>(width) * height * 3);
  for (int64_t y = 0; y < height; ++y) {
    const uint8_t* row = data + pixel_offset + row_bytes * static_cast<size_t>(top_down ? y : height - 1 - y);
    uint8_t* out = image.rgb.data() + static_cast<size_t>(y) * width * 3;
    for (int64_t x = 0; x < width; ++x, out += 3) {
      const uint8_t* bgr = nullptr;
      if (bits == 8) {
        const size_t index = row[x];
        bgr = index * 4 + 3 <= palette.size() ? palette.data() + index * 4 : palette.data();
      } else {
        bgr = row + x * (bits / 8);
      }
      out[0] = bgr[2];
      out[1] = bgr[1];
      out[2] = bgr[0];
    }
  }
  return image;
}

}  // namespace ernie
