// specdec — command-line front end.
//
//   specdec demo [options]   the acceptance rules on synthetic distributions
//   specdec train [options]  train a Llama-architecture model (libtorch builds)
//   specdec distill ...      distill a draft model from a target (libtorch builds)
//   specdec generate ...     generate with any method, with its Stats and speedup (on the CPU with
//                            libtorch, on a GPU with the CUDA backend: --device)
//   specdec methods          the registered methods, their parameters, models and devices
//   specdec bench ...        prompt sets x methods, table + JSON (--device cuda: the batched grid on a GPU)
//   specdec sequoia ...      measure positional acceptance, print the Sequoia tree (libtorch builds)
//   specdec profile-sv ...   Speculative Verification's acceptance profile (libtorch builds)
//   specdec train-lyanna ... train a Lyanna draft head, an ablation or the EAGLE-style head
//   specdec train-spire ...  train a SPIRe draft model (or a Figure-5 ablation)
//   specdec cache-features . the target's features on disk, for training heads
//   specdec eval-head ...    held-out per-step agreement of a draft head with its target
//   specdec hot-tokens ...   token frequencies of a corpus, hot-token coverage
//   specdec convert ...      re-save a model's weights as f32 / f16 / bf16
//   specdec sample-corpus .. text sampled from a model, for sequence-level distillation
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "demo.hpp"
#if SPECDEC_CLI_WITH_TORCH || SPECDEC_CLI_WITH_CUDA
#include "bench.hpp"
#include "generate.hpp"
#include "interrupt.hpp"
#endif
#if SPECDEC_CLI_WITH_TORCH
#include "convert.hpp"
#include "profile_sv.hpp"
#include "sample_corpus.hpp"
#include "sequoia.hpp"
#include "train.hpp"
#include "train_head.hpp"
#include "train_spire.hpp"
#endif
#include "specdec/core/error.hpp"
#include "specdec/core/version.hpp"

int main(int argc, char** argv) {
#if SPECDEC_CLI_WITH_TORCH || SPECDEC_CLI_WITH_CUDA
  // Before any thread starts: SIGINT is taken on a thread of its own.
  specdec::cli::take_interrupts_on_a_thread();
#endif
  CLI::App app{"specdec: speculative decoding algorithms for LLM inference"};
  app.set_version_flag("--version", specdec::kVersion);
  app.require_subcommand(1);

  specdec::cli::DemoOptions demo;
  auto* demo_cmd = app.add_subcommand(
      "demo", "Run every acceptance rule on a synthetic target/draft pair and compare them");
  specdec::cli::add_demo_options(*demo_cmd, demo);

#if SPECDEC_CLI_WITH_TORCH || SPECDEC_CLI_WITH_CUDA
  specdec::cli::GenerateCommand generate;
  auto* generate_cmd = app.add_subcommand(
      "generate",
      "Generate text with any method; prints its Stats and the speedup over autoregressive decoding");
  specdec::cli::add_generate_options(*generate_cmd, generate);
  specdec::cli::add_methods_options(
      *app.add_subcommand("methods", "List the registered methods, their parameters and devices"));
  specdec::cli::BenchCommand bench;
  auto* bench_cmd =
      app.add_subcommand("bench", "Benchmark methods side by side with autoregressive decoding");
  specdec::cli::add_bench_options(*bench_cmd, bench);
#endif
#if SPECDEC_CLI_WITH_TORCH
  specdec::cli::TrainCommand train;
  auto* train_cmd = app.add_subcommand("train", "Train a Llama-architecture language model on a token file");
  specdec::cli::add_train_options(*train_cmd, train);
  specdec::cli::TrainCommand distill;
  distill.preset = "draft";
  auto* distill_cmd =
      app.add_subcommand("distill", "Train a draft model on a target model's soft next-token distribution");
  specdec::cli::add_distill_options(*distill_cmd, distill);
  specdec::cli::SequoiaCommand sequoia;
  auto* sequoia_cmd = app.add_subcommand(
      "sequoia", "Measure the positional acceptance vector and print the Sequoia-optimal tree");
  specdec::cli::add_sequoia_options(*sequoia_cmd, sequoia);
  specdec::cli::ProfileSvCommand profile_sv;
  auto* profile_sv_cmd = app.add_subcommand(
      "profile-sv", "Profile Speculative Verification's acceptance table and report its information gain");
  specdec::cli::add_profile_sv_options(*profile_sv_cmd, profile_sv);
  specdec::cli::TrainHeadCommand train_head;
  auto* train_head_cmd = app.add_subcommand(
      "train-lyanna", "Train a Lyanna draft head (or an ablation, or the EAGLE-style head) on a frozen target");
  specdec::cli::add_train_head_options(*train_head_cmd, train_head);
  specdec::cli::TrainSpireCommand train_spire;
  auto* train_spire_cmd = app.add_subcommand(
      "train-spire", "Train a SPIRe draft model (or one of its ablations) on a frozen target");
  specdec::cli::add_train_spire_options(*train_spire_cmd, train_spire);
  specdec::cli::CacheFeaturesCommand cache_features;
  auto* cache_features_cmd = app.add_subcommand(
      "cache-features", "Cache a frozen target's hidden states (f16) for training draft heads without the target");
  specdec::cli::add_cache_features_options(*cache_features_cmd, cache_features);
  specdec::cli::EvalHeadCommand eval_head;
  auto* eval_head_cmd =
      app.add_subcommand("eval-head", "Held-out top-1 agreement of a draft head with its target, per draft step");
  specdec::cli::add_eval_head_options(*eval_head_cmd, eval_head);
  specdec::cli::HotTokensCommand hot_tokens;
  auto* hot_tokens_cmd = app.add_subcommand("hot-tokens", "Token frequencies of a corpus and hot-token coverage");
  specdec::cli::add_hot_tokens_options(*hot_tokens_cmd, hot_tokens);
  specdec::cli::ConvertCommand convert;
  auto* convert_cmd = app.add_subcommand("convert", "Re-save a model with f32, f16 or bf16 weights");
  specdec::cli::add_convert_options(*convert_cmd, convert);
  specdec::cli::SampleCorpusCommand sample_corpus;
  auto* sample_corpus_cmd = app.add_subcommand(
      "sample-corpus",
      "Sample a corpus from a model, to train a draft with another tokenizer on its outputs");
  specdec::cli::add_sample_corpus_options(*sample_corpus_cmd, sample_corpus);
#endif

  CLI11_PARSE(app, argc, argv);
  try {
    if (demo_cmd->parsed()) return specdec::cli::run_demo(demo);
#if SPECDEC_CLI_WITH_TORCH || SPECDEC_CLI_WITH_CUDA
    if (generate_cmd->parsed()) return specdec::cli::run_generate(generate);
    if (bench_cmd->parsed()) return specdec::cli::run_bench(bench);
#endif
#if SPECDEC_CLI_WITH_TORCH
    if (train_cmd->parsed()) return specdec::cli::run_train(train);
    if (distill_cmd->parsed()) return specdec::cli::run_train(distill);
    if (sequoia_cmd->parsed()) return specdec::cli::run_sequoia(sequoia);
    if (profile_sv_cmd->parsed()) return specdec::cli::run_profile_sv(profile_sv);
    if (train_head_cmd->parsed()) return specdec::cli::run_train_head(train_head);
    if (train_spire_cmd->parsed()) return specdec::cli::run_train_spire(train_spire);
    if (cache_features_cmd->parsed()) return specdec::cli::run_cache_features(cache_features);
    if (eval_head_cmd->parsed()) return specdec::cli::run_eval_head(eval_head);
    if (hot_tokens_cmd->parsed()) return specdec::cli::run_hot_tokens(hot_tokens);
    if (convert_cmd->parsed()) return specdec::cli::run_convert(convert);
    if (sample_corpus_cmd->parsed()) return specdec::cli::run_sample_corpus(sample_corpus);
#endif
  } catch (const specdec::Error& e) {
    std::fprintf(stderr, "specdec: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {  // not one of ours (the filesystem, libtorch, memory): said, not a crash
    std::fprintf(stderr, "specdec: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
