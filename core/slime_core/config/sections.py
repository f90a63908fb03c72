"""The core's configuration sections (registered by the built-in plugin ``core_config``,
``slime_core.builtin.config_sections``).

Every key is documented next to its field; ranges are checked in ``__post_init__`` so a bad
value fails naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from slime_hookspecs import (
    AcceleratorRecord,
    AdvantageEstimatorRecord,
    DataSourceRecord,
    FilterRecord,
    ISCorrectionRecord,
    KLEstimatorRecord,
    LoggerRecord,
    LossReducerRecord,
    PolicyLossRecord,
    RecordKey,
    RewardFunctionRecord,
    RolloutEngineRecord,
    RolloutScheduleRecord,
    TrainerBackendRecord,
    WeightTransportRecord,
)

# Numerical conventions presets (algorithm.numerics): each section dataclass may carry a
# NUMERICS_PRESETS class attribute, {preset: {key: default}}; the loader gives a key its
# preset default unless the config sets the key (slime_core.config.loader). docs/algorithms.md
# ("Numerics presets") has the table of every convention.
NUMERICS = ("slime", "verl")


# apply_chat_template arguments the framework itself passes (or that change what the call
# returns): data.chat_template_kwargs may not set them, else the call fails or returns ids
CHAT_TEMPLATE_RESERVED = ("conversation", "tools", "tokenize", "add_generation_prompt",
                          "continue_final_message", "return_dict", "return_tensors")



def rollout_mode(run: Any) -> str:
    """The rollout mode a ``[run]`` section selects: ``run.async_rollout = true`` (the older
    key, kept) means ``one_step_off``."""
    if run.rollout_mode == "sync" and run.async_rollout:
        return "one_step_off"
    return str(run.rollout_mode)


def async_buffer_groups(config: Any) -> int:
    """Groups the fully-async generator holds at once (``run.async_buffer_groups``; 0: twice
    ``rollout.batch_size``, so one batch can wait while the next is generated)."""
    return int(config.run.async_buffer_groups or 2 * config.rollout.batch_size)


def _need(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise ValueError(f"{key}: {msg}")


@dataclass
class RunSection:
    name: str = "slime"  # run name; the run directory is output_dir/name-<timestamp>
    output_dir: str = "runs"  # parent directory of run directories (name-<timestamp>)
    run_dir: str = ""  # exact run directory (overrides output_dir/name)
    seed: int = 1  # seeds torch, Python's random, the engines' sampling and the data order
    num_rollouts: int = 10  # training steps (one rollout + one train phase each)
    executor: str = "local"  # local | ray
    ray_address: str = ""  # empty: start a local Ray instance on 127.0.0.1
    accelerator: str = "auto"  # accelerator record name, or auto (highest available priority)
    save_interval: int = 0  # checkpoint every N steps (0: only at the end)
    save_at_end: bool = True  # checkpoint the last step; false: only every save_interval steps (a benchmark or throwaway run skips writing the model, optimizer and data state; a finished run without a checkpoint of its last step cannot be extended)
    keep_checkpoints: int = 2  # complete checkpoints kept; older ones go once a new one is in place
    required_plugins: list[str] = field(default_factory=list)  # a missing one is fatal
    plugin_modules: list[str] = field(default_factory=list)  # extra plugin modules by import path
    loggers: list[str] = field(default_factory=lambda: ["jsonl", "tensorboard"])  # logger records
    progress: bool = True  # progress bar while rollouts and training run
    num_threads: int = 0  # torch intra-op threads (0: leave torch's default)
    compile_cache_dir: str = "~/.cache/slime/compile"  # torch.compile's caches (inductor's in inductor/, Triton's in triton/) so a second run of the same model and shapes reuses the first's compilation; an explicit TORCHINDUCTOR_CACHE_DIR / TRITON_CACHE_DIR wins; empty: torch's own defaults
    cudnn_attention: bool = False  # CUDA: let torch's SDPA pick cuDNN attention, which builds a graph per new shape (0.4-0.5 s on an H200 at the anchor's first new prompt width; RL shapes change every step); false leaves flash/efficient/math
    retain_host_memory: bool | str = "auto"  # keep freed host memory in the process (glibc's malloc: no per-block mappings, heap top trimmed only past 2 GiB; slime_core.runtime.host_memory), so each training step reuses the pages the last one touched instead of page-faulting fresh zeroed ones (CPU SmolLM2 on 2 cores: training 5.3-5.7 -> 4.6-4.8 s a step); resident memory then stays at its peak; process-wide for the process's life. "auto": true when the run trains on the CPU (slime_std.fast_path); false elsewhere, and where the C library is not glibc
    matmul_precision: str = "highest"  # float32 matrix products (torch.set_float32_matmul_precision; CUDA, and oneDNN on CPUs that have bf16 units): highest = true fp32 (FFMA kernels); high = TF32 tensor cores (10-bit mantissa inputs, fp32 accumulation); medium = bf16 inputs. Trainer and engine alike (one process-wide setting); bf16 models are not affected
    async_rollout: bool = False  # one-step-off: generate step k+1 while step k trains (the same as rollout_mode = "one_step_off")
    rollout_mode: str = "sync"  # rollout schedule record (slime-std: sync | one_step_off | fully_async): fully_async: engines generate continuously into a bounded buffer while the trainer consumes it (docs/executors.md); fully_async needs run.max_staleness >= 1
    max_staleness: int = -1  # drop samples generated > N weight versions ago (-1: no bound; fully_async: required, >= 1)
    async_buffer_groups: int = 0  # fully_async: groups held at once, completed in the buffer plus in generation (0: 2 x rollout.batch_size); at least rollout.batch_size
    async_chunk_tokens: int = 0  # fully_async: at most this many new tokens of a sample per engine call, so finished groups leave and new ones join between calls while long samples go on (0: the whole budget in one call)
    fault_tolerance: bool = False  # ray: restart dead engines, re-sync, re-queue their requests

    def __post_init__(self) -> None:
        _need(self.num_rollouts >= 0, "run.num_rollouts", "must be >= 0")
        _need(self.max_staleness >= -1, "run.max_staleness", "must be >= 0, or -1 for no bound")
        # run.rollout_mode names a rollout schedule record (RECORD_KEYS); async_rollout is the
        # older spelling of one of them
        _need(not self.async_rollout or self.rollout_mode in ("sync", "one_step_off"),
              "run.async_rollout", "is one-step-off; it cannot be true with run.rollout_mode = "
              f"{self.rollout_mode!r} (leave it false)")
        _need(self.retain_host_memory in (True, False, "auto"), "run.retain_host_memory",
              f"must be true, false or \"auto\", got {self.retain_host_memory!r}")
        _need(self.matmul_precision in ("highest", "high", "medium"), "run.matmul_precision",
              f"must be highest, high or medium, got {self.matmul_precision!r}")
        _need(self.async_buffer_groups >= 0, "run.async_buffer_groups", "must be >= 0")
        _need(self.async_chunk_tokens >= 0, "run.async_chunk_tokens", "must be >= 0")
        _need(self.save_interval >= 0, "run.save_interval", "must be >= 0")
        _need(self.keep_checkpoints >= 1, "run.keep_checkpoints", "must be >= 1")
        _need(self.executor in ("local", "ray"), "run.executor", "must be 'local' or 'ray'")


@dataclass
class ModelSection:
    path: str = ""  # local directory with config.json + weights (+ tokenizer)
    tokenizer: str = ""  # defaults to path
    init_config: dict[str, Any] = field(default_factory=dict)  # build from a config (tests)
    dtype: str = "auto"  # auto (fp32 on CPU, bf16 on GPU) | float32 | bfloat16 | float16; bf16 weights move only when an update crosses their spacing, so a small model at a low lr learns more per step in float32 (examples/smollm2)
    trust_remote_code: bool = False  # passed to transformers when loading model and tokenizer
    ref_path: str = ""  # the reference model (KL) from its own directory, same architecture and tokenizer (slime's --ref-load); empty: the initial policy

    def __post_init__(self) -> None:
        _need(
            self.dtype in ("auto", "float32", "bfloat16", "float16"),
            "model.dtype", "must be auto, float32, bfloat16 or float16",
        )


@dataclass
class DataSection:
    source: str = "jsonl"  # data source record: jsonl | parquet | reasoning_gym | ...
    path: str = ""  # training prompts (jsonl / parquet)
    eval_path: str = ""  # held-out prompts for evaluation
    input_key: str = "prompt"  # key of the prompt in each data row
    label_key: str = "label"  # key of the label (what the reward checks against)
    metadata_key: str = "metadata"  # key of a row's metadata (kept on its samples)
    tools_key: str = ""  # per-prompt tool list (multi-turn)
    apply_chat_template: bool = False  # prompt -> one user message
    system_prompt: str = ""  # system message placed before it (with apply_chat_template)
    prompt_template: str = "{prompt}"  # applied to the raw prompt text before tokenization
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)  # extra keyword arguments of every apply_chat_template call (prompts, eval, multi-turn, SFT chats), e.g. {enable_thinking = false} for Qwen3; slime's --apply-chat-template-kwargs
    max_prompt_len: int = 0  # train split: drop prompts longer than this many tokens after templating when the data is loaded (the count is logged; 0: keep all); slime's --rollout-max-prompt-len
    shuffle: bool = True  # permute the training prompts every epoch (seeded by seed + epoch)
    skip_bad_rows: bool = False  # train on the good rows of a file with bad ones (their count is logged); false: fail listing them
    task: str = ""  # reasoning_gym: dataset name (basic_arithmetic, chain_sum, ...)
    task_kwargs: dict[str, Any] = field(default_factory=dict)  # reasoning_gym: create_dataset kwargs
    size: int = 10000  # reasoning_gym: number of procedural train tasks
    eval_size: int = 100  # reasoning_gym source: tasks in the eval split
    eval_seed: int = 12345  # reasoning_gym: eval split seed

    def __post_init__(self) -> None:
        _need(self.max_prompt_len >= 0, "data.max_prompt_len", "must be >= 0 (0: no limit)")
        for key in self.chat_template_kwargs:
            _need(key not in CHAT_TEMPLATE_RESERVED, f"data.chat_template_kwargs.{key}",
                  "is set by the framework on every apply_chat_template call "
                  f"(reserved: {', '.join(CHAT_TEMPLATE_RESERVED)}); remove it")


@dataclass
class RolloutSection:
    engine: str = "local"  # rollout engine record
    num_engines: int = 1  # rollout engines; groups round-robin across them
    batch_size: int = 8  # prompts (groups) per training step
    n_samples_per_prompt: int = 8  # samples per prompt (one group)
    temperature: float = 1.0  # sampling temperature; training log-probs use the same (0: greedy)
    top_p: float = 1.0  # nucleus sampling (1: off); log-probs stay those of the full distribution
    top_k: int = -1  # top-k sampling (-1: off)
    max_new_tokens: int = 64  # per sample (whole episode if multi-turn)
    max_context_len: int = 0  # prompt + response at most this many tokens: each engine call of the built-in generate asks for no more than what is left (a prompt that fills it fails the sample, named in the log); training and evaluation; 0: no limit; slime's --rollout-max-context-len
    stop: list[str] = field(default_factory=list)  # stop strings
    stop_token_ids: list[int] = field(default_factory=list)  # stop token ids (besides eos)
    reward: str = "exact"  # reward function record
    reward_key: str = ""  # when the reward is a dict, the key used as the scalar
    reward_kwargs: dict[str, Any] = field(default_factory=dict)  # reward record options
    reward_processes: int | str = "auto"  # worker processes (spawned on first use) scoring samples side by side with a reward record that allows it (extra processes = true: the built-in math, boxed_math, dapo, deepscaler, exact, f1, gpqa); 0: every reward on the rollout's thread, one sample after another; "auto": on an accelerator that captures graphs (GPU: the host's cores are idle while it works) min(8, cores / 2), else 0 (SmolLM2 on an H100: rollout 0.23 -> 0.18 s with 8; slime-std's rewards plugin resolves it, 0 where no plugin did)
    max_abs_reward: float = 1e6  # a reward (or a dict reward's value) beyond +-this fails its sample like NaN does, on every input path (reward functions, the rollout buffer, the agent API); 0: no bound
    dynamic_sampling_filter: str = ""  # filter record (stage dynamic_sampling), e.g. nonzero_std
    over_sampling_batch_size: int = 0  # groups requested per round (0: batch_size)
    max_sampling_rounds: int = 8  # dynamic sampling: rounds before giving up on a full batch
    buffer_filter: str = ""  # filter record choosing which returned groups the buffer serves first
    sample_filter: str = ""  # filter record applied to the kept groups' samples
    partial_rollout: bool = False  # aborted groups continue later
    mask_offpolicy_in_partial_rollout: bool = False  # mask older-weight tokens
    generate_batch_size: int = 0  # requests per engine call (0: everything at once)
    fused_decoder: bool = True  # local engine: Llama/Qwen2/Qwen3/Mistral decode without transformers' modeling code (same logits, far fewer operations); other models always use transformers
    cuda_graphs: bool | str = "auto"  # local engine on CUDA: static KV cache, decode steps replay a CUDA graph; "auto": true where the accelerator record has graph_capture (cuda), resolved at start and written to config.toml
    prefill_graphs: bool = True  # with cuda_graphs and the fused decoder (no effect elsewhere): a prompt shape (distinct prompts x width, at most 16384 tokens) seen before is prefilled by replaying a CUDA graph captured at its second sight (up to 8 shapes a decoder): one launch instead of ~25 operations a layer, which bound a small model's prefill by the host. SmolLM2 example, H100, TF32: rollout 0.128-0.133 -> 0.110-0.111 s, step 0.215-0.226 -> 0.193-0.202 s (bench/h200_smollm2.sh seventeenth); the graphs share one memory pool, which holds the largest captured prefill's activations and keys/values; a capture that runs out of memory leaves that batch shape's prefills eager, with a warning
    compile_decode: bool | str = "auto"  # with cuda_graphs: torch.compile the decode step before capture, and the full-vocabulary sampler; "auto": true when num_rollouts x max_new_tokens >= 25000 (the warm-up pays; slime_std.fast_path)
    compile_autotune: bool = False  # with compile_decode: inductor's max-autotune-no-cudagraphs for the decode step (Triton templates benchmarked against cuBLAS for each product, elementwise work fused into the chosen one; H200 anchor: rollout 0.392 -> 0.443 s, warm-up 21 -> 72 s)
    compile_pdl: bool = True  # with compile_decode: inductor's kernels of the decode step launch with programmatic dependent launch (CUDA compute capability 9 and newer, a torch whose inductor has it; a kernel's start overlaps the end of the one before; H200 anchor rollout 0.413 -> 0.392 s)
    decode_attention: str = "auto"  # with cuda_graphs: one-token attention over the static cache: "triton" (one kernel that skips unwritten columns), "sdpa", or "auto" (triton on CUDA when triton imports); a model whose head dim the kernel cannot take (not a power of two >= 16): "auto" picks sdpa (from the model's config.json), "triton" falls back to sdpa, warned
    sample_kernel: str = "auto"  # local engine: full-vocabulary sampling (temperature > 0, no top-k / top-p) as one Triton pass with in-kernel noise: "triton", "torch" (noise tensor + torch ops), or "auto" (triton on CUDA when triton imports); same distribution, other random numbers
    decode_fuse_rope: bool = True  # with decode_attention = triton and the fused decoder: each layer's rotary embedding and key/value cache write run inside the attention kernel (layers without q/k norms; four kernels a layer fewer; H200 anchor rollout 0.444 -> 0.415 s)
    decode_attention_splits: int = 0  # with decode_attention = triton and the fused decoder: cache-column splits per row and KV head (0: the kernel's heuristic; 1: one program walks the whole row)
    dtype: str = ""  # the rollout engine's weights and arithmetic: "" follows model.dtype; auto | float32 | bfloat16 | float16 as there, the trainer keeping model.dtype (slime's and verl's bf16 rollouts of fp32 training; the local engine, vLLM, SGLang); samples then come from the rounded policy (the trainer's log-probs stay its own; algorithm.is_correction corrects for the difference; CPU SmolLM2 8 x 128 tokens: generate 7.5 -> 5.3 s in bfloat16; an H100 SmolLM2 rollout, bound by launches: no gain)
    dtype_rounding: str = "stochastic"  # local engine, rollout.dtype bfloat16 beside float32 training: how a weight update is rounded: "stochastic" (up with the probability of the dropped fraction, seeded by run.seed and the version: the served weights follow the trainer's in expectation) or "nearest" (updates under bf16's spacing, ~1/256 of a weight, leave the served weights as they were: the SmolLM2 CPU example 0.31 -> 0.35 held-out in 30 steps, stochastic 0.31 -> 0.71, fp32 0.29 -> 0.68; stochastic costs ~1 s a sync for 135M weights on 2 CPU cores); vLLM and SGLang round to nearest
    common_prefix: bool | str = "auto"  # local engine with the fused decoder: the first tokens every prompt of a generate call shares (a chat template's system turn) computed once for all rows, where that saves at least 256 prompt tokens (256 held-out SmolLM2 prompts: 27 of ~39 tokens common); "auto": true on a CPU, where the prefill is bound by its arithmetic, false on an accelerator, where a small model's prefill is bound by the host's launches (replayed from graphs with rollout.prefill_graphs), not its arithmetic; not measured there
    packed_weights: bool | str = "auto"  # local engine on a CPU with the fused decoder: decode-sized products read each weight from a copy in oneDNN's blocked layout, packed at start and after each weight update (the engine's weight memory doubles; SmolLM2 8 x 128 tokens on 2 cores: generate 8.3 -> 5.2 s in fp32, 6.2 -> 4.1 s in bf16; a repack 0.11-0.16 s); "auto": true on a CPU whose oneDNN takes the rollout dtype (float32; bfloat16 with avx512_bf16 / AMX), false elsewhere
    engine_stream: bool = False  # local engine on a GPU under a schedule that generates while the trainer trains (run.async_rollout / rollout_mode other than sync, local executor): generate on a CUDA stream of the engine's own, so the decode overlaps the training on the device (otherwise both queue on the default stream and only their host work overlaps); experimental and off: on an H100 (2026-12-07) the one-step-off 0.5B anchor step took 0.789 s against 0.849 s synchronously (0.674 against 0.707 s with train.compile): the GPU is nearly saturated by the two, and a one-step-off SmolLM2 run stalled after its first evaluation, not yet understood; the engine's stream has a high priority
    async_threads: int = 0  # local engine on the CPU with run.async_rollout (local executor): torch intra-op threads of a generate that overlaps training (0: unchanged); 1 leaves the other cores to the trainer

    def __post_init__(self) -> None:
        _need(self.batch_size >= 1, "rollout.batch_size", "must be >= 1")
        _need(self.n_samples_per_prompt >= 1, "rollout.n_samples_per_prompt", "must be >= 1")
        _need(self.num_engines >= 1, "rollout.num_engines", "must be >= 1")
        _need(self.temperature >= 0, "rollout.temperature", "must be >= 0")
        _need(self.decode_attention in ("auto", "triton", "sdpa"), "rollout.decode_attention",
              "must be auto, triton or sdpa")
        _need(self.sample_kernel in ("auto", "triton", "torch"), "rollout.sample_kernel",
              "must be auto, triton or torch")
        for key in ("cuda_graphs", "compile_decode", "packed_weights", "common_prefix"):
            _need(getattr(self, key) in (True, False, "auto"), f"rollout.{key}",
                  "must be true, false or \"auto\"")
        _need(self.compile_decode is not False or not self.compile_autotune,
              "rollout.compile_autotune",
              "needs rollout.compile_decode = true (it is an option of that compilation)")
        _need(0 < self.top_p <= 1, "rollout.top_p", "must be in (0, 1]")
        _need(self.max_new_tokens >= 1, "rollout.max_new_tokens", "must be >= 1")
        _need(self.max_context_len >= 0, "rollout.max_context_len", "must be >= 0 (0: no limit)")
        _need(self.max_abs_reward >= 0 and self.max_abs_reward == self.max_abs_reward,
              "rollout.max_abs_reward", "must be >= 0 (0: no bound)")
        _need(self.async_threads >= 0, "rollout.async_threads", "must be >= 0")
        _need(self.dtype_rounding in ("stochastic", "nearest"), "rollout.dtype_rounding",
              "must be stochastic or nearest")
        _need(self.dtype in ("", "auto", "float32", "bfloat16", "float16"), "rollout.dtype",
              "must be \"\" (model.dtype), auto, float32, bfloat16 or float16")
        _need(self.reward_processes == "auto" or (
            isinstance(self.reward_processes, int) and not isinstance(self.reward_processes, bool)
            and self.reward_processes >= 0), "rollout.reward_processes",
              "must be an int >= 0 (0: rewards on the rollout's thread) or \"auto\"")
        _need(self.decode_attention_splits >= 0, "rollout.decode_attention_splits",
              "must be >= 0 (0: the kernel's heuristic)")


@dataclass
class EvalSection:
    interval: int = 0  # evaluate every N steps (0: never); also before step 0 and at the end
    n_samples_per_prompt: int = 1  # samples per eval prompt
    temperature: float = 0.0  # greedy by default
    top_p: float = 1.0  # nucleus sampling of evaluations (1: off)
    max_new_tokens: int = 0  # 0: rollout.max_new_tokens
    max_prompt_len: int = 0  # eval split: drop prompts longer than this many tokens after templating when the data is loaded (the count is logged; 0: keep all); slime's --eval-max-prompt-len
    reward: str = ""  # empty: rollout.reward
    max_prompts: int = 0  # 0: all
    top_k: int = -1  # top-k sampling of evaluations (-1: off)
    pass_at: list[int] = field(default_factory=list)  # k of the eval pass@k metrics (unbiased estimator over each prompt's samples)
    datasets: list[dict[str, Any]] = field(default_factory=list)  # [[eval.datasets]]: name, path or source/task, reward, n_samples, temperature, top_p, top_k, max_new_tokens, stop, max_prompts, generate; unset keys from [eval] (docs/evaluation.md)

    def __post_init__(self) -> None:
        from slime_core.config.eval_datasets import parse_datasets

        _need(self.top_k == -1 or self.top_k >= 1, "eval.top_k", "must be -1 (off) or >= 1")
        _need(self.max_prompt_len >= 0, "eval.max_prompt_len", "must be >= 0 (0: no limit)")
        _need(all(k >= 1 for k in self.pass_at), "eval.pass_at", "every k must be >= 1")
        parse_datasets(self.datasets)


@dataclass
class TrainSection:
    backend: str = "torch"  # trainer backend record
    loss: str = "policy"  # policy (RL) | sft
    lr: float = 1e-6  # peak learning rate (AdamW)
    min_lr: float = 0.0  # floor of the decay
    lr_decay: str = "constant"  # constant | linear | cosine
    warmup_steps: int = 0  # linear warm-up steps
    weight_decay: float = 0.0  # AdamW weight decay
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.999])  # AdamW betas
    adam_eps: float = 1e-8  # AdamW epsilon
    master_weights: bool = True  # a bf16/fp16 model: AdamW steps fp32 copies of the weights and writes them back (stepping bf16 weights rounds lr-1e-6 updates away); no effect on an fp32 model
    grad_clip: float = 1.0  # gradient-norm clip (0: off)
    micro_batch_tokens: int = 16384  # token budget of one micro-batch: rows x its longest row (right-padded, rows sorted by length, even row counts); a small model's GPU step is bound by kernel launches, so fewer micro-batches pay (SmolLM2 on an H100: training 0.45 -> 0.27 s from 8192; the 0.5b anchor 0.76 -> 0.62 s), as verl's ppo_max_token_len_per_gpu default; larger budgets trade memory for speed (0.5b anchor, H100, 49152: step 0.725 -> 0.691 s, peak memory 22.9 -> 48.9 GB)
    num_steps_per_rollout: int = 1  # optimizer steps per rollout (mini-batches)
    max_consecutive_skipped_steps: int = 3  # a step with a non-finite reward, advantage, loss or gradient norm is skipped (no optimizer step, no weight sync; train/skipped_steps); this many skipped steps in a row stop the run with an error naming the first
    num_ranks: int = 1  # data-parallel trainer ranks
    gradient_checkpointing: bool = False  # recompute activations in the backward pass (less memory)
    compile: bool | str = "auto"  # torch.compile the policy forward (dynamic shapes; with cuda_graphs = true, each graph bucket's decoder at its fixed shape, then captured); "auto": true with graph capture (cuda) from 1000 optimizer steps (minutes of warm-up for ~0.4 s a step; slime_std.fast_path), and then cuda_graphs' auto stays off (0.5b anchor, H100: compile alone trained in 0.299 s after a 197 s first step, compiled graphs 0.325 s after 65-90 s, graphs alone 0.421 s)
    fused_head: bool = True  # Llama/Qwen2/Qwen3/Mistral and the MoE Qwen3-MoE/Qwen2-MoE/OLMoE/Mixtral: the LM head and log-softmax only at response positions, chunked in fp32 (same values, no full-vocabulary logits of every position); other models use their own forward
    fused_norm: bool = True  # the torch backend's Llama-family RMSNorms (Llama, Qwen2, Qwen3, Mistral, their MoE forms) as one fused F.rms_norm call, as the local engine computes them (kernel launches bound a small model's GPU training step: SmolLM2 on an H100, training 0.46 -> 0.42 s a step, bench/h200_smollm2.sh ab); the same values within 1e-5; false: transformers' own forward
    cuda_graphs: bool | str = "auto"  # the training forward's decoder and its backward replayed from CUDA graphs, captured once per shape bucket (rows and tokens to multiples of 16, up to 8 buckets, fewer where their gradient buffers would pass 1/8 of the device's memory; a capture that leaves less free memory than the optimizer's next step allocates ends them, eager from then on; slime_core.trainkit.graphed_decoder): one launch each way instead of thousands; applies where the fused head does, to dense models (others train eagerly, said once); with shared_prefix the two passes where they skip a quarter of the token rows or more (their attention masks built whole: SDPA or eager attention; SmolLM2 example, H100, TF32: training 0.105 -> 0.075 s), else the one-pass forward; the linear layers add their weight gradients into .grad in the product; with compile = true each shape's decoder is compiled at that fixed shape before its capture (inductor's fused kernels replayed; the one-pass forward only); not combined with gradient_checkpointing, routing_replay or router losses. "auto": true on a graph-capturing accelerator with tensor-core products (bf16/fp16 weights or run.matmul_precision high/medium), none of those and compile off (0.5b anchor bf16 on an H100: training 0.64 -> 0.46 s; SmolLM2 fp32 without TF32: no gain; slime_std.fast_path)
    shared_prefix: bool = True  # with fused_head: samples with the same prompt (a group) compute it once per micro-batch, responses attend to its cached keys/values (same values); not combined with compile or gradient_checkpointing
    head_kernel: str = "auto"  # with fused_head: log-softmax statistics and gradient as "triton" kernels (one pass over the logits each way), "torch" (chunked fp32 functions), or "auto" (triton on CUDA when triton imports)
    ref_update_interval: int = 0  # every N steps the reference model takes the policy's weights (slime's --ref-update-interval); 0: the reference stays fixed
    routing_replay: str = "off"  # mixture-of-experts models: "rollout" routes the training forward of every sampled token to the experts the rollout engine chose (R3; gate weights recomputed from the trainer router's logits on those experts, slime_core.moe.routing); "off": the trainer's router picks its own. Needs a model with experts, an engine that records routing (local, sglang, vllm) and a backend that replays it (torch, megatron)
    moe_aux_loss_coef: float = 0.0  # mixture-of-experts models: weight of the router load-balancing loss added to the policy loss (transformers' load_balancing_loss_func over the real tokens: num_experts x sum f_i P_i; megatron: its "aux_loss", normalised per layer, docs/moe.md); logged as train/moe_aux_loss. 0: off
    moe_z_loss_coef: float = 0.0  # mixture-of-experts models: weight of the router z-loss (ST-MoE: mean over real tokens and MoE layers of logsumexp(router logits)^2); logged as train/moe_z_loss. 0: off
    keep_old_actor: bool = False  # old_log_probs (the PPO ratio's denominator) from the weights that generated each sample, kept in the trainer, not the current policy (slime's --keep-old-actor; matters with run.async_rollout or weights.update_interval > 1)

    def __post_init__(self) -> None:
        _need(self.lr >= 0, "train.lr", "must be >= 0")
        _need(self.ref_update_interval >= 0, "train.ref_update_interval",
              "must be >= 0 (0: the reference model stays fixed)")
        _need(self.lr_decay in ("constant", "linear", "cosine"), "train.lr_decay",
              "must be constant, linear or cosine")
        _need(self.loss in ("policy", "sft"), "train.loss", "must be policy or sft")
        _need(self.micro_batch_tokens >= 1, "train.micro_batch_tokens", "must be >= 1")
        _need(self.compile in (True, False, "auto"), "train.compile",
              "must be true, false or \"auto\"")
        _need(self.cuda_graphs in (True, False, "auto"), "train.cuda_graphs",
              "must be true, false or \"auto\"")
        _need(self.head_kernel in ("auto", "triton", "torch"), "train.head_kernel",
              "must be auto, triton or torch")
        _need(self.num_steps_per_rollout >= 1, "train.num_steps_per_rollout", "must be >= 1")
        _need(self.max_consecutive_skipped_steps >= 1, "train.max_consecutive_skipped_steps",
              "must be >= 1")
        _need(self.num_ranks >= 1, "train.num_ranks", "must be >= 1")
        _need(self.routing_replay in ("off", "rollout"), "train.routing_replay",
              f"{self.routing_replay!r} is not one of off, rollout")
        _need(self.moe_aux_loss_coef >= 0, "train.moe_aux_loss_coef", "must be >= 0 (0: off)")
        _need(self.moe_z_loss_coef >= 0, "train.moe_z_loss_coef", "must be >= 0 (0: off)")
        _need(len(self.adam_betas) == 2, "train.adam_betas", "must have two values")


@dataclass
class AlgorithmSection:
    """The keys the core's loss composition reads (slime_core.trainkit.compose): which records
    compute advantages, the policy loss, its reduction, KL and the mismatch correction, and
    their coefficients. The records and their own hyper-parameters (clip ranges, discounts,
    clamps) come with the algorithm plugins, which extend this section (``slime_grpo``,
    ``slime_ppo``; docs/config.md lists every key with its plugin) and name its default
    records."""

    numerics: str = "slime"  # conventions preset: slime (THUDM/slime's, the default) | verl; sets the defaults of the keys marked 'preset' (docs/algorithms.md); a key set explicitly wins
    advantage_estimator: str = ""  # advantage estimator record (the algorithm plugin names the default: slime_grpo's grpo)
    policy_loss: str = ""  # policy loss record (default from the algorithm plugin: slime_grpo's ppo)
    loss_reducer: str = ""  # loss aggregation record (preset; slime_grpo: seq_mean_token_mean, verl: token_mean)
    kl_estimator: str = ""  # KL estimator record: k1, k2, k3 or low_var_kl (docs/algorithms.md); preset (slime_grpo: k1, verl: low_var_kl)
    use_kl_loss: bool = False  # add kl_loss_coef x KL(policy, reference) to the loss
    kl_loss_coef: float = 0.0  # weight of that KL term
    kl_in_reward_coef: float = 0.0  # KL penalty placed in the reward (PPO, REINFORCE++)
    entropy_coef: float = 0.0  # entropy bonus weight (0: entropy is only logged)
    whiten_advantages: bool = False  # whiten advantages over the batch's loss-masked tokens (every estimator, slime's --normalize-advantages)
    is_correction: str = ""  # mismatch correction record: tis, icepop, ... (empty: off)
    is_kwargs: dict[str, float] = field(default_factory=dict)  # bounds of the is_correction record (docs/algorithms.md)

    def __post_init__(self) -> None:
        _need(self.numerics in NUMERICS, "algorithm.numerics",
              f"{self.numerics!r} is not one of {', '.join(NUMERICS)}")


@dataclass
class WeightsSection:
    transport: str = "inprocess"  # weight transport record
    update_interval: int = 1  # sync weights to the engines every N steps
    bucket_mb: int = 512  # ray / broadcast transports: tensors are sent in buckets of this size
    dir: str = ""  # disk transport directory (default run_dir/weights)
    verify: bool = False  # after each sync, check every engine's weights equal the trainer's
    # disk transport: after the first full version, write only what changed since the engines'
    # version, checksummed ("off" | "xor" | "overwrite"; slime_std.weights.delta); engines
    # that load files themselves (vLLM, SGLang) still get full versions
    delta: str = "off"
    delta_full_interval: int = 0  # with weights.delta: a full version every N syncs (0: only the first and resyncs)

    def __post_init__(self) -> None:
        _need(self.update_interval >= 1, "weights.update_interval", "must be >= 1")
        _need(self.bucket_mb >= 1, "weights.bucket_mb", "must be >= 1")
        _need(self.delta in ("off", "xor", "overwrite"), "weights.delta",
              f"must be 'off', 'xor' or 'overwrite', not {self.delta!r}")
        _need(self.delta == "off" or self.transport == "disk", "weights.delta",
              f"deltas go over the disk transport only; set weights.transport = 'disk' "
              f"(it is {self.transport!r}) or weights.delta = 'off'")
        _need(self.delta_full_interval >= 0, "weights.delta_full_interval", "must be >= 0")


@dataclass
class RaySection:
    """Placement and services of the ``ray`` executor (see ``slime_core.executors``)."""

    colocate: bool = False  # trainer rank i and engine(s) share bundle i; engines sleep while training
    num_cpus_per_actor: float = 1.0  # CPUs of each trainer rank / engine actor
    num_devices_per_actor: float = 1.0  # accelerator units (the record's ray_resource) per actor
    rollout_manager_cpus: float = 1.0  # CPUs of the RolloutManager actor
    placement_strategy: str = "PACK"  # PACK | SPREAD | STRICT_PACK | STRICT_SPREAD
    num_cpus: int = 0  # logical CPUs of a Ray instance started here (0: max(cores, needed))
    # custom resources of a Ray instance started here, for a record whose ray_resource Ray does
    # not detect (e.g. {FAKEDEV = 4}); a cluster declares its own (ray start --resources)
    resources: dict[str, float] = field(default_factory=dict)
    # several nodes: custom resources added to the bundles of one role, so its actors land only
    # on nodes that declare them (ray start --resources '{"slime_trainer": 8}')
    trainer_resources: dict[str, float] = field(default_factory=dict)  # in each trainer rank's bundle, e.g. {slime_trainer = 0.01}; a colocated bundle carries these and engine_resources
    engine_resources: dict[str, float] = field(default_factory=dict)  # in each engine's bundle, e.g. {slime_engine = 0.01}
    manager_resources: dict[str, float] = field(default_factory=dict)  # in the rollout manager's bundle (keep it off nodes that may be lost: it holds the data source)
    # runtime environment of the run's Ray job (ray.init(runtime_env=...)): e.g.
    # {py_modules = ["./my_plugins"]} ships plugin modules to every node's workers
    runtime_env: dict[str, Any] = field(default_factory=dict)
    startup_timeout_s: float = 300.0  # placement group and actor start-up limit
    collective_timeout_s: float = 300.0  # torch.distributed operations (DP, broadcast)
    dist_host: str = ""  # torch.distributed stores: "" = 127.0.0.1; "node" = rank 0's node IP
    health_check_interval_s: float = 2.0  # fault_tolerance: engine health probe period
    health_check_timeout_s: float = 60.0  # a probe slower than this restarts the engine
    max_engine_restarts: int = 3  # per engine, over the run

    def __post_init__(self) -> None:
        _need(self.placement_strategy in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"),
              "ray.placement_strategy", "must be PACK, SPREAD, STRICT_PACK or STRICT_SPREAD")
        _need(self.num_cpus_per_actor >= 0, "ray.num_cpus_per_actor", "must be >= 0")
        _need(self.num_devices_per_actor > 0, "ray.num_devices_per_actor", "must be > 0")
        _need(self.rollout_manager_cpus >= 0, "ray.rollout_manager_cpus", "must be >= 0")
        _need(self.num_cpus >= 0, "ray.num_cpus", "must be >= 0")
        for key, amount in self.resources.items():
            _need(key not in ("CPU", "GPU"), f"ray.resources.{key}",
                  "CPU and GPU are not custom resources (ray.num_cpus; Ray detects GPUs)")
            _need(amount > 0, f"ray.resources.{key}", "must be > 0")
        for role in ("trainer", "engine", "manager"):
            for key, amount in getattr(self, f"{role}_resources").items():
                _need(key not in ("CPU", "GPU"), f"ray.{role}_resources.{key}",
                      "CPU and GPU are device amounts (ray.num_cpus_per_actor, "
                      "ray.num_devices_per_actor); name a custom resource the nodes declare")
                _need(amount > 0, f"ray.{role}_resources.{key}", "must be > 0")
        _need(self.max_engine_restarts >= 0, "ray.max_engine_restarts", "must be >= 0")
        _need(self.health_check_interval_s > 0, "ray.health_check_interval_s", "must be > 0")


@dataclass
class OpdSection:
    """On-policy distillation (slime's --use-opd): see :mod:`slime_core.algo.opd`."""

    enabled: bool = False  # add -kl_coef x (log p_student - log p_teacher) to every response token's advantage
    mode: str = "trainer"  # trainer: a frozen teacher in the trainer (slime's megatron mode) | engine: a teacher engine scores the token ids (slime's sglang mode)
    teacher_path: str = ""  # local model directory of the teacher (same tokenizer/vocabulary as the student)
    kl_coef: float = 1.0  # weight of the reverse-KL term in the advantage
    task_reward: bool = True  # false: rewards are zeroed before the advantage estimator (pure distillation)
    engine: str = ""  # engine mode: rollout engine record of the teacher (empty: rollout.engine)

    def __post_init__(self) -> None:
        _need(self.mode in ("trainer", "engine"), "opd.mode", "must be trainer or engine")
        _need(not self.enabled or bool(self.teacher_path), "opd.teacher_path",
              "is required when opd.enabled (a local model directory)")
        _need(self.kl_coef >= 0, "opd.kl_coef", "must be >= 0")


@dataclass
class DebugSection:
    save_rollouts: str = ""  # directory to dump every step's samples to
    replay_rollouts: str = ""  # train from dumps instead of generating


SECTIONS = (
    ("run", RunSection, "run identity, steps, executor, checkpoints, loggers"),
    ("model", ModelSection, "which model to train"),
    ("data", DataSection, "prompt source and keys"),
    ("rollout", RolloutSection, "engine, sampling, reward, filters"),
    ("eval", EvalSection, "held-out evaluation"),
    ("train", TrainSection, "trainer backend and optimisation"),
    ("algorithm", AlgorithmSection, "advantages, losses, KL, corrections"),
    ("weights", WeightsSection, "weight sync from trainer to engines"),
    ("ray", RaySection, "placement and services of the ray executor"),
    ("opd", OpdSection, "on-policy distillation from a teacher model"),
    ("debug", DebugSection, "rollout dumps and replay"),
)


# Keys whose values name records: resolved against the registries with the config
# (slime_core.config.names), so a typo fails before any model loads.
RECORD_KEYS: dict[str, dict[str, RecordKey]] = {
    "run": {
        "accelerator": RecordKey(AcceleratorRecord, special=("auto",)),
        "loggers": RecordKey(LoggerRecord),
        "rollout_mode": RecordKey(RolloutScheduleRecord),
    },
    "data": {"source": RecordKey(DataSourceRecord)},
    "rollout": {
        "engine": RecordKey(RolloutEngineRecord),
        "reward": RecordKey(RewardFunctionRecord),
        "dynamic_sampling_filter": RecordKey(FilterRecord, optional=True,
                                             stage="dynamic_sampling"),
        "buffer_filter": RecordKey(FilterRecord, optional=True, stage="buffer"),
        "sample_filter": RecordKey(FilterRecord, optional=True, stage="sample"),
    },
    "eval": {"reward": RecordKey(RewardFunctionRecord, optional=True)},
    "train": {"backend": RecordKey(TrainerBackendRecord)},
    "algorithm": {
        "advantage_estimator": RecordKey(AdvantageEstimatorRecord),
        "policy_loss": RecordKey(PolicyLossRecord),
        "loss_reducer": RecordKey(LossReducerRecord),
        "kl_estimator": RecordKey(KLEstimatorRecord),
        "is_correction": RecordKey(ISCorrectionRecord, optional=True),
    },
    "weights": {"transport": RecordKey(WeightTransportRecord)},
    "opd": {"engine": RecordKey(RolloutEngineRecord, optional=True)},
}
