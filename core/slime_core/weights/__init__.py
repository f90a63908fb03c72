"""Weight-transport machinery: what the transports share, not the transports themselves.

The transports (``inprocess``, ``disk``, ``ray``, ``broadcast``) are records of the default
plugin ``core_weights`` (``slime_std.weights``); the core knows none of them by name.

* :mod:`.engine_side` -- a transport's engine side, built from its record in the engine's
  process (:func:`~.engine_side.call_engine_side`; the engine actor's one generic entry
  ``weight_transport_call`` under the ray executor);
* :mod:`.buckets` -- buckets of ``weights.bucket_mb``, their flat-byte wire format, byte
  counts, the Ray actor handles of engines;
* :mod:`.tensors` -- helpers on name -> tensor mappings (``untie`` for safetensors).
"""
