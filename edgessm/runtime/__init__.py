"""The torch-free inference side: stepwise ONNX graphs run with onnxruntime and numpy.

    from edgessm.runtime import StepModel
    model = StepModel("models/kws35/kws35.onnx")
    stream = model.create_stream()
    stream.accept_waveform(44100, samples)     # any length, any rate
    for out in stream.outputs(): ...            # one array per graph chunk

Nothing here imports torch (a test checks it).
"""

from .session import StepModel, Stream

__all__ = ["StepModel", "Stream"]
