"""onnxruntime's LoRA adapters (``LoraAdapter``, ``AdapterFormat``): not supported yet; each
call says so with onnxruntime's error type."""

from __future__ import annotations

from ._errors import NotImplemented as _NotImplemented


def _unsupported(what: str):
    raise _NotImplemented(f"{what}: nnplug does not read or write .onnx_adapter files yet; "
                          f"feed the adapter's parameters as inputs (or apply them to the "
                          f"model's initializers with SessionOptions.add_initializer)")


class LoraAdapter:
    def Load(self, adapter_path: str) -> None:  # noqa: N802 - onnxruntime's name
        _unsupported("LoraAdapter.Load")


class AdapterFormat:
    @staticmethod
    def read_adapter(file_path: str):
        _unsupported("AdapterFormat.read_adapter")

    def export_adapter(self, file_path: str) -> None:
        _unsupported("AdapterFormat.export_adapter")

    def set_adapter_version(self, version: int) -> None:
        self._adapter_version = int(version)

    def set_model_version(self, version: int) -> None:
        self._model_version = int(version)

    def set_parameters(self, params: dict) -> None:
        self._parameters = dict(params)


__all__ = ["AdapterFormat", "LoraAdapter"]
