// Minimal protobuf wire-format reader/writer and the sentencepiece.ModelProto
// subset built on it. See sentencepiece_model.hpp.
#include "specdec/tokenizer/sentencepiece_model.hpp"

#include <fmt/format.h>

#include <bit>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "specdec/core/error.hpp"

namespace specdec::tokenizer {

namespace {

constexpr int kMaxGroupDepth = 64;

std::string_view wire_type_name(WireType t) {
  switch (t) {
    case WireType::kVarint:
      return "varint";
    case WireType::kFixed64:
      return "fixed64";
    case WireType::kLengthDelimited:
      return "length-delimited";
    case WireType::kStartGroup:
      return "start-group";
    case WireType::kEndGroup:
      return "end-group";
    case WireType::kFixed32:
      return "fixed32";
  }
  return "invalid";
}

}  // namespace

// ---- ProtoReader -----------------------------------------------------------------------

ProtoReader::ProtoReader(std::string_view data, std::string_view source, std::size_t base_offset)
    : data_(data), source_(source), base_(base_offset) {}

void ProtoReader::fail(std::string_view what) const {
  throw TokenizerError(fmt::format("{}: malformed protobuf at byte {}: {}", source_, base_ + tag_pos_, what));
}

std::uint64_t ProtoReader::raw_varint() {
  std::uint64_t v = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (pos_ >= data_.size()) fail("truncated varint");
    const auto b = static_cast<std::uint8_t>(data_[pos_++]);
    if (shift == 63 && (b & 0x7e) != 0) fail("varint overflows 64 bits");
    v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return v;
  }
  fail("varint longer than 10 bytes");
}

bool ProtoReader::next() {
  if (pos_ >= data_.size()) return false;
  tag_pos_ = pos_;
  const std::uint64_t tag = raw_varint();
  const std::uint64_t wt = tag & 7;
  const std::uint64_t field = tag >> 3;
  if (wt > 5) fail(fmt::format("invalid wire type {}", wt));
  if (field == 0) fail("field number 0");
  if (field > 0x1fffffff) fail("field number out of range");
  field_ = static_cast<std::uint32_t>(field);
  wire_type_ = static_cast<WireType>(wt);
  if (wire_type_ == WireType::kEndGroup)
    fail(fmt::format("end-group for field {} without a matching start-group", field_));
  return true;
}

void ProtoReader::expect(WireType t, std::string_view what) const {
  if (wire_type_ != t)
    fail(fmt::format("field {} has wire type {}, expected {} for {}", field_, wire_type_name(wire_type_),
                     wire_type_name(t), what));
}

std::uint64_t ProtoReader::read_varint() {
  expect(WireType::kVarint, "a varint");
  return raw_varint();
}

std::int32_t ProtoReader::read_int32() {
  // int32 and enum values are sign-extended to 64 bits on the wire; proto
  // parsers keep the low 32 bits.
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(read_varint() & 0xffffffffu));
}

bool ProtoReader::read_bool() {
  return read_varint() != 0;
}

std::uint32_t ProtoReader::read_fixed32() {
  expect(WireType::kFixed32, "a fixed32");
  if (data_.size() - pos_ < 4) fail("truncated fixed32");
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<std::uint32_t>(static_cast<std::uint8_t>(data_[pos_ + i])) << (8 * i);
  pos_ += 4;
  return v;
}

std::uint64_t ProtoReader::read_fixed64() {
  expect(WireType::kFixed64, "a fixed64");
  if (data_.size() - pos_ < 8) fail("truncated fixed64");
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<std::uint64_t>(static_cast<std::uint8_t>(data_[pos_ + i])) << (8 * i);
  pos_ += 8;
  return v;
}

float ProtoReader::read_float() {
  return std::bit_cast<float>(read_fixed32());
}

std::string_view ProtoReader::read_bytes() {
  expect(WireType::kLengthDelimited, "a length-delimited value");
  const std::uint64_t n = raw_varint();
  if (n > data_.size() - pos_)
    fail(fmt::format("length-delimited field {} claims {} bytes, {} remain", field_, n, data_.size() - pos_));
  const std::string_view v = data_.substr(pos_, static_cast<std::size_t>(n));
  pos_ += static_cast<std::size_t>(n);
  return v;
}

ProtoReader ProtoReader::read_message() {
  const std::string_view body = read_bytes();
  const auto start = static_cast<std::size_t>(body.data() - data_.data());
  return ProtoReader(body, source_, base_ + start);
}

void ProtoReader::skip_value(WireType t, std::uint32_t field, int depth) {
  switch (t) {
    case WireType::kVarint:
      raw_varint();
      return;
    case WireType::kFixed64:
      if (data_.size() - pos_ < 8) fail("truncated fixed64");
      pos_ += 8;
      return;
    case WireType::kFixed32:
      if (data_.size() - pos_ < 4) fail("truncated fixed32");
      pos_ += 4;
      return;
    case WireType::kLengthDelimited: {
      const std::uint64_t n = raw_varint();
      if (n > data_.size() - pos_)
        fail(fmt::format("length-delimited field {} claims {} bytes, {} remain", field, n,
                         data_.size() - pos_));
      pos_ += static_cast<std::size_t>(n);
      return;
    }
    case WireType::kStartGroup: {
      if (depth >= kMaxGroupDepth) fail("groups nested too deeply");
      for (;;) {
        if (pos_ >= data_.size()) fail(fmt::format("unterminated group for field {}", field));
        const std::uint64_t tag = raw_varint();
        const std::uint64_t wt = tag & 7;
        const std::uint64_t f = tag >> 3;
        if (wt > 5) fail(fmt::format("invalid wire type {}", wt));
        if (f == 0 || f > 0x1fffffff) fail("invalid field number");
        if (static_cast<WireType>(wt) == WireType::kEndGroup) {
          if (f != field) fail(fmt::format("end-group for field {} inside group {}", f, field));
          return;
        }
        skip_value(static_cast<WireType>(wt), static_cast<std::uint32_t>(f), depth + 1);
      }
    }
    case WireType::kEndGroup:
      fail("unexpected end-group");
  }
  fail("invalid wire type");
}

void ProtoReader::skip() {
  skip_value(wire_type_, field_, 0);
}

// ---- ProtoWriter ---------------------------------------------------------------------

void ProtoWriter::raw_varint(std::uint64_t v) {
  while (v >= 0x80) {
    out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out_.push_back(static_cast<char>(v));
}

void ProtoWriter::tag(std::uint32_t field, WireType t) {
  raw_varint((static_cast<std::uint64_t>(field) << 3) | static_cast<std::uint64_t>(t));
}

void ProtoWriter::varint_field(std::uint32_t field, std::uint64_t v) {
  tag(field, WireType::kVarint);
  raw_varint(v);
}

void ProtoWriter::int32_field(std::uint32_t field, std::int32_t v) {
  varint_field(field, static_cast<std::uint64_t>(static_cast<std::int64_t>(v)));
}

void ProtoWriter::fixed32_field(std::uint32_t field, std::uint32_t v) {
  tag(field, WireType::kFixed32);
  for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void ProtoWriter::fixed64_field(std::uint32_t field, std::uint64_t v) {
  tag(field, WireType::kFixed64);
  for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void ProtoWriter::float_field(std::uint32_t field, float v) {
  fixed32_field(field, std::bit_cast<std::uint32_t>(v));
}

void ProtoWriter::bytes_field(std::uint32_t field, std::string_view v) {
  tag(field, WireType::kLengthDelimited);
  raw_varint(v.size());
  out_.append(v);
}

// ---- ModelProto -----------------------------------------------------------------------

std::string_view to_string(PieceType t) noexcept {
  switch (t) {
    case PieceType::kNormal:
      return "NORMAL";
    case PieceType::kUnknown:
      return "UNKNOWN";
    case PieceType::kControl:
      return "CONTROL";
    case PieceType::kUserDefined:
      return "USER_DEFINED";
    case PieceType::kUnused:
      return "UNUSED";
    case PieceType::kByte:
      return "BYTE";
  }
  return "?";
}

std::string_view to_string(ModelType t) noexcept {
  switch (t) {
    case ModelType::kUnigram:
      return "UNIGRAM";
    case ModelType::kBpe:
      return "BPE";
    case ModelType::kWord:
      return "WORD";
    case ModelType::kChar:
      return "CHAR";
  }
  return "?";
}

namespace {

void parse_piece(ProtoReader r, SentencePiece& p) {
  while (r.next()) {
    switch (r.field()) {
      case 1:
        p.piece = std::string(r.read_bytes());
        break;
      case 2:
        p.score = r.read_float();
        break;
      case 3: {
        const std::int32_t t = r.read_int32();
        if (t < 1 || t > 6) r.fail(fmt::format("unknown SentencePiece.type {}", t));
        p.type = static_cast<PieceType>(t);
        break;
      }
      default:
        r.skip();
    }
  }
}

void parse_trainer_spec(ProtoReader r, TrainerSpec& s) {
  while (r.next()) {
    switch (r.field()) {
      case 3: {
        const std::int32_t t = r.read_int32();
        if (t < 1 || t > 4) r.fail(fmt::format("unknown TrainerSpec.model_type {}", t));
        s.model_type = static_cast<ModelType>(t);
        break;
      }
      case 4:
        s.vocab_size = r.read_int32();
        break;
      case 24:
        s.treat_whitespace_as_suffix = r.read_bool();
        break;
      case 25:
        s.split_digits = r.read_bool();
        break;
      case 26:
        s.allow_whitespace_only_pieces = r.read_bool();
        break;
      case 35:
        s.byte_fallback = r.read_bool();
        break;
      case 40:
        s.unk_id = r.read_int32();
        break;
      case 41:
        s.bos_id = r.read_int32();
        break;
      case 42:
        s.eos_id = r.read_int32();
        break;
      case 43:
        s.pad_id = r.read_int32();
        break;
      case 44:
        s.unk_surface = std::string(r.read_bytes());
        break;
      case 45:
        s.unk_piece = std::string(r.read_bytes());
        break;
      case 46:
        s.bos_piece = std::string(r.read_bytes());
        break;
      case 47:
        s.eos_piece = std::string(r.read_bytes());
        break;
      case 48:
        s.pad_piece = std::string(r.read_bytes());
        break;
      default:
        r.skip();
    }
  }
}

void parse_normalizer_spec(ProtoReader r, NormalizerSpec& s) {
  while (r.next()) {
    switch (r.field()) {
      case 1:
        s.name = std::string(r.read_bytes());
        break;
      case 2:
        s.precompiled_charsmap = std::string(r.read_bytes());
        break;
      case 3:
        s.add_dummy_prefix = r.read_bool();
        break;
      case 4:
        s.remove_extra_whitespaces = r.read_bool();
        break;
      case 5:
        s.escape_whitespaces = r.read_bool();
        break;
      default:
        r.skip();
    }
  }
}

void write_normalizer_spec(ProtoWriter& w, std::uint32_t field, const NormalizerSpec& s) {
  ProtoWriter m;
  m.bytes_field(1, s.name);
  if (!s.precompiled_charsmap.empty()) m.bytes_field(2, s.precompiled_charsmap);
  m.bool_field(3, s.add_dummy_prefix);
  m.bool_field(4, s.remove_extra_whitespaces);
  m.bool_field(5, s.escape_whitespaces);
  w.bytes_field(field, m.str());
}

}  // namespace

ModelProto parse_model_proto(std::string_view bytes, std::string_view source) {
  ModelProto model;
  ProtoReader r(bytes, source);
  while (r.next()) {
    switch (r.field()) {
      case 1:
        parse_piece(r.read_message(), model.pieces.emplace_back());
        break;
      // Proto2 merges repeated occurrences of a singular message field.
      case 2:
        parse_trainer_spec(r.read_message(), model.trainer_spec);
        break;
      case 3:
        parse_normalizer_spec(r.read_message(), model.normalizer_spec);
        break;
      case 5:
        if (!model.denormalizer_spec) model.denormalizer_spec.emplace();
        parse_normalizer_spec(r.read_message(), *model.denormalizer_spec);
        break;
      default:
        r.skip();
    }
  }
  return model;
}

std::string read_file_bytes(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw TokenizerError(fmt::format("{}: no such file", path.string()));
  if (std::filesystem::is_directory(path, ec))
    throw TokenizerError(fmt::format("{}: is a directory, expected a tokenizer file", path.string()));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TokenizerError(fmt::format("{}: cannot open for reading", path.string()));
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw TokenizerError(fmt::format("{}: read error", path.string()));
  return data;
}

ModelProto load_model_proto(const std::filesystem::path& path) {
  const std::string data = read_file_bytes(path);
  if (data.empty()) throw TokenizerError(fmt::format("{}: empty file", path.string()));
  return parse_model_proto(data, path.string());
}

std::string serialize_model_proto(const ModelProto& model) {
  ProtoWriter w;
  for (const auto& p : model.pieces) {
    ProtoWriter m;
    m.bytes_field(1, p.piece);
    m.float_field(2, p.score);
    m.int32_field(3, static_cast<std::int32_t>(p.type));
    w.bytes_field(1, m.str());
  }
  {
    const TrainerSpec& s = model.trainer_spec;
    ProtoWriter m;
    m.int32_field(3, static_cast<std::int32_t>(s.model_type));
    m.int32_field(4, s.vocab_size);
    m.bool_field(24, s.treat_whitespace_as_suffix);
    m.bool_field(25, s.split_digits);
    m.bool_field(26, s.allow_whitespace_only_pieces);
    m.bool_field(35, s.byte_fallback);
    m.int32_field(40, s.unk_id);
    m.int32_field(41, s.bos_id);
    m.int32_field(42, s.eos_id);
    m.int32_field(43, s.pad_id);
    m.bytes_field(44, s.unk_surface);
    m.bytes_field(45, s.unk_piece);
    m.bytes_field(46, s.bos_piece);
    m.bytes_field(47, s.eos_piece);
    m.bytes_field(48, s.pad_piece);
    w.bytes_field(2, m.str());
  }
  write_normalizer_spec(w, 3, model.normalizer_spec);
  if (model.denormalizer_spec) write_normalizer_spec(w, 5, *model.denormalizer_spec);
  return w.take();
}

}  // namespace specdec::tokenizer
