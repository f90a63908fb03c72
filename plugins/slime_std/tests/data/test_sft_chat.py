"""Multi-turn SFT: loss masks from the chat template (assistant turns only), with the tiny
model's byte-level tokenizer given a chat template; then the real ``core run``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from slime_std.data.sft_chat import chat_loss_mask, split_prompt_response

ROOT = Path(__file__).resolve().parents[4]
MODEL = ROOT / "examples" / "tiny_arith" / "model"
TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
CHAT = [
    {"role": "system", "content": "add"},
    {"role": "user", "content": "1+2="},
    {"role": "assistant", "content": "3"},
    {"role": "user", "content": "and 10+5="},
    {"role": "assistant", "content": "15"},
]


@pytest.fixture(scope="module")
def chat_tokenizer_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("chat_tok")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(MODEL / name, out / name)
    cfg = json.loads((out / "tokenizer_config.json").read_text())
    assert "chat_template" not in cfg  # the tiny model has none: the test gives it one
    cfg["chat_template"] = TEMPLATE
    (out / "tokenizer_config.json").write_text(json.dumps(cfg))
    return out


def test_only_assistant_turns_are_masked_in(chat_tokenizer_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(chat_tokenizer_dir)
    ids, mask = chat_loss_mask(tok, CHAT)
    assert len(ids) == len(mask)
    trained = tok.decode([t for t, m in zip(ids, mask, strict=True) if m], skip_special_tokens=False)
    assert trained == "3</s>\n15</s>\n"  # contents and end-of-turn, no header, no user text
    untrained = tok.decode([t for t, m in zip(ids, mask, strict=True) if not m], skip_special_tokens=False)
    assert "and 10+5=" in untrained and "<|assistant|>" in untrained
    prompt, response, rmask = split_prompt_response(ids, mask)
    assert tok.decode(prompt).endswith("<|assistant|>\n")
    assert rmask[0] == 1 and 0 in rmask and len(response) == len(rmask)
    # slime's step_loss_mask: a turn marked 0 is not trained on
    _, mask2 = chat_loss_mask(tok, [*CHAT[:2], {**CHAT[2], "step_loss_mask": 0}, *CHAT[3:]])
    assert tok.decode([t for t, m in zip(ids, mask2, strict=True) if m], skip_special_tokens=False) == "15</s>\n"


def test_a_template_that_rewrites_earlier_turns_is_refused(chat_tokenizer_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(chat_tokenizer_dir)
    # renders only the last assistant turn in full, as templates that drop old reasoning do
    tok.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|>{% if loop.last or "
                         "m['role'] != 'assistant' %}{{ m['content'] }}{% endif %}{% endfor %}"
                         "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    with pytest.raises(ValueError, match="not a prefix"):
        chat_loss_mask(tok, CHAT)


def test_sft_on_a_chat_file_through_core_run(tmp_path, chat_tokenizer_dir):
    rows = []
    for a in range(12):
        b = (a * 7) % 50
        rows.append({"prompt": [{"role": "user", "content": f"{a}+{b}="},
                                {"role": "assistant", "content": str(a + b)},
                                {"role": "user", "content": "twice?"},
                                {"role": "assistant", "content": str(2 * (a + b))}]})
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = tmp_path / "sft.toml"
    cfg.write_text(f"""
[run]
num_rollouts = 6
run_dir = "{tmp_path / 'run'}"
progress = false
loggers = ["jsonl"]
[model]
path = "{MODEL}"
tokenizer = "{chat_tokenizer_dir}"
[data]
path = "{data}"
[rollout]
batch_size = 12
n_samples_per_prompt = 1
[train]
loss = "sft"
lr = 3e-3
[debug]
save_rollouts = "{tmp_path / 'dumps'}"
""")
    res = subprocess.run([sys.executable, "-m", "slime_core", "run", "--config", str(cfg)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    metrics = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    nll = [m["train/sft_nll"] for m in metrics if "train/sft_nll" in m]
    assert len(nll) == 6 and nll[-1] < 0.7 * nll[0], nll
    # what the trainer got: the masked-in tokens are exactly the two assistant turns
    from slime_core.observe.dumps import dump_path, read_dump
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(chat_tokenizer_dir)
    _, result = read_dump(dump_path(tmp_path / "dumps", 0, evaluation=False))
    s = next(iter(result.samples()))
    resp = s.tokens[len(s.tokens) - s.response_length:]
    trained = tok.decode([t for t, m in zip(resp, s.loss_mask, strict=True) if m], skip_special_tokens=False)
    a, b = [int(x) for x in s.prompt[0]["content"].rstrip("=").split("+")]
    assert trained == f"{a + b}</s>\n{2 * (a + b)}</s>\n"
