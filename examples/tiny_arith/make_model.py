"""Build the tiny_arith policy: a byte-level tokenizer and a ~1.1M-parameter Llama, warm-started by SFT.

    python examples/tiny_arith/make_data.py     # once: train.jsonl / eval.jsonl
    python examples/tiny_arith/make_model.py    # writes examples/tiny_arith/model/ (2000 SFT steps; CPU default)

`--device cuda` runs the same SFT on a GPU (30 s on one H200). The committed model/ was made with
`python examples/tiny_arith/make_model.py --device cuda` (see model/sft_report.json); on CPU the
same command without `--device cuda` gives an equivalent but not bit-identical model.

What it does:

1. Tokenizer, built with the `tokenizers` library: byte level with no merges (a BPE model whose
   vocabulary is the 256 byte symbols of GPT-2's ByteLevel alphabet and an empty merge list;
   ByteLevel pre-tokenizer without regex split, ByteLevel decoder), so every byte, each digit
   included, is one token and decode(encode(s)) == s for any text. Ids: <pad>=0, <s>=1 (bos),
   </s>=2 (eos), <unk>=3 (never produced), then byte b has id 4 + b ("0".."9" = 52..61,
   "+" = 47, "=" = 65, " " = 36). Nothing is added when encoding (no bos, no eos) and there is
   no chat template: prompts are raw text such as "12+7=". Wrapped as a
   `transformers.PreTrainedTokenizerFast` and saved with `save_pretrained`; `AutoTokenizer`
   loads it back unchanged (a Llama config does not make transformers swap in a model-specific
   tokenizer class, which it does for qwen2 configs).
2. Model: `LlamaForCausalLM` from a config (hidden 128, 4 layers, 2 heads of dim 64, MLP 512,
   tied embeddings, vocab 260 == len(tokenizer)), about 1.1M parameters, fp32 safetensors.
3. SFT warm start on a *noisy teacher*: the first SFT_ROWS rows of train.jsonl, cross-entropy
   on the answer tokens + eos only. The teacher is a sloppy calculator: for each
   demonstration it writes the right sum with probability 1 - NOISE and the sum plus one
   (an off-by-one slip) with probability NOISE = 0.7. Trained to convergence, the model
   imitates the teacher: it samples the right answer about 30% of the time and its greedy
   answer is mostly the off-by-one one. RL with an exact-match verifier can then do what
   imitation could not: push the held-out accuracy far above the teacher's.
4. Prints the eval accuracy (greedy; the metric of record) plus sampled (T=1) accuracy and
   the share of greedy answers equal to label+1, and writes them to model/sft_report.json.

Metric: accuracy = fraction of eval prompts whose greedy completion (at most 8 new tokens,
cut at the first eos, decoded, stripped) equals the label.

Deterministic for a given device, torch version and thread count (seeded everywhere).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

HERE = Path(__file__).resolve().parent
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>"]
SEED = 0
NOISE = 0.7
SFT_ROWS = 5000
MAX_NEW_TOKENS = 8


def byte_alphabet() -> list[str]:
    """GPT-2's byte -> printable-unicode table, in byte order (so ASCII byte b has id 4 + b)."""
    table = pre_tokenizers.ByteLevel.alphabet()
    keep = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    extra = iter(range(256, 512))
    chars = [chr(b) if b in keep else chr(next(extra)) for b in range(256)]
    assert sorted(chars) == sorted(table)
    return chars


def build_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + byte_alphabet())}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIAL_TOKENS)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        model_max_length=128,
    )


def build_model(tok: PreTrainedTokenizerFast, seed: int = SEED) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=128,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    return LlamaForCausalLM(config)


def load_jsonl(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def sft(model, tok, rows, *, steps, batch_size, lr, noise, seed, device, log_every=100):
    """Cross-entropy on answer + eos; the answer is label+1 with probability `noise`."""
    eos, pad = tok.eos_token_id, tok.pad_token_id
    enc = [
        (
            tok(r["prompt"])["input_ids"],
            tok(r["label"])["input_ids"],
            tok(str(int(r["label"]) + 1))["input_ids"],
        )
        for r in rows
    ]
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.0)
    model.train()
    t0 = time.time()
    for step in range(steps):
        scale = min(1.0, (step + 1) / 20) * (
            0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * step / steps))
        )
        for group in opt.param_groups:
            group["lr"] = lr * scale
        seqs, labels = [], []
        for prompt, right, slip in rng.sample(enc, batch_size):
            answer = (slip if rng.random() < noise else right) + [eos]
            seqs.append(prompt + answer)
            labels.append([-100] * len(prompt) + answer)
        width = max(map(len, seqs))
        ids = torch.tensor([s + [pad] * (width - len(s)) for s in seqs], device=device)
        tgt = torch.tensor([t + [-100] * (width - len(t)) for t in labels], device=device)
        logits = model(input_ids=ids).logits[:, :-1].float()
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % log_every == 0:
            print(
                f"sft step {step + 1}/{steps} loss {loss.item():.4f} ({time.time() - t0:.0f}s)",
                flush=True,
            )
    model.eval()


@torch.no_grad()
def complete(
    model,
    tok,
    prompts,
    *,
    greedy=True,
    temperature=1.0,
    max_new_tokens=MAX_NEW_TOKENS,
    generator=None,
):
    """Batched completion (left padding, KV cache); returns decoded text cut at the first eos, stripped."""
    from transformers import DynamicCache

    device = next(model.parameters()).device
    ids = [tok(p)["input_ids"] for p in prompts]
    width = max(map(len, ids))
    x = torch.tensor([[tok.pad_token_id] * (width - len(s)) + s for s in ids], device=device)
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in ids], device=device)
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    cache = DynamicCache()
    logits = model(
        input_ids=x, attention_mask=mask, position_ids=pos, past_key_values=cache, use_cache=True
    ).logits[:, -1]
    done = torch.zeros(len(ids), dtype=torch.bool, device=device)
    out = []
    for _ in range(max_new_tokens):
        if greedy:
            nxt = logits.argmax(-1)
        else:
            probs = torch.softmax(logits.float() / temperature, -1).cpu()
            nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1).to(device)
        nxt = torch.where(done, torch.full_like(nxt, tok.pad_token_id), nxt)
        out.append(nxt)
        done |= nxt == tok.eos_token_id
        if bool(done.all()):
            break
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
        pos = pos[:, -1:] + 1
        logits = model(
            input_ids=nxt[:, None],
            attention_mask=mask,
            position_ids=pos,
            past_key_values=cache,
            use_cache=True,
        ).logits[:, -1]
    texts = []
    for row in torch.stack(out, 1).tolist():
        if tok.eos_token_id in row:
            row = row[: row.index(tok.eos_token_id)]
        texts.append(tok.decode(row, skip_special_tokens=True).strip())
    return texts


def evaluate(model, tok, rows, *, samples=4, seed=123) -> dict[str, float]:
    greedy = complete(model, tok, [r["prompt"] for r in rows])
    gen = torch.Generator().manual_seed(seed)
    sampled = complete(
        model, tok, [r["prompt"] for r in rows for _ in range(samples)], greedy=False, generator=gen
    )
    return {
        "greedy_accuracy": sum(g == r["label"] for g, r in zip(greedy, rows, strict=True))
        / len(rows),
        "sampled_accuracy_t1": sum(s == rows[i // samples]["label"] for i, s in enumerate(sampled))
        / len(sampled),
        "greedy_off_by_one": sum(
            g == str(int(r["label"]) + 1) for g, r in zip(greedy, rows, strict=True)
        )
        / len(rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=HERE / "model")
    parser.add_argument("--data-dir", type=Path, default=HERE)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--noise", type=float, default=NOISE)
    parser.add_argument("--sft-rows", type=int, default=SFT_ROWS)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    train = load_jsonl(args.data_dir / "train.jsonl")
    evaluation = load_jsonl(args.data_dir / "eval.jsonl")
    tok = build_tokenizer()
    model = build_model(tok, args.seed).to(args.device)
    params = sum(p.numel() for p in model.parameters())
    print(
        f"tokenizer: {len(tok)} tokens; model: LlamaForCausalLM, {params:,} parameters", flush=True
    )
    print("before SFT:", evaluate(model, tok, evaluation), flush=True)

    t0 = time.time()
    sft(
        model,
        tok,
        train[: args.sft_rows],
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        noise=args.noise,
        seed=args.seed,
        device=args.device,
    )
    report = evaluate(model, tok, evaluation)
    report.update(
        params=params,
        sft_seconds=round(time.time() - t0, 1),
        sft_steps=args.steps,
        sft_batch_size=args.batch_size,
        sft_lr=args.lr,
        teacher_noise=args.noise,
        sft_rows=args.sft_rows,
        seed=args.seed,
        device=args.device,
        torch=torch.__version__,
    )
    print("after SFT (start of RL):", json.dumps(report), flush=True)

    model = model.to("cpu").float()
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        max_new_tokens=MAX_NEW_TOKENS,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    tok.save_pretrained(args.out)
    (args.out / "sft_report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"saved model and tokenizer to {args.out}")


if __name__ == "__main__":
    main()
