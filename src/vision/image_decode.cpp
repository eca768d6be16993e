// Decoding with the formats' reference libraries. libjpeg and libpng report errors by
// longjmp; each decoder keeps its setjmp frame in a function that owns no C++ object
// with a destructor, and turns the library's message into ernie::Error afterwards.
#include <csetjmp>
#include <cstdio>
#include <cstring>

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>
#include <webp/decode.h>

#include "util/error.h"
#include "vision/image.h"
#include "vision/image_decode_formats.h"

namespace ernie {

void check_image_size(int64_t width, int64_t height, const ImageLimits& limits, const char* format) {
  if (width <= 0 || height <= 0) fail("the ", format, " image is ", width, "x", height, "; both sides must be at least 1");
  if (width > limits.max_side || height > limits.max_side)
    fail("the ", format, " image is ", width, "x", height, "; no side may exceed ", limits.max_side, " pixels");
  if (width * height > limits.max_pixels)
    fail("the ", format, " image has ", width * height, " pixels (", width, "x", height, "); the limit is ",
         limits.max_pixels);
}

namespace {

// ---- JPEG (libjpeg-turbo, as Pillow: islow DCT, fancy upsampling, RGB output).

struct JpegError {
  jpeg_error_mgr manager;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_fail(j_common_ptr info) {
  auto* error = reinterpret_cast<JpegError*>(info->err);
  (*info->err->format_message)(info, error->message);
  std::longjmp(error->jump, 1);
}

// Warnings are not errors (extraneous bytes, say), except for data that ends early:
// libjpeg would fill the rest with gray, Pillow refuses the image as truncated.
void jpeg_warning(j_common_ptr info, int level) {
  if (level < 0 && info->err->msg_code == JWRN_JPEG_EOF) jpeg_fail(info);
}

// Returns false with error->message set on a libjpeg error. A size outside the limits
// (refused_width/height) or a CMYK image is left unread.
bool run_jpeg(const uint8_t* data, size_t size, const ImageLimits& limits, Image* out, JpegError* error,
              int64_t* refused_width, int64_t* refused_height, bool* cmyk) {
  jpeg_decompress_struct info;
  info.err = jpeg_std_error(&error->manager);
  error->manager.error_exit = jpeg_fail;
  error->manager.emit_message = jpeg_warning;
  if (setjmp(error->jump)) {
    jpeg_destroy_decompress(&info);
    return false;
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, data, static_cast<unsigned long>(size));
  jpeg_read_header(&info, TRUE);
  if (info.jpeg_color_space == JCS_CMYK || info.jpeg_color_space == JCS_YCCK) {
    *cmyk = true;
    jpeg_destroy_decompress(&info);
    return true;
  }
  const int64_t width = info.image_width, height = info.image_height;
  if (width <= 0 || height <= 0 || width > limits.max_side || height > limits.max_side ||
      width * height > limits.max_pixels) {
    *refused_width = width;
    *refused_height = height;
    jpeg_destroy_decompress(&info);
    return true;
  }
  info.out_color_space = JCS_RGB;
  info.dct_method = JDCT_ISLOW;
  info.do_fancy_upsampling = TRUE;
  jpeg_start_decompress(&info);
  out->width = static_cast<int>(info.output_width);
  out->height = static_cast<int>(info.output_height);
  out->rgb.resize(static_cast<size_t>(out->width) * out->height * 3);
  while (info.output_scanline < info.output_height) {
    JSAMPROW row = out->rgb.data() + static_cast<size_t>(info.output_scanline) * out->width * 3;
    jpeg_read_scanlines(&info, &row, 1);
  }
  jpeg_finish_decompress(&info);
  jpeg_destroy_decompress(&info);
  return true;
}

Image decode_jpeg(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  Image image;
  JpegError error{};
  int64_t refused_width = -1, refused_height = -1;
  bool cmyk = false;
  if (!run_jpeg(bytes.data(), bytes.size(), limits, &image, &error, &refused_width, &refused_height, &cmyk))
    fail("the JPEG image could not be decoded: ", error.message);
  if (cmyk) fail("CMYK JPEG images are not supported; send RGB or grayscale");
  if (refused_width >= 0) check_image_size(refused_width, refused_height, limits, "JPEG");
  return image;
}

// ---- PNG (libpng, as Pillow reduces it: 16-bit samples keep their high byte, palettes
// and gray expand to RGB, alpha and tRNS are dropped).

struct PngSource {
  const uint8_t* data;
  size_t size;
  size_t offset;
};

struct PngError {
  std::jmp_buf jump;
  char message[256];
};

void png_read_memory(png_structp png, png_bytep out, png_size_t count) {
  auto* source = static_cast<PngSource*>(png_get_io_ptr(png));
  if (count > source->size - source->offset) png_error(png, "the PNG data ends early (truncated)");
  std::memcpy(out, source->data + source->offset, count);
  source->offset += count;
}

void png_fail(png_structp png, png_const_charp message) {
  auto* error = static_cast<PngError*>(png_get_error_ptr(png));
  std::snprintf(error->message, sizeof error->message, "%s", message);
  std::longjmp(error->jump, 1);
}

void png_quiet(png_structp, png_const_charp) {}

// As run_jpeg: false on a libpng error; `refusal` set for a size outside the limits.
bool run_png(PngSource* source, const ImageLimits& limits, Image* out, std::vector<png_bytep>* rows, PngError* error,
             int64_t* refused_width, int64_t* refused_height) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, error, png_fail, png_quiet);
  if (png == nullptr) {
    std::snprintf(error->message, sizeof error->message, "libpng could not start");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (setjmp(error->jump)) {
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  if (info == nullptr) png_error(png, "libpng could not start");
  png_set_read_fn(png, source, png_read_memory);
  png_read_info(png, info);
  const int64_t width = png_get_image_width(png, info), height = png_get_image_height(png, info);
  if (width <= 0 || height <= 0 || width > limits.max_side || height > limits.max_side ||
      width * height > limits.max_pixels) {
    *refused_width = width;
    *refused_height = height;
    png_destroy_read_struct(&png, &info, nullptr);
    return true;
  }
  const int color = png_get_color_type(png, info);
  png_set_strip_16(png);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) {
    png_set_expand_gray_1_2_4_to_8(png);
    png_set_gray_to_rgb(png);
  }
  png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != static_cast<size_t>(width) * 3) png_error(png, "unexpected PNG row layout");
  out->width = static_cast<int>(width);
  out->height = static_cast<int>(height);
  out->rgb.resize(static_cast<size_t>(width) * height * 3);
  rows->resize(static_cast<size_t>(height));
  for (int64_t y = 0; y < height; ++y) (*rows)[static_cast<size_t>(y)] = out->rgb.data() + y * width * 3;
  png_read_image(png, rows->data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

Image decode_png(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  Image image;
  PngSource source{bytes.data(), bytes.size(), 0};
  std::vector<png_bytep> rows;
  PngError error{};
  int64_t refused_width = -1, refused_height = -1;
  if (!run_png(&source, limits, &image, &rows, &error, &refused_width, &refused_height))
    fail("the PNG image could not be decoded: ", error.message);
  if (refused_width >= 0) check_image_size(refused_width, refused_height, limits, "PNG");
  return image;
}

// ---- WebP (libwebp, as Pillow: alpha dropped, not premultiplied).

Image decode_webp(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  int width = 0, height = 0;
  if (!WebPGetInfo(bytes.data(), bytes.size(), &width, &height)) fail("the WebP image could not be read: corrupt header");
  check_image_size(width, height, limits, "WebP");
  Image image;
  image.width = width;
  image.height = height;
  image.rgb.resize(static_cast<size_t>(width) * height * 3);
  if (WebPDecodeRGBInto(bytes.data(), bytes.size(), image.rgb.data(), image.rgb.size(), width * 3) == nullptr)
    fail("the WebP image could not be decoded: corrupt or truncated data");
  return image;
}

bool starts_with(std::span<const uint8_t> bytes, std::string_view signature, size_t at = 0) {
  return bytes.size() >= at + signature.size() && std::memcmp(bytes.data() + at, signature.data(), signature.size()) == 0;
}

}  // namespace

Image decode_image(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  if (bytes.size() > limits.max_bytes)
    fail("the image file has ", bytes.size(), " bytes; the limit is ", limits.max_bytes);
  if (starts_with(bytes, "\xFF\xD8\xFF")) return decode_jpeg(bytes, limits);
  if (starts_with(bytes, "\x89PNG\r\n\x1A\n")) return decode_png(bytes, limits);
  if (starts_with(bytes, "RIFF") && starts_with(bytes, "WEBP", 8)) return decode_webp(bytes, limits);
  if (starts_with(bytes, "GIF87a") || starts_with(bytes, "GIF89a")) return decode_gif(bytes, limits);
  if (starts_with(bytes, "BM")) return decode_bmp(bytes, limits);
  fail("the data is not an image this server reads (", bytes.size(), " bytes; JPEG, PNG, WebP, GIF and BMP are read)");
}

}  // namespace ernie
