#pragma once
// A decoding setup and the sessions it makes. A front-end (the CLI's generate, chat, bench and
// serve; an application embedding specdec) selects a drafter and a draft-length rule with its
// flags; make_session() turns that into a SpeculativeSession of the right type over the caller's
// models, after checking that the draft and the target share one vocabulary (llama.cpp keeps
// that check in its library too: common/speculative.h).
//
//   DecodeSetup setup;                                     // which drafter, k, adaptive, ...
//   setup.drafter = DecodeSetup::Drafter::model;
//   with_session_type<cpu::Transformer>(setup.drafter, [&]<class S>(std::type_identity<S>) {
//     auto owned = make_session<S>(setup, SessionModels<cpu::Transformer>{&target, &draft,
//                                  target_tokenizer, draft_tokenizer});
//     owned->session().start(prompt, config);
//     GenerationResult result = owned->session().run();
//   });
//
// Each drafter kind is its own session type (the round loop is compiled per drafter), hence the
// visitor; a server keeps one engine per session type (specdec/serve/engine.hpp).

#include <cstddef>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "specdec/common.hpp"
#include "specdec/decoder/drafters.hpp"
#include "specdec/decoder/session.hpp"
#include "specdec/model/tokenizer.hpp"

namespace specdec {

/// Which drafter a decoding run uses and how it chooses the draft length.
struct DecodeSetup {
  enum class Drafter {
    none,          ///< target-only decoding (the baseline: llama-completion, llama-server)
    model,         ///< a draft model (ModelDrafter)
    ngram,         ///< n-gram lookup in the sequence (NGramDrafter)
    lookup_model,  ///< n-gram lookup, the draft model when it finds nothing
    suffix,        ///< suffix decoding: frequent continuations as trees (SuffixDrafter)
    model_tree,    ///< a draft model's trees (ModelTreeDrafter; a TreeCausalLM backend)
    suffix_model,  ///< suffix trees, the draft model's when the match is weak (a TreeCausalLM)
  };
  Drafter drafter = Drafter::none;
  std::size_t k = 4;          ///< draft length (fixed), or the largest with adaptive
  bool adaptive = false;      ///< choose k per round from the running acceptance
  std::size_t max_k = 8;      ///< adaptive: the largest k
  std::size_t ngram = 3;      ///< n-gram drafters: longest suffix looked up
  std::size_t ngram_min = 1;  ///< n-gram drafters: shortest suffix looked up
  /// The draft model's head restricted to its first N ids (0: whole). The draft model is built
  /// with it (cpu::Options::head_tokens); here it only labels the setup.
  std::size_t draft_head = 0;
  /// Adaptive k: C(k) for k = 0 .. max_k, measured (cost_model.hpp); empty: the guessed cost.
  /// Suffix trees: C(n) for trees of n = 0 .. tree_nodes nodes (SpeculativeOptions::tree_cost).
  std::vector<double> round_cost{};
  /// Draft model trees: one draft forward in target steps, D / T(1), measured
  /// (SpeculativeOptions::tree_draft_cost); 0: the drafting is left out of the cost model.
  double draft_step_cost = 0;
  std::size_t draft_min = 0;  ///< proposals shorter than this are not verified (--draft-min)
  /// Suffix drafter: trees of at most this many nodes per round (0: chains of k, its best path).
  std::size_t tree_nodes = 16;
  /// tree_nodes was asked for (--tree-nodes): kept as it is, else fitted to the target (a CUDA
  /// target scores 16 nodes a step, the sequence's last token included: 15 drafted).
  bool tree_nodes_given = false;

  /// This setup on a target of type LM: the default tree size capped by what LM scores in one
  /// forward step (LM::tree_step_nodes, else LM::max_tree_nodes; the sequence's last token is a
  /// node too); an explicit one is left for the session to refuse, naming the limit.
  template <class LM>
  [[nodiscard]] DecodeSetup fitted_to() const {
    DecodeSetup fitted = *this;
    std::size_t nodes = 0;
    if constexpr (requires { LM::tree_step_nodes; })
      nodes = LM::tree_step_nodes;
    else if constexpr (requires { LM::max_tree_nodes; })
      nodes = LM::max_tree_nodes;
    if (!tree_nodes_given && nodes > 0) fitted.tree_nodes = std::min(tree_nodes, nodes - 1);
    return fitted;
  }
  ModelTreeOptions model_tree_shape{};  ///< draft model trees: branching and depth
  TreeShape suffix_shape{};             ///< suffix drafter: min_score, min_match (max_nodes: above)
  SuffixIndex::Options suffix_index{};  ///< suffix drafter: window depth, memory bound
  /// Suffix drafter: an index of earlier responses that every session shares (a server's), or
  /// null. Not owned; must outlive the sessions.
  const SharedSuffixIndex* shared_suffix = nullptr;

  /// Whether the setup drafts with a draft model (model, lookup_model).
  [[nodiscard]] bool uses_draft_model() const {
    return drafter == Drafter::model || drafter == Drafter::lookup_model ||
           drafter == Drafter::model_tree || drafter == Drafter::suffix_model;
  }
  /// The nodes of each round's tree (SpeculativeOptions::max_tree_nodes; 0: chains).
  [[nodiscard]] std::size_t max_tree_nodes() const {
    return drafter == Drafter::suffix || uses_model_trees() ? tree_nodes : 0;
  }
  /// Whether the setup drafts the draft model's trees (model_tree, suffix_model).
  [[nodiscard]] bool uses_model_trees() const {
    return drafter == Drafter::model_tree || drafter == Drafter::suffix_model;
  }
  /// Whether the setup drafts with the suffix drafter (suffix, suffix_model).
  [[nodiscard]] bool uses_suffix() const {
    return drafter == Drafter::suffix || drafter == Drafter::suffix_model;
  }

  /// "baseline", "draft model k=4", "n-gram (n<=3) adaptive k", ...
  [[nodiscard]] std::string label() const {
    const std::string k_text = adaptive ? std::string("adaptive k") : "k=" + std::to_string(k);
    const std::string model = draft_head != 0
                                  ? "draft model (head " + std::to_string(draft_head) + ")"
                                  : std::string("draft model");
    switch (drafter) {
      case Drafter::none:
        return "baseline";
      case Drafter::model:
        return model + " " + k_text;
      case Drafter::ngram:
        return "n-gram (n<=" + std::to_string(ngram) + ") " + k_text;
      case Drafter::lookup_model:
        return "n-gram (n=" + std::to_string(ngram_min) + ".." + std::to_string(ngram) + ") + " +
               model + " " + k_text;
      case Drafter::model_tree:
        return model + " trees<=" + std::to_string(tree_nodes) + " " + tree_shape_text();
      case Drafter::suffix:
        return tree_nodes > 0 ? "suffix trees<=" + std::to_string(tree_nodes) : "suffix " + k_text;
      case Drafter::suffix_model:
        return "suffix + " + model + " trees<=" + std::to_string(tree_nodes) + " " +
               tree_shape_text();
    }
    return "?";
  }

  /// "top2 depth6 p>=0.01": the draft model trees' shape, for labels.
  [[nodiscard]] std::string tree_shape_text() const {
    const ModelTreeOptions& t = model_tree_shape;
    std::string text = "top" + std::to_string(t.branch) + " depth" + std::to_string(t.max_depth);
    char cut[48];
    std::snprintf(cut, sizeof cut, " p>=%g", static_cast<double>(t.min_score));
    text += cut;
    if (t.split > 0) {
      std::snprintf(cut, sizeof cut, " split>=%g", static_cast<double>(t.split));
      text += cut;
    }
    return text;
  }

  /// The session's options: k or adaptive k (within [max(1, draft_min), max_k]), draft_min.
  [[nodiscard]] SpeculativeOptions speculative_options() const {
    SpeculativeOptions options;
    options.k = k;
    options.adaptive = adaptive;
    options.min_draft = draft_min;
    if (max_tree_nodes() > 0) {
      options.max_tree_nodes = tree_nodes;
      if (tree_nodes > 0 && round_cost.size() > tree_nodes) options.tree_cost = round_cost;
      if (uses_model_trees()) options.tree_draft_cost = draft_step_cost;
    }
    if (adaptive) {
      options.adaptive_options.min_k = std::max<std::size_t>(1, draft_min);
      options.adaptive_options.max_k = std::max(max_k, options.adaptive_options.min_k);
      options.adaptive_options.round_cost = round_cost;
    }
    return options;
  }

  [[nodiscard]] NGramDrafter::Options ngram_options() const {
    NGramDrafter::Options options;
    options.max_ngram = ngram;
    options.min_ngram = ngram_min;
    return options;
  }

  /// The suffix drafter's proposal shape (at most tree_nodes nodes per tree).
  [[nodiscard]] TreeShape tree_shape() const {
    TreeShape shape = suffix_shape;
    if (tree_nodes > 0) shape.max_nodes = tree_nodes;
    return shape;
  }
};

/// The session type of each drafter kind over models of type LM (a draft model, where there is
/// one, is an LM too: both on one backend).
template <class LM>
using PlainSession = SpeculativeSession<NoDrafter, LM>;
template <class LM>
using ModelSession = SpeculativeSession<LM, LM>;
template <class LM>
using NGramSession = SpeculativeSession<NGramDrafter, LM>;
template <class LM>
using LookupModelSession = SpeculativeSession<LookupThenModelDrafter<LM>, LM>;
template <class LM>
using SuffixSession = SpeculativeSession<SuffixDrafter, LM>;
template <HostTreeCausalLM LM>
using ModelTreeSession = SpeculativeSession<ModelTreeDrafter<LM>, LM>;
template <HostTreeCausalLM LM>
using SuffixModelSession = SpeculativeSession<SuffixThenModelDrafter<LM>, LM>;

/// Calls f(std::type_identity<Session>{}) with the session type of `drafter` over LM.
template <class LM, class F>
decltype(auto) with_session_type(DecodeSetup::Drafter drafter, F&& f) {
  switch (drafter) {
    case DecodeSetup::Drafter::model:
      return f(std::type_identity<ModelSession<LM>>{});
    case DecodeSetup::Drafter::ngram:
      return f(std::type_identity<NGramSession<LM>>{});
    case DecodeSetup::Drafter::lookup_model:
      return f(std::type_identity<LookupModelSession<LM>>{});
    case DecodeSetup::Drafter::suffix:
      return f(std::type_identity<SuffixSession<LM>>{});
    case DecodeSetup::Drafter::model_tree:
      if constexpr (HostTreeCausalLM<LM>) {
        return f(std::type_identity<ModelTreeSession<LM>>{});
      } else {
        throw Error(
            "draft model trees need the CPU backend (the draft's top tokens are read on the "
            "host; the CUDA backend scores trees but does not draft them yet): use chains (no "
            "--tree-nodes) here");
      }
    case DecodeSetup::Drafter::suffix_model:
      if constexpr (HostTreeCausalLM<LM>) {
        return f(std::type_identity<SuffixModelSession<LM>>{});
      } else {
        throw Error(
            "suffix decoding with a draft model's trees behind it needs the CPU backend (the "
            "draft's top tokens are read on the host): use --suffix without -md here");
      }
    case DecodeSetup::Drafter::none:
      break;
  }
  return f(std::type_identity<PlainSession<LM>>{});
}

/// The models a session runs on; they (and the tokenizers) must outlive the session.
template <class LM>
struct SessionModels {
  LM* target = nullptr;
  LM* draft = nullptr;                         ///< needed by DecodeSetup::uses_draft_model()
  const Tokenizer* tokenizer = nullptr;        ///< the target's (text, stop strings, EOS)
  const Tokenizer* draft_tokenizer = nullptr;  ///< the draft model's, compared with the target's
};

/// A session together with the drafter object it refers to (an n-gram table, a lookup drafter);
/// a draft model's ModelDrafter is inside the session. Not movable: the session points into it.
/// make_session() makes one.
template <class Session>
class OwnedSession;

template <class Draft, class Target>
class OwnedSession<SpeculativeSession<Draft, Target>> {
 public:
  using Session = SpeculativeSession<Draft, Target>;

  /// The session of `requested` (its default tree size fitted to Target) over `models`
  /// (make_session checks them first).
  OwnedSession(const DecodeSetup& requested, const SessionModels<Target>& models,
               const char* name) {
    const DecodeSetup setup = requested.template fitted_to<Target>();
    if constexpr (std::is_same_v<Draft, NoDrafter>) {
      session_ = std::make_unique<Session>(*models.target, models.tokenizer, name);
    } else if constexpr (std::is_same_v<Draft, Target>) {  // a draft model
      session_ =
          std::make_unique<Session>(*models.draft, *models.target, setup.speculative_options(),
                                    models.tokenizer, models.draft_tokenizer, name);
    } else if constexpr (std::is_same_v<Draft, NGramDrafter>) {
      drafter_.emplace(setup.ngram_options());
      session_ = std::make_unique<Session>(*drafter_, *models.target, setup.speculative_options(),
                                           models.tokenizer, nullptr, name);
    } else if constexpr (kModelTree) {
      drafter_.emplace(*models.draft, setup.model_tree_shape);
      session_ = std::make_unique<Session>(*drafter_, *models.target, setup.speculative_options(),
                                           models.tokenizer, models.draft_tokenizer, name);
    } else if constexpr (kSuffixModel) {
      drafter_.emplace(*models.draft,
                       SuffixDrafter(setup.suffix_index, setup.shared_suffix, setup.tree_shape()),
                       setup.model_tree_shape);
      session_ = std::make_unique<Session>(*drafter_, *models.target, setup.speculative_options(),
                                           models.tokenizer, models.draft_tokenizer, name);
    } else if constexpr (std::is_same_v<Draft, SuffixDrafter>) {
      drafter_.emplace(setup.suffix_index, setup.shared_suffix, setup.tree_shape());
      session_ = std::make_unique<Session>(*drafter_, *models.target, setup.speculative_options(),
                                           models.tokenizer, nullptr, name);
    } else {
      static_assert(std::is_same_v<Draft, LookupThenModelDrafter<Target>>, "unknown drafter");
      drafter_.emplace(*models.draft, setup.ngram_options());
      session_ = std::make_unique<Session>(*drafter_, *models.target, setup.speculative_options(),
                                           models.tokenizer, models.draft_tokenizer, name);
    }
  }
  OwnedSession(const OwnedSession&) = delete;
  OwnedSession& operator=(const OwnedSession&) = delete;

  Session& session() { return *session_; }
  const Session& session() const { return *session_; }

 private:
  /// Whether Draft is a ModelTreeDrafter (named only for tree-capable targets).
  static constexpr bool kModelTree = [] {
    if constexpr (HostTreeCausalLM<Target>)
      return std::is_same_v<Draft, ModelTreeDrafter<Target>>;
    else
      return false;
  }();
  /// Whether Draft is a SuffixThenModelDrafter (named only for tree-capable targets).
  static constexpr bool kSuffixModel = [] {
    if constexpr (HostTreeCausalLM<Target>)
      return std::is_same_v<Draft, SuffixThenModelDrafter<Target>>;
    else
      return false;
  }();
  /// The drafter object, where the session refers to one of its own.
  static constexpr bool kOwnsDrafter = Drafter<Draft> && !std::is_same_v<Draft, NoDrafter>;
  std::conditional_t<kOwnsDrafter, std::optional<Draft>, std::monostate> drafter_;
  std::unique_ptr<Session> session_;
};

/// The session of `setup` over `models`, of type Session (with_session_type gives it). Checks
/// first that a draft model is there when the setup needs one, and that the draft's tokenizer
/// has the target's tokens (check_same_vocabulary, specdec/model/tokenizer.hpp). `name` prefixes
/// the session's errors. Throws specdec::Error.
template <class Session, class LM>
std::unique_ptr<OwnedSession<Session>> make_session(const DecodeSetup& setup,
                                                    const SessionModels<LM>& models,
                                                    const char* name = "SpeculativeDecoder") {
  if (models.target == nullptr) throw Error(std::string(name) + ": no target model");
  if (setup.uses_draft_model()) {
    if (models.draft == nullptr)
      throw Error(std::string(name) + ": the setup '" + setup.label() + "' needs a draft model");
    if (models.tokenizer != nullptr && models.draft_tokenizer != nullptr)
      check_same_vocabulary(*models.tokenizer, *models.draft_tokenizer);
  }
  return std::make_unique<OwnedSession<Session>>(setup, models, name);
}

}  // namespace specdec
