"""edgessm: streaming state-space models for speech on the edge.

Importing the package is light (no torch): the training/export side lives in subpackages
that import torch themselves (``edgessm.ssm``), the inference side runs on onnxruntime + numpy.
"""

__version__ = "0.1.0"
