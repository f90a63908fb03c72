"""slime-ascend-npu: the ``npu`` accelerator record for Huawei Ascend."""

__version__ = "0.1.0"
