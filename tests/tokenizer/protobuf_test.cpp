// Protobuf wire-format reader/writer and the ModelProto subset.
#include <cstring>
#include <limits>
#include <string>

#include "specdec/core/error.hpp"
#include "specdec/tokenizer/sentencepiece_model.hpp"
#include "support/catch.hpp"

using namespace specdec::tokenizer;
using Catch::Matchers::Contains;
using specdec::TokenizerError;

namespace {

std::string bytes(std::initializer_list<int> v) {
  std::string s;
  for (int b : v) s.push_back(static_cast<char>(b));
  return s;
}

// Reads field 1 as a varint from `data` (exactly one field expected).
std::uint64_t one_varint(const std::string& data) {
  ProtoReader r(data, "t");
  REQUIRE(r.next());
  REQUIRE(r.field() == 1);
  const std::uint64_t v = r.read_varint();
  REQUIRE_FALSE(r.next());
  return v;
}

}  // namespace

TEST_CASE("ProtoReader decodes varints of every length", "[unit][tokenizer]") {
  CHECK(one_varint(bytes({0x08, 0x00})) == 0);
  CHECK(one_varint(bytes({0x08, 0x7f})) == 127);
  CHECK(one_varint(bytes({0x08, 0xac, 0x02})) == 300);
  CHECK(one_varint(bytes({0x08, 0xff, 0xff, 0xff, 0xff, 0x0f})) == 0xffffffffu);
  CHECK(one_varint(bytes({0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})) ==
        std::numeric_limits<std::uint64_t>::max());
  // Non-minimal encodings are legal.
  CHECK(one_varint(bytes({0x08, 0x81, 0x80, 0x80, 0x00})) == 1);

  for (std::uint64_t v : {0ull, 1ull, 127ull, 128ull, 16383ull, 16384ull, 1ull << 35, ~0ull}) {
    ProtoWriter w;
    w.varint_field(1, v);
    CHECK(one_varint(w.str()) == v);
  }
}

TEST_CASE("ProtoReader reads int32 and enums sign-extended to ten bytes", "[unit][tokenizer]") {
  ProtoWriter w;
  w.int32_field(43, -1);
  w.int32_field(44, std::numeric_limits<std::int32_t>::min());
  w.int32_field(45, 7);
  CHECK(w.str().size() == 2 + 10 + 2 + 10 + 2 + 1);
  ProtoReader r(w.str());
  REQUIRE(r.next());
  CHECK(r.field() == 43);
  CHECK(r.read_int32() == -1);
  REQUIRE(r.next());
  CHECK(r.read_int32() == std::numeric_limits<std::int32_t>::min());
  REQUIRE(r.next());
  CHECK(r.read_int32() == 7);
  CHECK_FALSE(r.next());
}

TEST_CASE("ProtoReader reads fixed32 floats, fixed64 and bytes", "[unit][tokenizer]") {
  ProtoWriter w;
  w.float_field(2, -1234.5f);
  w.fixed64_field(3, 0x0123456789abcdefull);
  w.bytes_field(1, std::string("a\0b", 3));
  w.bytes_field(4, "");
  ProtoReader r(w.str());
  REQUIRE(r.next());
  CHECK(r.wire_type() == WireType::kFixed32);
  CHECK(r.read_float() == -1234.5f);
  REQUIRE(r.next());
  CHECK(r.read_fixed64() == 0x0123456789abcdefull);
  REQUIRE(r.next());
  CHECK(r.read_bytes() == std::string_view("a\0b", 3));
  REQUIRE(r.next());
  CHECK(r.read_bytes().empty());
  CHECK_FALSE(r.next());
}

TEST_CASE("ProtoReader skips unknown fields of every wire type, groups included", "[unit][tokenizer]") {
  ProtoWriter w;
  w.varint_field(100, ~0ull);
  w.fixed64_field(101, 5);
  w.fixed32_field(102, 6);
  w.bytes_field(103, "ignored payload");
  // A group holding a varint, a nested group and a length-delimited field.
  w.tag(104, WireType::kStartGroup);
  w.varint_field(1, 9);
  w.tag(2, WireType::kStartGroup);
  w.fixed32_field(3, 1);
  w.tag(2, WireType::kEndGroup);
  w.bytes_field(4, "x");
  w.tag(104, WireType::kEndGroup);
  w.bytes_field(1, "kept");
  ProtoReader r(w.str());
  std::string kept;
  int fields = 0;
  while (r.next()) {
    ++fields;
    if (r.field() == 1)
      kept = std::string(r.read_bytes());
    else
      r.skip();
  }
  CHECK(fields == 6);
  CHECK(kept == "kept");
}

TEST_CASE("ProtoReader rejects malformed input with a typed error naming the source", "[unit][tokenizer]") {
  auto parse_all = [](const std::string& data) {
    ProtoReader r(data, "bad.model");
    while (r.next()) r.skip();
  };
  auto fails_with = [&](const std::string& data, const std::string& what) {
    CAPTURE(what);
    CHECK_THROWS_WITH(parse_all(data),
                      Contains("bad.model") && Contains("malformed protobuf") && Contains(what));
  };
  fails_with(bytes({0x08}), "truncated varint");
  fails_with(bytes({0x08, 0x80, 0x80}), "truncated varint");
  fails_with(bytes({0x08, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}),
             "longer than 10 bytes");
  fails_with(bytes({0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}), "overflows 64 bits");
  fails_with(bytes({0x0e}), "invalid wire type 6");
  fails_with(bytes({0x0f}), "invalid wire type 7");
  fails_with(bytes({0x00, 0x00}), "field number 0");
  fails_with(bytes({0x0a, 0x05, 'a', 'b'}), "claims 5 bytes, 2 remain");
  fails_with(bytes({0x0d, 0x01, 0x02}), "truncated fixed32");
  fails_with(bytes({0x09, 0x01}), "truncated fixed64");
  fails_with(bytes({0x0c}), "without a matching start-group");
  fails_with(bytes({0x0b, 0x08, 0x01}), "unterminated group");
  fails_with(bytes({0x0b, 0x14}), "end-group for field 2 inside group 1");
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += bytes({0x0b});
  fails_with(deep, "nested too deeply");

  // A known field with the wrong wire type.
  ProtoWriter w;
  w.varint_field(1, 3);
  ProtoReader r(w.str(), "bad.model");
  REQUIRE(r.next());
  CHECK_THROWS_AS(r.read_bytes(), TokenizerError);
  CHECK_THROWS_AS(ProtoReader(w.str()).read_float(), TokenizerError);
}

TEST_CASE("ModelProto round-trips through our writer and skips unknown fields", "[unit][tokenizer]") {
  ModelProto m;
  m.pieces = {{"<unk>", 0.0f, PieceType::kUnknown},   {"<s>", 0.0f, PieceType::kControl},
              {"<0x41>", 0.0f, PieceType::kByte},     {"\xE2\x96\x81the", -1.5f, PieceType::kNormal},
              {"<u>", 0.0f, PieceType::kUserDefined}, {"zz", -9.0f, PieceType::kUnused}};
  m.trainer_spec.model_type = ModelType::kBpe;
  m.trainer_spec.vocab_size = 6;
  m.trainer_spec.byte_fallback = true;
  m.trainer_spec.split_digits = true;
  m.trainer_spec.pad_id = -1;
  m.trainer_spec.eos_id = 17;
  m.trainer_spec.unk_surface.assign(1, '?');
  m.normalizer_spec.name = "identity";
  m.normalizer_spec.add_dummy_prefix = false;
  m.normalizer_spec.remove_extra_whitespaces = false;
  m.normalizer_spec.precompiled_charsmap = std::string("\x01\x00\x02", 3);
  m.denormalizer_spec = NormalizerSpec{};
  m.denormalizer_spec->name = "denorm";

  std::string data = serialize_model_proto(m);
  // Unknown fields at the top level, as a group, and inside a piece.
  ProtoWriter extra;
  extra.bytes_field(4, "self test data");
  extra.tag(250, WireType::kStartGroup);
  extra.varint_field(1, 1);
  extra.tag(250, WireType::kEndGroup);
  ProtoWriter piece;
  piece.bytes_field(1, "x");
  piece.fixed64_field(200, 1);
  piece.float_field(2, 0.25f);
  extra.bytes_field(1, piece.str());
  data += extra.str();

  const ModelProto p = parse_model_proto(data, "mem");
  REQUIRE(p.pieces.size() == 7);
  for (std::size_t i = 0; i < m.pieces.size(); ++i) {
    CHECK(p.pieces[i].piece == m.pieces[i].piece);
    CHECK(p.pieces[i].score == m.pieces[i].score);
    CHECK(p.pieces[i].type == m.pieces[i].type);
  }
  CHECK(p.pieces[6].piece == "x");
  CHECK(p.pieces[6].score == 0.25f);
  CHECK(p.pieces[6].type == PieceType::kNormal);  // proto default
  CHECK(p.trainer_spec.model_type == ModelType::kBpe);
  CHECK(p.trainer_spec.vocab_size == 6);
  CHECK(p.trainer_spec.byte_fallback);
  CHECK(p.trainer_spec.split_digits);
  CHECK(p.trainer_spec.pad_id == -1);
  CHECK(p.trainer_spec.eos_id == 17);
  CHECK(p.trainer_spec.unk_surface == "?");
  CHECK(p.normalizer_spec.name == "identity");
  CHECK_FALSE(p.normalizer_spec.add_dummy_prefix);
  CHECK_FALSE(p.normalizer_spec.remove_extra_whitespaces);
  CHECK(p.normalizer_spec.escape_whitespaces);
  CHECK(p.normalizer_spec.precompiled_charsmap == std::string("\x01\x00\x02", 3));
  REQUIRE(p.denormalizer_spec.has_value());
  CHECK(p.denormalizer_spec->name == "denorm");

  // Proto defaults when fields are absent; singular messages merge.
  ProtoWriter ts1, ts2, top;
  ts1.int32_field(3, 2);
  ts2.int32_field(4, 77);
  top.bytes_field(2, ts1.str());
  top.bytes_field(2, ts2.str());
  const ModelProto d = parse_model_proto(top.str());
  CHECK(d.pieces.empty());
  CHECK(d.trainer_spec.model_type == ModelType::kBpe);
  CHECK(d.trainer_spec.vocab_size == 77);
  CHECK(d.trainer_spec.unk_id == 0);
  CHECK(d.trainer_spec.bos_id == 1);
  CHECK(d.trainer_spec.eos_id == 2);
  CHECK(d.trainer_spec.pad_id == -1);
  CHECK_FALSE(d.trainer_spec.byte_fallback);
  CHECK(d.normalizer_spec.add_dummy_prefix);
  CHECK(d.normalizer_spec.remove_extra_whitespaces);
  CHECK_FALSE(d.denormalizer_spec.has_value());
}

TEST_CASE("ModelProto rejects out-of-range enums and bad nesting", "[unit][tokenizer]") {
  ProtoWriter piece, top;
  piece.bytes_field(1, "a");
  piece.int32_field(3, 9);
  top.bytes_field(1, piece.str());
  CHECK_THROWS_WITH(parse_model_proto(top.str(), "m.model"),
                    Contains("m.model") && Contains("unknown SentencePiece.type 9"));

  ProtoWriter ts, top2;
  ts.int32_field(3, 5);
  top2.bytes_field(2, ts.str());
  CHECK_THROWS_WITH(parse_model_proto(top2.str(), "m.model"), Contains("unknown TrainerSpec.model_type 5"));

  // A truncated piece inside a valid outer length: the error points into it.
  ProtoWriter top3;
  top3.bytes_field(1, bytes({0x0a, 0x09, 'a'}));
  CHECK_THROWS_WITH(parse_model_proto(top3.str(), "m.model"), Contains("claims 9 bytes"));
}

TEST_CASE("A model trained by spm_train parses with the expected fields", "[unit][tokenizer]") {
  const std::string dir = SPECDEC_TOKENIZER_TEST_DATA;
  const ModelProto m = load_model_proto(dir + "/project_style.model");
  REQUIRE(m.pieces.size() == 1000);
  CHECK(m.trainer_spec.model_type == ModelType::kBpe);
  CHECK(m.trainer_spec.vocab_size == 1000);
  CHECK(m.trainer_spec.byte_fallback);
  CHECK(m.trainer_spec.split_digits);
  CHECK(m.trainer_spec.allow_whitespace_only_pieces);
  CHECK(m.trainer_spec.unk_id == 0);
  CHECK(m.trainer_spec.bos_id == 1);
  CHECK(m.trainer_spec.eos_id == 2);
  CHECK(m.trainer_spec.pad_id == -1);
  CHECK(m.normalizer_spec.name == "identity");
  CHECK(m.normalizer_spec.precompiled_charsmap.empty());
  CHECK_FALSE(m.normalizer_spec.add_dummy_prefix);
  CHECK_FALSE(m.normalizer_spec.remove_extra_whitespaces);
  CHECK(m.normalizer_spec.escape_whitespaces);
  CHECK(m.pieces[0].piece == "<unk>");
  CHECK(m.pieces[0].type == PieceType::kUnknown);
  CHECK(m.pieces[1].piece == "<s>");
  CHECK(m.pieces[1].type == PieceType::kControl);
  CHECK(m.pieces[2].type == PieceType::kControl);
  for (int b = 0; b < 256; ++b) {
    CHECK(m.pieces[static_cast<std::size_t>(3 + b)].type == PieceType::kByte);
  }
  CHECK(m.pieces[3 + 0x41].piece == "<0x41>");
  // BPE merge pieces carry descending scores (minus their rank).
  CHECK(m.pieces[259].type == PieceType::kNormal);
  CHECK(m.pieces[259].score > m.pieces[260].score);

  const ModelProto c = load_model_proto(dir + "/classic_style.model");
  CHECK_FALSE(c.normalizer_spec.precompiled_charsmap.empty());
  CHECK_FALSE(c.trainer_spec.byte_fallback);
  CHECK(c.trainer_spec.pad_id == 3);
  CHECK(c.normalizer_spec.add_dummy_prefix);
  CHECK(c.normalizer_spec.remove_extra_whitespaces);

  // Re-serialized, the model parses to the same pieces.
  const ModelProto again = parse_model_proto(serialize_model_proto(m));
  REQUIRE(again.pieces.size() == m.pieces.size());
  for (std::size_t i = 0; i < m.pieces.size(); ++i) {
    CHECK(again.pieces[i].piece == m.pieces[i].piece);
    CHECK(again.pieces[i].score == m.pieces[i].score);
  }
}

TEST_CASE("load_model_proto names the file in its errors", "[unit][tokenizer]") {
  CHECK_THROWS_WITH(load_model_proto("/nonexistent/dir/tokenizer.model"),
                    Contains("/nonexistent/dir/tokenizer.model") && Contains("no such file"));
  CHECK_THROWS_AS(load_model_proto("/nonexistent/dir/tokenizer.model"), specdec::Error);
  CHECK_THROWS_WITH(load_model_proto("/tmp"), Contains("is a directory"));
}
