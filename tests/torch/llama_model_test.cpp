// Numerics of the reference Llama model on tiny random-weight models: the
// cached tree forward, KV compaction and batched forwards all agree with the
// plain causal forward.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <filesystem>
#include <thread>
#include <vector>

#include "specdec/core/draft_tree.hpp"
#include "specdec/core/error.hpp"
#include "specdec/cpu/llama_model.hpp"
#include "specdec/cpu/row_linear.hpp"
#include "specdec/cpu/threads.hpp"
#include "specdec/torch/llama_model.hpp"
#include "specdec/torch/tensor_interop.hpp"
#include "support/catch.hpp"

namespace sd = specdec;
namespace tb = specdec::torch_backend;

namespace {

sd::io::LlamaConfig tiny_config(bool tied, std::int64_t kv_heads) {
  sd::io::LlamaConfig c;
  c.vocab_size = 97;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = kv_heads;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = tied;
  return c;
}

// Largest |a - b| relative to the largest |b|.
double rel_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

// Logits of the causal forward over `tokens` (positions 0..n-1): [n, vocab].
at::Tensor reference_logits(const tb::LlamaModel& m, const std::vector<std::int64_t>& tokens) {
  return m.forward_train(at::tensor(tokens, at::kLong).unsqueeze(0)).squeeze(0);
}

sd::PackedMask packed(const sd::BitMatrix* mask) { return mask ? sd::PackedMask::of(*mask) : sd::PackedMask{}; }

// Logits of every new token of `inputs`, written into a tensor the caller owns
// (by the libtorch model, or by cpu::LlamaModel).
template <class M>
at::Tensor forward_logits(M& m, std::span<const sd::SequenceInput> inputs) {
  std::int64_t total = 0;
  for (const auto& in : inputs) total += static_cast<std::int64_t>(in.tokens.size());
  auto logits = at::empty({total, m.vocab_size()});
  sd::ForwardRequest request{inputs};
  request.logits = tb::view_of(logits);
  m.forward(request);
  return logits;
}

at::Tensor run(tb::LlamaModel& m, std::int32_t seq, const std::vector<sd::TokenId>& tokens,
               const std::vector<std::int64_t>& positions, const sd::BitMatrix* mask) {
  const sd::SequenceInput in{seq, tokens, positions, packed(mask)};
  return forward_logits(m, std::span(&in, 1));
}

}  // namespace

TEST_CASE("Cached prefill equals the causal training forward", "[torch][model]") {
  for (const bool tied : {true, false})
    for (const std::int64_t kv : {4, 2, 1}) {
      auto m = tb::LlamaModel::random(tiny_config(tied, kv), 7);
      const std::vector<sd::TokenId> prompt{5, 17, 3, 88, 42, 0, 96, 11};
      const std::vector<std::int64_t> pos{0, 1, 2, 3, 4, 5, 6, 7};
      m.open(0);
      const auto cached = run(m, 0, prompt, pos, nullptr);
      const auto ref = reference_logits(m, {5, 17, 3, 88, 42, 0, 96, 11});
      INFO("tied " << tied << ", kv heads " << kv);
      CHECK(rel_diff(cached, ref) < 1e-5);
    }
}

TEST_CASE("A tree verification forward gives every node the logits of its root path", "[torch][model]") {
  auto m = tb::LlamaModel::random(tiny_config(true, 2), 11);
  const std::vector<std::int64_t> prompt{4, 8, 15, 16, 23};
  // Commit the prompt except its last token, which becomes the tree's root.
  m.open(0);
  run(m, 0, {4, 8, 15, 16}, {0, 1, 2, 3}, nullptr);
  m.accept(0, std::vector<std::int32_t>{0, 1, 2, 3});
  // root 23 -> {a:42, b:7}; a -> {c:1, d:2}; b -> {e:9}; d -> {f:50}
  sd::DraftTree tree(23);
  const auto a = tree.add_node(sd::DraftTree::kRoot, 42, 0.5f);
  const auto b = tree.add_node(sd::DraftTree::kRoot, 7, 0.5f);
  tree.add_node(a, 1, 0.5f);
  const auto d = tree.add_node(a, 2, 0.5f);
  tree.add_node(b, 9, 0.5f);
  tree.add_node(d, 50, 0.5f);
  std::vector<sd::TokenId> tokens{23};
  for (const auto& n : tree.nodes()) tokens.push_back(n.token);
  std::vector<std::int64_t> positions{4};
  for (auto p : tree.positions(4)) positions.push_back(p);
  const auto mask = tree.ancestor_mask(/*include_root=*/true);
  const auto logits = run(m, 0, tokens, positions, &mask);
  REQUIRE(logits.size(0) == tree.size() + 1);
  // Root row: the prompt itself.
  CHECK(rel_diff(logits[0], reference_logits(m, prompt)[4]) < 1e-4);
  for (std::int32_t i = 0; i < tree.size(); ++i) {
    std::vector<std::int64_t> seq = prompt;
    for (auto j : tree.path_to(i)) seq.push_back(tree.token(j));
    INFO("node " << i);
    CHECK(rel_diff(logits[i + 1], reference_logits(m, seq).select(0, static_cast<std::int64_t>(seq.size()) - 1)) <
          1e-4);
  }
}

TEST_CASE("After accept(path) the next forward equals a fresh prefill of the accepted text", "[torch][model]") {
  auto m = tb::LlamaModel::random(tiny_config(false, 2), 3);
  m.open(1);
  run(m, 1, {10, 20, 30}, {0, 1, 2}, nullptr);
  m.accept(1, std::vector<std::int32_t>{0, 1, 2});
  // Tree at root 40: {a:50, b:60}, a -> {c:70}. Accept root, a, c (indices 0, 1, 3).
  sd::DraftTree tree(40);
  const auto a = tree.add_node(sd::DraftTree::kRoot, 50, 0.5f);
  tree.add_node(sd::DraftTree::kRoot, 60, 0.5f);
  tree.add_node(a, 70, 0.5f);
  const auto mask = tree.ancestor_mask(true);
  std::vector<std::int64_t> positions{3};
  for (auto p : tree.positions(3)) positions.push_back(p);
  run(m, 1, {40, 50, 60, 70}, positions, &mask);
  m.accept(1, std::vector<std::int32_t>{0, 1, 3});
  CHECK(m.cached_length(1) == 6);
  const auto next = run(m, 1, {80, 90}, {6, 7}, nullptr);
  const auto fresh = reference_logits(m, {10, 20, 30, 40, 50, 70, 80, 90});
  CHECK(rel_diff(next, fresh.narrow(0, 6, 2)) < 1e-4);
  // rollback to 4 tokens, then continue with different text.
  m.rollback(1, 4);
  const auto after = run(m, 1, {5, 6}, {4, 5}, nullptr);
  CHECK(rel_diff(after, reference_logits(m, {10, 20, 30, 40, 5, 6}).narrow(0, 4, 2)) < 1e-4);
}

TEST_CASE("A batched forward equals per-sequence forwards", "[torch][model]") {
  auto batched = tb::LlamaModel::random(tiny_config(true, 2), 5);
  auto single = tb::LlamaModel::random(tiny_config(true, 2), 5);
  for (auto* m : {&batched, &single}) {
    m->open(0);
    m->open(1);
    m->open(2);
    run(*m, 0, {1, 2, 3, 4, 5}, {0, 1, 2, 3, 4}, nullptr);
    m->accept(0, std::vector<std::int32_t>{0, 1, 2, 3, 4});
    run(*m, 1, {9}, {0}, nullptr);
    m->accept(1, std::vector<std::int32_t>{0});
  }
  sd::DraftTree tree(33);
  const auto a = tree.add_node(sd::DraftTree::kRoot, 34, 0.5f);
  tree.add_node(sd::DraftTree::kRoot, 35, 0.5f);
  tree.add_node(a, 36, 0.5f);
  const auto mask = tree.ancestor_mask(true);
  const std::vector<sd::TokenId> t0{33, 34, 35, 36}, t1{12, 13}, t2{60, 61, 62};
  const std::vector<std::int64_t> p0{5, 6, 6, 7}, p1{1, 2}, p2{0, 1, 2};
  const sd::SequenceInput inputs[] = {{0, t0, p0, sd::PackedMask::of(mask)}, {1, t1, p1}, {2, t2, p2}};
  const auto all = forward_logits(batched, inputs);
  REQUIRE(all.size(0) == 9);
  CHECK(rel_diff(all.narrow(0, 0, 4), run(single, 0, t0, p0, &mask)) < 1e-5);
  CHECK(rel_diff(all.narrow(0, 4, 2), run(single, 1, t1, p1, nullptr)) < 1e-5);
  CHECK(rel_diff(all.narrow(0, 6, 3), run(single, 2, t2, p2, nullptr)) < 1e-5);
}

TEST_CASE("Hidden states come back on request", "[torch][model]") {
  auto m = tb::LlamaModel::random(tiny_config(true, 4), 9);
  m.open(0);
  const std::vector<sd::TokenId> tokens{1, 2, 3};
  const std::vector<std::int64_t> pos{0, 1, 2};
  const sd::SequenceInput in{0, tokens, pos};
  auto hidden = at::empty({3, 32});
  sd::ForwardRequest request{std::span(&in, 1)};
  request.hidden = tb::view_of(hidden);
  m.forward(request);
  at::Tensor ref_hidden;
  m.forward_train(at::tensor(std::vector<std::int64_t>{1, 2, 3}, at::kLong).unsqueeze(0), &ref_hidden);
  CHECK(rel_diff(hidden, ref_hidden.squeeze(0)) < 1e-5);
  m.rollback(0, 0);
  auto layer0 = at::full({3, 32}, 1e9f);
  request.hidden = tb::view_of(layer0);
  request.hidden_layer = 0;
  m.forward(request);
  CHECK(layer0.abs().max().item<float>() < 1e6f);  // written
  CHECK(rel_diff(layer0, hidden) > 1e-3);          // and not the final layer's
  m.rollback(0, 0);
  request.hidden_layer = 5;
  REQUIRE_THROWS_AS(m.forward(request), sd::InvalidArgumentError);
  request.hidden_layer = 1;
  request.hidden_layers = 2;  // layers 1 and 2 of a 2-layer model
  REQUIRE_THROWS_AS(m.forward(request), sd::InvalidArgumentError);
  request.hidden_layer = -1;  // the final norm is one layer
  REQUIRE_THROWS_AS(m.forward(request), sd::InvalidArgumentError);
}

TEST_CASE("Save and load reproduce the model in f32 exactly and in f16 closely", "[torch][model]") {
  const auto dir = std::filesystem::temp_directory_path() / "specdec_llama_model_test";
  std::filesystem::remove_all(dir);
  const auto m = tb::LlamaModel::random(tiny_config(false, 2), 21);
  const std::vector<std::int64_t> text{3, 1, 4, 1, 5, 9, 2, 6};
  m.save(dir / "f32", sd::DType::kF32);
  m.save(dir / "f16", sd::DType::kF16);
  const auto f32 = tb::LlamaModel::load(dir / "f32");
  const auto f16 = tb::LlamaModel::load(dir / "f16");
  auto expected = m.config();
  expected.torch_dtype = "float32";  // save records the storage dtype
  CHECK(f32.config() == expected);
  CHECK(f16.config().torch_dtype == "float16");
  CHECK(at::equal(reference_logits(f32, text), reference_logits(m, text)));
  CHECK(rel_diff(reference_logits(f16, text), reference_logits(m, text)) < 1e-2);
  std::filesystem::remove_all(dir);
}

TEST_CASE("The model rejects bad input with typed errors", "[torch][model]") {
  auto m = tb::LlamaModel::random(tiny_config(true, 2), 1);
  REQUIRE_THROWS_AS(run(m, 0, {1}, {0}, nullptr), sd::InvalidArgumentError);  // not started
  m.open(0);
  REQUIRE_THROWS_WITH(run(m, 0, {1, 200}, {0, 1}, nullptr), Catch::Contains("outside the vocabulary"));
  REQUIRE_THROWS_AS(run(m, 0, {1, 2}, {0}, nullptr), sd::ShapeError);
  std::vector<sd::TokenId> long_text(65, 1);
  std::vector<std::int64_t> long_pos(65);
  REQUIRE_THROWS_WITH(run(m, 0, long_text, long_pos, nullptr), Catch::Contains("the context is 64"));
  REQUIRE_THROWS_WITH(run(m, 0, {1}, {64}, nullptr), Catch::Contains("position 64 is outside"));
  run(m, 0, {1, 2, 3}, {0, 1, 2}, nullptr);
  REQUIRE_THROWS_AS(m.accept(0, std::vector<std::int32_t>{0, 3}), sd::InvalidArgumentError);
  REQUIRE_THROWS_AS(m.accept(0, std::vector<std::int32_t>{1, 0}), sd::InvalidArgumentError);
  REQUIRE_THROWS_AS(m.rollback(0, 5), sd::InvalidArgumentError);
  REQUIRE_THROWS_AS(m.forward_train(at::zeros({3}, at::kLong)), sd::ShapeError);
  m.check_tokenizer_vocab(97, "tok.model");
  REQUIRE_THROWS_WITH(m.check_tokenizer_vocab(8000, "tok.model"),
                      Catch::Contains("tok.model") && Catch::Contains("8000") && Catch::Contains("97"));
  const auto dir = std::filesystem::temp_directory_path() / "specdec_llama_model_bad";
  std::filesystem::remove_all(dir);
  REQUIRE_THROWS_AS(tb::LlamaModel::load(dir), sd::Error);  // no config.json
  REQUIRE_THROWS_AS(m.save(dir, sd::DType::kI32), sd::InvalidArgumentError);
}

TEST_CASE("Growing a tree one level per forward (extend_staged) equals one tree forward", "[torch][model]") {
  auto m = tb::LlamaModel::random(tiny_config(false, 2), 13);
  const std::vector<std::int64_t> prompt{9, 8, 7, 6};
  m.open(0);
  // Prefill without logits, then stage [root 6] and grow root -> {a, b}, a -> {c}.
  {
    const std::vector<sd::TokenId> t{9, 8, 7};
    const std::vector<std::int64_t> p{0, 1, 2};
    const sd::SequenceInput in{0, t, p};
    m.forward(sd::ForwardRequest{std::span(&in, 1)});  // no output views: the cache only
    m.accept(0, std::vector<std::int32_t>{0, 1, 2});
  }
  run(m, 0, {6}, {3}, nullptr);  // staged: [6]
  sd::BitMatrix level1(3);        // staged [6] + new [a=30, b=31]
  level1.set(1, 0), level1.set(1, 1), level1.set(2, 0), level1.set(2, 2);
  const std::vector<sd::TokenId> t1{30, 31};
  const std::vector<std::int64_t> p1{4, 4};
  sd::SequenceInput in1{0, t1, p1, sd::PackedMask::of(level1)};
  in1.extend_staged = true;
  const auto l1 = forward_logits(m, std::span(&in1, 1));
  sd::BitMatrix level2(4);  // + [c=32] under a
  level2.set(3, 0), level2.set(3, 1), level2.set(3, 3);
  const std::vector<sd::TokenId> t2{32};
  const std::vector<std::int64_t> p2{5};
  sd::SequenceInput in2{0, t2, p2, sd::PackedMask::of(level2)};
  in2.extend_staged = true;
  const auto l2 = forward_logits(m, std::span(&in2, 1));
  CHECK(rel_diff(l1[0], reference_logits(m, {9, 8, 7, 6, 30})[4]) < 1e-4);
  CHECK(rel_diff(l1[1], reference_logits(m, {9, 8, 7, 6, 31})[4]) < 1e-4);
  CHECK(rel_diff(l2[0], reference_logits(m, {9, 8, 7, 6, 30, 32})[5]) < 1e-4);
  // Keep root, a, c (staged indices 0, 1, 3): the cache now holds 9 8 7 6 30 32.
  m.accept(0, std::vector<std::int32_t>{0, 1, 3});
  CHECK(m.cached_length(0) == 6);
  const auto next = run(m, 0, {33}, {6}, nullptr);
  CHECK(rel_diff(next[0], reference_logits(m, {9, 8, 7, 6, 30, 32, 33})[6]) < 1e-4);
  // A mask that does not cover staged + new tokens is a typed error.
  run(m, 0, {1}, {6}, nullptr);
  sd::SequenceInput bad{0, t2, p2, sd::PackedMask::of(level1)};
  bad.extend_staged = true;
  CHECK_THROWS_AS(forward_logits(m, std::span(&bad, 1)), sd::ShapeError);
}

TEST_CASE("Sequences open and close, and forwards write only into the caller's buffers", "[torch][model]") {
  auto m = tb::LlamaModel::random(tiny_config(true, 2), 17);
  CHECK_THROWS_AS(m.close(3), sd::InvalidArgumentError);
  m.open(0);
  const std::vector<sd::TokenId> tokens{1, 2, 3};
  const std::vector<std::int64_t> pos{0, 1, 2};
  const sd::SequenceInput in{0, tokens, pos};
  sd::ForwardRequest request{std::span(&in, 1)};
  auto wrong_rows = at::empty({2, m.vocab_size()});
  request.logits = tb::view_of(wrong_rows);
  CHECK_THROWS_WITH(m.forward(request), Catch::Contains("[2, 97]") && Catch::Contains("[3, 97]"));
  auto doubles = at::empty({3, m.vocab_size()}, at::kDouble);
  request.logits = tb::view_of(doubles);
  CHECK_THROWS_AS(m.forward(request), sd::ShapeError);
  float host[3 * 97];
  request.logits = sd::TensorView(host, sd::DType::kF32, {3, 97}, sd::Device{sd::DeviceKind::kCUDA, 0});
  CHECK_THROWS_AS(m.forward(request), sd::UnsupportedError);
  CHECK(m.cached_length(0) == 0);  // nothing was staged or committed by the refused forwards
  m.close(0);
  CHECK_THROWS_AS(run(m, 0, {1}, {0}, nullptr), sd::InvalidArgumentError);
}

TEST_CASE("Forwards on two sequences from two threads equal the same forwards one after another",
          "[torch][model]") {
  auto m = tb::LlamaModel::random(tiny_config(false, 2), 19);
  const std::vector<sd::TokenId> a{5, 6, 7, 8, 9, 10}, b{40, 41, 42};
  const std::vector<std::int64_t> pa{0, 1, 2, 3, 4, 5}, pb{0, 1, 2};
  m.open(0);
  m.open(1);
  const auto alone_a = run(m, 0, a, pa, nullptr);
  const auto alone_b = run(m, 1, b, pb, nullptr);
  at::Tensor together_a, together_b;
  for (int repeat = 0; repeat < 20; ++repeat) {
    m.rollback(0, 0);
    m.rollback(1, 0);
    std::thread other([&] { together_b = run(m, 1, b, pb, nullptr); });
    together_a = run(m, 0, a, pa, nullptr);
    other.join();
    // Equal up to the order of float sums (each thread has its own team).
    CHECK(rel_diff(together_a, alone_a) < 1e-6);
    CHECK(rel_diff(together_b, alone_b) < 1e-6);
  }
}

TEST_CASE("Every row of a forward is bit-identical to the same token decoded alone, in f32 and bf16",
          "[torch][model][bf16]") {
  // What makes greedy speculative output equal greedy decoding: a token
  // verified among others (a chain, a tree under its mask, a batch) gets
  // exactly the logits it gets decoded alone.
  const auto dtype = GENERATE(sd::DType::kF32, sd::DType::kBF16);
  if (dtype == sd::DType::kBF16 && !tb::PackedLinear::native_bf16()) {
    WARN("this CPU has no native bf16 matmul: bf16 not exercised");
    return;
  }
  // Two threads, and enough attention work per forward to thread it: with
  // one kv head attention splits its query groups over the threads, with
  // two it splits the kv heads.
  const auto kv_heads = GENERATE(1, 2);
  INFO(sd::dtype_name(dtype) << ", " << kv_heads << " kv heads");
  sd::cpu::set_forward_threads(2);
  auto cfg = tiny_config(true, kv_heads);
  cfg.hidden_size = 128;  // head_dim 16: the register-blocked attention path
  cfg.num_attention_heads = 8;
  cfg.head_dim = 16;
  cfg.max_position_embeddings = 128;
  auto m = tb::LlamaModel::random(cfg, 21);
  m.set_inference_dtype(dtype);
  CHECK(m.inference_dtype() == dtype);
  const std::vector<sd::TokenId> text{5, 17, 3, 88, 42, 0, 96, 11, 7, 7, 31, 2, 64, 50, 9, 1, 33, 80, 12, 4};
  // One token at a time.
  m.open(0);
  std::vector<at::Tensor> alone;
  for (std::size_t i = 0; i < text.size(); ++i) {
    alone.push_back(run(m, 0, {text[i]}, {static_cast<std::int64_t>(i)}, nullptr));
    m.accept(0, std::vector<std::int32_t>{0});
  }
  // The first 3 tokens committed, the other 17 in one causal forward.
  m.open(1);
  run(m, 1, {5, 17, 3}, {0, 1, 2}, nullptr);
  m.accept(1, std::vector<std::int32_t>{0, 1, 2});
  std::vector<sd::TokenId> rest(text.begin() + 3, text.end());
  std::vector<std::int64_t> pos;
  for (std::int64_t i = 3; i < 20; ++i) pos.push_back(i);
  const auto together = run(m, 1, rest, pos, nullptr);
  for (std::int64_t i = 0; i < 17; ++i) {
    INFO("row " << i);
    CHECK(at::equal(together[i], alone[static_cast<std::size_t>(i + 3)][0]));
  }
  // A tree over the committed 3: the chain 88 -> 42 and a sibling 99 under the root.
  m.rollback(1, 3);
  sd::DraftTree tree(88);
  const auto a = tree.add_node(sd::DraftTree::kRoot, 42, 0.5f);
  tree.add_node(sd::DraftTree::kRoot, 90, 0.5f);
  tree.add_node(a, 0, 0.5f);
  const auto mask = tree.ancestor_mask(true);
  const auto tree_logits = run(m, 1, {88, 42, 90, 0}, {3, 4, 4, 5}, &mask);
  CHECK(at::equal(tree_logits[0], alone[3][0]));
  CHECK(at::equal(tree_logits[1], alone[4][0]));
  CHECK(at::equal(tree_logits[3], alone[5][0]));
  // bf16 is really in use: close to the f32 reference, but not equal to it.
  const auto ref = reference_logits(m, std::vector<std::int64_t>(text.begin(), text.end()));
  const auto all_alone = at::cat(alone, 0);
  if (dtype == sd::DType::kF32) {
    CHECK(rel_diff(all_alone, ref) < 1e-5);
  } else {
    CHECK(rel_diff(all_alone, ref) > 1e-4);
    CHECK(rel_diff(all_alone, ref) < 5e-2);
  }
  sd::cpu::set_forward_threads(0);
}

TEST_CASE("set_inference_dtype takes f32 and bf16 only, and switching repacks", "[torch][model][bf16]") {
  auto m = tb::LlamaModel::random(tiny_config(true, 2), 3);
  CHECK(m.inference_dtype() == sd::DType::kF32);
  CHECK_THROWS_AS(m.set_inference_dtype(sd::DType::kF16), sd::InvalidArgumentError);
  CHECK_THROWS_AS(m.set_inference_dtype(sd::DType::kI32), sd::InvalidArgumentError);
  if (!tb::PackedLinear::native_bf16()) return;
  m.open(0);
  const auto f32 = run(m, 0, {1, 2, 3}, {0, 1, 2}, nullptr);
  m.set_inference_dtype(sd::DType::kBF16);
  m.rollback(0, 0);
  const auto bf16 = run(m, 0, {1, 2, 3}, {0, 1, 2}, nullptr);
  CHECK_FALSE(at::equal(f32, bf16));
  m.set_inference_dtype(sd::DType::kF32);
  m.rollback(0, 0);
  CHECK(at::equal(run(m, 0, {1, 2, 3}, {0, 1, 2}, nullptr), f32));
}

TEST_CASE("A context that is no multiple of 16 fills to its last slot and matches the training forward",
          "[torch][model]") {
  // Attention reads keys in blocks of 16: the last block of a 37-slot cache
  // runs past its end and must read nothing there.
  for (const auto dtype : {sd::DType::kF32, sd::DType::kBF16}) {
    if (dtype == sd::DType::kBF16 && !tb::PackedLinear::native_bf16()) continue;
    auto cfg = tiny_config(false, 1);
    cfg.hidden_size = 64;
    cfg.head_dim = 16;
    cfg.max_position_embeddings = 37;
    auto m = tb::LlamaModel::random(cfg, 4);
    m.set_inference_dtype(dtype);
    std::vector<sd::TokenId> text;
    for (int i = 0; i < 37; ++i) text.push_back((i * 13 + 5) % 97);
    m.open(0);
    std::vector<std::int64_t> pos;
    for (std::int64_t i = 0; i < 30; ++i) pos.push_back(i);
    const auto first = run(m, 0, std::vector<sd::TokenId>(text.begin(), text.begin() + 30), pos, nullptr);
    std::vector<std::int32_t> all(30);
    for (std::int32_t i = 0; i < 30; ++i) all[static_cast<std::size_t>(i)] = i;
    m.accept(0, all);
    std::vector<at::Tensor> rows{first};
    for (std::int64_t i = 30; i < 37; ++i) {
      rows.push_back(run(m, 0, {text[static_cast<std::size_t>(i)]}, {i}, nullptr));
      m.accept(0, std::vector<std::int32_t>{0});
    }
    CHECK(m.cached_length(0) == 37);
    const auto ref = reference_logits(m, std::vector<std::int64_t>(text.begin(), text.end()));
    INFO(sd::dtype_name(dtype));
    CHECK(rel_diff(at::cat(rows, 0), ref) < (dtype == sd::DType::kF32 ? 1e-5 : 5e-2));
    CHECK_THROWS_AS(run(m, 0, {1}, {37}, nullptr), sd::ShapeError);  // full
  }
}

TEST_CASE("cpu::LlamaModel loaded from a checkpoint gives the libtorch model's logits bit for bit",
          "[torch][model]") {
  if (!sd::cpu::RowLinear::available(sd::DType::kF32)) {
    WARN("this CPU has no f32 row kernel: cpu::LlamaModel not exercised");
    return;
  }
  const auto dir = std::filesystem::temp_directory_path() / "specdec_llama_model_cpu_twin";
  std::filesystem::remove_all(dir);
  for (const bool tied : {false, true}) {
    tb::LlamaModel::random(tiny_config(tied, 2), 23).save(dir, sd::DType::kF32);
    auto torch_model = tb::LlamaModel::load(dir);
    auto cpu_model = sd::cpu::LlamaModel::load(dir);
    const std::vector<sd::TokenId> text{3, 1, 4, 1, 5, 9, 2, 6}, chain{5, 3, 5};
    torch_model.open(0);
    cpu_model.open(0);
    const std::vector<std::int64_t> prompt_positions{0, 1, 2, 3, 4, 5, 6, 7}, chain_positions{8, 9, 10};
    const sd::SequenceInput prompt{0, text, prompt_positions};
    INFO("tied " << tied);
    CHECK(at::equal(forward_logits(cpu_model, std::span(&prompt, 1)),
                    forward_logits(torch_model, std::span(&prompt, 1))));
    // After accept, a verification of three tokens.
    const std::vector<std::int32_t> all{0, 1, 2, 3, 4, 5, 6, 7};
    torch_model.accept(0, all);
    cpu_model.accept(0, all);
    const sd::SequenceInput step{0, chain, chain_positions};
    CHECK(at::equal(forward_logits(cpu_model, std::span(&step, 1)),
                    forward_logits(torch_model, std::span(&step, 1))));
  }
  std::filesystem::remove_all(dir);
}
