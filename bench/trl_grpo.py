"""The peer of ``gpu_anchor.py``: TRL's ``GRPOTrainer`` (HF generate path, no vLLM) on the same
shapes, run in the same device call as slime's figures.

The 0.5b shape is ``../shared/anchors/trl_grpo_h200.py``'s workload (16 prompts x 8, 256 tokens
forced, one optimizer step per generation). The 1.5b shape (32 prompts x 8, 1024 tokens forced)
does not fit TRL's one-pass loss at 256 samples (the [256, 1088, 152k] logits alone are 85 GB in
bf16), so it micro-batches: 32 samples a forward, 8 accumulation steps, one generation of all
256 samples per optimizer step (TRL's ``steps_per_generation`` = accumulation steps). Prints one
JSON line per optimizer step (``trl_step``) and a summary, and appends them to ``--out``.

    python bench/trl_grpo.py --shape 1.5b --steps 3 --out results.jsonl
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from typing import Any

SHAPES = {
    # hidden, intermediate, layers, heads, kv heads, prompts, samples, tokens, per-device batch
    "0.5b": (896, 4864, 24, 14, 2, 16, 8, 256, 128),
    "1.5b": (1536, 8960, 28, 12, 2, 32, 8, 1024, 32),
    "tiny": (64, 128, 2, 4, 2, 2, 4, 16, 4),  # plumbing check on a CPU
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="0.5b", choices=sorted(SHAPES))
    ap.add_argument("--steps", type=int, default=4, help="optimizer steps (the first warms up)")
    ap.add_argument("--out", help="JSON lines appended here")
    ap.add_argument("--generate-warmup", action="store_true",
                    help="first run HF generate as ../shared/anchors/trl_grpo_h200.py does (batch "
                    "64 then 256, 8 then 256 new tokens each; its 5.5-7.1 s steady steps were "
                    "measured after them, this script's 9.2-10.1 s on 2026-12-02 without)")
    a = ap.parse_args()
    log = open(a.out, "a") if a.out else None  # noqa: SIM115 - closed at exit

    def emit(**kw: Any) -> None:
        line = json.dumps({"peer": "trl", "shape": a.shape, **kw})
        print(line, flush=True)
        if log is not None:
            log.write(line + "\n")
            log.flush()

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    hidden, inter, layers, heads, kv, prompts, group, length, per_device = SHAPES[a.shape]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    text = [f"Question {i}: what is {i} plus {i * 7 % 13}? Answer: {i + i * 7 % 13}."
            for i in range(2000)]
    tok.train_from_iterator(text, trainers.BpeTrainer(
        vocab_size=1000, special_tokens=["<unk>", "<pad>", "<eos>"]))
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                     eos_token="<eos>")
    cfg = Qwen2Config(vocab_size=151936, hidden_size=hidden, intermediate_size=inter,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv, max_position_embeddings=4096,
                      tie_word_embeddings=True, eos_token_id=2, pad_token_id=1, bos_token_id=None)
    torch.manual_seed(0)
    cuda = torch.cuda.is_available()
    model = Qwen2ForCausalLM(cfg)
    model = model.to(torch.bfloat16).cuda() if cuda else model
    emit(what="model", params=sum(p.numel() for p in model.parameters()),
         torch=torch.__version__, gpu=torch.cuda.get_device_name() if cuda else "cpu")

    if a.generate_warmup:
        prompt = hf_tok(["Question 5: what is 5 plus 9? Answer:"], return_tensors="pt").input_ids
        prompt = prompt.cuda() if cuda else prompt
        for rows in (64, 256):
            with torch.no_grad():
                for new in (8, length):
                    t = time.perf_counter()
                    model.generate(prompt.repeat(rows, 1), max_new_tokens=new, min_new_tokens=new,
                                   do_sample=True, pad_token_id=1)
                    if cuda:
                        torch.cuda.synchronize()
                emit(what="hf_generate", batch=rows, new_tokens=new,
                     seconds=time.perf_counter() - t)

    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    ds = Dataset.from_list([{"prompt": f"Question {i}: what is {i} plus {i % 9}? Answer:"}
                            for i in range(512)])

    def reward(completions: list[str], **kw: Any) -> list[float]:
        return [float(sum(c.isdigit() for c in x)) / 10.0 for x in completions]

    class Timer(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.t = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if cuda:
                torch.cuda.synchronize()
            emit(what="trl_step", step=state.global_step, seconds=time.perf_counter() - self.t)

    samples = prompts * group
    accumulation = samples // per_device
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(), per_device_train_batch_size=per_device,
        num_generations=group, gradient_accumulation_steps=accumulation,
        max_completion_length=length, max_steps=a.steps, bf16=cuda, use_cpu=not cuda,
        learning_rate=1e-6,
        report_to="none", logging_steps=1, save_strategy="no",
        generation_kwargs={"min_new_tokens": length})
    model.config.use_cache = True
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=ds,
                          processing_class=hf_tok, callbacks=[Timer()])
    t = time.perf_counter()
    trainer.train()
    emit(what="trl_total", seconds=time.perf_counter() - t, samples_per_step=samples,
         completion_len=length, accumulation_steps=accumulation,
         peak_mem_gb=torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0)


if __name__ == "__main__":
    main()
