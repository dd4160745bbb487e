"""Exception types. Every error nnplug raises derives from NnplugError."""


class NnplugError(Exception):
    """Base class of all nnplug errors."""


class ModelError(NnplugError):
    """The model file or graph is malformed or cannot be checked."""


class ValidationError(ModelError):
    """A node breaks its ONNX schema, ONNX shape inference or a rule of the core's validation
    (``nnplug.stages.validate``). ``node``, ``op_type`` and ``field`` (attribute, input or opset
    import) name what is wrong; the message says how to fix it."""

    def __init__(self, message: str, *, node: str | None = None, op_type: str | None = None,
                 field: str | None = None):
        super().__init__(message)
        self.node = node
        self.op_type = op_type
        self.field = field


class UnsupportedNodeError(NnplugError):
    """No backend (or custom op) in the preference list can run a node."""


class BackendNotAvailableError(UnsupportedNodeError):
    """A backend named in the preference list (``backends=``, ``providers=``) is not
    registered with the Runtime: not installed, disabled, or it failed to load. A subclass of
    UnsupportedNodeError, which it was raised as before, so existing handlers still catch it."""


class InputError(NnplugError, ValueError):
    """A feed given to Network.run has the wrong name, dtype or shape (or a requested output
    name is not one of the model's)."""


class PluginError(NnplugError):
    """A backend or operator plugin failed to load, register or run."""


class NativeLibraryMissingError(PluginError, FileNotFoundError):
    """A plugin package was installed without the native library it ships (built with no C
    compiler, or with NNPLUG_ALLOW_NO_NATIVE=1). ``path`` is the missing file; ``stage``,
    ``reason`` and ``fix`` are what a Runtime's load error shows (``fix``: how to rebuild)."""

    stage = "not found"

    def __init__(self, path: str, reason: str, fix: str):
        self.path, self.reason, self.fix = path, reason, fix
        super().__init__(f"{reason}; {fix}")

    def __str__(self) -> str:  # FileNotFoundError's would show an errno tuple
        return f"{self.reason}; {self.fix}"


class BackendError(PluginError):
    """A backend reported a failure; the message carries the backend's own text."""


class CustomOpError(PluginError):
    """A custom operator failed; the message names the op, the node and the callback."""


class TargetError(NnplugError, ValueError):
    """A Target description names an unknown kind or attribute, or has a wrong type."""


class RegistryError(NnplugError, KeyError):
    """A global function (or a Module's function) is missing or registered twice."""

    def __str__(self):  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ModelWarning(UserWarning):
    """The model breaks a rule of the strict ONNX checker that onnxruntime does not
    enforce (e.g. a graph output without a shape); nnplug loads it anyway."""


class PluginWarning(UserWarning):
    """A plugin will not do what it looks like it does, without failing: e.g. a native backend
    that supports a node but declines it because the output shapes are unknown at load time
    and it has no ``kernel_output_shapes`` (the node then runs on the next backend)."""


class InvalidArgumentError(NnplugError, ValueError):
    """An argument to an nnplug API has a wrong value (a device, a size, a buffer)."""


class ArgumentTypeError(NnplugError, TypeError):
    """An argument to an nnplug API (or what a plugin gave back) has the wrong type."""


class TensorExportError(NnplugError, BufferError):
    """A tensor cannot be exported or imported through DLPack (or the buffer protocol)."""


class RunTerminatedError(NnplugError):
    """A run stopped early because its ``RunOptions.terminate`` was set."""


class OptionError(NnplugError, AttributeError):
    """A SessionOptions / RunOptions attribute that does not exist (a typo, or an
    onnxruntime option nnplug has no equivalent for)."""


SPEC_URL = "https://onnx.ai/onnx/operators/"


def spec_link(op_type: str, domain: str = "") -> str:
    """Where ONNX specifies ``op_type`` of ``domain``, for error messages."""
    d = "onnx" if domain in ("", "ai.onnx") else domain.replace(".", "_")
    return f"{SPEC_URL}{d}__{op_type}.html"
