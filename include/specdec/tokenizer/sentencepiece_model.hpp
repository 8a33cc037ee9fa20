// SentencePiece's model file (`tokenizer.model`, a serialized protobuf
// `sentencepiece.ModelProto`), read and written by our own minimal protobuf
// wire-format code: no libprotobuf, no libsentencepiece.
//
// Only the fields a tokenizer needs are kept; every other field, known to
// sentencepiece_model.proto or not, is skipped by wire type (varint, fixed64,
// length-delimited, groups, fixed32), so models from newer or older
// SentencePiece versions load. Field numbers follow sentencepiece_model.proto
// (proto2): ModelProto{pieces=1, trainer_spec=2, normalizer_spec=3,
// denormalizer_spec=5}, SentencePiece{piece=1, score=2, type=3}.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace specdec::tokenizer {

// ---- protobuf wire format ---------------------------------------------------------

enum class WireType : std::uint8_t {
  kVarint = 0,
  kFixed64 = 1,
  kLengthDelimited = 2,
  kStartGroup = 3,
  kEndGroup = 4,
  kFixed32 = 5,
};

// Sequential reader over one serialized message. Every malformation (truncated
// varint or field, varint longer than 10 bytes, wire type 6 or 7, field number
// 0, unbalanced groups, a value read with the wrong wire type) throws
// specdec::TokenizerError naming `source` and the byte offset.
//
//   ProtoReader r(bytes, "tokenizer.model");
//   while (r.next()) {
//     if (r.field() == 1 && r.wire_type() == WireType::kLengthDelimited) use(r.read_bytes());
//     else r.skip();
//   }
class ProtoReader {
 public:
  explicit ProtoReader(std::string_view data, std::string_view source = "<memory>",
                       std::size_t base_offset = 0);

  // Reads the next tag. False at the end of the data.
  bool next();
  std::uint32_t field() const noexcept { return field_; }
  WireType wire_type() const noexcept { return wire_type_; }

  // Value readers for the current field; each checks the wire type.
  std::uint64_t read_varint();
  std::int32_t read_int32();  // proto int32/enum: a 64-bit varint truncated
  bool read_bool();
  std::uint32_t read_fixed32();
  std::uint64_t read_fixed64();
  float read_float();
  std::string_view read_bytes();  // length-delimited: string, bytes, message
  // A reader over the current length-delimited field (a sub-message).
  ProtoReader read_message();
  // Skips the current field's value, whatever its wire type (groups included).
  void skip();

  std::size_t offset() const noexcept { return base_ + pos_; }
  [[noreturn]] void fail(std::string_view what) const;

 private:
  std::uint64_t raw_varint();
  void expect(WireType t, std::string_view what) const;
  void skip_value(WireType t, std::uint32_t field, int depth);

  std::string_view data_;
  std::string source_;
  std::size_t base_ = 0;
  std::size_t pos_ = 0;
  std::size_t tag_pos_ = 0;
  std::uint32_t field_ = 0;
  WireType wire_type_ = WireType::kVarint;
};

// Appends wire-format fields to a buffer (tests craft models with it; tools may
// write edited models).
class ProtoWriter {
 public:
  void varint_field(std::uint32_t field, std::uint64_t v);
  void int32_field(std::uint32_t field, std::int32_t v);  // negative: 10-byte varint
  void bool_field(std::uint32_t field, bool v) { varint_field(field, v ? 1 : 0); }
  void fixed32_field(std::uint32_t field, std::uint32_t v);
  void fixed64_field(std::uint32_t field, std::uint64_t v);
  void float_field(std::uint32_t field, float v);
  void bytes_field(std::uint32_t field, std::string_view v);
  void tag(std::uint32_t field, WireType t);
  void raw_varint(std::uint64_t v);
  void raw(std::string_view bytes) { out_.append(bytes); }

  const std::string& str() const noexcept { return out_; }
  std::string take() noexcept { return std::move(out_); }

 private:
  std::string out_;
};

// ---- sentencepiece.ModelProto -------------------------------------------------------

enum class PieceType : std::int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

enum class ModelType : std::int32_t { kUnigram = 1, kBpe = 2, kWord = 3, kChar = 4 };

std::string_view to_string(PieceType t) noexcept;
std::string_view to_string(ModelType t) noexcept;

struct SentencePiece {
  std::string piece;                    // field 1
  float score = 0.0f;                   // field 2 (fixed32)
  PieceType type = PieceType::kNormal;  // field 3
};

// TrainerSpec fields that change encoding or decoding, with proto defaults.
struct TrainerSpec {
  ModelType model_type = ModelType::kUnigram;  // 3
  std::int32_t vocab_size = 8000;              // 4
  bool split_digits = false;                   // 25
  bool treat_whitespace_as_suffix = false;     // 24
  bool allow_whitespace_only_pieces = false;   // 26
  bool byte_fallback = false;                  // 35
  std::int32_t unk_id = 0;                     // 40
  std::int32_t bos_id = 1;                     // 41
  std::int32_t eos_id = 2;                     // 42
  std::int32_t pad_id = -1;                    // 43
  std::string unk_surface = " \xE2\x81\x87 ";  // 44
  std::string unk_piece = "<unk>";             // 45
  std::string bos_piece = "<s>";               // 46
  std::string eos_piece = "</s>";              // 47
  std::string pad_piece = "<pad>";             // 48
};

struct NormalizerSpec {
  std::string name;                      // 1
  std::string precompiled_charsmap;      // 2 (bytes)
  bool add_dummy_prefix = true;          // 3
  bool remove_extra_whitespaces = true;  // 4
  bool escape_whitespaces = true;        // 5
};

struct ModelProto {
  std::vector<SentencePiece> pieces;                // 1
  TrainerSpec trainer_spec;                         // 2
  NormalizerSpec normalizer_spec;                   // 3
  std::optional<NormalizerSpec> denormalizer_spec;  // 5
};

// Parses a serialized ModelProto. Throws TokenizerError naming `source` on
// malformed wire data or out-of-range enum values. No semantic checks (those
// belong to the tokenizer that uses the model).
ModelProto parse_model_proto(std::string_view bytes, std::string_view source = "<memory>");

// Reads and parses a file; a missing or unreadable file throws TokenizerError.
ModelProto load_model_proto(const std::filesystem::path& path);

// Serializes the fields above (defaults included, explicitly).
std::string serialize_model_proto(const ModelProto& model);

// Reads a whole file into a string; TokenizerError if it cannot.
std::string read_file_bytes(const std::filesystem::path& path);

}  // namespace specdec::tokenizer
