#!/usr/bin/env python3
"""Generates tests/data/model/chat/: what the official chat templates render, for the conformance
test of specdec's ChatTemplate (tests/model/test_chat_template.cpp).

specdec has no Jinja interpreter: it recognises a template's family and renders the family in
C++ (include/specdec/model/chat_template.hpp). This script renders the *published* templates of
each family with transformers' own Jinja renderer (transformers.utils.chat_template_utils.
render_jinja_template, what tokenizer.apply_chat_template(tokenize=False) calls: a sandboxed
jinja2 environment with trim_blocks and lstrip_blocks) over a set of conversations, with and
without the generation prompt. The test requires specdec's render() to give the same bytes, and
to throw where the template raises (roles that do not alternate, a system message a template
refuses).

templates.json holds, per template: its source (the model whose tokenizer_config.json publishes
it), the family specdec must detect, the bos_token / eos_token texts of that model's tokenizer,
the template text, and per conversation and add_generation_prompt the rendered text (or the
exception the template raised).

tokens.json holds the ids the Hugging Face `tokenizers` library gives rendered conversations
(encode(text, add_special_tokens=False): transformers' apply_chat_template(tokenize=True) lets the
template's own BOS text stand for the BOS) for the byte-level fixture tokenizer of
tests/data/tokenizer/llama3-bpe, whose post-processor also adds BOS: specdec's tokenize_chat() must
give the same ids, one BOS and not two.

Needs: pip install transformers tokenizers jinja2 (no torch). Run from the repository root:
    python3 tools/make_chat_fixtures.py
The Qwen2.5 template is the one the GGUF files of the Qwen2.5-Coder instruct pair carry; when
they are in ~/.cache/specdec-models the script checks that its copy is identical.
"""

import json
import os

import jinja2
import tokenizers
import transformers
from transformers.utils.chat_template_utils import render_jinja_template

OUT = os.path.join("tests", "data", "model", "chat")

# ---------------------------------------------------------------------------------------------
# The templates, as published in each model's tokenizer_config.json ("chat_template").

# Qwen/Qwen2.5-Coder-0.5B-Instruct (GGUF tokenizer.chat_template of
# qwen2.5-coder-0.5b-instruct-q4_k_m.gguf; the same as the model's tokenizer_config.json).
QWEN25 = r'''{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
'''

# teknium/OpenHermes-2.5-Mistral-7B: plain ChatML.
OPENHERMES = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' "
    "}}{% endif %}"
)

# Qwen/Qwen2-7B-Instruct: ChatML with a default system message.
QWEN2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# meta-llama/Meta-Llama-3-8B-Instruct.
LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim "
    "+ '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant"
    "<|end_header_id|>\\n\\n' }}{% endif %}"
)

# meta-llama/Llama-3.1-8B-Instruct (date_string defaults to "26 Jul 2024").
LLAMA31 = r'''{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
'''

# meta-llama/Llama-2-7b-chat-hf.
LLAMA2 = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
    "system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set "
    "system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] "
    "== 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != "
    "false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + "
    "message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if "
    "message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif "
    "message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}"
    "{% endfor %}"
)

# mistralai/Mistral-7B-Instruct-v0.2 (and v0.1, Mixtral-8x7B-Instruct-v0.1).
MISTRAL = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] "
    "' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ "
    "message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles "
    "are supported!') }}{% endif %}{% endfor %}"
)

# google/gemma-7b-it (Gemma 2's is the same): refuses a system message.
GEMMA = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
    "supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% "
    "set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ "
    "'<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor "
    "%}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}"
)

# google/gemma-3-1b-it: the system message opens the first user turn.
GEMMA3 = r'''{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
'''

# microsoft/Phi-3.5-mini-instruct (also Phi-3-mini-4k-instruct's current template).
PHI35 = (
    "{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}"
    "{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'user' %}"
    "{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'assistant' %}"
    "{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}{% if "
    "add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}"
)

# HuggingFaceH4/zephyr-7b-beta (TinyLlama-1.1B-Chat-v1.0 publishes the same).
ZEPHYR = (
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + "
    "message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' "
    "+ message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ "
    "'<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and "
    "add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}"
)

TEMPLATES = [
    # source, family specdec detects, bos_token, eos_token, text
    ("Qwen/Qwen2.5-Coder-0.5B-Instruct", "chatml", None, "<|im_end|>", QWEN25),
    ("teknium/OpenHermes-2.5-Mistral-7B", "chatml", "<s>", "<|im_end|>", OPENHERMES),
    ("Qwen/Qwen2-7B-Instruct", "chatml", None, "<|im_end|>", QWEN2),
    ("meta-llama/Meta-Llama-3-8B-Instruct", "llama3", "<|begin_of_text|>", "<|eot_id|>", LLAMA3),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama3.1", "<|begin_of_text|>", "<|eot_id|>", LLAMA31),
    ("meta-llama/Llama-2-7b-chat-hf", "llama2", "<s>", "</s>", LLAMA2),
    ("mistralai/Mistral-7B-Instruct-v0.2", "mistral", "<s>", "</s>", MISTRAL),
    ("google/gemma-7b-it", "gemma", "<bos>", "<eos>", GEMMA),
    ("google/gemma-3-1b-it", "gemma", "<bos>", "<eos>", GEMMA3),
    ("microsoft/Phi-3.5-mini-instruct", "phi3", "<s>", "<|endoftext|>", PHI35),
    ("HuggingFaceH4/zephyr-7b-beta", "zephyr", "<s>", "</s>", ZEPHYR),
]


def msg(role, content):
    return {"role": role, "content": content}


SYSTEM = "You are a helpful assistant."
CONVERSATIONS = {
    "user": [msg("user", "Hello")],
    "system_user": [msg("system", SYSTEM), msg("user", "Hello")],
    "multi_turn_system": [
        msg("system", SYSTEM),
        msg("user", "What is 2 + 2?"),
        msg("assistant", "2 + 2 = 4."),
        msg("user", "And 3 + 3?"),
    ],
    "multi_turn": [
        msg("user", "Write a haiku."),
        msg("assistant", "Silent pond at dusk"),
        msg("user", "Another one?"),
        msg("assistant", "Frog leaps, ripples fade"),
        msg("user", "Thanks!"),
    ],
    "answer_last": [msg("user", "Hi"), msg("assistant", "Hello! How can I help?")],
    # Leading / trailing whitespace: the templates that trim (Llama 3's | trim, Llama 2's .strip(),
    # Gemma's | trim) and those that do not.
    "whitespace": [
        msg("system", "  Be brief.\n"),
        msg("user", "  padded question \n"),
        msg("assistant", "\n Answer with spaces.  \n"),
        msg("user", "tab\tand\nnewline\t"),
    ],
    # Python's str.strip() also removes Unicode spaces (U+3000, U+00A0, U+2003, U+2028, U+001C).
    "unicode_whitespace": [
        msg("user", "\u3000full-width space\u00a0"),
        msg("assistant", "\u2003em space answer\u2028"),
        msg("user", "\x1cfile separator\u205f ünïcödé 中文 🙂"),
    ],
    "empty_system": [msg("system", ""), msg("user", "hi")],
    "special_text": [msg("user", "Say <|im_end|> and </s> and [INST] literally.")],
    # Refused by the templates that require alternation.
    "two_users": [msg("user", "a"), msg("user", "b")],
    "system_in_middle": [
        msg("user", "a"),
        msg("assistant", "b"),
        msg("system", "mid"),
        msg("user", "c"),
    ],
}


def render(text, messages, generation, bos, eos):
    kwargs = {"eos_token": eos}
    if bos is not None:
        kwargs["bos_token"] = bos
    rendered, _ = render_jinja_template(
        conversations=[messages], chat_template=text, add_generation_prompt=generation, **kwargs
    )
    return rendered[0]


def check_qwen_copy():
    path = os.path.expanduser("~/.cache/specdec-models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    if not os.path.exists(path):
        print(f"note: {path} not found; the Qwen2.5 template copy was not rechecked")
        return
    import gguf

    text = gguf.GGUFReader(path).fields["tokenizer.chat_template"].contents()
    assert text == QWEN25, "the Qwen2.5 template copy differs from the GGUF's"


def make_templates():
    templates = []
    for source, family, bos, eos, text in TEMPLATES:
        cases = []
        for name, messages in CONVERSATIONS.items():
            for generation in (True, False):
                case = {"conversation": name, "add_generation_prompt": generation}
                try:
                    case["expected"] = render(text, messages, generation, bos, eos)
                except (jinja2.exceptions.TemplateError, ValueError) as e:
                    case["error"] = str(e)
                cases.append(case)
        templates.append(
            {
                "source": source,
                "family": family,
                "bos_token": bos or "",
                "eos_token": eos,
                "text": text,
                "cases": cases,
            }
        )
    return templates


def make_tokens():
    """tokenizers' ids of rendered conversations (the llama3-bpe fixture tokenizer adds BOS in
    its post-processor; encode(..., add_special_tokens=False) as apply_chat_template does)."""
    path = os.path.join("tests", "data", "tokenizer", "llama3-bpe", "tokenizer.json")
    tok = tokenizers.Tokenizer.from_file(path)
    out = []
    for name in ("user", "multi_turn_system", "whitespace"):
        text = render(LLAMA3, CONVERSATIONS[name], True, "<|begin_of_text|>", "<|eot_id|>")
        out.append(
            {
                "tokenizer": "tokenizer/llama3-bpe/tokenizer.json",
                "template": "llama3",
                "conversation": name,
                "text": text,
                "ids": tok.encode(text, add_special_tokens=False).ids,
                "ids_with_special_tokens": tok.encode(text, add_special_tokens=True).ids,
            }
        )
    return out


def main():
    check_qwen_copy()
    os.makedirs(OUT, exist_ok=True)
    versions = {
        "transformers": transformers.__version__,
        "jinja2": jinja2.__version__,
        "tokenizers": tokenizers.__version__,
    }
    conversations = [{"name": k, "messages": v} for k, v in CONVERSATIONS.items()]
    with open(os.path.join(OUT, "templates.json"), "w", encoding="utf-8") as f:
        json.dump(
            {"versions": versions, "conversations": conversations, "templates": make_templates()},
            f,
            ensure_ascii=False,
            indent=1,
        )
        f.write("\n")
    with open(os.path.join(OUT, "tokens.json"), "w", encoding="utf-8") as f:
        json.dump({"versions": versions, "cases": make_tokens()}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {OUT}/templates.json and tokens.json")


if __name__ == "__main__":
    main()
