#include "trace.hpp"

#include <fmt/format.h>

#include "common.hpp"

namespace specdec::cli {

namespace {

nlohmann::json token_json(const Tokenizer* tokenizer, token_t id) {
  if (id < 0) return nullptr;
  return {{"id", id},
          {"text", tokenizer ? display_token(*tokenizer, id) : fmt::format("[{}]", id)}};
}

// The page. Colours: accepted draft tokens green, the rejected draft token red and struck
// through, drafted tokens after it (never reached by the verifier) grey, the correction sampled
// from the residual orange, the bonus token from the target's last row blue. Rounds without a
// draft (target-only steps) show only the target's token.
constexpr const char* kPageHead = R"html(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>specdec trace</title>
<style>
  :root { --acc: #1a7f37; --acc-bg: #dafbe1; --rej: #cf222e; --rej-bg: #ffebe9; --cor: #bc4c00;
          --cor-bg: #fff1e5; --bon: #0550ae; --bon-bg: #ddf4ff; --dim: #8c959f; --line: #d0d7de; }
  body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px; color: #1f2328; }
  h1 { font-size: 20px; margin: 0 0 8px; }
  h2 { font-size: 16px; margin: 24px 0 8px; }
  .pills span { display: inline-block; background: #f6f8fa; border: 1px solid var(--line);
                border-radius: 12px; padding: 1px 9px; margin: 2px 4px 2px 0; font-size: 12px; }
  .pills b { font-weight: 600; }
  .legend span.tok { margin-right: 12px; }
  .tok { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: 12.5px;
         white-space: pre; border-radius: 4px; padding: 1px 3px; margin: 1px; display: inline-block;
         border: 1px solid transparent; }
  .acc { background: var(--acc-bg); color: var(--acc); border-color: #aceebb; }
  .rej { background: var(--rej-bg); color: var(--rej); text-decoration: line-through; border-color: #ffcecb; }
  .skip { color: var(--dim); border: 1px dashed var(--line); }
  .tree { display: inline-block; vertical-align: middle; }
  .tree .node { white-space: nowrap; }
  .cor { background: var(--cor-bg); color: var(--cor); border-color: #ffd8b5; font-weight: 600; }
  .bon { background: var(--bon-bg); color: var(--bon); border-color: #b6e3ff; font-weight: 600; }
  .step { background: #f6f8fa; color: #1f2328; border-color: var(--line); }
  #text { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: 13px;
          white-space: pre-wrap; word-break: break-word; border: 1px solid var(--line); border-radius: 6px;
          padding: 10px 12px; background: #fff; }
  #text .prompt { color: var(--dim); }
  #text span.g { border-radius: 3px; }
  #text span.g.acc, #text span.g.cor, #text span.g.bon, #text span.g.step
    { padding: 0; margin: 0; border: none; display: inline; font-size: inherit; }
  table { border-collapse: collapse; width: 100%; }
  th, td { border-bottom: 1px solid var(--line); padding: 4px 8px; text-align: left; vertical-align: top; }
  th { font-weight: 600; background: #f6f8fa; position: sticky; top: 0; }
  td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
  .barbg { display: inline-block; width: 60px; height: 8px; background: #eaeef2; border-radius: 2px;
           margin-right: 6px; vertical-align: middle; overflow: hidden; }
  .bar { display: block; height: 100%; background: var(--acc); }
  .arrow { color: var(--dim); margin: 0 4px; }
  .draft { display: inline-flex; flex-direction: column; align-items: center; vertical-align: top;
           margin: 0 5px 2px 0; }
  .pq { font-size: 10px; line-height: 1.25; color: #57606a; font-variant-numeric: tabular-nums;
        white-space: nowrap; text-align: center; }
  td.times { font-size: 12px; color: #57606a; }
  .note { color: var(--dim); font-size: 12px; }
</style>
</head>
<body>
<h1 id="title">specdec trace</h1>
<div class="pills" id="settings"></div>
<div class="pills" id="summary"></div>
<p class="legend">
  <span class="tok acc">accepted</span><span class="tok rej">rejected</span><span class="tok skip">not reached</span>
  <span class="tok cor">correction (residual sample)</span><span class="tok bon">bonus (all accepted)</span>
  <span class="tok step">target step (no draft)</span>
</p>
<h2>Output</h2>
<div id="text"></div>
<h2>Rounds</h2>
<table>
  <thead><tr><th>#</th><th>pos</th><th>k</th><th>drafted (p, q) &rarr; target's token</th><th>accepted</th>
    <th title="milliseconds: draft model forwards / the target's verify forward / logit processing and sampling">draft / verify / sampling ms</th></tr></thead>
  <tbody id="rounds"></tbody>
</table>
<p class="note">Under each drafted token x: p, the target's probability of x, and q, the draft's (after the same
temperature, top-k, top-p and min-p); the verifier accepted x with probability min(1, p/q). Times exclude the
prompt prefill. Acceptance = accepted / drafted tokens of the round.</p>
<script type="application/json" id="trace-data">)html";

constexpr const char* kPageTail = R"html(</script>
<script>
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("trace-data").textContent);
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  };
  // Chips show whitespace visibly; the output text shows it as it is.
  const visible = (s) => s.replace(/ /g, "\u00b7").replace(/\n/g, "\u21b5").replace(/\t/g, "\u2192");
  const chip = (tok, cls) => el("span", "tok " + cls, visible(tok.text));
  // A probability in a few characters: 0.834, 3.1e-4, 0.
  const prob = (x) => x >= 0.001 || x === 0 ? x.toFixed(3).replace(/^0\.000$/, "0") : x.toExponential(1);
  const pill = (box, key, value) => {
    const p = el("span");
    p.append(el("b", null, key + ": "), document.createTextNode(String(value)));
    box.append(p);
  };

  document.getElementById("title").textContent = data.title;
  const settings = document.getElementById("settings");
  for (const [key, value] of Object.entries(data.settings)) pill(settings, key, value);
  const s = data.stats, summary = document.getElementById("summary");
  pill(summary, "tokens", s.tokens_emitted);
  pill(summary, "rounds", s.rounds);
  pill(summary, "target passes", s.target_passes);
  pill(summary, "acceptance", s.drafted ? (s.acceptance_rate.toFixed(3) + " (" + s.accepted + "/" + s.drafted + ")") : "n/a");
  pill(summary, "tokens/round", s.mean_tokens_per_round.toFixed(2));
  pill(summary, "tok/s", s.tokens_per_second.toFixed(1));
  pill(summary, "stop", data.stop_reason);

  // With --n-probs: the target's log-probability of each generated token and its alternatives,
  // in the token's tooltip.
  let emittedIndex = 0;
  const logprobText = (i) => {
    const lp = data.logprobs ? data.logprobs[i] : undefined;
    if (!lp) return "";
    const line = (t) => JSON.stringify(t.token) + " " + t.logprob.toFixed(3) +
                        " (p " + prob(Math.exp(t.logprob)) + ")";
    return "\nlogprob " + line(lp) + lp.top_logprobs.map((t) => "\n  " + line(t)).join("");
  };
  const text = document.getElementById("text");
  text.append(el("span", "prompt", data.prompt_text));
  const tbody = document.getElementById("rounds");
  data.rounds.forEach((r, i) => {
    const tr = el("tr", "round");
    tr.dataset.round = String(i);
    tr.dataset.drafted = String(r.drafted.length);
    tr.dataset.accepted = String(r.accepted);
    const cells = [el("td", "num", String(i + 1)), el("td", "num", String(r.position)),
                   el("td", "num", String(r.drafted.length))];
    const chips = el("td");
    const emitted = [];
    if (r.tree_parents) {
      // A tree round: each node under its parent (indented by depth), the kept path accepted.
      const depth = [];
      const kept = new Set(r.accepted_nodes);
      const tree = el("div", "tree");
      r.drafted.forEach((t, j) => {
        const parent = r.tree_parents[j];
        depth[j] = parent < 0 ? 0 : depth[parent] + 1;
        const line = el("div", "node");
        line.style.marginLeft = (14 * depth[j]) + "px";
        const c = chip(t, kept.has(j) ? "acc" : "skip");
        c.title = "node " + j + (parent < 0 ? ", after the sequence" : ", after node " + parent) +
                  (kept.has(j) ? " (accepted)" : "");
        line.append(c);
        tree.append(line);
      });
      r.accepted_nodes.forEach((j) => emitted.push([r.drafted[j], "acc"]));
      chips.append(tree);
    }
    (r.tree_parents ? [] : r.drafted).forEach((t, j) => {
      const cls = j < r.accepted ? "acc" : (j === r.accepted ? "rej" : "skip");
      if (t.p === undefined || t.q === undefined) {
        chips.append(chip(t, cls));
      } else {
        // The chip with p(x) and q(x) under it: the numbers the acceptance test compared.
        const box = el("span", "draft");
        const pq = el("span", "pq");
        pq.dataset.p = String(t.p);
        pq.dataset.q = String(t.q);
        pq.append(document.createTextNode("p " + prob(t.p)), el("br"),
                  document.createTextNode("q " + prob(t.q)));
        box.title = "p(x) = " + t.p + ", q(x) = " + t.q + ": accepted with probability " +
                    (t.q > 0 ? Math.min(1, t.p / t.q).toFixed(4) : "1") +
                    (cls === "acc" ? " (accepted)" : cls === "rej" ? " (rejected)" : " (not reached)");
        box.append(chip(t, cls), pq);
        chips.append(box);
      }
      if (j < r.accepted) emitted.push([t, "acc"]);
    });
    const kind = r.drafted.length === 0 ? "step" : (r.bonus ? "bon" : "cor");
    if (r.next) {
      if (r.drafted.length) chips.append(el("span", "arrow", "\u2192"));
      chips.append(chip(r.next, kind));
      emitted.push([r.next, kind]);
    }
    const acc = el("td", "num");
    if (r.drafted.length) {
      const frac = r.accepted / r.drafted.length;
      const bg = el("span", "barbg"), bar = el("span", "bar");
      bar.style.width = Math.round(60 * frac) + "px";
      bg.append(bar);
      acc.append(bg, document.createTextNode(r.accepted + "/" + r.drafted.length));
    } else {
      acc.textContent = "\u2013";
    }
    const times = el("td", "num times");
    if (r.verify_seconds !== undefined) {
      const ms = (x) => (1000 * x).toFixed(2);
      times.textContent = ms(r.draft_seconds) + " / " + ms(r.verify_seconds) + " / " + ms(r.sampling_seconds);
    } else {
      times.textContent = "\u2013";
    }
    tr.append(...cells, chips, acc, times);
    tbody.append(tr);
    // A stop (EOS, budget, stop string) may cut the round's tokens short.
    emitted.slice(0, r.emitted).forEach(([t, cls]) => {
      const span = el("span", "g " + cls, t.text);
      span.title = "round " + (i + 1) + ", token " + t.id + logprobText(emittedIndex);
      if (data.logprobs) span.dataset.logprob = String(data.logprobs[emittedIndex].logprob);
      ++emittedIndex;
      text.append(span);
    });
  });
  document.body.dataset.rendered = String(data.rounds.length);
})();
</script>
</body>
</html>
)html";

}  // namespace

nlohmann::json trace_data(const TraceInput& input) {
  const GenerationResult& result = *input.result;
  nlohmann::json data;
  data["title"] = input.title;
  data["settings"] = input.settings;
  data["stats"] = stats_json(result.stats);
  data["stop_reason"] = std::string(to_string(result.stop_reason));
  data["prompt_text"] = input.tokenizer ? input.tokenizer->decode(input.prompt) : std::string();
  nlohmann::json rounds = nlohmann::json::array();
  if (result.rounds.empty()) {
    // Target-only decoding records no rounds: each token is its own step.
    for (std::size_t i = 0; i < result.tokens.size(); ++i)
      rounds.push_back({{"position", input.prompt.size() + i},
                        {"drafted", nlohmann::json::array()},
                        {"accepted", 0},
                        {"next", token_json(input.tokenizer, result.tokens[i])},
                        {"bonus", false},
                        {"emitted", 1}});
  }
  for (std::size_t i = 0; i < result.rounds.size(); ++i) {
    const RoundRecord& r = result.rounds[i];
    nlohmann::json drafted = nlohmann::json::array();
    for (std::size_t j = 0; j < r.drafted.size(); ++j) {
      nlohmann::json t = token_json(input.tokenizer, r.drafted[j]);
      if (j < r.p_drafted.size()) t["p"] = r.p_drafted[j];
      if (j < r.q_drafted.size()) t["q"] = r.q_drafted[j];
      drafted.push_back(std::move(t));
    }
    nlohmann::json round = {{"position", r.position},
                            {"drafted", drafted},
                            {"accepted", r.accepted},
                            {"next", token_json(input.tokenizer, r.next)},
                            {"bonus", r.bonus},
                            {"emitted", r.emitted},
                            {"draft_seconds", r.draft_seconds},
                            {"verify_seconds", r.verify_seconds},
                            {"sampling_seconds", r.sampling_seconds}};
    if (!r.tree_parents.empty()) {  // a tree round: the nodes' parents and the kept path
      round["tree_parents"] = r.tree_parents;
      round["accepted_nodes"] = r.accepted_nodes;
    }
    rounds.push_back(std::move(round));
  }
  data["rounds"] = std::move(rounds);
  if (!result.logprobs.empty()) data["logprobs"] = logprobs_json(input.tokenizer, result.logprobs);
  return data;
}

std::string trace_html(const TraceInput& input) {
  std::string json =
      trace_data(input).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  // Inside <script>, "</script" or "<!--" in a token's text would end or confuse the element:
  // write every '<' (it only occurs inside JSON strings) as the escape \u003c.
  for (std::size_t at = json.find('<'); at != std::string::npos; at = json.find('<', at + 6))
    json.replace(at, 1, "\\u003c");
  return std::string(kPageHead) + json + kPageTail;
}

}  // namespace specdec::cli
