"""nnplug-ray: batch inference with nnplug on Ray Data.

    import ray, nnplug_ray
    ds = ray.data.read_parquet("images.parquet")
    out = nnplug_ray.predict(ds, "resnet50.onnx", backends=["cpu"], concurrency=2)
    out.write_parquet("predictions/")

``Predictor`` is the callable class behind it, for ``Dataset.map_batches`` directly.
"""

from ._version import __version__
from .errors import nnplug_error
from .predict import predict
from .predictor import Predictor

__all__ = ["Predictor", "__version__", "nnplug_error", "predict"]
