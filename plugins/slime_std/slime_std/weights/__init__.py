"""Default plugin ``core_weights`` (:mod:`.plugin`): how a trainer's new weights reach the
rollout engines.

Each transport is a class with ``send(weights, version, engines) -> stats`` (the
``WeightTransport`` protocol, trainer side), built by its record's factory, plus, where it
needs one, an engine side (the record's ``engine_side``) that runs in the engine's process
and that the trainer side calls with ``slime_core.api.call_engine_side`` (under the ray
executor: the engine actor's generic entry ``weight_transport_call``):

* :mod:`.inprocess` -- engines in the trainer's process copy its tensors;
* :mod:`.disk` -- a versioned safetensors directory; the engine side fires
  ``slime_before_weights_read`` and loads it; with ``weights.delta`` only what changed
  (:mod:`.delta`: encodings, manifest, checksums), a refused delta resynced in full;
* :mod:`.ray_store` -- the ``ray`` transport: buckets in Ray's object store;
* :mod:`.broadcast` -- a torch.distributed broadcast group of trainer rank 0 and the engines.

What they share (buckets, byte counts, engine actor handles) is core machinery, exported by
``slime_core.api``.
"""
