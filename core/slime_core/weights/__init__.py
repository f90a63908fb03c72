"""Weight transports: how a trainer's new weights reach the rollout engines.

Each transport is a class with ``send(weights, version, engines) -> stats`` (the
``WeightTransport`` protocol), built by its record's factory (registered by the built-in
plugin ``core_weights``, :mod:`slime_core.builtin.weights_plugin`), plus the function its
engine side runs in the engine's process:

* :mod:`.inprocess` -- engines in the trainer's process copy its tensors;
* :mod:`.disk` -- a versioned safetensors directory; the engine side fires
  ``slime_before_weights_read`` and loads it; with ``weights.delta`` only what changed
  (:mod:`.delta`: encodings, manifest, checksums), a refused delta resynced in full;
* :mod:`.tensors` -- helpers on name -> tensor mappings (``untie`` for safetensors);
* :mod:`.ray_store` -- the ``ray`` transport: buckets in Ray's object store;
* :mod:`.broadcast` -- a torch.distributed broadcast group of trainer rank 0 and the engines;
* :mod:`.buckets` -- what they share: buckets of ``weights.bucket_mb``, byte counts, engine
  actor handles.

Under the ray executor the engine side runs in the engine actor
(:class:`~slime_core.executors.ray_workers.EngineWorker` calls these functions).
"""
