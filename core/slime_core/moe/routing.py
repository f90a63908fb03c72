"""Mixture-of-experts routers of transformers models: find them, record them, replay them.

Supported routers (transformers 5.x): ``Qwen3MoeTopKRouter``, ``Qwen2MoeTopKRouter``,
``OlmoeTopKRouter`` and ``MixtralTopKRouter``. Each is called once per MoE layer and forward
with the flattened hidden states ``[N, d]`` (``N = batch x sequence``, row-major) and returns
``(router_logits [N, E], gate weights [N, k], expert ids [N, k])``; the experts module then
mixes the ``k`` chosen experts' outputs with the gate weights.

:class:`RoutingControl` puts a forward hook on every router (parameter names, state dicts
and weight sync are unchanged; a deep copy of the model keeps the hooks) and works in one of
three modes:

* off: the router's own forward, untouched;
* record (rollout engine): the router's own choice, and its ids kept per call
  (:meth:`RoutingControl.take`; inside a replay, the ids the forward used);
* replay (trainer): the ids come from the recorded rollout (R3, rollout routing replay). The
  gate weights are recomputed from this forward's router logits **by the model's own gating
  rule applied to the replayed ids**: ``softmax(logits over all E experts)`` gathered at the
  replayed ids, then divided by their sum where the model normalises its top-k
  (``norm_topk_prob`` of Qwen3-MoE / Qwen2-MoE / OLMoE; always for Mixtral). With
  normalisation this is the softmax over the chosen experts' logits (slime's and verl's R3:
  ``scores.gather(1, replayed_ids)`` on the router's own scores); without it (OLMoE's default)
  the weights are the full-softmax probabilities of the chosen experts. Gradients reach the
  router weights through those logits. When the replayed ids equal the router's own, the
  output equals the unreplayed forward bit for bit. A replayed id of ``-1`` in every slot of
  a row means "no record": that row keeps the router's own choice (padding, and the last
  token of a sample, which no rollout forward read).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from slime_hookspecs import RoutedExperts

# router class -> does the model renormalise its top-k gate weights? (None: its
# ``norm_topk_prob`` attribute says)
ROUTERS: dict[str, bool | None] = {
    "Qwen3MoeTopKRouter": None,
    "Qwen2MoeTopKRouter": None,
    "OlmoeTopKRouter": None,
    "MixtralTopKRouter": True,
}


@dataclass(frozen=True)
class MoeShape:
    """What a routing record of this model holds per position."""

    layers: int  # MoE layers (dense ones are not counted)
    top_k: int  # experts per token
    num_experts: int  # experts per layer

    @property
    def dtype(self) -> torch.dtype:
        """The compact id type of a record: uint8 up to 256 experts, else int16."""
        return torch.uint8 if self.num_experts <= 256 else torch.int16


def config_moe_shape(hf_config: Any) -> MoeShape | None:
    """The MoE shape a transformers config describes, without building the model (None for a
    dense model). Counts the MoE layers as Qwen3-MoE / Qwen2-MoE do (``mlp_only_layers``,
    ``decoder_sparse_step``); OLMoE and Mixtral have experts in every layer."""
    experts = getattr(hf_config, "num_experts", None) or getattr(hf_config, "num_local_experts", None)
    top_k = getattr(hf_config, "num_experts_per_tok", None)
    if not experts or not top_k:
        return None
    n = int(hf_config.num_hidden_layers)
    dense = set(getattr(hf_config, "mlp_only_layers", None) or [])
    step = int(getattr(hf_config, "decoder_sparse_step", 1) or 1)
    layers = sum(1 for i in range(n) if i not in dense and (i + 1) % step == 0)
    return MoeShape(layers=layers, top_k=int(top_k), num_experts=int(experts)) if layers else None


def find_routers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's MoE routers in layer order (empty for a dense model). A router-like module
    of a class not in :data:`ROUTERS` fails naming it: its gating rule is unknown, so its
    routing could be neither recorded nor replayed faithfully."""
    out = []
    for name, module in model.named_modules():
        cls = type(module).__name__
        if cls in ROUTERS:
            out.append(module)
        elif cls.lower().endswith("topkrouter") or (cls.endswith("Router")
                                                   and hasattr(module, "top_k")):
            raise ValueError(f"routing replay: {name} is a {cls}, whose gating rule is not "
                             f"known here (supported: {', '.join(sorted(ROUTERS))})")
    return out


def moe_shape(model: torch.nn.Module) -> MoeShape | None:
    """The MoE shape of a built model (None when it has no supported router)."""
    routers = find_routers(model)
    if not routers:
        return None
    first: Any = routers[0]
    return MoeShape(layers=len(routers), top_k=int(first.top_k),
                    num_experts=int(first.num_experts))


def _normalises(router: torch.nn.Module) -> bool:
    fixed = ROUTERS[type(router).__name__]
    return bool(router.norm_topk_prob) if fixed is None else fixed


def replay_gates(router: torch.nn.Module, logits: torch.Tensor, ids: torch.Tensor,
                 out_dtype: torch.dtype) -> torch.Tensor:
    """Gate weights ``[N, k]`` of the experts ``ids`` under ``router``'s gating rule (see the
    module docstring): full softmax over the logits in fp32, gathered at ``ids``, renormalised
    where the model renormalises, in ``out_dtype`` (the router's own output dtype)."""
    probs = torch.softmax(logits, dim=-1, dtype=torch.float)
    top = probs.gather(-1, ids)
    if _normalises(router):
        top = top / top.sum(dim=-1, keepdim=True)
    return top.to(out_dtype)


class RoutingControl:
    """Record or replay the routing of every MoE layer of ``model``; see the module docstring.

    ``RoutingControl(model)`` wraps the routers (raises ``ValueError`` for a model without
    any). Not thread-safe: one forward at a time per model, as the engine's lock and the
    trainer's loop guarantee.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.routers = find_routers(model)
        if not self.routers:
            raise ValueError(f"routing replay: {type(model).__name__} has no mixture-of-experts "
                             f"router (supported: {', '.join(sorted(ROUTERS))})")
        first: Any = self.routers[0]
        self.shape = MoeShape(layers=len(self.routers), top_k=int(first.top_k),
                              num_experts=int(first.num_experts))
        self._recording = False
        self._recorded: list[list[torch.Tensor]] = [[] for _ in self.routers]
        self._replay: list[torch.Tensor] | None = None
        #: replayed (row, slot) ids the router itself would also have chosen, and all replayed
        #: ones, since the last :meth:`agreement` (how far routing drifted since the rollout)
        self._agree: list[torch.Tensor] = []
        for layer, router in enumerate(self.routers):
            router.register_forward_hook(self._hook(layer))

    def _hook(self, layer: int) -> Any:
        """The forward hook of MoE layer ``layer``'s router: it reads the router's own output
        and replaces it when replaying. A hook, not a replaced ``forward``: a deep copy of the
        model (the trainer's old-actor snapshot) copies the hook with its module, so the copy
        computes with its own weights under the same record / replay state."""

        def hook(router: torch.nn.Module, args: Any,
                 output: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> Any:
            logits, gates, ids = output
            if self._replay is None:
                if self._recording:
                    self._recorded[layer].append(ids.detach())
                return None  # the router's own output
            want = self._replay[layer]
            if want.shape != ids.shape:
                raise ValueError(f"routing replay: MoE layer {layer} routes {tuple(ids.shape)} "
                                 f"(tokens, top_k) but the replay holds {tuple(want.shape)}")
            known = (want >= 0).all(dim=-1, keepdim=True)
            chosen = torch.where(known, want.to(ids.dtype), ids)
            with torch.no_grad():
                same = (chosen.unsqueeze(-1) == ids.unsqueeze(-2)).any(-1) & known
                # kept on the device: no host sync per layer
                self._agree.append(torch.stack([same.sum(), known.sum() * ids.shape[-1]]))
            if self._recording:  # the ids this forward used (a test of the replay)
                self._recorded[layer].append(chosen.detach())
            return logits, replay_gates(router, logits, chosen, gates.dtype), chosen

        return hook

    # -- record (engine) ---------------------------------------------------------------------
    @contextmanager
    def recording(self) -> Iterator[None]:
        """Keep the ids every router picks inside the block (read them with :meth:`take`)."""
        self._recording = True
        try:
            yield
        finally:
            self._recording = False
            self._recorded = [[] for _ in self.routers]

    def take(self) -> torch.Tensor:
        """The ids of the one forward recorded since the last call, ``[N, layers, top_k]``
        (N: the tokens of that forward, row-major over batch and sequence)."""
        if any(len(r) != 1 for r in self._recorded):
            raise RuntimeError(f"routing record: expected one router call per MoE layer since "
                               f"the last take, got {[len(r) for r in self._recorded]}")
        out = torch.stack([r[0] for r in self._recorded], dim=1)
        self._recorded = [[] for _ in self.routers]
        return out

    # -- replay (trainer) --------------------------------------------------------------------
    @contextmanager
    def replaying(self, ids: torch.Tensor) -> Iterator[None]:
        """Route the forwards inside the block to ``ids`` ``[N, layers, top_k]`` (long; a row
        of -1 keeps the router's own choice), N as :meth:`take` counts tokens."""
        if ids.dim() != 3 or ids.shape[1:] != (self.shape.layers, self.shape.top_k):
            raise ValueError(f"routing replay: ids of shape {tuple(ids.shape)}, expected "
                             f"(tokens, {self.shape.layers}, {self.shape.top_k})")
        self._replay = [ids[:, layer] for layer in range(self.shape.layers)]
        try:
            yield
        finally:
            self._replay = None

    def agreement(self) -> float | None:
        """Fraction of replayed expert choices the routers would have made themselves since
        the last call (None when nothing was replayed); resets the count."""
        if not self._agree:
            return None
        same, total = torch.stack([a.cpu() for a in self._agree]).sum(0).tolist()
        self._agree = []
        return same / total if total else None


# -- records (slime_hookspecs.RoutedExperts) <-> tensors -----------------------------------------
def to_record(ids: torch.Tensor, shape: MoeShape) -> RoutedExperts:
    """The compact record of ``ids`` ``[positions, layers, top_k]``."""
    arr = ids.to(device="cpu", dtype=shape.dtype).contiguous()
    data = arr.numpy().astype("<i2" if shape.dtype == torch.int16 else "u1", copy=False).tobytes()
    return RoutedExperts(shape=tuple(arr.shape), dtype=str(shape.dtype).removeprefix("torch."),  # type: ignore[arg-type]
                         data=data)


def from_record(record: RoutedExperts) -> torch.Tensor:
    """The ids of ``record`` as a ``[positions, layers, top_k]`` tensor of its own dtype."""
    dtype = torch.uint8 if record.dtype == "uint8" else torch.int16
    flat = torch.frombuffer(bytearray(record.data), dtype=dtype) if record.data else \
        torch.zeros(0, dtype=dtype)
    return flat.view(record.shape)


def check_routes(ids: Any, shape: MoeShape, positions: int, where: str) -> None:
    """Refuse a routing record that does not fit the model: ``ids`` must be an integer tensor
    ``[positions, shape.layers, shape.top_k]`` of expert ids in ``[0, num_experts)``, without a
    repeated expert in a row. ``where`` names the sample and field in the error."""
    if not isinstance(ids, torch.Tensor) or ids.is_floating_point() or ids.is_complex():
        raise ValueError(f"{where}: expected an integer tensor of expert ids, got "
                         f"{type(ids).__name__}{'' if not isinstance(ids, torch.Tensor) else ' ' + str(ids.dtype)}")
    want = (positions, shape.layers, shape.top_k)
    if tuple(ids.shape) != want:
        raise ValueError(f"{where}: shape {tuple(ids.shape)}, expected (len(tokens) - 1, MoE "
                         f"layers, top_k) = {want}")
    if ids.numel():
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= shape.num_experts:
            raise ValueError(f"{where}: expert ids span [{low}, {high}], the model has experts "
                             f"0..{shape.num_experts - 1}")
        ordered = ids.long().sort(dim=-1).values
        if shape.top_k > 1 and bool((ordered[..., 1:] == ordered[..., :-1]).any()):
            raise ValueError(f"{where}: a position routes twice to the same expert of a layer")


def check_batch_routes(batch: Any, shape: MoeShape) -> None:
    """Refuse a training batch's routing records that do not fit the policy (``shape``), each
    checked by :func:`check_routes` with an error naming the sample and field; a batch with
    samples but no ``routed_experts`` at all is refused (``train.routing_replay = "rollout"``
    needs them). A sample whose record is ``None`` (masked out) is routed by the trainer."""
    if batch.routed_experts is None:
        if len(batch):
            raise ValueError("train.routing_replay = 'rollout' but the batch has no "
                             "routed_experts (a custom slime_convert_samples_to_train_data "
                             "must set TrainBatch.routed_experts)")
        return
    for i, ids in enumerate(batch.routed_experts):
        if ids is None:
            continue
        where = (f"sample group={batch.group_indices[i] if batch.group_indices else '?'} "
                 f"index={batch.sample_indices[i] if batch.sample_indices else i}: "
                 "TrainBatch.routed_experts")
        check_routes(ids, shape, len(batch.tokens[i]) - 1, where)


def record_from_int32(raw: bytes, positions: int, shape: MoeShape, where: str) -> RoutedExperts:
    """The compact record of expert ids an external engine returned as little-endian int32
    (SGLang's ``meta_info.routed_experts``, base64-decoded): ``positions x layers x top_k``
    ids, checked as :func:`check_routes` checks them; an array of the wrong size or with ids
    out of range fails naming ``where``."""
    want = positions * shape.layers * shape.top_k
    if len(raw) != 4 * want:
        raise ValueError(f"{where}: {len(raw)} bytes of int32 expert ids, expected {4 * want} "
                         f"(len(tokens) - 1 = {positions} positions x {shape.layers} MoE layers "
                         f"x top-{shape.top_k})")
    ids = torch.frombuffer(bytearray(raw), dtype=torch.int32) if raw else \
        torch.zeros(0, dtype=torch.int32)
    ids = ids.view(positions, shape.layers, shape.top_k)
    check_routes(ids, shape, positions, where)
    return to_record(ids, shape)
