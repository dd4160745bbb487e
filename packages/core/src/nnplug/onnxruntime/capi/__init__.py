"""``onnxruntime.capi``: the submodules onnxruntime code imports from."""
