// A host application using the installed header-only core.
#include <specdec/specdec.hpp>

#include <cstdio>
#include <vector>

int main() {
  specdec::DraftTree tree(/*root_token=*/0);
  tree.add_node(specdec::DraftTree::kRoot, 1, 1.0f);
  tree.set_children_source(specdec::DraftTree::kRoot, -1, specdec::ChildMode::kDeterministic);
  const std::vector<float> target{0.0f, 1.0f, 0.0f, 0.0f, 1.0f, 0.0f};  // argmax 1, then 1
  specdec::RandomStream rng(7);
  specdec::GreedyAcceptance rule;
  const auto r = rule.verify(tree, specdec::ProbRows(target.data(), 2, 3), {}, rng);
  if (r.num_accepted() != 1 || r.bonus_token != 1) return 1;
  std::printf("specdec ok %s\n", specdec::kVersion);
  return 0;
}
