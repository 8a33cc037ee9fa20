// A host application using the installed specdec: the header-only core
// always, and the component it links (CONSUMER_USES_*) once.
#include <specdec/specdec.hpp>

#include <cstdio>
#include <vector>

#if defined(CONSUMER_USES_IO)
#include <specdec/io/float_convert.hpp>
#elif defined(CONSUMER_USES_CPU)
#include <specdec/cpu/llama_model.hpp>
#include <specdec/cpu/row_linear.hpp>
#elif defined(CONSUMER_USES_TORCH)
#include <specdec/cpu/threads.hpp>
#elif defined(CONSUMER_USES_CUDA)
#include <specdec/cuda/chain_speculative_sampling.hpp>
#endif

int main() {
  specdec::DraftTree tree(/*root_token=*/0);
  tree.add_node(specdec::DraftTree::kRoot, 1, 1.0f);
  tree.set_children_source(specdec::DraftTree::kRoot, -1, specdec::ChildMode::kDeterministic);
  const std::vector<float> target{0.0f, 1.0f, 0.0f, 0.0f, 1.0f, 0.0f};  // argmax 1, then 1
  specdec::RandomStream rng(7);
  specdec::GreedyAcceptance rule;
  const auto r = rule.verify(tree, specdec::ProbRows(target.data(), 2, 3), {}, rng);
  if (r.num_accepted() != 1 || r.bonus_token != 1) return 1;
#if defined(CONSUMER_USES_IO)
  const float x[] = {1.5f, -2.0f};  // exact in bf16
  std::uint16_t b[2];
  float back[2];
  specdec::io::from_f32(x, 2, specdec::DType::kBF16, b);
  for (int i = 0; i < 2; ++i) back[i] = specdec::io::bf16_to_f32(b[i]);
  if (back[0] != x[0] || back[1] != x[1]) return 2;
#elif defined(CONSUMER_USES_CPU)
  specdec::io::LlamaConfig c;
  c.max_position_embeddings = 4;
  c.head_dim = 2;
  const auto rope = specdec::cpu::rope_tables(c);  // [positions, head_dim]; position 0 unrotated
  if (rope.cos.size() != 8 || rope.cos[0] != 1.0f || rope.sin[0] != 0.0f) return 2;
  if (specdec::cpu::RowLinear::available(specdec::DType::kF32)) {  // the row kernel and the thread team link
    const float w[2] = {1.0f, 2.0f}, x[2] = {3.0f, 4.0f};
    float y = 0.0f;
    specdec::cpu::RowLinear(w, 1, 2, specdec::DType::kF32).forward(x, 1, &y);
    if (y != 11.0f) return 2;
  }
#elif defined(CONSUMER_USES_TORCH)
  if (specdec::cpu::available_cores() < 1) return 2;
#elif defined(CONSUMER_USES_CUDA)
  int devices = -1;
  (void)specdec::cuda::cuda_device_count(&devices);  // 0 without a device: linking is what is checked
  if (devices < 0) return 2;
#endif
  std::printf("specdec ok %s\n", specdec::kVersion);
  return 0;
}
